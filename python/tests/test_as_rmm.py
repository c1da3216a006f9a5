"""The RMM-compatible layer (gpumem.rmm) and the ways of installing it as `rmm`:
install_as_rmm(), `python -m gpumem.as_rmm`, and GPUMEM_AS_RMM=1 through the .pth file in
site-packages (docs/rmm-compat.md). The layer is checked in this process as gpumem.rmm;
everything that installs `rmm` runs in a fresh interpreter, so this process never has it.
The snippets of RMM's user guides that gpumem was started from (the seeds 000 and 001, read
from /work/shared/seeds or GPUMEM_SEEDS; skipped where they are not) run as they are
written under `python -m gpumem.as_rmm`, where they need no GPU library.
"""
import ast
import copy
import doctest
import importlib
import os
import pickle
import subprocess
import sys
import textwrap
import warnings

import pytest

import gpumem
import gpumem.mr
import gpumem.statistics
from gpumem.rmm._cuda import gpu


def run(args, tmp_path, env=None, check=True):
    """Runs `python ARGS` in tmp_path with this suite's device; returns the result."""
    environment = dict(os.environ)
    environment.pop("GPUMEM_AS_RMM", None)
    environment.update(env or {})
    result = subprocess.run([sys.executable, *args], cwd=tmp_path, env=environment,
                            capture_output=True, text=True, timeout=120)
    if check:
        assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def as_rmm(source, tmp_path, *args, env=None, check=True):
    """Runs the source as a script under python -m gpumem.as_rmm."""
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(source))
    return run(["-m", "gpumem.as_rmm", str(script), *args], tmp_path, env, check)


# RMM's modules, as users import them, and names each must give.
LAYOUT = {
    "": ["DeviceBuffer", "RMMError", "reinitialize", "is_initialized", "mr", "enable_logging",
         "disable_logging", "get_log_filenames", "level_enum", "set_logging_level",
         "get_logging_level", "should_log", "flush_logger", "set_flush_level",
         "get_flush_level", "__version__", "__git_commit__", "register_reinitialize_hook",
         "unregister_reinitialize_hook"],
    ".mr": ["PoolMemoryResource", "CudaMemoryResource", "ManagedMemoryResource",
            "DeviceMemoryResource", "UpstreamResourceAdaptor", "StatisticsResourceAdaptor",
            "get_current_device_resource", "set_current_device_resource",
            "get_per_device_resource_type", "get_current_device_resource_type", "experimental",
            "CudaAsyncViewMemoryResource", "_flush_logs"],
    ".mr.experimental": ["CudaAsyncManagedMemoryResource"],
    ".statistics": ["Statistics", "enable_statistics", "get_statistics", "push_statistics",
                    "pop_statistics", "statistics", "profiler", "ProfilerRecords",
                    "default_profiler_records"],
    ".pylibrmm": ["DeviceBuffer", "CudaStreamFlags", "CudaStreamPool", "memory_resource"],
    ".pylibrmm.stream": ["CudaStreamFlags", "Stream", "DEFAULT_STREAM", "LEGACY_DEFAULT_STREAM",
                         "PER_THREAD_DEFAULT_STREAM"],
    ".pylibrmm.device_buffer": ["DeviceBuffer", "to_device", "copy_ptr_to_host",
                                "copy_host_to_ptr", "copy_device_to_ptr"],
    ".pylibrmm.memory_resource": ["PoolMemoryResource", "DeviceMemoryResource"],
    ".pylibrmm.memory_resource.experimental": ["CudaAsyncManagedMemoryResource"],
    ".pylibrmm.memory_resource._memory_resource": ["PoolMemoryResource", "enable_logging"],
    ".pylibrmm.cuda_stream_pool": ["CudaStreamPool"],
    ".pylibrmm.logger": ["level_enum", "set_logging_level", "should_log", "flush_logger"],
    "._cuda.gpu": ["getDevice", "setDevice", "getDeviceCount", "CUDARuntimeError",
                   "runtimeGetVersion", "driverGetVersion", "getDeviceAttribute"],
    ".allocators": [],
}


