"""gpumem: a GPU memory manager, with RMM's Python interface.

    import gpumem
    gpumem.reinitialize(pool_allocator=True)          # a pool on device 0
    buf = gpumem.DeviceBuffer(size=100)                # device memory from the current resource
    pool = gpumem.mr.PoolMemoryResource(gpumem.mr.CudaMemoryResource(), initial_pool_size="1GiB")
    gpumem.mr.set_current_device_resource(pool)

and one line each for the frameworks:

    cupy.cuda.set_allocator(gpumem.allocators.cupy.gpumem_cupy_allocator)
    numba.cuda.set_memory_manager(gpumem.allocators.numba.GpumemNumbaManager)
    torch.cuda.memory.change_current_allocator(gpumem.allocators.torch.gpumem_torch_allocator)

Without a GPU, GPUMEM_DEVICE=sim (or gpumem.select_backend("sim") before first use) runs
everything on gpumem's simulated device.
"""
from . import _lib, mr, statistics
from ._lib import (
    AllocationError,
    DeviceBuffer,
    GpumemError,
    InvalidArgumentError,
    OutOfMemoryError,
    to_device,
)
from ._rmm_alias import install_as_rmm  # RMM's names for this process: docs/rmm-compat.md
# Streams (gpumem/stream.py) and RMM's copies between addresses (python/csrc/buffer.c).
from . import stream
from ._lib import copy_device_to_ptr, copy_host_to_ptr, copy_ptr_to_host
from .stream import Stream

__all__ = [
    "AllocationError",
    "DeviceBuffer",
    "GpumemError",
    "InvalidArgumentError",
    "OutOfMemoryError",
    "Stream",
    "backend",
    "copy_device_to_ptr",
    "copy_host_to_ptr",
    "copy_ptr_to_host",
    "disable_logging",
    "enable_logging",
    "get_log_filenames",
    "install_as_rmm",
    "is_initialized",
    "mr",
    "register_reinitialize_hook",
    "reinitialize",
    "select_backend",
    "statistics",
    "stream",
    "to_device",
    "unregister_reinitialize_hook",
]

# The C library's version (gpumem_version()), whose one source is include/gpumem.h; setup.py
# gives the package the same.
__version__ = _lib.version()

# (func, args, kwargs) of register_reinitialize_hook, in the order registered.
_reinitialize_hooks = []


def select_backend(name):
    """Chooses the device backend, "cuda" or "sim", before anything uses a device."""
    _lib.select_backend(name)


def backend():
    """The backend in use: "cuda" or "sim"."""
    return _lib.backend_name()


def reinitialize(
    pool_allocator=False,
    managed_memory=False,
    initial_pool_size=None,
    maximum_pool_size=None,
    devices=0,
    logging=False,
    log_file_name=None,
):
    """Gives each device in `devices` a new current resource, as rmm.reinitialize.

    pool_allocator: a pool (over virtual memory where the device supports it: it grows in
    place, so no initial size is needed; else over cudaMalloc memory). managed_memory:
    managed memory (with pool_allocator, a pool over it). Sizes are ints or strings as
    mr.parse_bytes reads them ("2kib", "1.5GB", "50%" of the device's memory); None is the
    default (half of free memory for a
    pool over cudaMalloc memory, nothing up front over virtual memory). devices: an int or
    a list of ints. logging: each resource inside a LoggingResourceAdaptor writing
    log_file_name (None: GPUMEM_LOG_FILE's; ValueError without either) with ".dev<N>"
    before its extension. Either every device gets its new resource, or none does. The
    hooks of register_reinitialize_hook run first, the last registered first.
    """
    for func, args, kwargs in reversed(_reinitialize_hooks):
        func(*args, **kwargs)
    device_list = [devices] if isinstance(devices, int) else list(devices)
    first = device_list[0] if device_list else None
    arguments = [bool(pool_allocator), bool(managed_memory), mr._size(initial_pool_size, first),
                 mr._size(maximum_pool_size, first), device_list]
    if logging:  # the C library adds ".devN" for each device
        arguments.append(mr._log_base_name(log_file_name))
    _lib.reinitialize(*arguments)
    mr._forget_current(device_list)
    for device in device_list:  # as objects of their classes (a log a LoggingResourceAdaptor)
        mr.get_per_device_resource(device)


def register_reinitialize_hook(func, *args, **kwargs):
    """Has reinitialize call func(*args, **kwargs) before it replaces any resource (to drop
    references to memory of the old ones, say); hooks run the last registered first, and a
    function registered twice runs twice. Returns func, so it serves as a decorator."""
    _reinitialize_hooks.append((func, args, kwargs))
    return func


def unregister_reinitialize_hook(func):
    """Removes every registration of func."""
    _reinitialize_hooks[:] = [hook for hook in _reinitialize_hooks if hook[0] != func]


def enable_logging(log_file_name=None):
    """Puts each device's current resource (device 0 where none was set) inside a
    LoggingResourceAdaptor writing log_file_name (None: GPUMEM_LOG_FILE's) with ".dev<N>"
    before its extension, as rmm.enable_logging. Devices already logged are left alone."""
    devices = sorted(mr._current) or [0]
    for device in devices:
        current = mr.get_per_device_resource(device)
        if current.name != "log":
            mr.set_per_device_resource(device, mr.LoggingResourceAdaptor(current, log_file_name))


def disable_logging():
    """Gives each logged device the resource inside its log back, as rmm.disable_logging."""
    for device in list(mr._current):
        current = mr.get_per_device_resource(device)
        if current.name == "log":
            mr.set_per_device_resource(device, current.upstream_mr)


def get_log_filenames():
    """{device: the log file of its current resource, or None}, for the devices whose
    resource was set, as rmm.get_log_filenames."""
    return {device: _lib.log_file_name(mr.get_per_device_resource(device))
            for device in sorted(mr._current)}


def is_initialized():
    """True, as rmm.is_initialized: each device has a current resource from the start (the
    default, made on first use), set or not."""
    return mr.is_initialized()
