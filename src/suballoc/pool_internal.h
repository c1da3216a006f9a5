/* pool_internal.h: the insides of the pool (pool.c), shared by the files that do its jobs:
 *   pool.c          allocate and deallocate (the fast paths), creation, queries, destruction
 *   pool_cache.c    the cache of freed blocks kept whole: its slow paths (merging it)
 *   pool_streams.c  the free sets of streams: sealing, stealing across streams, folding
 *   pool_growth.c   chunks from the upstream and growth in place, over an upstream that
 *                   places memory at chosen addresses
 *   pool_trim.c     giving free chunks, and free pieces of them, back to the upstream
 *   pool_places.c   the places of a loop's large blocks, where its next step puts them again
 *   pool_front.c    the per-thread fronts of a pool that several threads use
 *   pool_returns.c  the batches in which threads send blocks back to the front that
 *                   handed them out
 * Only growth and trim speak to the upstream's placement (its capabilities and its
 * allocate_at and unmap_pieces operations).
 *
 * Here are the pool's structs and the operations on blocks and on the cache that the fast
 * paths need, static inline: the split into files must cost the hot path nothing, and a
 * call to another translation unit would cost it calls and saved registers that the
 * compiler, seeing the whole function, leaves out. Everything under the pool's lock. */
#ifndef GPUMEM_SUBALLOC_POOL_INTERNAL_H
#define GPUMEM_SUBALLOC_POOL_INTERNAL_H

#include "core/biased_lock.h"
#include "core/counters.h"
#include "core/size_set.h"
#include "core/sorted.h"
#include "core/thread_slots.h"
#include "suballoc/block.h"
#include "suballoc/front_map.h"
#include "suballoc/pool.h"

/* How many frees on a stream between two seals: one event record pays for this many. */
#define GPUMEM__POOL_SEAL_EVERY 16
/* A free that would leave more than this many bytes freed open on its stream since the last
 * seal seals (itself too), so that large blocks become another stream's to take soon:
 * another stream takes the sealed blocks of an idle stream without a wait
 * (gpumem__pool_take_idle), but open ones only after the stream's next seal. Without it a
 * side stream that frees a few large blocks a step kept them for sixteen frees, and a
 * prefetcher's trace held 1.133 times its live peak instead of 1.007 (docs/gpu-runs.md,
 * forty-second session). Only where another stream has asked for more than this
 * (gpumem__pool_another_asks_large): a stream that frees large blocks beside streams that
 * ask for small ones recorded an event at one call in five, for nothing. */
#define GPUMEM__POOL_OPEN_BYTES_MAX ((size_t)2 << 20)

/* The cache holds blocks under its limit in one list per class of the free index (a power of
 * two cut in 16: exact sizes under 8 KiB, within 1/16 above), up to GPUMEM__POOL_CACHE_MAX of
 * them. Where the pool grows in place the limit is the small region's (limits_of()): keeping
 * larger blocks whole as well moved large placements enough to cost 2 to 4 % more memory on real
 * traces, and a cached block of the large region never makes room there. */
#define GPUMEM__POOL_CACHE_LIMIT ((size_t)1 << 20)
#define GPUMEM__POOL_CACHE_CLASSES 144 /* the classes of sizes under the limit */
#define GPUMEM__POOL_CACHE_MAX 1024
/* With several streams, a set's cached blocks are its own stream's alone: other streams
 * reach them once the full cache merges into the set's open blocks, sealed at once. So fewer
 * are kept: what one stream holds from the others stays small (under 4 MiB where the pool
 * grows in place), while a stream that frees what it allocates still finds its blocks there.
 * On the sixteen two-stream traces (simulated device) 16 and 32 kept every peak at or below
 * the references where the pool was, 64 and 128 lost one or two (a prefetcher by one piece
 * of 2 MiB, a GPT-2 pair's warm passes 1.349 against 1.263), and 1,024 ran the UNet trace
 * fastest (33 ns an event against 48 at 32, 56 without a cache) but lost the prefetcher. */
#define GPUMEM__POOL_SHARED_CACHE_MAX 32
/* How many blocks of its class a request looks at for one that is large enough. */
#define GPUMEM__POOL_CACHE_PROBES 4

/* Regions of a pool that grows in place: requests under GPUMEM__POOL_SMALL_LIMIT get their
 * own. */
enum {
  GPUMEM__POOL_REGION_LARGE = 0,
  GPUMEM__POOL_REGION_SMALL = 1,
  GPUMEM__POOL_REGION_COUNT = 2
};
/* Small requests kept apart are those under 128 KiB. It was 1 MiB: blocks of a few hundred
 * KiB that live as long as the large ones then grew a region of their own instead of
 * packing with them. On the fourteen real traces (sim, which gives the GPU's figures)
 * 128 KiB holds less at the peak than 1 MiB on eleven and as much on the other three
 * (efficientnet 1.024 -> 1.008, unet 1.023 -> 1.013, t5 1.062 -> 1.040, llama 1.201 ->
 * 1.183, gpt2_generate 1.384 -> 1.320); 256 and 512 KiB less than 1 MiB too, but more
 * than 128 KiB on efficientnet (1.017). Requests of 128 KiB to 1 MiB are then not cached: on
 * the random mixed workload that costs 12 to 18 cycles an operation on the GPU host, and
 * nothing measurable on the traces (docs/gpu-runs.md, fifteenth session). */
#define GPUMEM__POOL_SMALL_LIMIT ((size_t)128 << 10)
/* Between passes (the program holds at most this percent of its pass's live peak), a small
 * request that its region cannot serve takes a free block of the large region of a granule
 * or more, the region's last excepted, rather than growing the small region by a granule:
 * the large region is mostly free then, and the granule would stay for good. The request
 * takes the cache's limit of the block, so that, freed, it merges back rather than staying
 * cached there; a thread front's refill (a batch its front keeps) grows as before. ResNet
 * serving recorded with seed 2 grew its small region by 2 MiB in a warm pass for a 124 KiB
 * request while 1.31 MiB lay free there in 54 pieces and 483 MiB in the large region,
 * holding 1.194 times its live peak against the driver pool's 1.190; with this 1.190 over
 * 3 to 20 warm passes (1.194 over 50), seed 0's warm passes 1.148 against 1.151 (over 50
 * too), the two-stream server of seed 2 1.193 against 1.239. At any share of the pass (the
 * forty-eighth session) ConvNeXt, Swin, R(2+1)D and wav2vec 2.0 lost their warm passes,
 * small blocks keeping large holes from the next step; at 35% RoBERTa's warm passes hold a
 * little more, at 20% seed 0's serving holds what it held; taking blocks under a granule,
 * R(2+1)D's warm passes held a granule more over 50 passes (1.0305 against 1.0296). Of the
 * 88 recorded traces it acts on these three and R(2+1)D (cold 1.029 against 1.030). */
#define GPUMEM__POOL_BETWEEN_PASSES_PERCENT 25
/* Releases of holes and the growths past release_holes_over's threshold (with a release
 * or after one) take at most release_holes_time percent of the time over the long run: they
 * draw on a budget of time, to which the time between them adds that share of its length
 * over the rest (a third at the default 25%), up to GPUMEM__POOL_HOLES_BURST_NS, and none
 * starts while it is spent. A training loop that frees and fills the same holes every step
 * would otherwise spend most of its allocation time in the driver (docs/gpu-runs.md,
 * sixteenth session); a program whose steps run kernels for milliseconds never waits.
 * This is what the budget holds at most, and at first: a burst of releases (a first pass that
 * leaves holes its later passes never fill, a generation step that outgrows its cache)
 * runs whole, where waiting three times each release's time after it would leave most of
 * the holes in place (docs/gpu-runs.md, twenty-first session). */
#define GPUMEM__POOL_HOLES_BURST_NS ((int64_t)20 * 1000 * 1000)
/* The default release of holes also serves a request of a size the pool has handed out
 * before, from this size up: a loop's recurring shape (gpumem__pool_release_holes). Smaller
 * requests come from the small region and the caches, and a hole they leave is too small to
 * hold a whole piece of the upstream's. */
#define GPUMEM__POOL_RECURRING_LEAST ((size_t)1 << 20)
/* ...but only once the live peak so far spans this many of the upstream's pieces (1 GiB
 * over vmm's default 32 MiB). Below it, a program still climbs to its working set, whose
 * holes it fills later (CuPy ETL released a 29 MiB hole at a live peak of 174 MiB and held
 * 1.031 for 1.006); a piece given back is a large share of its memory for the driver time
 * it costs (ResNet-50 and ViT serving ran 2.4 and 1.7 times slower for 2% less or none);
 * and BERT with random lengths (950 MiB) released more often than the budget allows, so
 * its warm passes held 1.272 against 1.217 on the GPU. On the simulated device 256 MiB to
 * 1 GiB held the same otherwise (but for ResNet-50 serving at 384 MiB), 2 GiB lost the
 * graph network and llama (docs/gpu-runs.md, twenty-third session). */
