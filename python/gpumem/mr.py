"""Memory resources, with the names and defaults of rmm.mr.

Every resource allocates and frees stream-ordered device memory:

    mr.allocate(nbytes, stream=None) -> int     mr.deallocate(ptr, nbytes, stream=None)

and tells what it holds (live_bytes, reserved_bytes, peak_reserved_bytes, ...; None where
it does not know); report(nbytes) and stats() say where memory goes, as an OutOfMemoryError's
.report and .verdict do (docs/reports.md). A resource built over another keeps that upstream alive. Streams may be
None (the default stream), an int, or a CuPy, Numba or PyTorch stream object. Sizes may be
ints or strings as parse_bytes reads them: RMM's ("2kb", "1.5 GiB") or "50%" (of the
device's memory). The current-resource functions give back the object that was set, and for
resources the C library built (the default, reinitialize's) an object of their class.
"""
import functools
import os
import re
from fractions import Fraction

from . import _lib
from ._lib import InvalidArgumentError

MemoryResource = _lib.Resource
# RMM's name for the base class.
DeviceMemoryResource = MemoryResource

__all__ = [
    "AlignedResourceAdaptor",
    "ArenaMemoryResource",
    "BinningMemoryResource",
    "CallbackMemoryResource",
    "CudaAsyncManagedMemoryResource",
    "CudaAsyncMemoryResource",
    "CudaAsyncViewMemoryResource",
    "CudaMemoryResource",
    "DeviceMemoryResource",
    "FailureCallbackResourceAdaptor",
    "FaultyMemoryResource",
    "FixedSizeMemoryResource",
    "LimitingResourceAdaptor",
    "LoggingResourceAdaptor",
    "ManagedMemoryResource",
    "MemoryResource",
    "PinnedHostMemoryResource",
    "PoolMemoryResource",
    "PrefetchResourceAdaptor",
    "StatisticsResourceAdaptor",
    "SuballocatorMemoryResource",
    "SystemMemoryResource",
    "TrackingResourceAdaptor",
    "UpstreamMemoryResource",
    "UpstreamResourceAdaptor",
    "VmmMemoryResource",
    "available_device_memory",
    "define_spec_name",
    "disable_logging",
    "enable_logging",
    "from_spec",
    "get_current_device_resource",
    "get_current_device_resource_type",
    "get_log_filenames",
    "get_per_device_resource",
    "get_per_device_resource_type",
    "is_initialized",
    "parse_bytes",
    "set_current_device_resource",
    "set_per_device_resource",
]


# Sizes as RMM's parse_bytes reads them (a number, optional blanks, an optional unit: b, kb
# .. pb in powers of 1000, kib .. pib in powers of 1024, any case), or a percentage of the
# device's memory.
_SIZE_PATTERN = re.compile(r"([0-9]+(?:\.[0-9]*)?)[\t ]*(%|(?:[kmgtp]i?)?b)?", re.IGNORECASE)
_SIZE_FACTORS = {"": 1, "b": 1, "%": 1}
for _power, _prefix in enumerate("kmgtp", start=1):
    _SIZE_FACTORS[_prefix + "b"] = 1000 ** _power
    _SIZE_FACTORS[_prefix + "ib"] = 1024 ** _power


def parse_bytes(value, device=None):
    """Bytes from an int or a string: "2kb" (2000), "2kib" (2048), "1 GiB", "1.5GB", "4096"
    (RMM's parse_bytes), or "50%" of `device`'s memory (None: the current device). A string
    that is none of these raises InvalidArgumentError (a ValueError); so does a negative
    int."""
    if isinstance(value, str):
        match = _SIZE_PATTERN.fullmatch(value)
        if match is None:
            raise InvalidArgumentError(
                f"Could not parse {value!r} as a size (write e.g. 1000000, \"512MiB\", "
                f"\"1.5GB\", \"1 GiB\" or \"50%\")")
        number, unit = Fraction(match.group(1)), (match.group(2) or "").lower()
        if unit != "%":
            return int(number * _SIZE_FACTORS[unit])
        if number > 100:
            raise InvalidArgumentError(f"{value!r} is more than the device's memory")
        return int(number * available_device_memory(device)[1] / 100)
    value = int(value)
    if value < 0:
        raise InvalidArgumentError(f"a size must not be negative: {value}")
    return value


