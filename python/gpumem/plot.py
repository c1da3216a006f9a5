"""A picture of where memory went, from event logs in RMM's format:

    python -m gpumem.plot LOG.csv [LOG2.csv ...] --output FILE.png [--resource SPEC ...]

For each log (gpumem's LoggingResourceAdaptor or log(...) spec, GPUMEM_LOG_FILE, or RMM's
logging_resource_adaptor), a line of the bytes live over the log's time; for each resource
given with --resource (a spec, e.g. "pool(vmm)"), the log is replayed through a new one and a
line shows the bytes it holds from its upstream (reserved) after each event. Each line's
peak is marked. A .svg output is drawn as SVG, anything else as PNG.

Reading the logs and computing the lines needs nothing but Python (and, for --resource,
gpumem's extension); drawing needs matplotlib (pip install matplotlib), which the command
names when it is missing. read_log, live_series and reserved_series are the data path, for
use without a picture.

Live bytes are counted as gpumem-bench replay counts them: an allocation adds its size, a
free of a live pointer takes its allocation's size away, a free of a pointer the log never
allocated (one from before the log began) is skipped, and "allocate failure" lines change
nothing (they are marked on the picture). Zero bytes (a log whose process was killed ends in
them) are skipped. Times are the log's local clock (HH:MM:SS.microseconds), as seconds from
its first event; a log that runs past midnight goes on counting. A replay runs every event
on the default stream of the device, in the log's order.
"""
import argparse
import os
import sys
from collections import namedtuple

HEADER = "Thread,Time,Action,Pointer,Size,Stream"

Event = namedtuple("Event", "time thread action pointer size stream")
Series = namedtuple("Series", "label times values peak_index")
Log = namedtuple("Log", "path events")


class LogFormatError(ValueError):
    """A file that is not an event log in RMM's format; the message names the line."""


def _seconds(text):
    """HH:MM:SS.ffffff (or HH:MM:SS:ffffff) as seconds since midnight."""
    parts = text.replace(".", ":").split(":")
    if len(parts) != 4:
        raise ValueError(text)
    hours, minutes, seconds, fraction = parts
    return int(hours) * 3600 + int(minutes) * 60 + int(seconds) + int(fraction) / 10 ** len(fraction)


def read_log(path):
    """The events of a log file, with times in seconds from its first event."""
    with open(path, "rb") as file:
        text = file.read().replace(b"\0", b"").decode("utf-8", errors="replace")
    lines = text.splitlines()
    if not lines or not lines[0].startswith("Thread,"):
        raise LogFormatError(f"{path}:1: not an event log in RMM's format (header {HEADER})")
    events = []
    first = previous = None
    days = 0
    for number, line in enumerate(lines[1:], start=2):
        if not line:
            continue
        fields = line.split(",")
        if len(fields) < 5:
            raise LogFormatError(f"{path}:{number}: too few fields in {line!r} ({HEADER})")
        thread, time_text, action, pointer, size = fields[:5]
        stream = fields[5] if len(fields) > 5 else "0"
        try:
            clock = _seconds(time_text)
            pointer_value = 0 if pointer == "(nil)" else int(pointer, 16)
            event_size = int(size)
            thread_id = int(thread)
            stream_value = int(stream, 16)
        except ValueError:
            raise LogFormatError(f"{path}:{number}: cannot read {line!r} ({HEADER})") from None
        if action not in ("allocate", "free", "allocate failure"):
            raise LogFormatError(f"{path}:{number}: unknown action {action!r}")
        if previous is not None and clock < previous - 43200:
            days += 1  # past midnight
        previous = clock
        moment = clock + 86400 * days
        if first is None:
            first = moment
        events.append(Event(moment - first, thread_id, action, pointer_value, event_size,
                            stream_value))
    return Log(path, events)


def _peak_index(values):
    best = 0
    for index, value in enumerate(values):
        if value > values[best]:
            best = index
    return best


def live_series(log, label=None):
    """The bytes live after each event of the log."""
    live = {}
    total = 0
    times, values = [], []
    for event in log.events:
        if event.action == "allocate":
            live[event.pointer] = event.size
            total += event.size
        elif event.action == "free":
            size = live.pop(event.pointer, None)
            if size is not None:
                total -= size
        times.append(event.time)
        values.append(total)
    name = label or f"{os.path.basename(log.path)}: live"
    return Series(name, times, values, _peak_index(values) if values else None)


def failures(log):
    """The times of the log's failed allocations."""
    return [event.time for event in log.events if event.action == "allocate failure"]


