"""The memory resources of gpumem.mr: every class allocates and frees usable memory and
reports what it holds (live and reserved bytes); pools, arenas, binning, fixed-size and
faulty resources behave as documented; resources built over an upstream keep it alive."""
import gc
import os
import weakref

import numpy as np
import pytest

import gpumem
from gpumem import mr

MiB = 1 << 20


def cuda():
    return mr.CudaMemoryResource()


# Each class of gpumem.mr, built small, with the spec it reports.
RESOURCES = {
    "cuda": (lambda: mr.CudaMemoryResource(), "cuda"),
    "managed": (lambda: mr.ManagedMemoryResource(), "managed(prefetch=false)"),
    "async": (lambda: mr.CudaAsyncMemoryResource(),
              "async(release_threshold=18446744073709551615, initial=0, ipc=none)"),
    "pinned_host": (lambda: mr.PinnedHostMemoryResource(),
                    "pinned_host(mapped=false, write_combined=false)"),
    "system": (lambda: mr.SystemMemoryResource(), "system"),
    "vmm": (lambda: mr.VmmMemoryResource(reserve_size="1GiB"), "vmm(reserve=1073741824, piece=33554432)"),
    "pool": (lambda: mr.PoolMemoryResource(cuda(), initial_pool_size="4MiB",
                                           maximum_pool_size="64MiB"),
             "pool(cuda, initial=4194304, max=67108864)"),
    "arena": (lambda: mr.ArenaMemoryResource(cuda(), arena_size="16MiB"),
              "arena(cuda, size=16777216, max=0, superblock=4194304)"),
    "binning": (lambda: mr.BinningMemoryResource(cuda(), 10, 16),
                "binning(cuda, min=10, max=16)"),
    "fixed_size": (lambda: mr.FixedSizeMemoryResource(cuda(), block_size=4096,
                                                      blocks_to_preallocate=8),
                   "fixed_size(cuda, block=4096, prealloc=8)"),
    "faulty": (lambda: mr.FaultyMemoryResource(cuda(), fail_at=1000),
               "faulty(cuda, fail_at=1000, fail_every=0, status=injected)"),
    "limit": (lambda: mr.LimitingResourceAdaptor(cuda(), 64 * MiB), "limit(cuda, max=67108864)"),
    "aligned": (lambda: mr.AlignedResourceAdaptor(cuda(), alignment=4096),
                "aligned(cuda, alignment=4096, threshold=0)"),
    "prefetch": (lambda: mr.PrefetchResourceAdaptor(mr.ManagedMemoryResource()),
                 "prefetch(managed(prefetch=false))"),
    "stats": (lambda: mr.StatisticsResourceAdaptor(cuda()),
              "stats(cuda, flush_bytes=1048576, flush_count=64)"),
}


def build(kind):
    try:
        return RESOURCES[kind][0]()
    except gpumem.GpumemError as error:
        if kind == "system" and gpumem.backend() == "cuda" and "UNSUPPORTED" in str(error):
            pytest.skip("this GPU cannot access pageable host memory")
        raise


@pytest.mark.parametrize("kind", sorted(RESOURCES))
def test_each_resource_allocates_and_frees(kind):
    resource = build(kind)
    assert resource.name == kind
    assert resource.spec == RESOURCES[kind][1]
    assert resource.device == 0
    ptr = resource.allocate(1000)
    assert ptr != 0 and ptr % 256 == 0
    assert resource.live_count == 1
    assert resource.live_bytes == 1000
    assert resource.reserved_bytes >= 1000
    if resource.free_bytes is not None:  # suballocators: reserved bytes not in live blocks
        assert resource.free_bytes <= resource.reserved_bytes - 1000
    resource.deallocate(ptr, 1000)
    assert resource.live_count == 0
    assert resource.live_bytes == 0
    for peak in (resource.peak_live_bytes, resource.peak_reserved_bytes):
        assert peak is None or peak >= 1000, "a peak, where the resource keeps one"


@pytest.mark.parametrize("kind", sorted(RESOURCES))
def test_each_resources_memory_holds_data(kind):
    resource = build(kind)
    data = (np.arange(4000) % 256).astype(np.uint8)  # within fixed_size's 4 KiB blocks
    buf = gpumem.DeviceBuffer.to_device(data, mr=resource)
    assert resource.live_count == 1
    np.testing.assert_array_equal(buf.copy_to_host(), data)
    del buf
    assert resource.live_count == 0


