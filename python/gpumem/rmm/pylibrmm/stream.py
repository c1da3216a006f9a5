"""rmm.pylibrmm.stream: RMM's stream names. CudaStreamFlags is RMM's naming of the two
stream creation flags (the CUDA values). RMM's Stream class and its DEFAULT_STREAM,
LEGACY_DEFAULT_STREAM and PER_THREAD_DEFAULT_STREAM are mapped here when gpumem has a
Stream class; until then gpumem takes streams as None, ints or framework stream objects
(docs/rmm-compat.md)."""
import enum


class CudaStreamFlags(enum.IntEnum):
    """Flags of a new stream: SYNC_DEFAULT synchronizes with the legacy default stream,
    NON_BLOCKING does not (cudaStreamDefault and cudaStreamNonBlocking)."""

    SYNC_DEFAULT = 0
    NON_BLOCKING = 1


__all__ = ["CudaStreamFlags"]
