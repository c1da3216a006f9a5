"""Where memory goes: the report an OutOfMemoryError carries (.report, .verdict, and in its
message), mr.report(nbytes) on demand, and mr.stats() / mr.stats_json(), the resource's tree
as JSON that Python's json parses, with stable keys (docs/reports.md)."""
import json
import threading

import pytest

import gpumem
from gpumem import mr

MiB = 1 << 20

FIGURES = ["live_bytes", "live_count", "reserved_bytes", "peak_live_bytes",
           "peak_reserved_bytes", "free_bytes", "free_blocks", "largest_free_block",
           "limit_bytes", "max_reserved_bytes"]


def punched_pool():
    """A pool at its maximum of 16 MiB with two 4 MiB holes: 8 MiB free, no 8 MiB block."""
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="16MiB",
                                 maximum_pool_size="16MiB")
    ptrs = [pool.allocate(4 * MiB) for _ in range(4)]
    pool.deallocate(ptrs[0], 4 * MiB)
    pool.deallocate(ptrs[2], 4 * MiB)
    return pool, [ptrs[1], ptrs[3]]


def test_out_of_memory_error_carries_the_report_and_verdict():
    pool, live = punched_pool()
    with pytest.raises(gpumem.OutOfMemoryError) as caught:
        pool.allocate(8 * MiB)
    error = caught.value
    assert isinstance(error, MemoryError)
    assert error.verdict == "fragmentation"
    lines = error.report.splitlines()
    assert lines[0].startswith("  pool: live 8 MiB in 2, reserved 16 MiB, ")
    assert "free 8 MiB in 2 blocks, largest free block 4 MiB, maximum 16 MiB" in lines[0]
    assert lines[1].startswith("    cuda: ")
    assert lines[2].startswith("  device 0: ")
    assert lines[-1].startswith("verdict: fragmentation: pool holds 8 MiB free in 2 blocks, but "
                                "its largest free block is 4 MiB, less than the 8 MiB needed; it "
                                "could not grow: pool may hold at most 16 MiB")
    assert str(error).endswith(error.report)  # the message holds the report too
    assert str(error).startswith("GPUMEM_ERR_OUT_OF_MEMORY: out of memory: allocating 8 MiB")
    for ptr in live:
        pool.deallocate(ptr, 4 * MiB)


@pytest.mark.parametrize("build, nbytes, verdict, words", [
    (lambda: mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), MiB), 2 * MiB, "limit_reached",
     "limit allows 1 MiB, 0 B is allocated through it, and 2 MiB more was asked of it"),
    (lambda: mr.CudaMemoryResource(), 1 << 50, "device_full", "device 0 refused 1 PiB to cuda"),
    (lambda: mr.FixedSizeMemoryResource(mr.CudaMemoryResource(), block_size=1024), 2048,
     "too_large", "fixed_size can never serve 2 KiB"),
    (lambda: mr.from_spec("faulty(cuda, fail_at=1, status=out_of_memory)"), 1024, "injected",
     "faulty failed the request on purpose"),
])
def test_each_verdict(build, nbytes, verdict, words):
    resource = build()
    with pytest.raises(gpumem.OutOfMemoryError) as caught:
        resource.allocate(nbytes)
    assert caught.value.verdict == verdict
    assert words in caught.value.report.splitlines()[-1]


def test_a_device_buffer_out_of_memory_has_the_report_of_its_resource():
    with pytest.raises(gpumem.OutOfMemoryError) as caught:
        gpumem.DeviceBuffer(size=1 << 50, mr=mr.CudaMemoryResource())
    assert caught.value.verdict == "device_full"


def test_errors_without_a_report_say_none():
    error = gpumem.OutOfMemoryError("raised by hand")
    assert error.report is None and error.verdict is None
    # An out-of-memory failure with no allocation behind it (creating a pool past its
    # device) has a message but no report.
    with pytest.raises(gpumem.OutOfMemoryError) as caught:
        mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=1 << 50)
    assert caught.value.report is None and caught.value.verdict is None