@pytest.mark.parametrize("kind", sorted(RESOURCES))
def test_zero_bytes_is_a_null_pointer_and_no_allocation(kind):
    resource = build(kind)
    assert resource.allocate(0) == 0
    assert resource.live_count == 0
    resource.deallocate(0, 0)  # freeing NULL does nothing


def test_repr_names_the_class_and_the_spec():
    pool = mr.PoolMemoryResource(cuda(), initial_pool_size=MiB)
    assert repr(pool) == "<PoolMemoryResource pool(cuda, initial=1048576, max=0)>"
    assert repr(mr.MemoryResource()) == "<gpumem.mr.MemoryResource (not initialized)>"


def test_an_uninitialized_resource_raises_instead_of_crashing():
    empty = mr.MemoryResource()
    with pytest.raises(gpumem.InvalidArgumentError, match="never initialized"):
        empty.allocate(10)
    with pytest.raises(gpumem.InvalidArgumentError, match="never initialized"):
        empty.live_bytes


def test_a_resource_cannot_be_built_twice():
    resource = cuda()
    with pytest.raises(gpumem.InvalidArgumentError, match="already initialized"):
        mr.CudaMemoryResource.__init__(resource)


def test_resources_of_another_device(second_device):
    resource = mr.CudaMemoryResource(device=second_device)
    assert resource.device == second_device
    pool = mr.PoolMemoryResource(resource, initial_pool_size=MiB)
    assert pool.device == second_device, "a pool allocates for its upstream's device"
    ptr = pool.allocate(100)
    pool.deallocate(ptr, 100)


def test_available_device_memory():
    free, total = mr.available_device_memory()
    assert 0 < free <= total
    assert mr.available_device_memory(0)[1] == total


@pytest.mark.sim
def test_available_device_memory_follows_the_simulated_capacity():
    capacity = gpumem._lib.parse_size(os.environ.get("GPUMEM_SIM_MEMORY", "8GiB"))
    assert mr.available_device_memory()[1] == capacity
    cuda_resource = cuda()
    ptr = cuda_resource.allocate(64 * MiB)
    assert mr.available_device_memory()[0] <= capacity - 64 * MiB
    cuda_resource.deallocate(ptr, 64 * MiB)


# ---- facts of the base resources -----------------------------------------------------------

def test_base_resources_reserve_what_is_live():
    for resource in (cuda(), mr.ManagedMemoryResource(), mr.PinnedHostMemoryResource()):
        ptrs = [resource.allocate(size) for size in (1000, 3000)]
        assert resource.live_bytes == 4000
        assert resource.reserved_bytes == 4000
        assert resource.largest_free_block is None, "no suballocation: unknown"
        for ptr, size in zip(ptrs, (1000, 3000)):
            resource.deallocate(ptr, size)
        assert resource.reserved_bytes == 0
        assert resource.peak_live_bytes == 4000


def test_async_keeps_freed_memory_by_default():
    resource = mr.CudaAsyncMemoryResource()
    ptr = resource.allocate(MiB)
    resource.deallocate(ptr, MiB)
    assert resource.live_bytes == 0
    assert resource.reserved_bytes >= MiB, "release_threshold None keeps everything"


def test_async_with_a_release_threshold_gives_memory_back_when_the_device_syncs():
    resource = mr.CudaAsyncMemoryResource(release_threshold=0)
    ptr = resource.allocate(8 * MiB)
    resource.deallocate(ptr, 8 * MiB)
    gpumem._lib.synchronize(None)
    assert resource.reserved_bytes == 0


def test_async_takes_its_initial_size_up_front():
    resource = mr.CudaAsyncMemoryResource(initial_pool_size="4MiB")
    assert resource.reserved_bytes >= 4 * MiB
    assert resource.live_bytes == 0


def test_async_options_reach_the_spec():
    resource = mr.CudaAsyncMemoryResource(initial_pool_size="1MiB", release_threshold="2MiB",
                                          enable_ipc=True)
    assert resource.spec == "async(release_threshold=2097152, initial=1048576, ipc=posix_fd)"
    zero = mr.CudaAsyncMemoryResource(release_threshold=0)
    assert "release_threshold=1," in zero.spec, "0 is kept distinct from 'keep everything'"


