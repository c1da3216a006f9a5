"""compare_allocators.py: peak reserved over peak live of gpumem's resources beside the
driver pool, PyTorch's caching allocator (with and without expandable segments) and RMM's
pool, on allocation traces in RMM's log format (docs/traces.md).

    python3 tools/python/compare_allocators.py [--resource "pool(vmm)"]... [--json FILE] TRACE...

Every allocator replays each trace 1 + N times (--repeat N, default 3) on one fresh
allocator: a cold pass, then N warm passes. Two figures come of it: the cold one, peak
reserved after the first pass, and the warm one, the peak over all the passes (a trace of
varying shapes, run again, can grow an allocator further).

- gpumem's resources and the driver pool: one run of `gpumem-bench replay --resource
  driver:async --resource SPEC... --repeat N TRACE...` (threads and streams as traced; a
  fresh allocator per trace and resource; warm ns per event as the median of N passes).
- PyTorch: one fresh process per configuration (default; PYTORCH_CUDA_ALLOC_CONF=
  expandable_segments:True) replays every trace through torch.cuda.caching_allocator_alloc
  and caching_allocator_delete, each recorded stream on a torch stream of its own (the
  default stream for stream 0), emptying the cache and resetting the peaks between traces
  (never between a trace's passes); the figures are torch.cuda.max_memory_reserved() after
  the first pass and after the last.
- RMM: where the real `rmm` is importable, a fresh process replays each trace through
  PoolMemoryResource(StatisticsResourceAdaptor(CudaMemoryResource()), initial_pool_size=0)
  under another StatisticsResourceAdaptor: the lower one's peak is what the pool reserved
  (after the first pass and after the last), the upper one's what was live. Skipped (and
  said so) where rmm is missing or is gpumem's own RMM layer; --rmm-path puts a folder of
  RMM's wheels first on that process's path (scripts/rmm-python.sh), and --rmm-module names
  another module with RMM's interface (the tests use gpumem.rmm on the simulated device).

Every replay runs the same operation sequence (trace_csv.operations, built as gpumem-bench
builds it), so every one must see the same peak live bytes: gpumem-bench's peak_live_bytes,
PyTorch's peak of requested bytes (its allocated bytes are rounded up, so at least that) and
RMM's live peak (the first pass's; every pass frees all it allocates, so each has the same).
A disagreement is printed and makes the exit status 1. The workers (PyTorch's and RMM's)
time the cold pass only.

With --references FILE, the references' figures come from an earlier run's --json file
instead (matched by trace name; each trace's events and peak live bytes must be the file's,
or the trace is of another recording and its row a problem), and only gpumem's resources
replay here: screening a change on the simulated device against the figures of the driver
pool, PyTorch and RMM taken on a GPU (docs/traces.md). --repeat then defaults to the file's
warm passes and must equal them, since a warm figure depends on how many passes it spans.

Output: a table (per trace: events, peak live, reserved/live cold/warm for each allocator,
the best reference cold and warm, and pool(vmm)'s warm ns per event), then per gpumem
resource the traces it loses on, cold and warm; --json writes one JSON line per trace (the
warm figures under the cold ones' keys with _warm added). Exit status 0, 1 on a failed
replay or a disagreement, 2 with --fail-if-loses when a gpumem resource holds more than the
best reference on a trace after the cold pass (--fail-if-loses-warm: over all passes).
"""
import argparse
import importlib
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_csv  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = "driver:async"
TORCH_CONFIGS = {"torch:caching": "", "torch:expandable": "expandable_segments:True"}
RMM = "rmm:pool"
REFERENCES = (DRIVER, *TORCH_CONFIGS, RMM)
SHORT = {DRIVER: "driver", "torch:caching": "torch", "torch:expandable": "torch exp",
         RMM: "rmm pool"}
# What a key ends in: a cold figure (after the first pass) nothing, a warm one (the peak over
# the first pass and the warm passes) _warm, as in gpumem-bench's JSON.
COLD, WARM = "", "_warm"


# ---- replays in other processes ----


