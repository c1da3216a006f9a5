"""rmm.pylibrmm.logger: RMM's debug-logger controls. gpumem writes no debug log (its
messages go with the errors it raises, and GPUMEM_VERBOSE=1 prints its settings), so it is
a library built with debug logging compiled out, in RMM's terms: the levels are kept and
read back as RMM's are, should_log is False at every level, set_logging_level warns that
nothing will be logged at that level, and flush_logger has nothing to flush. The per-event
allocation log is a different thing, and gpumem has it: LoggingResourceAdaptor and
rmm.enable_logging."""
import enum
import threading
import warnings


class level_enum(enum.IntEnum):  # noqa: N801 -- RMM's name
    """Debug-log levels, most verbose first (RMM's values)."""

    trace = 0
    debug = 1
    info = 2
    warn = 3
    error = 4
    critical = 5
    off = 6
    n_levels = 7


_lock = threading.Lock()
_levels = {"log": level_enum.info, "flush": level_enum.warn}


def _check(level):
    if not isinstance(level, level_enum):
        raise TypeError(f"level must be a level_enum member, not {level!r}")


def should_log(level):
    """Whether a message at `level` would be written: never, as gpumem writes no debug log."""
    _check(level)
    return False


def set_logging_level(level):
    """Sets the debug-log level (kept and returned by get_logging_level); warns, as RMM does
    for a level its build does not log, that gpumem logs nothing at it."""
    _check(level)
    with _lock:
        _levels["log"] = level
    if level < level_enum.off and not should_log(level):
        warnings.warn(f"gpumem will not log level_enum.{level.name}: gpumem writes no debug "
                      "log (its errors carry their messages)", stacklevel=2)


def get_logging_level():
    """The debug-log level last set (level_enum.info at first, as RMM's)."""
    with _lock:
        return _levels["log"]


def flush_logger():
    """Flushes the debug log: there is none, so nothing happens."""


def set_flush_level(level):
    """Sets the level at which the debug log would flush (kept for get_flush_level)."""
    _check(level)
    with _lock:
        _levels["flush"] = level


def get_flush_level():
    """The flush level last set (level_enum.warn at first)."""
    with _lock:
        return _levels["flush"]


__all__ = [
    "flush_logger",
    "get_flush_level",
    "get_logging_level",
    "level_enum",
    "set_flush_level",
    "set_logging_level",
    "should_log",
]
