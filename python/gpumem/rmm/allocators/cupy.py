"""rmm.allocators.cupy: rmm_cupy_allocator, as RMM's: each CuPy allocation is one of the
layer's DeviceBuffers (rmm.DeviceBuffer), made on CuPy's current stream from the current
device's resource and owned by the cupy.cuda.UnownedMemory CuPy gets, so that code checking
`isinstance(array.data.mem._owner, rmm.DeviceBuffer)` holds. It costs a few Python calls per
allocation; gpumem's own gpumem.allocators.cupy.gpumem_cupy_allocator (written in C, owning
its memory with a small gpumem object) stays the fast path. Importing this module imports
no CuPy: the first call does."""
from ..pylibrmm.device_buffer import DeviceBuffer
from ..pylibrmm.stream import Stream


def rmm_cupy_allocator(nbytes):
    """A cupy.cuda.MemoryPointer to a new rmm.DeviceBuffer of nbytes bytes on CuPy's current
    stream and device (for cupy.cuda.set_allocator)."""
    try:
        import cupy
    except ImportError:
        raise ModuleNotFoundError("No module named 'cupy'") from None
    buffer = DeviceBuffer(size=nbytes, stream=Stream(cupy.cuda.get_current_stream()))
    memory = cupy.cuda.UnownedMemory(ptr=buffer.ptr, size=buffer.size, owner=buffer,
                                     device_id=cupy.cuda.device.get_device_id())
    return cupy.cuda.memory.MemoryPointer(memory, 0)


__all__ = ["rmm_cupy_allocator"]
