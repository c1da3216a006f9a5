"""The trace tools of docs/traces.md, without a GPU: trace_csv's check of a trace (frees that
match, overlaps, order), its replay sequence against gpumem-bench's, record_traces.py's
pipeline with a workload that allocates through gpumem (PyTorch replaced by a stand-in that
has only what the recorder touches), and compare_allocators.py's table and checks, with
gpumem-bench on the simulated device, gpumem's RMM layer standing in for RMM and a stand-in
PyTorch whose caching allocator counts bytes as PyTorch's does."""
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import gpumem

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools" / "python"
BENCH = Path(os.environ.get("GPUMEM_BENCH", ROOT / "build" / "bin" / "gpumem-bench"))
MIB = 1 << 20


def load(name):
    sys.path.insert(0, str(TOOLS))
    try:
        spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(TOOLS))


trace_csv = load("trace_csv")


def trace_text(rows):
    """A trace from (thread, time in us, action, pointer, size[, stream]) rows."""
    lines = [trace_csv.HEADER]
    for row in rows:
        thread, time, action, pointer, size = row[:5]
        stream = row[5] if len(row) > 5 else 0
        lines.append(f"{thread},{trace_csv.format_time(time)},{action},{pointer:#x},{size},"
                     f"{stream:x}")
    return "\n".join(lines) + "\n"


def check(rows):
    return trace_csv.validate(trace_csv.parse_events(trace_text(rows).splitlines()))


# ---- the check of a trace ----


def test_a_good_trace_has_no_problems_and_its_peak():
    summary = check([(7, 0, "allocate", 0x1000, 100), (7, 5, "allocate", 0x2000, 300),
                     (7, 9, "free", 0x1000, 100), (9, 9, "allocate", 0x1000, 50, 0xab),
                     (7, 12, "allocate failure", 0, 1 << 40), (9, 20, "free", 0x2000, 300)])
    assert summary.problems == [] and summary.problem_count == 0
    assert (summary.events, summary.allocations, summary.frees, summary.failures) == (5, 3, 2, 1)
    assert summary.peak_live_bytes == 400
    assert (summary.threads, summary.streams, summary.leftovers) == (2, 2, 1)


@pytest.mark.parametrize("rows, problem", [
    ([(0, 0, "free", 0x1000, 100)], "free of 0x1000, which is not live"),
    ([(0, 0, "allocate", 0x1000, 100), (0, 1, "allocate", 0x1000, 100)],
     "allocation of 0x1000, which is live"),
    ([(0, 0, "allocate", 0x1000, 0x100), (0, 1, "allocate", 0x10ff, 8)],
     "0x10ff+8 overlaps the live block at 0x1000"),
    ([(0, 0, "allocate", 0x1000, 0x100), (0, 1, "allocate", 0xf00, 0x101)],
     "0xf00+257 overlaps the live block at 0x1000"),
    ([(0, 0, "allocate", 0x1000, 100), (0, 1, "free", 0x1000, 99)],
     "free of 0x1000 with 99 bytes; it was allocated with 100"),
    ([(0, 50, "allocate", 0x1000, 100), (0, 49, "free", 0x1000, 100)],
     "time steps back within thread 0"),
    ([(0, 500_000, "allocate", 0x1000, 100), (1, 300_000, "free", 0x1000, 100)],
     "time steps back 200000 us across threads"),
])
def test_each_problem_is_found_and_named(rows, problem):
    summary = check(rows)
    assert summary.problem_count == 1
    assert summary.problems[0].endswith(problem), summary.problems


def test_what_is_not_a_problem():
    day = trace_csv.DAY_US
    summary = check([
        (0, 100, "allocate", 0x1000, 0x100), (0, 101, "allocate", 0x1100, 0x100),  # adjacent
        (1, 90, "free", 0x1000, 0x100),  # another thread's clock, 11 us behind
        (0, 102, "allocate", 0x0, 0), (0, 103, "allocate", 0x0, 0),  # empty ones share 0x0
        (0, day - 1, "allocate", 0x2000, 8), (0, 3, "free", 0x2000, 8)])  # midnight passes
    assert summary.problems == []
    assert summary.time_steps_back == 1
    assert summary.peak_live_bytes == 0x200


def test_problems_past_twenty_are_counted_not_listed():
    summary = check([(0, i, "free", 0x1000 + i, 8) for i in range(30)])
    assert summary.problem_count == 30 and len(summary.problems) == 20