#define GPUMEM__POOL_RECURRING_PIECES 32
/* A dominant request is measured against the live peak of the program's current pass: the
 * peak since the live bytes, as a request from the free index found them, were last under
 * this fraction of it (1/8). A program that lets go of nearly all it held (a generation
 * finished, a replay's pass ended) climbs anew, and its first copies of a growing cache are
 * most of what it holds again, though not half of the peak of the passes before: GPT-2
 * generation recorded with another seed held 1.408 times its live peak in its warm passes
 * against the driver pool's 1.192, and 1.088 with this on an H200 (docs/gpu-runs.md,
 * thirty-fourth session, run 4). From a half (a pass at every halving) the GRU's and the
 * graph network's steps released too, at two to three times the time, and from a quarter
 * the graph network's (run 2). */
#define GPUMEM__POOL_PASS_EMPTY 8
/* A dominant request is of at least this percentage of its pass's live peak (and no more
 * than it). A cache copied into a larger one is compared with a peak that held the last
 * copy beside the cache it came from, and whatever else the program holds (the model's
 * weights) pulls the ratio under a half: GPT-2 generation recorded with a second seed copies
 * 104 MiB at 47% of its pass's peak and held 1.154 / 1.302 (cold / warm) at a half, against
 * the driver pool's 1.126, and 1.042 / 1.077 from 42 to 45% (and on an H200); recorded with
 * a sixth seed it copies 98 MiB at 44.4% and held 1.397 at 45%, against the driver pool's
 * 1.111, and 1.076 / 1.119 from 40% (docs/gpu-runs.md, forty-ninth session). From 40% no
 * other figure of the 136 recorded traces at hand (data/'s and seven recorded sets) moves
 * over three warm passes, nor over 50 (the simulated device); at 35% ResNet serving's seed
 * 0 holds 1.172 against 1.148, at 30% 1.210, over its reference. CuPy ETL's release at 40%,
 * which lost in the thirty-fifth session, comes with 80% of its peak live:
 * GPUMEM__POOL_DOMINANT_LIVE_PERCENT keeps it out since. */
#define GPUMEM__POOL_DOMINANT_PERCENT 40
/* A request under half of its pass's live peak is dominant only while the program holds no
 * more than this percentage of that peak: a cache copied into a larger one comes after the
 * copy before it was let go (GPT-2 generation seed 1: 133 MiB live of a 221 MiB peak). The
 * graph networks ask for 45 to 50% of the peak with 97% of it live, a step's buffers beside
 * the rest of the step, and gave holes back every pass from 45%: seed 3's held 1.100 over
 * 150 warm passes before, 1.143 to 1.230 after, against the driver pool's 1.130
 * (docs/gpu-runs.md, thirty-fifth session, run 6), and 1.100 at 95 ns an event with this
 * against 1.152 at 109 (thirty-sixth session, run 2); over three warm passes no verdict of
 * the four sets moves (run 1). CuPy ETL's request that lost at 40% comes with 80% of its
 * peak live. */
#define GPUMEM__POOL_DOMINANT_LIVE_PERCENT 75
/* Under the default's gate, a request the gate opens releases past this percentage of the
 * live peak rather than release_holes_over's 110 where fragmentation alone makes the growth:
 * the pool holds free at least GPUMEM__POOL_CLIMB_FREE_TIMES times what it would grow by,
 * while the program climbs (its current pass holds GPUMEM__POOL_CLIMB_PEAK_PERCENT of the
 * highest live bytes it has held, or more). The speech model's first pass grew by 256 MiB
 * for a 505 MiB request with 1,051 MiB free in holes, to 1.091 times its live peak against
 * the driver pool's 1.079, and held 1.059 with this on an H200 (seed 1: 1.079, as the driver
 * pool). Without the climb's condition a loop's later passes release too, whose layout had
 * settled: the seed-3 graph network held 1.337 over 150 warm passes against 1.100
 * (PyTorch's expandable segments 1.130); with it, 1.100. At 105 or 108% with twice or once
 * the growth free, DLRM releases its small growths and holds 1.075 to 1.138 for 1.060 (the
 * simulated device; docs/gpu-runs.md, thirty-seventh and thirty-eighth sessions). */
#define GPUMEM__POOL_CLIMB_HOLES_PERCENT 108u
#define GPUMEM__POOL_CLIMB_FREE_TIMES 4
#define GPUMEM__POOL_CLIMB_PEAK_PERCENT 99
/* Under the default's gate, a growth that fragmentation alone makes after the program let go
 * of part of its pass releases holes for any request of GPUMEM__POOL_RECURRING_LEAST or more,
 * once the growth would take the pool past the live peak itself: the program holds no more
 * than GPUMEM__POOL_DESCENT_LIVE_PERCENT of its pass's live peak, the pool holds free at
 * least GPUMEM__POOL_CLIMB_FREE_TIMES times the growth and, before it, no more than
 * release_holes_over's threshold (110%) of that peak, and the live peak spans
 * GPUMEM__POOL_RECURRING_PIECES pieces. ConvNeXt's first pass grew by 58 MiB for its
 * optimizer's 132 MiB request with 718 MiB free at 68% of its live peak, to 1.046 times that
 * peak against PyTorch's expandable segments' 1.027, and held 1.019 with this (on an H200,
 * recorded with seeds 1 and 2): a release once, in the first pass. Where the pool held more
 * than the threshold (the GRU, 111%, before its highest step) the release came back as
 * growth; for a request of 125 KiB (the small region's growth) RoBERTa with checkpointing
 * held 1.041 against 1.033; from 60% of the peak, or 16 times the growth free, ConvNeXt keeps
 * its 1.046. No other verdict of the 88 recorded traces moves (docs/internals.md). */
#define GPUMEM__POOL_DESCENT_LIVE_PERCENT 75
/* The gate's threshold is the default's, which the climb's lowers: never raises. */
_Static_assert(GPUMEM__POOL_CLIMB_HOLES_PERCENT < GPUMEM_POOL_RELEASE_HOLES_DEFAULT,
               "a growth while climbing releases sooner than the default's threshold");
/* A request from GPUMEM__POOL_WHOLE_LEAST up, in the large region of a pool that grows in
 * place, takes the whole free block it is carved from when what would be left is under
 * 1/2^GPUMEM__POOL_WHOLE_SLACK_SHIFT of the request and GPUMEM__POOL_WHOLE_SLACK_MOST (the
 * region's last block excepted: growth extends it, and its rest is the next growth's start),
 * while the pool keeps the sizes it serves and they recur (its set of them open: the
 * default's gate, and not a random workload, whose sizes never recur and whose blocks held
 * 4.5% more with this on the simulated device).
 * A sliver left there is taken by a block of a few hundred KiB, which pins the hole at the
 * size of the request that left it; a loop whose large sizes vary by a fraction of a percent
 * from step to step (DLRM's embedding gradients, 28.56 to 28.70 MB) then finds every hole a
 * little too small and grows: recorded with a second seed it held 1.075 times its live peak
 * against PyTorch's expandable segments' 1.066, and 1.060 with this on an H200, over three
 * warm passes and over 150; of the other 115 recorded traces, CLIP and ViT training hold a
 * little less, the rest the same or (those the time budget bounds) both ways by round
 * (docs/gpu-runs.md, thirty-seventh session). From 8 MiB or less, T5 generation holds more
 * and no verdict moves; with a slack of 1/32, ResNet-50 training passes its reference (the
 * simulated device; docs/internals.md). */
#define GPUMEM__POOL_WHOLE_LEAST ((size_t)16 << 20)
#define GPUMEM__POOL_WHOLE_SLACK_SHIFT 6
#define GPUMEM__POOL_WHOLE_SLACK_MOST ((size_t)1 << 20)
/* The largest release_holes_over (gpumem_pool_options): 100 times the live peak. */
#define GPUMEM__POOL_HOLES_MOST 10000u
#define GPUMEM__POOL_UNSEALED_MAX ((size_t)32 << 20)

