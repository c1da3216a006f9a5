"""rmm.pylibrmm.cuda_stream_pool: where RMM keeps CudaStreamPool. gpumem has no stream pool
yet; the class is mapped here when it does (docs/rmm-compat.md). The module is here so that
RMM's layout imports."""
__all__ = []
