"""gpumem's own API where RMM's Python code meets it: sizes as RMM's parse_bytes reads them
(and gpumem's percentages), reinitialize hooks, the classes' names, argument order and
upstream keywords, the exceptions RMM's callers catch, and messages that say only what
went wrong in the call that failed."""
import inspect

import pytest

import gpumem
from gpumem import mr

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


# ---- sizes -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, size", [
    ("4096", 4096), ("2kb", 2000), ("2kib", 2 * KiB), ("2KiB", 2 * KiB), ("2KB", 2000),
    ("1 GiB", GiB), ("1\tGiB", GiB), ("1.5GB", 1_500_000_000), ("1.5 MiB", 3 * MiB // 2),
    ("7b", 7), ("7 B", 7), ("2.", 2), ("3tb", 3 * 10**12), ("1pib", 1 << 50),
    ("123456789012345678901", 123456789012345678901), (4096, 4096), (0, 0),
])
def test_sizes_as_rmm_reads_them(text, size):
    assert mr.parse_bytes(text) == size


def test_percentages_of_the_devices_memory():
    total = mr.available_device_memory(0)[1]
    assert mr.parse_bytes("50%") == total // 2
    assert mr.parse_bytes("12.5 %", 0) == total // 8


@pytest.mark.parametrize("text", [
    "2k", "8k", "1G", "", "MiB", "1 GiBs", " 1GiB", "1GiB ", "-1", "1e9", "lots", "101%",
    "1..5GB", "0x10",
])
def test_what_is_not_a_size_is_a_value_error(text):
    with pytest.raises(ValueError) as failure:
        mr.parse_bytes(text)
    assert isinstance(failure.value, gpumem.InvalidArgumentError)
    assert repr(text) in str(failure.value)


def test_a_negative_int_is_refused():
    with pytest.raises(gpumem.InvalidArgumentError, match="must not be negative: -5"):
        mr.parse_bytes(-5)


def test_constructors_read_sizes_as_parse_bytes_does():
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="2 mib",
                                 maximum_pool_size="4.5MB")
    assert pool.spec == "pool(cuda, initial=2097152, max=4500000)"
    with pytest.raises(ValueError, match="Could not parse '2m' as a size"):
        mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="2m")


# ---- reinitialize ------------------------------------------------------------------------

def test_reinitialize_with_sizes_below_a_granule_builds_a_pool_over_cuda():
    gpumem.reinitialize(pool_allocator=True, initial_pool_size="2kib", maximum_pool_size="8kib")
    current = mr.get_current_device_resource()
    assert current.spec == "pool(cuda, initial=2048, max=8192)"
    assert type(current) is mr.PoolMemoryResource
    assert current.pool_size() == 2048
    buffer = gpumem.DeviceBuffer(size=4000)
    with pytest.raises(MemoryError):
        gpumem.DeviceBuffer(size=8 * KiB)
    del buffer


def test_a_bad_size_string_leaves_the_resource_as_it_was(pool):
    mr.set_current_device_resource(pool)
    with pytest.raises(ValueError, match="Could not parse '2k' as a size"):
        gpumem.reinitialize(pool_allocator=True, initial_pool_size="2k", maximum_pool_size="8k")
    assert mr.get_current_device_resource() is pool


def test_an_initial_size_over_the_maximum_is_a_runtime_and_value_error():
    with pytest.raises(RuntimeError) as failure:
        gpumem.reinitialize(pool_allocator=True, initial_pool_size=2048, maximum_pool_size=1024)
    assert isinstance(failure.value, ValueError)
    # RMM's words, and the sizes
    assert "Initial pool size exceeds the maximum pool size (2048 > 1024 bytes)" in str(
        failure.value)


def test_a_failure_after_another_says_only_what_went_wrong():
    with pytest.raises(gpumem.InvalidArgumentError):
        gpumem.reinitialize(pool_allocator=True, initial_pool_size=2048, maximum_pool_size=1024)
    with pytest.raises(MemoryError, match=r"allocating 1 EiB \(1152921504606846976 B\)"):
        mr.CudaMemoryResource().allocate(1 << 60)
    with pytest.raises(MemoryError) as failure:  # a pool over vmm cannot stay under 8 KiB
        mr.PoolMemoryResource(mr.VmmMemoryResource(), initial_pool_size="2kib",
                              maximum_pool_size="8kib")
    message = str(failure.value)
    assert "taking the initial 2048 bytes: the pool has reached its maximum size" in message
    assert "EiB" not in message and "from cuda" not in message


