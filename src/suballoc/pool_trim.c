/* pool_trim.c: giving memory back to the upstream (gpumem_pool_trim, and at destruction).
 * After waiting for the device and folding every free block into the fresh set, it gives
 * back every whole free chunk, and where the upstream makes memory in pieces (placement
 * capability with a piece size), every run of whole free pieces, also in the middle of a
 * chunk whose ends are in use; it keeps the chunk records and the regions' growth points
 * right. This file and pool_growth.c are the only parts of the pool that speak to the
 * upstream's placement capability. */
#include "suballoc/pool_internal.h"

#include "core/annotate.h"

#include <stdlib.h>

typedef struct block_list {
  gpumem__block **items;
  size_t count, capacity;
  bool failed;
} block_list;

static void collect_block(gpumem__block *block, void *user) {
  block_list *list = user;
  if (list->count == list->capacity) {
    size_t capacity = list->capacity ? list->capacity * 2 : 64;
    gpumem__block **items = realloc(list->items, capacity * sizeof *items);
    if (!items) {
      list->failed = true;
      return;
    }
    list->items = items;
    list->capacity = capacity;
  }
  list->items[list->count++] = block;
}

typedef struct highest_context {
  uint8_t region;
  const gpumem__block *skip;
  gpumem__block *found;
} highest_context;

static void note_highest(gpumem__block *block, void *user) {
  highest_context *h = user;
  if (block->region == h->region && block != h->skip && (!h->found || block->addr > h->found->addr))
    h->found = block;
}

/* The highest block of region `ri` other than `skip`, live or free; NULL when none. Walks
 * every block: only a trim that gives back a region's last chunk, one not linked to the
 * chunk before it (a chunk between them was given back earlier), comes here. A trim has
 * folded every free block into the fresh set first (the caches merged, the other sets
 * dropped, the thread fronts emptied), so the live map and the fresh set's indexes hold
 * them all but the blocks that fronts handed out (and blocks on their way back to a front),
 * which the fronts' maps hold. Those maps change only in calls that take the pool's lock
 * first, which the trim holds, and in a refill filing its batch, which the fronts' flush
 * waited out. */
GPUMEM_COLD static gpumem__block *highest_block(pool_resource *pool, uint8_t ri,
                                                const gpumem__block *skip) {
  highest_context h = {ri, skip, NULL};
  for (size_t i = 0; i < pool->live.capacity; i++)
    if (pool->live.slots[i].addr)
      note_highest(pool->live.slots[i].block, &h);
  for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++) {
    gpumem__free_index_each(&pool->fresh.open[r], note_highest, &h);
    gpumem__free_index_each(&pool->fresh.sealed[r], note_highest, &h);
  }
  pool_fronts *fronts = fronts_of(pool);
  for (int i = 0; fronts && i < GPUMEM__THREAD_SLOTS; i++)
    for (size_t k = 0; k < GPUMEM__POOL_LIVE_SHARDS; k++)
      gpumem__front_map_each(&fronts->fronts[i].shards[k].map, note_highest, &h);
  return h.found;
}

/* Detaches `block` from its address neighbours (it is about to leave the pool). */
static void unlink_block(pool_resource *pool, gpumem__block *block) {
  gpumem__block *prev = block->prev_addr;
  if (prev)
    prev->next_addr = NULL;
  if (block->next_addr)
    block->next_addr->prev_addr = NULL;
  region *r = region_of(pool, block);
  bool was_tail = r->tail == block, was_tail_before_wrap = pool->tail_before_wrap == block;
  if (!was_tail && !was_tail_before_wrap)
    return;
  /* Growth now continues after the region's block before it; when that is not linked (a
   * chunk in between went back earlier), after the highest block left, so that growth lands
   * next to it and links to it rather than going to the region's base, which is taken.
   * Without growth in place, chunks are never linked. */
  gpumem__block *below =
      prev || !pool->grows_in_place ? prev : highest_block(pool, block->region, block);
  if (was_tail)
    r->tail = below;
  if (was_tail_before_wrap) /* a release may leave part of it above the piece going */
    pool->tail_before_wrap = block->next_addr ? block->next_addr : below;
}

