"""gpumem.DeviceBuffer, RMM's DeviceBuffer: construction (size, ptr, stream, mr), sizes and
capacity, resize and reserve keeping contents, copies between host and device, the CUDA
array interface, prefetch of managed memory, and pickling through host bytes."""
import copy
import gc
import pickle
import weakref

import numpy as np
import pytest

import gpumem
from gpumem import mr


def host_bytes(count, start=0):
    """`count` distinct-looking bytes, as a numpy uint8 array."""
    return (np.arange(start, start + count) % 251).astype(np.uint8)


class FakeDeviceArray:
    """Any object describing device memory through __cuda_array_interface__."""

    def __init__(self, ptr, shape, typestr, strides=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape,
                                         "typestr": typestr, "strides": strides, "version": 3}


# ---- construction and sizes ----------------------------------------------------------------

def test_size_ptr_nbytes_and_capacity_of_a_new_buffer():
    buf = gpumem.DeviceBuffer(size=100)
    assert buf.size == 100
    assert buf.nbytes == 100
    assert len(buf) == 100
    assert buf.capacity() == 100
    assert buf.ptr != 0
    assert buf.ptr % 256 == 0, "allocations are aligned to 256 bytes"


def test_an_empty_buffer_has_no_memory():
    buf = gpumem.DeviceBuffer()
    assert (buf.size, buf.ptr, buf.capacity()) == (0, 0, 0)
    assert buf.tobytes() == b""


def test_buffer_memory_comes_from_the_current_resource(pool):
    mr.set_current_device_resource(pool)
    buf = gpumem.DeviceBuffer(size=1000)
    assert pool.live_count == 1
    assert pool.live_bytes >= 1000
    del buf
    assert pool.live_count == 0


def test_buffer_from_a_given_resource_keeps_it_alive():
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="4MiB")
    pool_alive = weakref.ref(pool)
    buf = gpumem.DeviceBuffer(size=64, mr=pool)
    assert pool.live_count == 1
    assert mr.get_current_device_resource().live_count == 0, "not from the current resource"
    del pool
    gc.collect()
    assert pool_alive() is not None, "the buffer holds its resource"
    buf.copy_from_host(host_bytes(64))
    assert buf.tobytes() == host_bytes(64).tobytes()
    del buf
    gc.collect()
    assert pool_alive() is None


def test_resource_argument_must_be_a_resource():
    with pytest.raises(TypeError, match="expected a gpumem memory resource"):
        gpumem.DeviceBuffer(size=10, mr="pool")


def test_ptr_argument_copies_from_device_memory():
    source = gpumem.to_device(b"device bytes")
    buf = gpumem.DeviceBuffer(size=6, ptr=source.ptr)
    assert buf.ptr != source.ptr
    assert buf.tobytes() == b"device"


def test_ptr_argument_copies_from_host_memory():
    host = host_bytes(32)
    buf = gpumem.DeviceBuffer(size=32, ptr=host.ctypes.data)
    assert buf.tobytes() == host.tobytes()


def test_stream_argument_is_the_buffers_stream():
    assert gpumem.DeviceBuffer(size=8).stream == gpumem.stream.DEFAULT_STREAM
    assert int(gpumem.DeviceBuffer(size=8, stream=2).stream) == 2  # cudaStreamPerThread


def test_uninitialized_buffer_raises_instead_of_crashing():
    buf = gpumem.DeviceBuffer.__new__(gpumem.DeviceBuffer)
    with pytest.raises(gpumem.InvalidArgumentError, match="never initialized"):
        buf.size
    with pytest.raises(gpumem.InvalidArgumentError, match="never initialized"):
        buf.tobytes()


def test_initializing_twice_is_refused():
    buf = gpumem.DeviceBuffer(size=8)
    with pytest.raises(gpumem.InvalidArgumentError, match="already initialized"):
        buf.__init__(size=16)
    assert buf.size == 8


# ---- resize and reserve --------------------------------------------------------------------

def test_resize_past_the_capacity_keeps_the_contents():
    data = host_bytes(100)
    buf = gpumem.to_device(data)
    buf.resize(5000)
    assert buf.size == 5000
    assert buf.capacity() >= 5000
    assert buf.tobytes()[:100] == data.tobytes()


def test_shrinking_keeps_the_prefix_and_the_capacity():
    data = host_bytes(100)
    buf = gpumem.to_device(data)
    ptr = buf.ptr
    buf.resize(10)
    assert buf.size == 10
    assert buf.capacity() == 100
    assert buf.ptr == ptr, "shrinking does not reallocate"
    assert buf.tobytes() == data[:10].tobytes()
    buf.resize(100)  # back within the capacity: no reallocation either
    assert buf.ptr == ptr


def test_reserve_grows_the_capacity_not_the_size():
    data = host_bytes(50)
    buf = gpumem.to_device(data)
    buf.reserve(4096)
    assert buf.size == 50
    assert buf.capacity() == 4096
    assert buf.tobytes() == data.tobytes()
    ptr = buf.ptr
    buf.resize(4000)
    assert buf.ptr == ptr, "growing within the reserved capacity does not reallocate"
    buf.reserve(10)
    assert buf.capacity() == 4096, "reserving less than the capacity does nothing"


