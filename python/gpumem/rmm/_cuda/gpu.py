"""rmm._cuda.gpu: RMM's small CUDA helpers. The current device, the device count and a
device's name are gpumem's device calls (the CUDA driver, or gpumem's simulated device);
a failing one raises CUDARuntimeError (CUDADriverError for deviceGetName), as RMM's do,
with gpumem's message, and its .status is gpumem's status name (such as
"GPUMEM_ERR_INVALID_DEVICE"): gpumem has no CUDA runtime whose cudaError_t it could give.

The CUDA version numbers (runtimeGetVersion, driverGetVersion) and the CUDA runtime's
device structures (getDeviceAttribute, getDeviceProperties) are not in gpumem's API. As in
RMM, these four are calls of cuda-python's runtime bindings (cuda.bindings), imported when
one is called, so that importing the layer needs no cuda-python; without it they raise
ImportError. getDeviceAttribute's `attr` is a cuda.bindings enum anyway. Their failures
carry cuda-python's status.
"""
import importlib

import gpumem as _gpumem
from gpumem import _lib


class CUDARuntimeError(RuntimeError):
    """A device call failed. status: gpumem's status name (or cuda-python's cudaError_t for
    the calls made through it); the message says what failed."""

    def __init__(self, status, message=None):
        self.status = status
        self.detail = message
        super().__init__(f"{getattr(status, 'name', status)}: {message}" if message
                         else str(status))

    def __reduce__(self):
        return (type(self), (self.status, self.detail))


class CUDADriverError(CUDARuntimeError):
    """A device call failed in the driver (deviceGetName); as CUDARuntimeError."""


def _call(function, *args, error=CUDARuntimeError):
    try:
        return function(*args)
    except _gpumem.GpumemError as failure:
        status, _, message = str(failure).partition(": ")
        raise error(status, message or None) from failure


def getDevice():  # noqa: N802 -- RMM's names
    """The current device of the calling thread."""
    return _call(_lib.get_device)


def setDevice(device):  # noqa: N802
    """Makes `device` current on the calling thread."""
    _call(_lib.set_device, device)


def getDeviceCount():  # noqa: N802
    """The number of devices."""
    return _call(_lib.device_count)


def deviceGetName(device):  # noqa: N802
    """The device's name."""
    return _call(_lib.device_name, device, error=CUDADriverError)


def _runtime(name, *args):
    """cuda.bindings.runtime.NAME(*args)'s value, or CUDARuntimeError with its status."""
    runtime = importlib.import_module("cuda.bindings.runtime")
    status, *values = getattr(runtime, name)(*args)
    if status != runtime.cudaError_t.cudaSuccess:
        _, message = runtime.cudaGetErrorString(status)
        raise CUDARuntimeError(status, message.decode())
    return values[0]


def runtimeGetVersion():  # noqa: N802
    """The CUDA runtime's version, 1000 * major + 10 * minor (cuda-python's)."""
    return _runtime("getLocalRuntimeVersion")


def driverGetVersion():  # noqa: N802
    """The newest CUDA version the driver supports, as runtimeGetVersion's (0: no driver)."""
    return _runtime("cudaDriverGetVersion")


def getDeviceAttribute(attr, device):  # noqa: N802
    """The device's attribute `attr`, a cuda.bindings.runtime.cudaDeviceAttr."""
    return _runtime("cudaDeviceGetAttribute", attr, device)


def getDeviceProperties(device):  # noqa: N802
    """The device's cuda.bindings.runtime.cudaDeviceProp."""
    return _runtime("cudaGetDeviceProperties", device)


__all__ = [
    "CUDADriverError",
    "CUDARuntimeError",
    "deviceGetName",
    "driverGetVersion",
    "getDevice",
    "getDeviceAttribute",
    "getDeviceCount",
    "getDeviceProperties",
    "runtimeGetVersion",
    "setDevice",
]