/* The first range [*a, *b) of free block `block` that can go back to the upstream, in chunk
 * *at: a whole chunk, or where the upstream makes memory in pieces, whole pieces of one.
 * False when there is none. */
static bool next_releasable(const pool_resource *pool, const gpumem__block *block, size_t *at,
                            uintptr_t *a, uintptr_t *b) {
  uintptr_t start = block->addr, end = block->addr + block->size;
  size_t i = gpumem__sorted_floor(&pool->chunks, start);
  if (i == pool->chunks.count || chunk_at(pool, i)->addr > start)
    i = gpumem__sorted_lower_bound(&pool->chunks, start);
  for (; i < pool->chunks.count && chunk_at(pool, i)->addr < end; i++) {
    const chunk *c = chunk_at(pool, i);
    uintptr_t lo = c->addr > start ? c->addr : start;
    uintptr_t hi = c->addr + c->size < end ? c->addr + c->size : end;
    if (lo >= hi)
      continue;
    if (pool->piece_size) { /* round in to pieces, where the chunk's own ends are not reached */
      size_t p = gpumem__pool_piece_at(pool, c, lo);
      if (lo != c->addr)
        lo = pool->piece_origin + (lo - pool->piece_origin + p - 1) / p * p;
      p = gpumem__pool_piece_at(pool, c, hi);
      if (hi != c->addr + c->size)
        hi = pool->piece_origin + (hi - pool->piece_origin) / p * p;
    } else if (lo != c->addr || hi != c->addr + c->size) {
      continue;
    }
    if (lo < hi) {
      *at = i;
      *a = lo;
      *b = hi;
      return true;
    }
  }
  return false;
}

/* Gives [a, b) of chunk `at` back to the upstream and keeps the chunk's records: the chunk
 * goes, shrinks, or (cut in the middle) becomes two. The caller made room for one more. */
static gpumem_status release_range(pool_resource *pool, size_t at, uintptr_t a, uintptr_t b) {
  gpumem_resource *up = pool->header.upstream;
  chunk *c = chunk_at(pool, at);
  uintptr_t c_end = c->addr + c->size;
  gpumem_status status;
  /* The caller waited for the work that may use the memory (the device before a trim, a
   * stream or the device before a release of holes), and the default stream, unlike a
   * freeing stream, cannot have been destroyed. */
  if (a == c->addr && b == c_end) {
    bool annotated = gpumem__annotate_heap_remove((void *)a);
    status = up->ops->deallocate(up, (void *)a, b - a, GPUMEM_DEFAULT_ALIGNMENT, NULL);
    if (status != GPUMEM_OK && annotated)
      gpumem__annotate_heap_add(up, (void *)a, b - a);
  } else {
    status = up->ops->unmap_pieces(up, a, b - a, &(int){0});
  }
  if (status != GPUMEM_OK)
    return status;
  if (a == c->addr && b == c_end) {
    gpumem__sorted_remove_at(&pool->chunks, at);
  } else if (a == c->addr) {
    *c = (chunk){b, c_end - b, c->large_until};
  } else {
    c->size = a - c->addr;
    if (b != c_end)
      gpumem__sorted_insert_at(&pool->chunks, at + 1, &(chunk){b, c_end - b, c->large_until});
  }
  GPUMEM__ASSERT(&pool->header, gpumem__counters_reserved(&pool->stats) >= b - a,
                 "the reserved counter never goes below zero");
  gpumem__counters_sub_reserved(&pool->stats, b - a);
  return GPUMEM_OK;
}

/* Cuts [a, *b) of chunk `c` down to whole pieces covering at least `wanted` bytes from `a`,
 * where it is longer: `a` starts a piece (a chunk's start or a multiple of its piece size
 * from the origin), so the cut at the next multiple past a + wanted ends one. */