def test_managed_and_pinned_options_reach_the_spec():
    managed = mr.ManagedMemoryResource(prefetch=True, advice=["read_mostly", "accessed_by_device"])
    assert managed.spec == "managed(prefetch=true, read_mostly=true, accessed_by_device=true)"
    pinned = mr.PinnedHostMemoryResource(mapped=True, write_combined=True)
    assert pinned.spec == "pinned_host(mapped=true, write_combined=true)"


def test_vmm_reserves_what_it_maps():
    resource = mr.VmmMemoryResource(reserve_size="1GiB")
    assert resource.reserved_bytes == 0
    ptr = resource.allocate(1000)
    assert resource.reserved_bytes >= 1000
    assert resource.reserved_bytes % (64 << 10) == 0, "physical memory comes in granules"
    resource.deallocate(ptr, 1000)
    assert resource.reserved_bytes == 0


def test_vmm_arguments_keep_their_places():
    # The device stays the second positional argument; the piece size is named only.
    assert mr.VmmMemoryResource("1GiB", 0).device == 0
    with pytest.raises(TypeError):
        mr.VmmMemoryResource("1GiB", 0, "2MiB")
    assert mr.VmmMemoryResource("1GiB", piece_size="2MiB").spec == \
        "vmm(reserve=1073741824, piece=2097152)"


@pytest.mark.sim
def test_system_memory_needs_pageable_memory_access(run_script):
    script = """
        import gpumem.mr
        try:
            gpumem.mr.SystemMemoryResource()
        except gpumem.GpumemError as error:
            print(type(error).__name__, error)
    """
    out = run_script(script, timeout=60, GPUMEM_DEVICE="sim", GPUMEM_SIM_PAGEABLE="0")
    assert out.startswith("GpumemError GPUMEM_ERR_UNSUPPORTED")


# ---- pool ----------------------------------------------------------------------------------

def test_pool_takes_its_initial_size_up_front():
    pool = mr.PoolMemoryResource(cuda(), initial_pool_size="4MiB")
    assert pool.reserved_bytes == 4 * MiB
    assert pool.live_bytes == 0
    assert pool.free_bytes == 4 * MiB
    assert pool.largest_free_block == 4 * MiB
    assert pool.free_blocks == 1
    assert pool.upstream.live_bytes == 4 * MiB, "the upstream sees one chunk"


def test_pool_serves_from_its_chunk_then_grows():
    pool = mr.PoolMemoryResource(cuda(), initial_pool_size="4MiB")
    first = pool.allocate(MiB)
    assert pool.reserved_bytes == 4 * MiB
    assert pool.free_bytes == 3 * MiB
    big = pool.allocate(8 * MiB)
    assert pool.reserved_bytes >= 12 * MiB
    assert pool.live_bytes == 9 * MiB
    pool.deallocate(first, MiB)
    pool.deallocate(big, 8 * MiB)
    assert pool.live_bytes == 0
    assert pool.free_bytes == pool.reserved_bytes, "freed memory stays in the pool"


def test_pool_respects_its_maximum_size():
    pool = mr.PoolMemoryResource(cuda(), initial_pool_size="2MiB", maximum_pool_size="4MiB")
    with pytest.raises(gpumem.OutOfMemoryError, match="maximum size"):
        pool.allocate(5 * MiB)
    assert pool.reserved_bytes <= 4 * MiB


def test_pool_gives_its_free_chunks_back_before_it_fails():
    # Free chunks of 8 MiB, none a block of 40 MiB, and no room to grow under the maximum:
    # the pool gives them back and grows, as CuPy's pool and PyTorch's cache do before
    # failing. A pool with nothing free still fails.
    pool = mr.PoolMemoryResource(cuda(), initial_pool_size="16MiB", maximum_pool_size="64MiB")
    first = pool.allocate(16 * MiB)
    chunks = [pool.allocate(8 * MiB) for _ in range(4)]
    for ptr in chunks:
        pool.deallocate(ptr, 8 * MiB)
    assert pool.reserved_bytes == 48 * MiB and pool.free_bytes == 32 * MiB
    big = pool.allocate(40 * MiB)
    assert pool.reserved_bytes == 56 * MiB
    assert pool.free_bytes == 0
    with pytest.raises(gpumem.OutOfMemoryError, match="maximum size"):
        pool.allocate(16 * MiB)
    assert pool.reserved_bytes == 56 * MiB
    pool.deallocate(big, 40 * MiB)
    pool.deallocate(first, 16 * MiB)


