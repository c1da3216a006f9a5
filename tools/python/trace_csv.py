"""trace_csv.py: reading, checking and writing allocation traces in RMM's log format
(`Thread,Time,Action,Pointer,Size,Stream`), shared by record_traces.py and
compare_allocators.py.

A trace is what gpumem's `log` adaptor writes: one line per event, the thread's id, the local
time as HH:MM:SS.microseconds, "allocate", "free" or "allocate failure", the pointer in hex
("(nil)" for none), the size in bytes and the stream handle in hex. `gpumem-bench replay`
reads it as an operation sequence in which each free refers to the latest live allocation of
its pointer; a free of an unknown pointer is skipped and an allocation of a pointer already
live silently loses the earlier block, so a trace is checked here before anyone replays it
(validate), and the operation sequence built here (operations) is the one the Python replays
of compare_allocators.py run, so that they replay exactly what gpumem-bench does.
"""
import bisect

HEADER = "Thread,Time,Action,Pointer,Size,Stream"
ACTIONS = ("allocate", "free", "allocate failure")
DAY_US = 24 * 3600 * 1_000_000
# Across threads the log's times may step back: a thread reads the clock before it takes its
# place in the file, and may be preempted between the two (the file's order is the calls'
# order all the same). A step back of more than this is not that: logs pasted together.
CROSS_THREAD_SLACK_US = 100_000


class TraceError(ValueError):
    """A line that is not an event of RMM's log format."""


class Event:
    """One line of a trace."""

    __slots__ = ("thread", "time_us", "action", "pointer", "size", "stream", "line")

    def __init__(self, thread, time_us, action, pointer, size, stream, line=0):
        self.thread, self.time_us, self.action = thread, time_us, action
        self.pointer, self.size, self.stream, self.line = pointer, size, stream, line

    def __repr__(self):
        return (f"Event(line {self.line}: {self.action} {self.pointer:#x} {self.size} B, "
                f"thread {self.thread}, stream {self.stream:#x})")


def parse_time(text):
    """HH:MM:SS.ffffff as microseconds since midnight."""
    hours, minutes, seconds = text.split(":")
    whole, _, fraction = seconds.partition(".")
    fraction = (fraction + "000000")[:6]
    return ((int(hours) * 60 + int(minutes)) * 60 + int(whole)) * 1_000_000 + int(fraction)


def format_time(us):
    seconds, micros = divmod(us, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}.{micros:06d}"


def parse_pointer(text):
    return 0 if text == "(nil)" else int(text, 16)


def read_events(path):
    """The events of a trace file, in file order. The zero bytes a killed process leaves in
    a gpumem log are dropped, as gpumem's readers drop them; a bad line is a TraceError
    naming the file and line."""
    with open(path, "rb") as file:
        text = file.read().replace(b"\0", b"").decode()
    return parse_events(text.splitlines(), path)


def parse_events(lines, name="<trace>"):
    events = []
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        if number == 1:
            if not line.startswith("Thread,"):
                raise TraceError(f"{name}:1: no RMM log header (expected {HEADER})")
            continue
        if not line:
            continue
        fields = line.split(",")
        if len(fields) < 5:
            raise TraceError(f"{name}:{number}: too few fields in {line!r}")
        try:
            event = Event(thread=int(fields[0]), time_us=parse_time(fields[1]), action=fields[2],
                          pointer=parse_pointer(fields[3]), size=int(fields[4]),
                          stream=int(fields[5], 16) if len(fields) > 5 else 0, line=number)
        except ValueError as error:
            raise TraceError(f"{name}:{number}: {error} in {line!r}") from None
        if event.action not in ACTIONS:
            raise TraceError(f"{name}:{number}: unknown action {event.action!r}")
        if event.size < 0:
            raise TraceError(f"{name}:{number}: negative size")
        events.append(event)
    return events


class Summary:
    """What validate found: counts, the peak of live requested bytes (gpumem-bench's
    peak_live_bytes), and the problems (an empty list: the trace replays as recorded)."""

    def __init__(self):
        self.events = 0  # allocations and frees: the operations a replay runs
        self.allocations = self.frees = self.failures = self.leftovers = 0
        self.peak_live_bytes = 0
        self.threads = self.streams = 0
        self.time_steps_back = 0  # across threads, within the slack
        self.problems = []
        self.problem_count = 0

    def problem(self, event, text, limit=20):
        self.problem_count += 1
        if len(self.problems) < limit:
            self.problems.append(f"line {event.line}: {text}")

    def as_dict(self):
        return {key: getattr(self, key) for key in (
            "events", "allocations", "frees", "failures", "leftovers", "peak_live_bytes",
            "threads", "streams", "time_steps_back", "problem_count", "problems")}


