"""Numba allocating through gpumem, as "Using RMM with Numba" in RMM's Python user guide.
Numba's External Memory Management plugin is set either from the environment,

    NUMBA_CUDA_MEMORY_MANAGER=gpumem.allocators.numba python3 script.py

or, as here, in the program before Numba first uses the GPU:

    from gpumem.allocators.numba import GpumemNumbaManager
    cuda.set_memory_manager(GpumemNumbaManager)

Shows: device arrays whose memory comes from gpumem's current resource (a pool), and a
@cuda.jit kernel computing on them. Needs a GPU and Numba; prints "skipped: ..." and exits 0
without them.

    python3 examples/numba_allocator.py
"""
import sys

from _device import choose_backend

if choose_backend() != "cuda":
    print("skipped: Numba's CUDA target needs a GPU (this run uses gpumem's simulated device)")
    sys.exit(0)

import numpy as np  # noqa: E402

# numba-cuda releases that still register np.row_stack fail to compile any kernel on NumPy
# releases without it (a Numba problem, not gpumem's): give them the alias they expect.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

try:
    from numba import cuda
except Exception as error:  # not installed, or not working with this numpy or CUDA
    print(f"skipped: Numba is not usable here ({type(error).__name__}: {error})")
    sys.exit(0)

import gpumem  # noqa: E402
from gpumem.allocators.numba import GpumemNumbaManager  # noqa: E402

cuda.set_memory_manager(GpumemNumbaManager)
gpumem.reinitialize(pool_allocator=True)
pool = gpumem.mr.get_current_device_resource()


@cuda.jit
def add(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + y[i]


n = 1 << 16
x = cuda.to_device(np.arange(n, dtype=np.float32))
y = cuda.to_device(np.ones(n, dtype=np.float32))
out = cuda.device_array(n, dtype=np.float32)
add[(n + 255) // 256, 256](x, y, out)
print("x + 1 right:", bool(np.array_equal(out.copy_to_host(), np.arange(n) + 1)))
print("Numba arrays in gpumem's pool:", pool.live_count)
