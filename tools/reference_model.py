"""reference_model.py: offline models of two reference allocators' placement, for asking
whether a reference's peak reserved over peak live on a trace follows from its design or
from one of its constants (a segment size, a growth rule) that happens to suit that trace.

    python3 tools/reference_model.py TRACE.csv... [--allocator torch|rmm] [options]

Allocators:
  torch  PyTorch's CUDA caching allocator with its default settings and no expandable
         segments: sizes rounded up to 512 bytes; requests up to 1 MiB from a small pool of
         2 MiB segments, larger ones from a large pool, whose new segments take
         --medium-segment MiB (default 20) for requests under 10 MiB and the request rounded
         up to 2 MiB otherwise; the best fit (smallest free block, then lowest segment and
         address) across the pool's segments; a block is split when what remains is at least
         512 bytes (small pool) or more than 1 MiB (large pool); free blocks merge only
         within their segment; segments are never given back.
  rmm    RMM's pool_memory_resource with initial_pool_size=0 and no maximum: sizes rounded up
         to 256 bytes; the best fit over all free blocks; when none fits, the pool takes a new
         upstream block of max(request, pool size), which doubles it; free blocks merge only
         within their upstream block. --initial MiB starts it with a block of that size.

Both reproduce the figures gpumem-bench's comparisons measured on the GPU (docs/traces.md),
as placement_model.py's "now" reproduces the pool's. Each trace is replayed twice on the same
state (a cold pass and a warm one, each ending by freeing what the trace left live), as
gpumem-bench replay does.
"""
import argparse
import bisect
import importlib.util
from pathlib import Path

MIB = 1 << 20


def load_placement_model():
    """placement_model.py, beside this file, whose read_events reads traces for both models."""
    path = Path(__file__).resolve().parent / "placement_model.py"
    spec = importlib.util.spec_from_file_location("placement_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


read_events = load_placement_model().read_events


def round_up(value, to):
    return (value + to - 1) // to * to


class Segments:
    """Free blocks as (size, segment, address) in one sorted list, so that the best fit is
    a bisection; each segment's blocks [address, size, free] in address order. Free blocks
    merge within their segment only."""

    def __init__(self):
        self.free_blocks = []
        self.segments = []
        self.reserved = 0

    def add_segment(self, size):
        self.segments.append([[0, size, True]])
        self.reserved += size
        bisect.insort(self.free_blocks, (size, len(self.segments) - 1, 0))

    def best_fit(self, size):
        """Takes the smallest free block of at least `size` out of the free list, or None."""
        at = bisect.bisect_left(self.free_blocks, (size, -1, -1))
        return self.free_blocks.pop(at) if at < len(self.free_blocks) else None

    def take(self, found, size, split):
        """Allocates `size` bytes at the front of free block `found` (taken by best_fit),
        filing what remains as a free block where `split` says so."""
        block_size, segment, addr = found
        blocks = self.segments[segment]
        at = next(i for i, block in enumerate(blocks) if block[0] == addr)
        if split:
            blocks[at][1] = size
            blocks.insert(at + 1, [addr + size, block_size - size, True])
            bisect.insort(self.free_blocks, (block_size - size, segment, addr + size))
        blocks[at][2] = False
        return segment, addr

    def free(self, key):
        segment, addr = key
        blocks = self.segments[segment]
        at = next(i for i, block in enumerate(blocks) if block[0] == addr)
        blocks[at][2] = True
        if at + 1 < len(blocks) and blocks[at + 1][2]:
            after = blocks.pop(at + 1)
            self.free_blocks.remove((after[1], segment, after[0]))
            blocks[at][1] += after[1]
        if at > 0 and blocks[at - 1][2]:
            before = blocks[at - 1]
            self.free_blocks.remove((before[1], segment, before[0]))
            before[1] += blocks.pop(at)[1]
            at -= 1
        bisect.insort(self.free_blocks, (blocks[at][1], segment, blocks[at][0]))


class TorchCaching:
    SMALL_LIMIT = 1 * MIB
    LARGE_FROM = 10 * MIB  # requests from here on get a segment of their own size

    def __init__(self, medium_segment=20 * MIB):
        self.medium_segment = medium_segment
        self.pools = {True: Segments(), False: Segments()}

    @property
    def reserved(self):
        return self.pools[True].reserved + self.pools[False].reserved

    def segment_size(self, size):
        if size <= self.SMALL_LIMIT:
            return 2 * MIB
        if size < self.LARGE_FROM:
            return self.medium_segment
        return round_up(size, 2 * MIB)

    def allocate(self, size):
        size = round_up(max(size, 1), 512)
        small = size <= self.SMALL_LIMIT
        pool = self.pools[small]
        found = pool.best_fit(size)
        if found is None:
            pool.add_segment(self.segment_size(size))
            found = pool.best_fit(size)
        remaining = found[0] - size
        split = remaining >= 512 if small else remaining > self.SMALL_LIMIT
        return small, pool.take(found, size, split)

    def free(self, key):
        small, block = key
        self.pools[small].free(block)


class RmmPool:
    def __init__(self, initial=0):
        self.pool = Segments()
        if initial:
            self.pool.add_segment(round_up(initial, 256))

    @property
    def reserved(self):
        return self.pool.reserved

    def allocate(self, size):
        size = round_up(max(size, 1), 256)
        found = self.pool.best_fit(size)
        if found is None:
            self.pool.add_segment(max(size, self.pool.reserved))
            found = self.pool.best_fit(size)
        return self.pool.take(found, size, found[0] > size)

    def free(self, key):
        self.pool.free(key)


def replay(path, allocator, passes=2):
    """Peak reserved over peak live after each pass, as placement_model.replay reports it."""
    events = read_events(path)
    peak_live = peak_reserved = 0
    report = []
    for number in range(passes):
        live, live_bytes = {}, 0
        for is_allocation, pointer, size in events:
            if is_allocation:
                live[pointer] = (allocator.allocate(size), size)
                live_bytes += size
                peak_live = max(peak_live, live_bytes)
                peak_reserved = max(peak_reserved, allocator.reserved)
            elif pointer in live:
                key, size = live.pop(pointer)
                allocator.free(key)
                live_bytes -= size
        for key, _ in live.values():
            allocator.free(key)
        report.append(f"after pass {number + 1}: {peak_reserved / peak_live:.3f}")
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--allocator", default="torch", choices=["torch", "rmm"])
    parser.add_argument("--medium-segment", type=float, default=20,
                        help="torch: the segment size in MiB for requests of 1 to 10 MiB")
    parser.add_argument("--initial", type=float, default=0,
                        help="rmm: the initial pool size in MiB")
    args = parser.parse_args()
    for path in args.traces:
        if args.allocator == "torch":
            allocator = TorchCaching(int(args.medium_segment * MIB))
        else:
            allocator = RmmPool(int(args.initial * MIB))
        print(f"{path.split('/')[-1]:30} {args.allocator:5} peak reserved over peak live "
              + "; ".join(replay(path, allocator)), flush=True)


if __name__ == "__main__":
    main()
