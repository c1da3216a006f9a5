"""rmm.pylibrmm.device_buffer: DeviceBuffer, to_device and RMM's copies between addresses
(copy_ptr_to_host, copy_host_to_ptr, copy_device_to_ptr).

The layer's DeviceBuffer is gpumem.DeviceBuffer with RMM 26.06's stream arguments: each
defaults to DEFAULT_STREAM and refuses None with TypeError (gpumem's reads None as the
buffer's own stream; _streams.py says why the layer differs). Everything else is
gpumem's, called through super(); copies, to_device and unpickling make the layer's class.
Its .mr gives resources as the layer's classes, as rmm.mr's current-resource functions do."""
import gpumem as _gpumem

from .._streams import DEFAULT_STREAM, as_stream
from .memory_resource._memory_resource import _as_rmm


class DeviceBuffer(_gpumem.DeviceBuffer):
    """gpumem.DeviceBuffer with RMM 26.06's stream arguments (see the module's text)."""

    __slots__ = ()

    def __init__(self, *, ptr=0, size=0, stream=DEFAULT_STREAM, mr=None):
        super().__init__(size=size, ptr=ptr, stream=as_stream(stream), mr=mr)

    @classmethod
    def to_device(cls, b, stream=DEFAULT_STREAM, mr=None):
        """A new buffer of this class holding a copy of host bytes b."""
        return super().to_device(b, as_stream(stream), mr)

    @property
    def mr(self):
        """The resource the buffer came from, as the layer hands resources out."""
        return _as_rmm(super().mr)

    def copy_to_host(self, ary=None, stream=DEFAULT_STREAM):
        return super().copy_to_host(ary, as_stream(stream))

    def copy_from_host(self, ary, stream=DEFAULT_STREAM):
        return super().copy_from_host(ary, as_stream(stream))

    def copy_from_device(self, cuda_ary, stream=DEFAULT_STREAM):
        return super().copy_from_device(cuda_ary, as_stream(stream))

    def tobytes(self, stream=DEFAULT_STREAM):
        return super().tobytes(as_stream(stream))

    def reserve(self, new_capacity, stream=DEFAULT_STREAM):
        return super().reserve(new_capacity, as_stream(stream))

    def resize(self, new_size, stream=DEFAULT_STREAM):
        return super().resize(new_size, as_stream(stream))


def to_device(b, stream=DEFAULT_STREAM):
    """A new DeviceBuffer (the layer's) holding a copy of host bytes b."""
    return DeviceBuffer.to_device(b, stream)


def copy_ptr_to_host(db, hb, stream=DEFAULT_STREAM):
    """gpumem.copy_ptr_to_host, refusing stream=None."""
    _gpumem.copy_ptr_to_host(db, hb, as_stream(stream))


def copy_host_to_ptr(hb, db, stream=DEFAULT_STREAM):
    """gpumem.copy_host_to_ptr, refusing stream=None."""
    _gpumem.copy_host_to_ptr(hb, db, as_stream(stream))


def copy_device_to_ptr(d_src, d_dst, count, stream=DEFAULT_STREAM):
    """gpumem.copy_device_to_ptr, refusing stream=None."""
    _gpumem.copy_device_to_ptr(d_src, d_dst, count, as_stream(stream))


__all__ = ["DeviceBuffer", "copy_device_to_ptr", "copy_host_to_ptr", "copy_ptr_to_host",
           "to_device"]
