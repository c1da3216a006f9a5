"""Resources and adaptors with Python callbacks: CallbackMemoryResource and
FailureCallbackResourceAdaptor, with RMM's signatures.

An exception a callback raises must reach the caller of the allocation (the very exception,
not a GpumemError, not stderr) and must not linger into a later, unrelated call; the
callables live as long as the C resource; calls may come from many threads, also through a
pool whose lock is held while its upstream's callback runs."""
import gc
import sys
import threading
import weakref

import pytest

import gpumem
import gpumem.mr


class Boom(Exception):
    pass


class Recorder:
    """allocate_func and deallocate_func over a gpumem cuda resource, recording each call;
    `fail_allocate` and `fail_deallocate` make the next calls raise them."""

    def __init__(self):
        self.base = gpumem.mr.CudaMemoryResource()
        self.calls = []
        self.fail_allocate = None
        self.fail_deallocate = None
        self.lock = threading.Lock()

    def allocate(self, size, stream):
        with self.lock:
            self.calls.append(("allocate", size, stream))
        if self.fail_allocate is not None:
            raise self.fail_allocate
        return self.base.allocate(size, stream)

    def deallocate(self, ptr, size, stream):
        with self.lock:
            self.calls.append(("deallocate", size, stream))
        if self.fail_deallocate is not None:
            raise self.fail_deallocate
        self.base.deallocate(ptr, size, stream)

    def resource(self):
        return gpumem.mr.CallbackMemoryResource(self.allocate, self.deallocate)