/* The places of a loop's large blocks (pool_places.c), in a pool that grows in place and
 * gives holes back: sizes from GPUMEM__POOL_PLACES_LEAST up, once freed
 * GPUMEM__POOL_PLACES_AFTER times, go back to where one of their last
 * GPUMEM__POOL_PLACES_EACH blocks was freed, when it is free. Best fit left the LSTM's
 * large blocks (512, 352 and 274.5 MiB) in holes that each next step's no longer fitted:
 * its warm passes held 1.157 to 1.223 times their live peak on an H200 (the driver's pool
 * 1.119), and giving holes back cost hundreds of pieces a pass. In place, 1.034 in every
 * pass, with no release after the first; LLaMA training 1.027 / 1.040 (1.041 / 1.0565),
 * GPT-2 training 1.013 / 1.020 (1.023), the graph network's warm passes with no release;
 * the other 28 traces the same (docs/gpu-runs.md, thirty-second session, run 5). On the
 * simulated device, smaller sizes lose: from 128 MiB BERT with random lengths, from 64 MiB
 * eight of the 32 traces (blocks that a program has many of, whose old places are taken by
 * others). Places taken before a size recurs lose GPT-2 at random lengths (1.088 for 1.043:
 * each length's four blocks of a step sent to the places of its last step's, whose
 * neighbours have changed), and a size that recurs only from pass to pass lost RoBERTa's
 * warm passes on the GPU (1.346 for 1.040): hence the gap below. Four places a size hold
 * what eight do; two lose LLaMA. */
#define GPUMEM__POOL_PLACES_LEAST ((size_t)256 << 20)
#define GPUMEM__POOL_PLACES_AFTER 8u
/* ...with no more than this many frees of other large sizes between two of its own. */
#define GPUMEM__POOL_PLACES_GAP 32u
#define GPUMEM__POOL_PLACES_EACH 4u
#define GPUMEM__POOL_PLACES_SIZES 64u /* sizes remembered; the one freed longest ago goes */
/* A place is found by walking down the large region's blocks from its last one: at most
 * this many (the traces' walks take 5 to 42), so that a region of many blocks costs a
 * request of 256 MiB at most a microsecond or so. */
#define GPUMEM__POOL_PLACES_WALK 256u

typedef struct pool_place {
  size_t size;        /* 0: unused */
  uint64_t last_free; /* the places' clock at the size's last free */
  unsigned frees;     /* of blocks of the size, up to GPUMEM__POOL_PLACES_AFTER */
  unsigned count;     /* of addresses, newest first */
  uintptr_t addr[GPUMEM__POOL_PLACES_EACH];
} pool_place;

typedef struct pool_places {
  pool_place sizes[GPUMEM__POOL_PLACES_SIZES];
  uint64_t clock;
} pool_places;

typedef struct free_set {
  gpumem_stream stream;
  /* Freed on this stream since its last seal, or merged with such a block: only this
   * stream may reuse them. */
  gpumem__free_index open[GPUMEM__POOL_REGION_COUNT];
  /* Covered by `event`: another stream may take them once it is done, or, when the pool
   * cannot grow, after waiting on it. */
  gpumem__free_index sealed[GPUMEM__POOL_REGION_COUNT];
  unsigned open_frees;
  size_t open_bytes; /* freed open since the last seal (GPUMEM__POOL_OPEN_BYTES_MAX) */
  /* Sealed bytes that frees merged into open blocks since the last seal: past
   * GPUMEM__POOL_UNSEALED_MAX the stream's next call seals at once (a stream that goes idle
   * would otherwise keep them from other streams until a fold). */
  size_t unsealed_bytes;
  gpumem__event event; /* recorded on this stream at its last seal */
  /* Blocks freed on this stream and kept whole, by size class (linked through next_free),
   * for this stream alone: neither open nor sealed, other streams reach them only once
   * merged into the set's open blocks (pool_cache.c). One list more than the classes,
   * always empty, so that cache_pop looks at the class after the request's without a bound
   * check. */
  gpumem__block *cached[GPUMEM__POOL_CACHE_CLASSES + 1];
  unsigned cached_count;
  unsigned fronts; /* thread fronts holding blocks free on this stream: the set stays */
  /* Return batches of blocks freed on this stream, pending or sent, not yet emptied: the set
   * stays (pool_returns.c). Counted up by a freeing thread whose front is bound to the set,
   * down (release) by whoever empties the batch; read (acquire) before the set is dropped. */
  atomic_uint returns;
} free_set;

/* A region grows from `base` (0: wherever the upstream puts it); growth goes right after its
 * highest block, `tail`, which it extends. */
typedef struct region {
  uintptr_t base;
  gpumem__block *tail;
} region;

/* Memory as the upstream handed it out, or what trims left of it. Where the upstream makes
 * memory in pieces, they are cut below `large_until` at every multiple of the upstream's
 * large piece size from piece_origin, and above it at every multiple of its piece size (0:
 * not a large block's memory). */
typedef struct chunk {
  uintptr_t addr;
  size_t size;
  uintptr_t large_until;
} chunk;

/* ---------------------------------------------------------------------------------------
 * Thread fronts (pool_front.c): once threads meet at the pool's lock, each thread keeps
 * whole blocks of small size classes for one stream, filed by address in its own maps,
 * which any thread reads without a lock (front_map.h).
 * ------------------------------------------------------------------------------------- */

/* Fronts come once threads meet at the pool's lock: in a window of this many shared-lock
 * takes, at least one in GPUMEM__POOL_FRONT_CONTENDED found it held (pool.c, note_thread). */
#define GPUMEM__POOL_FRONT_WINDOW 1024u
#define GPUMEM__POOL_FRONT_CONTENDED 64u
/* Requests under this go through the fronts. */
#define GPUMEM__POOL_FRONT_LIMIT ((size_t)256 << 10)
/* What a thread's front keeps when the pool, about to grow for another thread's request
 * of a size fronts serve, takes back what the fronts of its stream hold: 16 threads on one
 * stream then ran at 150 to 170 million operations a second on the GPU host, with 112 to
 * 116 MiB reserved at their peak, where fronts that gave everything ran at 14 to 15 with
 * 60 to 62 MiB (2 MiB: 48, 94 MiB). Before a failure, fronts give everything. */
#define GPUMEM__POOL_FRONT_RESERVE ((size_t)4 << 20)
/* Sealed free memory of a region that a stream served by thread fronts keeps from other
 * streams' idle takes: its thread's working reserve. Threads on their own streams, each
 * taking the others' fragments in turn, otherwise mixed their memory until none of it
 * fitted and the pool grew on every pass of the threads workload (sim, 16 threads: 228 MiB
 * after 5 passes, 352 after 20; with the reserve, 152 and 154); a stream that holds more,
 * such as a consumer thread's that only frees, gives it all. */
#define GPUMEM__POOL_WORKING_RESERVE ((size_t)8 << 20)
/* The largest block a front carves: the top of the limit's class (pool_front.c checks). */
#define GPUMEM__POOL_FRONT_TOP ((size_t)1279 << GPUMEM__BLOCK_UNIT_SHIFT)
#define GPUMEM__POOL_LIVE_SHARDS 8 /* maps of each front */
/* Fronts' size classes: 4 to a power of two (exact sizes under 8 units), coarser than the
 * cache's 16, so that a thread's blocks spread over few lists that each see enough traffic
 * to be rarely empty or full. A front's block is the top of its class: at most 1/4 above
 * the request (1/8 on average over sizes spread evenly in log). */
#define GPUMEM__POOL_FRONT_SL_SHIFT 2
#define GPUMEM__POOL_FRONT_CLASSES 40 /* the classes of sizes up to the limit's class top */

/* The front class of a block of `size` bytes (a multiple of the unit, under 1280 units). */
static inline size_t gpumem__pool_front_class(size_t size) {
  uint64_t units = size >> GPUMEM__BLOCK_UNIT_SHIFT;
  int shift = 63 - __builtin_clzll(units | (1u << GPUMEM__POOL_FRONT_SL_SHIFT)) -
              GPUMEM__POOL_FRONT_SL_SHIFT;
  return ((size_t)shift << GPUMEM__POOL_FRONT_SL_SHIFT) + (size_t)(units >> shift);
}

/* Who claims the blocks of a front's map when they are freed (pool_front.c, share_claims). */
enum {
  GPUMEM__CLAIMS_OWN = 0,       /* only the front's thread: a load and a store */
  GPUMEM__CLAIMS_ANNOUNCED = 1, /* another thread will: every claim a compare-and-swap */
  GPUMEM__CLAIMS_SHARED = 2,    /* and the front's thread knows it */
};

/* A map of a front: the blocks it holds or handed out whose addresses hash here. */
typedef struct pool_live_shard {
  _Alignas(GPUMEM__SLOT_ALIGN) atomic_int lock; /* its writers' */
  /* GPUMEM__CLAIMS_*: set once by the first other thread to free one of its blocks, on the
   * line that such threads read anyway for the map. */
  atomic_int claims;
  front_map map; /* unmade until the front's first refill; other threads read it unlocked */
} pool_live_shard;

/* A return batch (blocks another front handed out, freed by this front's thread) goes back
 * at this many blocks or bytes: one event and one wait pay for that many frees, and a thread
 * that frees other threads' blocks holds at most this much of them. */
