"""rmm.pylibrmm.device_buffer: DeviceBuffer and to_device, gpumem's. RMM's pointer-copy
functions (copy_ptr_to_host, copy_host_to_ptr, copy_device_to_ptr) are absent until gpumem
has them (docs/rmm-compat.md)."""
import gpumem as _gpumem

DeviceBuffer = _gpumem.DeviceBuffer
to_device = _gpumem.to_device

__all__ = ["DeviceBuffer", "to_device"]
