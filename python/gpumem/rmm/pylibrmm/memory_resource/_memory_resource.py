"""rmm.pylibrmm.memory_resource._memory_resource: where RMM defines its resources (the
package and rmm.mr re-export them).

Each resource class is gpumem.mr's class of that name with RMM 26.06's stream arguments:
allocate and deallocate default to DEFAULT_STREAM and refuse None with TypeError (gpumem's
read None as the default stream; _streams.py says why the layer differs). One mixin does
it for every class, listed below one line each; nothing else is overridden. The base
classes are gpumem's own (DeviceMemoryResource is gpumem.mr.MemoryResource), so every
resource of the layer is one of gpumem's too. One class adds RMM's behaviour besides:
CallbackMemoryResource raises what its allocate function raised as RMM does (below).

Resources that gpumem built (the default, reinitialize's, the adaptors gpumem.statistics
sets) come out of the layer's current-resource functions, DeviceBuffer.mr and upstream_mr
as objects of the layer's classes: one view per gpumem object over the same resource,
made once, so that identity holds and gpumem's object keeps accepting None. Resources RMM
has and gpumem lacks (SamHeadroomMemoryResource) are absent, not faked: docs/rmm-compat.md."""
import functools
import threading
import weakref

import gpumem as _gpumem
from gpumem import _lib
from gpumem import mr as _mr

from ..._streams import DEFAULT_STREAM, as_stream


class _StreamArguments:
    """allocate/deallocate with RMM 26.06's stream arguments, over gpumem's."""

    __slots__ = ()

    def allocate(self, nbytes, stream=DEFAULT_STREAM):
        return super().allocate(nbytes, as_stream(stream))

    def deallocate(self, ptr, nbytes, stream=DEFAULT_STREAM):
        return super().deallocate(ptr, nbytes, as_stream(stream))


# gpumem's class -> the layer's, for the views of gpumem's objects.
_LAYER_CLASS = {}


def _layer_class(base, name=None):
    """The layer's class over gpumem.mr's `base`: the mixin, then base; nothing else."""
    name = name or base.__name__
    cls = type(name, (_StreamArguments, base),
               {"__module__": __name__, "__qualname__": name, "__doc__": base.__doc__})
    _LAYER_CLASS[base] = cls
    return cls


ArenaMemoryResource = _layer_class(_mr.ArenaMemoryResource)
BinningMemoryResource = _layer_class(_mr.BinningMemoryResource)
CudaAsyncMemoryResource = _layer_class(_mr.CudaAsyncMemoryResource)
CudaAsyncViewMemoryResource = _layer_class(_mr.CudaAsyncViewMemoryResource)
CudaMemoryResource = _layer_class(_mr.CudaMemoryResource)
FailureCallbackResourceAdaptor = _layer_class(_mr.FailureCallbackResourceAdaptor)
FixedSizeMemoryResource = _layer_class(_mr.FixedSizeMemoryResource)
LimitingResourceAdaptor = _layer_class(_mr.LimitingResourceAdaptor)
LoggingResourceAdaptor = _layer_class(_mr.LoggingResourceAdaptor)
ManagedMemoryResource = _layer_class(_mr.ManagedMemoryResource)
PinnedHostMemoryResource = _layer_class(_mr.PinnedHostMemoryResource)
PoolMemoryResource = _layer_class(_mr.PoolMemoryResource)
PrefetchResourceAdaptor = _layer_class(_mr.PrefetchResourceAdaptor)
StatisticsResourceAdaptor = _layer_class(_mr.StatisticsResourceAdaptor)
SystemMemoryResource = _layer_class(_mr.SystemMemoryResource)
TrackingResourceAdaptor = _layer_class(_mr.TrackingResourceAdaptor)


