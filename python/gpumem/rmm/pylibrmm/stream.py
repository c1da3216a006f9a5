"""rmm.pylibrmm.stream: RMM's stream names, each gpumem.stream's object: Stream,
CudaStreamFlags and CUDA's three default streams."""
from gpumem.stream import (
    DEFAULT_STREAM,
    LEGACY_DEFAULT_STREAM,
    PER_THREAD_DEFAULT_STREAM,
    CudaStreamFlags,
    Stream,
)

__all__ = [
    "DEFAULT_STREAM",
    "LEGACY_DEFAULT_STREAM",
    "PER_THREAD_DEFAULT_STREAM",
    "CudaStreamFlags",
    "Stream",
]
