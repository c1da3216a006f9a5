"""rmm.statistics: allocation statistics and the memory profiler, gpumem.statistics's under
the same names (they use rmm.mr.StatisticsResourceAdaptor, which is gpumem's)."""
from gpumem.statistics import (
    ProfilerRecords,
    Statistics,
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