def test_resize_and_reserve_take_rmms_keywords():
    buf = gpumem.DeviceBuffer(size=8)
    buf.resize(new_size=64, stream=0)
    assert buf.size == 64


def test_reserve_takes_new_capacity_as_a_keyword():
    buf = gpumem.DeviceBuffer(size=8)
    buf.reserve(new_capacity=4096)
    assert buf.capacity() == 4096


def test_negative_sizes_are_invalid_arguments():
    buf = gpumem.DeviceBuffer(size=8)
    with pytest.raises(gpumem.InvalidArgumentError, match="must not be negative"):
        buf.resize(-1)
    with pytest.raises(gpumem.InvalidArgumentError, match="must not be negative"):
        buf.reserve(-1)
    assert buf.size == 8


# ---- copies --------------------------------------------------------------------------------

def test_copy_is_a_new_buffer_with_the_same_contents():
    data = host_bytes(300)
    buf = gpumem.to_device(data)
    duplicate = buf.copy()
    assert duplicate.ptr != buf.ptr
    assert duplicate.size == 300
    assert duplicate.tobytes() == data.tobytes()
    buf.copy_from_host(np.zeros(300, np.uint8))
    assert duplicate.tobytes() == data.tobytes(), "the copy does not share memory"


def test_copy_of_a_buffer_from_a_given_resource_uses_that_resource(pool):
    buf = gpumem.DeviceBuffer(size=100, mr=pool)
    duplicate = buf.copy()
    assert pool.live_count == 2
    del buf, duplicate
    assert pool.live_count == 0


def test_copy_to_host_returns_a_new_numpy_array():
    data = host_bytes(77)
    host = gpumem.to_device(data).copy_to_host()
    assert isinstance(host, np.ndarray)
    assert host.dtype == np.uint8
    np.testing.assert_array_equal(host, data)


def test_copy_to_host_fills_the_array_given():
    data = host_bytes(40)
    target = np.zeros(64, dtype=np.uint8)
    returned = gpumem.to_device(data).copy_to_host(target)
    assert returned is target
    np.testing.assert_array_equal(target[:40], data)
    assert not target[40:].any(), "bytes past the buffer's size are untouched"


def test_copy_to_host_into_a_bytearray_and_a_typed_array():
    values = np.array([1.5, -2.0, 3.25], dtype=np.float64)
    buf = gpumem.to_device(values.view(np.uint8))
    into_bytes = bytearray(24)
    buf.copy_to_host(into_bytes)
    assert bytes(into_bytes) == values.tobytes()
    into_floats = np.empty(3, dtype=np.float64)
    buf.copy_to_host(into_floats)
    np.testing.assert_array_equal(into_floats, values)


def test_copy_to_host_refuses_a_small_array():
    buf = gpumem.DeviceBuffer(size=16)
    with pytest.raises(gpumem.InvalidArgumentError, match="host array holds 8 bytes, the buffer 16"):
        buf.copy_to_host(np.zeros(8, np.uint8))


def test_copy_from_host_writes_the_start_of_the_buffer():
    buf = gpumem.to_device(np.full(32, 7, np.uint8))
    buf.copy_from_host(np.arange(4, dtype=np.int32).view(np.uint8))  # 16 bytes
    host = buf.copy_to_host()
    np.testing.assert_array_equal(host[:16].view(np.int32), [0, 1, 2, 3])
    assert (host[16:] == 7).all()


def test_copy_from_host_refuses_a_source_larger_than_the_buffer():
    buf = gpumem.to_device(b"12345678")
    with pytest.raises(gpumem.InvalidArgumentError, match="source holds 9 bytes, more than the buffer's 8"):
        buf.copy_from_host(b"123456789")
    assert buf.tobytes() == b"12345678", "a refused copy writes nothing"


def test_copy_from_device_reads_another_device_buffer():
    source = gpumem.to_device(host_bytes(128, start=3))
    target = gpumem.DeviceBuffer(size=128)
    target.copy_from_device(source)
    assert target.tobytes() == source.tobytes()


def test_copy_from_device_reads_any_cuda_array_interface_object():
    values = np.array([2.5, 4.5, 8.5], dtype=np.float64)
    holder = gpumem.to_device(values.view(np.uint8))
    typed_view = FakeDeviceArray(holder.ptr, (3,), "<f8")
    target = gpumem.DeviceBuffer(size=24)
    target.copy_from_device(typed_view)
    np.testing.assert_array_equal(np.frombuffer(target.tobytes()), values)
    # C-contiguous strides given explicitly are fine too.
    target.copy_from_device(FakeDeviceArray(holder.ptr, (3, 1), "<f8", strides=(8, 8)))
    np.testing.assert_array_equal(np.frombuffer(target.tobytes()), values)