def test_a_bad_line_is_an_error_naming_it():
    with pytest.raises(trace_csv.TraceError, match="no RMM log header"):
        trace_csv.parse_events(["Time,Thread", "0,00:00:00.000000,allocate,0x1,1,0"])
    with pytest.raises(trace_csv.TraceError, match=r"<trace>:2: unknown action 'alloc'"):
        trace_csv.parse_events([trace_csv.HEADER, "0,00:00:00.000000,alloc,0x1,1,0"])
    with pytest.raises(trace_csv.TraceError, match=r":3: .*invalid literal"):
        trace_csv.parse_events([trace_csv.HEADER, "0,00:00:00.1,free,0x1,1,0",
                                "0,00:00:00.2,free,0xZZ,1,0"])


def test_normalize_numbers_threads_and_times_and_drops_empty_events(tmp_path):
    events = trace_csv.parse_events(trace_text([
        (4242, 10_000_000, "allocate", 0x1000, 64), (4242, 10_000_001, "allocate", 0, 0),
        (77, 10_000_500, "allocate", 0x2000, 64, 0x5), (4242, 10_000_900, "free", 0x1000, 64),
        (77, 10_001_000, "free", 0, 0)]).splitlines())
    normalized, dropped = trace_csv.normalize(events)
    assert dropped == 2
    path = tmp_path / "t.csv"
    trace_csv.write_events(path, normalized)
    assert path.read_text().splitlines() == [
        trace_csv.HEADER, "0,00:00:00.000000,allocate,0x1000,64,0",
        "1,00:00:00.000500,allocate,0x2000,64,5", "0,00:00:00.000900,free,0x1000,64,0"]
    assert trace_csv.validate(trace_csv.read_events(path)).problems == []


def test_normalize_counts_time_across_midnight():
    events = trace_csv.parse_events(trace_text([
        (0, trace_csv.DAY_US - 10, "allocate", 0x1000, 8), (0, 5, "free", 0x1000, 8)]).splitlines())
    normalized, _ = trace_csv.normalize(events)
    assert [event.time_us for event in normalized] == [0, 15]


def test_operations_are_gpumem_benchs_sequence():
    events = trace_csv.parse_events(trace_text([
        (0, 0, "allocate", 0x1000, 100, 0), (0, 1, "allocate", 0x2000, 200, 0xbeef),
        (0, 2, "free", 0x9999, 5),  # unknown: skipped
        (0, 3, "free", 0x1000, 100, 0xbeef), (0, 4, "allocate failure", 0, 1 << 40),
        (0, 5, "allocate", 0x1000, 300, 0)]).splitlines())
    ops, leftovers, streams, peak = trace_csv.operations(events)
    assert ops == [(False, 0, 100, 0), (False, 1, 200, 1), (True, 0, 100, 1), (False, 2, 300, 0)]
    assert sorted(leftovers) == [(True, 1, 200, 1), (True, 2, 300, 0)]
    assert streams == [0, 0xbeef] and peak == 500


# ---- record_traces.py ----


