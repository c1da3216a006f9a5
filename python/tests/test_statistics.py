"""gpumem.statistics and StatisticsResourceAdaptor, with RMM's names and behaviour: the
adaptor's counters and their stack, the module's functions on the current resource (None
while statistics are off), the statistics() block, the profiler as a decorator and as a
context manager with its records and report, a "stats(...)" spec as good as the class,
threads, and bad arguments."""
import threading

import pytest

import gpumem
from gpumem import mr
from gpumem.statistics import (
    ProfilerRecords,
    Statistics,
    _get_descriptive_name_of_object,
    default_profiler_records,
    enable_statistics,
    get_statistics,
    pop_statistics,
    profiler,
    push_statistics,
    statistics,
)


def figures(counters):
    """(current, peak, total) of bytes, then of allocations."""
    return (counters.current_bytes, counters.peak_bytes, counters.total_bytes,
            counters.current_count, counters.peak_count, counters.total_count)


@pytest.fixture
def stats_mr():
    """A statistics adaptor made the current resource by the statistics() block."""
    with statistics():
        yield mr.get_current_device_resource()


def test_adaptor_counts_and_its_stack():
    adaptor = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    assert isinstance(adaptor, mr.UpstreamMemoryResource)
    assert adaptor.name == "stats"
    assert adaptor.spec == "stats(cuda, flush_bytes=1048576, flush_count=64)"
    assert adaptor.allocation_counts == Statistics(0, 0, 0, 0, 0, 0)
    old = [gpumem.DeviceBuffer(size=100, mr=adaptor) for _ in range(4)]
    assert figures(adaptor.allocation_counts) == (400, 400, 400, 4, 4, 4)
    assert figures(adaptor.push_counters()) == (400, 400, 400, 4, 4, 4)  # before the push
    assert figures(adaptor.allocation_counts) == (0, 0, 0, 0, 0, 0)
    new = gpumem.DeviceBuffer(size=30, mr=adaptor)
    del old[0], old[0]  # allocated before the push: the pushed counters go below zero
    assert figures(adaptor.allocation_counts) == (-170, 30, 30, -1, 1, 1)
    assert figures(adaptor.pop_counters()) == (-170, 30, 30, -1, 1, 1)
    assert figures(adaptor.allocation_counts) == (230, 430, 430, 3, 5, 5)
    assert adaptor.live_bytes == 230
    with pytest.raises(IndexError, match="cannot pop the last counter pair"):
        adaptor.pop_counters()
    assert figures(adaptor.allocation_counts) == (230, 430, 430, 3, 5, 5)
    del old, new
    assert adaptor.allocation_counts.current_bytes == 0


def test_functions_do_nothing_while_statistics_are_off():
    assert get_statistics() is None
    assert push_statistics() is None
    assert pop_statistics() is None
    assert get_statistics() is None
    assert mr.get_current_device_resource().name == "cuda"


def test_statistics_block_enables_then_pushes():
    before = mr.get_current_device_resource()
    with statistics():
        outer = mr.get_current_device_resource()
        assert isinstance(outer, mr.StatisticsResourceAdaptor)
        first = gpumem.DeviceBuffer(size=20)
        assert figures(get_statistics()) == (20, 20, 20, 1, 1, 1)
        with statistics():  # enabled already: fresh counters, the same resource
            assert mr.get_current_device_resource() is outer
            second = gpumem.DeviceBuffer(size=10)
            assert figures(get_statistics()) == (10, 10, 10, 1, 1, 1)
        assert figures(get_statistics()) == (30, 30, 30, 2, 2, 2)
        del first, second
        assert figures(get_statistics()) == (0, 30, 30, 0, 2, 2)
    assert mr.get_current_device_resource().handle == before.handle
    assert get_statistics() is None


def test_statistics_block_refuses_a_resource_changed_inside():
    with pytest.raises(ValueError, match="changed inside the statistics block"):
        with statistics():
            mr.set_current_device_resource(mr.CudaMemoryResource())


def test_enable_statistics_once(stats_mr):
    enable_statistics()
    enable_statistics()
    assert mr.get_current_device_resource() is stats_mr
    assert stats_mr.upstream.name == "cuda"


def test_push_and_pop_of_the_current_resource(stats_mr):
    first = gpumem.DeviceBuffer(size=10)
    second = gpumem.DeviceBuffer(size=20)
    assert figures(push_statistics()) == (30, 30, 30, 2, 2, 2)
    del first
    assert figures(pop_statistics()) == (-10, 0, 0, -1, 0, 0)
    del second
    assert figures(get_statistics()) == (0, 30, 30, 0, 2, 2)


def test_a_spec_resource_keeps_statistics_too():
    resource = mr.from_spec("stats(pool(vmm))")
    mr.set_current_device_resource(resource)
    buffers = [gpumem.DeviceBuffer(size=1000) for _ in range(3)]
    assert figures(get_statistics()) == (3000, 3000, 3000, 3, 3, 3)
    with statistics():  # pushes on it, as on a StatisticsResourceAdaptor
        assert mr.get_current_device_resource().handle == resource.handle
        buffers.pop()
        assert get_statistics().current_bytes == -1000
    assert figures(get_statistics()) == (2000, 3000, 3000, 2, 3, 3)