def test_copy_from_device_refuses_strided_arrays():
    holder = gpumem.DeviceBuffer(size=64)
    every_other = FakeDeviceArray(holder.ptr, (4,), "<f8", strides=(16,))
    with pytest.raises(ValueError, match="contiguous"):
        gpumem.DeviceBuffer(size=64).copy_from_device(every_other)


def test_copy_from_device_refuses_a_source_larger_than_the_buffer():
    source = gpumem.DeviceBuffer(size=32)
    with pytest.raises(gpumem.InvalidArgumentError, match="source holds 32 bytes"):
        gpumem.DeviceBuffer(size=16).copy_from_device(source)


def test_copy_from_device_needs_a_device_array():
    with pytest.raises(ValueError, match="__cuda_array_interface__"):
        gpumem.DeviceBuffer(size=16).copy_from_device(b"host bytes")


# ---- to_device and tobytes -----------------------------------------------------------------

def test_to_device_as_in_rmms_user_guide():
    a = np.array([1, 2, 3], dtype="float64")
    buf = gpumem.DeviceBuffer.to_device(a.view("int8"))
    assert buf.size == 24
    np.testing.assert_array_equal(np.frombuffer(buf.tobytes()), [1.0, 2.0, 3.0])
    buf = gpumem.to_device(a.tobytes())
    assert buf.size == 24
    np.testing.assert_array_equal(np.frombuffer(buf.tobytes()), [1.0, 2.0, 3.0])


def test_to_device_accepts_any_contiguous_bytes_like_object():
    for data in (b"abc", bytearray(b"abc"), memoryview(b"abc"), np.frombuffer(b"abc", np.uint8)):
        assert gpumem.to_device(data).tobytes() == b"abc"
    assert gpumem.to_device(b"").size == 0


def test_to_device_refuses_what_is_not_contiguous_bytes():
    with pytest.raises(TypeError):
        gpumem.to_device("text is not bytes")
    with pytest.raises(ValueError):
        gpumem.to_device(np.arange(10)[::2])


def test_to_device_with_a_resource_and_a_stream(pool):
    buf = gpumem.DeviceBuffer.to_device(b"pooled", stream=0, mr=pool)
    assert pool.live_count == 1
    assert buf.tobytes() == b"pooled"
    buf = gpumem.to_device(b"per-thread stream", stream=2)
    assert int(buf.stream) == 2
    assert buf.tobytes() == b"per-thread stream"


# ---- prefetch ------------------------------------------------------------------------------

def test_prefetch_moves_managed_memory_and_keeps_it():
    managed = mr.ManagedMemoryResource()
    buf = gpumem.DeviceBuffer.to_device(host_bytes(4096), mr=managed)
    assert buf.prefetch() is None
    assert buf.prefetch(device=0, stream=0) is None
    assert buf.tobytes() == host_bytes(4096).tobytes()


def test_prefetch_is_a_no_op_on_memory_that_is_not_managed():
    for resource in (mr.CudaMemoryResource(), mr.PinnedHostMemoryResource()):
        buf = gpumem.DeviceBuffer.to_device(b"stays put", mr=resource)
        assert buf.prefetch() is None
        assert buf.tobytes() == b"stays put"


# ---- the CUDA array interface --------------------------------------------------------------

def test_cuda_array_interface_as_rmms():
    buf = gpumem.DeviceBuffer(size=48, stream=2)
    cai = buf.__cuda_array_interface__
    assert cai == {"data": (buf.ptr, False), "shape": (48,), "strides": None,
                   "typestr": "|u1", "version": 0}, "version 0 and no stream, as RMM's"


def test_cuda_array_interface_follows_resize():
    buf = gpumem.DeviceBuffer(size=8)
    buf.resize(4096)
    cai = buf.__cuda_array_interface__
    assert cai["shape"] == (4096,)
    assert cai["data"][0] == buf.ptr


# ---- pickling ------------------------------------------------------------------------------

def test_pickling_goes_through_host_bytes(pool):
    original = gpumem.to_device(host_bytes(1000))
    payload = pickle.dumps(original)
    assert host_bytes(1000).tobytes() in payload, "the pickle holds the contents"
    mr.set_current_device_resource(pool)
    restored = pickle.loads(payload)
    assert isinstance(restored, gpumem.DeviceBuffer)
    assert restored.ptr != original.ptr
    assert restored.tobytes() == original.tobytes()
    assert pool.live_count == 1, "unpickling allocates from the current resource"


def test_pickling_an_empty_buffer_and_with_protocol_5():
    assert pickle.loads(pickle.dumps(gpumem.DeviceBuffer())).size == 0
    buf = gpumem.to_device(b"protocol five")
    assert pickle.loads(pickle.dumps(buf, protocol=5)).tobytes() == b"protocol five"


def test_copy_module_makes_independent_buffers():
    buf = gpumem.to_device(b"copied")
    for duplicate in (copy.copy(buf), copy.deepcopy(buf)):
        assert duplicate.ptr != buf.ptr
        assert duplicate.tobytes() == b"copied"