def run_tool(name, *args, env=None, cwd=None, timeout=120):
    return subprocess.run([sys.executable, str(TOOLS / name), *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def test_check_mode_passes_good_traces_and_fails_bad_ones(tmp_path):
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text(trace_text([(0, 0, "allocate", 0x1000, 8), (0, 1, "free", 0x1000, 8)]))
    bad.write_text(trace_text([(0, 0, "allocate", 0x1000, 8), (0, 1, "free", 0x2000, 8)]))
    done = run_tool("record_traces.py", "--check", good)
    assert done.returncode == 0 and "good.csv: ok: 2 events, peak live 8 bytes" in done.stdout
    done = run_tool("record_traces.py", "--check", good, bad)
    assert done.returncode == 1
    assert "bad.csv: 1 problems" in done.stdout
    assert "free of 0x2000, which is not live" in done.stdout


def test_the_recorders_log_name_is_gpumems(tmp_path):
    record_traces = load("record_traces")
    for name in ("run.csv", "run", ".hidden", "a.b.csv"):
        log = gpumem.mr.LoggingResourceAdaptor(gpumem.mr.CudaMemoryResource(),
                                               log_file_name=str(tmp_path / name))
        assert record_traces.log_name(str(tmp_path / name)) == log.get_file_name()


def test_every_workload_is_described():
    record_traces = load("record_traces")
    workloads = record_traces.WORKLOADS.values()
    assert len(workloads) >= 6
    assert {w.kind for w in workloads} == {"training", "inference"}
    assert {w.shapes for w in workloads} == {"fixed", "varying"}
    listed = run_tool("record_traces.py", "--list").stdout
    assert all(w.name in listed and w.description in listed for w in workloads)


def test_the_held_out_workloads_load_apart_and_are_described():
    # They register through --workloads-from only: the built-in list stays the tuned-on set.
    heldout = TOOLS / "heldout_workloads.py"
    built_in = run_tool("record_traces.py", "--list").stdout
    listed = run_tool("record_traces.py", "--workloads-from", heldout, "--list").stdout
    names = {"t5_generate_beam", "dlrm_train", "r2plus1d_train", "vit_train_accum",
             "maskrcnn_train", "wav2vec2_ctc_train", "roberta_ckpt_varlen", "mixtral_generate"}
    rows = {line.split()[0]: line.split()[1:3] for line in listed.splitlines() if line.strip()}
    assert names <= set(rows)
    assert not any(name in built_in for name in names)
    assert {rows[name][0] for name in names} == {"training", "inference"}
    assert {rows[name][1] for name in names} == {"fixed", "varying"}


def test_the_multistream_workloads_load_apart_and_are_described():
    # Workloads that allocate on two streams: they register through --workloads-from only.
    extra = TOOLS / "multistream_workloads.py"
    built_in = run_tool("record_traces.py", "--list").stdout
    listed = run_tool("record_traces.py", "--workloads-from", extra, "--list").stdout
    names = {"resnet_server_2streams", "gpt2_generate_2streams", "efficientnet_train_prefetch",
             "unet_train_ema"}
    rows = {line.split()[0]: line.split()[1:3] for line in listed.splitlines() if line.strip()}
    assert names <= set(rows)
    assert not any(name in built_in for name in names)
    assert {rows[name][0] for name in names} == {"training", "inference"}
    assert {rows[name][1] for name in names} == {"fixed", "varying"}


# A stand-in for PyTorch: what the recorder and the comparison touch, no more. Its caching
# allocator counts bytes as PyTorch's does (blocks of 512 bytes), reserves in 2 MiB steps
# (all it holds with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, else never less than
# twice what is allocated), and FAKE_TORCH_TIGHT=1 makes it reserve exactly what is
# allocated; FAKE_TORCH_NO_REUSE=1 makes it reserve afresh for every allocation (so a trace
# run again grows it); FAKE_TORCH_MISCOUNT=1 makes its peak of requested bytes one short.
FAKE_TORCH = {
    "torch/__init__.py": """
        from . import cuda
        __version__ = "0.0+stand-in"
        bfloat16 = float16 = "half"
        def manual_seed(seed):
            pass
        def device(kind, index=0):
            return (kind, index)
    """,
    "torch/cuda/memory.py": """
        class CUDAPluggableAllocator:
            def __init__(self, path, alloc, free):
                self.path, self.alloc, self.free = path, alloc, free
        def change_current_allocator(allocator):
            assert allocator.alloc == "gpumem_torch_alloc"
    """,
    "torch/cuda/__init__.py": """
        import os
        from . import memory
        EXPANDABLE = "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        TIGHT = os.environ.get("FAKE_TORCH_TIGHT") == "1"
        NO_REUSE = os.environ.get("FAKE_TORCH_NO_REUSE") == "1"
        MISCOUNT = os.environ.get("FAKE_TORCH_MISCOUNT") == "1"
        STEP = 2 << 20
        live, state = {}, dict(next=1 << 40, allocated=0, requested=0, reserved=0,
                               peak_allocated=0, peak_requested=0, peak_reserved=0)
        class Stream:
            def __init__(self, device=None, handle=None):
                self.cuda_stream = handle if handle is not None else id(self)
        def is_available():
            return True
        def init():
            pass
        def synchronize():
            pass
        def default_stream(device=None):
            return Stream(handle=0)
        def _reserve(rounded):
            need = state["allocated"]
            if NO_REUSE:
                need = state["reserved"] + rounded
            elif not TIGHT:
                need = -(-need // STEP) * STEP
                if not EXPANDABLE:
                    need = max(state["reserved"], 2 * need)
            state["reserved"] = max(state["reserved"], need) if not EXPANDABLE else need
            for key in ("allocated", "requested", "reserved"):
                state["peak_" + key] = max(state["peak_" + key], state[key])
        def caching_allocator_alloc(size, device=None, stream=None):
            assert isinstance(stream, Stream) and size > 0
            rounded = max(512, -(-size // 512) * 512)
            pointer, state["next"] = state["next"], state["next"] + rounded
            live[pointer] = (size, rounded)
            state["allocated"] += rounded
            state["requested"] += size
            _reserve(rounded)
            return pointer
        def caching_allocator_delete(pointer):
            size, rounded = live.pop(pointer)
            state["allocated"] -= rounded
            state["requested"] -= size
        def empty_cache():
            state["reserved"] = state["allocated"]
        def reset_peak_memory_stats():
            for key in ("allocated", "requested", "reserved"):
                state["peak_" + key] = state[key]
        def memory_reserved():
            return state["reserved"]
        def max_memory_reserved():
            return state["peak_reserved"]
        def max_memory_allocated():
            return state["peak_allocated"]
        def memory_stats():
            return {"requested_bytes.all.peak": state["peak_requested"] - MISCOUNT}
    """,
}


@pytest.fixture
def fake_torch(tmp_path):
    root = tmp_path / "stand-in"
    for name, text in FAKE_TORCH.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))