#define GPUMEM__POOL_RETURN_BLOCKS 128
#define GPUMEM__POOL_RETURN_BYTES ((size_t)1 << 20)

/* A batch of blocks that a thread freed on its stream and sends back to the front that
 * handed them out (pool_returns.c), so that a thread that allocates what others free (a
 * producer) gets its blocks back without the pool's lock. */
typedef struct pool_return {
  struct pool_return *next;      /* in an inbox, or among the spares */
  struct pool_return *made_next; /* every batch the fronts made, for the pool's end */
  size_t count, bytes;
  int owner;           /* the front whose maps hold the blocks (their owner's, block->owner) */
  free_set *set;       /* of the stream they were freed on: their owner waits for its event */
  gpumem__event event; /* recorded on set->stream when sent; made at the batch's first send */
  /* State GPUMEM__BLOCK_FRONT; an array, not a list through the blocks, so that their owner
   * files them without a chain of loads from lines other processors wrote. Up to twice the
   * batch: a send the device refused is tried again at the next free. */
  gpumem__block *blocks[2 * GPUMEM__POOL_RETURN_BLOCKS];
} pool_return;

typedef struct pool_front {
  /* A spin lock: its thread, or the pool's lock holder draining it. */
  _Alignas(GPUMEM__SLOT_ALIGN) atomic_int lock;
  free_set *set;        /* the set its blocks are free in; NULL while it holds none */
  gpumem_stream stream; /* set's stream, read without touching the set */
  size_t bytes;         /* of the blocks in its lists */
  /* Allocations it handed out minus frees it took (either may be the larger one). */
  _Atomic int64_t live_bytes, live_count;
  /* What its thread did (gpumem__pool_front_stats): operations through the front, those
   * that took the pool's lock, and looks in other fronts' maps. */
  _Atomic uint64_t ops, pool_locks, shared_locks, refills, give_backs, grows;
  _Atomic uint64_t lock_wait_ns, lock_hold_ns;  /* for the pool's lock, on its slow paths */
  _Atomic uint64_t returns_sent, returns_taken; /* batches, pool_returns.c */
  int hint;        /* the front whose map last held a block its thread freed elsewhere */
  bool maps_ready; /* its maps are made; only its thread writes both */
  uint16_t lengths[GPUMEM__POOL_FRONT_CLASSES]; /* of each list */
  uint8_t
      batches[GPUMEM__POOL_FRONT_CLASSES]; /* blocks a refill of each class takes; 0: none yet */
  gpumem__block *lists[GPUMEM__POOL_FRONT_CLASSES]; /* linked through next_free */
  /* Blocks other fronts handed out that its thread freed, free in `set`, for front
   * pending->owner: sent when full, or when its thread frees another front's block. */
  pool_return *pending;
  /* Batches other threads sent back to this front, its thread's to take: under inbox_lock,
   * a leaf lock that senders take holding their own front's; `inbox` is also read unlocked,
   * a hint that there is something to take. */
  _Alignas(GPUMEM__SLOT_ALIGN) atomic_int inbox_lock;
  pool_return *_Atomic inbox;
  size_t inbox_bytes;
  /* The blocks it holds or handed out, by address; its thread's own lines, which other
   * threads freeing its blocks only read. */
  pool_live_shard shards[GPUMEM__POOL_LIVE_SHARDS];
} pool_front;

typedef struct pool_fronts {
  gpumem__thread_slots slots;
  pool_front fronts[GPUMEM__THREAD_SLOTS];
  /* Frees of front blocks by threads past the slots' count. */
  _Atomic int64_t unslotted_live_bytes, unslotted_live_count;
  _Atomic uint64_t flushes; /* of fronts that held blocks, under the pool's lock */
  _Atomic uint64_t trims;   /* of fronts down to their reserve, under the pool's lock */
  atomic_int spare_lock;    /* over spares and made */
  pool_return *spares, *made;
} pool_fronts;

/* What split_regions and multi_stream decide on the hot paths, kept as limits so that each
 * test is one compare: requests under small_below go to the small region (0 without one);
 * the cache keeps blocks under cache_below, the small region's limit where the pool keeps
 * one (GPUMEM__POOL_CACHE_LIMIT says why), up to cache_max of them (fewer once several
 * streams use the pool: GPUMEM__POOL_SHARED_CACHE_MAX). */
typedef struct pool_limits {
  size_t small_below, cache_below;
  unsigned cache_max;
} pool_limits;

static inline pool_limits limits_of(bool split_regions, bool multi_stream) {
  return (pool_limits){split_regions ? GPUMEM__POOL_SMALL_LIMIT : 0,
                       split_regions ? GPUMEM__POOL_SMALL_LIMIT : GPUMEM__POOL_CACHE_LIMIT,
                       multi_stream ? GPUMEM__POOL_SHARED_CACHE_MAX : GPUMEM__POOL_CACHE_MAX};
}

typedef struct pool_resource {
  gpumem_resource header;
  gpumem__biased_lock lock;
  gpumem_pool_options options;
  bool grows_in_place; /* the upstream maps growth right after the previous chunk */
  size_t fixed_block;  /* nonzero: every block has this size (a fixed_size resource's pool) */
  size_t growth_rounding;
  /* release_holes_over left at its default: holes go back only for a request of half the
   * live peak up to all of it, or of a size served before (gpumem__pool_release_holes). */
  bool holes_gated;
  /* release_holes_over's budget of time (options.release_holes_time, resolved: 100 for no
   * budget), as it stood at holes_budget_at_ns. */
  int64_t holes_budget_ns;
  uint64_t holes_budget_at_ns;
  /* The live peak of the current pass (GPUMEM__POOL_PASS_EMPTY), kept by requests served
   * from the free index, which a dominant request is measured against. */
  uint64_t pass_peak_live;
  /* While a growth that wrapped to the lowest room is under way, the block that was its
   * region's last (or what a release of holes left of it), for find_block to restore if
   * the growth fails; NULL otherwise. */
  gpumem__block *tail_before_wrap;
  free_set fresh;  /* memory no stream has used yet: taking it needs no wait */
  free_set **sets; /* every set, the fresh one first */
  size_t set_count, set_capacity;
  free_set *last_set;
  bool multi_stream; /* a second stream has used the pool: sets are sealed from then on */
  /* The streams that have asked for more than GPUMEM__POOL_OPEN_BYTES_MAX since then (and
   * the first stream, whose requests before were not looked at): none, one (large_asker),
   * or more (large_askers == 2). Kept by the pool, not the sets, which go when emptied. */
  gpumem_stream large_asker;
  unsigned large_askers;
  region regions[GPUMEM__POOL_REGION_COUNT];
  bool split_regions; /* small requests have a region of their own (when growing in place) */
  pool_limits limits; /* limits_of(split_regions, multi_stream), kept by set_layout */
  /* Blocks handed out, and cached ones (marked cached: they keep their slot, pool.c). */
  gpumem__block_map live;
  gpumem__block_slab slab;
  /* release_flat's stand-in for a missing neighbour: zeroed, so never free. */
  gpumem__block sink;
  gpumem__sorted chunks; /* of chunk, by address */
  /* Where the upstream makes memory in pieces (placement capability), trims give back whole
   * pieces of physical memory, which are cut at every multiple of piece_size from
   * piece_origin and at chunks' ends, or of large_piece_size in most of a chunk of
   * large_block_size and up (each chunk's `large_until`); 0: whole chunks only. */
  size_t piece_size, large_block_size, large_piece_size;
  uintptr_t piece_origin;
  gpumem__memory_counters stats;
  /* The sizes of GPUMEM__POOL_RECURRING_LEAST and up this pool has handed out, for the
   * default release of holes; closed from the start where the pool never releases holes by
   * default (not over vmm, or the option given). */
  gpumem__size_set served_sizes;
  /* Made, under the lock, once threads meet at it (pool.c); never freed before the pool. */
  pool_fronts *_Atomic fronts;
  uintptr_t first_thread; /* the token of the first thread that took the shared lock */
  bool second_thread;     /* another thread took it since */
  /* Shared-lock takes since a second thread came, in windows of GPUMEM__POOL_FRONT_WINDOW,
   * and how many of the window's found the lock held (pool.c, note_thread). */
  unsigned window_takes, window_waits;
  pool_places places; /* of the large region's large blocks, where it grows in place */
} pool_resource;

/* The pool's thread fronts, NULL until made (acquire: made whole before published). The
 * fronts' slow paths read them here rather than take them as an argument, so that the fast
 * paths reach those in tail calls of at most six arguments (registers). */
static inline pool_fronts *fronts_of(const pool_resource *pool) {
  return atomic_load_explicit(&pool->fronts, memory_order_acquire);
}

/* Whether the pool keeps the sizes it serves: only the default's gate asks for them, and
 * only where holes go back (growth in place, in pieces). */
