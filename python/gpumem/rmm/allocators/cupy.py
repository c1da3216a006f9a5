"""rmm.allocators.cupy: rmm_cupy_allocator is gpumem's CuPy allocator (written in C; CuPy's
current stream and device)."""
from gpumem.allocators.cupy import gpumem_cupy_allocator as rmm_cupy_allocator

__all__ = ["rmm_cupy_allocator"]