def run_bench(bench, labels, repeat, traces, timeout):
    """gpumem-bench replay's JSON lines, by (trace name, resource), for the resources and
    references (the driver pool) that `labels` name."""
    command = [bench, "replay"]
    for spec in labels:
        command += ["--resource", spec]
    command += ["--repeat", str(repeat), *traces]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("bench") == "replay":
                results[(record["trace"], record["resource"])] = record
    return results, done.stderr


def run_worker(kind, traces, warm_passes, timeout, env_changes, extra=()):
    """Runs this script as a worker (--torch-worker WARM_PASSES, --rmm-worker WARM_PASSES
    MODULE) in a fresh interpreter; returns its JSON lines (one per trace, or one
    {"skipped": why})."""
    env = dict(os.environ)
    env.pop("GPUMEM_AS_RMM", None)  # the real RMM, never gpumem's layer under its name
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.update(env_changes)
    command = [sys.executable, os.path.abspath(__file__), kind, str(warm_passes), *extra,
               *traces]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return [{"error": f"timed out after {timeout} s"}]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        lines.append({"error": f"exit status {done.returncode}: {tail}"})
    return lines


def replay(sequence, slots, allocate, deallocate):
    """Runs an operation sequence: allocate(size, stream index) -> pointer and
    deallocate(pointer, size, stream index). Empty allocations are not made (PyTorch and
    RMM give no pointer for them)."""
    pointers = [0] * slots
    for is_free, slot, size, stream in sequence:
        if is_free:
            if pointers[slot]:
                deallocate(pointers[slot], size, stream)
                pointers[slot] = 0
        elif size:
            pointers[slot] = allocate(size, stream)


def _load(path):
    events = trace_csv.read_events(path)
    ops, leftovers, streams, peak = trace_csv.operations(events)
    slots = 1 + max((slot for _, slot, _, _ in ops), default=-1)
    return ops + leftovers, len(ops), streams, peak, slots


def replay_each(traces, streams, new_stream, measure, about, warm_passes):
    """The workers' loop over the traces. Each trace gets a stream per recorded stream
    (streams[0] is the default one; new_stream() makes the rest, kept for later traces);
    then measure(timed_replay, warm_replays) sets its allocator up, calls
    timed_replay(allocate, deallocate) once (replay()'s callbacks; the cold pass, timed),
    reads the cold figures, calls warm_replays(allocate, deallocate) (warm_passes more
    passes, untimed), adds peak_reserved_bytes_warm and returns its figures, releasing the
    allocator as it returns. One JSON line per trace: the trace, its events, those figures,
    its streams, the cold pass's nanoseconds per event and `about`."""
    for path in traces:
        sequence, events, recorded_streams, _peak, slots = _load(path)
        while len(streams) < len(recorded_streams):
            streams.append(new_stream())
        seconds = None

        def timed_replay(allocate, deallocate):
            nonlocal seconds
            start = time.perf_counter()
            replay(sequence, slots, allocate, deallocate)
            seconds = time.perf_counter() - start

        def warm_replays(allocate, deallocate):
            for _ in range(warm_passes):
                replay(sequence, slots, allocate, deallocate)

        figures = measure(timed_replay, warm_replays)
        print(json.dumps({
            "trace": os.path.basename(path), "events": events, **figures,
            "streams": len(recorded_streams),
            "ns_per_event": round(seconds * 1e9 / max(len(sequence), 1), 1), **about}),
            flush=True)


def torch_worker(traces, warm_passes):
    """Replays each trace through PyTorch's caching allocator in this process."""
    try:
        import torch
    except Exception as error:  # noqa: BLE001 - any reason torch cannot load is a skip
        print(json.dumps({"skipped": f"PyTorch is not importable ({type(error).__name__})"}))
        return
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "PyTorch sees no GPU"}))
        return
    device = torch.device("cuda", 0)
    torch.cuda.init()
    streams = [torch.cuda.default_stream(device)]
    alloc, delete = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete

    def measure(timed_replay, warm_replays):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        start_reserved = torch.cuda.memory_reserved()
        callbacks = (lambda size, stream: alloc(size, device, streams[stream]),
                     lambda pointer, size, stream: delete(pointer))
        timed_replay(*callbacks)
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        figures = {"peak_reserved_bytes": torch.cuda.max_memory_reserved(),
                   "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                   "peak_live_bytes": stats.get("requested_bytes.all.peak"),
                   "start_reserved_bytes": start_reserved}
        warm_replays(*callbacks)  # peaks not reset: the warm one is over every pass
        torch.cuda.synchronize()
        return {**figures, "peak_reserved_bytes_warm": torch.cuda.max_memory_reserved()}

    replay_each(traces, streams, lambda: torch.cuda.Stream(device), measure,
                {"torch": torch.__version__}, warm_passes)