@pytest.mark.parametrize("module", sorted(LAYOUT))
def test_module_layout(module):
    loaded = importlib.import_module("gpumem.rmm" + module)
    missing = [name for name in LAYOUT[module] if not hasattr(loaded, name)]
    assert not missing
    for name in getattr(loaded, "__all__", []):
        assert hasattr(loaded, name), f"{module}.__all__ names {name}, which is absent"


def test_names_are_gpumems_objects():
    import gpumem.rmm as rmm

    assert rmm.mr.DeviceMemoryResource is gpumem.mr.MemoryResource
    assert rmm.mr.UpstreamResourceAdaptor is gpumem.mr.UpstreamMemoryResource
    assert rmm.statistics.statistics is gpumem.statistics.statistics
    assert rmm.reinitialize is gpumem.reinitialize
    assert rmm.register_reinitialize_hook is gpumem.register_reinitialize_hook
    assert rmm.unregister_reinitialize_hook is gpumem.unregister_reinitialize_hook
    assert rmm.RMMError is gpumem.GpumemError
    assert issubclass(gpumem.OutOfMemoryError, rmm.RMMError)
    from gpumem.rmm.pylibrmm import cuda_stream_pool, stream

    assert stream.Stream is gpumem.Stream
    assert stream.CudaStreamFlags is gpumem.stream.CudaStreamFlags
    assert rmm.pylibrmm.CudaStreamFlags is gpumem.stream.CudaStreamFlags
    for name in ("DEFAULT_STREAM", "LEGACY_DEFAULT_STREAM", "PER_THREAD_DEFAULT_STREAM"):
        assert getattr(stream, name) is getattr(gpumem.stream, name)
    assert cuda_stream_pool.CudaStreamPool is gpumem.stream.CudaStreamPool
    assert rmm.pylibrmm.CudaStreamPool is gpumem.stream.CudaStreamPool


# The layer's classes: gpumem's, with RMM 26.06's stream arguments and nothing else.
LAYER_RESOURCES = ["ArenaMemoryResource", "BinningMemoryResource", "CallbackMemoryResource",
                   "CudaAsyncMemoryResource", "CudaAsyncViewMemoryResource",
                   "CudaMemoryResource", "FailureCallbackResourceAdaptor",
                   "FixedSizeMemoryResource", "LimitingResourceAdaptor",
                   "LoggingResourceAdaptor", "ManagedMemoryResource",
                   "PinnedHostMemoryResource", "PoolMemoryResource", "PrefetchResourceAdaptor",
                   "StatisticsResourceAdaptor", "SystemMemoryResource",
                   "TrackingResourceAdaptor"]


@pytest.mark.parametrize("name", LAYER_RESOURCES)
def test_resource_classes_are_gpumems_with_rmms_stream_arguments(name):
    import gpumem.rmm as rmm

    layer, own = getattr(rmm.mr, name), getattr(gpumem.mr, name)
    assert layer.__mro__[2] is own and layer.__name__ == name  # the mixin, then gpumem's
    assert getattr(rmm.pylibrmm.memory_resource, name) is layer
    assert issubclass(layer, rmm.mr.DeviceMemoryResource)
    # CallbackMemoryResource adds RMM's exception rule to its constructor (test_rmm_behaviours.py)
    own_names = {"__init__"} if name == "CallbackMemoryResource" else set()
    assert set(layer.__dict__) <= {"__module__", "__qualname__", "__doc__"} | own_names