@pytest.fixture
def unraisable(monkeypatch):
    """What reaches sys.unraisablehook during the test (nothing should, for calls made from
    Python)."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


def test_device_buffer_allocates_through_the_functions(unraisable):
    rec = Recorder()
    mr = rec.resource()
    assert mr.name == "callback"
    buf = gpumem.DeviceBuffer(size=1000, mr=mr)
    buf.copy_from_host(bytes(range(200)) * 5)
    assert buf.tobytes() == bytes(range(200)) * 5
    assert mr.live_bytes == 1000 and mr.live_count == 1
    assert rec.calls == [("allocate", 1000, 0)]
    assert isinstance(rec.calls[0][2], int)  # the stream, as an int: 0 is the default stream
    del buf
    assert rec.calls[-1] == ("deallocate", 1000, 0)
    assert mr.live_count == 0
    gpumem.mr.set_current_device_resource(mr)
    gpumem.DeviceBuffer(size=64)
    assert rec.calls[-2:] == [("allocate", 64, 0), ("deallocate", 64, 0)]
    assert unraisable == []


def test_under_a_pool():
    rec = Recorder()
    pool = gpumem.mr.PoolMemoryResource(rec.resource(), initial_pool_size="2MiB")
    grown = len(rec.calls)
    assert grown == 1  # the initial chunk
    buffers = [gpumem.DeviceBuffer(size=100_000, mr=pool) for _ in range(10)]
    assert len(rec.calls) == grown  # served from the pool
    buffers.append(gpumem.DeviceBuffer(size=5 << 20, mr=pool))
    assert len(rec.calls) == grown + 1  # the pool grew through the function
    assert pool.live_bytes == 10 * 100_000 + (5 << 20)
    del buffers
    assert pool.live_count == 0


@pytest.mark.parametrize("through", ["allocate", "buffer", "pool", "current"])
def test_an_allocate_exception_reaches_the_caller(through, unraisable):
    rec = Recorder()
    mr = rec.resource()
    pool = gpumem.mr.PoolMemoryResource(mr, initial_pool_size="2MiB")
    gpumem.mr.set_current_device_resource(mr)
    rec.fail_allocate = Boom("no memory for you")
    with pytest.raises(Boom, match="no memory for you"):
        if through == "allocate":
            mr.allocate(100)
        elif through == "buffer":
            gpumem.DeviceBuffer(size=10, mr=mr)
        elif through == "pool":
            gpumem.DeviceBuffer(size=8 << 20, mr=pool)  # larger than the pool holds
        else:
            gpumem.DeviceBuffer(size=10)
    assert mr.live_count == 1  # the pool's chunk, nothing else
    assert unraisable == []
    # Nothing lingers: the next calls succeed, and an unrelated failure is its own.
    rec.fail_allocate = None
    gpumem.DeviceBuffer(size=10, mr=mr)
    with pytest.raises(gpumem.OutOfMemoryError):
        gpumem.mr.CudaMemoryResource().allocate(1 << 50)
    with pytest.raises(gpumem.InvalidArgumentError):
        mr.allocate(-1)


def test_memory_error_is_out_of_memory_in_c():
    rec = Recorder()
    rec.fail_allocate = MemoryError("intentional")
    with pytest.raises(MemoryError, match="intentional") as info:
        rec.resource().allocate(100)
    assert not isinstance(info.value, gpumem.GpumemError)  # the callback's own


def test_a_deallocate_exception_reaches_the_caller(unraisable):
    rec = Recorder()
    mr = rec.resource()
    ptr = mr.allocate(300)
    rec.fail_deallocate = Boom("not now")
    with pytest.raises(Boom, match="not now"):
        mr.deallocate(ptr, 300)
    assert mr.live_count == 1  # still live: it can be freed again
    rec.fail_deallocate = None
    mr.deallocate(ptr, 300)
    assert mr.live_count == 0
    assert unraisable == []


def test_a_deallocate_exception_in_a_destructor_is_unraisable(unraisable):
    rec = Recorder()
    mr = rec.resource()
    buf = gpumem.DeviceBuffer(size=10, mr=mr)
    rec.fail_deallocate = Boom("in a destructor")
    del buf
    assert any(isinstance(u.exc_value, Boom) for u in unraisable)
    rec.fail_deallocate = None  # the memory stays live, as the buffer could not free it
    assert mr.live_count == 1


def test_the_library_checks_what_the_functions_do():
    rec = Recorder()
    mr = rec.resource()
    ptr = mr.allocate(1000)
    calls = len(rec.calls)
    with pytest.raises(gpumem.GpumemError, match="MISUSE.*1000 bytes"):
        mr.deallocate(ptr, 999)
    with pytest.raises(gpumem.GpumemError, match="MISUSE"):
        mr.deallocate(ptr + 256, 10)
    assert len(rec.calls) == calls  # deallocate_func was not called
    mr.deallocate(ptr, 1000)
    with pytest.raises(gpumem.GpumemError, match="not a live allocation"):
        mr.deallocate(ptr, 1000)

    base = gpumem.mr.CudaMemoryResource()
    kept = []

    def misaligned(size, stream):
        kept.append(base.allocate(size + 256))
        return kept[-1] + 8

    def give_back(ptr, size, stream):
        base.deallocate(kept.pop(), size + 256)

    with pytest.raises(gpumem.GpumemError, match="not aligned"):
        gpumem.mr.CallbackMemoryResource(misaligned, give_back).allocate(100)
    assert kept == [] and base.live_count == 0  # given back at once

    with pytest.raises(TypeError, match="must return an int"):
        gpumem.mr.CallbackMemoryResource(lambda size, stream: "here", give_back).allocate(10)
    with pytest.raises(gpumem.GpumemError, match="NULL"):
        gpumem.mr.CallbackMemoryResource(lambda size, stream: 0, give_back).allocate(10)
    with pytest.raises(TypeError):
        gpumem.mr.CallbackMemoryResource(None, give_back)


def test_the_functions_live_as_long_as_the_resource():
    rec = Recorder()
    allocate_ref = weakref.ref(rec)
    pool = gpumem.mr.PoolMemoryResource(rec.resource(), initial_pool_size="2MiB")
    del rec
    gc.collect()
    assert allocate_ref() is not None  # the C resource under the pool holds the functions
    buf = gpumem.DeviceBuffer(size=4 << 20, mr=pool)  # grows through them
    del buf, pool
    gc.collect()
    assert allocate_ref() is None  # released with the resource


def test_calls_from_threads_through_a_pool():
    rec = Recorder()
    pool = gpumem.mr.PoolMemoryResource(rec.resource(), initial_pool_size="2MiB")
    errors = []

    def work(seed):
        try:
            for i in range(200):
                size = ((seed * 7919 + i * 104729) % 3 + 1) << 20
                bufs = [gpumem.DeviceBuffer(size=size, mr=pool) for _ in range(2)]
                del bufs
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "deadlock"
    assert errors == []
    assert pool.live_count == 0
    assert len(rec.calls) > 1  # the pool grew through the function from several threads


def test_an_exception_reaches_the_thread_that_allocated():
    rec = Recorder()
    mr = rec.resource()
    seen = {}

    def work(name):
        try:
            gpumem.DeviceBuffer(size=10, mr=mr)
            seen[name] = "allocated"
        except Boom as error:
            seen[name] = str(error)

    rec.fail_allocate = Boom("from a thread")
    thread = threading.Thread(target=work, args=("t",))
    thread.start()
    thread.join()
    assert seen == {"t": "from a thread"}


# ---- FailureCallbackResourceAdaptor ----


def test_retries_while_the_callback_says_so():
    allocations = 0
    callbacks = []

    def callback(nbytes):
        callbacks.append(nbytes)
        return len(callbacks) == 1

    def allocate_func(size, stream):
        nonlocal allocations
        allocations += 1
        raise MemoryError("intentional allocation failure")

    failing = gpumem.mr.CallbackMemoryResource(allocate_func, lambda ptr, size, stream: None)
    mr = gpumem.mr.FailureCallbackResourceAdaptor(failing, callback)
    gpumem.mr.set_current_device_resource(mr)
    with pytest.raises(MemoryError, match="intentional"):
        gpumem.DeviceBuffer(size=256)
    assert allocations == 2  # the first try and one retry
    assert callbacks == [256, 256]  # yes, then no


def test_retries_against_a_resource_out_of_memory():
    callbacks = []
    mr = gpumem.mr.FailureCallbackResourceAdaptor(
        gpumem.mr.CudaMemoryResource(), lambda nbytes: callbacks.append(nbytes) or len(callbacks) < 3)
    with pytest.raises(gpumem.OutOfMemoryError, match="gave up after 2 retries"):
        gpumem.DeviceBuffer(size=1 << 50, mr=mr)
    assert callbacks == [1 << 50] * 3


def test_a_callback_exception_reaches_the_caller(unraisable):
    def callback(nbytes):
        raise RuntimeError("MyError")

    mr = gpumem.mr.FailureCallbackResourceAdaptor(gpumem.mr.CudaMemoryResource(), callback)
    with pytest.raises(RuntimeError, match="MyError"):
        gpumem.DeviceBuffer(size=1 << 50, mr=mr)
    assert unraisable == []
    gpumem.DeviceBuffer(size=100, mr=mr)  # nothing lingers
    with pytest.raises(gpumem.OutOfMemoryError):
        gpumem.mr.CudaMemoryResource().allocate(1 << 50)


def test_a_callback_that_frees_memory_lets_the_retry_succeed():
    pool = gpumem.mr.from_spec("pool(cuda, initial=4MiB, max=4MiB)")
    held = [gpumem.DeviceBuffer(size=3 << 20, mr=pool)]

    def callback(nbytes):
        if not held:
            return False
        held.clear()
        return True

    mr = gpumem.mr.FailureCallbackResourceAdaptor(pool, callback)
    buf = gpumem.DeviceBuffer(size=2 << 20, mr=mr)
    assert held == [] and buf.size == 2 << 20


def test_other_failures_are_not_retried():
    callbacks = []
    faulty = gpumem.mr.FaultyMemoryResource(gpumem.mr.CudaMemoryResource(), fail_at=1)
    mr = gpumem.mr.FailureCallbackResourceAdaptor(faulty, lambda n: callbacks.append(n) or True)
    with pytest.raises(gpumem.GpumemError, match="INJECTED_FAULT"):
        mr.allocate(100)
    assert callbacks == []


def test_a_callback_may_allocate_from_the_adaptor():
    callbacks = []

    def callback(nbytes):
        callbacks.append(nbytes)
        with pytest.raises(MemoryError):  # a failure inside the callback is not retried
            gpumem.DeviceBuffer(size=nbytes, mr=mr)
        return len(callbacks) < 2

    mr = gpumem.mr.FailureCallbackResourceAdaptor(gpumem.mr.CudaMemoryResource(), callback)
    with pytest.raises(MemoryError):
        gpumem.DeviceBuffer(size=1 << 50, mr=mr)
    assert callbacks == [1 << 50, 1 << 50]


def test_failure_callbacks_from_threads():
    pool = gpumem.mr.from_spec("pool(cuda, initial=2MiB, max=2MiB)")
    lock = threading.Lock()
    counts = {"calls": 0}

    def callback(nbytes):
        with lock:
            counts["calls"] += 1
        return False

    mr = gpumem.mr.FailureCallbackResourceAdaptor(pool, callback)
    failures = []

    def work():
        for _ in range(100):
            try:
                gpumem.DeviceBuffer(size=3 << 20, mr=mr)  # never fits
            except MemoryError:
                failures.append(1)
            gpumem.DeviceBuffer(size=1000, mr=mr)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert len(failures) == 400 and counts["calls"] == 400


def test_callback_resource_named_for_specs():
    """A CallbackMemoryResource named for specs serves a pool built from a spec string, and
    the name refuses what the C call refuses."""
    recorder = Recorder()
    mine = recorder.resource()
    gpumem.mr.define_spec_name("py_mine", mine)
    try:
        pool = gpumem.mr.from_spec("pool(py_mine, initial=1)")
        buf = gpumem.DeviceBuffer(size=1000, mr=pool)
        assert [call[0] for call in recorder.calls] == ["allocate"]
        del buf, pool
        gc.collect()
    finally:
        gpumem.mr.define_spec_name("py_mine", None)
    with pytest.raises(ValueError, match="unknown resource 'py_mine'"):
        gpumem.mr.from_spec("pool(py_mine)")
    with pytest.raises(ValueError, match="built-in resource kind"):
        gpumem.mr.define_spec_name("pool", mine)
    with pytest.raises(ValueError, match="is not defined"):
        gpumem.mr.define_spec_name("py_mine", None)