def reserved_series(log, spec, device=None, label=None):
    """The bytes a new resource built from `spec` holds after each event of the log replayed
    through it (None where it does not know: then there is no line to draw)."""
    import gpumem.mr

    resource = gpumem.mr.from_spec(spec, device)
    blocks, overwritten = {}, []
    times, values = [], []
    try:
        for event in log.events:
            if event.action == "allocate":
                if event.pointer in blocks:  # as a replay does: the earlier one stays live
                    overwritten.append(blocks.pop(event.pointer))
                blocks[event.pointer] = (resource.allocate(event.size), event.size)
            elif event.action == "free" and event.pointer in blocks:
                pointer, size = blocks.pop(event.pointer)
                resource.deallocate(pointer, size)
            else:
                continue
            reserved = resource.reserved_bytes
            if reserved is None:
                return None
            times.append(event.time)
            values.append(reserved)
    finally:
        for pointer, size in list(blocks.values()) + overwritten:
            resource.deallocate(pointer, size)
    name = label or f"{os.path.basename(log.path)}: {spec} reserved"
    return Series(name, times, values, _peak_index(values) if values else None)


def _unit(largest):
    for name, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if largest >= scale:
            return name, scale
    return "bytes", 1


def draw(series, output, title=None, failure_times=()):
    """Draws the series (and failed allocations) into `output` with matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    largest = max((max(s.values) for s in series if s.values), default=0)
    unit, scale = _unit(largest)
    figure, axes = plt.subplots(figsize=(9, 4.5), dpi=100)
    for index, line in enumerate(series):
        if not line.values:
            continue
        drawn = axes.step(line.times, [v / scale for v in line.values], where="post",
                          label=line.label, linewidth=1.2)
        peak_time = line.times[line.peak_index]
        peak = line.values[line.peak_index] / scale
        axes.plot([peak_time], [peak], "o", color=drawn[0].get_color(), markersize=5)
        axes.annotate(f"peak {peak:.3g} {unit}", (peak_time, peak), textcoords="offset points",
                      xytext=(-56, 5 + 10 * index), fontsize=8, color=drawn[0].get_color())
    for moment in failure_times:
        axes.axvline(moment, color="red", linewidth=0.8, linestyle=":")
    if failure_times:
        axes.plot([], [], color="red", linestyle=":", label="failed allocation")
    axes.set_xlabel("seconds from the log's first event")
    axes.set_ylabel(unit)
    axes.set_ylim(0, largest / scale * (1.1 + 0.04 * len(series)) if largest else 1)
    axes.set_title(title or "Device memory over time")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    figure.savefig(output, format="svg" if output.lower().endswith(".svg") else "png")
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m gpumem.plot",
        description="Draws bytes live (and, through --resource, bytes reserved) over time "
                    "from event logs in RMM's format.")
    parser.add_argument("logs", nargs="+", metavar="LOG.csv", help="event logs")
    parser.add_argument("--output", "-o", required=True, metavar="FILE",
                        help="the picture: FILE.png, or FILE.svg")
    parser.add_argument("--resource", action="append", default=[], metavar="SPEC",
                        help="replay each log through a new resource of this spec and draw "
                             "the bytes it reserves (repeatable), e.g. \"pool(vmm)\"")
    parser.add_argument("--device", type=int, default=None, help="the device of --resource")
    parser.add_argument("--title", default=None, help="the picture's title")
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401  (only to say at once that it is missing)
    except ImportError:
        print("python -m gpumem.plot: drawing needs matplotlib, which is not installed here: "
              "pip install matplotlib", file=sys.stderr)
        return 2
    series, failure_times = [], []
    for path in args.logs:
        try:
            log = read_log(path)
        except (OSError, LogFormatError) as error:
            print(f"python -m gpumem.plot: {error}", file=sys.stderr)
            return 1
        series.append(live_series(log))
        failure_times += failures(log)
        for spec in args.resource:
            try:
                line = reserved_series(log, spec, args.device)
            except Exception as error:  # gpumem's: a bad spec, or memory the device lacks
                print(f"python -m gpumem.plot: replaying {path} through {spec}: {error}",
                      file=sys.stderr)
                return 1
            if line is None:
                print(f"python -m gpumem.plot: {spec} does not tell its reserved bytes: "
                      "no line for it", file=sys.stderr)
            else:
                series.append(line)
    draw(series, args.output, args.title, failure_times)
    for line in series:
        if line.values:
            print(f"{line.label}: peak {line.values[line.peak_index]} bytes at "
                  f"{line.times[line.peak_index]:.6f} s")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