WORKLOADS = """
    import time
    import gpumem
    from record_traces import workload

    @workload("training", "fixed", "five steps of gpumem buffers")
    def buffers(ctx):
        kept = []
        for step in ctx.steps(5):
            scratch = gpumem.DeviceBuffer(size=1 << 20)
            kept.append(gpumem.DeviceBuffer(size=3000 + step))
            del scratch

    @workload("inference", "varying", "one buffer, then stuck past its budget")
    def stuck(ctx):
        buffer = gpumem.DeviceBuffer(size=5000)
        time.sleep(60)
"""


@pytest.mark.sim
def test_the_recorder_stores_a_checked_trace_of_each_workload(tmp_path, fake_torch):
    extra = tmp_path / "workloads.py"
    extra.write_text(textwrap.dedent(WORKLOADS))
    out = tmp_path / "out"
    done = run_tool("record_traces.py", "--out", out, "--workloads-from", extra, "--only",
                    "buffers,stuck", "--budget", "1", "--import-allowance", "4", "--jobs", "2",
                    env=fake_torch)
    records = {r["workload"]: r for r in map(json.loads, (out / "record.jsonl").open())}
    assert done.returncode == 0, done.stdout + done.stderr
    buffers = records["buffers"]
    assert buffers["rc"] == 0 and buffers["worker"]["steps"] == 5
    assert (buffers["events"], buffers["allocations"], buffers["frees"]) == (20, 10, 10)
    assert buffers["peak_live_bytes"] == (1 << 20) + sum(3000 + step for step in range(5))
    assert buffers["problem_count"] == 0 and buffers["threads"] == 1
    lines = (out / "buffers.csv").read_text().splitlines()
    assert lines[0] == trace_csv.HEADER and lines[1].startswith("0,00:00:00.000000,allocate,0x")
    assert lines[1].endswith(f",{1 << 20},0") and len(lines) == 21
    # Killed past its budget, the stuck workload still leaves the event it logged.
    stuck = records["stuck"]
    assert stuck["rc"] == "timeout" and stuck["events"] == 1 and stuck["leftovers"] == 1
    assert (out / "stuck.csv").read_text().splitlines()[1].endswith(",5000,0")
    assert "buffers.csv" in done.stdout and "stuck.csv" in done.stdout


def gone_or_zombie(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.split()[:2] == ["State:", "Z"] for line in status)
    except FileNotFoundError:
        return True


