"""The framework hook-ups tested without the frameworks, so that they run in CI on the
simulated device: PyTorch's allocation functions called through ctypes as PyTorch's
CUDAPluggableAllocator calls them, and the CuPy allocator and the Numba plugin driven by
small stand-ins for the parts of CuPy and Numba they use. (The real frameworks on a real
GPU are in test_cupy.py, test_numba.py and test_torch.py.) The stand-ins run in a fresh
interpreter each: the CuPy hook keeps what it looked up in CuPy for the whole process."""
import ctypes

import pytest

import gpumem
from gpumem import mr

MiB = 1 << 20


@pytest.fixture
def torch_functions():
    """gpumem_torch_alloc and gpumem_torch_free, with the signatures PyTorch loads."""
    library = ctypes.CDLL(gpumem._lib.__file__)
    alloc, free = library.gpumem_torch_alloc, library.gpumem_torch_free
    alloc.restype, alloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_int,
                                                      ctypes.c_void_p]
    free.restype, free.argtypes = None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                         ctypes.c_void_p]
    return alloc, free


def test_torch_functions_use_the_devices_current_resource(torch_functions, pool):
    alloc, free = torch_functions
    mr.set_current_device_resource(pool)
    on_default_stream = alloc(1000, 0, None)
    on_per_thread_stream = alloc(3000, 0, 2)
    assert on_default_stream and on_per_thread_stream
    assert (pool.live_count, pool.live_bytes) == (2, 4000)
    free(on_default_stream, 1000, 0, None)
    free(on_per_thread_stream, 3000, 0, 2)
    assert pool.live_count == 0


def test_torch_functions_on_the_second_device(torch_functions, second_device):
    alloc, free = torch_functions
    pool_one = mr.PoolMemoryResource(mr.CudaMemoryResource(device=second_device),
                                     initial_pool_size="2MiB")
    mr.set_per_device_resource(second_device, pool_one)
    ptr = alloc(4096, second_device, None)
    assert ptr and pool_one.live_count == 1
    free(ptr, 4096, second_device, None)
    assert pool_one.live_count == 0


def test_torch_functions_answer_null_when_they_cannot_allocate(torch_functions, pool):
    alloc, _free = torch_functions
    mr.set_current_device_resource(pool)
    assert alloc(1 << 50, 0, None) is None, "PyTorch reports out of memory for NULL"
    assert alloc(16, gpumem._lib.device_count(), None) is None, "a device that does not exist"
    assert pool.live_count == 0


CUPY_STAND_IN = """
import ctypes
import gc
import sys
import types

import gpumem
from gpumem import mr

# cupy.cuda.stream exports get_current_stream_ptr as a C function in __pyx_capi__.
current_stream = {"handle": 0}
get_current_stream_ptr = ctypes.CFUNCTYPE(ctypes.c_ssize_t)(lambda: current_stream["handle"])
capsule_name = b"intptr_t (int __pyx_skip_dispatch)"
new_capsule = ctypes.pythonapi.PyCapsule_New
new_capsule.restype = ctypes.py_object
new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class UnownedMemory:
    def __init__(self, ptr, size, owner, device_id):
        self.ptr, self.size, self.owner, self.device_id = ptr, size, owner, device_id


class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset


modules = {name: types.ModuleType(name)
           for name in ("cupy", "cupy.cuda", "cupy.cuda.stream", "cupy.cuda.memory")}
modules["cupy.cuda.stream"].__pyx_capi__ = {
    "get_current_stream_ptr": new_capsule(ctypes.cast(get_current_stream_ptr, ctypes.c_void_p),
                                          capsule_name, None)}
modules["cupy.cuda.memory"].UnownedMemory = UnownedMemory
modules["cupy.cuda.memory"].MemoryPointer = MemoryPointer
sys.modules.update(modules)

from gpumem.allocators.cupy import gpumem_cupy_allocator

pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="4MiB",
                             maximum_pool_size="8MiB")
mr.set_current_device_resource(pool)

pointer = gpumem_cupy_allocator(1000)
print("pointer:", type(pointer).__name__, pointer.ptr == pointer.mem.ptr != 0)
print("memory:", pointer.mem.size, pointer.mem.device_id)
print("owner:", pointer.mem.owner.ptr == pointer.ptr, pointer.mem.owner.size)
print("live while held:", pool.live_count)
buf = gpumem.DeviceBuffer(size=1000, ptr=pointer.ptr)  # the memory is readable
del pointer, buf
gc.collect()
print("live after:", pool.live_count)

current_stream["handle"] = 2  # CuPy's current stream: the per-thread default stream
pointer = gpumem_cupy_allocator(64)
print("on CuPy's stream:", pool.live_count)
del pointer
if gpumem.backend() == "sim":
    current_stream["handle"] = 12345  # not a stream: the hook must have asked CuPy
    try:
        gpumem_cupy_allocator(64)
    except gpumem.InvalidArgumentError as error:
        print("unknown stream refused:", "is not a stream" in str(error))
current_stream["handle"] = 0
try:
    gpumem_cupy_allocator(64 << 20)
except MemoryError as error:
    print("out of memory:", type(error).__name__, pool.live_count)
"""


