"""rmm.mr: the memory resources and the per-device current resource, under RMM's names:
those of rmm.pylibrmm.memory_resource (each class gpumem.mr's with RMM 26.06's stream
arguments; the base classes DeviceMemoryResource and UpstreamResourceAdaptor gpumem.mr's)."""
from ..pylibrmm.memory_resource import (
    ArenaMemoryResource,
    BinningMemoryResource,
    CallbackMemoryResource,
    CudaAsyncMemoryResource,
    CudaAsyncViewMemoryResource,
    CudaMemoryResource,
    DeviceMemoryResource,
    FailureCallbackResourceAdaptor,
    FixedSizeMemoryResource,
    LimitingResourceAdaptor,
    LoggingResourceAdaptor,
    ManagedMemoryResource,
    PinnedHostMemoryResource,
    PoolMemoryResource,
    PrefetchResourceAdaptor,
    StatisticsResourceAdaptor,
    SystemMemoryResource,
    TrackingResourceAdaptor,
    UpstreamResourceAdaptor,
    available_device_memory,
    disable_logging,
    enable_logging,
    get_current_device_resource,
    get_current_device_resource_type,
    get_log_filenames,
    get_per_device_resource,
    get_per_device_resource_type,
    is_initialized,
    set_current_device_resource,
    set_per_device_resource,
)
from ..pylibrmm.memory_resource import __all__ as _names
from ..pylibrmm.memory_resource._memory_resource import _flush_logs  # noqa: F401 -- below
from . import experimental

# _flush_logs, RMM's private helper, is also here as in RMM 25.10's rmm.mr, whose tests call
# rmm.mr._flush_logs(); 26.06's call it from _memory_resource. Not in __all__ (private).

# The same names as rmm.pylibrmm.memory_resource, experimental included.
__all__ = _names
