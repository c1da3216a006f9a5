"""Numba allocating through gpumem (cuda.set_memory_manager(GpumemNumbaManager)), on a real
GPU. Numba takes a memory manager only before it first uses the GPU, so each test runs in a
fresh interpreter: a @cuda.jit kernel computes the right result on arrays whose memory
comes from gpumem, and an IPC handle of an array from a pool over CudaMemoryResource opens
in another process with the same contents. Skipped on the simulated device and where
Numba is missing or unusable."""
import pytest

pytestmark = pytest.mark.gpu

KERNEL_SCRIPT = """
import gc
import sys

import numpy as np

# numba-cuda releases that still register np.row_stack fail to compile any kernel on NumPy
# releases without it (a Numba problem, not gpumem's): give them the alias they expect.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

try:
    from numba import cuda
except Exception as error:  # missing, or not working with this numpy or CUDA
    print(f"skipped: Numba is not usable here ({type(error).__name__}: {error})")
    sys.exit(0)

import gpumem
from gpumem.allocators.numba import GpumemNumbaManager  # must import wherever Numba does

cuda.set_memory_manager(GpumemNumbaManager)  # before Numba touches the GPU
if not cuda.is_available():
    print("skipped: Numba sees no GPU")
    sys.exit(0)
pool = gpumem.mr.PoolMemoryResource(gpumem.mr.CudaMemoryResource(), initial_pool_size="64MiB")
gpumem.mr.set_current_device_resource(pool)


@cuda.jit
def scale_and_add(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


n = 100_000
x = np.arange(n, dtype=np.float32)
y = np.full(n, 0.5, dtype=np.float32)
d_x, d_y = cuda.to_device(x), cuda.to_device(y)
d_out = cuda.device_array_like(x)
print("live while arrays live:", pool.live_count)
scale_and_add[(n + 127) // 128, 128](np.float32(2.0), d_x, d_y, d_out)
print("kernel right:", bool(np.array_equal(d_out.copy_to_host(), 2 * x + y)))
del d_x, d_y, d_out
gc.collect()
print("live after:", pool.live_count)
"""

# The child process is started with "spawn": it imports this file again (as __mp_main__),
# so everything but the reader runs under the __main__ guard.
IPC_SCRIPT = """
import multiprocessing
import sys


def read_through_ipc(handle):
    with handle as array:
        return array.copy_to_host()


def main():
    try:
        from numba import cuda
    except Exception as error:
        print(f"skipped: Numba is not usable here ({type(error).__name__}: {error})")
        return
    import numpy as np

    import gpumem
    from gpumem.allocators.numba import GpumemNumbaManager
    cuda.set_memory_manager(GpumemNumbaManager)
    if not cuda.is_available():
        print("skipped: Numba sees no GPU")
        return
    pool = gpumem.mr.PoolMemoryResource(gpumem.mr.CudaMemoryResource(),
                                        initial_pool_size="64MiB")
    gpumem.mr.set_current_device_resource(pool)

    padding = cuda.device_array(1000, dtype=np.uint8)  # so the array starts inside the chunk
    values = np.arange(4096, dtype=np.int64)
    shared = cuda.to_device(values)
    handle = shared.get_ipc_handle()
    print("handle:", type(handle).__name__)
    with multiprocessing.get_context("spawn").Pool(1) as child:
        seen = child.apply(read_through_ipc, (handle,))
    print("read in another process:", bool(np.array_equal(seen, values)))
    del padding


if __name__ == "__main__":
    main()
"""


def values_after(output, prefix):
    return [line[len(prefix):].strip() for line in output.splitlines() if line.startswith(prefix)]


def test_a_kernel_computes_on_gpumem_memory(run_script):
    output = run_script(KERNEL_SCRIPT)
    live_during = int(values_after(output, "live while arrays live:")[0])
    assert live_during >= 3, output
    assert values_after(output, "kernel right:") == ["True"], output
    assert int(values_after(output, "live after:")[0]) < live_during, output


def test_ipc_handle_of_pool_memory_opens_in_another_process(run_script):
    output = run_script(IPC_SCRIPT)
    assert values_after(output, "handle:") == ["IpcArrayHandle"], output
    assert values_after(output, "read in another process:") == ["True"], output