def _size(value, device=None):
    """Bytes from an int, a string (parse_bytes) or None (0: the default)."""
    return 0 if value is None else parse_bytes(value, device)


class CudaMemoryResource(MemoryResource):
    """cudaMalloc/cudaFree memory (cuMemAlloc): slow and synchronizing; the reference."""

    def __init__(self, device=None):
        _lib.init_base(self, "cuda", device)


_ADVICE = {"read_mostly": 1, "preferred_location_device": 2, "preferred_location_host": 4,
           "accessed_by_device": 8}


class ManagedMemoryResource(MemoryResource):
    """Managed memory (cudaMallocManaged): pages between host and device and may exceed the
    device's memory. prefetch: move each allocation to the device on its stream; advice:
    names from "read_mostly", "preferred_location_device", "preferred_location_host",
    "accessed_by_device"."""

    def __init__(self, device=None, prefetch=False, advice=()):
        flags = 0
        for name in advice:
            if name not in _ADVICE:
                raise InvalidArgumentError(
                    f"unknown memory advice {name!r}: one of {', '.join(_ADVICE)}")
            flags |= _ADVICE[name]
        _lib.init_base(self, "managed", device, int(bool(prefetch)), flags)


class CudaAsyncMemoryResource(MemoryResource):
    """A driver memory pool of its own (cudaMallocAsync). release_threshold None keeps all
    freed memory in the pool; enable_ipc makes its memory exportable as POSIX descriptors,
    enable_fabric as fabric handles (one kind per pool)."""

    def __init__(self, initial_pool_size=None, release_threshold=None, enable_ipc=False,
                 enable_fabric=False, *, device=None):
        if enable_ipc and enable_fabric:
            raise InvalidArgumentError("a gpumem driver pool exports one kind of handle: "
                                       "enable_ipc or enable_fabric, not both")
        # 0 means "the default: keep everything" to the C library
        threshold = _release_threshold(release_threshold, device)
        _lib.init_base(self, "async", device, threshold, _size(initial_pool_size, device),
                       1 if enable_ipc else 2 if enable_fabric else 0)

    def pool_handle(self):
        """The driver pool's handle (a CUmemoryPool value), for CudaAsyncViewMemoryResource."""
        return _lib.async_pool_handle(self)


class CudaAsyncViewMemoryResource(MemoryResource):
    """Allocates from an existing driver memory pool, as RMM's: pool_handle is a
    CUmemoryPool/cudaMemPool_t (an int, or an object int() takes: the device's default pool,
    one the program made, a CudaAsyncMemoryResource's pool_handle()). The pool is neither
    changed nor destroyed, and must outlive this resource; reserved_bytes counts what this
    resource allocated from it."""

    def __init__(self, pool_handle, *, device=None):
        try:
            handle = int(pool_handle)
        except (TypeError, ValueError):  # a ValueError, as RMM's
            raise InvalidArgumentError(f"pool_handle must be a driver pool handle (an int), "
                                       f"not {type(pool_handle).__name__}") from None
        if handle <= 0:
            raise InvalidArgumentError(f"pool_handle {handle} is not a driver pool")
        _lib.init_base(self, "async", device, 0, 0, 0, handle)

    def pool_handle(self):
        """The driver pool's handle, as given."""
        return _lib.async_pool_handle(self)


class CudaAsyncManagedMemoryResource(MemoryResource):
    """Managed memory from the device's default pool of managed memory (cudaMallocFromPoolAsync
    over cudaMemGetDefaultMemPool with managed allocation; RMM's
    rmm.mr.experimental.CudaAsyncManagedMemoryResource). The pool is the driver's, shared by
    the process: neither destroyed nor changed, except its release threshold when
    release_threshold is given (the pool's own is 0: freed memory goes back at each
    synchronization). Needs CUDA 13.0 and concurrent managed access; raises GpumemError
    (GPUMEM_ERR_UNSUPPORTED) otherwise."""

    def __init__(self, *, release_threshold=None, device=None):
        # 0 means "leave the pool's threshold" to the C library
        _lib.init_base(self, "async", device, _release_threshold(release_threshold, device),
                       0, 0, 0, 1)

    def pool_handle(self):
        """The driver pool's handle (a CUmemoryPool value, an int)."""
        return _lib.async_pool_handle(self)


