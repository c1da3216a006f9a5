"""rmm.allocators.torch: rmm_torch_allocator is gpumem's PyTorch pluggable allocator."""
from gpumem.allocators.torch import gpumem_torch_allocator as rmm_torch_allocator

__all__ = ["rmm_torch_allocator"]
