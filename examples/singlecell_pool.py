"""The pool allocator for speed, as the "Pool Allocator" part of rapids-singlecell's
memory-management page, with gpumem in place of rmm:

    gpumem.reinitialize(managed_memory=False, pool_allocator=True)
    cp.cuda.set_allocator(gpumem_cupy_allocator)

Shows: the same allocation loop (arrays of mixed sizes, 64 alive at a time, as analysis
code makes them) timed with cudaMalloc-style memory and with the pool, and that the pool
keeps what it took from the device for reuse. With CuPy on a GPU the arrays are CuPy
arrays; elsewhere they are DeviceBuffers. On the simulated device the times measure
gpumem's host-side work only, not a GPU's.

    python3 examples/singlecell_pool.py
"""
import random
import time

from _device import choose_backend

backend = choose_backend()

import gpumem  # noqa: E402
import gpumem.mr  # noqa: E402

cupy = None
if backend == "cuda":
    try:
        import cupy

        from gpumem.allocators.cupy import gpumem_cupy_allocator

        cupy.cuda.set_allocator(gpumem_cupy_allocator)
    except ImportError:
        cupy = None


def make_array(nbytes):
    if cupy is not None:
        return cupy.empty(nbytes, dtype=cupy.uint8)
    return gpumem.DeviceBuffer(size=nbytes)


def allocation_loop(steps=3000, window=64):
    """Microseconds per allocation (and the free of the array it replaces)."""
    rng = random.Random(1)
    sizes = [rng.choice([rng.randint(256, 64 << 10), rng.randint(64 << 10, 4 << 20)])
             for _ in range(steps)]
    live = [None] * window
    start = time.perf_counter()
    for step, nbytes in enumerate(sizes):
        live[step % window] = make_array(nbytes)
    elapsed = time.perf_counter() - start
    if cupy is not None:
        cupy.cuda.get_current_stream().synchronize()
    return elapsed / steps * 1e6


print("arrays:", "CuPy arrays" if cupy is not None else "DeviceBuffers")

gpumem.reinitialize(managed_memory=False, pool_allocator=False)
print("resource:", gpumem.mr.get_current_device_resource().spec)
plain = allocation_loop()
print(f"  {plain:.2f} us per allocation")

gpumem.reinitialize(managed_memory=False, pool_allocator=True)
pool = gpumem.mr.get_current_device_resource()
print("resource:", pool.spec)
pooled = allocation_loop()
print(f"  {pooled:.2f} us per allocation ({plain / pooled:.1f} times as fast)")
print(f"the pool keeps {pool.reserved_bytes / 2**20:.0f} MiB for reuse; at most "
      f"{pool.peak_live_bytes / 2**20:.0f} MiB were live at once")
if backend == "sim":
    print("(simulated device: the times are gpumem's host-side work, not a GPU's)")
