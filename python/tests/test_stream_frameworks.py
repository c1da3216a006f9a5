"""gpumem.Stream over the real streams of cuda.bindings, cuda.core, CuPy, Numba and PyTorch,
and gpumem's streams handed to them (cuda.core reads the CUDA stream protocol). Each test
skips where its library is missing; all but cuda.bindings' need a GPU."""
import numpy as np
import pytest

import gpumem
from gpumem.stream import DEFAULT_STREAM, Stream


def check_usable(stream, handle):
    """`stream` is a Stream over `handle` that gpumem allocates and copies on."""
    assert stream.handle == handle
    buf = gpumem.DeviceBuffer.to_device(b"on a framework's stream", stream=stream)
    assert buf.stream is stream
    stream.synchronize()
    assert buf.tobytes() == b"on a framework's stream"


def test_cuda_bindings_handles():
    pytest.importorskip("cuda.bindings")
    from cuda.bindings import driver, runtime

    for handle in (driver.CUstream(0x1234), runtime.cudaStream_t(0x1234)):
        stream = Stream(handle)
        assert stream.handle == 0x1234 and stream._owner is handle
        assert gpumem._lib.stream_handle(handle) == 0x1234
    assert Stream(driver.CUstream(0)) == DEFAULT_STREAM


@pytest.mark.gpu
def test_cuda_core_streams_both_ways():
    core = pytest.importorskip("cuda.core")
    device = core.Device()
    device.set_current()
    theirs = device.create_stream()
    check_usable(Stream(theirs), theirs.__cuda_stream__()[1])
    ours = Stream()
    assert device.create_stream(ours).__cuda_stream__() == ours.__cuda_stream__()
    assert Stream(device.default_stream).__cuda_stream__() == \
        device.default_stream.__cuda_stream__()


@pytest.mark.gpu
def test_cupy_streams():
    cupy = pytest.importorskip("cupy")
    theirs = cupy.cuda.Stream(non_blocking=True)
    check_usable(Stream(theirs), theirs.ptr)
    ours = Stream()
    external = cupy.cuda.ExternalStream(ours.handle)
    with external:
        values = cupy.arange(10)
    ours.synchronize()
    assert int(values.sum()) == 45


@pytest.mark.gpu
def test_numba_streams():
    pytest.importorskip("numba")
    from numba import cuda

    theirs = cuda.stream()
    check_usable(Stream(theirs), int(theirs))
    ours = Stream()
    external = cuda.external_stream(ours.handle)
    array = cuda.to_device(np.arange(4, dtype=np.uint8), stream=external)
    target = gpumem.DeviceBuffer(size=4, stream=ours)
    target.copy_from_device(array, stream=ours)
    assert target.tobytes() == bytes([0, 1, 2, 3])


@pytest.mark.gpu
def test_torch_streams():
    torch = pytest.importorskip("torch")
    theirs = torch.cuda.Stream()
    check_usable(Stream(theirs), theirs.cuda_stream)
    ours = Stream()
    external = torch.cuda.ExternalStream(ours.handle)
    with torch.cuda.stream(external):
        total = torch.arange(10, device="cuda").sum()
    ours.synchronize()
    assert int(total) == 45
