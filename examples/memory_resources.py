"""MemoryResource objects, as in RMM's Python user guide, with gpumem in place of rmm.

Shows: the default resource (cudaMalloc-style memory); making ManagedMemoryResource the
current device resource; a PoolMemoryResource with an initial size of 1 GiB and a maximum
of 4 GiB over CudaMemoryResource, and the same over ManagedMemoryResource; what a pool
reserves against what is live.

As RMM's guide warns, set a device's resource before allocating on it: memory is always
freed to the resource it came from, but code that mixes resources is harder to follow.

    python3 examples/memory_resources.py
"""
from _device import choose_backend

choose_backend()

import gpumem  # noqa: E402
import gpumem.mr  # noqa: E402

print("default resource:", gpumem.mr.get_current_device_resource().spec)

# cudaMallocManaged instead of cudaMalloc for everything allocated on this device:
gpumem.mr.set_current_device_resource(gpumem.mr.ManagedMemoryResource())
print("current resource:", gpumem.mr.get_current_device_resource().spec)

# A pool of device memory, 1 GiB up front, growing to at most 4 GiB:
pool = gpumem.mr.PoolMemoryResource(
    gpumem.mr.CudaMemoryResource(),
    initial_pool_size=2**30,
    maximum_pool_size=2**32,
)
gpumem.mr.set_current_device_resource(pool)
print("pool over cuda:", pool.spec)
buf = gpumem.DeviceBuffer(size=1000)
print(f"the pool reserves {pool.reserved_bytes} bytes; {pool.live_bytes} of them are live")
del buf

# The same over managed memory:
managed_pool = gpumem.mr.PoolMemoryResource(
    gpumem.mr.ManagedMemoryResource(),
    initial_pool_size=2**30,
    maximum_pool_size=2**32,
)
gpumem.mr.set_current_device_resource(managed_pool)
print("pool over managed memory:", managed_pool.spec)
buf = gpumem.to_device(b"in managed memory")
print("read back:", buf.tobytes().decode())
