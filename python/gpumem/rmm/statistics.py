"""rmm.statistics: allocation statistics and the memory profiler, gpumem.statistics's under
the same names (they use rmm.mr.StatisticsResourceAdaptor, which is gpumem's)."""
from gpumem.statistics import (
    ProfilerRecords,
    Statistics,
    _get_descriptive_name_of_object,  # RMM's tests name it: the profiler's record names
    default_profiler_records,
    enable_statistics,
    get_statistics,
    pop_statistics,
    profiler,
    push_statistics,
    statistics,
)

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