def test_the_layers_buffer_refuses_stream_none():
    import gpumem.rmm as rmm
    from gpumem.rmm.pylibrmm import device_buffer

    assert issubclass(rmm.DeviceBuffer, gpumem.DeviceBuffer)
    with pytest.raises(TypeError, match="stream argument cannot be None"):
        rmm.DeviceBuffer(size=10, stream=None)
    with pytest.raises(TypeError, match="stream argument cannot be None"):
        rmm.DeviceBuffer.to_device(b"abc", stream=None)
    with pytest.raises(TypeError, match="stream argument cannot be None"):
        device_buffer.to_device(b"abc", None)
    buffer = rmm.DeviceBuffer.to_device(b"abcd")
    for call in (lambda: buffer.copy_to_host(stream=None),
                 lambda: buffer.copy_to_host(None, None),
                 lambda: buffer.copy_from_host(b"xy", stream=None),
                 lambda: buffer.copy_from_device(rmm.DeviceBuffer.to_device(b"xy"), None),
                 lambda: buffer.tobytes(stream=None),
                 lambda: buffer.reserve(100, stream=None),
                 lambda: buffer.resize(2, None)):
        with pytest.raises(TypeError, match="stream argument cannot be None"):
            call()
    # a refusal leaves the buffer as it was
    assert (buffer.size, buffer.capacity(), buffer.tobytes()) == (4, 4, b"abcd")
    buffer.prefetch(stream=None)  # RMM 26.06 keeps prefetch's None
    host = bytearray(2)
    for call in (lambda: device_buffer.copy_ptr_to_host(buffer.ptr, host, stream=None),
                 lambda: device_buffer.copy_host_to_ptr(b"zz", buffer.ptr, None),
                 lambda: device_buffer.copy_device_to_ptr(buffer.ptr, buffer.ptr, 2, None)):
        with pytest.raises(TypeError, match="stream argument cannot be None"):
            call()
    assert host == bytearray(2) and buffer.tobytes() == b"abcd"
    # gpumem's own keeps taking None
    own = gpumem.DeviceBuffer(size=4, stream=None)
    own.copy_from_host(b"abcd", stream=None)
    assert own.tobytes(stream=None) == b"abcd"


def test_the_layers_buffer_defaults_to_the_default_stream():
    import gpumem.rmm as rmm
    from gpumem.rmm.pylibrmm import device_buffer
    from gpumem.rmm.pylibrmm.stream import DEFAULT_STREAM, Stream

    buffer = rmm.DeviceBuffer(size=4)
    assert buffer.stream == DEFAULT_STREAM
    buffer.copy_from_host(b"wxyz")
    assert bytes(buffer.copy_to_host()) == b"wxyz" and buffer.tobytes() == b"wxyz"
    buffer.resize(6)
    buffer.reserve(16)
    assert (buffer.size, buffer.capacity()) == (6, 16)
    stream = Stream()
    other = rmm.DeviceBuffer(size=4, stream=stream)
    assert other.stream == stream
    other.copy_from_device(rmm.DeviceBuffer.to_device(b"wxyz"), stream=stream)
    assert other.tobytes(stream) == b"wxyz"
    host = bytearray(4)
    device_buffer.copy_ptr_to_host(other.ptr, host)
    device_buffer.copy_host_to_ptr(b"ab", other.ptr)
    device_buffer.copy_device_to_ptr(buffer.ptr, other.ptr + 2, 2)
    DEFAULT_STREAM.synchronize()
    assert host == b"wxyz" and other.tobytes() == b"abwx"


def test_the_layers_buffer_class_is_kept():
    import gpumem.rmm as rmm
    from gpumem.rmm.pylibrmm import device_buffer

    buffer = rmm.DeviceBuffer.to_device(b"abc")
    made = [buffer, rmm.to_device(b"abc"), device_buffer.to_device(b"abc"), buffer.copy(),
            copy.copy(buffer), copy.deepcopy(buffer)]
    made += [pickle.loads(pickle.dumps(buffer, protocol=protocol)) for protocol in (2, 5)]
    for each in made:
        assert type(each) is rmm.DeviceBuffer and each.tobytes() == b"abc"

    class Mine(rmm.DeviceBuffer):
        pass

    assert type(Mine.to_device(b"x")) is Mine
    with pytest.raises(TypeError, match="stream argument cannot be None"):
        Mine.to_device(b"x", stream=None)


