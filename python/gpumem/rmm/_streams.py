"""The layer's one rule on stream arguments, as RMM 26.06's: a stream argument is a stream
(DEFAULT_STREAM when left out), never None. gpumem itself reads None as the default stream
(or a buffer's own); RMM 25.10 did too, but 26.06 refuses it with TypeError, and the layer
follows the newest release (docs/rmm-compat.md). The layer's DeviceBuffer, its copy
functions and its resources' allocate/deallocate pass every stream through as_stream."""
from gpumem.stream import DEFAULT_STREAM

__all__ = ["DEFAULT_STREAM", "as_stream"]


def as_stream(stream):
    """The stream argument, checked: None raises TypeError (RMM 26.06's words begin it)."""
    if stream is None:
        raise TypeError("stream argument cannot be None. Please provide a valid Stream "
                        "instance (rmm.pylibrmm.stream.DEFAULT_STREAM for the default "
                        "stream; RMM 26.06 and this layer refuse None)")
    return stream