class PinnedHostMemoryResource(MemoryResource):
    """Page-locked host memory (cudaHostAlloc), for fast copies."""

    def __init__(self, device=None, mapped=False, write_combined=False):
        _lib.init_base(self, "pinned_host", device, (2 if mapped else 0) | (4 if write_combined else 0))


class SystemMemoryResource(MemoryResource):
    """Host malloc, for devices that access pageable memory (HMM, ATS); elsewhere the
    constructor raises GpumemError (unsupported)."""

    def __init__(self, device=None):
        _lib.init_base(self, "system", device)


class VmmMemoryResource(MemoryResource):
    """Device memory mapped on demand into one reserved address range (cuMemMap): a pool
    over it grows in place. reserve_size: address space to reserve (default 4x the
    device's memory). piece_size: physical memory is made in pieces of at most this size,
    each of which a pool's trim can unmap on its own (default 32 MiB); most of a block of
    32 pieces or more in pieces of twice that."""

    def __init__(self, reserve_size=None, device=None, *, piece_size=None):
        _lib.init_base(self, "vmm", device, _size(reserve_size, device),
                       _size(piece_size, device))


_NO_UPSTREAM = object()
_KEEP_HOLES = 0xFFFFFFFF  # gpumem.h's GPUMEM_POOL_KEEP_HOLES: release_holes_over="never"


def _upstream_keyword(init):
    """Lets an adaptor's __init__ take its upstream as upstream= too (RMM's older keyword)
    and refuses None with TypeError before anything is built."""

    @functools.wraps(init)
    def __init__(self, *args, upstream=_NO_UPSTREAM, **kwargs):
        if upstream is not _NO_UPSTREAM:
            if args or "upstream_mr" in kwargs:
                raise TypeError(f"{type(self).__name__}() got both upstream_mr and upstream")
            kwargs["upstream_mr"] = upstream
        given = args[0] if args else kwargs.get("upstream_mr", _NO_UPSTREAM)
        if given is None:
            raise TypeError(f"{type(self).__name__}: upstream_mr must be a memory resource, "
                            "not None")
        init(self, *args, **kwargs)

    return __init__


