"""rmm.pylibrmm.memory_resource._memory_resource: where RMM defines its resources (the
package and rmm.mr re-export them). Every name is gpumem.mr's (or gpumem's) object under RMM's name; the only code of the layer
is RMM's two `_type` functions and _flush_logs, each a few calls of gpumem's public API. Resources RMM has and gpumem lacks (CudaAsyncViewMemoryResource,
SamHeadroomMemoryResource) are absent, not faked: docs/rmm-compat.md lists them."""
import gpumem as _gpumem
from gpumem import mr as _mr

ArenaMemoryResource = _mr.ArenaMemoryResource
BinningMemoryResource = _mr.BinningMemoryResource
CallbackMemoryResource = _mr.CallbackMemoryResource
CudaAsyncMemoryResource = _mr.CudaAsyncMemoryResource
CudaMemoryResource = _mr.CudaMemoryResource
DeviceMemoryResource = _mr.MemoryResource
FailureCallbackResourceAdaptor = _mr.FailureCallbackResourceAdaptor
FixedSizeMemoryResource = _mr.FixedSizeMemoryResource
LimitingResourceAdaptor = _mr.LimitingResourceAdaptor
LoggingResourceAdaptor = _mr.LoggingResourceAdaptor
ManagedMemoryResource = _mr.ManagedMemoryResource
PinnedHostMemoryResource = _mr.PinnedHostMemoryResource
PoolMemoryResource = _mr.PoolMemoryResource
PrefetchResourceAdaptor = _mr.PrefetchResourceAdaptor
StatisticsResourceAdaptor = _mr.StatisticsResourceAdaptor
SystemMemoryResource = _mr.SystemMemoryResource
TrackingResourceAdaptor = _mr.TrackingResourceAdaptor
UpstreamResourceAdaptor = _mr.UpstreamMemoryResource

available_device_memory = _mr.available_device_memory
get_current_device_resource = _mr.get_current_device_resource
get_per_device_resource = _mr.get_per_device_resource
set_current_device_resource = _mr.set_current_device_resource
set_per_device_resource = _mr.set_per_device_resource

disable_logging = _gpumem.disable_logging
enable_logging = _gpumem.enable_logging
get_log_filenames = _gpumem.get_log_filenames
is_initialized = _gpumem.is_initialized


def get_per_device_resource_type(device):
    """The class of the device's current resource (RMM's name for type(...))."""
    return type(get_per_device_resource(device))


def get_current_device_resource_type():
    """The class of the current device's current resource."""
    return type(get_current_device_resource())


def _flush_logs():
    """Flushes the LoggingResourceAdaptor of every device whose resource was set (RMM's
    private helper, which RMM's tests call before reading a log)."""
    for device in get_log_filenames():  # the devices whose resource was set
        resource = get_per_device_resource(device)
        if isinstance(resource, LoggingResourceAdaptor):
            resource.flush()


__all__ = [
    "ArenaMemoryResource",
    "BinningMemoryResource",
    "CallbackMemoryResource",
    "CudaAsyncMemoryResource",
    "CudaMemoryResource",
    "DeviceMemoryResource",
    "FailureCallbackResourceAdaptor",
    "FixedSizeMemoryResource",
    "LimitingResourceAdaptor",
    "LoggingResourceAdaptor",
    "ManagedMemoryResource",
    "PinnedHostMemoryResource",
    "PoolMemoryResource",
    "PrefetchResourceAdaptor",
    "StatisticsResourceAdaptor",
    "SystemMemoryResource",
    "TrackingResourceAdaptor",
    "UpstreamResourceAdaptor",
    "available_device_memory",
    "disable_logging",
    "enable_logging",
    "get_current_device_resource",
    "get_current_device_resource_type",
    "get_log_filenames",
    "get_per_device_resource",
    "get_per_device_resource_type",
    "is_initialized",
    "set_current_device_resource",
    "set_per_device_resource",
]
