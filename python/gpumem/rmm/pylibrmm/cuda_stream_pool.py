"""rmm.pylibrmm.cuda_stream_pool: CudaStreamPool, gpumem.stream's."""
from gpumem.stream import CudaStreamPool

__all__ = ["CudaStreamPool"]