def test_pool_gives_holes_back_before_growing():
    # An 8 MiB hole under a 2 MiB block, and a 12 MiB request: past 110% of the live peak
    # the hole's pieces go back first, so the pool holds 14 MiB, not 22.
    vmm = mr.VmmMemoryResource(reserve_size="1GiB", piece_size="2MiB")
    pool = mr.PoolMemoryResource(vmm, release_holes_over=110)
    assert pool.spec == ("pool(vmm(reserve=1073741824, piece=2097152), initial=0, max=0, "
                         "release_holes_over=110)")
    hole, pin = pool.allocate(8 * MiB), pool.allocate(2 * MiB)
    pool.deallocate(hole, 8 * MiB)
    grown = pool.allocate(12 * MiB)
    assert pool.reserved_bytes == 14 * MiB
    assert pool.free_bytes == 0
    for ptr, size in ((grown, 12 * MiB), (pin, 2 * MiB)):
        pool.deallocate(ptr, size)
    with pytest.raises(gpumem.InvalidArgumentError, match="release_holes_over is 99"):
        mr.PoolMemoryResource(vmm, release_holes_over=99)


def test_pool_takes_the_share_of_time_its_releases_may_spend():
    # release_holes_time=100: no budget of time; the release is the same as the default's
    # on a fresh pool, and the option shows in the spec (the default 25 does not).
    vmm = mr.VmmMemoryResource(reserve_size="1GiB", piece_size="2MiB")
    pool = mr.PoolMemoryResource(vmm, release_holes_over=110, release_holes_time=100)
    assert pool.spec.endswith("release_holes_over=110, release_holes_time=100)")
    assert "release_holes_time" not in mr.PoolMemoryResource(vmm, release_holes_time=25).spec
    hole, pin = pool.allocate(8 * MiB), pool.allocate(2 * MiB)
    pool.deallocate(hole, 8 * MiB)
    grown = pool.allocate(12 * MiB)
    assert pool.reserved_bytes == 14 * MiB
    for ptr, size in ((grown, 12 * MiB), (pin, 2 * MiB)):
        pool.deallocate(ptr, size)
    with pytest.raises(gpumem.InvalidArgumentError, match="release_holes_time is 101"):
        mr.PoolMemoryResource(vmm, release_holes_time=101)


@pytest.mark.parametrize("option, request_mib, reserved_mib, named", [
    (None, 9, 12, ""),  # half the live peak (10 MiB) up to all of it: the hole goes back
    (None, 12, 22, ""),  # past the live peak: the program still climbs, the hole stays
    ("never", 9, 20, ", release_holes_over=never"),
])
def test_pool_gives_holes_back_for_dominant_requests_by_default(option, request_mib,
                                                                 reserved_mib, named):
    vmm = mr.VmmMemoryResource(reserve_size="1GiB", piece_size="2MiB")
    pool = mr.PoolMemoryResource(vmm, release_holes_over=option)
    assert pool.spec.endswith("initial=0, max=0%s)" % named)
    hole, pin = pool.allocate(8 * MiB), pool.allocate(2 * MiB)
    pool.deallocate(hole, 8 * MiB)
    grown = pool.allocate(request_mib * MiB)
    assert pool.reserved_bytes == reserved_mib * MiB
    for ptr, size in ((grown, request_mib * MiB), (pin, 2 * MiB)):
        pool.deallocate(ptr, size)


