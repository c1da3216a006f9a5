"""gpumem's RMM-compatible layer: RMM's Python API, under RMM's names and module layout, on
gpumem. Programs written for RMM reach it as `rmm` through `python -m gpumem.as_rmm` or
gpumem.install_as_rmm() (docs/rmm-compat.md); it can also be imported as gpumem.rmm.

Every name here is one of gpumem's own objects under the name RMM gives it
(rmm.statistics.statistics is gpumem.statistics.statistics, ...), except where RMM behaves
otherwise on purpose: RMM 26.06 refuses stream=None, which gpumem takes, so rmm.DeviceBuffer
and the classes of rmm.mr are gpumem's with a thin override of their stream arguments
(_streams.py); rmm.mr.CallbackMemoryResource turns its allocate function's exceptions into
RuntimeError as RMM's does; rmm.allocators.cupy.rmm_cupy_allocator makes rmm.DeviceBuffers. Where gpumem lacks
a feature, the name is absent, not faked: docs/rmm-compat.md lists them. Importing it
imports no framework: the old top-level names of the framework hook-ups
(rmm.rmm_cupy_allocator, rmm.RMMNumbaManager, rmm.rmm_torch_allocator) import their
framework on first use.
"""
import importlib

# `import rmm` loads these in RMM too (its resources use them), and code relies on it:
# rmm._cuda.gpu.getDevice() and rmm.statistics.statistics() work after `import rmm`.
from . import _cuda, mr, pylibrmm, statistics
from ._cuda import gpu as _gpu  # noqa: F401 -- makes rmm._cuda.gpu an attribute
from ._version import __git_commit__, __version__
from .mr import disable_logging, enable_logging, get_log_filenames
from .pylibrmm.device_buffer import DeviceBuffer
from .pylibrmm.logger import (
    flush_logger,
    get_flush_level,
    get_logging_level,
    level_enum,
    set_flush_level,
    set_logging_level,
    should_log,
)
from .rmm import (
    RMMError,
    is_initialized,
    register_reinitialize_hook,
    reinitialize,
    unregister_reinitialize_hook,
)

__all__ = [
    "DeviceBuffer",
    "RMMError",
    "disable_logging",
    "enable_logging",
    "flush_logger",
    "get_flush_level",
    "get_log_filenames",
    "get_logging_level",
    "is_initialized",
    "level_enum",
    "mr",
    "register_reinitialize_hook",
    "reinitialize",
    "set_flush_level",
    "set_logging_level",
    "should_log",
    "unregister_reinitialize_hook",
]

# RMM's older top-level names, kept by programs written for earlier releases.
to_device = pylibrmm.device_buffer.to_device

# name -> (module of the layer, name there); imported on first use, so that `import rmm`
# imports no framework.
_FRAMEWORK_NAMES = {
    "rmm_cupy_allocator": ("allocators.cupy", "rmm_cupy_allocator"),
    "RMMNumbaManager": ("allocators.numba", "RMMNumbaManager"),
    "_numba_memory_manager": ("allocators.numba", "_numba_memory_manager"),
    "rmm_torch_allocator": ("allocators.torch", "rmm_torch_allocator"),
}


def __getattr__(name):
    try:
        module_name, attribute = _FRAMEWORK_NAMES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module_name}"), attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_FRAMEWORK_NAMES))