static inline bool keeps_served_sizes(const pool_resource *pool) {
  return pool->holes_gated && pool->grows_in_place && pool->piece_size;
}

/* Where the large pieces of the upstream's memory at [addr, addr + size) end, as its
 * capabilities say: at the last multiple of the large piece size inside it, or 0 where it is
 * no large block. */
static inline uintptr_t gpumem__pool_large_until(const pool_resource *pool, uintptr_t addr,
                                                 size_t size) {
  size_t large = pool->large_piece_size;
  if (!large || size < pool->large_block_size)
    return 0;
  return pool->piece_origin + (addr + size - pool->piece_origin) / large * large;
}

/* The size chunk `c`'s pieces are cut at around `addr`. */
/* Whether the program, holding `live` bytes (the fronts' hand-outs counted), holds at most
 * `percent` of its pass's live peak: a pass's early or late part, where the rules for
 * releases and small requests differ from its climb. */
static inline bool gpumem__pool_holds_at_most(const pool_resource *pool, uint64_t live,
                                              unsigned percent) {
  return live * 100 <= pool->pass_peak_live * percent;
}

static inline size_t gpumem__pool_piece_at(const pool_resource *pool, const chunk *c,
                                           uintptr_t addr) {
  return addr < c->large_until ? pool->large_piece_size : pool->piece_size;
}

/* ---------------------------------------------------------------------------------------
 * Blocks
 * ------------------------------------------------------------------------------------- */

static inline region *region_of(pool_resource *pool, const gpumem__block *block) {
  return &pool->regions[block->region];
}

/* The region a request of `size` bytes is served from. */
static inline size_t region_for(const pool_resource *pool, size_t size) {
  return size < pool->limits.small_below ? GPUMEM__POOL_REGION_SMALL : GPUMEM__POOL_REGION_LARGE;
}

/* Cuts `block` at `offset`: it keeps the front, the returned new block the rest, in the
 * same state and set (and in no index). NULL when host memory is exhausted (nothing changed
 * then). */
static inline gpumem__block *split(pool_resource *pool, gpumem__block *block, size_t offset) {
  GPUMEM__ASSERT(&pool->header,
                 offset > 0 && offset < block->size && offset % GPUMEM__BLOCK_UNIT == 0,
                 "a split cuts a block inside it, at a multiple of the unit");
  gpumem__block *rest = gpumem__block_new(&pool->slab);
  if (!rest)
    return NULL;
  rest->addr = block->addr + offset;
  rest->size = block->size - offset;
  rest->region = block->region;
  rest->state = block->state;
  rest->owner = block->owner;
  rest->prev_addr = block;
  rest->next_addr = block->next_addr;
  if (block->next_addr)
    block->next_addr->prev_addr = rest;
  block->next_addr = rest;
  block->size = offset;
  region *r = region_of(pool, block);
  if (r->tail == block)
    r->tail = rest;
  return rest;
}

/* Cuts free block `block` of `index` at `offset`: the front keeps the block's struct and
 * index entry and stays free; returns the rest, filed in the index too. NULL when host
 * memory for the split is exhausted (nothing changed then). */
static inline gpumem__block *split_free(pool_resource *pool, gpumem__free_index *index,
                                        gpumem__block *block, size_t offset) {
  size_t old_size = block->size;
  gpumem__block *rest = split(pool, block, offset);
  if (!rest)
    return NULL;
  gpumem__free_index_resized(index, block, old_size);
  gpumem__free_index_insert(index, rest);
  return rest;
}

/* Joins `next` (the block right after `block`) into `block`. */
static inline void merge_next(pool_resource *pool, gpumem__block *block, gpumem__block *next) {
  GPUMEM__ASSERT(&pool->header, block->next_addr == next && block->addr + block->size == next->addr,
                 "a merged block is the next one in address order and touches it");
  block->size += next->size;
  block->next_addr = next->next_addr;
  if (next->next_addr)
    next->next_addr->prev_addr = block;
  region *r = region_of(pool, next);
  if (r->tail == next)
    r->tail = block;
  gpumem__block_delete(&pool->slab, next);
}

static inline bool is_fresh(const pool_resource *pool, const free_set *set) {
  return set == &pool->fresh;
}

/* The state new memory joins `set` in: it has no pending work, so it is sealed (free for
 * all) in the fresh set, and open in a stream's set like anything that stream will use. */
static inline gpumem__block_state growth_state(const pool_resource *pool, const free_set *set) {
  return is_fresh(pool, set) ? GPUMEM__BLOCK_SEALED : GPUMEM__BLOCK_OPEN;
}

static inline gpumem__free_index *index_of(free_set *set, const gpumem__block *block) {
  return block->state == GPUMEM__BLOCK_SEALED ? &set->sealed[block->region]
                                              : &set->open[block->region];
}

/* Both tests always (`&`): release_flat asks it of neighbours free or not at random, where
 * a branch between the tests would often be mispredicted. */
static inline bool free_in(const gpumem__block *block, const free_set *set,
                           gpumem__block_state state) {
  return (block->state == state) & (block->owner == set);
}

/* Whether `block` is free in `set`, open or sealed: what a block filed open there merges
 * with (below). */
static inline bool free_in_any_state(const gpumem__block *block, const free_set *set) {
  return block->owner == set &&
         (block->state == GPUMEM__BLOCK_OPEN || block->state == GPUMEM__BLOCK_SEALED);
}

/* Makes the sealed neighbours of `block`, about to be filed open in `set`, open too, so that
 * it merges with them (pool_streams.c says why). */
GPUMEM_COLD void gpumem__pool_unseal_neighbours(free_set *set, const gpumem__block *block);

/* release_block where `set`'s index for the block is flat: the same merges with no branch on
 * which neighbours are free. A random free's neighbours are free or not at random, and the
 * branches on them were mispredicted about once a free on the random large workload; without
 * them that workload took 98 to 107 cycles an operation on the GPU host against 102 to 106
 * (quiet rounds; docs/internals.md, "The pool"). The missing neighbours and the choices not
 * taken read and write `pool->sink`, which is never free, or the flat arrays' spare place.
 * NULL, having changed nothing, when the merged block would be too large for the flat
 * arrays. */
static inline gpumem__block *release_flat(pool_resource *pool, free_set *set,
                                          gpumem__free_index *index, gpumem__block *block,
                                          gpumem__block_state state) {
  gpumem__block *sink = &pool->sink;
  gpumem__block *prev = block->prev_addr, *next = block->next_addr;
  gpumem__block *below = gpumem__pick_block(prev != NULL, prev, sink);
  gpumem__block *above = gpumem__pick_block(next != NULL, next, sink);
  bool merge_below = free_in(below, set, state), merge_above = free_in(above, set, state);
  bool both = merge_below & merge_above, neither = !(merge_below | merge_above);
  size_t below_size = below->size & (0 - (size_t)merge_below);
  size_t above_size = above->size & (0 - (size_t)merge_above);
  size_t size = below_size + block->size + above_size;
  if (GPUMEM_UNLIKELY(!gpumem__flat_holds(size)))
    return NULL;
  GPUMEM__ASSERT(&pool->header,
                 (!merge_below | (below->addr + below->size == block->addr)) &
                     (!merge_above | (block->addr + block->size == above->addr)),
                 "merged blocks are neighbours in address order and touch");
  GPUMEM__ASSERT(&pool->header,
                 (block->size != 0) & (block->size % GPUMEM__BLOCK_UNIT == 0) &
                     (index->total_bytes >= above_size),
                 "a free block's size is a positive multiple of the unit, and an index's bytes "
                 "never go below zero");
  /* What the block keeps: the block below's struct when it merges, else the block above's
   * (which keeps its index entry), else its own. */
  gpumem__block *kept =
      gpumem__pick_block(merge_below, prev, gpumem__pick_block(merge_above, next, block));
  size_t kept_old_size = below_size | (above_size & (0 - (size_t)!merge_below));
  uintptr_t addr = gpumem__pick(merge_below, below->addr, block->addr);
  gpumem__block *new_prev = gpumem__pick_block(merge_below, below->prev_addr, prev);
  gpumem__block *new_next = gpumem__pick_block(merge_above, above->next_addr, next);
  region *r = region_of(pool, block);
  gpumem__block *tail = r->tail;
  r->tail = gpumem__pick_block((tail == block && !neither) | (tail == next && both), kept, tail);
  /* When both merge, the block above leaves the index, and its struct and the block's go
   * back to the slab; when one merges, the block's. */
  gpumem__flat_remove_if(index, above, both);
  gpumem__block *spare = pool->slab.spare;
  gpumem__pick_block(neither, sink, block)->next_free = spare;
  spare = gpumem__pick_block(neither, spare, block);
  gpumem__pick_block(both, above, sink)->next_free = spare;
  pool->slab.spare = gpumem__pick_block(both, above, spare);
  kept->addr = addr;
  kept->size = size;
  kept->prev_addr = new_prev;
  kept->next_addr = new_next;
  kept->state = state;
  kept->owner = set;
  gpumem__pick_block(new_prev != NULL, new_prev, sink)->next_addr = kept;
  gpumem__pick_block(new_next != NULL, new_next, sink)->prev_addr = kept;
  gpumem__flat_file_or_resize(index, kept, neither, kept_old_size);
  return kept;
}

