"""Several Python threads allocating and freeing through one resource at once. The GIL is
held during each call, but threads switch between calls (made to switch often here), so
the C library's state is shared by interleaved work: at the end every count is back to
zero, no thread saw an error, and no two live blocks overlapped (each thread's data
survives the others' writes)."""
import random
import sys
import threading

import numpy as np
import pytest

import gpumem
from gpumem import mr

THREADS = 8
STEPS = 1000
STREAMS = [None, 1, 2]  # the default, legacy and per-thread default streams


@pytest.fixture(autouse=True)
def switch_threads_often():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def run_threads(work):
    """Runs work(index) on THREADS threads started together; returns their exceptions."""
    errors = []
    start = threading.Barrier(THREADS)

    def thread_main(index):
        try:
            start.wait()
            work(index)
        except BaseException as error:  # reported by the test, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def random_allocate_free(resource, index):
    rng = random.Random(index)
    stream = STREAMS[index % len(STREAMS)]
    live = []
    for _ in range(STEPS):
        if live and rng.random() < 0.45:
            ptr, size = live.pop(rng.randrange(len(live)))
            resource.deallocate(ptr, size, stream=stream)
        else:
            size = rng.choice([rng.randint(1, 4096), rng.randint(4096, 1 << 20)])
            live.append((resource.allocate(size, stream=stream), size))
    for ptr, size in live:
        resource.deallocate(ptr, size, stream=stream)


@pytest.mark.parametrize("spec", [
    "pool(cuda, initial=64MiB)",
    "pool(vmm)",
    "arena(cuda, size=64MiB)",
    "binning(pool(cuda, initial=32MiB), min=10, max=16)",
    "limit(pool(cuda, initial=64MiB), max=1GiB)",
    "pool(limit(vmm, max=4GiB))",
    "limit(arena(cuda, size=64MiB), max=1GiB)",
    "prefetch(pool(managed, initial=64MiB))",
    "stats(arena(cuda, size=64MiB))",
    "pool(stats(vmm))",
])
def test_threads_share_one_resource(spec):
    resource = mr.from_spec(spec)
    errors = run_threads(lambda index: random_allocate_free(resource, index))
    assert errors == []
    assert resource.live_count == 0
    assert resource.live_bytes == 0
    peak = resource.peak_live_bytes
    assert peak is None or peak > 0


def test_threads_blocks_never_overlap():
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="16MiB")

    def fill_and_check(index):
        rng = random.Random(index)
        live = []
        for step in range(150):
            if live and rng.random() < 0.4:
                buf, expected = live.pop(rng.randrange(len(live)))
                assert buf.tobytes() == expected, f"thread {index}: a block was overwritten"
            else:
                size = rng.randint(1, 64 << 10)
                data = np.full(size, (index * 31 + step) % 256, dtype=np.uint8).tobytes()
                live.append((gpumem.DeviceBuffer.to_device(data, mr=pool), data))
        for buf, expected in live:
            assert buf.tobytes() == expected, f"thread {index}: a block was overwritten"

    errors = run_threads(fill_and_check)
    assert errors == []
    assert pool.live_count == 0


def test_threads_allocating_from_the_current_resource_while_it_is_read():
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="16MiB")
    mr.set_current_device_resource(pool)

    def through_the_current_resource(index):
        for _ in range(200):
            assert mr.get_current_device_resource() is pool
            buf = gpumem.DeviceBuffer(size=1000 + index)
            assert buf.size == 1000 + index

    errors = run_threads(through_the_current_resource)
    assert errors == []
    assert pool.live_count == 0
    assert pool.peak_live_bytes >= 1000
    if gpumem.backend() == "sim":
        assert gpumem._lib.sim_hazard_count() == 0