def test_cupy_allocator_with_a_stand_in_for_cupy(run_script):
    lines = run_script(CUPY_STAND_IN, timeout=60).splitlines()
    assert "pointer: MemoryPointer True" in lines
    assert "memory: 1000 0" in lines, "UnownedMemory(ptr, size, owner, device 0)"
    assert "owner: True 1000" in lines
    assert "live while held: 1" in lines
    assert "live after: 0" in lines, "dropping CuPy's pointer frees the block"
    assert "on CuPy's stream: 1" in lines
    assert "out of memory: OutOfMemoryError 0" in lines
    if gpumem.backend() == "sim":
        assert "unknown stream refused: True" in lines


NUMBA_STAND_IN = """
import gc
import sys
import types
import weakref
from collections import namedtuple

import gpumem
from gpumem import mr


class HostOnlyCUDAMemoryManager:
    def __init__(self, context):
        self.context = context


class MemoryPointer:  # as Numba's: the finalizer runs when the pointer is collected
    def __init__(self, context, pointer, size, owner=None, finalizer=None):
        self.context, self.device_pointer, self.size = context, pointer, size
        self.handle = pointer
        if finalizer is not None:
            self._finalizer = weakref.finalize(self, finalizer)


numba = types.ModuleType("numba")
cuda = types.ModuleType("numba.cuda")
cudadrv = types.ModuleType("numba.cuda.cudadrv")
driver = types.ModuleType("numba.cuda.cudadrv.driver")
driver.USE_NV_BINDING = False  # the ctypes pointers of older Numba
cudadrv.driver = driver
cuda.cudadrv = cudadrv
cuda.GetIpcHandleMixin = type("GetIpcHandleMixin", (), {})
cuda.HostOnlyCUDAMemoryManager = HostOnlyCUDAMemoryManager
cuda.MemoryPointer = MemoryPointer
cuda.IpcHandle = object
cuda.MemoryInfo = namedtuple("MemoryInfo", "free,total")
numba.cuda = cuda
sys.modules.update({"numba": numba, "numba.cuda": cuda, "numba.cuda.cudadrv": cudadrv,
                    "numba.cuda.cudadrv.driver": driver})

import gpumem.allocators.numba as plugin

pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="4MiB")
mr.set_current_device_resource(pool)
manager = plugin.GpumemNumbaManager(context="the context")
manager.initialize()
print("interface version:", manager.interface_version)
print("found by NUMBA_CUDA_MEMORY_MANAGER:", plugin._numba_memory_manager is plugin.GpumemNumbaManager)
memory = manager.memalloc(4096)
print("pointer:", memory.context, memory.size, memory.device_pointer.value != 0)
print("live while held:", pool.live_count, pool.live_bytes)
del memory
gc.collect()
print("live after:", pool.live_count)
info = manager.get_memory_info()
print("memory info:", info[0] <= info[1], hasattr(info, "free") and hasattr(info, "total"))
"""


def test_numba_plugin_with_a_stand_in_for_numba(run_script):
    lines = run_script(NUMBA_STAND_IN, timeout=60).splitlines()
    assert "interface version: 1" in lines
    assert "found by NUMBA_CUDA_MEMORY_MANAGER: True" in lines
    assert "pointer: the context 4096 True" in lines
    assert "live while held: 1 4096" in lines
    assert "live after: 0" in lines, "Numba's finalizer frees the block"
    assert any(line.startswith("memory info: True") for line in lines)


def test_numba_plugin_memory_info_is_a_memory_info(run_script):
    lines = run_script(NUMBA_STAND_IN, timeout=60).splitlines()
    assert "memory info: True True" in lines
