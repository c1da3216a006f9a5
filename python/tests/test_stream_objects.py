"""gpumem.Stream and gpumem.stream.CudaStreamPool: new streams made through the C library
and destroyed with their last Stream, views of other libraries' streams (the CUDA stream
protocol, CuPy/PyTorch/Numba attributes, cuda.bindings handles), CUDA's three default
streams, equality and hashing by handle, and these objects taken wherever gpumem takes a
stream. Other libraries' streams are stood in for by small fake classes."""
import copy
import gc
import pickle

import pytest

import gpumem
from gpumem import _lib, mr
from gpumem.stream import (
    DEFAULT_STREAM,
    LEGACY_DEFAULT_STREAM,
    PER_THREAD_DEFAULT_STREAM,
    CudaStreamFlags,
    CudaStreamPool,
    Stream,
)


class ProtocolStream:
    """cuda.core's Stream (and recent Numba's): the CUDA stream protocol."""

    def __init__(self, handle, version=0):
        self.pair = (version, handle)

    def __cuda_stream__(self):
        return self.pair


class BindingsHandle:
    """cuda.bindings' CUstream / cudaStream_t: int() is the handle, and it has getPtr."""

    def __init__(self, handle):
        self.handle_value = handle

    def __int__(self):
        return self.handle_value

    def getPtr(self):
        return id(self)


class CoreLikeStream(ProtocolStream):
    """cuda.core's Stream also has .handle, a cuda.bindings CUstream: the protocol wins."""

    def __init__(self, handle):
        super().__init__(handle)
        self.handle = BindingsHandle(handle + 1)


class CupyLikeStream:
    def __init__(self, handle):
        self.ptr = handle


def stream_is_alive(handle):
    """Whether the simulated device still knows the stream (it refuses destroyed ones):
    for tests marked sim."""
    try:
        _lib.synchronize(handle)
    except gpumem.InvalidArgumentError:
        return False
    return True


# ---- new streams ---------------------------------------------------------------------------

def test_a_new_stream_is_none_of_the_defaults_and_works():
    stream = Stream()
    assert stream.handle not in (0, 1, 2)
    assert int(stream) == stream.handle
    assert stream.__cuda_stream__() == (0, stream.handle)
    assert not stream.is_default()
    assert not stream.is_per_thread_default()
    buf = gpumem.DeviceBuffer.to_device(b"on a new stream", stream=stream)
    stream.synchronize()
    assert buf.tobytes() == b"on a new stream"


def test_new_streams_differ_and_hash_apart():
    first, second = Stream(), Stream()
    assert first != second
    assert hash(first) != hash(second)
    assert len({first, second, Stream(first)}) == 2


@pytest.mark.sim  # the simulated device refuses destroyed streams
def test_the_last_stream_object_destroys_the_stream():
    stream = Stream(flags=CudaStreamFlags.NON_BLOCKING)
    handle = stream.handle
    view = Stream(stream)
    del stream
    gc.collect()
    assert stream_is_alive(handle), "a view of the stream keeps it"
    del view
    gc.collect()
    assert not stream_is_alive(handle)


@pytest.mark.sim  # the simulated device refuses destroyed streams
def test_a_buffer_keeps_its_stream_alive():
    stream = Stream()
    handle = stream.handle
    buf = gpumem.DeviceBuffer(size=100, stream=stream)
    del stream
    gc.collect()
    assert stream_is_alive(handle)
    assert buf.stream.handle == handle
    del buf
    gc.collect()
    assert not stream_is_alive(handle)


def test_flags_go_with_new_streams_only():
    Stream(flags=CudaStreamFlags.SYNC_DEFAULT)
    with pytest.raises(ValueError, match="flags may only be specified when obj is None"):
        Stream(DEFAULT_STREAM, flags=CudaStreamFlags.NON_BLOCKING)
    with pytest.raises(ValueError):
        Stream(flags=7)


# ---- views of other streams ----------------------------------------------------------------

@pytest.mark.parametrize("make, handle", [
    (lambda: ProtocolStream(0x1234), 0x1234),
    (lambda: CoreLikeStream(0x1234), 0x1234),
    (lambda: BindingsHandle(0x5678), 0x5678),
    (lambda: CupyLikeStream(2), 2),
    (lambda: 1, 1),
])
def test_a_stream_over_another_librarys_stream(make, handle):
    other = make()
    stream = Stream(other)
    assert stream.handle == handle
    assert stream.__cuda_stream__() == (0, handle)
    assert _lib.stream_handle(other) == handle, "the C conversion reads it the same way"
    if not isinstance(other, int):
        assert stream._owner is other, "the stream keeps what it views alive"


def test_only_version_0_of_the_stream_protocol():
    with pytest.raises(NotImplementedError, match="version: '1'"):
        Stream(ProtocolStream(5, version=1))
    with pytest.raises(gpumem.InvalidArgumentError, match="protocol version 1 is not supported"):
        mr.CudaMemoryResource().allocate(8, stream=ProtocolStream(5, version=1))
    with pytest.raises(gpumem.InvalidArgumentError, match="must return \\(version, handle\\)"):
        _lib.stream_handle(BadProtocol())


