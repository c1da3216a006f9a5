"""CuPy allocating through gpumem, as "Using RMM with CuPy" in RMM's Python user guide:

    from gpumem.allocators.cupy import gpumem_cupy_allocator
    cupy.cuda.set_allocator(gpumem_cupy_allocator)

Shows: every CuPy array then takes its memory from gpumem's current resource (here the pool
gpumem.reinitialize builds), on CuPy's current stream, and gives it back when freed.
Needs a GPU and CuPy; prints "skipped: ..." and exits 0 without them.

    python3 examples/cupy_allocator.py
"""
import sys

from _device import choose_backend

if choose_backend() != "cuda":
    print("skipped: CuPy needs a GPU (this run uses gpumem's simulated device)")
    sys.exit(0)
try:
    import cupy
except ImportError:
    print("skipped: CuPy is not installed")
    sys.exit(0)

import gpumem  # noqa: E402
from gpumem.allocators.cupy import gpumem_cupy_allocator  # noqa: E402

gpumem.reinitialize(pool_allocator=True)
cupy.cuda.set_allocator(gpumem_cupy_allocator)
pool = gpumem.mr.get_current_device_resource()

x = cupy.arange(1_000_000, dtype=cupy.float64)
y = cupy.sqrt(x)
print("sum of 0 .. 999999:", float(x.sum()))
print("CuPy arrays in gpumem's pool:", pool.live_count)
del x, y
print("after freeing them:", pool.live_count)