def test_report_on_demand():
    pool, live = punched_pool()
    report = pool.report(8 * MiB)
    assert report.endswith("\n")
    assert report.splitlines()[-1].startswith("verdict: fragmentation: ")
    assert pool.report(4 * MiB).splitlines()[-1] == (
        "verdict: none: pool has a free block of 4 MiB for the 4 MiB the request needs")
    assert pool.report().splitlines()[-1] == "verdict: none: no request to judge"
    assert pool.report(nbytes=MiB, alignment=4 * MiB).splitlines()[-1].startswith(
        "verdict: fragmentation: ")  # the alignment counts in what the request needs
    with pytest.raises(gpumem.InvalidArgumentError, match="not a power of two"):
        pool.report(MiB, alignment=3000)
    with pytest.raises(gpumem.InvalidArgumentError, match="must not be negative"):
        pool.report(-1)
    for ptr in live:
        pool.deallocate(ptr, 4 * MiB)


def check_node(node, seen):
    """Every node carries every figure (an int, or None where unknown); references name an
    id written before."""
    if "ref" in node:
        assert node["ref"] in seen and set(node) == {"ref", "kind"}
        return
    assert node["id"] not in seen
    seen.add(node["id"])
    for key in FIGURES:
        assert node[key] is None or (isinstance(node[key], int) and node[key] >= 0), key
    assert isinstance(node["kind"], str) and isinstance(node["spec"], str)
    assert node["memory"] in ("device", "managed", "pinned_host", "host")
    if node["upstream"] is not None:
        check_node(node["upstream"], seen)
    for part in node["parts"]:
        assert part["role"] in ("bin", "global", "stream")
        check_node(part["resource"], seen)


@pytest.mark.parametrize("spec", [
    "cuda", "pool(cuda, initial=4MiB)", "binning(pool(cuda, initial=4MiB))", "arena(cuda)",
    "limit(aligned(pool(vmm)), max=1GiB)", "managed", "pinned_host",
])
def test_stats_is_json_with_every_figure(spec):
    resource = mr.from_spec(spec)
    ptr = resource.allocate(1000)
    stats = resource.stats()
    assert stats == json.loads(resource.stats_json())  # the figures stand still here
    assert stats["format"] == "gpumem.stats" and stats["version"] == 1
    assert stats["complete"] is True
    assert set(stats["device"]) == {"index", "free_bytes", "total_bytes", "gpumem_held_bytes",
                                    "held_through_resource_bytes"}
    check_node(stats["resource"], set())
    assert stats["resource"]["spec"] == resource.spec
    assert stats["resource"]["live_bytes"] == resource.live_bytes
    resource.deallocate(ptr, 1000)


def test_stats_of_bins_and_a_callback_resource():
    allocations = {}

    def allocate(nbytes, stream):
        ptr = upstream.allocate(nbytes, stream)
        allocations[ptr] = nbytes
        return ptr

    def deallocate(ptr, nbytes, stream):
        upstream.deallocate(ptr, nbytes, stream)

    upstream = mr.CudaMemoryResource()
    callback = mr.CallbackMemoryResource(allocate, deallocate)
    binning = mr.BinningMemoryResource(mr.PoolMemoryResource(callback, initial_pool_size="4MiB"),
                                       10, 12)
    ptr = binning.allocate(1024)
    stats = binning.stats()
    node = stats["resource"]
    assert node["kind"] == "binning"
    assert node["upstream"]["kind"] == "pool"
    assert node["upstream"]["upstream"]["kind"] == "callback"
    bins = node["parts"]
    assert [part["size"] for part in bins] == [1024]
    assert bins[0]["resource"]["kind"] == "fixed_size"
    assert bins[0]["resource"]["upstream"] == {"ref": node["upstream"]["id"], "kind": "pool"}
    assert "\n    bin 1 KiB: fixed_size: live 1 KiB in 1, " in binning.report()
    binning.deallocate(ptr, 1024)


def test_reports_while_threads_allocate():
    limit = mr.LimitingResourceAdaptor(mr.PoolMemoryResource(mr.CudaMemoryResource(),
                                                             initial_pool_size="8MiB"), 16 * MiB)
    stop = threading.Event()
    verdicts = set()

    def work():
        live = []
        while not stop.is_set():
            try:
                live.append(limit.allocate(3 * MiB))
            except gpumem.OutOfMemoryError as error:
                verdicts.add(error.verdict)
                for ptr in live:
                    limit.deallocate(ptr, 3 * MiB)
                live.clear()
        for ptr in live:
            limit.deallocate(ptr, 3 * MiB)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for _ in range(50):
        check_node(limit.stats()["resource"], set())
        assert "\nverdict: " in limit.report(MiB)
    stop.set()
    for thread in threads:
        thread.join()
    assert verdicts == {"limit_reached"}
    assert limit.live_count == 0