def hook_calls():
    calls = []
    return calls, (lambda *args, **kwargs: calls.append((args, kwargs)))


@pytest.fixture
def hooks():
    """Registers hooks for a test and removes them after it."""
    registered = []

    def register(func, *args, **kwargs):
        registered.append(func)
        return gpumem.register_reinitialize_hook(func, *args, **kwargs)

    yield register
    for func in registered:
        gpumem.unregister_reinitialize_hook(func)


def test_hooks_run_before_reinitialize_last_registered_first(hooks, pool):
    seen = []
    mr.set_current_device_resource(pool)

    def first():
        seen.append(("first", mr.get_current_device_resource() is pool))

    assert hooks(first) is first
    hooks(lambda x, y=0: seen.append((x, y)), 2, y=3)
    hooks(lambda: seen.append("last"))
    gpumem.reinitialize()
    assert seen == ["last", (2, 3), ("first", True)], "before the resource is replaced"


def test_a_hook_registered_twice_runs_twice_and_unregistering_removes_both(hooks):
    seen = []

    def record(x):
        seen.append(x)

    hooks(record, 1)
    hooks(lambda: seen.append("other"))
    hooks(record, 3)
    gpumem.reinitialize()
    assert seen == [3, "other", 1]
    gpumem.unregister_reinitialize_hook(record)
    seen.clear()
    gpumem.reinitialize()
    assert seen == ["other"]
    gpumem.unregister_reinitialize_hook(record)  # not registered: nothing happens


def test_a_failing_hook_stops_reinitialize(hooks, pool):
    mr.set_current_device_resource(pool)

    def fail():
        raise KeyError("hook")

    hooks(fail)
    with pytest.raises(KeyError, match="hook"):
        gpumem.reinitialize(pool_allocator=True)
    assert mr.get_current_device_resource() is pool


# ---- classes and arguments ---------------------------------------------------------------

def test_rmm_class_and_function_names():
    assert mr.DeviceMemoryResource is mr.MemoryResource
    assert mr.UpstreamResourceAdaptor is mr.UpstreamMemoryResource
    pinned = mr.PinnedHostMemoryResource()
    assert isinstance(pinned, mr.DeviceMemoryResource)
    assert not isinstance(pinned, mr.UpstreamResourceAdaptor)
    assert isinstance(mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=MiB),
                      mr.UpstreamResourceAdaptor)
    for name in ("DeviceMemoryResource", "UpstreamResourceAdaptor", "parse_bytes",
                 "get_current_device_resource_type", "get_per_device_resource_type",
                 "is_initialized"):
        assert name in mr.__all__
    assert "register_reinitialize_hook" in gpumem.__all__
    rmm_mr_names = ["ArenaMemoryResource", "BinningMemoryResource", "CallbackMemoryResource",
                    "CudaAsyncMemoryResource", "CudaAsyncViewMemoryResource",
                    "CudaMemoryResource", "DeviceMemoryResource",
                    "FailureCallbackResourceAdaptor", "FixedSizeMemoryResource",
                    "LimitingResourceAdaptor", "LoggingResourceAdaptor",
                    "ManagedMemoryResource", "PinnedHostMemoryResource", "PoolMemoryResource",
                    "PrefetchResourceAdaptor", "StatisticsResourceAdaptor",
                    "SystemMemoryResource", "TrackingResourceAdaptor",
                    "UpstreamResourceAdaptor", "available_device_memory", "disable_logging",
                    "enable_logging", "get_current_device_resource",
                    "get_current_device_resource_type", "get_log_filenames",
                    "get_per_device_resource", "get_per_device_resource_type",
                    "is_initialized", "set_current_device_resource",
                    "set_per_device_resource"]
    assert [name for name in rmm_mr_names if name not in mr.__all__] == []
    assert "unregister_reinitialize_hook" in gpumem.__all__


