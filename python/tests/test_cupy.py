"""CuPy allocating through gpumem (cupy.cuda.set_allocator(gpumem_cupy_allocator)), on a
real GPU: results of a reduction and a sort are right, every CuPy array's memory comes from
gpumem's current resource and goes back to it, non-default CuPy streams work, and CuPy and
DeviceBuffer share memory through the CUDA array interface. Skipped on the simulated
device and where CuPy is not installed."""
import numpy as np
import pytest

import gpumem
from gpumem import mr

pytestmark = pytest.mark.gpu

MiB = 1 << 20


@pytest.fixture
def cupy_on_gpumem():
    """CuPy with gpumem's allocator and a pool of at most 256 MiB as the current resource;
    CuPy gets its own memory pool back afterwards."""
    cupy = pytest.importorskip("cupy")
    from gpumem.allocators.cupy import gpumem_cupy_allocator

    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="64MiB",
                                 maximum_pool_size="256MiB")
    mr.set_current_device_resource(pool)
    cupy.cuda.set_allocator(gpumem_cupy_allocator)
    try:
        yield cupy, pool
    finally:
        cupy.cuda.get_current_stream().synchronize()
        cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)


def test_a_reduction_is_right(cupy_on_gpumem):
    cupy, _pool = cupy_on_gpumem
    n = 1_000_000
    values = cupy.arange(n, dtype=cupy.float64)
    assert float(values.sum()) == n * (n - 1) / 2
    assert float(values.max()) == n - 1


def test_a_sort_is_right(cupy_on_gpumem):
    cupy, _pool = cupy_on_gpumem
    host = np.random.default_rng(0).standard_normal(200_000).astype(np.float32)
    ordered = cupy.sort(cupy.asarray(host))
    np.testing.assert_array_equal(cupy.asnumpy(ordered), np.sort(host))


def test_cupy_memory_comes_from_the_current_resource(cupy_on_gpumem):
    cupy, pool = cupy_on_gpumem
    before = (pool.live_count, pool.live_bytes)
    a = cupy.empty(MiB, dtype=cupy.uint8)
    b = cupy.ones(1000, dtype=cupy.float64)
    assert pool.live_count == before[0] + 2
    assert pool.live_bytes >= before[1] + MiB + 8000
    assert float(b.sum()) == 1000.0
    del a, b
    assert (pool.live_count, pool.live_bytes) == before, "freed arrays go back to gpumem"


def test_a_non_default_cupy_stream(cupy_on_gpumem):
    cupy, pool = cupy_on_gpumem
    before = pool.live_count
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        values = cupy.arange(10_000, dtype=cupy.int64)
        assert pool.live_count == before + 1
        doubled = values * 2
        total = int(doubled.sum())
        del values, doubled
    stream.synchronize()
    assert total == 2 * (10_000 * 9_999 // 2)
    assert pool.live_count == before


def test_cupy_out_of_memory_is_a_memory_error(cupy_on_gpumem):
    cupy, pool = cupy_on_gpumem
    with pytest.raises(MemoryError):
        cupy.empty(512 * MiB, dtype=cupy.uint8)  # past the pool's 256 MiB
    assert float(cupy.ones(10).sum()) == 10.0, "CuPy still allocates after the failure"


def test_cupy_and_device_buffers_share_memory(cupy_on_gpumem):
    cupy, pool = cupy_on_gpumem
    buf = gpumem.to_device(np.arange(10, dtype=np.int32).tobytes())
    view = cupy.asarray(buf)  # zero-copy, through __cuda_array_interface__
    assert view.data.ptr == buf.ptr
    np.testing.assert_array_equal(cupy.asnumpy(view.view(cupy.int32)), np.arange(10))

    squares = cupy.arange(8, dtype=cupy.float64) ** 2
    target = gpumem.DeviceBuffer(size=squares.nbytes)
    target.copy_from_device(squares)
    np.testing.assert_array_equal(np.frombuffer(target.tobytes()), np.arange(8) ** 2)