class BadProtocol:
    def __cuda_stream__(self):
        return 5


def test_what_is_not_a_stream():
    with pytest.raises(TypeError, match="Cannot create stream from"):
        Stream(object())
    with pytest.raises(TypeError):
        Stream("0")
    with pytest.raises(gpumem.InvalidArgumentError, match="not a stream handle"):
        Stream(-1)
    with pytest.raises(gpumem.InvalidArgumentError, match="must be an integer"):
        Stream(ProtocolStream("0"))


# ---- the default streams, comparison -------------------------------------------------------

def test_cudas_default_streams():
    assert [s.handle for s in (DEFAULT_STREAM, LEGACY_DEFAULT_STREAM,
                               PER_THREAD_DEFAULT_STREAM)] == [0, 1, 2]
    assert DEFAULT_STREAM.is_default() and LEGACY_DEFAULT_STREAM.is_default()
    assert not PER_THREAD_DEFAULT_STREAM.is_default()
    assert PER_THREAD_DEFAULT_STREAM.is_per_thread_default()
    assert DEFAULT_STREAM != LEGACY_DEFAULT_STREAM, "compared by handle, as RMM's"
    assert Stream(CupyLikeStream(0)) == DEFAULT_STREAM
    for stream in (DEFAULT_STREAM, LEGACY_DEFAULT_STREAM, PER_THREAD_DEFAULT_STREAM):
        stream.synchronize()


def test_a_stream_equals_streams_only():
    assert DEFAULT_STREAM != 0
    assert not DEFAULT_STREAM == 0
    assert DEFAULT_STREAM != ProtocolStream(0)


# ---- streams taken everywhere --------------------------------------------------------------

STREAMS = {
    "Stream": Stream,
    "default Stream": lambda: PER_THREAD_DEFAULT_STREAM,
    "protocol": lambda: ProtocolStream(PER_THREAD_DEFAULT_STREAM.handle),
    "cuda.core": lambda: CoreLikeStream(LEGACY_DEFAULT_STREAM.handle),
    "cuda.bindings": lambda: BindingsHandle(2),
}


@pytest.mark.parametrize("kind", sorted(STREAMS))
def test_every_stream_argument_takes_stream_objects(pool, kind):
    stream = STREAMS[kind]()
    handle = _lib.stream_handle(stream)
    ptr = pool.allocate(1000, stream=stream)
    assert pool.live_count == 1
    pool.deallocate(ptr, 1000, stream=stream)
    assert pool.live_count == 0
    buf = gpumem.DeviceBuffer(size=10, stream=stream, mr=pool)
    assert buf.stream.handle == handle
    buf.copy_from_host(b"0123456789", stream=stream)
    assert buf.tobytes(stream=stream) == b"0123456789"
    assert bytes(buf.copy_to_host(stream=stream)) == b"0123456789"
    buf.resize(20, stream=stream)
    buf.reserve(64, stream=stream)
    assert buf.copy(stream=stream).tobytes()[:10] == b"0123456789"
    host = bytearray(4)
    gpumem.copy_ptr_to_host(buf.ptr, host, stream=stream)
    assert host == b"0123"
    _lib.synchronize(stream)


# ---- the stream pool -----------------------------------------------------------------------

def test_a_stream_pool_hands_out_its_streams_in_turn():
    pool = CudaStreamPool(pool_size=4, flags=CudaStreamFlags.NON_BLOCKING)
    assert pool.get_pool_size() == 4
    streams = [pool.get_stream() for _ in range(4)]
    assert len(set(streams)) == 4
    assert DEFAULT_STREAM not in streams
    assert pool.get_stream() == streams[0], "in turn, starting over"
    assert [pool.get_stream(i) for i in range(4)] == streams
    assert pool.get_stream(6) == streams[2], "an index past the size wraps"
    assert CudaStreamPool().get_pool_size() == 16


@pytest.mark.sim  # the simulated device refuses destroyed streams
def test_pool_streams_outlive_the_pool_while_used():
    pool = CudaStreamPool(pool_size=2)
    stream = pool.get_stream(1)
    other = pool.get_stream(0).handle
    del pool
    gc.collect()
    assert stream_is_alive(stream.handle)
    assert not stream_is_alive(other)
    stream.synchronize()


def test_a_stream_pool_refuses_bad_sizes_and_ids():
    with pytest.raises(ValueError, match="at least one stream"):
        CudaStreamPool(pool_size=0)
    with pytest.raises(ValueError, match="must not be negative"):
        CudaStreamPool(pool_size=2).get_stream(-1)


def test_streams_do_not_pickle_and_copy_as_themselves():
    stream = Stream()
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(stream)
    assert copy.copy(stream) is stream
    assert copy.deepcopy(stream) is stream