@pytest.mark.sim
def test_a_recorder_stopped_by_sigterm_stops_its_workloads(tmp_path, fake_torch):
    extra = tmp_path / "workloads.py"
    pid_file = tmp_path / "pid"
    extra.write_text(textwrap.dedent(f"""
        import os, time
        from record_traces import workload

        @workload("inference", "fixed", "waits to be stopped")
        def waits(ctx):
            with open({str(pid_file)!r}, "w") as file:
                file.write(str(os.getpid()))
            time.sleep(120)
    """))
    recorder = subprocess.Popen(
        [sys.executable, str(TOOLS / "record_traces.py"), "--out", str(tmp_path / "out"),
         "--workloads-from", str(extra), "--only", "waits"], env=fake_torch,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for _ in range(300):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    workload_pid = int(pid_file.read_text())
    try:
        recorder.terminate()
        assert recorder.wait(timeout=30) == 128 + signal.SIGTERM
        for _ in range(50):
            if gone_or_zombie(workload_pid):
                break
            time.sleep(0.1)
        assert gone_or_zombie(workload_pid)
    finally:  # a failed test leaves no workload behind
        try:
            os.kill(workload_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.sim
def test_the_recorder_reports_a_workload_that_fails(tmp_path, fake_torch):
    extra = tmp_path / "workloads.py"
    extra.write_text(textwrap.dedent("""
        from record_traces import workload

        @workload("training", "fixed", "fails at once")
        def broken(ctx):
            raise RuntimeError("no such layer")
    """))
    out = tmp_path / "out"
    done = run_tool("record_traces.py", "--out", out, "--workloads-from", extra, "--only",
                    "broken", env=fake_torch)
    assert done.returncode == 1
    assert "FAILED: RuntimeError: no such layer" in done.stdout
    assert "no valid trace from: broken" in done.stdout
    assert not (out / "broken.csv").exists()


# ---- compare_allocators.py ----


needs_bench = pytest.mark.skipif(not BENCH.exists(), reason=f"no gpumem-bench at {BENCH}")


def small_trace(path):
    """Live bytes peak at 3 MiB + 2 KiB: a pool that maps 2 MiB granules holds 4 MiB."""
    path.write_text(trace_text([
        (0, 0, "allocate", 0x10000000, 3 * MIB), (0, 1, "allocate", 0x20000000, 1024, 0x77),
        (0, 2, "allocate", 0x20000400, 1024, 0x77), (0, 3, "free", 0x10000000, 3 * MIB),
        (0, 4, "allocate", 0x10000000, MIB), (0, 5, "free", 0x20000000, 1024, 0x77)]))
    return path


def compare(tmp_path, env, *args, trace=None):
    trace = trace or small_trace(tmp_path / "small.csv")
    out = tmp_path / "compare.jsonl"
    done = run_tool("compare_allocators.py", "--bench", BENCH, "--rmm-module", "gpumem.rmm",
                    "--json", out, *args, trace, env=env, cwd=tmp_path)
    records = [json.loads(line) for line in out.open()] if out.exists() else []
    return done, records


def best_reference(results, reserved):
    """The reference that holds least by `reserved` (peak_reserved_bytes or its _warm)."""
    return min((label for label in results if label != "pool(vmm)"),
               key=lambda label: results[label][reserved])


@pytest.mark.sim
@needs_bench
def test_the_table_puts_every_allocator_beside_pool_vmm(tmp_path, fake_torch):
    done, records = compare(tmp_path, fake_torch)
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = records
    peak = 3 * MIB + 2048
    assert (record["trace"], record["events"], record["streams"]) == ("small.csv", 6, 2)
    assert record["peak_live_bytes"] == peak and record["problems"] == []
    results = record["results"]
    assert set(results) == {"driver:async", "pool(vmm)", "torch:caching", "torch:expandable",
                            "rmm:pool"}
    for label, result in results.items():
        if result.get("peak_live_bytes") is not None:
            assert result["peak_live_bytes"] == peak, label
    # The stand-in's figures: expandable holds 4 MiB, the default twice that; its allocated
    # bytes are the blocks of 512 it counts.
    assert results["torch:expandable"]["peak_reserved_bytes"] == 4 * MIB
    assert results["torch:caching"]["peak_reserved_bytes"] == 8 * MIB
    assert results["torch:caching"]["peak_allocated_bytes"] == peak
    assert results["torch:expandable"]["reserved_over_live"] == round(4 * MIB / peak, 4)
    assert results["pool(vmm)"]["ns_per_event_warm"] > 0
    # The warm figures (the peak over the cold pass and --repeat's 3 warm passes): never
    # below the cold ones; the stand-in reserves as much in each pass as in the first.
    assert record["warm_passes"] == 3
    for label, result in results.items():
        assert result["peak_reserved_bytes_warm"] >= result["peak_reserved_bytes"] > 0, label
        assert result["reserved_over_live_warm"] == pytest.approx(
            result["peak_reserved_bytes_warm"] / peak, abs=1e-4), label
    assert results["torch:expandable"]["peak_reserved_bytes_warm"] == 4 * MIB
    assert results["torch:caching"]["peak_reserved_bytes_warm"] == 8 * MIB
    for suffix in ("", "_warm"):
        best = best_reference(results, "peak_reserved_bytes" + suffix)
        assert record["best_reference" + suffix] == best
        ratio = results[best]["reserved_over_live" + suffix]
        assert record["best_reference_ratio" + suffix] == ratio
        mine = results["pool(vmm)"]["peak_reserved_bytes" + suffix]
        theirs = results[best]["peak_reserved_bytes" + suffix]
        assert record["verdict" + suffix]["pool(vmm)"] == (
            "at or below" if mine <= theirs else "above")
    lines = done.stdout.splitlines()
    assert "simulated device" in lines[0]
    assert lines[1].split()[:5] == ["trace", "events", "peak", "live", "pool(vmm)"]
    row = lines[2].split()
    assert row[:4] == ["small.csv", "6", "3", "MiB"]
    assert row[6:8] == [f"{8 * MIB / peak:.3f}/{8 * MIB / peak:.3f}",
                        f"{4 * MIB / peak:.3f}/{4 * MIB / peak:.3f}"]  # cold/warm
    assert "over that pass and 3 more on the same allocator" in done.stdout


@pytest.mark.sim
@needs_bench
def test_warm_passes_that_grow_an_allocator_show_in_the_warm_figures(tmp_path, fake_torch):
    # One 3 MiB block: the stand-in, reserving afresh for every allocation, holds 3 MiB after
    # the cold pass and three times that after two warm passes.
    fake_torch["FAKE_TORCH_NO_REUSE"] = "1"
    trace = tmp_path / "one.csv"
    trace.write_text(trace_text([(0, 0, "allocate", 0x10000000, 3 * MIB),
                                 (0, 1, "free", 0x10000000, 3 * MIB)]))
    done, [record] = compare(tmp_path, fake_torch, "--repeat", "2", trace=trace)
    assert done.returncode == 0, done.stdout + done.stderr
    results = record["results"]
    for label in ("torch:caching", "torch:expandable"):
        assert results[label]["peak_reserved_bytes"] == 3 * MIB
        assert results[label]["peak_reserved_bytes_warm"] == 9 * MIB
        assert results[label]["reserved_over_live_warm"] == 3.0
        assert results[label]["peak_live_bytes"] == 3 * MIB  # the same in every pass
    for suffix in ("", "_warm"):
        assert record["best_reference" + suffix] == best_reference(
            results, "peak_reserved_bytes" + suffix)
    assert not record["best_reference_warm"].startswith("torch")
    [row] = [line for line in done.stdout.splitlines() if line.startswith("one.csv")]
    assert row.split()[6:8] == ["1.000/3.000", "1.000/3.000"]  # the two torch columns


@pytest.mark.sim
@needs_bench
@pytest.mark.parametrize("option", ["--fail-if-loses", "--fail-if-loses-warm"])
def test_a_tighter_reference_is_marked_and_fails_with_fail_if_loses(tmp_path, fake_torch,
                                                                    option):
    fake_torch["FAKE_TORCH_TIGHT"] = "1"  # reserves exactly the 512-byte blocks it allocates
    done, [record] = compare(tmp_path, fake_torch, option)
    assert done.returncode == 2, done.stdout + done.stderr
    for suffix in ("", "_warm"):
        assert record["best_reference" + suffix] in ("torch:caching", "torch:expandable")
        assert record["verdict" + suffix] == {"pool(vmm)": "above"}
    for name in ("pool(vmm)", "pool(vmm) warm"):
        assert f"{name}: at or below the best reference on 0 of 1 traces; above on small.csv" in (
            done.stdout)
    [row] = [line for line in done.stdout.splitlines() if line.startswith("small.csv")]
    cold, warm = row.split()[4].split("/")  # pool(vmm)'s figures, both marked
    assert cold.endswith("!") and warm.endswith("!")


@pytest.mark.sim
@needs_bench
def test_a_replay_that_sees_another_peak_live_is_a_problem(tmp_path, fake_torch):
    fake_torch["FAKE_TORCH_MISCOUNT"] = "1"
    done, [record] = compare(tmp_path, fake_torch)
    assert done.returncode == 1
    peak = 3 * MIB + 2048
    assert f"torch:caching: peak live {peak - 1} bytes, the trace's is {peak}" in record["problems"]
    assert f"PROBLEM small.csv: torch:expandable: peak live {peak - 1} bytes" in done.stdout


@pytest.mark.sim
@needs_bench
def test_missing_references_are_skipped_and_said(tmp_path):
    env = dict(os.environ, PYTHONPATH="")
    trace = small_trace(tmp_path / "small.csv")
    done = run_tool("compare_allocators.py", "--bench", BENCH, "--torch", "off", "--rmm-module",
                    "no_such_rmm", trace, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "torch:caching skipped: --torch off" in done.stdout
    assert "rmm:pool skipped: no_such_rmm is not importable (ModuleNotFoundError)" in done.stdout
    # The driver pool is the one reference left.
    assert re.search(r"pool\(vmm\): at or below the best reference on (1 of 1 traces|0 of 1 "
                     r"traces; above on small.csv \([0-9.]+ vs driver [0-9.]+\))", done.stdout)


@pytest.mark.sim
@needs_bench
def test_rmm_comes_from_the_folder_rmm_path_names(tmp_path):
    # A module with RMM's interface under another name, found only through --rmm-path.
    folder = tmp_path / "wheels-installed"
    (folder / "rmm_stand_in").mkdir(parents=True)
    (folder / "rmm_stand_in" / "__init__.py").write_text(textwrap.dedent("""
        import sys
        import gpumem.rmm.mr
        import gpumem.rmm.pylibrmm.stream
        from gpumem.rmm import mr, pylibrmm
        for name in ("mr", "pylibrmm", "pylibrmm.stream"):
            sys.modules[f"{__name__}.{name}"] = sys.modules[f"gpumem.rmm.{name}"]
    """))
    trace = small_trace(tmp_path / "small.csv")
    out = tmp_path / "compare.jsonl"
    args = ["compare_allocators.py", "--bench", BENCH, "--torch", "off", "--rmm-module",
            "rmm_stand_in", "--json", out, trace]
    done = run_tool(*args, cwd=tmp_path)
    assert "rmm:pool skipped: rmm_stand_in is not importable" in done.stdout
    done = run_tool(*args[:-1], "--rmm-path", folder, trace, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = [json.loads(line) for line in out.open()]
    assert record["results"]["rmm:pool"]["peak_live_bytes"] == 3 * MIB + 2048
    assert record["results"]["rmm:pool"]["peak_reserved_bytes"] >= 3 * MIB + 2048


@pytest.mark.sim
@needs_bench
def test_references_from_an_earlier_run_stand_in_for_replaying_them(tmp_path, fake_torch):
    done, [earlier] = compare(tmp_path, fake_torch)
    assert done.returncode == 0, done.stdout + done.stderr
    saved = tmp_path / "gpu.jsonl"
    # The driver pool's figure made one no replay gives, to tell the file's from a replay's.
    earlier["results"]["driver:async"]["peak_reserved_bytes"] = 7 * MIB
    saved.write_text(json.dumps(earlier) + "\n")
    # No stand-in PyTorch and no RMM on the path now: their figures can only come from the
    # file.
    done, [record] = compare(tmp_path, dict(os.environ, PYTHONPATH=""), "--references", saved,
                             "--rmm-module", "no_such_rmm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"references from {saved}" in done.stdout.splitlines()[1]
    assert record["warm_passes"] == 3 and record["problems"] == []
    for label in ("driver:async", "torch:caching", "torch:expandable", "rmm:pool"):
        for key in ("peak_reserved_bytes", "peak_reserved_bytes_warm"):
            assert record["results"][label][key] == earlier["results"][label][key], (label, key)
    assert record["results"]["driver:async"]["reserved_over_live"] == round(
        7 * MIB / (3 * MIB + 2048), 4)
    mine, before = record["results"]["pool(vmm)"], earlier["results"]["pool(vmm)"]
    assert mine["peak_reserved_bytes"] == before["peak_reserved_bytes"]  # replayed again
    assert mine["ns_per_event_warm"] > 0
    for suffix in ("", "_warm"):
        assert record["best_reference" + suffix] == earlier["best_reference" + suffix]
        assert record["verdict" + suffix] == earlier["verdict" + suffix]
    assert "skipped" not in done.stdout


@pytest.mark.sim
@needs_bench
def test_references_of_another_recording_or_none_are_problems(tmp_path, fake_torch):
    done, _ = compare(tmp_path, fake_torch, "--torch", "off", "--rmm-module", "off")
    assert done.returncode == 0, done.stdout + done.stderr
    saved = tmp_path / "gpu.jsonl"
    (tmp_path / "compare.jsonl").rename(saved)
    other = tmp_path / "again" / "small.csv"  # the same name, a block of 4 MiB where 3 was
    other.parent.mkdir()
    other.write_text(trace_text([(0, 0, "allocate", 0x10000000, 4 * MIB),
                                 (0, 1, "free", 0x10000000, 4 * MIB)]))
    unknown = tmp_path / "unknown.csv"
    unknown.write_text(other.read_text())
    done = run_tool("compare_allocators.py", "--bench", BENCH, "--references", saved, other,
                    unknown, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    peak = 3 * MIB + 2048
    assert (f"PROBLEM small.csv: the references are of another recording: 6 events and a peak "
            f"live of {peak} bytes, not 2 and {4 * MIB}") in done.stdout
    assert "PROBLEM unknown.csv: no references for it in --references' file" in done.stdout


@needs_bench
def test_references_over_other_warm_passes_are_refused(tmp_path):
    saved = tmp_path / "gpu.jsonl"
    saved.write_text(json.dumps({"trace": "small.csv", "warm_passes": 3, "results": {}}) + "\n")
    done = run_tool("compare_allocators.py", "--bench", BENCH, "--references", saved,
                    "--repeat", "10", small_trace(tmp_path / "small.csv"))
    assert done.returncode == 2
    assert f"--references {saved} has warm passes [3]; --repeat must be the same" in done.stderr


@needs_bench
def test_a_resource_gpumem_bench_cannot_build_is_an_error(tmp_path):
    trace = small_trace(tmp_path / "small.csv")
    done = run_tool("compare_allocators.py", "--bench", BENCH, "--resource", "pool(nonsense)",
                    "--torch", "off", "--rmm-module", "off", trace)
    assert done.returncode == 1
    assert done.stdout.startswith("ERROR gpumem-bench: ")
    assert "unknown resource 'nonsense'" in done.stdout


@needs_bench
def test_a_trace_that_does_not_replay_is_refused_before_any_replay(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(trace_text([(0, 0, "allocate", 0x1000, 8), (0, 1, "allocate", 0x1000, 8)]))
    done = run_tool("compare_allocators.py", "--bench", BENCH, bad)
    assert done.returncode == 2
    assert "bad.csv does not replay as recorded: line 3: allocation of 0x1000, which is live" in (
        done.stderr)


@pytest.mark.sim
@needs_bench
def test_peak_live_agrees_with_gpumem_bench_on_the_sample_traces():
    """The Python replay sequence and gpumem-bench's, on the real traces of data/."""
    traces = sorted((ROOT / "data").glob("*.csv"))
    done = subprocess.run([str(BENCH), "replay", "--resource", "cuda", *map(str, traces)],
                          capture_output=True, text=True, env=dict(os.environ, GPUMEM_DEVICE="sim"))
    assert done.returncode == 0, done.stderr
    bench = {r["trace"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert len(bench) == len(traces) == 4
    for path in traces:
        ops, leftovers, _streams, peak = trace_csv.operations(trace_csv.read_events(path))
        assert (len(ops), peak) == (bench[path.name]["events"], bench[path.name]["peak_live_bytes"])
        assert trace_csv.validate(trace_csv.read_events(path)).problems == []


def test_replay_skips_empty_allocations_and_frees_each_block_once():
    compare_allocators = load("compare_allocators")
    calls = []

    def allocate(size, stream):
        calls.append(("allocate", size, stream))
        return 0x1000 + len(calls)

    ops = [(False, 0, 8, 0), (False, 1, 0, 1), (True, 1, 0, 1), (True, 0, 8, 1), (True, 0, 8, 0)]
    compare_allocators.replay(ops, 2, allocate,
                              lambda pointer, size, stream: calls.append(("free", pointer, size)))
    assert calls == [("allocate", 8, 0), ("free", 0x1001, 8)]
