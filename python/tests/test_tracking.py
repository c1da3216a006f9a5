"""TrackingResourceAdaptor, with RMM's name and arguments: get_allocated_bytes follows
DeviceBuffers through one adaptor and through two stacked ones; the list of outstanding
allocations (with stacks when asked) is empty once everything is freed; a free it cannot
match is reported on stderr and judged by the upstream; it keeps its upstream alive and
comes from a spec."""
import gc
import re
import weakref

import pytest

import gpumem
from gpumem import mr

MiB = 1 << 20


def test_tracking_buffers_through_two_adaptors():
    tracking = mr.TrackingResourceAdaptor(mr.CudaMemoryResource(), capture_stacks=True)
    assert isinstance(tracking, mr.UpstreamMemoryResource)
    assert tracking.name == "tracking"
    assert tracking.spec == "tracking(cuda, stacks=true, depth=32)"
    mr.set_current_device_resource(tracking)
    buffers = [gpumem.DeviceBuffer(size=1000) for _ in range(10)]
    for i in range(9, 0, -2):
        del buffers[i]
    assert tracking.get_allocated_bytes() == 5000
    inner = mr.TrackingResourceAdaptor(tracking, capture_stacks=True)
    mr.set_current_device_resource(inner)
    buffers += [gpumem.DeviceBuffer(size=1000) for _ in range(2)]
    assert inner.get_allocated_bytes() == 2000
    assert tracking.get_allocated_bytes() == 7000
    assert inner.live_bytes == 2000 and tracking.live_count == 7
    listed = tracking.get_outstanding_allocations_str()
    assert listed.count(": 1000 B, stream 0x0, at +") == 7
    assert listed.count(" : callstack:\n#0 in ") == 7
    del buffers
    gc.collect()
    assert inner.get_allocated_bytes() == 0
    assert tracking.get_allocated_bytes() == 0
    assert inner.get_outstanding_allocations_str() == ""
    assert tracking.get_outstanding_allocations_str() == ""


def test_allocate_and_deallocate_and_the_list():
    tracking = mr.TrackingResourceAdaptor(mr.PoolMemoryResource(mr.VmmMemoryResource()))
    ptr = tracking.allocate(8 * MiB)
    assert tracking.get_allocated_bytes() == 8 * MiB
    line = tracking.get_outstanding_allocations_str()
    assert re.fullmatch(r"0x[0-9a-f]+: 8388608 B, stream 0x0, at \+\d+\.\d{3} s\n", line)
    assert int(line.split(":")[0], 16) == ptr
    assert "callstack" not in line
    tracking.deallocate(ptr, 8 * MiB)
    assert tracking.get_allocated_bytes() == 0


def test_frees_it_cannot_match_are_reported_and_passed_on(capfd):
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="4MiB")
    tracking = mr.TrackingResourceAdaptor(pool)
    ptr = tracking.allocate(1000)
    # A wrong size: reported; the pool refuses it and keeps the block, so does the adaptor.
    with pytest.raises(gpumem.GpumemError, match="with 500 bytes, but it was allocated with 1000"):
        tracking.deallocate(ptr, 500)
    err = capfd.readouterr().err
    assert "but it was allocated with 1000 bytes" in err
    assert "passed on to the upstream, which refused it" in err
    assert tracking.get_allocated_bytes() == 1000 and pool.live_bytes == 1000
    # A pointer it does not track: reported, and refused by the pool.
    with pytest.raises(gpumem.GpumemError, match="not a live allocation"):
        tracking.deallocate(ptr + 256, 1000)
    assert "not an outstanding allocation of this adaptor (1 tracked)" in capfd.readouterr().err
    tracking.deallocate(ptr, 1000)
    assert tracking.get_allocated_bytes() == 0
    # Allocated through the outer adaptor, freed through an inner one: reported by the inner
    # one, freed by the outer one.
    inner = mr.TrackingResourceAdaptor(tracking)
    ptr = tracking.allocate(2000)
    inner.deallocate(ptr, 2000)
    assert "which freed it" in capfd.readouterr().err
    assert tracking.get_allocated_bytes() == 0 and inner.get_allocated_bytes() == 0


def test_log_outstanding_allocations(capfd):
    tracking = mr.TrackingResourceAdaptor(mr.CudaMemoryResource())
    ptrs = [tracking.allocate(3000) for _ in range(2)]
    tracking.log_outstanding_allocations()
    err = capfd.readouterr().err
    assert "tracking(cuda, stacks=false, depth=32): Outstanding Allocations: 2 (" in err
    assert err.count(": 3000 B, stream 0x0, at +") == 2
    for ptr in ptrs:
        tracking.deallocate(ptr, 3000)


def test_keeps_its_upstream_alive_and_comes_from_a_spec():
    upstream = mr.CudaMemoryResource()
    tracking = mr.TrackingResourceAdaptor(upstream_mr=upstream, capture_stacks=False)
    assert tracking.upstream_mr is upstream
    watch = weakref.ref(upstream)
    del upstream
    gc.collect()
    assert watch() is not None
    del tracking
    gc.collect()
    assert watch() is None
    resource = mr.from_spec("tracking(pool(vmm), stacks=true, depth=4)")
    assert resource.name == "tracking"
    ptr = resource.allocate(MiB)
    listed = gpumem._lib.tracking_str(resource)
    assert listed.count("\n#") == 4
    resource.deallocate(ptr, MiB)
    with pytest.raises(gpumem.InvalidArgumentError, match="not a tracking adaptor"):
        gpumem._lib.tracking_bytes(mr.CudaMemoryResource())
    with pytest.raises(TypeError):
        mr.TrackingResourceAdaptor(None)
