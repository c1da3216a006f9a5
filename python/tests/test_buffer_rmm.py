"""DeviceBuffer as RMM 26.06's: .stream a gpumem.Stream and .mr the resource, __sizeof__
and bytes(), copy.copy/deepcopy, pickling (out of band with protocol 5), host copies only
from 1-D byte arrays (TypeError without a buffer, ValueError for other shapes), ptr=0,
RMM's module copy functions, and subclasses kept by to_device, copy and pickling."""
import copy
import pickle

import numpy as np
import pytest

import gpumem
from gpumem import mr
from gpumem.stream import DEFAULT_STREAM, Stream


class CupyLikeStream:
    def __init__(self, handle):
        self.ptr = handle


# ---- .stream and .mr -----------------------------------------------------------------------

def test_stream_is_the_stream_object_given():
    stream = Stream()
    buf = gpumem.DeviceBuffer(size=8, stream=stream)
    assert buf.stream is stream
    assert gpumem.DeviceBuffer(size=8).stream is DEFAULT_STREAM
    other = CupyLikeStream(2)
    buf = gpumem.to_device(b"abc", stream=other)
    assert isinstance(buf.stream, Stream)
    assert int(buf.stream) == 2 and buf.stream._owner is other
    assert buf.stream is buf.stream, "made once"


def test_stream_follows_a_reallocation_onto_another_stream():
    first, second = Stream(), Stream()
    buf = gpumem.DeviceBuffer(size=8, stream=first)
    ptr = buf.ptr
    buf.resize(4, stream=second)
    assert buf.ptr == ptr and buf.stream is second, "resizing moves the buffer to its stream"
    buf.resize(4096, stream=first)
    assert buf.stream is first
    buf.reserve(8192)
    assert buf.stream is first, "no stream given: the buffer's own"


def test_a_copy_is_on_the_stream_it_was_made_on():
    first, second = Stream(), Stream()
    buf = gpumem.to_device(b"copied", stream=first)
    assert buf.copy().stream is first
    assert buf.copy(stream=second).stream is second
    assert buf.copy(second).stream is second


def test_mr_is_the_resource_given_or_the_current_one(pool):
    assert gpumem.DeviceBuffer(size=8, mr=pool).mr is pool
    mr.set_current_device_resource(pool)
    buf = gpumem.DeviceBuffer(size=8)
    assert buf.mr is pool
    assert buf.copy().mr is pool
    mr.set_current_device_resource(mr.CudaMemoryResource())
    assert buf.mr is pool, "the resource it came from, not today's current one"


def test_mr_of_a_buffer_from_an_unset_current_resource():
    buf = gpumem.DeviceBuffer(size=8)
    assert isinstance(buf.mr, mr.MemoryResource)
    assert buf.mr.handle == mr.get_current_device_resource().handle


# ---- sizes, bytes, copies ------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, 1000])
def test_sizeof_is_the_size_and_bytes_the_contents(size):
    data = bytes(range(256)) * 4
    buf = gpumem.to_device(data[:size])
    assert buf.__sizeof__() == size
    assert bytes(buf) == data[:size]


@pytest.mark.parametrize("make_copy", [copy.copy, copy.deepcopy, lambda b: b.copy()])
def test_copies_are_new_memory_with_the_same_bytes(pool, make_copy):
    buf = gpumem.to_device(b"original", mr=pool)
    duplicate = make_copy(buf)
    assert duplicate is not buf and duplicate.ptr != buf.ptr
    assert duplicate.tobytes() == b"original"
    assert duplicate.mr is pool
    buf.copy_from_host(b"changed!")
    assert duplicate.tobytes() == b"original"


def test_ptr_zero_copies_nothing():
    buf = gpumem.DeviceBuffer(ptr=0, size=16)
    assert buf.size == 16