@pytest.mark.parametrize("option, sizes_mib, request_mib, reserved_mib", [
    (None, (8, 2, 48, 10), 10, 70),  # a size served before (a loop's shape): the hole goes back
    (None, (8, 2, 48, 10), 12, 80),  # a new size under half the live peak: the pool grows
    ("never", (8, 2, 48, 10), 10, 78),
    (None, (4, 2, 14, 6), 6, 32),  # a live peak of fewer than 32 pieces: the pool grows
])
def test_pool_gives_holes_back_for_sizes_served_before_by_default(option, sizes_mib,
                                                                   request_mib, reserved_mib):
    # A hole under the other blocks, which stay live.
    vmm = mr.VmmMemoryResource(reserve_size="1GiB", piece_size="2MiB")
    pool = mr.PoolMemoryResource(vmm, release_holes_over=option)
    blocks = [(pool.allocate(size * MiB), size * MiB) for size in sizes_mib]
    pool.deallocate(*blocks.pop(0))
    grown = pool.allocate(request_mib * MiB)
    assert pool.reserved_bytes == reserved_mib * MiB
    for ptr, size in blocks + [(grown, request_mib * MiB)]:
        pool.deallocate(ptr, size)


def test_pool_trim_gives_free_chunks_back():
    pool = mr.PoolMemoryResource(cuda(), initial_pool_size="2MiB")
    ptr = pool.allocate(8 * MiB)
    pool.deallocate(ptr, 8 * MiB)
    reserved = pool.reserved_bytes
    assert pool.trim() == reserved
    assert pool.reserved_bytes == 0
    assert pool.upstream.live_bytes == 0
    ptr = pool.allocate(MiB)  # grows again after a trim
    assert pool.live_count == 1
    pool.deallocate(ptr, MiB)


def test_arena_and_binning_give_free_memory_back():
    arena = mr.ArenaMemoryResource(mr.VmmMemoryResource(), arena_size=None)
    ptr = arena.allocate(1000)
    arena.deallocate(ptr, 1000)
    reserved = arena.reserved_bytes
    assert reserved > 0
    assert arena.trim() == reserved
    assert arena.reserved_bytes == 0

    pool = mr.PoolMemoryResource(mr.VmmMemoryResource())
    binning = mr.BinningMemoryResource(pool, 8, 20)
    ptr = binning.allocate(5000)
    binning.deallocate(ptr, 5000)
    assert binning.trim() == 2 * MiB  # the bin's chunk, back to the pool
    assert pool.live_bytes == 0
    assert pool.trim() == pool.peak_reserved_bytes
    assert not hasattr(mr.FaultyMemoryResource(cuda()), "trim")


def test_a_free_with_a_wrong_size_is_refused():
    binning = mr.BinningMemoryResource(mr.PoolMemoryResource(mr.VmmMemoryResource()), 8, 20)
    ptr = binning.allocate(29624)
    with pytest.raises(gpumem.GpumemError, match="GPUMEM_ERR_MISUSE"):
        binning.deallocate(ptr, 2 * MiB)
    assert binning.live_bytes == 29624
    binning.deallocate(ptr, 29624)


def test_trim_is_for_suballocators_and_what_is_over_them():
    with pytest.raises(gpumem.GpumemError, match="'cuda' resource keeps no free memory"):
        gpumem._lib.resource_trim(cuda())


def test_pool_over_vmm_needs_no_initial_size():
    pool = mr.PoolMemoryResource(mr.VmmMemoryResource(reserve_size="1GiB"))
    assert pool.spec == "pool(vmm(reserve=1073741824, piece=33554432), initial=0, max=0)"
    assert pool.reserved_bytes == 0
    ptrs = [pool.allocate(3 * MiB) for _ in range(4)]
    assert pool.live_bytes == 12 * MiB
    assert pool.reserved_bytes >= 12 * MiB
    for ptr in ptrs:
        pool.deallocate(ptr, 3 * MiB)
    assert pool.live_count == 0


def test_pool_trim_unmaps_free_pieces_inside_a_growth_step():
    pool = mr.PoolMemoryResource(mr.VmmMemoryResource(piece_size="2MiB"))
    whole = pool.allocate(10 * MiB)
    pool.deallocate(whole, 10 * MiB)
    front, middle, back = pool.allocate(MiB), pool.allocate(8 * MiB), pool.allocate(MiB)
    pool.deallocate(middle, 8 * MiB)
    assert pool.trim() == 6 * MiB, "the whole 2 MiB pieces between the live blocks"
    assert pool.reserved_bytes == 4 * MiB
    pool.deallocate(front, MiB)
    pool.deallocate(back, MiB)
    assert pool.trim() == 4 * MiB
    assert pool.reserved_bytes == 0


