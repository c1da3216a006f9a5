"""Managed memory for data larger than the GPU, as the "Managed Memory" part of
rapids-singlecell's memory-management page, with gpumem in place of rmm:

    gpumem.reinitialize(managed_memory=True, pool_allocator=False)
    cp.cuda.set_allocator(gpumem_cupy_allocator)

Managed memory pages between host and device, so an allocation may exceed the device's
memory (at the price of speed).

Shows: on gpumem's simulated device, made small here (64 MiB; managed memory there may
reach 4 times it), an allocation of twice the device's memory, written in full and read
back, while plain device memory of that size is refused. On a real GPU the example never
asks for more managed memory than is free (that can stall the GPU): it takes at most half
of the free memory (8 GiB at most), through CuPy, and says so; oversubscription is shown on the simulated device
only. On a GPU it needs CuPy (else it prints "skipped: ...").

    python3 examples/singlecell_managed_memory.py
"""
import sys

from _device import choose_backend

backend = choose_backend(sim_memory="64MiB")  # before gpumem starts

import numpy as np  # noqa: E402

import gpumem  # noqa: E402
import gpumem.mr  # noqa: E402

MiB = 2**20


def on_the_simulated_device():
    gpumem.reinitialize(managed_memory=True, pool_allocator=False)
    print("current resource:", gpumem.mr.get_current_device_resource().spec)
    total = gpumem.mr.available_device_memory()[1]
    size = 2 * total
    print(f"device memory: {total // MiB} MiB; allocating {size // MiB} MiB of managed memory")
    data = gpumem.DeviceBuffer(size=size)  # from the current resource: managed memory
    count = size // 4
    data.copy_from_host(np.ones(count, dtype=np.float32).view(np.uint8))
    total_of_ones = data.copy_to_host().view(np.float32).sum(dtype=np.float64)
    print(f"sum of {count} ones read back: {total_of_ones:.0f}")
    try:
        gpumem.DeviceBuffer(size=size, mr=gpumem.mr.CudaMemoryResource())
        print("cudaMalloc-style memory of that size: allocated?!")
    except gpumem.OutOfMemoryError:
        print("cudaMalloc-style memory of that size: OutOfMemoryError, as expected")


def on_a_gpu():
    try:
        import cupy as cp
    except ImportError:
        print("skipped: on a GPU this example needs CuPy")
        sys.exit(0)
    from gpumem.allocators.cupy import gpumem_cupy_allocator

    gpumem.reinitialize(managed_memory=True, pool_allocator=False)
    cp.cuda.set_allocator(gpumem_cupy_allocator)
    print("current resource:", gpumem.mr.get_current_device_resource().spec)
    free = gpumem.mr.available_device_memory()[0]
    size = min(free // 2, 8 << 30)  # at most half of the free memory, and quick to fill
    print(f"GPU: {free // MiB} MiB free; allocating {size // MiB} MiB of managed memory, at most "
          "half of the free memory (oversubscription is shown on the simulated device only)")
    count = size // 4
    data = cp.ones(count, dtype=cp.float32)
    print(f"sum of {count} ones on the GPU: {float(data.sum(dtype=cp.float64)):.0f}")


if backend == "sim":
    on_the_simulated_device()
else:
    on_a_gpu()
