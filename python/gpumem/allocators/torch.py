"""PyTorch allocates through gpumem with one line:

    import torch
    from gpumem.allocators.torch import gpumem_torch_allocator
    torch.cuda.memory.change_current_allocator(gpumem_torch_allocator)

(before PyTorch allocates anything). The allocation functions are C functions exported by
gpumem's extension module, which PyTorch loads as a CUDAPluggableAllocator; each uses the
current gpumem resource of the device PyTorch names, on PyTorch's stream. PyTorch hands a
free only the pointer, so it goes to the device's resource of that moment: set the
resource before PyTorch allocates, and do not replace it while tensors are alive.
"""
from torch.cuda.memory import CUDAPluggableAllocator

from .. import _lib

gpumem_torch_allocator = CUDAPluggableAllocator(_lib.__file__, "gpumem_torch_alloc",
                                                "gpumem_torch_free")

__all__ = ["gpumem_torch_allocator"]