def test_pool_over_managed_memory():
    pool = mr.PoolMemoryResource(mr.ManagedMemoryResource(), initial_pool_size="2MiB",
                                 maximum_pool_size="8MiB")
    assert pool.spec == "pool(managed(prefetch=false), initial=2097152, max=8388608)"
    buf = gpumem.DeviceBuffer.to_device(b"managed pool", mr=pool)
    assert buf.tobytes() == b"managed pool"
    assert pool.live_count == 1


# ---- arena ---------------------------------------------------------------------------------

def test_arena_allocates_from_its_global_pool():
    arena = mr.ArenaMemoryResource(cuda(), arena_size="16MiB", superblock_size="1MiB")
    assert arena.spec == "arena(cuda, size=16777216, max=0, superblock=1048576)"
    assert arena.reserved_bytes == 16 * MiB
    small = [arena.allocate(1000) for _ in range(50)]
    large = arena.allocate(4 * MiB)  # a quarter superblock or more: the global pool
    assert arena.live_count == 51
    assert arena.live_bytes == 50 * 1000 + 4 * MiB
    assert arena.reserved_bytes == 16 * MiB
    for ptr in small:
        arena.deallocate(ptr, 1000)
    arena.deallocate(large, 4 * MiB)
    assert arena.live_count == 0


# ---- fixed size ----------------------------------------------------------------------------

def test_fixed_size_takes_blocks_in_batches():
    upstream = cuda()
    fixed = mr.FixedSizeMemoryResource(upstream, block_size=4096, blocks_to_preallocate=8)
    assert fixed.reserved_bytes == 0, "nothing is taken before the first allocation"
    ptrs = [fixed.allocate(size) for size in (1, 100, 4096)]
    assert fixed.reserved_bytes == 8 * 4096
    assert upstream.live_count == 1
    assert len(set(ptrs)) == 3
    ptrs += [fixed.allocate(10) for _ in range(6)]  # the ninth block: a second batch
    assert fixed.reserved_bytes == 16 * 4096
    assert upstream.live_count == 2
    for ptr, size in zip(ptrs, [1, 100, 4096] + [10] * 6):
        fixed.deallocate(ptr, size)
    assert fixed.live_count == 0


def test_fixed_size_refuses_requests_larger_than_a_block():
    fixed = mr.FixedSizeMemoryResource(cuda(), block_size=4096)
    with pytest.raises(gpumem.OutOfMemoryError, match="larger than the resource's block size"):
        fixed.allocate(4097)
    assert fixed.live_count == 0


# ---- binning -------------------------------------------------------------------------------

def test_binning_routes_requests_by_size():
    upstream = cuda()
    binning = mr.BinningMemoryResource(upstream)
    medium_bin = mr.FixedSizeMemoryResource(cuda(), block_size=64 << 10, blocks_to_preallocate=4)
    binning.add_bin(64 << 10, medium_bin)
    binning.add_bin(1024)  # a fixed-size bin over the upstream
    assert binning.bin_mrs == [medium_bin]

    medium = binning.allocate(50000)
    assert medium_bin.live_count == 1
    assert upstream.live_count == 0

    small = binning.allocate(500)
    assert medium_bin.live_count == 1
    assert upstream.live_count == 1, "the 1 KiB bin took a batch from the upstream"
    batch = upstream.live_bytes

    large = binning.allocate(MiB)
    assert upstream.live_bytes == batch + MiB, "past the largest bin: the upstream itself"
    assert binning.live_bytes == 50000 + 500 + MiB

    binning.deallocate(medium, 50000)
    binning.deallocate(small, 500)
    binning.deallocate(large, MiB)
    assert medium_bin.live_count == 0
    assert binning.live_count == 0
    assert upstream.live_bytes == batch, "only the bin's batch stays"


def test_binning_with_exponents_makes_power_of_two_bins():
    upstream = cuda()
    binning = mr.BinningMemoryResource(upstream, min_size_exponent=10, max_size_exponent=12)
    assert binning.reserved_bytes == 0, "bins are made when first used"
    small = binning.allocate(1000)
    assert upstream.live_count == 1
    chunk = upstream.live_bytes
    large = binning.allocate(5000)  # more than 2**12: the upstream
    assert upstream.live_bytes == chunk + 5000
    binning.deallocate(small, 1000)
    binning.deallocate(large, 5000)
    assert binning.live_count == 0