def test_the_layers_resources_refuse_stream_none():
    import gpumem.rmm as rmm

    pool = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size="1MiB")
    with pytest.raises(TypeError, match="stream argument cannot be None"):
        pool.allocate(256, stream=None)
    with pytest.raises(TypeError, match="stream argument cannot be None"):
        pool.allocate(256, None)
    assert pool.live_bytes == 0  # nothing was allocated
    pointer = pool.allocate(256)
    with pytest.raises(TypeError, match="stream argument cannot be None"):
        pool.deallocate(pointer, 256, stream=None)
    assert pool.live_bytes == 256  # nor freed
    pool.deallocate(pointer, 256)
    pool.deallocate(pool.allocate(8, rmm.pylibrmm.stream.DEFAULT_STREAM), 8,
                    rmm.pylibrmm.stream.Stream())
    assert pool.live_bytes == 0
    # gpumem's own keep taking None
    own = gpumem.mr.CudaMemoryResource()
    own.deallocate(own.allocate(8, None), 8, None)


def test_resources_gpumem_built_come_as_the_layers():
    import gpumem.rmm as rmm

    gpumem.mr.set_per_device_resource(0, None)  # the default
    default = rmm.mr.get_current_device_resource()
    assert type(default) is rmm.mr.CudaMemoryResource
    assert default is rmm.mr.get_per_device_resource(0)
    assert rmm.DeviceBuffer(size=8).mr is default
    with pytest.raises(TypeError, match="stream argument cannot be None"):
        default.allocate(8, stream=None)
    own = gpumem.mr.get_current_device_resource()  # gpumem's object of it stays gpumem's
    assert type(own) is gpumem.mr.CudaMemoryResource and own.handle == default.handle
    own.deallocate(own.allocate(8, None), 8, None)

    rmm.reinitialize(pool_allocator=True, initial_pool_size="1MiB")
    pool = rmm.mr.get_current_device_resource()
    assert type(pool) is rmm.mr.PoolMemoryResource
    assert rmm.mr.get_current_device_resource_type() is rmm.mr.PoolMemoryResource
    assert isinstance(pool, gpumem.mr.PoolMemoryResource) and pool.pool_size() >= 1 << 20
    with pytest.raises(TypeError, match="stream argument cannot be None"):
        pool.upstream_mr.allocate(8, None)  # its upstream comes as the layer's too
    assert pool.get_upstream() is pool.upstream_mr

    with rmm.statistics.statistics():  # gpumem.statistics sets gpumem's adaptor
        stats = rmm.mr.get_current_device_resource()
        assert type(stats) is rmm.mr.StatisticsResourceAdaptor
        assert stats.upstream_mr is pool
        buffer = rmm.DeviceBuffer(size=20)
        assert buffer.mr is stats
        del buffer
    assert rmm.mr.get_current_device_resource() is pool

    mine = rmm.mr.CudaMemoryResource()  # what the program set comes back as it is
    rmm.mr.set_current_device_resource(mine)
    assert rmm.mr.get_current_device_resource() is mine


def test_a_buffers_resource_read_before_anything_asked_for_the_current_one():
    import gpumem.rmm as rmm

    gpumem.mr.set_per_device_resource(0, None)  # the default, not yet asked for
    first = rmm.DeviceBuffer(size=8)
    assert first.mr is rmm.mr.get_current_device_resource()
    second = rmm.DeviceBuffer(size=8)
    rmm.mr.set_current_device_resource(rmm.mr.CudaMemoryResource())
    # no longer current, and gpumem has no typed object of it: a plain view, still the
    # layer's, over the buffer's resource
    old = second.mr
    assert isinstance(old, rmm.mr.DeviceMemoryResource) and old.handle == first.mr.handle
    with pytest.raises(TypeError, match="stream argument cannot be None"):
        old.allocate(8, None)
    old.deallocate(old.allocate(8), 8)


