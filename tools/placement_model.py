"""placement_model.py: an offline model of the pool's placement over vmm, for asking what a
placement or mapping policy would do to a trace's peak reserved over peak live before
building it.

    python3 tools/placement_model.py data/torch_bert_varlen_infer.csv [--policy POLICY]

The model follows the pool: requests rounded to 256 bytes; two regions (under 128 KiB and
the rest), each one address range that grows at its end in 2 MiB granules, merging with a
free last block; best fit (smallest free block, then lowest address), carved from the
front, but in the large region the free last block only when no other fits (growth keeps
it for what fits nowhere else); frees merge with free neighbours. Reserved is mapped
physical memory.

Policies:
  now   the pool as built: every granule of the address range stays mapped. It reproduces
        gpumem-bench's reserved over live for pool(vmm) on every trace.
  move  physical granules move: placement goes only to mapped free space; a request that
        fits nowhere goes to the end of its region, and the granules it needs are taken
        from whole free granules inside holes (unmapped there, mapped at the end) before
        new physical memory. It reports the moves, each an unmap and a map on a GPU.
        With --cap X, granules move only when new memory would take what is mapped past X
        times the live peak so far.
  gap   the pool with release_holes_over (gpumem_pool_options): placement as "now"; when a
        region must grow and the mapped memory would pass --cap X times the live peak (the
        request counted in), whole free granules inside holes (free blocks other than a
        region's last), lowest first, are unmapped and left unused, as many as the growth
        takes. It reports the granules given back and the runs they came in. The pool gives
        back whole pieces of vmm's, not granules: --piece 32 models vmm's default pieces
        (and counts pieces, each a driver call's worth of time on a GPU). The pool's pace
        (GPUMEM__POOL_HOLES_PACE) is not modelled: this is the release unpaced.
  harvest, harvest-at-growth
        placement as "now", but a granule is mapped only when a block first covers it; a
        granule needed with no spare physical memory in hand is taken from a whole free
        granule inside a hole (unmapped there, kept as a spare) before new memory is made:
        whenever one is needed, or only when the region grows. It reports maps and unmaps.
        With --cap X (harvest only), a granule is taken from a hole only when new memory
        would take what is mapped past X times the live peak so far.

  offline
        not an allocator: how far placement alone gets when it knows the future. Knowing
        every block's lifetime in advance, blocks go largest first, each at the lowest
        offset that is free for its whole life (one range, no granules, no regions; one
        pass). An allocator that learns lifetimes only when blocks are freed should not
        expect to beat it (the heuristic is common, not proven optimal). --order picks
        what goes first: size (the default), lifetime (longest first), area (size times
        lifetime) or start (allocation order, as an online allocator sees them); --fit
        picks the lowest offset that fits (the default) or the tightest gap.

--regions LIMITS (MiB, comma-separated; default 0.125) splits requests into more regions than
the pool's two: a request goes to the region of the last limit it reaches, the smallest
below the first limit.

--growths prints, for each step that takes new physical memory, the event, the request, the
live bytes then and the largest free blocks of the request's region before it: where the
memory over the live peak came from.

--layout EVENTS (comma-separated event numbers, counted from 0 after the header line)
prints, just before each of those events of the first pass, the large region's blocks of
1 MiB and up in address order: where each starts and its size in MiB, and for an allocated
one the events that allocated and free it: which blocks pin the holes a request misses.

Each trace is replayed twice on the same state (a cold and a warm pass, each ending by
freeing what the trace left live), as gpumem-bench replay does, whose figure is the cold
pass's; the ratio after the warm pass says whether a loop of the workload keeps growing.
"""
import argparse
import bisect

GRANULE = 2 << 20
UNIT = 256
MIB = 1 << 20
SMALL_LIMIT = 128 << 10  # the pool's GPUMEM__POOL_SMALL_LIMIT


def round_up(value, to):
    return (value + to - 1) // to * to


