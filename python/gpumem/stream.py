"""CUDA streams as Python objects, as RMM's rmm.pylibrmm.stream and cuda_stream_pool.

    s = gpumem.Stream()                    # a new stream, destroyed with its last Stream
    s = gpumem.Stream(cupy_stream)         # a view of another library's stream, kept alive
    buf = gpumem.DeviceBuffer(size=100, stream=s)
    s.synchronize()

Stream(obj) takes another Stream, anything with the CUDA stream protocol (__cuda_stream__()
returning (0, handle): cuda.core, recent Numba), a CuPy, Numba or PyTorch stream, a
cuda.bindings CUstream/cudaStream_t, or (gpumem's own addition) a CUstream value as an int;
it keeps obj alive. Streams compare and hash by handle; int(s) is the handle.
DEFAULT_STREAM (0), LEGACY_DEFAULT_STREAM (1) and PER_THREAD_DEFAULT_STREAM (2) are CUDA's
default streams. Everywhere gpumem takes a stream it takes a Stream too.
"""
import enum
import itertools
import threading

from . import _lib

__all__ = [
    "CudaStreamFlags",
    "CudaStreamPool",
    "DEFAULT_STREAM",
    "LEGACY_DEFAULT_STREAM",
    "PER_THREAD_DEFAULT_STREAM",
    "Stream",
]

_LEGACY, _PER_THREAD = 1, 2  # cudaStreamLegacy, cudaStreamPerThread


class CudaStreamFlags(enum.IntEnum):
    """How a new stream orders itself against the legacy default stream."""
    SYNC_DEFAULT = 0  # waits for the legacy default stream, as cudaStreamDefault
    NON_BLOCKING = 1  # does not, as cudaStreamNonBlocking


class _OwnedStream:
    """A stream gpumem created, destroyed when the last Stream over it goes away."""

    def __init__(self, flags):
        # gpumem_stream_create makes non-blocking streams: for SYNC_DEFAULT as well (work
        # is ordered through gpumem's calls, which take their stream explicitly).
        self.flags = CudaStreamFlags(flags)
        self.handle = _lib.stream_create()

    def __del__(self):
        handle, self.handle = getattr(self, "handle", 0), 0
        if handle:
            try:
                _lib.stream_destroy(handle)
            except Exception:  # at interpreter exit, or after a reset: nothing to free
                pass


class Stream:
    """A CUDA stream: a new one (obj=None) or a view of obj's (see the module's text)."""

    __slots__ = ("_handle", "_owner", "__weakref__")

    def __init__(self, obj=None, flags=None):
        if obj is None:
            owner = _OwnedStream(CudaStreamFlags.SYNC_DEFAULT if flags is None else flags)
            self._handle, self._owner = owner.handle, owner
            return
        if flags is not None:
            raise ValueError("flags may only be specified when obj is None: an existing "
                             "stream keeps the flags it was created with")
        if isinstance(obj, Stream):
            self._handle, self._owner = obj._handle, obj._owner
            return
        protocol = getattr(obj, "__cuda_stream__", None)
        if protocol is not None:
            version, _handle = protocol() if callable(protocol) else protocol
            if version != 0:
                raise NotImplementedError(
                    f"gpumem reads version 0 of the CUDA stream protocol, not version: "
                    f"'{version}'")
            # the C conversion checks the handle (and reads a cuda.bindings one)
            self._handle, self._owner = _lib.stream_handle(obj), obj
            return
        try:
            self._handle = _lib.stream_handle(obj)
        except _lib.InvalidArgumentError as error:
            if isinstance(obj, int):
                raise
            raise TypeError(f"Cannot create stream from {type(obj)}: {error}") from None
        self._owner = obj

    @classmethod
    def _from_handle(cls, handle, owner=None):
        """A Stream over `handle`, keeping `owner` (what the handle belongs to) alive."""
        stream = cls.__new__(cls)
        stream._handle, stream._owner = int(handle), owner
        return stream

    def __cuda_stream__(self):
        """The CUDA stream protocol: (version 0, the handle)."""
        return (0, self._handle)

    @property
    def handle(self):
        """The CUstream/cudaStream_t value, an int."""
        return self._handle

    def __int__(self):
        return self._handle

    def synchronize(self):
        """Waits for all work on the stream."""
        _lib.synchronize(self._handle)

    def is_default(self):
        """Whether this is the legacy default stream (0 or cudaStreamLegacy)."""
        return self._handle in (0, _LEGACY)

    def is_per_thread_default(self):
        """Whether this is the per-thread default stream (cudaStreamPerThread)."""
        return self._handle == _PER_THREAD

    def __eq__(self, other):
        if isinstance(other, Stream):
            return self._handle == other._handle
        return NotImplemented

    def __hash__(self):
        return hash(self._handle)

    def __repr__(self):
        return f"<gpumem.Stream 0x{self._handle:x}>"

    def __reduce_ex__(self, protocol):
        # A handle means nothing in another process, and an unpickled owner would destroy
        # a stream it never created.
        raise TypeError("a gpumem.Stream cannot be pickled")

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


DEFAULT_STREAM = Stream._from_handle(0)
LEGACY_DEFAULT_STREAM = Stream._from_handle(_LEGACY)
PER_THREAD_DEFAULT_STREAM = Stream._from_handle(_PER_THREAD)


def _wrap(handle, given):
    """DeviceBuffer.stream: `given` when it is the Stream of `handle`, else a Stream over
    handle keeping `given` (what the caller passed: a CuPy stream, ...) alive."""
    if isinstance(given, Stream) and given._handle == handle:
        return given
    if handle == 0 and given is None:
        return DEFAULT_STREAM
    return Stream._from_handle(handle, given)


class CudaStreamPool:
    """pool_size new streams handed out in turn (get_stream()) or by index
    (get_stream(i), i modulo the size); they live as long as the pool or a Stream from it."""

    def __init__(self, pool_size=16, flags=CudaStreamFlags.SYNC_DEFAULT):
        pool_size = int(pool_size)
        if pool_size <= 0:
            raise ValueError(f"a stream pool needs at least one stream (pool_size={pool_size})")
        self._streams = [_OwnedStream(flags) for _ in range(pool_size)]
        self._next = itertools.count()
        self._lock = threading.Lock()

    def get_stream(self, stream_id=None):
        """The next stream in turn, or stream_id's (modulo the pool's size)."""
        if stream_id is None:
            with self._lock:
                stream_id = next(self._next)
        elif int(stream_id) < 0:
            raise ValueError(f"stream_id must not be negative ({stream_id})")
        owned = self._streams[int(stream_id) % len(self._streams)]
        return Stream._from_handle(owned.handle, owned)

    def get_pool_size(self):
        """The number of streams in the pool."""
        return len(self._streams)
