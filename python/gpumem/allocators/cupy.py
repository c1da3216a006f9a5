"""CuPy allocates through gpumem with one line:

    import cupy
    from gpumem.allocators.cupy import gpumem_cupy_allocator
    cupy.cuda.set_allocator(gpumem_cupy_allocator)

The allocator is written in C: it takes CuPy's current stream and device, allocates from
that device's current gpumem resource, and frees the block on that stream when CuPy drops
it. No Python code runs on the way.
"""
from .._lib import cupy_allocator as gpumem_cupy_allocator

__all__ = ["gpumem_cupy_allocator"]