class Region:
    """Blocks [addr, size, free] in address order over one growing address range. With
    keep_last, the free last block is the fit only when no other block fits."""

    def __init__(self, keep_last=False):
        self.blocks = []
        self.starts = []
        self.end = 0
        self.keep_last = keep_last

    def best_fit(self, size):
        best = None
        last = len(self.blocks) - 1
        for i, (addr, block_size, free) in enumerate(self.blocks):
            if self.keep_last and i == last:
                break
            if free and block_size >= size and (best is None or block_size < self.blocks[best][1]):
                best = i
                if block_size == size:
                    break
        if best is None and self.keep_last and last >= 0 and self.blocks[last][2] \
                and self.blocks[last][1] >= size:
            best = last
        return best

    def grow(self, size):
        """Extends the range for `size` bytes; the index of the free last block."""
        if self.blocks and self.blocks[-1][2]:
            step = round_up(size - self.blocks[-1][1], GRANULE)
            self.blocks[-1][1] += step
        else:
            step = round_up(size, GRANULE)
            self.blocks.append([self.end, step, True])
            self.starts.append(self.end)
        self.end += step
        return len(self.blocks) - 1, step

    def carve(self, i, addr, size):
        """Takes [addr, addr + size) out of free block i; returns addr."""
        block = self.blocks[i]
        if addr > block[0]:
            front = [block[0], addr - block[0], True]
            self.blocks.insert(i, front)
            self.starts.insert(i, front[0])
            i += 1
            block[0], block[1] = addr, block[1] - front[1]
            self.starts[i] = addr
        if block[1] == size:
            block[2] = False
            return addr
        self.blocks.insert(i, [addr, size, False])
        self.starts.insert(i, addr)
        block[0] += size
        block[1] -= size
        self.starts[i + 1] = block[0]
        return addr

    def free(self, addr):
        i = bisect.bisect_left(self.starts, addr)
        block = self.blocks[i]
        block[2] = True
        if i + 1 < len(self.blocks) and self.blocks[i + 1][2]:
            block[1] += self.blocks[i + 1][1]
            del self.blocks[i + 1], self.starts[i + 1]
        if i > 0 and self.blocks[i - 1][2]:
            self.blocks[i - 1][1] += block[1]
            del self.blocks[i], self.starts[i]


