"""Errors: which exception each failure raises (OutOfMemoryError is a MemoryError,
InvalidArgumentError a ValueError, misuse a GpumemError), that each carries the library's
message, and that a failed call leaves the resource as it was and usable."""
import pytest

import gpumem
from gpumem import mr

MiB = 1 << 20
PiB = 1 << 50


def small_pool():
    return mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="2MiB",
                                 maximum_pool_size="4MiB")


def test_exception_hierarchy():
    assert issubclass(gpumem.GpumemError, RuntimeError)
    assert issubclass(gpumem.OutOfMemoryError, gpumem.GpumemError)
    assert issubclass(gpumem.OutOfMemoryError, MemoryError)
    assert issubclass(gpumem.InvalidArgumentError, gpumem.GpumemError)
    assert issubclass(gpumem.InvalidArgumentError, ValueError)
    assert not issubclass(gpumem.InvalidArgumentError, MemoryError)


# ---- out of memory -------------------------------------------------------------------------

def test_out_of_memory_names_the_request_the_resource_and_what_it_holds():
    pool = small_pool()
    held = pool.allocate(MiB)
    with pytest.raises(MemoryError) as failure:
        pool.allocate(8 * MiB)
    assert isinstance(failure.value, gpumem.OutOfMemoryError)
    message = str(failure.value)
    assert message.startswith("GPUMEM_ERR_OUT_OF_MEMORY: out of memory: allocating 8 MiB "
                              "(8388608 B) from pool(cuda, initial=2097152, max=4194304) "
                              "on device 0")
    assert "the pool has reached its maximum size" in message
    assert "1 MiB (1048576 B) of it live" in message
    assert "largest free block 1 MiB (1048576 B)" in message
    pool.deallocate(held, MiB)


def test_out_of_memory_from_the_device_itself():
    with pytest.raises(gpumem.OutOfMemoryError, match=r"allocating 1 PiB \(1125899906842624 B\) from cuda"):
        gpumem.DeviceBuffer(size=PiB)
    with pytest.raises(gpumem.OutOfMemoryError, match="from cuda on device 0"):
        mr.CudaMemoryResource().allocate(PiB)


def test_out_of_memory_is_caught_as_memory_error_by_plain_python_code():
    def allocate_or_report(size):
        try:
            return gpumem.DeviceBuffer(size=size)
        except MemoryError:
            return "no memory"

    assert allocate_or_report(PiB) == "no memory"


# ---- invalid arguments ---------------------------------------------------------------------

def test_a_bad_spec_is_a_value_error_that_points_at_the_mistake():
    with pytest.raises(ValueError) as failure:
        mr.from_spec("faulty(cuda, fail_al=3)")
    assert isinstance(failure.value, gpumem.InvalidArgumentError)
    assert str(failure.value).splitlines() == [
        "GPUMEM_ERR_INVALID_ARGUMENT: invalid resource spec: unknown parameter 'fail_al' of "
        "'faulty' (known: fail_at, fail_every, status)",
        "  faulty(cuda, fail_al=3)",
        "               ^",
    ]


def test_a_bad_stream_object_is_an_invalid_argument():
    with pytest.raises(gpumem.InvalidArgumentError, match="a stream must be None, an int"):
        gpumem.DeviceBuffer(size=8, stream="stream 1")
    with pytest.raises(ValueError, match="got <object object"):
        small_pool().allocate(8, stream=object())


def test_negative_sizes_are_invalid_arguments():
    with pytest.raises(gpumem.InvalidArgumentError, match=r"size must not be negative \(-5\)"):
        gpumem.DeviceBuffer(size=-5)
    with pytest.raises(gpumem.InvalidArgumentError, match=r"nbytes must not be negative \(-1\)"):
        small_pool().allocate(-1)


def test_negative_resource_sizes_are_gpumem_invalid_arguments():
    attempts = [
        lambda: mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=-1),
        lambda: gpumem.reinitialize(pool_allocator=True, maximum_pool_size=-1),
    ]
    for attempt in attempts:
        with pytest.raises(ValueError) as failure:
            attempt()
        assert isinstance(failure.value, gpumem.InvalidArgumentError), repr(failure.value)


def test_a_device_that_does_not_exist_is_an_invalid_argument():
    count = gpumem._lib.device_count()
    with pytest.raises(ValueError) as failure:
        mr.CudaMemoryResource(device=count + 3)
    assert isinstance(failure.value, gpumem.InvalidArgumentError)
    assert str(failure.value).startswith(
        f"GPUMEM_ERR_INVALID_DEVICE: gpumem_cuda_create: device {count + 3} does not exist")


def test_a_size_that_is_not_a_size():
    with pytest.raises(gpumem.InvalidArgumentError, match="Could not parse '12 parsecs' as a size"):
        mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="12 parsecs")


# ---- misuse --------------------------------------------------------------------------------