def _rmm_errors(allocate_func):
    """allocate_func raising as in RMM: a MemoryError or RuntimeError as it was raised, any
    other exception as a RuntimeError with its message (chained to it). RMM turns every other
    exception into a C++ std::runtime_error on its way through its C++ resource, so its users
    catch RuntimeError; gpumem's own CallbackMemoryResource passes every exception as raised.
    KeyboardInterrupt and SystemExit pass unchanged (RMM converts them too): they ask the
    program to stop, which a RuntimeError would hide."""
    @functools.wraps(allocate_func)
    def allocate(size, stream):
        try:
            return allocate_func(size, stream)
        except (MemoryError, RuntimeError, KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:
            raise RuntimeError(str(error)) from error

    return allocate


class CallbackMemoryResource(_StreamArguments, _mr.CallbackMemoryResource):
    """gpumem.mr.CallbackMemoryResource with RMM 26.06's stream arguments, whose
    allocate_func's exceptions reach the caller as in RMM: a MemoryError or RuntimeError as
    raised, any other (KeyboardInterrupt and SystemExit excepted) as a RuntimeError with its
    message."""

    def __init__(self, allocate_func, deallocate_func, device=None):
        super().__init__(_rmm_errors(allocate_func), deallocate_func, device)
        self._allocate_func = allocate_func  # the function given, as gpumem's class keeps it


_LAYER_CLASS[_mr.CallbackMemoryResource] = CallbackMemoryResource
# gpumem's classes RMM has no name for, as the layer hands out objects of them.
_layer_class(_mr.MemoryResource, "_PlainMemoryResource")
_layer_class(_mr.VmmMemoryResource)
_layer_class(_mr.FaultyMemoryResource)
_layer_class(_mr.AlignedResourceAdaptor)

DeviceMemoryResource = _mr.DeviceMemoryResource
UpstreamResourceAdaptor = _mr.UpstreamResourceAdaptor

available_device_memory = _mr.available_device_memory
set_current_device_resource = _mr.set_current_device_resource
set_per_device_resource = _mr.set_per_device_resource

disable_logging = _gpumem.disable_logging
enable_logging = _gpumem.enable_logging
get_log_filenames = _gpumem.get_log_filenames
is_initialized = _mr.is_initialized

# gpumem's object -> the layer's view of it; an entry lives as long as gpumem's object.
# The lock makes one view per object where threads ask at once.
_views = weakref.WeakKeyDictionary()
_views_lock = threading.RLock()  # reentrant: a view of an upstream is made inside


def _as_rmm(resource):
    """The resource as the layer hands it out: itself when it is the layer's (or of a class
    the layer does not know, such as a program's own subclass), else the one view of
    gpumem's object: an object of the layer's class over the same resource, with gpumem's
    object's attributes (its upstream as a view too)."""
    if type(resource) is _mr.MemoryResource:
        # gpumem's plain object of a resource (a buffer's, read before anything asked for
        # the current resource): the device's current resource, if it is that one, comes
        # as gpumem's typed object; otherwise, not weakly referable, a fresh view each time.
        current = _mr.get_per_device_resource(resource.device)
        if current.handle != resource.handle:
            return _view(_LAYER_CLASS[_mr.MemoryResource], resource)
        resource = current
    cls = _LAYER_CLASS.get(type(resource))
    if cls is None:
        return resource
    with _views_lock:
        view = _views.get(resource)
        if view is None:
            view = _views[resource] = _view(cls, resource)
    return view


# The Python attributes gpumem.mr's classes keep (everything else of a resource is the C
# library's, which the view shares): the upstream object, a binning resource's bins, the
# callbacks of callback resources.
_ATTRIBUTES = ("_upstream", "_bins", "_allocate_func", "_deallocate_func", "_callback")


def _view(cls, resource):
    """A new object of cls over gpumem's object's resource, with its attributes."""
    view = cls.__new__(cls)
    _lib.adopt(view, resource)
    for name in _ATTRIBUTES:
        if hasattr(resource, name):
            setattr(view, name, getattr(resource, name))
    if getattr(view, "_upstream", None) is not None:
        view._upstream = _as_rmm(view._upstream)
    return view


def get_per_device_resource(device):
    """The current resource of `device`, as the layer hands resources out."""
    return _as_rmm(_mr.get_per_device_resource(device))


def get_current_device_resource():
    """The current device's resource, as the layer hands resources out."""
    return _as_rmm(_mr.get_current_device_resource())


def get_per_device_resource_type(device):
    """The class of the device's current resource (the layer's)."""
    return type(get_per_device_resource(device))


def get_current_device_resource_type():
    """The class of the current device's current resource (the layer's)."""
    return type(get_current_device_resource())


def _flush_logs():
    """Flushes the LoggingResourceAdaptor of every device whose resource was set (RMM's
    private helper, which RMM's tests call before reading a log)."""
    for device in get_log_filenames():  # the devices whose resource was set
        resource = get_per_device_resource(device)
        if isinstance(resource, _mr.LoggingResourceAdaptor):
            resource.flush()


__all__ = [
    "ArenaMemoryResource",
    "BinningMemoryResource",
    "CallbackMemoryResource",
    "CudaAsyncMemoryResource",
    "CudaAsyncViewMemoryResource",
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