def test_one_view_per_resource_across_threads():
    import threading

    import gpumem.rmm as rmm

    gpumem.mr.set_per_device_resource(0, None)
    gpumem.mr.get_current_device_resource()  # gpumem's typed object, not yet viewed
    seen, start = [], threading.Barrier(8)

    def ask():
        start.wait()
        seen.append(rmm.mr.get_current_device_resource())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and all(each is seen[0] for each in seen)


def test_resource_type_functions():
    import gpumem.rmm as rmm

    pool = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size="1MiB")
    rmm.mr.set_current_device_resource(pool)
    assert rmm.mr.get_current_device_resource_type() is rmm.mr.PoolMemoryResource
    assert rmm.mr.get_per_device_resource_type(0) is rmm.mr.PoolMemoryResource


def test_flush_logs(tmp_path):
    from gpumem.rmm.pylibrmm.memory_resource._memory_resource import _flush_logs

    log = gpumem.mr.LoggingResourceAdaptor(gpumem.mr.CudaMemoryResource(),
                                           str(tmp_path / "log.csv"))
    gpumem.mr.set_per_device_resource(0, log)
    buffer = gpumem.DeviceBuffer(size=1000)
    _flush_logs()
    # Flushed, the file holds the events and ends there (the log's unflushed tail is
    # zeros of the space it reserves).
    with open(log.get_file_name(), encoding="utf-8") as text:
        lines = text.read().split("\n")
    assert ",1000," in lines[1] and lines[2:] == [""]
    del buffer


def test_version_is_rmm_style():
    import gpumem.rmm as rmm

    api, _, local = rmm.__version__.partition("+")
    assert len(api.split(".")) == 3 and all(part.isdigit() for part in api.split("."))
    assert local == f"gpumem.{gpumem.__version__}"
    assert rmm.__git_commit__ == ""


def test_logger_levels():
    from gpumem.rmm.pylibrmm import logger

    before = logger.get_logging_level()
    assert before == logger.level_enum.info
    try:
        with pytest.warns(UserWarning, match="gpumem will not log level_enum.error"):
            logger.set_logging_level(logger.level_enum.error)
        assert logger.get_logging_level() == logger.level_enum.error
        assert not logger.should_log(logger.level_enum.critical)
        logger.set_flush_level(logger.level_enum.trace)
        assert logger.get_flush_level() == logger.level_enum.trace
        logger.flush_logger()
        for bad in ("info", 2, None):
            with pytest.raises(TypeError):
                logger.set_logging_level(bad)
            with pytest.raises(TypeError):
                logger.should_log(bad)
        assert logger.get_logging_level() == logger.level_enum.error  # a refusal keeps it
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logger.set_logging_level(before)
        logger.set_flush_level(logger.level_enum.warn)


def test_cuda_gpu_functions():
    assert gpu.getDeviceCount() == gpumem._lib.device_count()
    assert gpu.getDevice() == gpumem._lib.get_device()
    gpu.setDevice(gpu.getDevice())
    assert gpu.deviceGetName(0) == gpumem._lib.device_name(0)
    with pytest.raises(gpu.CUDARuntimeError, match="does not exist") as caught:
        gpu.setDevice(gpu.getDeviceCount())
    assert caught.value.status == "GPUMEM_ERR_INVALID_DEVICE"
    again = pickle.loads(pickle.dumps(caught.value))
    assert (type(again), again.status, str(again)) == (type(caught.value), caught.value.status,
                                                      str(caught.value))


