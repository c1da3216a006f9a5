"""gpumem under Dask: a distributed.LocalCluster of worker processes (two, one thread each),
which inherit the suite's backend through GPUMEM_DEVICE. Each worker sets up gpumem as the
README shows, with client.run(gpumem.reinitialize, ...), or through a worker plugin (which
restarted workers run again); tasks allocate gpumem.DeviceBuffers, copy data through device
memory and return what they compute from it, buffers travel between workers, and the
statistics each worker keeps are read back. Last, a program written for RMM (dask-cuda's
calls in a worker plugin: `import rmm`, then rmm.reinitialize for a pool or a managed pool,
or rmm.mr.CudaAsyncMemoryResource for rmm_async) runs under `python -m gpumem.as_rmm`, whose
GPUMEM_AS_RMM=1 gives every worker gpumem's layer as rmm.

Skipped where distributed is not installed (test.sh installs it).
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpumem
from gpumem import mr

distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

# Functions and classes of this module run in the workers, which cannot import it: they
# travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

MiB = 1 << 20
PROGRAM = Path(__file__).resolve().parents[2] / "tools" / "python" / "dask_rmm_cluster.py"


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            client.wait_for_workers(2, timeout=60)
            yield client


def reset_workers():
    for device in range(gpumem._lib.device_count()):
        mr.set_per_device_resource(device, None)


@pytest.fixture(autouse=True)
def workers_reset(request):
    """Every test starts with the workers' default resources, as the suite's do."""
    yield
    if "client" in request.fixturenames:
        request.getfixturevalue("client").run(reset_workers)


def addresses(client):
    return sorted(client.scheduler_info()["workers"])


def setup_report():
    current = mr.get_current_device_resource()
    statistics = gpumem.statistics.get_statistics()
    return {"pid": os.getpid(), "backend": gpumem.backend(), "spec": current.spec,
            "reserved_bytes": current.reserved_bytes, "live_bytes": current.live_bytes,
            "statistics": None if statistics is None else vars(statistics),
            "rmm_found": importlib.util.find_spec("rmm") is not None}


def device_sum(seed, elements):
    """A task: host data copied to device memory, copied on the device, copied back; returns
    the sum and the bytes the current resource held while both buffers were live."""
    host = np.random.default_rng(seed).integers(0, 1000, elements).astype(np.float64)
    buffer = gpumem.to_device(host.tobytes())
    copy = gpumem.DeviceBuffer(size=buffer.size)
    copy.copy_from_device(buffer)
    live = mr.get_current_device_resource().live_bytes
    return float(np.frombuffer(copy.tobytes(), dtype=np.float64).sum()), live


def expected_sum(seed, elements):
    return float(np.random.default_rng(seed).integers(0, 1000, elements).astype(np.float64).sum())


def test_workers_are_processes_on_the_suites_backend(client):
    reports = client.run(setup_report)
    assert len(reports) == 2
    pids = {report["pid"] for report in reports.values()}
    assert len(pids) == 2 and os.getpid() not in pids
    assert {report["backend"] for report in reports.values()} == {gpumem.backend()}
    if importlib.util.find_spec("rmm") is None:
        # Without GPUMEM_AS_RMM=1 no worker has a module named rmm: the layer of the last
        # test comes from that variable alone.
        assert not any(report["rmm_found"] for report in reports.values())


def test_client_run_reinitialize_gives_every_worker_a_pool(client):
    client.run(gpumem.reinitialize, pool_allocator=True, initial_pool_size="16MiB")
    client.run(gpumem.statistics.enable_statistics)
    reports = client.run(setup_report)
    for report in reports.values():
        assert report["spec"].startswith("stats(pool("), report["spec"]
        assert ", initial=16777216, max=0)" in report["spec"], report["spec"]
        assert report["reserved_bytes"] >= 16 * MiB
        assert report["statistics"]["total_count"] == 0

    elements = 64 * 1024
    workers = addresses(client)
    futures = [client.submit(device_sum, seed, elements, workers=[workers[seed % 2]], pure=False)
               for seed in range(6)]
    results = client.gather(futures)
    assert [total for total, _ in results] == [expected_sum(seed, elements) for seed in range(6)]
    # Both buffers of a task were live in the worker's gpumem pool at once.
    assert all(live >= 2 * elements * 8 for _, live in results)

    after = client.run(setup_report)
    for address in workers:
        statistics = after[address]["statistics"]
        assert statistics["total_count"] == 3 * 2, statistics  # 3 tasks, 2 buffers each
        assert statistics["total_bytes"] == 3 * 2 * elements * 8
        assert statistics["peak_bytes"] >= 2 * elements * 8
        assert statistics["current_bytes"] == 0 and after[address]["live_bytes"] == 0


def make_buffer(seed, elements):
    host = np.random.default_rng(seed).integers(0, 1000, elements).astype(np.float64)
    return gpumem.to_device(host.tobytes())


def buffer_sum(buffer):
    return float(np.frombuffer(buffer.tobytes(), dtype=np.float64).sum()), type(buffer).__name__


def test_device_buffers_travel_between_workers(client):
    client.run(gpumem.reinitialize, pool_allocator=True, initial_pool_size="8MiB")
    client.run(gpumem.statistics.enable_statistics)
    first, second = addresses(client)
    elements = 32 * 1024
    made = client.submit(make_buffer, 7, elements, workers=[first], pure=False)
    total, kind = client.submit(buffer_sum, made, workers=[second], pure=False).result()
    assert (total, kind) == (expected_sum(7, elements), "DeviceBuffer")
    statistics = client.run(gpumem.statistics.get_statistics)
    # Made in the first worker's pool; the copy that arrived in the second was allocated
    # from the second's (DeviceBuffers pickle through host bytes).
    assert statistics[first].total_bytes == elements * 8
    assert statistics[second].total_bytes == elements * 8
    assert statistics[first].current_bytes == elements * 8  # still held for `made`
    del made


class GpumemPool(distributed.WorkerPlugin):
    """Sets up gpumem in each worker when the worker starts, restarted ones included."""

    name = "gpumem-pool"

    def __init__(self, initial_pool_size):
        self.initial_pool_size = initial_pool_size

    def setup(self, worker):
        gpumem.reinitialize(pool_allocator=True, initial_pool_size=self.initial_pool_size)


def test_worker_plugin_sets_up_every_worker_and_restarted_ones(client):
    client.register_plugin(GpumemPool("4MiB"))
    try:
        before = client.run(setup_report)
        assert all(", initial=4194304, max=0)" in r["spec"] for r in before.values()), before
        client.restart()
        client.wait_for_workers(2, timeout=60)
        after = client.run(setup_report)
        assert not {r["pid"] for r in after.values()} & {r["pid"] for r in before.values()}
        assert all(", initial=4194304, max=0)" in r["spec"] for r in after.values()), after
        elements = 1024
        total, live = client.submit(device_sum, 3, elements, pure=False).result()
        assert total == expected_sum(3, elements) and live >= 2 * elements * 8
    finally:
        client.unregister_worker_plugin(GpumemPool.name)


def run_program(*arguments, as_rmm=True, timeout=120):
    command = [sys.executable] + (["-m", "gpumem.as_rmm"] if as_rmm else []) + [
        str(PROGRAM)] + list(arguments)
    environment = {k: v for k, v in os.environ.items() if k != "GPUMEM_AS_RMM"}
    return subprocess.run(command, env=environment, capture_output=True, text=True,
                          timeout=timeout)


def layer_installed_at_start():
    """Whether gpumem's .pth file is in a site directory (pip install), where a fresh
    interpreter with GPUMEM_AS_RMM=1 runs it; not where gpumem is only on PYTHONPATH."""
    probe = subprocess.run([sys.executable, "-c", "import rmm; print(rmm.__name__)"],
                           env=dict(os.environ, GPUMEM_AS_RMM="1"), capture_output=True,
                           text=True, timeout=60)
    return probe.stdout.strip() == "gpumem.rmm"


@pytest.mark.parametrize("option", [None, "--managed", "--async"])
def test_rmm_program_runs_on_gpumem_under_as_rmm(option):
    if importlib.util.find_spec("rmm") is not None:
        pytest.skip("a module named rmm is installed here; the layer never replaces it")
    if not layer_installed_at_start():
        pytest.skip("gpumem's .pth file is not installed (pip install . installs it)")
    result = run_program("--cluster", "local", "--workers", "2", "--pool-size", "64MiB",
                         "--chunks", "6", "--chunk-elements", str(64 * 1024),
                         *([option] if option else []))
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    report = json.loads(result.stdout)
    assert report["failures"] == []
    assert report["client_rmm_module"] == "gpumem.rmm"
    assert len(report["workers"]) == 2
    for worker in report["workers"].values():
        # rmm.reinitialize in the worker, through dask-cuda's call, built gpumem's pool.
        assert worker["rmm_module"] == "gpumem.rmm"
        assert Path(worker["rmm_file"]).parent == Path(gpumem.__file__).parent / "rmm"
        assert worker["GPUMEM_AS_RMM"] == "1"
        # the layer's class over gpumem's adaptor (docs/rmm-compat.md, stream arguments)
        assert worker["resource_type"] == (
            "gpumem.rmm.pylibrmm.memory_resource._memory_resource.StatisticsResourceAdaptor")
        if option == "--async":  # dask-cuda's rmm_async: rmm.mr.CudaAsyncMemoryResource
            assert worker["pool_spec"].startswith("async(")
        else:
            assert worker["pool_spec"].startswith(
                "pool(managed(" if option == "--managed" else "pool(")
            assert ", initial=67108864, max=0)" in worker["pool_spec"]
    chunk_bytes = 64 * 1024 * 8
    assert sorted(held["chunks"] for held in report["held"].values()) == [3, 3]
    for held in report["held"].values():
        assert held["live_bytes"] >= 3 * chunk_bytes
        assert held["statistics"]["current_count"] == 3
    expected = sum(float(((np.arange(64 * 1024) % 97) * (i + 1)).sum()) for i in range(6))
    assert report["total"] == expected
    assert report["combine_live_bytes"] >= 6 * chunk_bytes
    assert all(after["live_bytes"] == 0 for after in report["after"].values())


def test_layer_at_interpreter_start_touches_no_device():
    # A Dask nanny sets the worker's environment (dask-cuda: CUDA_VISIBLE_DEVICES) after the
    # worker's interpreter has started and run gpumem's .pth file: the layer must not have
    # chosen a backend or opened a device by then (select_backend fails once one is in use).
    if not layer_installed_at_start():
        pytest.skip("gpumem's .pth file is not installed (pip install . installs it)")
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; loaded = 'gpumem' in sys.modules; import gpumem; "
         f"gpumem.select_backend({gpumem.backend()!r}); print(loaded)"],
        env=dict(os.environ, GPUMEM_AS_RMM="1"), capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "True"  # the layer was installed at start, yet no device


def test_rmm_program_without_as_rmm_finds_no_rmm():
    if importlib.util.find_spec("rmm") is not None:
        pytest.skip("a module named rmm is installed here")
    result = run_program("--chunks", "1", as_rmm=False, timeout=60)
    assert result.returncode != 0
    assert "No module named 'rmm'" in result.stderr
