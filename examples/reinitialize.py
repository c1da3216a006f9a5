"""gpumem.reinitialize, as rmm.reinitialize: one call sets up the current resource of one or
several devices.

Shows: what each combination of pool_allocator and managed_memory builds (printed as the
resource's spec), sizes given as ints or strings ("1GiB", "50%" of the device's memory),
several devices at once (all of them get their resource, or none does), is_initialized
(true from the start, as RMM's: the default resource counts) and the class of the resource
reinitialize builds.

    python3 examples/reinitialize.py
"""
from _device import choose_backend

choose_backend()

import gpumem  # noqa: E402
import gpumem.mr  # noqa: E402


def current():
    return gpumem.mr.get_current_device_resource().spec


print("is_initialized before:", gpumem.is_initialized())

gpumem.reinitialize(pool_allocator=True)  # a pool that grows in place: no initial size
print("pool_allocator=True:", current())
print("its class:", type(gpumem.mr.get_current_device_resource()).__name__)

gpumem.reinitialize(pool_allocator=True, initial_pool_size="256MiB", maximum_pool_size="50%")
print("with sizes:", current())

gpumem.reinitialize(managed_memory=True)  # data larger than the GPU
print("managed_memory=True:", current())

gpumem.reinitialize(pool_allocator=True, managed_memory=True, initial_pool_size=2**28)
print("both:", current())

gpumem.reinitialize()  # back to cudaMalloc-style memory
print("neither:", current())

try:
    gpumem.reinitialize(pool_allocator=True, devices=[0, 1])
    for device in (0, 1):
        print(f"device {device}:", gpumem.mr.get_per_device_resource(device).spec)
except gpumem.InvalidArgumentError as error:  # a single GPU: nothing was changed
    print("devices=[0, 1] refused:", str(error).splitlines()[0])

print("is_initialized after:", gpumem.is_initialized())