/* Files a free block in `set` as `state`, merging it with free neighbours of the same set
 * and state: an open block first unseals its sealed neighbours (above), a sealed block
 * merges only with sealed ones, which keeps it sealed. Address neighbours are always of the
 * same region, as only a region's own tail is linked to its growth. A neighbour that
 * absorbs the block grows in place in the index. Returns the free block that holds the
 * block's memory now. */
static inline __attribute__((always_inline)) gpumem__block *
release_block_in_line(pool_resource *pool, free_set *set, gpumem__block *block,
                      gpumem__block_state state) {
  gpumem__free_index *index =
      state == GPUMEM__BLOCK_SEALED ? &set->sealed[block->region] : &set->open[block->region];
  gpumem__block *prev = block->prev_addr, *next = block->next_addr;
  if (state == GPUMEM__BLOCK_OPEN && set->sealed[block->region].block_count != 0)
    gpumem__pool_unseal_neighbours(set, block);
  gpumem__block *kept;
  if (GPUMEM_LIKELY(index->flat && index->block_count < GPUMEM__FLAT_MAX) &&
      GPUMEM_LIKELY((kept = release_flat(pool, set, index, block, state)) != NULL))
    return kept;
  bool merge_prev = prev && free_in(prev, set, state);
  bool merge_following = next && free_in(next, set, state);
  if (merge_prev) {
    size_t old_size = prev->size;
    merge_next(pool, prev, block);
    if (merge_following) {
      gpumem__free_index_remove(index, next);
      merge_next(pool, prev, next);
    }
    gpumem__free_index_resized(index, prev, old_size);
    return prev;
  }
  if (merge_following) {
    /* `next` takes the block's place: it starts earlier and keeps its index entry. */
    size_t old_size = next->size;
    next->addr = block->addr;
    next->size += block->size;
    next->prev_addr = prev;
    if (prev)
      prev->next_addr = next;
    gpumem__block_delete(&pool->slab, block);
    gpumem__free_index_resized(index, next, old_size);
    return next;
  }
  block->state = state;
  block->owner = set;
  gpumem__free_index_insert(index, block);
  return block;
}

/* release_block, which the compiler may keep out of line; the free's own path takes
 * release_block_in_line, which saves it a call and the registers the call saves (on the GPU
 * host, paired rounds: the random large workload 6 cycles an operation, mixed 4;
 * docs/gpu-runs.md, forty-first session). */
static inline gpumem__block *release_block(pool_resource *pool, free_set *set, gpumem__block *block,
                                           gpumem__block_state state) {
  return release_block_in_line(pool, set, block, state);
}

/* The best fitting free block of `set` in region `r` for `size` bytes, open or sealed. */
static inline gpumem__block *find_in_set(const free_set *set, size_t r, size_t size) {
  gpumem__block *open = gpumem__free_index_find(&set->open[r], size);
  if (set->sealed[r].block_count == 0) /* a single-stream pool's sets never hold sealed blocks */
    return open;
  gpumem__block *sealed = gpumem__free_index_find(&set->sealed[r], size);
  if (!open || (sealed && sealed->size < open->size))
    return sealed;
  return open;
}

/* Cuts `size` bytes from the front of free block `block` of `set` (the rest stays free
 * there) and returns them, taken out of the set's index; the whole block where the rest
 * would be a sliver or no host memory is left to cut it. For paths off the hot ones. */
gpumem__block *gpumem__pool_carve(pool_resource *pool, free_set *set, gpumem__block *block,
                                  size_t size);
/* find_fit's slow path: the best fit of the large region other than its last block `tail`,
 * or `tail` when nothing else fits. */
gpumem__block *gpumem__pool_fit_other_than_tail(free_set *set, gpumem__block *tail, size_t size);

/* Remembers where large block `block`, being freed, lies (pool_places.c), under the size its
 * request asked for (`size`: the block may be larger, GPUMEM__POOL_WHOLE_LEAST says why). */
void gpumem__pool_note_place(pool_resource *pool, const gpumem__block *block, size_t size);
/* The free block of `set` that starts at one of the remembered places of blocks of `size`
 * bytes, cut there out of a larger free block if need be; NULL when the size has none, or
 * none free. */
gpumem__block *gpumem__pool_fit_in_place(pool_resource *pool, free_set *set, size_t size);

/* Whether blocks of `size` bytes in region `ri` have places: large ones of a pool that grows
 * in place and gives holes back. A layout that releases made fit is worth keeping; one that
 * best fit made with every hole kept is not (the graph network held 1.372 instead of 1.177
 * with holes kept). The size is tested first: one compare on the hot paths. */
static inline bool keeps_places(const pool_resource *pool, size_t size, size_t ri) {
  return GPUMEM_UNLIKELY(size >= GPUMEM__POOL_PLACES_LEAST) && pool->split_regions &&
         pool->options.release_holes_over && ri == GPUMEM__POOL_REGION_LARGE;
}

/* Where a request of `size` bytes goes in region `ri` of `set`: its best fit, except that
 * the large region's last block, free, is taken only when no other block fits. Growth in
 * place extends that block by the shortfall alone, so it is the pool's room for a request
 * that fits nowhere else; a block carved from it pins the region's end, and a later larger
 * request then needs a whole step. Over the fourteen traces (tools/placement_model.py, the
 * simulated device), this keeps a training loop of varying shapes from growing on its next
 * pass (gpt2_train_varlen: 1.111 after the first pass, 1.319 after the second; 1.119 after
 * both with the rule) and holds less or the same on all but BERT varlen's first pass. */
static inline gpumem__block *find_fit(pool_resource *pool, free_set *set, size_t ri, size_t size) {
  gpumem__block *block;
  /* A loop's large blocks go back where its last step had them, if that is free. */
  if (keeps_places(pool, size, ri) && (block = gpumem__pool_fit_in_place(pool, set, size)))
    return block;
  block = find_in_set(set, ri, size);
  /* The last block has no next neighbour: a field of the line carve reads anyway, tested
   * before anything the allocation would not touch. */
  if (GPUMEM_UNLIKELY(block && !block->next_addr) && ri == GPUMEM__POOL_REGION_LARGE &&
      block == pool->regions[GPUMEM__POOL_REGION_LARGE].tail && pool->split_regions)
    return gpumem__pool_fit_other_than_tail(set, block, size);
  return block;
}

/* Counts a free of a live block of `bytes` requested bytes. */
static inline void count_freed(pool_resource *pool, size_t bytes) {
  GPUMEM__ASSERT(&pool->header,
                 atomic_load_explicit(&pool->stats.live_count, memory_order_relaxed) >= 1 &&
                     atomic_load_explicit(&pool->stats.live_bytes, memory_order_relaxed) >= bytes,
                 "the live counters never go below zero");
  gpumem__counters_freed(&pool->stats, bytes);
}

/* ---------------------------------------------------------------------------------------
 * The cache of freed blocks (pool_cache.c has its slow paths)
 * ------------------------------------------------------------------------------------- */

/* Coalesces every cached block of `set` into its open index. */
GPUMEM_COLD void gpumem__pool_flush_cache(pool_resource *pool, free_set *set);
/* Flushes every set's cache, and every thread front (pool_front.c). */
void gpumem__pool_flush_caches(pool_resource *pool);
/* Moves one cached block of a class above that of `size` bytes (so larger) into the open
 * index, merged with its free neighbours, and returns the free block holding it now; NULL
 * when the cache has none. */
gpumem__block *gpumem__pool_uncache_larger(pool_resource *pool, free_set *set, size_t size);

/* The cache's list for blocks of `size` bytes (under GPUMEM__POOL_CACHE_LIMIT): the free index's
 * class, flattened. */
static inline size_t cache_class(size_t size) {
  return gpumem__class_index(size >> GPUMEM__BLOCK_UNIT_SHIFT);
}

/* Sets split_regions and multi_stream, and the limits that follow from them. */
static inline void set_layout(pool_resource *pool, bool split_regions, bool multi_stream) {
  pool->split_regions = split_regions;
  pool->multi_stream = multi_stream;
  pool->limits = limits_of(split_regions, multi_stream);
}