def test_binning_keeps_its_bins_alive():
    binning = mr.BinningMemoryResource(cuda())
    bin_resource = mr.PoolMemoryResource(cuda(), initial_pool_size=MiB)
    bin_alive = weakref.ref(bin_resource)
    binning.add_bin(4096, bin_resource)
    del bin_resource
    gc.collect()
    assert bin_alive() is not None
    ptr = binning.allocate(4000)
    assert bin_alive().live_count == 1
    binning.deallocate(ptr, 4000)


# ---- faulty --------------------------------------------------------------------------------

def test_faulty_fails_the_chosen_allocation_once():
    faulty = mr.FaultyMemoryResource(cuda(), fail_at=2)
    first = faulty.allocate(10)
    with pytest.raises(gpumem.GpumemError, match="GPUMEM_ERR_INJECTED_FAULT.*allocation #2") as failure:
        faulty.allocate(10)
    assert not isinstance(failure.value, MemoryError), "an injected fault is not out of memory"
    third = faulty.allocate(10)
    assert faulty.live_count == 2
    faulty.deallocate(first, 10)
    faulty.deallocate(third, 10)


def test_faulty_fails_every_nth_allocation():
    faulty = mr.FaultyMemoryResource(cuda(), fail_every=3)
    outcomes, ptrs = [], []
    for _ in range(7):
        try:
            ptrs.append(faulty.allocate(10))
            outcomes.append("ok")
        except gpumem.GpumemError:
            outcomes.append("failed")
    assert outcomes == ["ok", "ok", "failed", "ok", "ok", "failed", "ok"]
    assert faulty.live_count == 5
    for ptr in ptrs:
        faulty.deallocate(ptr, 10)


# ---- upstreams stay alive ------------------------------------------------------------------

def test_pool_keeps_its_upstream_alive():
    upstream = mr.CudaMemoryResource()
    upstream_handle = upstream.handle
    pool = mr.PoolMemoryResource(upstream, initial_pool_size="1MiB")
    del upstream
    gc.collect()
    ptr = pool.allocate(4 * MiB)  # growth: the upstream is called again
    assert pool.live_count == 1
    assert pool.upstream.handle == upstream_handle
    pool.deallocate(ptr, 4 * MiB)


def test_the_c_library_keeps_an_upstream_whose_python_object_is_gone():
    upstream = mr.CudaMemoryResource()
    upstream_alive = weakref.ref(upstream)
    pool = mr.PoolMemoryResource(upstream, initial_pool_size="1MiB")
    del upstream, pool._upstream  # no Python reference left at all
    gc.collect()
    assert upstream_alive() is None
    ptr = pool.allocate(4 * MiB)
    assert pool.upstream.spec == "cuda"
    assert pool.upstream.live_bytes >= 4 * MiB
    pool.deallocate(ptr, 4 * MiB)


def test_a_chain_of_resources_lives_through_its_top():
    def build_chain():
        base = mr.ManagedMemoryResource()
        pool = mr.PoolMemoryResource(base, initial_pool_size="2MiB")
        return mr.BinningMemoryResource(mr.FaultyMemoryResource(pool, fail_at=10**6), 10, 12)

    top = build_chain()
    gc.collect()
    assert top.spec == ("binning(faulty(pool(managed(prefetch=false), initial=2097152, max=0), "
                        "fail_at=1000000, fail_every=0, status=injected), min=10, max=12)")
    buf = gpumem.DeviceBuffer.to_device(b"through four resources", mr=top)
    assert buf.tobytes() == b"through four resources"
    assert top.upstream.upstream.name == "pool"


def test_upstream_mr_is_the_python_object_given():
    upstream = mr.CudaMemoryResource()
    for resource in (mr.PoolMemoryResource(upstream, initial_pool_size="2MiB"),
                     mr.ArenaMemoryResource(upstream, arena_size="2MiB"),
                     mr.FixedSizeMemoryResource(upstream, block_size=4096),
                     mr.BinningMemoryResource(upstream),
                     mr.FaultyMemoryResource(upstream)):
        assert resource.upstream_mr is upstream
        assert resource.get_upstream() is upstream
        assert isinstance(resource, mr.UpstreamMemoryResource)