def _peak_bytes(adaptor):
    counts = adaptor.allocation_counts
    return counts["peak_bytes"] if isinstance(counts, dict) else counts.peak_bytes


def _rmm_streams(rmm):
    for name in ("rmm.pylibrmm.stream", "rmm._cuda.stream"):
        try:
            module = importlib.import_module(name.replace("rmm", rmm.__name__, 1))
            return module.Stream, module.DEFAULT_STREAM
        except ImportError:
            continue
    raise ImportError("no Stream in rmm.pylibrmm.stream or rmm._cuda.stream")


def rmm_worker(module, traces, warm_passes):
    """Replays each trace through RMM's pool (or `module`'s, with RMM's interface)."""
    try:
        rmm = importlib.import_module(module)
        importlib.import_module(f"{module}.mr")
    except Exception as error:  # noqa: BLE001 - any reason rmm cannot load is a skip
        print(json.dumps({"skipped": f"{module} is not importable ({type(error).__name__})"}))
        return
    if module == "rmm" and (rmm.__name__ != "rmm" or "gpumem" in (rmm.__file__ or "")):
        print(json.dumps({"skipped": "rmm is gpumem's RMM layer here, not RMM"}))
        return
    Stream, default_stream = _rmm_streams(rmm)
    streams = [default_stream]

    def measure(timed_replay, warm_replays):  # a fresh pool per trace, released on return
        upstream = rmm.mr.StatisticsResourceAdaptor(rmm.mr.CudaMemoryResource())
        pool = rmm.mr.PoolMemoryResource(upstream, initial_pool_size=0)
        top = rmm.mr.StatisticsResourceAdaptor(pool)
        callbacks = (lambda size, stream: top.allocate(size, streams[stream]),
                     lambda pointer, size, stream: top.deallocate(pointer, size, streams[stream]))
        timed_replay(*callbacks)
        figures = {"peak_reserved_bytes": _peak_bytes(upstream),
                   "peak_live_bytes": _peak_bytes(top)}
        warm_replays(*callbacks)
        return {**figures, "peak_reserved_bytes_warm": _peak_bytes(upstream)}

    replay_each(traces, streams, Stream, measure,
                {"module": rmm.__name__, "version": getattr(rmm, "__version__", None)},
                warm_passes)


# ---- putting it together ----


def by_trace(lines, label, skipped, errors):
    """A worker's lines by trace name; a skip or an error goes to `skipped` or `errors`."""
    results = {}
    for line in lines:
        if "skipped" in line:
            skipped[label] = line["skipped"]
        elif "error" in line:
            errors.append(f"{label}: {line['error']}")
        else:
            results[line["trace"]] = line
    return results


def read_references(path):
    """An earlier run's --json records, by trace name."""
    with open(path) as file:
        records = [json.loads(line) for line in file if line.strip()]
    return {record["trace"]: record for record in records}


def references_from(recorded, skipped):
    """The references' results by label and trace name, as the workers' lines give them,
    from `recorded` (read_references); what the file's run skipped joins `skipped`."""
    references = {label: {} for label in REFERENCES}
    for record in recorded.values():
        skipped.update(record.get("skipped", {}))
        for label, result in record["results"].items():
            if label in references:
                references[label][record["trace"]] = result
    for label in [label for label, results in references.items() if not results]:
        del references[label]
    return references


