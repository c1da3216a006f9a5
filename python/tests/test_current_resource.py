"""The current resource of each device: the default, getting back the very object that was
set, per-device resources (the simulated device has two devices), None restoring the
default, refusals that change nothing, and which resource frees a buffer's memory."""
import gc
import os
import threading

import pytest

import gpumem
from gpumem import mr

MiB = 1 << 20


def small_pool(device=None):
    return mr.PoolMemoryResource(mr.CudaMemoryResource(device=device), initial_pool_size="2MiB")


def test_the_default_is_a_cuda_resource_of_each_device():
    if "GPUMEM_RESOURCE" in os.environ:
        pytest.skip("GPUMEM_RESOURCE chooses another default")
    for device in range(gpumem._lib.device_count()):
        resource = mr.get_per_device_resource(device)
        assert resource.spec == "cuda"
        assert resource.device == device
    assert mr.get_current_device_resource().device == 0
    assert type(mr.get_current_device_resource()) is mr.CudaMemoryResource
    assert mr.get_current_device_resource() is mr.get_current_device_resource()
    assert mr.get_current_device_resource_type() is mr.CudaMemoryResource
    assert mr.get_per_device_resource_type(0) is mr.CudaMemoryResource


def test_the_object_set_is_the_object_got_back(pool):
    mr.set_current_device_resource(pool)
    assert mr.get_current_device_resource() is pool
    assert mr.get_per_device_resource(0) is pool
    assert isinstance(mr.get_current_device_resource(), mr.PoolMemoryResource)


def test_setting_none_restores_the_default(pool):
    default_spec = mr.get_current_device_resource().spec
    mr.set_current_device_resource(pool)
    mr.set_per_device_resource(0, None)
    restored = mr.get_current_device_resource()
    assert restored is not pool
    assert restored.spec == default_spec
    buf = gpumem.DeviceBuffer(size=100)
    assert pool.live_count == 0, "allocations no longer reach the pool"
    assert restored.live_count >= 1
    del buf


def test_each_device_has_its_own_resource(second_device):
    pool_zero, pool_one = small_pool(0), small_pool(second_device)
    mr.set_per_device_resource(0, pool_zero)
    mr.set_per_device_resource(second_device, pool_one)
    assert mr.get_per_device_resource(0) is pool_zero
    assert mr.get_per_device_resource(second_device) is pool_one
    mr.set_per_device_resource(second_device, None)
    assert mr.get_per_device_resource(0) is pool_zero, "device 0 is not touched"
    assert mr.get_per_device_resource(second_device) is not pool_one


def test_set_current_uses_the_resources_own_device(second_device):
    default_zero = mr.get_per_device_resource(0).spec
    pool_one = small_pool(second_device)
    mr.set_current_device_resource(pool_one)
    assert mr.get_per_device_resource(second_device) is pool_one
    assert mr.get_per_device_resource(0).spec == default_zero


def test_a_resource_of_another_device_is_refused(second_device):
    pool_zero = small_pool(0)
    before = mr.get_per_device_resource(second_device).spec
    with pytest.raises(gpumem.InvalidArgumentError, match="is for device 0, not device 1"):
        mr.set_per_device_resource(second_device, pool_zero)
    assert mr.get_per_device_resource(second_device).spec == before
    assert mr.get_per_device_resource(second_device) is not pool_zero


def test_devices_that_do_not_exist_are_refused(pool):
    count = gpumem._lib.device_count()
    with pytest.raises(gpumem.InvalidArgumentError, match=f"device {count} does not exist"):
        mr.get_per_device_resource(count)
    with pytest.raises(gpumem.InvalidArgumentError, match="GPUMEM_ERR_INVALID_DEVICE"):
        mr.set_per_device_resource(count, pool)


def test_the_current_resource_stays_alive_without_other_references():
    pool = small_pool()
    mr.set_current_device_resource(pool)
    del pool
    gc.collect()
    current = mr.get_current_device_resource()
    assert isinstance(current, mr.PoolMemoryResource)
    buf = gpumem.DeviceBuffer(size=MiB)
    assert current.live_count == 1
    del buf


def test_a_resource_set_from_c_comes_back_as_an_object_of_its_class():
    gpumem.reinitialize(pool_allocator=True, initial_pool_size="4MiB")
    current = mr.get_current_device_resource()
    assert type(current) is mr.PoolMemoryResource
    assert mr.get_current_device_resource_type() is mr.PoolMemoryResource
    assert current is mr.get_current_device_resource(), "the same object each time"
    upstream = current.get_upstream()
    assert upstream is current.upstream_mr
    assert type(upstream) in (mr.VmmMemoryResource, mr.CudaMemoryResource)
    assert upstream.handle == current.upstream.handle
    assert current.pool_size() == current.reserved_bytes >= 4 * MiB
    gpumem.reinitialize(managed_memory=True)
    assert type(mr.get_current_device_resource()) is mr.ManagedMemoryResource
    gpumem.reinitialize(pool_allocator=True, managed_memory=True, initial_pool_size="2MiB")
    pool = mr.get_current_device_resource()
    assert isinstance(pool, mr.PoolMemoryResource)
    assert type(pool.upstream_mr) is mr.ManagedMemoryResource


def test_kinds_get_their_classes_and_others_stay_plain_resources():
    callback = mr.CallbackMemoryResource(lambda size, stream: 0, lambda ptr, size, stream: None)
    mr.set_current_device_resource(callback)
    assert mr.get_current_device_resource() is callback
    assert type(mr._typed(gpumem._lib.get_per_device_resource(0))) is mr.MemoryResource
    typed = mr._typed(mr.from_spec("tracking(stats(limit(pool(cuda, initial=2MiB), max=1GiB)))"))
    assert type(typed) is mr.TrackingResourceAdaptor
    chain = [type(typed.upstream_mr), type(typed.upstream_mr.upstream_mr),
             type(typed.upstream_mr.upstream_mr.upstream_mr)]
    assert chain == [mr.StatisticsResourceAdaptor, mr.LimitingResourceAdaptor,
                     mr.PoolMemoryResource]
    assert typed.upstream_mr.upstream_mr.get_allocation_limit() == 1 << 30


def test_a_buffer_frees_to_the_resource_it_came_from():
    first, second = small_pool(), small_pool()
    mr.set_current_device_resource(first)
    buf = gpumem.DeviceBuffer(size=1000)
    mr.set_current_device_resource(second)
    assert (first.live_count, second.live_count) == (1, 0)
    del buf
    assert first.live_count == 0
    assert second.live_count == 0


def test_other_threads_see_the_same_resource(pool):
    mr.set_current_device_resource(pool)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(mr.get_current_device_resource()))
    worker.start()
    worker.join()
    assert seen == [pool]


def test_device_minus_one_is_refused_or_is_the_current_device(pool):
    try:
        mr.set_per_device_resource(-1, pool)
    except gpumem.InvalidArgumentError:
        return  # refusing -1, as -2 is refused, would be right too
    assert mr.get_current_device_resource() is pool
