"""rmm.pylibrmm.memory_resource.experimental: where RMM keeps its experimental resources.
CudaAsyncManagedMemoryResource is gpumem.mr's class of that name (the device's default pool
of managed memory, CUDA 13) with RMM 26.06's stream arguments, as every class of
_memory_resource."""
from gpumem import mr as _mr

from ._memory_resource import _layer_class

CudaAsyncManagedMemoryResource = _layer_class(_mr.CudaAsyncManagedMemoryResource)
CudaAsyncManagedMemoryResource.__module__ = __name__  # where RMM defines it

__all__ = ["CudaAsyncManagedMemoryResource"]
