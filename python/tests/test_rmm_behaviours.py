"""Behaviours RMM's own test suite checks, on gpumem's side and the layer's:

- gpumem.mr.CudaAsyncManagedMemoryResource (and the layer's
  rmm.mr.experimental.CudaAsyncManagedMemoryResource): managed memory from the device's
  default pool of managed memory, its pool_handle(), buffers on streams, a typed current
  resource; refused with GpumemError where the driver has no such pools.
- A failed allocation is a MemoryError: from a driver pool destroyed under its resource,
  gpumem.AllocationError (a MemoryError and a GpumemError).
- The layer's CallbackMemoryResource raises as RMM's: MemoryError and RuntimeError as raised,
  any other exception as a RuntimeError with its message; gpumem's own class passes every
  exception as raised.
- The layer's rmm_cupy_allocator makes rmm.DeviceBuffers on CuPy's current stream (with a
  stand-in for CuPy here; test_cupy.py runs the real one on a GPU).
"""
import sys
import types

import numpy as np
import pytest

import gpumem
import gpumem.rmm as rmm
from gpumem import mr

MiB = 1 << 20


# ---- CudaAsyncManagedMemoryResource ------------------------------------------------------

def test_async_managed_resource_hands_out_managed_memory_from_one_pool():
    first = mr.CudaAsyncManagedMemoryResource()
    handle = first.pool_handle()
    assert isinstance(handle, int) and handle != 0
    assert mr.CudaAsyncManagedMemoryResource().pool_handle() == handle, "the device's one pool"
    assert first.spec == "async(managed=true)"
    stream = gpumem.Stream()
    expected = np.full(1000, 5, dtype="u1")
    buffer = gpumem.DeviceBuffer.to_device(expected, stream=stream, mr=first)
    assert first.live_bytes == 1000 == first.reserved_bytes
    np.testing.assert_equal(np.asarray(buffer.copy_to_host()), expected)
    # Managed memory: the host reads it in place once the stream is done.
    stream.synchronize()
    assert bytes(_host_view(buffer.ptr, 3)) == b"\x05" * 3
    del buffer
    assert first.live_bytes == 0


def _host_view(ptr, size):
    import ctypes

    return (ctypes.c_ubyte * size).from_address(ptr)


def test_async_managed_resource_as_current_resource_and_from_spec():
    resource = mr.CudaAsyncManagedMemoryResource(release_threshold="1MiB")
    assert resource.spec == "async(managed=true, release_threshold=1048576)"
    mr.set_current_device_resource(resource)
    assert mr.get_current_device_resource() is resource
    typed = mr._typed(mr.from_spec("async(managed=true)"))
    assert type(typed) is mr.CudaAsyncManagedMemoryResource
    ptr = typed.allocate(4096)
    typed.deallocate(ptr, 4096)


def test_the_layers_async_managed_resource():
    cls = rmm.mr.experimental.CudaAsyncManagedMemoryResource
    assert cls is rmm.pylibrmm.memory_resource.experimental.CudaAsyncManagedMemoryResource
    assert issubclass(cls, mr.CudaAsyncManagedMemoryResource)
    assert cls.__module__ == "gpumem.rmm.pylibrmm.memory_resource.experimental"
    resource = cls()
    assert resource.pool_handle() != 0
    rmm.mr.set_current_device_resource(resource)
    assert type(rmm.mr.get_current_device_resource()) is cls
    stream = rmm.pylibrmm.stream.Stream()
    expected = np.full(100, 5, dtype="u1")
    buffer = rmm.DeviceBuffer.to_device(expected, stream=stream)
    np.testing.assert_equal(np.asarray(buffer.copy_to_host()), expected)
    with pytest.raises(TypeError, match="stream argument cannot be None"):
        resource.allocate(10, None)
    # gpumem's object of it, from the C library, comes out of the layer as the layer's class
    rmm.mr.set_current_device_resource(None)
    gpumem.mr.set_current_device_resource(mr._typed(mr.from_spec("async(managed=true)")))
    assert type(rmm.mr.get_current_device_resource()) is cls


@pytest.mark.sim
def test_async_managed_resource_refused_where_the_driver_has_no_managed_pools(run_script):
    out = run_script("""
        import gpumem
        from gpumem import mr
        try:
            mr.CudaAsyncManagedMemoryResource()
        except gpumem.GpumemError as error:
            print(type(error).__name__, str(error))
        print(mr.CudaAsyncMemoryResource().spec.startswith("async("))
        """, GPUMEM_DEVICE="sim", GPUMEM_SIM_MANAGED_POOLS="0")
    first, second = out.splitlines()
    assert first.startswith("GpumemError GPUMEM_ERR_UNSUPPORTED")
    assert "pools of managed memory" in first and "CUDA 13.0" in first
    assert second == "True"


# ---- a failed allocation is a MemoryError ------------------------------------------------

def test_allocation_error_is_a_memory_error_and_a_gpumem_error():
    assert issubclass(gpumem.AllocationError, MemoryError)
    assert issubclass(gpumem.AllocationError, gpumem.GpumemError)
    assert not issubclass(gpumem.AllocationError, gpumem.OutOfMemoryError)


def test_allocating_from_a_destroyed_driver_pool_raises_memory_error():
    owner = mr.CudaAsyncMemoryResource()
    view = mr.CudaAsyncViewMemoryResource(owner.pool_handle())
    ptr = view.allocate(256)
    view.deallocate(ptr, 256)
    del owner  # destroys the driver pool under the view
    with pytest.raises(gpumem.AllocationError, match="GPUMEM_ERR_CUDA"):
        view.allocate(256)
    with pytest.raises(MemoryError):
        gpumem.DeviceBuffer(size=10, mr=view)
    mr.set_current_device_resource(view)
    with pytest.raises(MemoryError):
        gpumem._lib.allocation(10, None)  # the Numba manager's path
    mr.set_current_device_resource(None)
    with pytest.raises(MemoryError):
        rmm.DeviceBuffer(size=10, mr=view)


