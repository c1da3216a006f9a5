"""The event log from Python, as RMM's: LoggingResourceAdaptor(upstream_mr, log_file_name)
writes RMM's CSV to the name with ".dev<N>" before its extension (made absolute), flush()
and get_file_name(); log_file_name None takes GPUMEM_LOG_FILE, and neither is a ValueError;
a file that cannot be written is a GpumemError naming it and why. reinitialize(logging=True,
log_file_name=...) logs every listed device to its own file, and enable_logging,
disable_logging and get_log_filenames do what RMM's do. Threads log lines that replay; a
process killed outright leaves every event it logged; GPUMEM_LOG_FILE logs a program's
default resources."""
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import gpumem
from gpumem import mr
from gpumem import plot

HEADER = "Thread,Time,Action,Pointer,Size,Stream"


def lines_of(path):
    with open(path, "rb") as file:
        text = file.read().replace(b"\0", b"").decode()
    lines = text.splitlines()
    assert lines[0] == HEADER
    return [line.split(",") for line in lines[1:]]


def test_logging_resource_adaptor_writes_rmms_csv(tmp_path, pool):
    log = mr.LoggingResourceAdaptor(pool, log_file_name=str(tmp_path / "log.csv"))
    name = log.get_file_name()
    assert name == str(tmp_path / "log.dev0.csv")
    assert os.path.isabs(name)
    assert log.spec == f"log(pool(cuda, initial=8388608, max=0), file={name})"
    assert log.upstream_mr is pool and log.get_upstream() is pool
    ptr = log.allocate(1000)
    log.deallocate(ptr, 1000)
    with pytest.raises(gpumem.OutOfMemoryError):
        log.allocate(1 << 50)
    lines = lines_of(name)  # a failed allocation flushes the file
    assert [line[2:] for line in lines] == [
        ["allocate", hex(ptr), "1000", "0"], ["free", hex(ptr), "1000", "0"],
        ["allocate failure", "(nil)", str(1 << 50), "0"]]
    assert {line[0] for line in lines} == {str(threading.get_native_id())}
    log.flush()
    assert os.path.getsize(name) == sum(len(",".join(line)) + 1 for line in lines) + len(HEADER) + 1


def test_the_name_defaults_to_gpumem_log_file(tmp_path, monkeypatch, pool):
    monkeypatch.delenv("GPUMEM_LOG_FILE", raising=False)
    with pytest.raises(ValueError, match="log_file_name= argument or GPUMEM_LOG_FILE"):
        mr.LoggingResourceAdaptor(pool)
    monkeypatch.setenv("GPUMEM_LOG_FILE", str(tmp_path / "from-env.log"))
    log = mr.LoggingResourceAdaptor(pool)
    assert log.get_file_name() == str(tmp_path / "from-env.dev0.log")


def test_a_file_that_cannot_be_written_fails_with_its_name_and_why(tmp_path, pool):
    missing = tmp_path / "no" / "such" / "log.csv"
    with pytest.raises(gpumem.GpumemError, match="No such file or directory") as error:
        mr.LoggingResourceAdaptor(pool, str(missing))
    assert str(tmp_path / "no" / "such" / "log.dev0.csv") in str(error.value)
    with pytest.raises(gpumem.GpumemError, match="Is a directory"):
        mr.from_spec(f'log(cuda, file="{tmp_path}")')
    assert pool.live_count == 0  # the upstream is as it was
    pool.deallocate(pool.allocate(100), 100)


def test_reinitialize_logs_each_device_to_its_file(tmp_path, second_device):
    gpumem.reinitialize(pool_allocator=True, devices=[0, 1], logging=True,
                        log_file_name=str(tmp_path / "run.csv"))
    names = gpumem.get_log_filenames()
    assert names == {0: str(tmp_path / "run.dev0.csv"), 1: str(tmp_path / "run.dev1.csv")}
    current = mr.get_current_device_resource()
    assert isinstance(current, mr.LoggingResourceAdaptor)
    assert current.spec.startswith("log(pool(vmm(")
    buffer = gpumem.DeviceBuffer(size=4096)
    current.flush()
    assert [line[2:5] for line in lines_of(names[0])] == [
        ["allocate", hex(buffer.ptr), "4096"]]
    del buffer
    gpumem.disable_logging()
    assert gpumem.get_log_filenames() == {0: None, 1: None}
    assert mr.get_current_device_resource().name == "pool"
    gpumem.enable_logging(str(tmp_path / "again.csv"))
    assert gpumem.get_log_filenames()[0] == str(tmp_path / "again.dev0.csv")


def test_threads_log_lines_that_replay(tmp_path, pool):
    log = mr.LoggingResourceAdaptor(pool, str(tmp_path / "threads.csv"))

    def work(seed):
        for i in range(300):
            size = 256 + (seed * 7919 + i * 104729) % 100000
            log.deallocate(log.allocate(size), size)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.flush()
    events = plot.read_log(log.get_file_name()).events
    assert len(events) == 4 * 300 * 2
    assert len({event.thread for event in events}) == 4
    live = set()
    for event in events:  # every free follows its allocation, no pointer is live twice
        if event.action == "allocate":
            assert event.pointer not in live
            live.add(event.pointer)
        else:
            live.remove(event.pointer)
    assert not live


def test_a_process_killed_outright_leaves_every_event(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal
        import gpumem
        log = gpumem.mr.LoggingResourceAdaptor(gpumem.mr.CudaMemoryResource(),
                                               {str(tmp_path / "killed.csv")!r})
        for size in range(1000, 1500):
            log.allocate(size)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    result = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert result.returncode == -signal.SIGKILL
    sizes = [int(line[4]) for line in lines_of(tmp_path / "killed.dev0.csv")]
    assert sizes == list(range(1000, 1500))


def test_gpumem_log_file_logs_default_resources(tmp_path, run_script):
    script = """
        import gpumem
        buffer = gpumem.DeviceBuffer(size=777)
        print(gpumem.mr.get_current_device_resource().name)
    """
    out = run_script(script, timeout=60, GPUMEM_LOG_FILE=str(tmp_path / "any-%p.csv"))
    assert out == "log\n"
    (name,) = [name for name in os.listdir(tmp_path) if name.startswith("any-")]
    assert name.endswith(".dev0.csv")
    assert [line[2:5] for line in lines_of(tmp_path / name)][0][::2] == ["allocate", "777"]
