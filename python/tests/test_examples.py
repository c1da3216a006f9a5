"""Runs every script in examples/ in its own interpreter, on the suite's backend, and checks
that it exits with status 0 and prints what it should. An example that needs CuPy, Numba,
PyTorch or a GPU must print "skipped: ..." exactly where those are missing, and run
everywhere else."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gpumem
from gpumem import mr

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BACKEND = gpumem.backend()


def expected_lines(name):
    """Regular expressions, each of which some line of the example's output must match."""
    total = mr.available_device_memory(0)[1]
    sim = BACKEND == "sim"
    return {
        "device_buffer.py": [
            r"buf\.size: 100", r"buf\.ptr: 0x[0-9a-f]+", r"to_device size: 24",
            r"back on the host: \[1\. 2\. 3\.\]", r"after resize to 48 bytes: \[1\. 2\. 3\.\]",
        ],
        "memory_resources.py": [
            r"default resource: \S+", r"current resource: managed\(prefetch=false\)",
            r"pool over cuda: pool\(cuda, initial=1073741824, max=4294967296\)",
            r"the pool reserves 1073741824 bytes; 1000 of them are live",
            r"pool over managed memory: pool\(managed\(prefetch=false\), initial=1073741824, "
            r"max=4294967296\)",
            r"read back: in managed memory",
        ],
        "reinitialize.py": [
            r"is_initialized before: True", r"pool_allocator=True: pool\((vmm\(reserve=\d+, piece=\d+\)|cuda), initial=0, max=0\)",
            r"its class: PoolMemoryResource",
            rf"with sizes: pool\((vmm\(reserve=\d+, piece=\d+\)|cuda), initial=268435456, "
            rf"max={total // 2}\)",
            r"managed_memory=True: managed\(prefetch=false\)",
            r"both: pool\(managed\(prefetch=false\), initial=268435456, max=0\)",
            r"neither: cuda",
            r"device 1: pool\(.*\)|devices=\[0, 1\] refused: .*device 1 does not exist.*",
            r"is_initialized after: True",
        ],
        "fixed_size_and_binning.py": [
            r"fixed_size: 3 blocks live, 16 MiB taken from the pool",
            r"4 MiB bin: 1 allocation\(s\)", r"binning: 5 live allocations, 13503100 bytes",
            r"the pool under it all: pool\(cuda, initial=67108864, max=0\)",
        ],
        "cupy_allocator.py": [
            r"sum of 0 \.\. 999999: 499999500000\.0",
            r"CuPy arrays in gpumem's pool: ([2-9]|\d\d+)", r"after freeing them: \d+",
        ],
        "numba_allocator.py": [
            r"x \+ 1 right: True", r"Numba arrays in gpumem's pool: ([3-9]|\d\d+)",
        ],
        "torch_allocator.py": [
            r"step 0: loss \d+\.\d+", r"step 4: loss \d+\.\d+",
            r"tensors in gpumem's pool: [1-9]\d*",
        ],
        "singlecell_managed_memory.py": [r"current resource: managed\(prefetch=false\)"] + ([
            r"device memory: 64 MiB; allocating 128 MiB of managed memory",
            r"sum of (\d+) ones read back: \1",
            r"cudaMalloc-style memory of that size: OutOfMemoryError, as expected",
        ] if sim else [
            r"GPU: \d+ MiB free; allocating \d+ MiB of managed memory, at most half of the "
            r"free memory \(oversubscription is shown on the simulated device only\)",
            r"sum of (\d+) ones on the GPU: \1",
        ]),
        "singlecell_pool.py": [
            r"arrays: (CuPy arrays|DeviceBuffers)", r"resource: cuda",
            r"resource: pool\(.*\)", r"  [\d.]+ us per allocation",
            r"  [\d.]+ us per allocation \([\d.]+ times as fast\)",
            r"the pool keeps \d+ MiB for reuse; at most \d+ MiB were live at once",
        ],
    }[name]


def importable(module):
    result = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
    return result.returncode == 0


def may_skip(name):
    """Why the example may print "skipped: ...", or None where it must run."""
    framework = {"cupy_allocator.py": "cupy", "numba_allocator.py": "numba.cuda",
                 "torch_allocator.py": "torch", "singlecell_managed_memory.py": "cupy"}.get(name)
    if framework is None:
        return None
    if BACKEND == "sim":
        return None if name == "singlecell_managed_memory.py" else "no GPU"
    return None if importable(framework) else f"{framework} cannot be imported"


def example_names():
    return sorted(path.name for path in EXAMPLES.glob("*.py") if not path.name.startswith("_"))


def test_every_example_has_expectations():
    names = example_names()
    assert len(names) >= 9
    for name in names:
        assert expected_lines(name), name


def test_every_example_opens_with_what_it_shows():
    for name in example_names():
        source = (EXAMPLES / name).read_text()
        header = source.split('"""')[1] if source.startswith('"""') else ""
        assert "Shows:" in header, f"{name} has no header saying what it shows"


@pytest.mark.parametrize("name", example_names())
def test_example(name):
    result = subprocess.run([sys.executable, str(EXAMPLES / name)], env=dict(os.environ),
                            capture_output=True, text=True, timeout=600)
    output = result.stdout
    assert result.returncode == 0, f"{name} failed:\n{output}\n{result.stderr}"
    lines = output.splitlines()
    assert lines and lines[0].startswith(f"backend: {BACKEND}"), output

    skipped = [line for line in lines if line.startswith("skipped: ")]
    reason = may_skip(name)
    if reason is not None:
        assert skipped, f"{name} should have skipped ({reason}):\n{output}"
        return
    assert not skipped, f"{name} skipped where it should run:\n{output}"
    for pattern in expected_lines(name):
        assert any(re.fullmatch(pattern, line) for line in lines), (
            f"{name}: no line matches {pattern!r} in:\n{output}")