/* Whether a freed block of `set` may go to its cache rather than the free index. */
static inline bool cacheable(const pool_resource *pool, const gpumem__block *block) {
  return block->size < pool->limits.cache_below;
}

/* Whether the cache of `set` has room for one more block. */
static inline bool cache_has_room(const pool_resource *pool, const free_set *set) {
  return set->cached_count < pool->limits.cache_max;
}

/* Files a free block in the cache of `set`, which has room. */
static inline void cache_insert(free_set *set, gpumem__block *block) {
  GPUMEM__ASSERT(
      NULL, block->size < GPUMEM__POOL_CACHE_LIMIT && set->cached_count < GPUMEM__POOL_CACHE_MAX,
      "a cached block is under the cache's limit, and the cache has room");
  size_t c = cache_class(block->size);
  block->state = GPUMEM__BLOCK_CACHED;
  block->owner = set;
  block->next_free = set->cached[c];
  set->cached[c] = block;
  set->cached_count++;
}

/* A cached block of at least `size` bytes, taken out of the cache (still marked cached):
 * one of the request's own class (so at most 1/16 larger), else the first of the next class
 * when it is at most 1/8 larger; NULL when there is none. The next class's list sits beside
 * the request's, and its block saves the request a search, a cut and a merge in the free
 * index: on the random mixed workload, 18% of its allocations went to the index for want of
 * a cached block of their own class, 11% with it, and 7 cycles an operation less (sim). */
static inline gpumem__block *cache_pop(const pool_resource *pool, free_set *set, size_t size) {
  /* The pool's own limit, not the lists' (1 MiB): over vmm a request of 128 KiB to 1 MiB
   * then loads no list that is always empty and branches on none (3 to 5 cycles less an
   * operation on the random mixed workload, sim, one thread). */
  if (size >= pool->limits.cache_below)
    return NULL;
  size_t c = cache_class(size);
  gpumem__block **link = &set->cached[c];
  for (int probes = 0; *link && probes < GPUMEM__POOL_CACHE_PROBES;
       probes++, link = &(*link)->next_free) {
    gpumem__block *block = *link;
    if (block->size >= size) {
      *link = block->next_free;
      set->cached_count--;
      return block;
    }
  }
  gpumem__block *next = set->cached[c + 1]; /* the sentinel past the last class: NULL */
  if (!next || next->size - size > size / 8)
    return NULL;
  set->cached[c + 1] = next->next_free;
  set->cached_count--;
  return next;
}

/* ---------------------------------------------------------------------------------------
 * Free sets of streams (pool_streams.c)
 * ------------------------------------------------------------------------------------- */

/* Adds `set` to the pool's sets; false when host memory is exhausted. */
bool gpumem__pool_add_set(pool_resource *pool, free_set *set);
/* The free set of `stream` other than the last call's, found or created (the stream is
 * checked then, once); the slow path of set_for. The second stream's set folds, once, what
 * the first stream freed into the fresh set, after a wait for the device. */
GPUMEM_NOINLINE gpumem_status gpumem__pool_find_or_add_set(pool_resource *pool,
                                                           gpumem_stream stream, free_set **out);
/* Notes that `stream` asked for more than GPUMEM__POOL_OPEN_BYTES_MAX. */
static inline void gpumem__pool_note_large_asker(pool_resource *pool, gpumem_stream stream) {
  if (pool->large_askers == 0) {
    pool->large_asker = stream;
    pool->large_askers = 1;
  } else if (pool->large_asker != stream) {
    pool->large_askers = 2;
  }
}

/* Whether a stream other than `stream` has asked for more than GPUMEM__POOL_OPEN_BYTES_MAX:
 * only then are large frees on `stream` worth sealing at once. */
static inline bool gpumem__pool_another_asks_large(const pool_resource *pool,
                                                   gpumem_stream stream) {
  return pool->large_askers == 2 || (pool->large_askers == 1 && pool->large_asker != stream);
}

/* Records the set's event on its stream, covering everything enqueued there so far, and
 * seals its open blocks. Called during a call on that stream. */
GPUMEM_COLD gpumem_status gpumem__pool_seal(pool_resource *pool, free_set *set);
/* Seals `set` when a seal is due: GPUMEM__POOL_SEAL_EVERY open frees, or
 * GPUMEM__POOL_UNSEALED_MAX unsealed bytes. Called during a call on its stream; a failed
 * seal only leaves the blocks open. */
void gpumem__pool_seal_if_due(pool_resource *pool, free_set *set);
/* Gives `to` the sealed blocks of region `r` of the first other set holding one of `size`
 * bytes there, after making `to`'s stream wait on that set's event (fresh memory needs no
 * wait; fresh memory goes from every region, and at the pool's maximum only the request's
 * piece of it), and seals `to` once several streams use the pool. With `fresh_only`, the
 * fresh set's alone: before the pool grows, a stream waits for no other (find_block says
 * why). *out: the fitting block, or NULL when no set has one. */
gpumem_status gpumem__pool_steal(pool_resource *pool, free_set *to, size_t r, size_t size,
                                 bool fresh_only, gpumem__block **out);
/* Gives `to` the sealed blocks of each other stream's set whose last seal's work is done
 * (asked of its event, no wait: the stream itself may be gone), where they then merge with
 * `to`'s own, as the driver's pool reuses on any stream a block whose free has completed; a
 * set whose work is pending keeps its blocks as they were, and a set left empty goes. Left
 * alone: sets that thread fronts serve holding less than GPUMEM__POOL_WORKING_RESERVE
 * there, and a per-thread default stream's (its seals record on whichever thread's stream
 * that handle named then). How many sets gave their blocks. Only pools of several streams
 * come here. */
size_t gpumem__pool_take_idle(pool_resource *pool, free_set *to, size_t r);
/* For a request of more than GPUMEM__POOL_OPEN_BYTES_MAX that `set` has no block for:
 * notes its stream as asking for large blocks, and where another stream holds more than that
 * freed open (frees it did not seal at once while no other stream asked for large blocks,
 * and it may have gone idle since), waits for the device and folds every set into the fresh
 * one. So an idle stream keeps no large memory from the others; from then on every stream's
 * large frees seal at once, and the wait does not come again (unless it failed). */
void gpumem__pool_ask_large(pool_resource *pool, free_set *set);
/* Waits for the whole device; then no free block has pending work, so every set's blocks
 * join the fresh set (where neighbours from different streams merge) and the other sets
 * are dropped, but for `keep` (the set of a call in progress, emptied; may be NULL) and
 * sets a batch of returns is on its way to. */
gpumem_status gpumem__pool_fold_into_fresh(pool_resource *pool, free_set *keep);

/* The free set of `stream`, created on first use (the stream is checked then, once). */
static inline gpumem_status set_for(pool_resource *pool, gpumem_stream stream, free_set **out) {
  free_set *set = pool->last_set;
  if (GPUMEM_LIKELY(set && set->stream == stream)) {
    *out = set;
    return GPUMEM_OK;
  }
  return gpumem__pool_find_or_add_set(pool, stream, out);
}

/* ---------------------------------------------------------------------------------------
 * Chunks and growth (pool_growth.c)
 * ------------------------------------------------------------------------------------- */

/* The `at`-th chunk in address order. */
static inline chunk *chunk_at(const pool_resource *pool, size_t at) {
  return gpumem__sorted_at(&pool->chunks, at);
}

/* Sets up growth at creation from the upstream's capabilities: the growth rounding (0: the
 * default), and where the upstream places memory at chosen addresses, growth in place, the
 * regions' bases and the pieces trims give back. */
void gpumem__pool_init_growth(pool_resource *pool, const gpumem_resource *upstream,
                              size_t growth_rounding, size_t fixed_block);
/* The default initial size of a pool over `upstream`: half the device's free memory for
 * device-memory upstreams, none for those that grow in place (they need none) or hand out
 * host memory. */
gpumem_status gpumem__pool_default_initial_size(const gpumem_resource *upstream, size_t *size);
/* Takes memory for at least `size` bytes from the upstream for region `ri` on `set`'s
 * stream and files it in `set`; *grown_block: the free block holding it now (merged with
 * the region's free tail when it grew in place). On failure *why says why, for the
 * out-of-memory message, and the thread's message starts with it (then the upstream's). */
gpumem_status gpumem__pool_grow(pool_resource *pool, free_set *set, size_t ri, size_t size,
                                const char **why, gpumem__block **grown_block);
/* Before a growth for `size` bytes in region `ri` of `set`: where growing in place would
 * pass the region's end or run into a chunk of the pool's, the region's growth starts
 * again at the lowest stretch of its part of the range that no chunk covers, one that holds
 * what the pool has reserved if there is one, else the growth. Releases of holes leave their
 * address ranges unused, so a loop that gives back and grows every step climbs through its
 * range; without this, once at the end, its growths went wherever the upstream put them,
 * unlinked, and the pool held more (docs/internals.md). Called before the release, so that
 * the region's old last block, no longer where growth goes, is a hole like any other.
 * Returns the base it moved the growth from, having kept the old last block in
 * pool->tail_before_wrap for the caller to restore if the growth fails; 0 where it moved
 * nothing. */