def compare(traces, bench_results, references, specs, skipped, warm_passes, bench_labels,
            recorded=None):
    """One record per trace: every allocator's figures, the checks, the best reference and
    the verdict for each gpumem resource, cold and warm. `references` maps a reference label
    to its results by trace name; `bench_labels` name what bench_results holds (the driver
    pool's figures come from there unless they come from an earlier run). `recorded`, where
    the references come from an earlier run's records (read_references), is checked against
    each trace."""
    records = []
    for path in traces:
        name = os.path.basename(path)
        sequence, events, streams, peak, _slots = _load(path)
        record = {"bench": "trace_compare", "trace": name, "path": path, "events": events,
                  "streams": len(streams), "peak_live_bytes": peak, "results": {},
                  "skipped": dict(skipped), "problems": [], "warm_passes": warm_passes}
        if recorded is not None:
            earlier = recorded.get(name)
            if earlier is None:
                record["problems"].append("no references for it in --references' file")
            elif (earlier["events"], earlier["peak_live_bytes"]) != (events, peak):
                record["problems"].append(
                    f"the references are of another recording: {earlier['events']} events "
                    f"and a peak live of {earlier['peak_live_bytes']} bytes, not {events} and "
                    f"{peak}")
        for label in bench_labels:
            line = bench_results.get((name, label))
            if line is None:
                record["problems"].append(f"{label}: no gpumem-bench result")
                continue
            record.setdefault("device", line.get("device"))
            record.setdefault("gpu", line.get("gpu"))
            result = {key: line.get(key) for key in (
                "peak_reserved_bytes", "peak_live_bytes", "reserved_over_live",
                "ns_per_event_warm", "cycles_per_event_warm", "threads", "streams",
                "peak_reserved_bytes_warm", "reserved_over_live_warm")}
            record["results"][label] = result
            if line.get("events") != events:
                record["problems"].append(
                    f"{label}: gpumem-bench replayed {line.get('events')} events, not {events}")
        for label, results in references.items():
            line = results.get(name)
            if line is None:
                if label not in skipped:
                    record["problems"].append(f"{label}: no result")
                continue
            result = {key: line.get(key) for key in (
                "peak_reserved_bytes", "peak_live_bytes", "peak_allocated_bytes",
                "start_reserved_bytes", "ns_per_event", "peak_reserved_bytes_warm")}
            for suffix in (COLD, WARM):
                reserved = line.get("peak_reserved_bytes" + suffix)
                result["reserved_over_live" + suffix] = (
                    round(reserved / peak, 4) if peak and reserved is not None else None)
            record["results"][label] = result
            allocated = line.get("peak_allocated_bytes")
            if allocated is not None and allocated < peak:
                record["problems"].append(
                    f"{label}: peak allocated {allocated} is below the trace's peak live {peak}")
            if line.get("start_reserved_bytes"):
                record["problems"].append(
                    f"{label}: {line['start_reserved_bytes']} bytes reserved before the replay")
        for label, result in record["results"].items():
            live = result.get("peak_live_bytes")
            if live is not None and live != peak:
                record["problems"].append(
                    f"{label}: peak live {live} bytes, the trace's is {peak}")
        for suffix in (COLD, WARM):
            reserved = "peak_reserved_bytes" + suffix
            refs = {label: result[reserved] for label, result in record["results"].items()
                    if label in REFERENCES and result.get(reserved)}
            if not refs:
                continue
            best = min(refs, key=refs.get)
            record["best_reference" + suffix] = best
            record["best_reference_ratio" + suffix] = (
                record["results"][best]["reserved_over_live" + suffix])
            verdict = record["verdict" + suffix] = {}
            for spec in specs:
                mine = record["results"].get(spec, {}).get(reserved)
                if mine is not None:
                    verdict[spec] = "at or below" if mine <= refs[best] else "above"
        records.append(record)
    return records


def _ratio(record, label, suffix=COLD):
    """Peak reserved (cold, or warm with suffix WARM) over the trace's peak live, from the
    bytes (the JSON's ratios are rounded to four places already)."""
    reserved = record["results"].get(label, {}).get("peak_reserved_bytes" + suffix)
    if not reserved or not record["peak_live_bytes"]:
        return "-"
    return f"{reserved / record['peak_live_bytes']:.3f}"


