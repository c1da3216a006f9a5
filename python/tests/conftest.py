"""Shared set-up of gpumem's Python test suite.

Backend: the suite runs where GPUMEM_DEVICE says. When it is unset, it runs on gpumem's
simulated device, or on the GPU when GPUMEM_TEST_GPU=1 (the GPU machine's setting). The
choice is made here, before anything imports gpumem, and the pytest header says which.

Markers:
  gpu  needs a real GPU (and usually CuPy, Numba or PyTorch): skipped on the simulated device.
  sim  needs the simulated device (its fixed capacity, its fault and hazard counters, stream
       handles it checks): skipped on a GPU.

Every test starts from the default current resource on every device: whatever a test sets
is reset after it.
"""
import os
import subprocess
import sys
import textwrap

if "GPUMEM_DEVICE" not in os.environ:
    os.environ["GPUMEM_DEVICE"] = "cuda" if os.environ.get("GPUMEM_TEST_GPU") == "1" else "sim"

import pytest

import gpumem
import gpumem.mr


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gpu: needs a real GPU (skipped on gpumem's simulated device)")
    config.addinivalue_line(
        "markers", "sim: needs gpumem's simulated device (skipped on a GPU)")


def pytest_report_header(config):
    requested = os.environ["GPUMEM_DEVICE"]
    try:
        count = gpumem._lib.device_count()
        _free, total = gpumem.mr.available_device_memory(0)
        name = gpumem._lib.device_name(0)
    except gpumem.GpumemError as error:
        return f"gpumem backend: {requested} (unusable: {error})"
    kind = "simulated device" if gpumem.backend() == "sim" else "GPU"
    return (f"gpumem backend: {gpumem.backend()} ({kind}; {count} device(s); device 0: {name}, "
            f"{total / 2**30:.1f} GiB)")


def pytest_runtest_setup(item):
    on_sim = gpumem.backend() == "sim"
    if item.get_closest_marker("gpu") and on_sim:
        pytest.skip("needs a GPU: this run uses the simulated device "
                    "(GPUMEM_TEST_GPU=1 runs the suite on the GPU)")
    if item.get_closest_marker("sim") and not on_sim:
        pytest.skip("needs the simulated device (GPUMEM_DEVICE=sim)")


def device_count():
    return gpumem._lib.device_count()


@pytest.fixture(autouse=True)
def default_current_resources():
    """Resets every device's current resource to the default after each test."""
    yield
    for device in range(device_count()):
        gpumem.mr.set_per_device_resource(device, None)


@pytest.fixture
def second_device():
    """Device 1, for tests about several devices (the simulated device has two)."""
    if device_count() < 2:
        pytest.skip("needs two devices")
    return 1


@pytest.fixture
def pool():
    """A small pool over cudaMalloc-style memory, the resource most tests allocate from."""
    return gpumem.mr.PoolMemoryResource(gpumem.mr.CudaMemoryResource(),
                                        initial_pool_size="8MiB")


@pytest.fixture
def run_script(tmp_path):
    """Runs Python source in a fresh interpreter, on the suite's backend, and returns its
    standard output. A script that prints a line starting with "skipped: " (a framework
    missing or unusable there) skips the test with that line as the reason; any other exit
    status than 0 fails it, showing the script's output."""

    def run(source, timeout=300, **env):
        path = tmp_path / "script.py"
        path.write_text(textwrap.dedent(source))
        result = subprocess.run([sys.executable, str(path)], env=dict(os.environ, **env),
                                cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
        for line in result.stdout.splitlines():
            if line.startswith("skipped: ") and result.returncode == 0:
                pytest.skip(line[len("skipped: "):])
        assert result.returncode == 0, (
            f"exit status {result.returncode}\n--- stdout\n{result.stdout}\n"
            f"--- stderr\n{result.stderr}")
        return result.stdout

    return run