uintptr_t gpumem__pool_wrap_growth(pool_resource *pool, size_t ri, const free_set *set,
                                   size_t size);
/* Whether the pool's maximum leaves no room to grow for `size` bytes. */
bool gpumem__pool_at_maximum(const pool_resource *pool, size_t size);
/* The bytes gpumem__pool_grow would take from the upstream for the same request: the
 * shortfall past a free last block it extends in place, else a whole growth step. */
size_t gpumem__pool_growth_bytes(const pool_resource *pool, size_t ri, const free_set *set,
                                 size_t size);

/* ---------------------------------------------------------------------------------------
 * Trim (pool_trim.c)
 * ------------------------------------------------------------------------------------- */

/* Gives back every whole free chunk, and every run of whole free pieces where the upstream
 * makes memory in pieces; *released grows by the bytes given back. Waits for the device
 * first and folds every set into the fresh one, dropping them but for `keep` (the set of a
 * call in progress, emptied; may be NULL), unless the caller has `folded` them since it
 * took the lock. Called with the lock held (or, at destruction, with no other user). */
gpumem_status gpumem__pool_trim_all(pool_resource *pool, free_set *keep, bool folded,
                                    size_t *released);
/* Where the pool's option release_holes_over asks it, before region `ri` of `set` grows
 * for `size` bytes: gives back whole free pieces in holes, as many bytes as the growth
 * takes (gpumem_pool_options says when and why), after waiting for the device, or where
 * several streams use the pool, the fresh set's and `set`'s own, after waiting for its
 * stream before the first of its own goes (a per-thread default stream's: the device); at
 * most a share of the time (release_holes_time). Returns when it began, past the threshold
 * (whether it gave anything back or not: the growth is charged either way), or 0 under it.
 * A failure only leaves the holes mapped: the pool grows as it would have. */
uint64_t gpumem__pool_release_holes(pool_resource *pool, free_set *set, size_t ri, size_t size);
/* After the growth that followed gpumem__pool_release_holes (`started_ns`: what it
 * returned, when not 0): charges the time since to the budget. */
void gpumem__pool_holes_paced(pool_resource *pool, uint64_t started_ns);
/* The pool's trim operation (gpumem_resource_trim): trim_all under the lock. */
gpumem_status gpumem__pool_trim(gpumem_resource *mr, size_t *released);

/* ---------------------------------------------------------------------------------------
 * Thread fronts (pool_front.c)
 * ------------------------------------------------------------------------------------- */

/* Makes the fronts of a pool that threads use at once; called with the lock held. Host
 * memory exhausted only leaves the pool without fronts. */
void gpumem__pool_enable_fronts(pool_resource *pool);
/* Allocation of `bytes` (1 to GPUMEM__POOL_FRONT_LIMIT, default alignment) through the
 * calling thread's front; what it cannot serve goes the locked way
 * (gpumem__pool_allocate_locked), which reports failures. */
gpumem_status gpumem__pool_front_allocate(pool_resource *pool, pool_fronts *fronts, size_t bytes,
                                          gpumem_stream stream, void **ptr);
/* A free of `bytes` (1 to GPUMEM__POOL_FRONT_LIMIT) into the calling thread's front when some
 * front handed the block out; else the locked way (gpumem__pool_deallocate_locked), which
 * looks in the live map. *owned as for gpumem__pool_deallocate_if_owned. */
gpumem_status gpumem__pool_front_deallocate(pool_resource *pool, pool_fronts *fronts, void *ptr,
                                            size_t bytes, gpumem_stream stream, bool *owned);
/* The pool's locked ways, for what the fronts do not serve (pool.c). */
gpumem_status gpumem__pool_allocate_locked(pool_resource *pool, size_t bytes, gpumem_stream stream,
                                           void **ptr);
gpumem_status gpumem__pool_deallocate_locked(pool_resource *pool, void *ptr, size_t bytes,
                                             gpumem_stream stream, bool *owned);
/* The size a front's live block at `ptr` was requested with; 0 when no front handed it out.
 * Looks in every front's maps: for the message of a free with a size no front serves. */
size_t gpumem__pool_front_requested(pool_fronts *fronts, void *ptr);
/* Gives the blocks of every front back to their sets, open. Called with the pool's lock
 * held and no front's. */
void gpumem__pool_flush_fronts(pool_resource *pool);
/* Before the pool grows for `size` bytes on `set`: blocks of the front bound to `set` that
 * holds the most back to `set`, open, and `set` sealed when a seal is due (a call on its
 * stream is in progress); false when no front holds more than it keeps. For a size that
 * fronts serve, the calling thread's front keeps all it holds (up to its bound) and the
 * others GPUMEM__POOL_FRONT_RESERVE; for larger sizes every front gives all. The pool
 * calls it until what it needs fits, so that a miss takes from one front, not from all.
 * Called with the pool's lock held and no front's. */
bool gpumem__pool_drain_fullest_front(pool_resource *pool, free_set *set, size_t size);
/* Before the pool grows for `size` bytes on `set`: the smallest block of the fronts bound
 * to `set` of a class above that of `size` (so larger) back in `set`, open; whether there
 * was one. A refill that misses thus takes one block from a front rather than the whole of
 * every front. Called with the pool's lock held and no front's. */
bool gpumem__pool_front_give_larger(pool_resource *pool, free_set *set, size_t size);
/* The counter queries, fronts included. */
gpumem_status gpumem__pool_front_counters(const pool_resource *pool, gpumem_query what,
                                          uint64_t *out);
/* Takes (take) or releases a front's or a front live map's spin lock (the validator). */
void gpumem__pool_spin(atomic_int *lock, bool take);
/* Frees the fronts' structures (at destruction, after a flush). */
void gpumem__pool_free_fronts(pool_resource *pool);
/* ---------------------------------------------------------------------------------------
 * Return batches (pool_returns.c)
 * ------------------------------------------------------------------------------------- */

/* An empty batch of blocks free in `set`, counted in set->returns; NULL when host memory is
 * exhausted. The caller's front is bound to `set` (so the set stays). */
pool_return *gpumem__pool_return_new(pool_fronts *fronts, free_set *set, int owner);
/* Sends `batch` to front `to`: an event recorded on the batch's stream after its frees, the
 * batch into `to`'s inbox. False (the error cleared) when the device refused the event: the
 * caller keeps the batch. */
bool gpumem__pool_return_send(pool_resource *pool, pool_return *batch, pool_front *to);
/* Takes every batch out of front `f`'s inbox, oldest last; NULL when it has none. */
pool_return *gpumem__pool_inbox_take(pool_front *f);
/* Puts batches taken by gpumem__pool_inbox_take back into `f`'s inbox. */
void gpumem__pool_inbox_put_back(pool_front *f, pool_return *list);
/* Makes `stream` wait for `batch`'s frees when they were on another stream; false (the
 * error cleared) when the device refused. */
bool gpumem__pool_return_wait(pool_resource *pool, const pool_return *batch, gpumem_stream stream);
/* Files `batch`'s blocks open in the set they were freed in, under the pool's lock (or at
 * its end, with no other user); the caller has taken them out of their owner's maps. */
void gpumem__pool_return_release(pool_resource *pool, pool_return *batch);
/* An emptied batch back among the spares, uncounted from its set. */
void gpumem__pool_return_recycle(pool_fronts *fronts, pool_return *batch);
/* Destroys every batch the fronts made (at the pool's end, all of them spare). */
void gpumem__pool_returns_free(pool_resource *pool, pool_fronts *fronts);

/* A block for `size` bytes of `set` at the default alignment, taken like an allocation's
 * (without growth when !may_grow); *block NULL when none. Used by the fronts' refills. */
gpumem_status gpumem__pool_take_block(pool_resource *pool, free_set *set, size_t size,
                                      bool may_grow, gpumem__block **block, const char **why);
/* For a front's refill: `count` blocks of `size` bytes (under the cache's limit), allocated,
 * in address order, cut from one free block of `set` that holds them all: one search and
 * one carve, then cuts that touch no index, so that the pool's lock is held for little
 * while other threads wait for it. Returns how many (0 when no free block holds them all
 * or the cache holds one of the class, which goes first); fewer only when host memory ran
 * out for the cuts. */
size_t gpumem__pool_take_run(pool_resource *pool, free_set *set, size_t size, size_t count,
                             gpumem__block **out);

#endif /* GPUMEM_SUBALLOC_POOL_INTERNAL_H */