def _cell(record, label):
    """An allocator's "cold/warm" ratios, each followed by ! where it is a gpumem
    resource's and above the best reference's; a cell not ending in ! ends in a space, so
    that the figures stay aligned."""
    figures = []
    for suffix in (COLD, WARM):
        above = record.get("verdict" + suffix, {}).get(label) == "above"
        figures.append(_ratio(record, label, suffix) + ("!" if above else ""))
    cell = "-" if figures == ["-", "-"] else "/".join(figures)
    return cell if cell.endswith("!") else cell + " "


def _best(record, suffix):
    """The best reference's short name and ratio, cold or warm (suffix)."""
    best = record.get("best_reference" + suffix)
    return f"{SHORT.get(best, best)} {_ratio(record, best, suffix)}" if best else "-"


def format_table(records, specs):
    """The table for people, and two lines per gpumem resource (cold, warm) on where it
    loses."""
    columns = [*specs, *REFERENCES]
    widths = [max(14, len(SHORT.get(label, label)) + 2) for label in columns]
    name_width = max([24] + [len(r["trace"]) for r in records])
    header = f"{'trace':{name_width}} {'events':>8} {'peak live':>10}"
    for label, width in zip(columns, widths):
        header += f" {SHORT.get(label, label):>{width}}"
    header += f"  {'best cold':17} {'best warm':17} {specs[0] + ' ns/ev':>16}"
    lines = [header]
    for r in records:
        line = (f"{r['trace']:{name_width}} {r['events']:>8} "
                f"{r['peak_live_bytes'] / 2**20:>6.0f} MiB")
        for label, width in zip(columns, widths):
            line += f" {_cell(r, label):>{width}}"
        ns_per_event = r["results"].get(specs[0], {}).get("ns_per_event_warm")
        ns_text = ns_per_event if ns_per_event is not None else "-"
        line += f"  {_best(r, COLD):17} {_best(r, WARM):17} {ns_text:>16}"
        lines.append(line)
    warm_passes = records[0]["warm_passes"] if records else "N"
    lines.append(f"(reserved/live: peak reserved over peak live bytes, cold/warm: after one pass "
                 f"of the trace on a fresh allocator / over that pass and {warm_passes} more on "
                 f"the same allocator; ! marks a gpumem resource's figure above the best "
                 f"reference's on that trace)")
    for label, reason in (records[0]["skipped"].items() if records else []):
        lines.append(f"{label} skipped: {reason}")
    for spec in specs:
        for suffix, name in ((COLD, spec), (WARM, f"{spec} warm")):
            judged = [r for r in records if spec in r.get("verdict" + suffix, {})]
            losses = [r for r in judged if r["verdict" + suffix][spec] == "above"]
            text = (f"{name}: at or below the best reference on {len(judged) - len(losses)} "
                    f"of {len(judged)} traces")
            if losses:
                text += "; above on " + ", ".join(
                    f"{r['trace']} ({_ratio(r, spec, suffix)} vs {_best(r, suffix)})"
                    for r in losses)
            lines.append(text)
    for r in records:
        for problem in r["problems"]:
            lines.append(f"PROBLEM {r['trace']}: {problem}")
    return "\n".join(lines)


def replay_references(args, skipped, errors):
    """PyTorch's and RMM's results by label and trace name, each replayed in a worker
    process; what is skipped or fails goes to `skipped` or `errors`."""
    references = {}
    if args.torch == "off":
        for label in TORCH_CONFIGS:
            skipped[label] = "--torch off"
    else:
        for label, conf in TORCH_CONFIGS.items():
            env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
            lines = run_worker("--torch-worker", args.traces, args.repeat, args.timeout, env)
            references[label] = by_trace(lines, label, skipped, errors)
    if args.rmm_module == "off":
        skipped[RMM] = "--rmm-module off"
    else:
        env = {}
        if args.rmm_path:
            env["PYTHONPATH"] = os.pathsep.join(
                [os.path.abspath(args.rmm_path)] + [p for p in os.environ.get(
                    "PYTHONPATH", "").split(os.pathsep) if p])
        lines = run_worker("--rmm-worker", args.traces, args.repeat, args.timeout, env,
                           [args.rmm_module])
        references[RMM] = by_trace(lines, RMM, skipped, errors)
    return references


