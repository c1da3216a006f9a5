"""Allocation statistics of the current device resource, as rmm.statistics.

    gpumem.statistics.enable_statistics()      # wraps the current resource in a
                                               # StatisticsResourceAdaptor, once
    gpumem.statistics.get_statistics()         # Statistics, or None while not enabled
    with gpumem.statistics.statistics(): ...   # enabled (or fresh counters) inside only

    @gpumem.statistics.profiler()              # the peak and total bytes of each call,
    def step(): ...                            # by function or by named block
    print(gpumem.statistics.default_profiler_records.report())

Statistics are on when the current resource is a statistics adaptor: a
StatisticsResourceAdaptor, or any resource built from a spec "stats(...)" (also the
GPUMEM_RESOURCE variable's). Otherwise these functions do nothing and return None.
"""
import inspect
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps

from . import _lib, mr

__all__ = [
    "ProfilerRecords",
    "Statistics",
    "default_profiler_records",
    "enable_statistics",
    "get_statistics",
    "pop_statistics",
    "profiler",
    "push_statistics",
    "statistics",
]


@dataclass
class Statistics:
    """Counters of a statistics adaptor: bytes as requested and allocations, each current,
    at its peak and in total. In pushed counters the current values may be negative (frees
    of memory allocated before the push)."""

    current_bytes: int
    current_count: int
    peak_bytes: int
    peak_count: int
    total_bytes: int
    total_count: int


def _counters(resource, op):
    """The counters of a statistics adaptor: read (op 0), before a push (1) or popped (2)."""
    return Statistics(*_lib.statistics(resource, op))


def _current_with_statistics():
    """The current device resource if it keeps statistics, else None."""
    current = mr.get_current_device_resource()
    return current if current.name == "stats" else None


def enable_statistics():
    """Makes the current device resource a StatisticsResourceAdaptor over the one there, unless
    it keeps statistics already. It must stay the current resource while statistics are
    read."""
    current = mr.get_current_device_resource()
    if current.name != "stats":
        mr.set_current_device_resource(mr.StatisticsResourceAdaptor(current))


def get_statistics():
    """The current resource's top counters, or None when statistics are not enabled."""
    current = _current_with_statistics()
    return None if current is None else _counters(current, 0)


def push_statistics():
    """Pushes fresh counters and returns the top ones as they were before; None (and nothing
    pushed) when statistics are not enabled."""
    current = _current_with_statistics()
    return None if current is None else _counters(current, 1)


def pop_statistics():
    """Pops the top counters, which the ones below take in, and returns them; None when
    statistics are not enabled."""
    current = _current_with_statistics()
    return None if current is None else _counters(current, 2)


@contextmanager
def statistics():
    """Statistics inside the block: fresh counters pushed on entry and popped on exit where
    they are enabled already; otherwise a StatisticsResourceAdaptor made the current resource
    for the block and the resource before put back after it. Raises ValueError when the
    current resource was changed inside the block."""
    before = None
    if push_statistics() is None:
        before = mr.get_current_device_resource()
        enable_statistics()
    inside = mr.get_current_device_resource()
    try:
        yield
    finally:
        if mr.get_current_device_resource().handle != inside.handle:
            raise ValueError("the current device resource was changed inside the statistics "
                             "block: its statistics can no longer be ended")
        if before is None:
            pop_statistics()
        else:
            mr.set_current_device_resource(before)


class ProfilerRecords:
    """The memory figures that profilers record, by name; safe to add to from threads."""

    @dataclass
    class MemoryRecord:
        """A profiled function or block: how often it ran, the bytes it allocated in all,
        and the most it had allocated at once in any one run."""

        num_calls: int = 0
        memory_total: int = 0
        memory_peak: int = 0

        def add(self, memory_total, memory_peak):
            self.num_calls += 1
            self.memory_total += memory_total
            self.memory_peak = max(self.memory_peak, memory_peak)

    def __init__(self):
        self._lock = threading.Lock()
        self._records = {}

    def add(self, name, data):
        """Adds one run of `name` with its Statistics (`data`)."""
        with self._lock:
            record = self._records.setdefault(name, ProfilerRecords.MemoryRecord())
            record.add(memory_total=data.total_bytes, memory_peak=data.peak_bytes)

    @property
    def records(self):
        """A dict of the records by name."""
        with self._lock:
            return dict(self._records)

    def report(self, ordered_by="memory_peak"):
        """The records as a table, largest first by `ordered_by` ("num_calls",
        "memory_peak" or "memory_total")."""
        if ordered_by not in ("num_calls", "memory_peak", "memory_total"):
            raise ValueError(f"cannot order by {ordered_by!r}: num_calls, memory_peak or "
                             "memory_total")
        lines = ["Memory Profiling", "================", ""]
        rows = sorted(self.records.items(), key=lambda item: getattr(item[1], ordered_by),
                      reverse=True)
        if not rows:
            lines.append("No data, maybe profiling wasn't enabled?")
            return "\n".join(lines)
        lines += [
            "Legends:",
            "  ncalls       - number of times the function or code block was called",
            "  memory_peak  - peak memory allocated in function or code block (in bytes)",
            "  memory_total - total memory allocated in function or code block (in bytes)",
            "",
            f"Ordered by: {ordered_by}",
            "",
            "ncalls     memory_peak    memory_total  filename:lineno(function)",
        ]
        for name, record in rows:
            lines.append(f"{record.num_calls:6,d} {record.memory_peak:15,d} "
                         f"{record.memory_total:15,d}  {name}")
        return "\n".join(lines)

    def __repr__(self):
        return f"{type(self).__name__}({self.records})"

    def __str__(self):
        return self.report()


default_profiler_records = ProfilerRecords()


def _get_descriptive_name_of_object(obj):
    """"FILE:LINE(QUALNAME)" of a function (the one a decorator wraps, if it wraps one), LINE
    being where its definition starts (its first decorator). Read from the code object, so
    that functions whose source is not at hand (python -c, exec) have a name too."""
    function = inspect.unwrap(obj)
    code = getattr(function, "__code__", None)
    line = code.co_firstlineno if code is not None else inspect.getsourcelines(function)[1]
    return f"{inspect.getfile(function)}:{line}({function.__qualname__})"


class ProfilerContext:
    """What profiler() returns: a decorator, and a context manager for a named block."""

    def __init__(self, records, name):
        self._records = records
        self._name = name

    def _record(self, name):
        counters = pop_statistics()
        if counters is not None:
            self._records.add(name=name, data=counters)

    def __call__(self, function):
        name = self._name or _get_descriptive_name_of_object(function)

        @wraps(function)
        def profiled(*args, **kwargs):
            push_statistics()
            try:
                return function(*args, **kwargs)
            finally:
                self._record(name)

        return profiled

    def __enter__(self):
        if not self._name:
            raise ValueError("a profiler used as a context manager needs a name: "
                             "profiler(name=...)")
        push_statistics()
        return self

    def __exit__(self, *exception):
        self._record(self._name)


def profiler(*, records=default_profiler_records, name=""):
    """Records the memory figures of a function (as a decorator; its name defaults to
    "FILE:LINE(FUNCTION)") or of a block (as a context manager, with a name) in `records`:
    each run's peak and total allocated bytes, while statistics are enabled. Does nothing
    while they are not."""
    return ProfilerContext(records, name)