def mapped_runs(block, mapped, region):
    """The mapped stretches [start, end) of a free block."""
    runs, start, addr, end = [], None, block[0], block[0] + block[1]
    while addr < end:
        granule_end = min((addr // GRANULE + 1) * GRANULE, end)
        if (region, addr // GRANULE) in mapped:
            start = addr if start is None else start
        elif start is not None:
            runs.append((start, addr))
            start = None
        addr = granule_end
    if start is not None:
        runs.append((start, end))
    return runs


class Model:
    def __init__(self, policy, cap=None, limits=(SMALL_LIMIT,), piece=GRANULE):
        self.policy = policy
        self.cap = cap
        self.piece = piece  # for "gap": what is given back, a whole multiple of granules
        self.limits = limits
        self.peak_live_so_far = 0
        # Region 0, the large one, keeps its last block (Region.keep_last), as the pool does.
        self.regions = [Region(keep_last=(r == 0)) for r in range(len(limits) + 1)]
        self.mapped = set()  # (region, granule), for "move"
        self.physical = self.peak_physical = 0
        self.moves = self.new_granules = 0
        self.spare = self.maps = self.unmaps = 0  # for "harvest"
        self.gaps = self.gap_runs = 0  # for "gap"
        self.live_now = 0

    def add_physical(self, granules):
        self.physical += granules
        self.peak_physical = max(self.peak_physical, self.physical)

    def spare_granule(self, needed):
        for r, region in enumerate(self.regions):
            for addr, size, free in region.blocks:
                if not free or size < GRANULE:
                    continue
                for granule in range(round_up(addr, GRANULE) // GRANULE, (addr + size) // GRANULE):
                    if (r, granule) in self.mapped and (r, granule) not in needed:
                        return (r, granule)
        return None

    def make_gaps(self, wanted):
        """Gives back whole free pieces (granules without --piece) inside free blocks other
        than each region's last, lowest first, until `wanted` granules or more are given
        back: they become gaps no block will use. Returns the granules given back."""
        piece = self.piece
        taken = 0
        for region in self.regions:
            i = 0
            while i < len(region.blocks) - 1 and taken < wanted:
                addr, size, free = region.blocks[i]
                lo, hi = round_up(addr, piece), (addr + size) // piece * piece
                if not free or hi <= lo:
                    i += 1
                    continue
                # The whole pieces here, or as many as the granules still wanted round up to.
                count = min((hi - lo) // piece, -(-(wanted - taken) * GRANULE // piece))
                region.carve(i, lo, count * piece)
                i = bisect.bisect_left(region.starts, lo)
                region.blocks[i][2] = None  # a gap: neither free nor ever freed
                self.gaps += count
                self.gap_runs += 1
                taken += count * piece // GRANULE
                i += 1
        return taken

    def over_cap(self):
        """Whether one more new granule would take mapped memory past the cap."""
        return (self.cap is None
                or (self.physical + 1) * GRANULE > self.cap * self.peak_live_so_far)

    def ensure_mapped(self, r, addr, size, growing):
        """Maps the granules of a new block that are not mapped yet."""
        needed = {(r, g) for g in range(addr // GRANULE, (addr + size - 1) // GRANULE + 1)}
        for key in sorted(needed - self.mapped):
            harvesting = growing or (self.policy == "harvest" and self.over_cap())
            if not self.spare and harvesting:
                source = self.spare_granule(needed)
                if source:
                    self.mapped.discard(source)
                    self.spare += 1
                    self.unmaps += 1
            if self.spare:
                self.spare -= 1
            else:
                self.add_physical(1)
            self.maps += 1
            self.mapped.add(key)

    def allocate(self, size):
        # Region 0 takes requests from the first limit up (the pool's large region), region 1
        # those below it (the small one), and regions 2 on those from each further limit up.
        reached = sum(size >= limit for limit in self.limits)
        r = 1 if reached == 0 else (0 if reached == 1 else reached)
        region = self.regions[r]
        if self.policy.startswith("harvest"):
            i = region.best_fit(size)
            growing = i is None
            if growing:
                i, _ = region.grow(size)
            addr = region.carve(i, region.blocks[i][0], size)
            self.ensure_mapped(r, addr, size, growing)
            return r, addr
        if self.policy in ("now", "gap"):
            i = region.best_fit(size)
            if i is None:
                if self.policy == "gap":
                    last = region.blocks[-1] if region.blocks and region.blocks[-1][2] else None
                    step = round_up(size - (last[1] if last else 0), GRANULE) // GRANULE
                    live_peak = max(self.peak_live_so_far, self.live_now + size)
                    if (self.physical + step) * GRANULE > self.cap * live_peak:
                        self.physical -= self.make_gaps(step)
                i, step = region.grow(size)
                self.add_physical(step // GRANULE)
            return r, region.carve(i, region.blocks[i][0], size)
        best = None
        for i, block in enumerate(region.blocks):
            if block[2] and block[1] >= size:
                for start, end in mapped_runs(block, self.mapped, r):
                    if end - start >= size and (best is None or end - start < best[2]):
                        best = (i, start, end - start)
        if best:
            return r, region.carve(best[0], best[1], size)
        i = len(region.blocks) - 1
        if not (region.blocks and region.blocks[-1][2] and region.blocks[-1][1] >= size):
            i, _ = region.grow(size)
        addr = region.carve(i, region.blocks[i][0], size)
        needed = {(r, g) for g in range(addr // GRANULE, (addr + size - 1) // GRANULE + 1)}
        for key in sorted(needed - self.mapped):
            source = self.spare_granule(needed) if self.over_cap() else None
            if source:
                self.mapped.discard(source)
                self.moves += 1
            else:
                self.add_physical(1)
                self.new_granules += 1
            self.mapped.add(key)
        return r, addr


def largest_free(region, count=4):
    """The sizes of the `count` largest free blocks of a region, in MiB, largest first."""
    sizes = sorted((size for _, size, free in region.blocks if free), reverse=True)
    return " ".join(f"{size / MIB:.1f}" for size in sizes[:count]) or "none"


def read_events(path):
    """The trace's events: (is an allocation, pointer, size in bytes), in order."""
    events = []
    with open(path) as trace:
        next(trace)
        for line in trace:
            fields = line.rstrip("\n").split(",")
            events.append((fields[2] == "allocate", fields[3], int(fields[4])))
    return events


def freeing_events(events):
    """For each allocating event, the event that frees its block (None: never freed)."""
    freed_by, live = {}, {}
    for event, (is_allocation, pointer, _) in enumerate(events):
        if is_allocation:
            live[pointer] = event
            freed_by[event] = None
        elif pointer in live:
            freed_by[live.pop(pointer)] = event
    return freed_by


def print_layout(region, event, born, freed_by):
    """The blocks of 1 MiB and up of the large region just before `event` (see --layout)."""
    print(f"before event {event}: large region of {region.end / MIB:.1f} MiB")
    for addr, size, free in region.blocks:
        if size < MIB:
            continue
        if free:
            life = "free"
        else:
            allocated_at = born[addr]
            freed_at = freed_by[allocated_at]
            life = (f"allocated at event {allocated_at}, "
                    + ("never freed" if freed_at is None else f"freed at event {freed_at}"))
        print(f"  {addr / MIB:9.1f} MiB  {size / MIB:7.1f} MiB  {life}")


def replay(path, policy, cap=None, limits=(SMALL_LIMIT,), passes=2, growths=False, layouts=(),
           piece=None):
    events = read_events(path)
    model = Model(policy, cap, limits, piece or GRANULE)
    freed_by = freeing_events(events) if layouts else {}
    born = {}  # large region address -> the event that allocated the block there
    peak_live, report = 0, []
    for number in range(passes):
        live, live_bytes = {}, 0
        moves_before, maps_before, unmaps_before = model.moves, model.maps, model.unmaps
        gaps_before, gap_runs_before = model.gaps, model.gap_runs
        for event, (is_allocation, pointer, size) in enumerate(events):
            if number == 0 and event in layouts:
                print_layout(model.regions[0], event, born, freed_by)
            if is_allocation:
                physical_before = model.physical
                free_before = growths and [largest_free(region) for region in model.regions]
                model.live_now = live_bytes
                live[pointer] = model.allocate(round_up(max(size, 1), UNIT)) + (size,)
                if growths and model.physical > physical_before:
                    r = live[pointer][0]
                    print(f"pass {number + 1} event {event}: {size / MIB:.2f} MiB in region {r}"
                          f" took {(model.physical - physical_before) * GRANULE / MIB:.0f} MiB new;"
                          f" live {live_bytes / MIB:.0f} MiB, largest free {free_before[r]}")
                if layouts and live[pointer][0] == 0:
                    born[live[pointer][1]] = event
                live_bytes += size
                peak_live = max(peak_live, live_bytes)
                model.peak_live_so_far = peak_live
            elif pointer in live:
                r, addr, size = live.pop(pointer)
                model.regions[r].free(addr)
                live_bytes -= size
        for r, addr, size in live.values():  # what the trace left live, as the bench does
            model.regions[r].free(addr)
        ratio = model.peak_physical * GRANULE / peak_live
        moves = f", {model.moves - moves_before} moves" if policy == "move" else ""
        if policy == "gap":
            unit = f"pieces of {piece // MIB} MiB" if piece else "granules"
            moves = (f", {model.gaps - gaps_before} {unit} given back in"
                     f" {model.gap_runs - gap_runs_before} runs")
        if policy.startswith("harvest"):
            moves = (f", {model.maps - maps_before} maps,"
                     f" {model.unmaps - unmaps_before} unmaps")
        report.append(f"after pass {number + 1}: {ratio:.3f}{moves}")
    return report


OFFLINE_ORDERS = {
    "size": lambda block: -block[2],
    "lifetime": lambda block: (-(block[1] - block[0]), -block[2]),
    "area": lambda block: -block[2] * (block[1] - block[0]),
    "start": lambda block: block[0],
}


def offline(path, order="size", fit="lowest"):
    """Peak of a clairvoyant placement of one pass over the live peak (see "offline")."""
    events = read_events(path)
    lifetimes, live, live_bytes, peak_live = [], {}, 0, 0
    for event, (is_allocation, pointer, size) in enumerate(events):
        if is_allocation:
            size = round_up(max(size, 1), UNIT)
            live[pointer] = (event, size)
            live_bytes += size
            peak_live = max(peak_live, live_bytes)
        elif pointer in live:
            start, size = live.pop(pointer)
            lifetimes.append((start, event, size))
            live_bytes -= size
    lifetimes += [(start, len(events), size) for start, size in live.values()]
    # Placed blocks by the 64-event buckets their lives cross: a block need only be checked
    # against those sharing a bucket with it.
    buckets, top = {}, 0
    for start, end, size in sorted(lifetimes, key=OFFLINE_ORDERS[order]):
        taken = set()
        for bucket in range(start >> 6, ((end - 1) >> 6) + 1):
            taken.update(b for b in buckets.get(bucket, ()) if b[0] < end and b[1] > start)
        # Gaps between the blocks in the way, lowest first; the space above them all last.
        offset, gaps = 0, []
        for other_offset, other_end in sorted((b[3], b[3] + b[2]) for b in taken):
            if other_offset - offset >= size:
                gaps.append((other_offset - offset, offset))
                if fit == "lowest":
                    break
            offset = max(offset, other_end)
        if gaps:
            offset = gaps[0][1] if fit == "lowest" else min(gaps)[1]
        placed = (start, end, size, offset)
        for bucket in range(start >> 6, ((end - 1) >> 6) + 1):
            buckets.setdefault(bucket, []).append(placed)
        top = max(top, offset + size)
    return top / peak_live if peak_live else 1.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--policy", default="now",
                        choices=["now", "gap", "move", "harvest", "harvest-at-growth",
                                 "offline"])
    parser.add_argument("--cap", type=float,
                        help="for gap, move and harvest: take granules from holes only past "
                        "this ratio (gap: required)")
    parser.add_argument("--piece", type=float,
                        help="for gap: give back whole pieces of this many MiB (a multiple of "
                        "2), on a grid from each region's start, as the pool does over vmm "
                        "(whose default piece is 32 MiB), instead of granules")
    parser.add_argument("--growths", action="store_true",
                        help="print each step that takes new physical memory")
    parser.add_argument("--layout", default="",
                        help="event numbers, comma-separated: print the large region before each")
    parser.add_argument("--regions", default="0.125",
                        help="region limits in MiB, comma-separated (default 0.125: the pool's two)")
    parser.add_argument("--order", default="size", choices=sorted(OFFLINE_ORDERS),
                        help="for offline: which blocks are placed first")
    parser.add_argument("--fit", default="lowest", choices=["lowest", "tightest"],
                        help="for offline: the lowest offset that fits, or the tightest gap")
    args = parser.parse_args()
    if args.policy != "offline" and (args.order != "size" or args.fit != "lowest"):
        parser.error("--order and --fit apply to --policy offline only")
    if args.policy == "offline" and (args.cap or args.growths or args.layout
                                     or args.regions != "0.125"):
        parser.error("--cap, --growths, --layout and --regions do not apply to --policy offline")
    if args.policy == "gap" and not args.cap:
        parser.error("--policy gap needs --cap (the pool's release_holes_over / 100)")
    piece = int(args.piece * MIB) if args.piece else None
    if piece is not None and (args.policy != "gap" or piece <= 0 or piece % GRANULE):
        parser.error("--piece applies to --policy gap only, in whole granules (2 MiB)")
    layouts = {int(event) for event in args.layout.split(",") if event}
    limits = tuple(int(float(limit) * MIB) for limit in args.regions.split(","))
    for path in args.traces:
        if args.policy == "offline":
            print(f"{path.split('/')[-1]:30} offline peak placed over peak live "
                  f"{offline(path, args.order, args.fit):.3f}", flush=True)
            continue
        report = replay(path, args.policy, args.cap, limits, growths=args.growths,
                        layouts=layouts, piece=piece)
        print(f"{path.split('/')[-1]:30} {args.policy:5} peak reserved over peak live "
              + "; ".join(report), flush=True)


if __name__ == "__main__":
    main()