static void cut_to_wanted(const pool_resource *pool, const chunk *c, uintptr_t a, uintptr_t *b,
                          size_t wanted) {
  if (!pool->piece_size || *b - a <= wanted)
    return;
  size_t p = gpumem__pool_piece_at(pool, c, a + wanted);
  uintptr_t cut = pool->piece_origin + (a + wanted - pool->piece_origin + p - 1) / p * p;
  if (cut < *b)
    *b = cut;
}

/* Gives back to the upstream every whole chunk, and where the upstream makes memory in
 * pieces every run of whole pieces, lying inside free block `block` of a free index, until
 * *released has grown by `limit` bytes (or a little more: whole pieces). The rest of the
 * block stays free, in its set and state. The caller waited for the work that may use it. */
static gpumem_status trim_block(pool_resource *pool, gpumem__block *block, size_t limit,
                                size_t *released) {
  size_t done = 0;
  free_set *set = block->owner;
  gpumem__block_state state = block->state;
  GPUMEM__ASSERT(&pool->header, state == GPUMEM__BLOCK_OPEN || state == GPUMEM__BLOCK_SEALED,
                 "a trim gives back only blocks of a free index");
  gpumem__free_index *index = index_of(set, block); /* every piece stays in its region */
  gpumem__free_index_remove(index, block);
  size_t at;
  uintptr_t a, b;
  while (block && done < limit && next_releasable(pool, block, &at, &a, &b)) {
    const chunk *c = chunk_at(pool, at);
    cut_to_wanted(pool, c, a, &b, limit - done);
    /* Only a cut in the middle makes a chunk record more: whole chunks and ends go back
     * without host memory, as before pieces. */
    if (a != c->addr && b != c->addr + c->size &&
        !gpumem__sorted_reserve(&pool->chunks, pool->chunks.count + 1))
      break;
    gpumem__block *piece = block, *after = NULL;
    if (a > block->addr) {
      piece = split(pool, block, a - block->addr);
      if (!piece)
        break;
      gpumem__free_index_insert(index, block);
    }
    if (piece->size > b - a && !(after = split(pool, piece, b - a))) {
      release_block(pool, set, piece, state);
      block = NULL;
      break;
    }
    gpumem_status status = release_range(pool, at, a, b);
    if (status != GPUMEM_OK) {
      /* Undo the cuts: `after` is in no index yet, so it rejoins `piece` directly, and the
       * whole is filed back (merging with the front piece, which is). */
      if (after)
        merge_next(pool, piece, after);
      release_block(pool, set, piece, state);
      return status;
    }
    unlink_block(pool, piece);
    gpumem__block_delete(&pool->slab, piece);
    *released += b - a;
    done += b - a;
    block = after;
  }
  if (block)
    gpumem__free_index_insert(index, block);
  return GPUMEM_OK;
}

/* Freed blocks may still be used by work on their streams, so this waits for the device and
 * folds every free block into the fresh set first, where neighbours from different streams
 * merge into whole chunks; unless the caller `folded` them under the lock it still holds
 * (no block was freed since: the wait covers them all). */
gpumem_status gpumem__pool_trim_all(pool_resource *pool, free_set *keep, bool folded,
                                    size_t *released) {
  gpumem_status status = folded ? GPUMEM_OK : gpumem__pool_fold_into_fresh(pool, keep);
  block_list list = {0};
  for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT && status == GPUMEM_OK; r++)
    gpumem__free_index_each(&pool->fresh.sealed[r], collect_block, &list);
  if (list.failed)
    status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "pool trim: out of host memory");
  for (size_t j = 0; j < list.count && status == GPUMEM_OK; j++)
    status = trim_block(pool, list.items[j], SIZE_MAX, released);
  free(list.items);
  return status;
}

static int by_address(const void *a, const void *b) {
  uintptr_t x = (*(gpumem__block *const *)a)->addr, y = (*(gpumem__block *const *)b)->addr;
  return (x > y) - (x < y);
}