def test_cuda_gpu_functions_through_cuda_python(tmp_path):
    # A stand-in for cuda-python's runtime bindings: the calls RMM makes through them go
    # through them, statuses and all; without cuda-python they raise ImportError.
    fakes = tmp_path / "fakes"
    (fakes / "cuda" / "bindings").mkdir(parents=True)
    (fakes / "cuda" / "__init__.py").write_text("")
    (fakes / "cuda" / "bindings" / "__init__.py").write_text("")
    (fakes / "cuda" / "bindings" / "runtime.py").write_text(textwrap.dedent("""
        import enum
        class cudaError_t(enum.IntEnum):
            cudaSuccess = 0
            cudaErrorInvalidDevice = 101
        def getLocalRuntimeVersion():
            return cudaError_t.cudaSuccess, 12050
        def cudaDriverGetVersion():
            return cudaError_t.cudaSuccess, 13000
        def cudaDeviceGetAttribute(attr, device):
            if device > 0:
                return cudaError_t.cudaErrorInvalidDevice, None
            return cudaError_t.cudaSuccess, attr * 10
        def cudaGetErrorString(status):
            return cudaError_t.cudaSuccess, b"invalid device ordinal"
        """))
    result = run(["-c", textwrap.dedent("""
        from gpumem.rmm._cuda import gpu
        print(gpu.runtimeGetVersion(), gpu.driverGetVersion(), gpu.getDeviceAttribute(4, 0))
        try:
            gpu.getDeviceAttribute(4, 1)
        except gpu.CUDARuntimeError as error:
            print(error.status.name, "|", error)
        """)], tmp_path, env={"PYTHONPATH": str(fakes)})
    assert result.stdout.splitlines() == [
        "12050 13000 40",
        "cudaErrorInvalidDevice | cudaErrorInvalidDevice: invalid device ordinal"]
    try:
        importlib.import_module("cuda.bindings.runtime")
    except ImportError:
        with pytest.raises(ImportError):
            gpu.runtimeGetVersion()


def test_importing_gpumem_installs_nothing(tmp_path):
    result = run(["-c", "import sys, gpumem, gpumem.rmm\n"
                  "print(any(type(f).__name__ == '_AliasFinder' for f in sys.meta_path))\n"
                  "try:\n import rmm\nexcept ModuleNotFoundError:\n print('no rmm')"],
                 tmp_path)
    assert result.stdout.splitlines() == ["False", "no rmm"]


def fake_package(tmp_path, name, body):
    package = tmp_path / "fakes" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(body))
    return str(tmp_path / "fakes")


def test_import_rmm_imports_no_framework(tmp_path):
    # Frameworks that refuse to be imported: the layer must not touch them until asked.
    fakes = None
    for name in ("cupy", "numba", "torch"):
        fakes = fake_package(tmp_path, name, f"raise ImportError('{name} was imported')")
    output = as_rmm("""
        import sys
        import rmm, rmm.mr, rmm.statistics, rmm.allocators, rmm.pylibrmm, rmm._cuda.gpu
        import rmm.pylibrmm.stream, rmm.pylibrmm.logger, rmm.mr.experimental
        buffer = rmm.DeviceBuffer(size=10)
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("cupy", "numba", "torch")))
        print(rmm.rmm_cupy_allocator is rmm.allocators.cupy.rmm_cupy_allocator)
        try:
            rmm.RMMNumbaManager
        except ImportError as error:
            print(error)
        try:
            rmm.no_such_name
        except AttributeError as error:
            print("AttributeError")
        """, tmp_path, env={"PYTHONPATH": fakes}).stdout.splitlines()
    assert output == ["[]", "True", "numba was imported", "AttributeError"]


def test_old_names_and_allocator_modules(tmp_path):
    output = as_rmm("""
        import rmm
        import rmm.allocators.cupy
        import gpumem.allocators.cupy
        print(rmm.rmm_cupy_allocator is rmm.allocators.cupy.rmm_cupy_allocator
              is not gpumem.allocators.cupy.gpumem_cupy_allocator)
        print(sorted(n for n in ("rmm_cupy_allocator", "RMMNumbaManager", "to_device")
                     if n in dir(rmm)))
        """, tmp_path).stdout.split("\n")
    assert output[:2] == ["True", "['RMMNumbaManager', 'rmm_cupy_allocator', 'to_device']"]