def default_bench():
    return os.path.join(ROOT, "build", "bin", "gpumem-bench")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--torch-worker"]:  # --torch-worker WARM_PASSES TRACE...
        torch_worker(argv[2:], int(argv[1]))
        return 0
    if argv[:1] == ["--rmm-worker"]:  # --rmm-worker WARM_PASSES MODULE TRACE...
        rmm_worker(argv[2], argv[3:], int(argv[1]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", metavar="TRACE")
    parser.add_argument("--bench", default=default_bench(), help="gpumem-bench (default: "
                        "build/bin/gpumem-bench of this tree)")
    parser.add_argument("--resource", action="append", dest="specs", metavar="SPEC",
                        help="a gpumem resource to judge; repeatable (default pool(vmm))")
    parser.add_argument("--repeat", type=int,
                        help="warm passes per trace after the cold one, for every allocator "
                        "(gpumem-bench's --repeat; default 3, or --references' own)")
    parser.add_argument("--references", metavar="FILE",
                        help="the references' figures from an earlier run's --json file, "
                        "rather than replayed here")
    parser.add_argument("--torch", choices=("auto", "off"), default="auto",
                        help="PyTorch's caching allocator: auto (skipped without PyTorch or "
                        "a GPU) or off")
    parser.add_argument("--rmm-module", default="rmm",
                        help="the module with RMM's interface (default rmm; 'off' skips it)")
    parser.add_argument("--rmm-path", metavar="DIR",
                        help="a folder put first on the RMM replay's path (where "
                        "scripts/rmm-python.sh installed RMM's wheels)")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds each replay process may take (default 300)")
    parser.add_argument("--json", help="write one JSON line per trace to this file")
    parser.add_argument("--fail-if-loses", action="store_true",
                        help="exit status 2 when a gpumem resource is above the best reference "
                        "after the cold pass")
    parser.add_argument("--fail-if-loses-warm", action="store_true",
                        help="exit status 2 when a gpumem resource is above the best reference "
                        "over all passes")
    args = parser.parse_args(argv)
    specs = args.specs or ["pool(vmm)"]
    names = [os.path.basename(path) for path in args.traces]
    if len(set(names)) != len(names):
        parser.error("two traces share a file name; gpumem-bench reports traces by name")
    for path in args.traces:  # a bad trace stops everything here, before any replay
        summary = trace_csv.validate(trace_csv.read_events(path))
        if summary.problem_count:
            parser.error(f"{path} does not replay as recorded: {summary.problems[0]} "
                         f"(record_traces.py --check tells all)")
    recorded = None
    if args.references:
        try:
            recorded = read_references(args.references)
        except (OSError, ValueError, KeyError) as error:
            parser.error(f"--references {args.references}: {error}")
        passes = {record.get("warm_passes") for record in recorded.values()}
        if len(passes) != 1 or (args.repeat is not None and passes != {args.repeat}):
            parser.error(f"--references {args.references} has warm passes {sorted(passes)}; "
                         f"--repeat must be the same")
        args.repeat = passes.pop()
    elif args.repeat is None:
        args.repeat = 3
    errors, skipped = [], {}
    bench_labels = specs if recorded is not None else [DRIVER, *specs]
    try:
        bench_results, bench_stderr = run_bench(args.bench, bench_labels, args.repeat,
                                                args.traces, args.timeout)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"ERROR gpumem-bench: {error}")
        return 1
    if recorded is not None:
        references = references_from(recorded, skipped)
    else:
        references = replay_references(args, skipped, errors)
    records = compare(args.traces, bench_results, references, specs, skipped, args.repeat,
                      bench_labels, recorded)
    if args.json:
        with open(args.json, "w") as file:
            for record in records:
                file.write(json.dumps(record) + "\n")
    backend = bench_stderr.strip().splitlines()[0] if bench_stderr.strip() else ""
    print(f"gpumem-bench {backend}")
    if recorded is not None:
        print(f"references from {args.references}")
    print(format_table(records, specs))
    for error in errors:
        print(f"ERROR {error}")
    if errors or any(r["problems"] for r in records):
        return 1
    judged = [key for key, wanted in (("verdict", args.fail_if_loses),
                                      ("verdict_warm", args.fail_if_loses_warm)) if wanted]
    if any("above" in r.get(key, {}).values() for r in records for key in judged):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
