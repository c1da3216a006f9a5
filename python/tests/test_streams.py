"""Streams given to gpumem from Python: None, ints (CUstream values, including the legacy
(1) and per-thread (2) default streams), and the stream objects of CuPy (.ptr), PyTorch
(.cuda_stream) and Numba (.handle, an int or a ctypes value), stood in for here by small
fake classes; anything else is an InvalidArgumentError."""
import ctypes

import pytest

import gpumem
from gpumem import mr

LEGACY, PER_THREAD = 1, 2


class CupyLikeStream:
    def __init__(self, handle):
        self.ptr = handle


class TorchLikeStream:
    def __init__(self, handle):
        self.cuda_stream = handle


class NumbaLikeStream:
    def __init__(self, handle):
        self.handle = ctypes.c_void_p(handle)  # numba's ctypes binding: a c_void_p


class IntHandleStream:
    def __init__(self, handle):
        self.handle = handle


STREAM_KINDS = {
    "int": lambda handle: handle,
    "cupy": CupyLikeStream,
    "torch": TorchLikeStream,
    "numba": NumbaLikeStream,
    "int handle": IntHandleStream,
}


def test_none_is_the_default_stream(pool):
    ptr = pool.allocate(1000, stream=None)
    pool.deallocate(ptr, 1000, stream=0)  # the same stream, given as an int
    assert pool.live_count == 0
    assert int(gpumem.DeviceBuffer(size=8, stream=None).stream) == 0


@pytest.mark.parametrize("kind", sorted(STREAM_KINDS))
@pytest.mark.parametrize("handle", [0, LEGACY, PER_THREAD])
def test_allocate_and_free_on_each_kind_of_stream(pool, kind, handle):
    stream = STREAM_KINDS[kind](handle)
    ptr = pool.allocate(1000, stream=stream)
    assert pool.live_count == 1
    pool.deallocate(ptr, 1000, stream=stream)
    assert pool.live_count == 0


@pytest.mark.parametrize("kind", sorted(STREAM_KINDS))
def test_a_buffer_remembers_the_stream_it_was_given(kind):
    stream = STREAM_KINDS[kind](PER_THREAD)
    buf = gpumem.DeviceBuffer(size=64, stream=stream)
    assert int(buf.stream) == PER_THREAD
    assert buf.stream._owner is stream, "the buffer keeps the stream object alive"
    copy = gpumem.to_device(b"on a stream object", stream=stream)
    assert int(copy.stream) == PER_THREAD
    assert copy.tobytes() == b"on a stream object"


def test_buffer_operations_take_a_stream_of_their_own():
    buf = gpumem.to_device(b"0123456789")
    assert buf.tobytes(stream=CupyLikeStream(PER_THREAD)) == b"0123456789"
    assert bytes(buf.copy_to_host(stream=TorchLikeStream(LEGACY))) == b"0123456789"
    buf.copy_from_host(b"abc", stream=NumbaLikeStream(PER_THREAD))
    assert buf.copy(stream=PER_THREAD).tobytes() == b"abc3456789"
    assert int(buf.stream) == 0, "a stream given to a copy does not become the buffer's"
    buf.resize(20, stream=LEGACY)
    assert buf.tobytes()[:10] == b"abc3456789"
    assert int(buf.stream) == LEGACY, "as RMM's device_buffer, resize moves the buffer to its stream"


def test_synchronize_takes_the_same_streams():
    for stream in (None, 0, LEGACY, CupyLikeStream(PER_THREAD), NumbaLikeStream(0)):
        assert gpumem._lib.synchronize(stream) is None


def test_the_cuda_stream_attribute_is_read_first():
    class Both:
        cuda_stream = PER_THREAD
        ptr = LEGACY

    assert int(gpumem.DeviceBuffer(size=8, stream=Both()).stream) == PER_THREAD


def test_a_null_ctypes_handle_is_the_default_stream(pool):
    stream = NumbaLikeStream(None)  # c_void_p(None): numba's default stream
    ptr = pool.allocate(64, stream=stream)
    pool.deallocate(ptr, 64, stream=stream)
    assert int(gpumem.DeviceBuffer(size=8, stream=stream).stream) == 0


@pytest.mark.parametrize("not_a_stream", ["1", 1.5, object(), [1]])
def test_anything_else_is_an_invalid_argument(pool, not_a_stream):
    with pytest.raises(gpumem.InvalidArgumentError, match="a stream must be None, an int"):
        pool.allocate(64, stream=not_a_stream)
    with pytest.raises(gpumem.InvalidArgumentError, match="a stream must be None, an int"):
        gpumem.DeviceBuffer(size=8, stream=not_a_stream)
    assert pool.live_count == 0


@pytest.mark.sim
def test_a_handle_that_is_no_stream_is_refused_by_the_simulated_device(pool):
    with pytest.raises(gpumem.InvalidArgumentError, match="0x3039 is not a stream of the simulated device"):
        pool.allocate(64, stream=12345)
    with pytest.raises(gpumem.InvalidArgumentError, match="is not a stream"):
        gpumem.DeviceBuffer(size=8, stream=CupyLikeStream(12345))
    assert pool.live_count == 0


def test_blocks_freed_on_one_stream_serve_another_when_the_pool_cannot_grow():
    MiB = 1 << 20
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=4 * MiB,
                                 maximum_pool_size=4 * MiB)
    first = [pool.allocate(MiB, stream=LEGACY) for _ in range(4)]
    for ptr in first:
        pool.deallocate(ptr, MiB, stream=LEGACY)
    second = [pool.allocate(MiB, stream=PER_THREAD) for _ in range(4)]
    assert sorted(second) == sorted(first), "the same blocks, after waiting for the first stream"
    assert pool.reserved_bytes == 4 * MiB
    for ptr in second:
        pool.deallocate(ptr, MiB, stream=PER_THREAD)
    assert pool.live_count == 0
    if gpumem.backend() == "sim":
        assert gpumem._lib.sim_hazard_count() == 0


def test_memory_of_another_device_taken_on_default_streams_can_be_freed(second_device):
    pool_one = mr.PoolMemoryResource(mr.CudaMemoryResource(device=second_device),
                                     initial_pool_size="2MiB")
    try:
        first = pool_one.allocate(100)  # device 0 is current
        second = pool_one.allocate(100, stream=PER_THREAD)
    except gpumem.InvalidArgumentError:
        # Refusing such streams up front would be consistent too, but then nothing was freed.
        pytest.skip("the pool refuses another device's default streams: nothing to free")
    pool_one.deallocate(first, 100)
    pool_one.deallocate(second, 100, stream=PER_THREAD)
    assert pool_one.live_count == 0
