"""gpumem.reinitialize, as rmm.reinitialize: the resource each combination of options builds
(read back through .spec), sizes as ints, "1GiB"-style strings and percentages, several
devices at once, all-or-nothing failure, and is_initialized."""
import pytest

import gpumem
from gpumem import mr

MiB = 1 << 20
GiB = 1 << 30


def current_spec(device=0):
    return mr.get_per_device_resource(device).spec


def test_is_initialized_from_the_start_as_rmm(run_script, pool):
    # A fresh interpreter: the default resource counts, as RMM's does.
    assert run_script("import gpumem; print(gpumem.is_initialized(), gpumem.mr.is_initialized())",
                      timeout=60) == "True True\n"
    mr.set_current_device_resource(pool)
    if not gpumem.is_initialized():
        gpumem.reinitialize()
    assert mr.get_current_device_resource() is pool, "a resource the user set stays"


def test_no_options_give_cuda_memory():
    gpumem.reinitialize()
    assert current_spec() == "cuda"


def test_pool_allocator_builds_a_pool_over_virtual_memory():
    gpumem.reinitialize(pool_allocator=True)
    spec = current_spec()
    assert spec.startswith("pool(vmm(reserve="), spec
    assert spec.endswith(", initial=0, max=0)"), "over vmm no initial size is needed"


@pytest.mark.sim
def test_pool_allocator_without_virtual_memory_builds_a_pool_over_cuda_memory(run_script):
    script = ("import gpumem\n"
              "gpumem.reinitialize(pool_allocator=True, initial_pool_size='4MiB')\n"
              "print(gpumem.mr.get_current_device_resource().spec)\n")
    out = run_script(script, timeout=60, GPUMEM_DEVICE="sim", GPUMEM_SIM_VMM="0")
    assert out == "pool(cuda, initial=4194304, max=0)\n"


def test_managed_memory_builds_managed_memory():
    gpumem.reinitialize(managed_memory=True)
    assert current_spec() == "managed(prefetch=false)"


def test_pool_allocator_with_managed_memory_builds_a_pool_of_managed_memory():
    gpumem.reinitialize(pool_allocator=True, managed_memory=True, initial_pool_size=2 * MiB,
                        maximum_pool_size=GiB)
    assert current_spec() == "pool(managed(prefetch=false), initial=2097152, max=1073741824)"


def test_sizes_as_strings():
    gpumem.reinitialize(pool_allocator=True, initial_pool_size="2MiB",
                        maximum_pool_size="1GiB")
    assert current_spec().endswith(", initial=2097152, max=1073741824)")


def test_sizes_as_percentages_of_the_devices_memory():
    total = mr.available_device_memory(0)[1]
    gpumem.reinitialize(pool_allocator=True, maximum_pool_size="50%")
    assert current_spec().endswith(f", initial=0, max={total // 2})")


def test_the_new_resource_serves_allocations():
    gpumem.reinitialize(pool_allocator=True, initial_pool_size="4MiB")
    buf = gpumem.DeviceBuffer.to_device(b"from the pool")
    assert mr.get_current_device_resource().live_count == 1
    assert buf.tobytes() == b"from the pool"


def test_reinitialize_replaces_a_resource_set_from_python(pool):
    mr.set_current_device_resource(pool)
    gpumem.reinitialize(managed_memory=True)
    assert mr.get_current_device_resource() is not pool
    assert current_spec() == "managed(prefetch=false)"


def test_several_devices_each_get_their_own_pool(second_device):
    gpumem.reinitialize(pool_allocator=True, maximum_pool_size="1GiB", devices=[0, second_device])
    zero, one = mr.get_per_device_resource(0), mr.get_per_device_resource(second_device)
    assert zero.handle != one.handle
    for device, resource in ((0, zero), (second_device, one)):
        assert resource.device == device
        assert resource.name == "pool"
        assert resource.spec.endswith(", initial=0, max=1073741824)")


def test_an_int_device_changes_only_that_device(second_device):
    before = current_spec(0)
    gpumem.reinitialize(managed_memory=True, devices=second_device)
    assert current_spec(second_device) == "managed(prefetch=false)"
    assert current_spec(0) == before


def test_all_devices_or_none(second_device):
    gpumem.reinitialize(pool_allocator=True, maximum_pool_size="1GiB")
    before = current_spec(0)
    with pytest.raises(gpumem.InvalidArgumentError, match="device 99 does not exist"):
        gpumem.reinitialize(managed_memory=True, devices=[0, 99])
    assert current_spec(0) == before, "device 0 keeps its pool"


def test_refused_options_change_nothing():
    gpumem.reinitialize(managed_memory=True)
    with pytest.raises(gpumem.InvalidArgumentError, match="exceeds the maximum"):
        gpumem.reinitialize(pool_allocator=True, initial_pool_size="2MiB",
                            maximum_pool_size="1MiB")
    with pytest.raises(gpumem.InvalidArgumentError, match="Could not parse 'lots' as a size"):
        gpumem.reinitialize(pool_allocator=True, initial_pool_size="lots")
    with pytest.raises(gpumem.InvalidArgumentError, match="no devices"):
        gpumem.reinitialize(pool_allocator=True, devices=[])
    assert current_spec() == "managed(prefetch=false)"


def test_logging_needs_a_file_name(monkeypatch):
    monkeypatch.delenv("GPUMEM_LOG_FILE", raising=False)
    gpumem.reinitialize(managed_memory=True)
    with pytest.raises(ValueError, match="GPUMEM_LOG_FILE"):
        gpumem.reinitialize(logging=True)
    assert current_spec() == "managed(prefetch=false)"  # the devices keep their resources