def test_other_failures_keep_their_exceptions():
    with pytest.raises(gpumem.InvalidArgumentError):
        mr.CudaMemoryResource().allocate(-1)
    with pytest.raises(gpumem.OutOfMemoryError):
        mr.CudaMemoryResource().allocate(1 << 60)


# ---- CallbackMemoryResource's exceptions -------------------------------------------------

class Failure(Exception):
    pass


def raising(exception):
    def allocate(size, stream):
        raise exception("My alloc error")

    def deallocate(ptr, size, stream):
        raise AssertionError("never called")

    return allocate, deallocate


@pytest.mark.parametrize("raised,caught", [(MemoryError, MemoryError),
                                           (RuntimeError, RuntimeError),
                                           (Exception, RuntimeError),
                                           (BaseException, RuntimeError),
                                           (Failure, RuntimeError),
                                           (KeyError, RuntimeError)])
def test_the_layers_callback_resource_raises_as_rmms(raised, caught):
    resource = rmm.mr.CallbackMemoryResource(*raising(raised))
    with pytest.raises(caught, match="My alloc error") as failure:
        rmm.DeviceBuffer(size=256, mr=resource)
    if caught is RuntimeError and raised is not RuntimeError:
        assert type(failure.value) is RuntimeError
        assert type(failure.value.__cause__) is raised, "chained to what was raised"
    rmm.mr.set_current_device_resource(resource)
    with pytest.raises(caught, match="My alloc error"):
        rmm.DeviceBuffer(size=256)


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit])
def test_the_layers_callback_resource_lets_requests_to_stop_through(raised):
    resource = rmm.mr.CallbackMemoryResource(*raising(raised))
    with pytest.raises(raised):
        resource.allocate(256)


@pytest.mark.parametrize("raised", [Exception, BaseException, Failure, KeyError])
def test_gpumems_callback_resource_passes_exceptions_as_raised(raised):
    resource = mr.CallbackMemoryResource(*raising(raised))
    with pytest.raises(raised) as failure:
        gpumem.DeviceBuffer(size=256, mr=resource)
    assert type(failure.value) is raised


def test_the_layers_callback_resource_still_allocates_and_keeps_its_functions():
    base = rmm.mr.CudaMemoryResource()
    calls = []

    def allocate(size, stream):
        calls.append(size)
        return base.allocate(size, stream)

    def deallocate(ptr, size, stream):
        base.deallocate(ptr, size, stream)

    resource = rmm.mr.CallbackMemoryResource(allocate, deallocate)
    assert resource._allocate_func is allocate
    buffer = rmm.DeviceBuffer(size=300, mr=resource)
    assert calls == [300]
    del buffer


# ---- rmm_cupy_allocator ------------------------------------------------------------------

class FakeUnownedMemory:
    def __init__(self, ptr, size, owner, device_id):
        self.ptr, self.size, self._owner, self.device_id = ptr, size, owner, device_id


class FakeMemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset


class StreamObject:
    """A stream as CuPy's: the CUDA stream protocol."""

    def __init__(self, stream):
        self.stream = stream

    def __cuda_stream__(self):
        return 0, int(self.stream)


@pytest.fixture
def fake_cupy(monkeypatch):
    """A stand-in for the parts of CuPy the allocator uses, its current stream a new one."""
    stream = gpumem.Stream()
    cuda = types.SimpleNamespace(
        get_current_stream=lambda: StreamObject(stream), UnownedMemory=FakeUnownedMemory,
        memory=types.SimpleNamespace(MemoryPointer=FakeMemoryPointer),
        device=types.SimpleNamespace(get_device_id=gpumem._lib.get_device))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    return stream


def test_rmm_cupy_allocator_gives_device_buffers_on_cupys_stream(fake_cupy):
    from gpumem.rmm.allocators.cupy import rmm_cupy_allocator

    pointer = rmm_cupy_allocator(42)
    assert pointer.mem.size == 42 and pointer.mem.ptr != 0 and pointer.ptr == pointer.mem.ptr
    owner = pointer.mem._owner
    assert isinstance(owner, rmm.DeviceBuffer)
    assert owner.ptr == pointer.mem.ptr
    assert int(owner.stream) == int(fake_cupy), "on CuPy's current stream"
    assert pointer.mem.device_id == gpumem._lib.get_device()
    empty = rmm_cupy_allocator(0)
    assert empty.mem.size == 0 and empty.mem.ptr == 0
    assert isinstance(empty.mem._owner, rmm.DeviceBuffer)


def test_rmm_cupy_allocator_uses_the_current_resource(fake_cupy, pool):
    from gpumem.rmm.allocators.cupy import rmm_cupy_allocator

    rmm.mr.set_current_device_resource(pool)
    before = pool.live_bytes
    pointer = rmm_cupy_allocator(MiB)
    assert pool.live_bytes == before + MiB
    del pointer
    assert pool.live_bytes == before, "CuPy dropping the memory frees the buffer"


def test_rmm_cupy_allocator_without_cupy(monkeypatch):
    from gpumem.rmm.allocators.cupy import rmm_cupy_allocator

    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    with pytest.raises(ModuleNotFoundError, match="cupy"):
        rmm_cupy_allocator(10)