# ---- pickling ------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"", b"x", bytes(range(256))])
def test_protocol_5_pickles_out_of_band(data):
    buffers = []
    payload = pickle.dumps(gpumem.to_device(data), protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and isinstance(buffers[0], pickle.PickleBuffer)
    assert bytes(buffers[0]) == data
    if data:
        assert data not in payload, "the contents travel beside the pickle"
    assert pickle.loads(payload, buffers=buffers).tobytes() == data


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_other_protocols_pickle_in_band(protocol):
    data = bytes(range(100, 200))
    payload = pickle.dumps(gpumem.to_device(data), protocol=protocol)
    if protocol > 2:  # protocol 2 writes bytes through a latin-1 string
        assert data in payload
    restored = pickle.loads(payload)
    assert isinstance(restored, gpumem.DeviceBuffer)
    assert restored.tobytes() == data


# ---- what host memory a copy takes ---------------------------------------------------------

BYTE_ARRAYS = [b"abc", bytearray(b"abc"), memoryview(b"abc"), np.frombuffer(b"abc", "u1"),
               np.frombuffer(b"abc", "i1"), np.ones(4, "u1")[::4]]
NOT_BUFFERS = [None, "abc", 123, object()]
OTHER_SHAPES = [np.ones(2, "u2"), np.ones((2, 2), "u1"), np.ones(4, "u1")[::2],
                memoryview(b"abcd").cast("B", (2, 2)), np.float64(1.0)]


@pytest.mark.parametrize("host", BYTE_ARRAYS)
def test_host_copies_take_1d_byte_arrays(host):
    expected = bytes(memoryview(host))
    assert gpumem.to_device(host).tobytes() == expected
    buf = gpumem.DeviceBuffer(size=8)
    buf.copy_from_host(host)
    assert buf.tobytes()[:len(expected)] == expected


@pytest.mark.parametrize("host", NOT_BUFFERS)
def test_host_copies_refuse_what_has_no_buffer(host):
    with pytest.raises(TypeError):
        gpumem.to_device(host)
    with pytest.raises(TypeError):
        gpumem.DeviceBuffer(size=8).copy_from_host(host)
    with pytest.raises(TypeError):
        gpumem.copy_host_to_ptr(host, gpumem.DeviceBuffer(size=8).ptr)


@pytest.mark.parametrize("host", OTHER_SHAPES)
def test_host_copies_refuse_other_shapes(host):
    buf = gpumem.to_device(b"12345678")
    with pytest.raises(ValueError, match="contiguous 1-D array of bytes"):
        gpumem.to_device(host)
    with pytest.raises(ValueError, match="contiguous 1-D array of bytes"):
        buf.copy_from_host(host)
    with pytest.raises(ValueError, match="contiguous 1-D array of bytes"):
        gpumem.copy_host_to_ptr(host, buf.ptr)
    assert buf.tobytes() == b"12345678", "a refused copy writes nothing"


def test_copy_from_device_wants_the_cuda_array_interface():
    with pytest.raises(ValueError, match="__cuda_array_interface__"):
        gpumem.DeviceBuffer(size=8).copy_from_device(np.zeros(8, "u1"))


# ---- the module copy functions -------------------------------------------------------------

def test_copies_between_addresses():
    source = gpumem.to_device(b"device bytes")
    target = gpumem.DeviceBuffer(size=12)
    gpumem.copy_device_to_ptr(source.ptr, target.ptr, 6, stream=Stream())
    gpumem.copy_host_to_ptr(b"BYTES!", target.ptr + 6, stream=DEFAULT_STREAM)
    host = bytearray(12)
    gpumem.copy_ptr_to_host(target.ptr, host)
    assert host == b"deviceBYTES!"
    into = np.zeros(4, "u1")
    gpumem.copy_ptr_to_host(db=source.ptr, hb=into, stream=None)
    assert into.tobytes() == b"devi"


def test_copies_between_addresses_refuse_bad_arguments():
    buf = gpumem.DeviceBuffer(size=8)
    with pytest.raises(ValueError, match="must be writable"):
        gpumem.copy_ptr_to_host(buf.ptr, b"read-only bytes")
    with pytest.raises(ValueError):
        gpumem.copy_ptr_to_host(buf.ptr, np.zeros(2, "u4"))
    with pytest.raises(gpumem.InvalidArgumentError, match="count must not be negative"):
        gpumem.copy_device_to_ptr(buf.ptr, buf.ptr, -1)
    with pytest.raises(TypeError):
        gpumem.copy_device_to_ptr("not an address", buf.ptr, 1)


# ---- subclasses ----------------------------------------------------------------------------

class Subclass(gpumem.DeviceBuffer):
    pass


def test_to_device_copies_and_pickles_keep_a_subclass():
    buf = Subclass.to_device(b"sub")
    assert type(buf) is Subclass
    assert type(gpumem.DeviceBuffer.to_device(b"base")) is gpumem.DeviceBuffer
    assert type(gpumem.to_device(b"base")) is gpumem.DeviceBuffer
    assert type(buf.copy()) is Subclass and type(copy.copy(buf)) is Subclass
    for protocol in (2, 5):
        restored = pickle.loads(pickle.dumps(buf, protocol=protocol))
        assert type(restored) is Subclass
        assert restored.tobytes() == b"sub"
