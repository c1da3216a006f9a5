"""Shared by the examples: decides where gpumem runs, before gpumem starts.

GPUMEM_DEVICE, when set, decides. Otherwise the examples use the GPU when the CUDA driver
loads and sees one, and gpumem's simulated device (device memory in host memory) when not,
so that every example runs anywhere. gpumem reads these settings when it first uses a
device, so this must come before any other gpumem call.
"""
import ctypes
import os


def _gpu_present():
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return (driver.cuInit(0) == 0 and driver.cuDeviceGetCount(ctypes.byref(count)) == 0
            and count.value > 0)


def choose_backend(sim_memory=None):
    """Sets GPUMEM_DEVICE unless it is set: "cuda" with a GPU, else "sim". sim_memory (e.g.
    "64MiB") sizes the simulated device's memory, for examples that need a small device.
    Prints the choice and returns it."""
    if "GPUMEM_DEVICE" not in os.environ:
        os.environ["GPUMEM_DEVICE"] = "cuda" if _gpu_present() else "sim"
    backend = os.environ["GPUMEM_DEVICE"]
    if backend == "sim":
        if sim_memory:
            os.environ["GPUMEM_SIM_MEMORY"] = sim_memory
        print("backend: sim (gpumem's simulated device: no GPU is used)")
    else:
        print(f"backend: {backend}")
    return backend
