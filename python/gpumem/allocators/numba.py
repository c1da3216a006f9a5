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
from numba.cuda import HostOnlyCUDAMemoryManager, IpcHandle, MemoryPointer

from .. import _lib


class GpumemNumbaManager(HostOnlyCUDAMemoryManager):
    """Numba EMM plugin: device memory from gpumem, host memory as Numba manages it."""

    def initialize(self):
        _lib.init()

    def memalloc(self, size):
        owner = _lib.allocation(size, None)
        ptr = ctypes.c_uint64(owner.ptr)
        # The finalizer holds the owner: the block is freed when Numba drops the pointer.
        return MemoryPointer(self.context, ptr, size, finalizer=_releaser(owner))

    def get_memory_info(self):
        return _lib.memory_info(None)

    def get_ipc_handle(self, memory):
        """An IPC handle for the block: the handle of the driver allocation it lies in, and
        its offset there."""
        from numba.cuda.cudadrv import driver, drvapi

        start, _size = driver.device_extents(memory)
        if driver.USE_NV_BINDING:
            base = int(start)
            handle = driver.binding.cuIpcGetMemHandle(start)
        else:
            base = start
            handle = drvapi.cu_ipc_mem_handle()
            driver.driver.cuIpcGetMemHandle(ctypes.byref(handle), start)
        offset = memory.handle.value - base
        return IpcHandle(memory, handle, memory.size, offset=offset)

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