static bool is_a_tail(const pool_resource *pool, const gpumem__block *block) {
  for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++)
    if (pool->regions[r].tail == block)
      return true;
  return false;
}

/* Refills release_holes_over's budget for the time since it was last charged or refilled,
 * by release_holes_time's share of it over the rest, up to its most; whether any is left.
 * At 100% there is no budget. */
static bool holes_budget_left(pool_resource *pool, uint64_t now) {
  unsigned share = pool->options.release_holes_time;
  if (share >= 100)
    return true;
  /* A wait of 100 s refills the whole burst at any share; the cap keeps the product in
   * range however long the pool sat idle. */
  uint64_t waited = now - pool->holes_budget_at_ns, most = (uint64_t)100 * 1000 * 1000 * 1000;
  if (waited > most)
    waited = most;
  int64_t refill = (int64_t)(waited * share / (100 - share));
  int64_t room = GPUMEM__POOL_HOLES_BURST_NS - pool->holes_budget_ns;
  pool->holes_budget_ns += refill < room ? refill : room;
  pool->holes_budget_at_ns = now;
  return pool->holes_budget_ns > 0;
}

/* A dominant request: from half of the pass's live peak up to all of it, or from
 * GPUMEM__POOL_DOMINANT_PERCENT while the program holds no more than
 * GPUMEM__POOL_DOMINANT_LIVE_PERCENT of that peak. The size is compared with the peak
 * first: no larger than bytes the device held, times 100 it cannot overflow. */
static bool is_dominant(const pool_resource *pool, uint64_t size, uint64_t live) {
  uint64_t pass_peak = pool->pass_peak_live;
  if (size > pass_peak)
    return false;
  if (size * 2 >= pass_peak)
    return true;
  return size * 100 >= pass_peak * GPUMEM__POOL_DOMINANT_PERCENT &&
         gpumem__pool_holds_at_most(pool, live, GPUMEM__POOL_DOMINANT_LIVE_PERCENT);
}

/* Whether a growth of `need` bytes is fragmentation alone: the pool holds free at least
 * GPUMEM__POOL_CLIMB_FREE_TIMES times it (`reserved` over `live`). */
static bool growth_is_fragmentation(uint64_t reserved, uint64_t live, size_t need) {
  return reserved > live && reserved - live >= (uint64_t)GPUMEM__POOL_CLIMB_FREE_TIMES * need;
}

/* Whether live bytes of `peak` span GPUMEM__POOL_RECURRING_PIECES of the upstream's pieces:
 * a program large enough for the default's releases of sizes served before and after a
 * descent. */
static bool spans_recurring_pieces(const pool_resource *pool, uint64_t peak) {
  return peak >= GPUMEM__POOL_RECURRING_PIECES * pool->piece_size;
}

/* A growth of `need` bytes that fragmentation alone makes while the program climbs
 * (GPUMEM__POOL_CLIMB_HOLES_PERCENT): growth_is_fragmentation, and the current pass holds
 * nearly the highest live bytes so far (`peak_live`, before this request). */
static bool is_fragmented_climb(const pool_resource *pool, uint64_t reserved, uint64_t live,
                                uint64_t peak_live, size_t need) {
  return growth_is_fragmentation(reserved, live, need) &&
         pool->pass_peak_live * 100 >= peak_live * GPUMEM__POOL_CLIMB_PEAK_PERCENT;
}

/* A growth of `need` bytes that fragmentation alone makes after the program let go of part of
 * its pass (GPUMEM__POOL_DESCENT_LIVE_PERCENT): growth_is_fragmentation, the pool holds no
 * more than the gate's threshold of the pass's live peak, and that peak spans
 * GPUMEM__POOL_RECURRING_PIECES pieces. */
