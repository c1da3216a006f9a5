"""rmm.allocators.numba: RMMNumbaManager is gpumem's Numba memory manager; the module-level
_numba_memory_manager lets NUMBA_CUDA_MEMORY_MANAGER=rmm.allocators.numba select it."""
from gpumem.allocators.numba import GpumemNumbaManager as RMMNumbaManager

_numba_memory_manager = RMMNumbaManager

__all__ = ["RMMNumbaManager"]
