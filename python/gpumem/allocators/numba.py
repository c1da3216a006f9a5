"""Numba allocates device memory through gpumem with one line, either

    NUMBA_CUDA_MEMORY_MANAGER=gpumem.allocators.numba python script.py

or, before Numba allocates anything,

    from numba import cuda
    from gpumem.allocators.numba import GpumemNumbaManager
    cuda.set_memory_manager(GpumemNumbaManager)

This is Numba's External Memory Management plugin: Numba calls memalloc, which allocates
from the current gpumem resource in C and returns Numba's MemoryPointer, whose finalizer
frees the block. IPC handles work for memory from resources over cudaMalloc memory (a pool
over CudaMemoryResource, for example); memory mapped through virtual memory management has
no legacy IPC handle.
"""
import ctypes

from numba import cuda
from numba.cuda import GetIpcHandleMixin, HostOnlyCUDAMemoryManager, MemoryInfo, MemoryPointer

from .. import _lib


def _device_pointer_type():
    """The pointer type Numba's driver layer expects: the NVIDIA bindings' CUdeviceptr when
    Numba uses them (the default of recent Numba), else a ctypes integer."""
    from numba.cuda.cudadrv import driver

    uses_nvidia_binding = getattr(driver, "USE_NV_BINDING", None)
    if uses_nvidia_binding is None:  # newer Numba: the NVIDIA bindings are the only ones
        uses_nvidia_binding = hasattr(driver, "binding")
    return driver.binding.CUdeviceptr if uses_nvidia_binding else ctypes.c_uint64


_DevicePointer = _device_pointer_type()


class GpumemNumbaManager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
    """Numba EMM plugin: device memory from gpumem, host memory as Numba manages it. IPC
    handles come from Numba's own mixin, which finds the driver allocation a block lies in
    and its offset there."""

    def initialize(self):
        _lib.init()

    def memalloc(self, size):
        owner = _lib.allocation(size, None)
        # The finalizer holds the owner: the block is freed when Numba drops the pointer.
        return MemoryPointer(self.context, _DevicePointer(owner.ptr), size,
                             finalizer=_releaser(owner))

    def get_memory_info(self):
        free, total = _lib.memory_info(None)
        return MemoryInfo(free=free, total=total)

    @property
    def interface_version(self):
        return 1


def _releaser(owner):
    def release():
        nonlocal owner
        owner = None  # dropping the last reference frees the block

    return release


# NUMBA_CUDA_MEMORY_MANAGER=gpumem.allocators.numba finds the plugin under this name.
_numba_memory_manager = GpumemNumbaManager

__all__ = ["GpumemNumbaManager"]