def test_import_rmm_loads_what_rmm_loads(tmp_path):
    # After a bare `import rmm`, RMM's code reaches these as attributes.
    output = as_rmm("""
        import rmm
        print(rmm._cuda.gpu.getDevice(), rmm.statistics.statistics.__name__,
              rmm.pylibrmm.stream.CudaStreamFlags.NON_BLOCKING.value,
              rmm.pylibrmm.memory_resource._memory_resource.__name__,
              rmm.pylibrmm.logger.level_enum.info.name, rmm.mr.experimental.__name__)
        """, tmp_path).stdout.split()
    assert output == ["0", "statistics", "1", "gpumem.rmm.pylibrmm.memory_resource._memory_resource",
                      "info", "gpumem.rmm.mr.experimental"]


def test_one_module_under_two_names(tmp_path):
    output = as_rmm("""
        import sys, importlib
        import rmm.mr, gpumem.rmm.mr
        print(rmm.mr is gpumem.rmm.mr, sys.modules["rmm"] is sys.modules["gpumem.rmm"])
        print(rmm.mr.__spec__.name, rmm.mr.__name__)
        importlib.reload(rmm.mr)
        try:
            import rmm.no_such_module
        except ModuleNotFoundError as error:
            print(error.name)
        """, tmp_path).stdout.splitlines()
    assert output == ["True True", "gpumem.rmm.mr gpumem.rmm.mr", "rmm.no_such_module"]


def test_install_refused_after_a_real_rmm(tmp_path):
    fakes = fake_package(tmp_path, "rmm", "REAL = True\n")
    result = run(["-c", "import rmm, gpumem\n"
                  "try:\n gpumem.install_as_rmm()\nexcept RuntimeError as error:\n print(error)\n"
                  "import rmm\nprint(rmm.REAL)"],
                 tmp_path, env={"PYTHONPATH": fakes})
    assert "a module named rmm is already imported" in result.stdout
    assert result.stdout.splitlines()[-1] == "True"  # the real one is left in place
    # Asked before anything imported rmm, gpumem replaces it, as the user asked.
    result = run(["-c", "import gpumem; gpumem.install_as_rmm(); gpumem.install_as_rmm()\n"
                  "import rmm; print(rmm.__name__)"], tmp_path, env={"PYTHONPATH": fakes})
    assert result.stdout.split() == ["gpumem.rmm"]
    # The runner refuses too, through the same check, when the program's start imported rmm.
    result = run(["-c", "import rmm, runpy, sys; sys.argv = ['as_rmm', '-c', 'pass']\n"
                  "runpy.run_module('gpumem.as_rmm', run_name='__main__')"],
                 tmp_path, env={"PYTHONPATH": fakes}, check=False)
    assert result.returncode != 0 and "already imported" in result.stderr


def test_child_processes_get_the_layer(tmp_path):
    output = as_rmm("""
        import multiprocessing, os, subprocess, sys

        def child(queue):
            import rmm
            queue.put(rmm.__name__)

        if __name__ == "__main__":
            print(os.environ["GPUMEM_AS_RMM"])
            context = multiprocessing.get_context("spawn")
            queue = context.Queue()
            process = context.Process(target=child, args=(queue,))
            process.start()
            print(queue.get(timeout=60))
            process.join()
            print(process.exitcode)
            print(subprocess.run([sys.executable, "-c", "import rmm; print(rmm.__name__)"],
                                 capture_output=True, text=True).stdout.strip())
        """, tmp_path).stdout.splitlines()
    assert output == ["1", "gpumem.rmm", "0", "gpumem.rmm"]


def test_environment_variable_alone(tmp_path):
    code = "import rmm; print(rmm.__name__, rmm.DeviceBuffer(size=8).size)"
    assert run(["-c", code], tmp_path, env={"GPUMEM_AS_RMM": "1"}).stdout.split() == [
        "gpumem.rmm", "8"]
    for value in ("0", ""):
        result = run(["-c", code], tmp_path, env={"GPUMEM_AS_RMM": value}, check=False)
        assert result.returncode != 0 and "No module named 'rmm'" in result.stderr