# RMM 26.06's parameters of each class, in order, with their defaults (gpumem's may go on
# after them).
RMM_PARAMETERS = {
    "CudaMemoryResource": [],
    "ManagedMemoryResource": [],
    "PinnedHostMemoryResource": [],
    "SystemMemoryResource": [],
    "CudaAsyncMemoryResource": [("initial_pool_size", None), ("release_threshold", None),
                                ("enable_ipc", False), ("enable_fabric", False)],
    "PoolMemoryResource": [("upstream_mr", inspect.Parameter.empty),
                           ("initial_pool_size", None), ("maximum_pool_size", None)],
    "ArenaMemoryResource": [("upstream_mr", inspect.Parameter.empty), ("arena_size", None),
                            ("dump_log_on_failure", False)],
    "FixedSizeMemoryResource": [("upstream_mr", inspect.Parameter.empty),
                                ("block_size", 1 << 20), ("blocks_to_preallocate", 128)],
    "BinningMemoryResource": [("upstream_mr", inspect.Parameter.empty),
                              ("min_size_exponent", -1), ("max_size_exponent", -1)],
    "CallbackMemoryResource": [("allocate_func", inspect.Parameter.empty),
                               ("deallocate_func", inspect.Parameter.empty)],
    "LimitingResourceAdaptor": [("upstream_mr", inspect.Parameter.empty),
                                ("allocation_limit", inspect.Parameter.empty)],
    "LoggingResourceAdaptor": [("upstream_mr", inspect.Parameter.empty),
                               ("log_file_name", None)],
    "StatisticsResourceAdaptor": [("upstream_mr", inspect.Parameter.empty)],
    "TrackingResourceAdaptor": [("upstream_mr", inspect.Parameter.empty),
                                ("capture_stacks", False)],
    "FailureCallbackResourceAdaptor": [("upstream_mr", inspect.Parameter.empty),
                                       ("callback", inspect.Parameter.empty)],
    "PrefetchResourceAdaptor": [("upstream_mr", inspect.Parameter.empty)],
}


@pytest.mark.parametrize("name", sorted(RMM_PARAMETERS))
def test_parameters_in_rmms_order_with_rmms_defaults(name):
    parameters = list(inspect.signature(getattr(mr, name)).parameters.values())
    positional = [(p.name, p.default) for p in parameters
                  if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    expected = RMM_PARAMETERS[name]
    assert positional[:len(expected)] == expected


def test_an_async_resources_device_is_a_keyword():
    parameters = inspect.signature(mr.CudaAsyncMemoryResource).parameters
    assert parameters["device"].kind is inspect.Parameter.KEYWORD_ONLY


UPSTREAM_CLASSES = [
    lambda up: mr.PoolMemoryResource(upstream=up, initial_pool_size=MiB),
    lambda up: mr.ArenaMemoryResource(upstream=up, arena_size=4 * MiB),
    lambda up: mr.FixedSizeMemoryResource(upstream=up, block_size=64 * KiB,
                                          blocks_to_preallocate=2),
    lambda up: mr.BinningMemoryResource(upstream=up),
    lambda up: mr.LimitingResourceAdaptor(upstream=up, allocation_limit=MiB),
    lambda up: mr.StatisticsResourceAdaptor(upstream=up),
    lambda up: mr.TrackingResourceAdaptor(upstream=up),
    lambda up: mr.FailureCallbackResourceAdaptor(upstream=up, callback=lambda n: False),
    lambda up: mr.PrefetchResourceAdaptor(upstream=up),
    lambda up: mr.AlignedResourceAdaptor(upstream=up, alignment=4096),
    lambda up: mr.FaultyMemoryResource(upstream=up),
]


@pytest.mark.parametrize("make", UPSTREAM_CLASSES)
def test_every_adaptor_takes_upstream_as_a_keyword(make):
    upstream = mr.CudaMemoryResource()
    resource = make(upstream)
    assert resource.upstream_mr is upstream and resource.get_upstream() is upstream
    ptr = resource.allocate(1000)
    resource.deallocate(ptr, 1000)


def test_the_upstream_keyword_of_rmms_older_examples():
    pool = mr.PoolMemoryResource(upstream=mr.CudaMemoryResource(), initial_pool_size=2**30,
                                 maximum_pool_size=2**32)
    assert pool.spec == "pool(cuda, initial=1073741824, max=4294967296)"
    assert pool.pool_size() == 2**30


def test_an_upstream_given_twice_or_none_is_a_type_error():
    cuda = mr.CudaMemoryResource()
    with pytest.raises(TypeError, match="got both upstream_mr and upstream"):
        mr.PoolMemoryResource(cuda, upstream=cuda)
    with pytest.raises(TypeError, match="got both upstream_mr and upstream"):
        mr.StatisticsResourceAdaptor(upstream_mr=cuda, upstream=cuda)
    for call in (lambda: mr.PoolMemoryResource(None), lambda: mr.PoolMemoryResource(upstream=None),
                 lambda: mr.LimitingResourceAdaptor(None, 10)):
        with pytest.raises(TypeError, match="upstream_mr must be a memory resource, not None"):
            call()
    with pytest.raises(TypeError):
        mr.PoolMemoryResource()


def test_an_async_resource_exports_one_kind_of_handle():
    with pytest.raises(gpumem.InvalidArgumentError, match="not both"):
        mr.CudaAsyncMemoryResource(enable_ipc=True, enable_fabric=True)
    assert mr.CudaAsyncMemoryResource(None, None, False, False, device=0).device == 0


def test_pool_size_counts_free_and_allocated_bytes():
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="2MiB")
    assert pool.pool_size() == 2 * MiB
    ptr = pool.allocate(3 * MiB)  # grows
    assert pool.pool_size() == pool.reserved_bytes > 2 * MiB
    pool.deallocate(ptr, 3 * MiB)
    assert pool.pool_size() == pool.reserved_bytes