def validate(events):
    """Checks that a trace replays as recorded: every free matches a live allocation of the
    same pointer and size, no allocation takes a pointer or bytes that a live block holds,
    and the times go forward (within a thread always, across threads within
    CROSS_THREAD_SLACK_US; a step back of more than half a day is midnight passing)."""
    summary = Summary()
    live = {}  # pointer -> size
    starts = []  # sorted start addresses of live blocks of at least one byte
    live_bytes = 0
    last_time = {}  # thread -> its last time
    latest = None
    day = 0  # days added for midnights passed
    threads, streams = set(), set()
    for event in events:
        threads.add(event.thread)
        streams.add(event.stream)
        time = event.time_us + day
        if latest is not None and time < latest - DAY_US // 2:
            day += DAY_US
            time += DAY_US
        if time < last_time.get(event.thread, time):
            summary.problem(event, f"time steps back within thread {event.thread}")
        elif latest is not None and time < latest:
            if latest - time > CROSS_THREAD_SLACK_US:
                summary.problem(event, f"time steps back {latest - time} us across threads")
            else:
                summary.time_steps_back += 1
        last_time[event.thread] = time
        latest = time if latest is None else max(latest, time)
        if event.action == "allocate failure":
            summary.failures += 1
            continue
        summary.events += 1
        if event.action == "allocate":
            summary.allocations += 1
            if event.pointer in live:
                # Empty allocations may share a pointer (CuPy's are all 0x0): a replay loses
                # the earlier one, which held nothing.
                if event.size == 0 and live[event.pointer] == 0:
                    continue
                summary.problem(event, f"allocation of {event.pointer:#x}, which is live")
                continue
            if event.size > 0:
                i = bisect.bisect_right(starts, event.pointer)
                below = starts[i - 1] if i > 0 else None
                above = starts[i] if i < len(starts) else None
                if below is not None and below + live[below] > event.pointer:
                    summary.problem(event, f"{event.pointer:#x}+{event.size} overlaps the live "
                                    f"block at {below:#x}")
                    continue
                if above is not None and event.pointer + event.size > above:
                    summary.problem(event, f"{event.pointer:#x}+{event.size} overlaps the live "
                                    f"block at {above:#x}")
                    continue
                starts.insert(i, event.pointer)
            live[event.pointer] = event.size
            live_bytes += event.size
            summary.peak_live_bytes = max(summary.peak_live_bytes, live_bytes)
        else:
            summary.frees += 1
            size = live.get(event.pointer)
            if size is None:
                summary.problem(event, f"free of {event.pointer:#x}, which is not live")
                continue
            if size != event.size:
                summary.problem(event, f"free of {event.pointer:#x} with {event.size} bytes; "
                                f"it was allocated with {size}")
            del live[event.pointer]
            if size > 0:
                del starts[bisect.bisect_left(starts, event.pointer)]
            live_bytes -= size
    summary.leftovers = len(live)
    summary.threads, summary.streams = len(threads), len(streams)
    return summary


def operations(events):
    """The operation sequence a replay runs, as gpumem-bench builds it: a list of
    (is_free, slot, size, stream index), each allocation with a slot of its own and each
    free naming the slot of the latest live allocation of its pointer (frees of unknown
    pointers and "allocate failure" lines skipped); then the slots still live at the end,
    which a replay frees; the streams in order of first appearance; and the peak of live
    requested bytes."""
    ops, slot_of, slot_size, slot_stream, stream_index = [], {}, [], [], {}
    live_bytes = peak = 0
    for event in events:
        if event.action == "allocate failure":
            continue
        stream = stream_index.setdefault(event.stream, len(stream_index))
        if event.action == "allocate":
            slot = len(slot_size)
            slot_size.append(event.size)
            slot_stream.append(stream)
            slot_of[event.pointer] = slot
            ops.append((False, slot, event.size, stream))
            live_bytes += event.size
            peak = max(peak, live_bytes)
        else:
            slot = slot_of.pop(event.pointer, None)
            if slot is None:
                continue
            ops.append((True, slot, slot_size[slot], stream))
            live_bytes -= slot_size[slot]
    leftovers = [(True, slot, slot_size[slot], slot_stream[slot]) for slot in slot_of.values()]
    return ops, leftovers, list(stream_index), peak


def normalize(events):
    """The events as a recorded trace is stored: zero-byte allocations and frees dropped
    (gpumem answers them with no block; some callers log them with a null pointer, which a
    replay cannot tell apart), threads numbered 0, 1, ... in order of first appearance, and
    times counted from the first event. Returns (events, zero-byte events dropped)."""
    threads = {}
    kept = [event for event in events if event.size > 0 or event.action == "allocate failure"]
    dropped = len(events) - len(kept)
    start = kept[0].time_us if kept else 0
    out, day, previous = [], 0, start
    for event in kept:
        time = event.time_us + day
        if time < previous - DAY_US // 2:
            day += DAY_US
            time += DAY_US
        previous = max(previous, time)
        out.append(Event(threads.setdefault(event.thread, len(threads)), time - start,
                         event.action, event.pointer, event.size, event.stream, event.line))
    return out, dropped


def format_event(event):
    pointer = "(nil)" if event.pointer == 0 else f"{event.pointer:#x}"
    return (f"{event.thread},{format_time(event.time_us)},{event.action},{pointer},"
            f"{event.size},{event.stream:x}")


def write_events(path, events):
    with open(path, "w") as file:
        file.write(HEADER + "\n")
        for event in events:
            file.write(format_event(event) + "\n")
