"""rmm.pylibrmm: where RMM keeps its compiled classes (DeviceBuffer, streams, resources);
here, gpumem's under RMM's names. CudaStreamPool is absent until gpumem has a stream pool
(docs/rmm-compat.md)."""
from . import cuda_stream_pool, logger, memory_resource, stream
from .device_buffer import DeviceBuffer
from .stream import CudaStreamFlags

__all__ = ["CudaStreamFlags", "DeviceBuffer", "memory_resource"]
