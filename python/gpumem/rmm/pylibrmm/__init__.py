"""rmm.pylibrmm: where RMM keeps its compiled classes (DeviceBuffer, streams, resources);
here, gpumem's under RMM's names (the DeviceBuffer the layer's, refusing stream=None)."""
from . import cuda_stream_pool, logger, memory_resource, stream
from .cuda_stream_pool import CudaStreamPool
from .device_buffer import DeviceBuffer
from .stream import CudaStreamFlags

__all__ = ["CudaStreamFlags", "CudaStreamPool", "DeviceBuffer", "memory_resource"]
