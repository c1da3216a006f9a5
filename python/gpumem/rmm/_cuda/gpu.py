"""rmm._cuda.gpu: the current device and device count, on gpumem's device calls (which use
the CUDA driver, or gpumem's simulated device). A failing call raises CUDARuntimeError, as
RMM's do, with gpumem's message; its .status is gpumem's status name (such as
"GPUMEM_ERR_INVALID_DEVICE"), as gpumem has no CUDA runtime whose cudaError_t it could give.

RMM's runtimeGetVersion and driverGetVersion (CUDA version numbers), getDeviceAttribute and
getDeviceProperties (CUDA runtime structures) are absent: gpumem's API does not report them
(docs/rmm-compat.md)."""
import gpumem as _gpumem
from gpumem import _lib


class CUDARuntimeError(RuntimeError):
    """A device call failed. status: gpumem's status name; the message is gpumem's."""

    def __init__(self, status, message=None):
        self.status = status
        super().__init__(f"{status}: {message}" if message else str(status))

    def __reduce__(self):
        return (type(self), (self.status, self._message()))

    def _message(self):
        text = str(self)
        prefix = f"{self.status}: "
        return text[len(prefix):] if text.startswith(prefix) else None


def _call(function, *args):
    try:
        return function(*args)
    except _gpumem.GpumemError as error:
        status, _, message = str(error).partition(": ")
        raise CUDARuntimeError(status, message or None) from error


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
    return _call(_lib.device_name, device)


__all__ = ["CUDARuntimeError", "deviceGetName", "getDevice", "getDeviceCount", "setDevice"]