static bool is_fragmented_descent(const pool_resource *pool, uint64_t reserved, uint64_t live,
                                  size_t need) {
  uint64_t pass_peak = pool->pass_peak_live;
  return spans_recurring_pieces(pool, pass_peak) &&
         gpumem__pool_holds_at_most(pool, live, GPUMEM__POOL_DESCENT_LIVE_PERCENT) &&
         reserved * 100 <= pass_peak * pool->options.release_holes_over &&
         growth_is_fragmentation(reserved, live, need);
}

/* Holes are taken lowest first, as the placement model (tools/placement_model.py, policy
 * "gap") does. A region's last block is no hole: growth in place extends it. Only blocks
 * of the sets' free indexes are holes: those the caches and thread fronts keep whole are
 * small, and moving them would change the sets the program's streams reuse at once. */
uint64_t gpumem__pool_release_holes(pool_resource *pool, free_set *set, size_t ri, size_t size) {
  if (!pool->grows_in_place || !pool->piece_size)
    return 0;
  size_t need = gpumem__pool_growth_bytes(pool, ri, set, size);
  /* A growth past the upstream's whole range cannot be served: nothing goes back for it
   * (and the percentages below stay far from overflowing). */
  if (need > pool->header.upstream->caps.range_size)
    return 0;
  uint64_t reserved = gpumem__counters_reserved(&pool->stats);
  /* The live peak counts the request being served: a program whose live bytes climb to a new
   * peak grows by about what it asks, which is no hole's fault. With thread fronts, the
   * pool's own counters miss what the fronts handed out: the fronts' totals count it. */
  uint64_t live = 0, peak_live = 0;
  gpumem__pool_front_counters(pool, GPUMEM_QUERY_LIVE_BYTES, &live);
  gpumem__pool_front_counters(pool, GPUMEM_QUERY_PEAK_LIVE_BYTES, &peak_live);
  /* By default only a dominant or a recurring request releases. A dominant one
   * (is_dominant) is a copy of most of what the program holds in its pass so far (a cache
   * copied into a larger one, GPT-2 generation: 1.320 to 1.069 / 1.205;
   * GPUMEM__POOL_PASS_EMPTY says where a pass begins). Other requests release only where
   * their size was served before, once the program holds enough
   * (GPUMEM__POOL_RECURRING_PIECES): a loop's recurring shape, whose step left holes it did
   * not fill again (GPT-2 training 1.125 to 1.023, the graph network 1.177 to 1.053). At
   * 110% for every request, CuPy ETL, ResNet-50 serving and UNet sampling held more: their
   * releases come for new sizes while the program still climbs to its working set, whose
   * holes it fills later (docs/gpu-runs.md, twenty-second and twenty-third sessions). */
  bool opens = !pool->holes_gated || is_dominant(pool, size, live) ||
               (spans_recurring_pieces(pool, peak_live) &&
                gpumem__size_set_contains(&pool->served_sizes, size));
  unsigned over = pool->options.release_holes_over;
  if (!opens) {
    /* After the program let go of part of its pass, any request of GPUMEM__POOL_RECURRING_LEAST
     * or more, past the live peak itself (is_fragmented_descent). A request the gate opens
     * keeps its own threshold: with this one, BERT fine-tuning at random lengths (seed 1)
     * held 1.026 against 1.024. */
    if (size < GPUMEM__POOL_RECURRING_LEAST || !is_fragmented_descent(pool, reserved, live, need))
      return 0;
    over = 100;
  } else if (pool->holes_gated && is_fragmented_climb(pool, reserved, live, peak_live, need)) {
    over = GPUMEM__POOL_CLIMB_HOLES_PERCENT;
  }
  if (live + size > peak_live)
    peak_live = live + size;
  if ((reserved + need) * 100 <= peak_live * over)
    return 0;
  /* Past the threshold, the growth is charged to the budget whether holes go back or not:
   * a release leaves fewer holes for later requests, so the growths after it are its cost
   * too (without this, cheaper releases let the random large workload's burst give back
   * more and regrow it all uncharged: docs/gpu-runs.md, twenty-first session, run 12). */
  uint64_t started = gpumem__now_ns();
  if (!holes_budget_left(pool, started))
    return started;
  /* A block smaller than a granule holds no whole piece: pieces are whole granules. */
  size_t least = pool->header.upstream->caps.granularity;
  block_list list = {0};
  for (size_t i = 0; i < pool->set_count; i++) {
    free_set *other = pool->sets[i];
    if (pool->multi_stream && other != set && !is_fresh(pool, other))
      continue;
    for (size_t k = 0; k < GPUMEM__POOL_REGION_COUNT; k++) {
      gpumem__free_index_each_from(&other->open[k], least, collect_block, &list);
      gpumem__free_index_each_from(&other->sealed[k], least, collect_block, &list);
    }
  }
  /* A region's last block is no hole: growth in place extends it. */
  size_t holes = 0;
  for (size_t j = 0; j < list.count; j++)
    if (!is_a_tail(pool, list.items[j]))
      list.items[holes++] = list.items[j];
  list.count = holes;
  /* Blocks freed on a stream may still be in use by its work: the driver does not order an
   * unmap after it. With one stream, a wait for the device; with several, the holes are
   * the fresh set's, which no work uses, and the caller's own (with other streams' sealed
   * blocks whose work is done: the idle take has just moved those of the request's
   * region), after a wait for the caller's stream before the first of them goes. Other
   * streams' blocks, and a wait for the whole device, made every stream's work wait for
   * the growth of one: four streams of 1 MiB blocks over pool(vmm) made 55 synchronizations
   * in their first 48 allocations. */
  gpumem_status status = list.failed ? GPUMEM_ERR_OUT_OF_MEMORY : GPUMEM_OK;
  const gpumem__device_ops *dev = pool->header.dev;
  bool waited = !pool->multi_stream;
  if (status == GPUMEM_OK && list.count > 0 && !pool->multi_stream)
    status = dev->device_synchronize(pool->header.device);
  if (status == GPUMEM_OK && list.count > 1)
    qsort(list.items, list.count, sizeof *list.items, by_address);
  size_t released = 0;
  for (size_t j = 0; j < list.count && status == GPUMEM_OK && released < need; j++) {
    if (!waited && list.items[j]->owner == set) {
      status = gpumem__stream_is_per_thread(set->stream)
                   ? dev->device_synchronize(pool->header.device)
                   : dev->stream_synchronize(set->stream);
      waited = true;
      if (status != GPUMEM_OK)
        break;
    }
    status = trim_block(pool, list.items[j], need - released, &released);
  }
  free(list.items);
  if (status != GPUMEM_OK)
    gpumem__absorb_error(); /* the holes stay mapped: nothing is lost */
  return started;
}

/* The budget refills only between charges: over the long run releases and growth past the
 * threshold take release_holes_time percent of the time, not that share over the rest. */
void gpumem__pool_holes_paced(pool_resource *pool, uint64_t started_ns) {
  uint64_t now = gpumem__now_ns();
  pool->holes_budget_ns -= (int64_t)(now - started_ns);
  pool->holes_budget_at_ns = now;
}

gpumem_status gpumem__pool_trim(gpumem_resource *mr, size_t *released) {
  pool_resource *pool = (pool_resource *)mr;
  gpumem__biased_lock_take(&pool->lock);
  gpumem_status status = gpumem__pool_trim_all(pool, NULL, false, released);
  gpumem__biased_lock_release(&pool->lock);
  return status;
}

/* The pool's own name for gpumem_resource_trim, which came later and also trims arenas,
 * binning and fixed_size resources: this takes them too. */
gpumem_status gpumem_pool_trim(gpumem_resource *mr, size_t *released) {
  if (!mr || !gpumem__can_trim(mr))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_pool_trim: %s is not a pool (nor an arena, binning or "
                        "fixed_size resource, which trim too)",
                        mr ? gpumem_resource_name(mr) : "NULL");
  return gpumem_resource_trim(mr, released);
}
