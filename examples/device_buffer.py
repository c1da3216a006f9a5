"""DeviceBuffer: untyped device memory, as in the "DeviceBuffers" part of RMM's Python
user guide, with gpumem in place of rmm.

Shows: DeviceBuffer(size=100) and its .size and .ptr; copying host data to the device with
DeviceBuffer.to_device (an 8-bit array) and gpumem.to_device (bytes); copying it back with
tobytes and copy_to_host; resize keeping the contents.

    python3 examples/device_buffer.py
"""
from _device import choose_backend

choose_backend()

import numpy as np  # noqa: E402

import gpumem  # noqa: E402

buf = gpumem.DeviceBuffer(size=100)
print("buf.size:", buf.size)
print("buf.ptr:", hex(buf.ptr))

a = np.array([1, 2, 3], dtype="float64")
buf = gpumem.DeviceBuffer.to_device(a.view("int8"))  # to_device expects an 8-bit type or bytes
print("to_device size:", buf.size)
print("back on the host:", np.frombuffer(buf.tobytes()))

buf = gpumem.to_device(a.tobytes())  # the module function does the same
buf.resize(48)  # more room; the first 24 bytes are kept
host = buf.copy_to_host()  # a numpy uint8 array of all 48 bytes
print("after resize to 48 bytes:", host[:24].view(np.float64))