def test_double_free_is_misuse_with_the_librarys_message():
    pool = small_pool()
    ptr = pool.allocate(1000)
    pool.deallocate(ptr, 1000)
    with pytest.raises(gpumem.GpumemError) as failure:
        pool.deallocate(ptr, 1000)
    assert not isinstance(failure.value, (ValueError, MemoryError))
    assert str(failure.value) == (
        f"GPUMEM_ERR_MISUSE: deallocate of {ptr:#x} (1000 bytes) from a pool: that pointer is "
        "not a live allocation of this pool (never allocated here, or already freed)")


def test_double_free_of_device_memory_is_misuse():
    resource = mr.CudaMemoryResource()
    ptr = resource.allocate(100)
    resource.deallocate(ptr, 100)
    with pytest.raises(gpumem.GpumemError, match="GPUMEM_ERR_MISUSE: deallocate of .* from resource 'cuda'"):
        resource.deallocate(ptr, 100)


def test_wrong_size_and_foreign_pointers_are_misuse():
    pool = small_pool()
    ptr = pool.allocate(1000)
    with pytest.raises(gpumem.GpumemError, match="with 999 bytes, but it was allocated with 1000 bytes"):
        pool.deallocate(ptr, 999)
    with pytest.raises(gpumem.GpumemError, match="not a live allocation of this pool"):
        pool.deallocate(ptr + 256, 1000)
    assert pool.live_count == 1, "the refused frees changed nothing"
    pool.deallocate(ptr, 1000)
    assert pool.live_count == 0


def test_an_injected_fault_is_neither_memory_nor_argument_error():
    faulty = mr.FaultyMemoryResource(mr.CudaMemoryResource(), fail_at=1)
    with pytest.raises(gpumem.GpumemError, match="GPUMEM_ERR_INJECTED_FAULT") as failure:
        faulty.allocate(10)
    assert not isinstance(failure.value, (ValueError, MemoryError))


# ---- a failed call leaves the resource usable ----------------------------------------------

def test_the_pool_is_unchanged_by_a_failed_allocation():
    pool = small_pool()
    keep = gpumem.DeviceBuffer.to_device(b"kept across failures", mr=pool)
    facts = (pool.live_bytes, pool.live_count, pool.reserved_bytes, pool.free_bytes)
    with pytest.raises(gpumem.OutOfMemoryError):
        pool.allocate(64 * MiB)
    assert (pool.live_bytes, pool.live_count, pool.reserved_bytes, pool.free_bytes) == facts
    ptr = pool.allocate(MiB)
    assert pool.live_count == 2
    pool.deallocate(ptr, MiB)
    assert keep.tobytes() == b"kept across failures"


def test_the_pool_is_unchanged_by_a_refused_free():
    pool = small_pool()
    ptr = pool.allocate(1000)
    with pytest.raises(gpumem.GpumemError):
        pool.deallocate(ptr, 4000)
    with pytest.raises(gpumem.GpumemError):
        pool.deallocate(12345, 10)
    again = pool.allocate(1000)
    assert again != ptr, "the live block was not freed by the refused calls"
    pool.deallocate(ptr, 1000)
    pool.deallocate(again, 1000)
    assert pool.live_count == 0
    assert pool.free_bytes == pool.reserved_bytes


def test_a_pool_over_a_failing_upstream_recovers():
    faulty = mr.FaultyMemoryResource(mr.CudaMemoryResource(), fail_at=2)
    pool = mr.PoolMemoryResource(faulty, initial_pool_size="2MiB")  # the first upstream call
    first = pool.allocate(MiB)
    with pytest.raises(gpumem.GpumemError, match="INJECTED_FAULT"):
        pool.allocate(4 * MiB)  # growth: the second upstream call fails
    grown = pool.allocate(4 * MiB)  # growth again: the third call succeeds
    assert pool.live_bytes == 5 * MiB
    pool.deallocate(first, MiB)
    pool.deallocate(grown, 4 * MiB)
    assert pool.live_count == 0


def test_out_of_memory_on_the_buffer_leaves_it_as_it_was():
    pool = small_pool()
    buf = gpumem.DeviceBuffer.to_device(b"still here", mr=pool)
    with pytest.raises(gpumem.OutOfMemoryError):
        buf.resize(64 * MiB)
    assert buf.size == 10
    assert buf.tobytes() == b"still here"
    with pytest.raises(gpumem.OutOfMemoryError):
        buf.reserve(64 * MiB)
    assert buf.capacity() == 10
    assert pool.live_count == 1


# ---- arguments Python checks before the library ------------------------------------------

def test_unknown_managed_memory_advice_is_an_invalid_argument():
    with pytest.raises(gpumem.InvalidArgumentError, match="unknown memory advice 'x'"):
        mr.ManagedMemoryResource(advice=["x"])


class _StreamWithPtr:
    def __init__(self, ptr):
        self.ptr = ptr


@pytest.mark.parametrize("stream", [-1, 2**64, _StreamWithPtr("not a handle"), _StreamWithPtr(-5)])
def test_bad_stream_handles_are_invalid_arguments(stream):
    pool = small_pool()
    with pytest.raises(gpumem.InvalidArgumentError, match="stream handle"):
        pool.allocate(100, stream=stream)
    assert pool.live_count == 0