def test_profiler_records_calls_and_blocks(stats_mr):
    records = ProfilerRecords()
    assert records.records == {}
    assert records.report().endswith("No data, maybe profiling wasn't enabled?")

    @profiler(records=records)
    def keep_one():
        kept = gpumem.DeviceBuffer(size=10)
        gpumem.DeviceBuffer(size=10)  # freed at once
        return kept

    @profiler(records=records)
    def outer():
        first = gpumem.DeviceBuffer(size=10)

        @profiler(records=records, name="inner")
        def inner(freed):
            del freed
            return gpumem.DeviceBuffer(size=30)

        return inner(first)

    kept = [keep_one(), keep_one(), outer(), outer()]
    name = _get_descriptive_name_of_object(keep_one)
    assert name.endswith(f"({keep_one.__qualname__})")
    assert __file__ in name
    assert records.records[name] == ProfilerRecords.MemoryRecord(2, 40, 20)
    assert records.records[_get_descriptive_name_of_object(outer)] == \
        ProfilerRecords.MemoryRecord(2, 80, 40)
    assert records.records["inner"] == ProfilerRecords.MemoryRecord(2, 60, 30)

    with profiler(records=records, name="block"):
        block = [gpumem.DeviceBuffer(size=500) for _ in range(2)]
        with profiler(records=records, name="nothing allocated"):
            del block
    assert records.records["block"] == ProfilerRecords.MemoryRecord(1, 1000, 1000)
    assert records.records["nothing allocated"] == ProfilerRecords.MemoryRecord(1, 0, 0)

    report = records.report(ordered_by="memory_total").splitlines()
    assert report[:3] == ["Memory Profiling", "================", ""]
    assert "Ordered by: memory_total" in report
    rows = report[report.index("ncalls     memory_peak    memory_total  "
                               "filename:lineno(function)") + 1:]
    assert rows[0] == "     1           1,000           1,000  block"
    assert rows[-1] == "     1               0               0  nothing allocated"
    assert str(records) == records.report()
    assert repr(records).startswith("ProfilerRecords({")
    with pytest.raises(ValueError, match="cannot order by"):
        records.report(ordered_by="size")
    del kept


def test_profiler_defaults_and_misuse(stats_mr):
    @profiler()
    def allocate_ten():
        return [gpumem.DeviceBuffer(size=10) for _ in range(10)]

    allocate_ten()
    record = default_profiler_records.records[_get_descriptive_name_of_object(allocate_ten)]
    assert record.memory_peak == 100 and record.memory_total == 100
    with pytest.raises(ValueError, match="needs a name"):
        with profiler():
            pass


def test_profiler_does_nothing_while_statistics_are_off():
    records = ProfilerRecords()

    @profiler(records=records)
    def allocate():
        return gpumem.DeviceBuffer(size=10)

    allocate()
    with profiler(records=records, name="block"):
        gpumem.DeviceBuffer(size=10)
    assert records.records == {}


def test_threads_count_exactly():
    adaptor = mr.StatisticsResourceAdaptor(mr.PoolMemoryResource(mr.CudaMemoryResource(),
                                                                  initial_pool_size="64MiB"))
    kept = {}

    def work(seed):
        mine = []
        for i in range(300):
            size = 256 + (seed * 31 + i) % 4096
            mine.append((adaptor.allocate(size), size))
            if i % 3 == 2:
                adaptor.deallocate(*mine.pop(0))
        kept[seed] = mine

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts = adaptor.allocation_counts
    assert counts.total_count == 4 * 300
    assert counts.current_count == 4 * 200
    assert counts.total_bytes == sum(256 + (seed * 31 + i) % 4096 for seed in range(4)
                                     for i in range(300))
    assert counts.current_bytes == sum(size for mine in kept.values() for _, size in mine)
    for mine in kept.values():  # freed by another thread than allocated them
        for ptr, size in mine:
            adaptor.deallocate(ptr, size)
    assert adaptor.allocation_counts.current_bytes == 0
    assert adaptor.live_count == 0


def test_bad_arguments():
    with pytest.raises(TypeError):
        mr.StatisticsResourceAdaptor(None)
    with pytest.raises(ValueError, match="negative"):
        mr.StatisticsResourceAdaptor(mr.CudaMemoryResource(), flush_bytes=-1)
    with pytest.raises(ValueError, match="flush_count is past INT64_MAX"):
        mr.StatisticsResourceAdaptor(mr.CudaMemoryResource(), flush_count=2**63)
    tuned = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource(), flush_bytes="4KiB",
                                         flush_count=1)
    assert tuned.spec == "stats(cuda, flush_bytes=4096, flush_count=1)"
    with pytest.raises(gpumem.GpumemError, match="keeps no statistics"):
        gpumem._lib.statistics(mr.CudaMemoryResource(), 0)