class UpstreamMemoryResource(MemoryResource):
    """A resource over another: the Python upstream object stays alive with it. Every
    subclass takes its upstream as upstream_mr (first) or upstream=."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _upstream_keyword(cls.__dict__["__init__"])

    @property
    def upstream_mr(self):
        """The resource given as upstream (the same Python object)."""
        return self._upstream

    def get_upstream(self):
        return self._upstream


# RMM's name for the base class of resources over another.
UpstreamResourceAdaptor = UpstreamMemoryResource


class SuballocatorMemoryResource(UpstreamMemoryResource):
    """A resource that keeps memory from its upstream and hands it out in pieces (pool,
    arena, binning, fixed size): it can give its free memory back."""

    def trim(self):
        """Gives the free memory this resource holds back to upstream_mr: a pool's whole free
        chunks (over vmm, whole free pieces of partly used ones too), an arena's free
        superblocks, the free chunks of a binning resource's own bins or of a fixed-size
        resource. Waits for the device first; returns the bytes given back."""
        return _lib.resource_trim(self)


class PoolMemoryResource(SuballocatorMemoryResource):
    """A coalescing pool over upstream_mr, with per-stream free lists. initial_pool_size
    None: half of the device's free memory (nothing over a VmmMemoryResource, which grows in
    place); maximum_pool_size None: no limit. release_holes_over (gpumem's own, over a
    VmmMemoryResource only): a percentage N of at least 100: before growing past N% of its
    live peak, the pool gives back free pieces inside its holes (gpumem.h says when that
    pays); None: the default, the same at 110% but only for a request of half of the live
    peak of the program's pass up to all of it (40% while it holds no more than three
    quarters of that peak) or, once the live peak spans 32 of the upstream's pieces (1 GiB
    by default), of a size served before, and past the live peak itself for a request of 1
    MiB or more once the program holds no more than three quarters of its pass's peak with
    four times the growth free; "never": holes stay mapped. release_holes_time
    (gpumem's own): the most percentage of the time, 1 to 100, those releases take over the
    long run; None: the default, 25; 100: no limit, for a program that would rather spend
    time in the driver than hold memory."""

    def __init__(self, upstream_mr, initial_pool_size=None, maximum_pool_size=None,
                 release_holes_over=None, release_holes_time=None):
        device = upstream_mr.device
        if release_holes_over == "never":
            release_holes_over = _KEEP_HOLES
        _lib.init_adaptor(self, "pool", upstream_mr, _size(initial_pool_size, device),
                          _size(maximum_pool_size, device), release_holes_over or 0,
                          release_holes_time or 0)
        self._upstream = upstream_mr

    def pool_size(self):
        """Bytes the pool holds from upstream_mr, free and allocated (as RMM's)."""
        return self.reserved_bytes


class ArenaMemoryResource(SuballocatorMemoryResource):
    """A pool per stream over one global pool, for many threads at once. arena_size: the
    global pool's initial size (None as for PoolMemoryResource)."""

    def __init__(self, upstream_mr, arena_size=None, dump_log_on_failure=False,
                 maximum_size=None, superblock_size=None):
        device = upstream_mr.device
        _lib.init_adaptor(self, "arena", upstream_mr, _size(arena_size, device),
                          _size(maximum_size, device), _size(superblock_size, device))
        self._upstream = upstream_mr


class FixedSizeMemoryResource(SuballocatorMemoryResource):
    """Blocks of one size (block_size), taken from upstream_mr blocks_to_preallocate at a
    time; larger requests raise OutOfMemoryError."""

    def __init__(self, upstream_mr, block_size=1 << 20, blocks_to_preallocate=128):
        _lib.init_adaptor(self, "fixed_size", upstream_mr, _size(block_size),
                          int(blocks_to_preallocate))
        self._upstream = upstream_mr


class BinningMemoryResource(SuballocatorMemoryResource):
    """Requests go to the smallest bin that holds them, larger ones to upstream_mr. With
    min_size_exponent and max_size_exponent, bins of 2**min .. 2**max bytes (fixed-size
    resources, made when first used); add_bin adds more."""

    def __init__(self, upstream_mr, min_size_exponent=-1, max_size_exponent=-1):
        no_bins = min_size_exponent < 0 or max_size_exponent < 0
        _lib.init_adaptor(self, "binning", upstream_mr, 0 if no_bins else min_size_exponent,
                          0 if no_bins else max_size_exponent)
        self._upstream = upstream_mr
        self._bins = []

    def add_bin(self, allocation_size, bin_resource=None):
        """Requests up to allocation_size bytes go to bin_resource (None: a fixed-size bin
        over the upstream). Add bins before other threads allocate from this resource."""
        _lib.binning_add_bin(self, int(allocation_size), bin_resource)
        if bin_resource is not None:
            self._bins.append(bin_resource)

    @property
    def bin_mrs(self):
        """The resources added with add_bin."""
        return list(self._bins)


class FaultyMemoryResource(UpstreamMemoryResource):
    """Fails the fail_at-th allocation, or every fail_every-th, for tests."""

    def __init__(self, upstream_mr, fail_at=0, fail_every=0):
        _lib.init_adaptor(self, "faulty", upstream_mr, int(fail_at), int(fail_every))
        self._upstream = upstream_mr


class CallbackMemoryResource(MemoryResource):
    """A resource whose allocations are made by Python functions, as RMM's:

        allocate_func(size, stream) -> int        a device pointer of `size` bytes
        deallocate_func(ptr, size, stream)

    `stream` is the stream as an int (a CUstream value; 0 is the default stream), which
    every gpumem call accepts as a stream. gpumem keeps the contract around them: it
    records each pointer allocate_func returns and refuses (GpumemError, misuse) a free of
    a pointer it did not give, a double free or a wrong size without calling
    deallocate_func; a pointer that is not 256-byte aligned or already live is refused too.
    An exception raised by either function reaches the caller of the allocation or free
    (MemoryError also tells pools and FailureCallbackResourceAdaptor that memory ran out).
    The functions may be called from any thread (they take the GIL), and cost a Python call
    per allocation: for debugging and experiments more than for speed."""

    def __init__(self, allocate_func, deallocate_func, device=None):
        _lib.init_callback(self, allocate_func, deallocate_func, device)
        self._allocate_func = allocate_func
        self._deallocate_func = deallocate_func


class FailureCallbackResourceAdaptor(UpstreamMemoryResource):
    """Calls callback(nbytes) -> bool when an allocation from upstream_mr runs out of memory,
    and tries again while it returns True (as RMM's). An exception raised by the callback
    reaches the caller of the allocation. A failure inside the callback (it may allocate
    from this adaptor) is not retried again."""

    def __init__(self, upstream_mr, callback):
        _lib.init_failure_callback(self, upstream_mr, callback)
        self._upstream = upstream_mr
        self._callback = callback


class LimitingResourceAdaptor(UpstreamMemoryResource):
    """Refuses (OutOfMemoryError) allocations that would take the bytes allocated through it
    past allocation_limit, before upstream_mr sees them. Exact: an allocation fails only if
    what is allocated plus the request exceeds the limit; threads take no lock."""

    def __init__(self, upstream_mr, allocation_limit):
        device = getattr(upstream_mr, "device", None)  # not a resource: init_adaptor says so
        _lib.init_adaptor(self, "limit", upstream_mr, _size(allocation_limit, device))
        self._upstream = upstream_mr

    def get_allocated_bytes(self):
        """Bytes allocated through this adaptor and not yet freed."""
        return _lib.limit_bytes(self, 0)

    def get_allocation_limit(self):
        """The most bytes this adaptor lets be allocated through it."""
        return _lib.limit_bytes(self, 1)


class AlignedResourceAdaptor(UpstreamMemoryResource):
    """Allocations of at least alignment_threshold bytes (default: all) come back aligned to
    alignment (a power of two; default 256), as RMM's aligned_resource_adaptor."""

    def __init__(self, upstream_mr, alignment=256, alignment_threshold=0):
        alignment = _size(alignment)
        if alignment == 0:
            raise InvalidArgumentError("the alignment 0 is not a power of two")
        _lib.init_adaptor(self, "aligned", upstream_mr, alignment, _size(alignment_threshold))
        self._upstream = upstream_mr


class PrefetchResourceAdaptor(UpstreamMemoryResource):
    """Prefetches each allocation to the device on its stream when upstream_mr hands out
    managed memory (ManagedMemoryResource, or a pool over one); passes calls on otherwise.
    A failed prefetch raises, with the memory given back."""

    def __init__(self, upstream_mr):
        _lib.init_adaptor(self, "prefetch", upstream_mr)
        self._upstream = upstream_mr


class TrackingResourceAdaptor(UpstreamMemoryResource):
    """Keeps every outstanding allocation made through it, with its size, stream, time and,
    with capture_stacks, the call stack that made it (as RMM's). A free of a pointer it did
    not track, or with another size than it recorded, is reported on stderr and passed on as
    it came (upstream_mr decides: a pool refuses a wrong size and keeps the block)."""

    def __init__(self, upstream_mr, capture_stacks=False):
        _lib.init_adaptor(self, "tracking", upstream_mr, 1 if capture_stacks else 0)
        self._upstream = upstream_mr

    def get_allocated_bytes(self):
        """Bytes of the allocations made through this adaptor and not yet freed."""
        return _lib.tracking_bytes(self)

    def get_outstanding_allocations_str(self):
        """The outstanding allocations, by address, a line each: "0x7f..: SIZE B, stream S,
        at +T s" (seconds from the adaptor's creation), with capture_stacks followed by the
        call stack, a frame a line; "" when there are none."""
        return _lib.tracking_str(self)

    def log_outstanding_allocations(self):
        """Writes "Outstanding Allocations: N (SIZE)" and the list to stderr."""
        _lib.tracking_log(self)


class StatisticsResourceAdaptor(UpstreamMemoryResource):
    """Counts what is allocated through it (as RMM's): bytes as requested and allocations,
    each current, at its peak and in total, in a stack of counters (push_counters,
    pop_counters). Threads count without a lock; the peak is exact while one thread
    allocates through it, and within flush_bytes (flush_count) per other thread otherwise
    (None: 1 MiB and 64). gpumem.statistics uses it as the current resource."""

    def __init__(self, upstream_mr, *, flush_bytes=None, flush_count=None):
        _lib.init_adaptor(self, "stats", upstream_mr, _size(flush_bytes),
                          0 if flush_count is None else int(flush_count))
        self._upstream = upstream_mr

    @property
    def allocation_counts(self):
        """The top counters, a gpumem.statistics.Statistics."""
        from .statistics import _counters
        return _counters(self, 0)

    def push_counters(self):
        """Pushes fresh counters; returns the top ones as they were before."""
        from .statistics import _counters
        return _counters(self, 1)

    def pop_counters(self):
        """Pops the top counters, folding them into those below; returns them. IndexError
        when none were pushed."""
        from .statistics import _counters
        return _counters(self, 2)


def _log_base_name(log_file_name):
    """The log file name given (None: GPUMEM_LOG_FILE's), made absolute; ValueError when
    there is none."""
    if log_file_name is None:
        log_file_name = os.getenv("GPUMEM_LOG_FILE")
        if not log_file_name:
            raise ValueError("gpumem log file must be specified either using log_file_name= "
                             "argument or GPUMEM_LOG_FILE environment variable")
    return os.path.abspath(os.fspath(log_file_name))


def _release_threshold(value, device):
    """A driver pool's release threshold for the C library, where 0 means "not given": a
    threshold of 0 that was given becomes 1 byte."""
    threshold = _size(value, device)
    return 1 if value is not None and threshold == 0 else threshold


def _log_file_for_device(log_file_name, device):
    """RMM's naming of a device's log: ".dev<device>" before the extension."""
    name, extension = os.path.splitext(_log_base_name(log_file_name))
    return f"{name}.dev{device}{extension}"


class LoggingResourceAdaptor(UpstreamMemoryResource):
    """Writes every allocation and free through it to a CSV file in RMM's format (Thread,
    Time, Action, Pointer, Size, Stream), as RMM's: log_file_name (None: the environment
    variable GPUMEM_LOG_FILE) gets ".dev<device>" before its extension. The file is in call
    order and complete as each call returns, even if the process is then killed; flush()
    cuts it where the events end (exit, and the adaptor's end, do too). gpumem-bench replay
    and python -m gpumem.plot read it."""

    def __init__(self, upstream_mr, log_file_name=None):
        device = getattr(upstream_mr, "device", None)  # not a resource: init_log says so
        path = _log_file_for_device(log_file_name, 0 if device is None else device)
        _lib.init_log(self, upstream_mr, path)
        self._upstream = upstream_mr

    def flush(self):
        """Makes the file hold exactly the events so far."""
        _lib.log_flush(self)

    def get_file_name(self):
        """The file's absolute name ("%p" in the name given becomes the process id)."""
        return _lib.log_file_name(self)


def from_spec(spec, device=None):
    """A resource from a spec string: "pool(vmm)", "managed(prefetch=true)",
    "binning(pool(cuda, initial=1GiB), min=10, max=20)", ..."""
    resource = MemoryResource()
    _lib.init_spec(resource, spec, device)
    return resource


def define_spec_name(name, mr):
    """Names `mr` for specs: afterwards from_spec("pool(NAME)") builds a pool over that very
    resource (a CallbackMemoryResource, say). `mr` None removes the name."""
    _lib.spec_define(name, mr)


# The Python objects set as current resources, so that getting the resource returns the
# object that was set (with its class and attributes), as RMM does.
_current = {}


def _device_index(device):
    """A device index: None means the current device; negative numbers are refused (the C
    library reads -1 as "the current device", which would file the object under -1)."""
    if device is None:
        return _lib.get_device()
    index = int(device)
    if index < 0:
        raise InvalidArgumentError(f"device {index} does not exist: devices are numbered from 0")
    return index


def _forget_current(devices):
    for device in devices:
        _current.pop(int(device), None)


# The class of each kind of resource the C library builds (the default resource, a
# reinitialize, GPUMEM_RESOURCE), for resources got back from it.
_CLASS_OF_KIND = {
    "cuda": CudaMemoryResource, "managed": ManagedMemoryResource,
    "async": CudaAsyncMemoryResource, "pinned_host": PinnedHostMemoryResource,
    "system": SystemMemoryResource, "vmm": VmmMemoryResource, "pool": PoolMemoryResource,
    "arena": ArenaMemoryResource, "fixed_size": FixedSizeMemoryResource,
    "binning": BinningMemoryResource, "faulty": FaultyMemoryResource,
    "limit": LimitingResourceAdaptor, "aligned": AlignedResourceAdaptor,
    "prefetch": PrefetchResourceAdaptor, "tracking": TrackingResourceAdaptor,
    "stats": StatisticsResourceAdaptor, "log": LoggingResourceAdaptor,
}


def _typed(resource):
    """The resource as an object of its kind's class (a pool a PoolMemoryResource whose
    upstream_mr is typed too); kinds without a class stay plain MemoryResource objects."""
    cls = _CLASS_OF_KIND.get(resource.name)
    if cls is CudaAsyncMemoryResource and resource.spec.startswith("async(pool="):
        cls = CudaAsyncViewMemoryResource
    if cls is CudaAsyncMemoryResource and resource.spec.startswith("async(managed=true"):
        cls = CudaAsyncManagedMemoryResource
    if cls is None:
        return resource
    typed = cls.__new__(cls)
    _lib.adopt(typed, resource)
    if issubclass(cls, UpstreamMemoryResource):
        upstream = resource.upstream
        typed._upstream = None if upstream is None else _typed(upstream)
    if cls is BinningMemoryResource:
        typed._bins = []
    return typed


def get_per_device_resource(device):
    """The current resource of `device`: the object that was set, else (the default, or one
    reinitialize built) an object of its class, the same one each time."""
    device = _device_index(device)
    resource = _lib.get_per_device_resource(device)
    kept = _current.get(device)
    if kept is not None and kept.handle == resource.handle:
        return kept
    _current[device] = kept = _typed(resource)
    return kept


def get_per_device_resource_type(device):
    """The class of the current resource of `device`."""
    return type(get_per_device_resource(device))


def get_current_device_resource_type():
    """The class of the current device's resource."""
    return type(get_current_device_resource())


def enable_logging(log_file_name=None):
    """gpumem.enable_logging, also here as in rmm.mr."""
    from . import enable_logging as enable
    enable(log_file_name)


def disable_logging():
    """gpumem.disable_logging, also here as in rmm.mr."""
    from . import disable_logging as disable
    disable()


def get_log_filenames():
    """gpumem.get_log_filenames, also here as in rmm.mr."""
    from . import get_log_filenames as names
    return names()


def is_initialized():
    """True, as RMM's: every device has a current resource from the start (the default, made
    on first use), so `if not is_initialized(): reinitialize()` never replaces one."""
    return True


def set_per_device_resource(device, mr):
    """Makes mr (or None: the default) the resource of `device`."""
    device = _device_index(device)
    _lib.set_per_device_resource(device, mr)
    if mr is None:
        _current.pop(device, None)
    else:
        _current[device] = mr


def get_current_device_resource():
    """The current device's resource."""
    return get_per_device_resource(None)


def set_current_device_resource(mr):
    """Makes mr the resource of its device (the current one, for resources made there)."""
    set_per_device_resource(getattr(mr, "device", None), mr)  # not a resource: TypeError


def available_device_memory(device=None):
    """(free, total) bytes of the device's memory."""
    return _lib.memory_info(device)
