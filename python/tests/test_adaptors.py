"""The control adaptors of gpumem.mr, with RMM's names and arguments:
LimitingResourceAdaptor (an exact limit, its getters, out of memory past it),
AlignedResourceAdaptor (alignment of large requests) and PrefetchResourceAdaptor (managed
memory moved to the device). Each keeps its upstream alive, composes with a pool both ways,
and refuses bad arguments with the package's errors."""
import gc
import weakref

import numpy as np
import pytest

import gpumem
from gpumem import mr

MiB = 1 << 20


def test_limit_with_rmms_arguments_and_getters():
    limit = mr.LimitingResourceAdaptor(upstream_mr=mr.CudaMemoryResource(), allocation_limit=MiB)
    assert isinstance(limit, mr.UpstreamMemoryResource)
    assert limit.name == "limit"
    assert limit.spec == "limit(cuda, max=1048576)"
    assert limit.get_allocation_limit() == MiB
    assert limit.get_allocated_bytes() == 0
    first = limit.allocate(600_000)
    assert limit.get_allocated_bytes() == 600_000
    with pytest.raises(gpumem.OutOfMemoryError, match="past its limit of 1 MiB") as caught:
        limit.allocate(MiB - 600_000 + 1)
    assert isinstance(caught.value, MemoryError)
    assert "600000 B) allocated" in str(caught.value)
    second = limit.allocate(MiB - 600_000)  # the limit's last byte
    assert limit.get_allocated_bytes() == MiB
    assert limit.live_count == 2
    limit.deallocate(first, 600_000)
    limit.deallocate(second, MiB - 600_000)
    assert limit.get_allocated_bytes() == 0


def test_limit_takes_a_size_string_and_refuses_bad_limits():
    assert mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), "2GiB").get_allocation_limit() == 2 << 30
    with pytest.raises(ValueError, match="missing or zero"):
        mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), 0)
    with pytest.raises(ValueError, match="negative"):
        mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), -1)
    with pytest.raises(ValueError):
        mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), "lots")
    with pytest.raises(TypeError):
        mr.LimitingResourceAdaptor(mr.CudaMemoryResource())  # the limit is required, as in RMM
    with pytest.raises(TypeError):
        mr.LimitingResourceAdaptor(None, MiB)


def test_limit_over_a_pool_and_a_pool_over_a_limit():
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="8MiB")
    limit = mr.LimitingResourceAdaptor(pool, 4 * MiB)
    buf = gpumem.DeviceBuffer.to_device(np.arange(1000, dtype=np.uint32).view(np.uint8), mr=limit)
    assert limit.get_allocated_bytes() == 4000
    with pytest.raises(MemoryError):
        gpumem.DeviceBuffer(size=5 * MiB, mr=limit)
    assert (np.frombuffer(buf.tobytes(), dtype=np.uint32) == np.arange(1000)).all()
    del buf

    under = mr.LimitingResourceAdaptor(mr.VmmMemoryResource(), "64MiB")
    over = mr.PoolMemoryResource(under)
    ptrs = [over.allocate(10 * MiB) for _ in range(4)]
    assert under.get_allocated_bytes() == over.reserved_bytes  # growth counts as allocation
    with pytest.raises(gpumem.OutOfMemoryError, match="limit"):
        over.allocate(30 * MiB)
    for ptr in ptrs:
        over.deallocate(ptr, 10 * MiB)


def test_aligned_with_rmms_arguments():
    aligned = mr.AlignedResourceAdaptor(mr.PoolMemoryResource(mr.CudaMemoryResource(),
                                                              initial_pool_size="64MiB"),
                                        alignment=64 << 10, alignment_threshold=MiB)
    assert aligned.name == "aligned"
    assert aligned.spec.endswith("alignment=65536, threshold=1048576)")
    for size in (MiB - 1, MiB, MiB + 1, 3 * MiB + 5):
        ptr = aligned.allocate(size)
        if size >= MiB:
            assert ptr % (64 << 10) == 0, (size, ptr)
        assert ptr % 256 == 0
        aligned.deallocate(ptr, size)
    assert mr.AlignedResourceAdaptor(mr.CudaMemoryResource()).spec == (
        "aligned(cuda, alignment=256, threshold=0)")  # RMM's defaults


@pytest.mark.parametrize("alignment", [3, 3000, 0, -4096])
def test_aligned_refuses_an_alignment_that_is_not_a_power_of_two(alignment):
    with pytest.raises(ValueError):
        mr.AlignedResourceAdaptor(mr.CudaMemoryResource(), alignment=alignment)


def test_prefetch_over_managed_memory_and_over_device_memory():
    for upstream, spec in ((mr.ManagedMemoryResource(), "prefetch(managed(prefetch=false))"),
                           (mr.PoolMemoryResource(mr.ManagedMemoryResource(),
                                                  initial_pool_size="8MiB"), "prefetch(pool("),
                           (mr.CudaMemoryResource(), "prefetch(cuda)")):
        prefetch = mr.PrefetchResourceAdaptor(upstream_mr=upstream)
        assert prefetch.spec.startswith(spec)
        buf = gpumem.DeviceBuffer.to_device(b"prefetched bytes", mr=prefetch)
        assert buf.tobytes() == b"prefetched bytes"
        del buf
        gpumem._lib.synchronize(None)
        assert prefetch.live_count == 0


@pytest.mark.parametrize("make", [
    lambda up: mr.LimitingResourceAdaptor(up, "1GiB"),
    lambda up: mr.AlignedResourceAdaptor(up, alignment=4096),
    lambda up: mr.PrefetchResourceAdaptor(up),
])
def test_each_adaptor_keeps_its_upstream_alive(make):
    upstream = mr.ManagedMemoryResource()
    adaptor = make(upstream)
    assert adaptor.upstream_mr is upstream and adaptor.get_upstream() is upstream
    watch = weakref.ref(upstream)
    del upstream
    gc.collect()
    assert watch() is not None
    ptr = adaptor.allocate(1000)
    adaptor.deallocate(ptr, 1000)
    del adaptor
    gc.collect()
    assert watch() is None


def test_adaptors_from_specs():
    resource = mr.from_spec("prefetch(aligned(limit(pool(managed), max=2GiB), alignment=64KiB))")
    assert resource.name == "prefetch"
    ptr = resource.allocate(5 * MiB)
    assert ptr % (64 << 10) == 0
    resource.deallocate(ptr, 5 * MiB)
    with pytest.raises(gpumem.InvalidArgumentError, match="missing or zero"):
        mr.from_spec("limit(cuda)")