# ---- exceptions --------------------------------------------------------------------------

def test_out_of_memory_is_a_memory_error_everywhere():
    for resource in (mr.CudaMemoryResource(), mr.ManagedMemoryResource(),
                     mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=MiB,
                                           maximum_pool_size=2 * MiB),
                     mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), MiB)):
        with pytest.raises(MemoryError) as failure:
            resource.allocate(1 << 60)
        assert isinstance(failure.value, gpumem.OutOfMemoryError)


def test_bad_arguments_are_value_or_type_errors():
    with pytest.raises(ValueError):
        mr.CudaMemoryResource().allocate(-1)
    with pytest.raises(TypeError):
        mr.CudaMemoryResource().allocate("ten")
    with pytest.raises(TypeError):
        mr.set_current_device_resource("not a resource")
    with pytest.raises(ValueError):
        mr.ManagedMemoryResource(advice=["nosuch"])


# ---- a driver pool of the program's ------------------------------------------------------

def test_a_view_of_an_async_resources_pool():
    owner = mr.CudaAsyncMemoryResource()
    handle = owner.pool_handle()
    assert isinstance(handle, int) and handle > 0
    view = mr.CudaAsyncViewMemoryResource(handle)
    assert view.pool_handle() == handle
    assert view.spec == f"async(pool={handle})"
    before = owner.reserved_bytes
    mr.set_current_device_resource(view)
    assert type(mr.get_current_device_resource()) is mr.CudaAsyncViewMemoryResource
    buffer = gpumem.DeviceBuffer(size=MiB)
    assert view.live_bytes == MiB == view.reserved_bytes
    assert owner.reserved_bytes >= before + MiB, "the same driver pool"
    del buffer
    assert type(mr._typed(mr.from_spec(view.spec))) is mr.CudaAsyncViewMemoryResource


class Handle:
    """A pool handle object of the kind CUDA's Python bindings give (int() reads it)."""

    def __init__(self, value):
        self.value = value

    def __int__(self):
        return self.value


def test_a_view_takes_a_handle_object_and_refuses_what_is_not_one():
    owner = mr.CudaAsyncMemoryResource()
    view = mr.CudaAsyncViewMemoryResource(Handle(owner.pool_handle()))
    ptr = view.allocate(4096)
    view.deallocate(ptr, 4096)
    for bad in ("pool", None, 0, -3):
        with pytest.raises(ValueError, match="pool_handle"):
            mr.CudaAsyncViewMemoryResource(bad)
    with pytest.raises(gpumem.InvalidArgumentError, match="not an async resource"):
        gpumem._lib.async_pool_handle(mr.CudaMemoryResource())


@pytest.mark.sim
def test_a_view_of_a_pool_the_driver_does_not_know_is_refused():
    with pytest.raises(gpumem.InvalidArgumentError, match="driver pool"):
        mr.CudaAsyncViewMemoryResource(12345)


def test_logging_functions_in_mr_too(tmp_path):
    mr.enable_logging(str(tmp_path / "log.csv"))
    assert mr.get_log_filenames()[0] == str(tmp_path / "log.dev0.csv")
    assert gpumem.get_log_filenames() == mr.get_log_filenames()
    mr.disable_logging()
    assert mr.get_log_filenames()[0] is None