def test_runner_forms(tmp_path):
    (tmp_path / "tool.py").write_text("import sys, rmm\nprint(__name__, sys.argv[1:], "
                                      "rmm.__name__)\n")
    assert run(["-m", "gpumem.as_rmm", "-m", "tool", "a", "b"], tmp_path).stdout.split() == [
        "__main__", "['a',", "'b']", "gpumem.rmm"]
    assert run(["-m", "gpumem.as_rmm", "-c", "import sys, rmm; print(sys.argv, rmm.__name__)",
                "x"], tmp_path).stdout.split() == ["['-c',", "'x']", "gpumem.rmm"]
    # A script's directory is sys.path[0], so that it imports its neighbours.
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "neighbour.py").write_text("VALUE = 7\n")
    (tmp_path / "sub" / "main.py").write_text("import neighbour, rmm\nprint(neighbour.VALUE)\n")
    assert run(["-m", "gpumem.as_rmm", "sub/main.py"], tmp_path).stdout.split() == ["7"]
    result = run(["-m", "gpumem.as_rmm"], tmp_path, check=False)
    assert result.returncode == 2 and "usage" in result.stderr
    result = run(["-m", "gpumem.as_rmm", "-m"], tmp_path, check=False)
    assert result.returncode == 2 and "-m needs an argument" in result.stderr
    result = run(["-m", "gpumem.as_rmm", "missing.py"], tmp_path, check=False)
    assert result.returncode == 2 and "can't open file 'missing.py'" in result.stderr


# Left out of the seeds' snippets: those that need a GPU library (CuPy, Numba, PyTorch);
# those whose text lost code when the page was saved (they do not compile); and those using
# a name only a left-out snippet bound. (The 000 seed's pools built with `upstream=`, RMM's
# older keyword, run: gpumem's adaptors take it.)
GPU_LIBRARIES = ("cupy", "numba", "torch")
SEED_DIRECTORY = os.environ.get("GPUMEM_SEEDS", "/work/shared/seeds")


def _bound_and_used(tree):
    bound, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else used).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    return bound, used


def seed_program(text):
    """A script running the seed's examples in order; each shown result is checked (a
    device address only for being an int). Returns (script, examples kept, left out)."""
    lines, kept, left_out = ["def _check(value, shown, source, address):",
                             "    if address:",
                             "        assert isinstance(value, int) and value > 0, (source, value)",
                             "    else:",
                             "        assert repr(value) == shown, (source, repr(value), shown)",
                             ""], 0, 0
    lost = set()
    for example in doctest.DocTestParser().get_examples(text):
        source = example.source
        try:
            bound, used = _bound_and_used(ast.parse(source))
        except SyntaxError:
            left_out += 1
            continue
        if any(name in source.lower() for name in GPU_LIBRARIES) or used & lost:
            lost |= bound
            left_out += 1
            continue
        lost -= bound
        kept += 1
        want = example.want.strip()
        if want:
            address = source.strip().endswith(".ptr")
            lines.append(f"_check({source.strip()}, {want!r}, {source.strip()!r}, {address})")
        else:
            lines.append(source.rstrip("\n"))
    return "\n".join(lines) + "\nprint('seed ran')\n", kept, left_out


@pytest.mark.parametrize("seed, expected_kept", [("000_9a1a8a55bdb0bbe4.txt", 20),
                                                  ("001_cc65916db0bf862a.txt", 13)])
def test_seed_snippets_run_unchanged(seed, expected_kept, tmp_path):
    path = os.path.join(SEED_DIRECTORY, seed)
    if not os.path.exists(path):
        pytest.skip(f"the seed {path} is not on this machine")
    with open(path, encoding="utf-8") as seed_file:
        script, kept, _left_out = seed_program(seed_file.read())
    assert kept == expected_kept  # the seed is the one these figures were counted on
    assert as_rmm(script, tmp_path).stdout.strip() == "seed ran"
