/* pool.c: the coalescing pool, gpumem's general-purpose suballocator: its fast paths
 * (allocate and deallocate), creation, queries and destruction. Its other jobs have files
 * of their own (pool_internal.h lists them): the cache of freed blocks, the free sets of
 * streams, growth, and trim.
 *
 * Memory comes from the upstream in chunks and is cut into blocks described on the host
 * (block.h). Free blocks live in one free set per stream: the stream that freed them, which
 * may reuse them at once (stream order). Once a second stream uses the pool, sets are
 * sealed in batches: every GPUMEM__POOL_SEAL_EVERY-th free on a stream records one event on
 * it, during that free (when the stream is alive by contract), and the blocks freed so far
 * become "sealed". Another stream takes sealed blocks once that event is done, and when the
 * pool cannot grow, after waiting on it; it never touches the freeing stream's handle, which
 * the program may have destroyed since. So cross-stream reuse costs one event record per
 * batch of frees and one query (or, short of memory, one wait) per batch of blocks taken,
 * and a single-stream program never records an event. When the second stream first comes,
 * the pool waits for the device once (where the first stream has freed anything), so that
 * the first stream's frees so far, never sealed, are free for both. Free blocks merge only
 * with free neighbours of the same set; a block freed open unseals the sealed ones it
 * merges with (until the set's next seal), so that a stream's own free memory is never cut
 * into open and sealed pieces that no larger request fits.
 *
 * When nothing fits anywhere and the upstream cannot grow, the pool waits for the whole
 * device, after which every free block is safe for every stream, and tries again.
 *
 * Memory fresh from the upstream has no pending work: it sits in a set of its own that any
 * stream takes from without waiting, whole, or where the pool is at its maximum and several
 * streams use it, a request's piece at a time (pool_streams.c, take_piece). A stream that
 * took another set's blocks seals them at once, so that they are the other streams' again
 * once its work is done.
 *
 * Each stream's set keeps up to GPUMEM__POOL_CACHE_MAX recently freed blocks
 * (GPUMEM__POOL_SHARED_CACHE_MAX once several streams use the pool) under its cache limit
 * (1 MiB; 128 KiB where it grows in place, the small region's) whole, in lists
 * by size class, before it coalesces them: programs free and ask again for the same sizes
 * all the time, and a block that goes straight back to the next request of its class costs
 * no splitting, merging or indexing. Under 8 KiB a class is one size; above, a block handed
 * out from the cache may be up to 1/16 larger than the rounded request (cutting it down
 * costs as much as the free index does), and where the request's class has none, the first
 * block of the next class serves it when at most 1/8 larger. The cache is coalesced into the
 * free index when full, before the pool grows, waits for the device or is trimmed, before a
 * free-memory query, and once when a second stream comes. From then on a cached block is for
 * its own stream alone, which may reuse it at once, and seals leave the cache as it is;
 * other streams reach its blocks once they are coalesced into the set's open blocks and
 * sealed with them. Turned off for several streams, as it was, every small free went through
 * the free index: on the H200 two GPT-2 generations served at once took 84 to 94 ns an event
 * against 34 to 42 now; merged at each seal, the cache saved nothing (docs/gpu-runs.md,
 * forty-fifth and forty-sixth sessions).
 *
 * Over an upstream that places memory at chosen addresses (vmm, or an adaptor forwarding
 * that capability) the pool keeps two regions of the upstream's address range, each growing
 * in place: one for requests under 128 KiB, one for the rest. Small blocks then never pin
 * holes between large ones, which is most of what fragmentation costs on real training
 * traces.
 *
 * One biased lock (core/biased_lock.h) guards the pool; everything under it is constant time
 * except steals, growth, seals and trims, which call the device anyway. Once threads meet at
 * the lock (a second thread revoked its bias, and they find it held), small requests go
 * through per-thread fronts instead (pool_front.c says why and how), which give their blocks
 * back before the pool fails and keep a bounded reserve while it grows. The fast paths end
 * in tail calls, so that the common case saves no registers; the functions they call that
 * release the lock say so (_then_unlock). */
#include "suballoc/pool_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------------------------------------
 * Allocate and free
 * ------------------------------------------------------------------------------------- */

/* Cuts a new block for [block->addr, block->addr + size) off the front of `block`, which
 * keeps the rest and its place in address order. NULL when host memory is exhausted (nothing
 * changed then). */
static gpumem__block *split_front(pool_resource *pool, gpumem__block *block, size_t size) {
  gpumem__block *front = gpumem__block_new(&pool->slab);
  if (!front)
    return NULL;
  front->addr = block->addr;
  front->size = size;
  front->region = block->region;
  front->prev_addr = block->prev_addr;
  front->next_addr = block;
  if (block->prev_addr)
    block->prev_addr->next_addr = front;
  block->prev_addr = front;
  block->addr += size;
  block->size -= size;
  return front;
}

/* Splits off the front of free block `block` of `index` up to the next multiple of
 * `alignment`: the skipped piece keeps the block's struct and index entry and stays free;
 * returns the rest, filed in the index too. NULL when host memory for the split is exhausted
 * (nothing changed then). Out of line: only over-aligned requests skip anything, as blocks
 * start at multiples of the default alignment. */
GPUMEM_COLD static gpumem__block *skip_to_alignment(pool_resource *pool, gpumem__free_index *index,
                                                    gpumem__block *block, size_t alignment) {
  return split_free(pool, index, block, gpumem__align_up(block->addr, alignment) - block->addr);
}

/* Whether a request of `size` bytes takes the whole of free block `block` rather than leave
 * a sliver: a large one in the large region of a pool that grows in place, from a block other
 * than the region's last, while the pool's sizes recur (GPUMEM__POOL_WHOLE_LEAST says why).
 * Where they do not (the served sizes' set closed: a random workload), the least size is
 * made the largest without a branch, so that the one test on the size has the same answer
 * every time: a test on the size alone, half of the random large workload's requests on each
 * side of it, missed its guess often enough to cost that workload 5 to 8% of its time. */
static inline bool takes_whole(const pool_resource *pool, const gpumem__block *block, size_t size) {
  size_t least = GPUMEM__POOL_WHOLE_LEAST | ((size_t)0 - pool->served_sizes.closed);
  if (GPUMEM_LIKELY(size < least))
    return false;
  size_t slack = size >> GPUMEM__POOL_WHOLE_SLACK_SHIFT;
  if (slack > GPUMEM__POOL_WHOLE_SLACK_MOST)
    slack = GPUMEM__POOL_WHOLE_SLACK_MOST;
  return block->size - size < slack && block->region == GPUMEM__POOL_REGION_LARGE &&
         pool->split_regions && block != pool->regions[GPUMEM__POOL_REGION_LARGE].tail;
}

/* Cuts an allocation of `size` bytes at `alignment` out of the front of free block `block`
 * of `set` (the lowest addresses first, which keeps a pool that grows in place low). The
 * free rest stays where it was, usually without moving in the index; the piece skipped for
 * an over-aligned allocation stays free too. NULL when host memory for a split is exhausted
 * (nothing changed then). In line: every allocation from the free index comes here. */
static inline gpumem__block *carve(pool_resource *pool, free_set *set, gpumem__block *block,
                                   size_t size, size_t alignment) {
  gpumem__free_index *index = index_of(set, block);
  GPUMEM__ASSERT(&pool->header,
                 block->owner == set && block->size >= size &&
                     (block->state == GPUMEM__BLOCK_OPEN || block->state == GPUMEM__BLOCK_SEALED),
                 "a block carved is free in the request's set and large enough");
  if (GPUMEM_UNLIKELY(block->addr & (alignment - 1)) &&
      !(block = skip_to_alignment(pool, index, block, alignment)))
    return NULL;
  gpumem__block *taken;
  if (block->size - size < GPUMEM__BLOCK_UNIT || takes_whole(pool, block, size) ||
      !(taken = split_front(pool, block, size))) {
    /* An exact fit, a sliver not worth leaving, or no host memory to split: the caller gets
     * the whole block. */
    gpumem__free_index_remove(index, block);
    taken = block;
  } else {
    gpumem__free_index_resized(index, block, block->size + size);
  }
  taken->state = GPUMEM__BLOCK_ALLOCATED;
  return taken;
}

gpumem__block *gpumem__pool_carve(pool_resource *pool, free_set *set, gpumem__block *block,
                                  size_t size) {
  return carve(pool, set, block, size, GPUMEM_DEFAULT_ALIGNMENT);
}

gpumem__block *gpumem__pool_fit_other_than_tail(free_set *set, gpumem__block *tail, size_t size) {
  gpumem__free_index *index = index_of(set, tail);
  gpumem__free_index_remove(index, tail);
  gpumem__block *other = find_in_set(set, GPUMEM__POOL_REGION_LARGE, size);
  gpumem__free_index_insert(index, tail);
  return other ? other : tail;
}

/* A fitting block of `set` in any region, or from another set's sealed blocks in any. */
static gpumem_status find_anywhere(pool_resource *pool, free_set *set, size_t search,
                                   gpumem__block **out) {
  gpumem_status status = GPUMEM_OK;
  *out = NULL;
  for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT && !*out; r++)
    *out = find_in_set(set, r, search);
  for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT && !*out && status == GPUMEM_OK; r++)
    status = gpumem__pool_steal(pool, set, r, search, false, out);
  return status;
}

/* For a small request that the small region cannot serve, a free block of `set`'s large region
 * other than its last, of a granule at least (the growth it saves), where the program is
 * between passes (GPUMEM__POOL_BETWEEN_PASSES_PERCENT); NULL otherwise. */
static gpumem__block *small_in_large_hole(pool_resource *pool, free_set *set, size_t search) {
  uint64_t live = 0;
  gpumem__pool_front_counters(pool, GPUMEM_QUERY_LIVE_BYTES, &live);
  if (!gpumem__pool_holds_at_most(pool, live, GPUMEM__POOL_BETWEEN_PASSES_PERCENT))
    return NULL;
  size_t granule = pool->header.upstream->caps.granularity;
  gpumem__block *hole =
      find_fit(pool, set, GPUMEM__POOL_REGION_LARGE, search > granule ? search : granule);
  return hole != pool->regions[GPUMEM__POOL_REGION_LARGE].tail ? hole : NULL;
}

/* Grows region `ri` of `set` for a request of `search` bytes: in place past its last block
 * (or, where the upstream's range is spent there, from the lowest room), after giving holes
 * back where release_holes_over asks it. */
static gpumem_status grow(pool_resource *pool, free_set *set, size_t ri, size_t search,
                          const char **why, gpumem__block **out) {
  /* The memory a release of holes unmaps is held by the upstream for the growth after it,
   * which maps it again where pieces' sizes match: no freeing and making it anew. */
  uint64_t releasing = 0;
  uintptr_t base_before_wrap = gpumem__pool_wrap_growth(pool, ri, set, search);
  bool holding = pool->options.release_holes_over;
  if (holding) {
    gpumem__hold_pieces(pool->header.upstream, true);
    releasing = gpumem__pool_release_holes(pool, set, ri, search);
  }
  gpumem_status status = gpumem__pool_grow(pool, set, ri, search, why, out);
  /* A growth that wraps to the lowest room moves the region's growth point only once it
   * succeeds: a failed one leaves later growths where they were (a release of holes in
   * between may cut the old last block: pool->tail_before_wrap follows it). */
  if (base_before_wrap) {
    if (status != GPUMEM_OK) {
      pool->regions[ri].base = base_before_wrap;
      pool->regions[ri].tail = pool->tail_before_wrap;
    }
    pool->tail_before_wrap = NULL;
  }
  if (holding)
    gpumem__hold_pieces(pool->header.upstream, false);
  if (releasing)
    gpumem__pool_holes_paced(pool, releasing);
  return status;
}

/* Whether `size` bytes of device memory are more than the pool's device has at all (asked
 * of the driver: only on the way to a failure). */
static bool larger_than_device(const pool_resource *pool, size_t size) {
  const gpumem_resource *up = pool->header.upstream;
  size_t free_bytes = 0, total_bytes = 0;
  if (up->caps.memory != GPUMEM_MEMORY_DEVICE) /* managed memory may exceed the device's */
    return false;
  if (up->dev->mem_info(up->device, &free_bytes, &total_bytes) != GPUMEM_OK) {
    gpumem__absorb_error(); /* no answer: the trim is tried, as it is for other memory */
    return false;
  }
  return size > total_bytes;
}

/* The last step before a request fails for want of memory: every whole free chunk, and over
 * an upstream that makes memory in pieces every run of whole free pieces, goes back to the
 * upstream (after a wait for the device: its own, or where the caller `folded` every set
 * just before, that fold's), so that a growth may get from the device what the pool's holes
 * held. Without it pool(vmm) on a device of 1 GiB failed a request of 192 MiB while it held
 * 960 MiB free in ten holes of 96 MiB; CuPy's pool and PyTorch's caching allocator likewise
 * free their cached blocks and try again. Only where the pool holds free memory (a pool full
 * of live blocks fails as before, without a wait) and the request is not larger than the
 * pool's maximum, than its upstream can ever serve or than its device's whole memory;
 * *trimmed: whether anything went back. A failed trim keeps what it had not given back yet,
 * nothing lost. */
static gpumem_status trim_before_failing(pool_resource *pool, free_set *set, size_t size,
                                         bool folded, bool *trimmed) {
  uint64_t live = 0;
  gpumem__pool_front_counters(pool, GPUMEM_QUERY_LIVE_BYTES, &live);
  size_t max = pool->options.maximum_size;
  *trimmed = false;
  if (gpumem__counters_reserved(&pool->stats) <= live || (max && size > max) ||
      gpumem__last_oom().cause == GPUMEM__OOM_TOO_LARGE || larger_than_device(pool, size))
    return GPUMEM_OK;
  size_t released = 0;
  gpumem_status status = gpumem__pool_trim_all(pool, set, folded, &released);
  *trimmed = released > 0;
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "pool: giving free memory back for %zu bytes", size);
  return GPUMEM_OK;
}

/* Finds or makes a free block for the request: in the request's region, the stream's own
 * blocks, then the sealed blocks of other streams whose work on them is done, then fresh
 * memory, then (a small request between passes, but for a thread front's refill, whose batch
 * its front would keep) the large region's holes, then growth; when growth fails, any region
 * and any set's sealed blocks after a wait for their stream, and last a wait for the whole
 * device. Before growth no stream waits for another: four streams that each allocated a
 * block of 4 MiB or more, used it and freed it, round after round, each took the last one's
 * block after waiting for its work, and their work ran one stream after another (the
 * simulated device counted 23 waits in 24 allocations; tests/pool.c,
 * test_streams_do_not_wait_once_warm). */
static gpumem_status find_block(pool_resource *pool, free_set *set, size_t search, bool for_front,
                                gpumem__block **out, const char **why) {
  size_t ri = region_for(pool, search);
  gpumem__block *block = find_fit(pool, set, ri, search);
  gpumem_status status = GPUMEM_OK;
  if (!block && pool->multi_stream && gpumem__pool_take_idle(pool, set, ri) > 0)
    block = find_fit(pool, set, ri, search);
  if (!block && pool->multi_stream && search > GPUMEM__POOL_OPEN_BYTES_MAX)
    gpumem__pool_ask_large(pool, set); /* fresh memory, below, may hold what it folds */
  if (!block)
    status = gpumem__pool_steal(pool, set, ri, search, true, &block); /* fresh memory */
  /* Cached blocks are under the cache's limit: they may make room in the small region (or a
   * pool without regions), never in the large one. One of a larger class is enough; only
   * when there is none does the whole cache merge, which may join smaller ones into room. */
  if (status == GPUMEM_OK && !block && set->cached_count > 0 &&
      (ri == GPUMEM__POOL_REGION_SMALL || !pool->split_regions) &&
      !(block = gpumem__pool_uncache_larger(pool, set, search))) {
    gpumem__pool_flush_cache(pool, set);
    block = find_fit(pool, set, ri, search);
  }
  /* Threads' fronts on this stream may hold what fits: it goes back before the pool grows
   * (other streams' fronts hold blocks this stream could only take after a wait for the
   * device: the fold below, before a failure, takes them back); one larger block first, and
   * only when there is none, from the fullest front on, until it fits. For a size that
   * fronts serve, the caller is a front's refill: its own front keeps what it holds, and
   * the others a reserve each (gpumem__pool_drain_fullest_front), since a thread whose
   * front is emptied refills each of its classes at once, under this lock, to take back
   * what it just gave (on the threads workload, 16 threads on their own streams took nine
   * times the pool's locks, on one stream ten times, for less than half the memory). */
  if (status == GPUMEM_OK && !block && gpumem__pool_front_give_larger(pool, set, search))
    block = find_fit(pool, set, ri, search);
  while (status == GPUMEM_OK && !block && gpumem__pool_drain_fullest_front(pool, set, search))
    block = find_fit(pool, set, ri, search);
  if (status == GPUMEM_OK && !block && ri == GPUMEM__POOL_REGION_SMALL && !for_front)
    block = small_in_large_hole(pool, set, search);
  if (status == GPUMEM_OK && !block)
    status = grow(pool, set, ri, search, why, &block);
  if (status == GPUMEM_ERR_OUT_OF_MEMORY) {
    status = find_anywhere(pool, set, search, &block);
    bool folded = false;
    if (status == GPUMEM_OK && !block && pool->set_count > 1) {
      /* Other streams' unsealed blocks, or blocks of streams gone since, may fit. */
      status = gpumem__pool_fold_into_fresh(pool, set);
      folded = status == GPUMEM_OK;
      if (folded)
        status = find_anywhere(pool, set, search, &block);
    }
    bool trimmed = false;
    if (status == GPUMEM_OK && !block)
      status = trim_before_failing(pool, set, search, folded, &trimmed);
    if (status == GPUMEM_OK && !block && trimmed)
      status = grow(pool, set, ri, search, why, &block);
    else if (status == GPUMEM_OK && !block)
      status = GPUMEM_ERR_OUT_OF_MEMORY;
    if (status == GPUMEM_OK)
      gpumem__absorb_error(); /* the growth's failure: no stale message behind a success */
  }
  *out = block;
  return status;
}

gpumem_status gpumem__pool_take_block(pool_resource *pool, free_set *set, size_t size,
                                      bool may_grow, gpumem__block **out, const char **why) {
  gpumem__block *block = cache_pop(pool, set, size);
  gpumem_status status = GPUMEM_OK;
  if (block) { /* for a front, whose own maps file it: out of the pool's */
    gpumem__block_map_take(&pool->live, block->addr);
    block->state = GPUMEM__BLOCK_ALLOCATED;
    *out = block;
    return GPUMEM_OK;
  }
  if (may_grow)
    status = find_block(pool, set, size, true, &block, why);
  else
    block = find_fit(pool, set, region_for(pool, size), size);
  *out =
      status == GPUMEM_OK && block ? carve(pool, set, block, size, GPUMEM_DEFAULT_ALIGNMENT) : NULL;
  return status;
}

size_t gpumem__pool_take_run(pool_resource *pool, free_set *set, size_t size, size_t count,
                             gpumem__block **out) {
  if (count < 2 || (set->cached_count > 0 && set->cached[cache_class(size)]))
    return 0;
  gpumem__block *run = find_fit(pool, set, region_for(pool, size), size * count);
  if (!run || !(run = carve(pool, set, run, size * count, GPUMEM_DEFAULT_ALIGNMENT)))
    return 0;
  size_t n = 0;
  while (n + 1 < count && (out[n] = split_front(pool, run, size)) != NULL)
    n++;
  if (GPUMEM_UNLIKELY(run->size != size)) { /* no host memory to cut the rest: it goes back */
    release_block(pool, set, run, GPUMEM__BLOCK_OPEN);
    return n;
  }
  out[n++] = run;
  return n;
}

/* A block from the free index that could not be handed out, back where it came from, as it
 * was (`was`: its state before it was taken), where it merges again with what it was cut
 * from (filed open, a block cut from sealed memory would unseal the rest). Out of line: the
 * allocation paths then neither carry release_block's merging (in line in pool_internal.h)
 * nor save the registers it needs. */
GPUMEM_COLD static void take_back(pool_resource *pool, free_set *set, gpumem__block *block,
                                  gpumem__block_state was) {
  release_block(pool, set, block, was);
}

/* Raises the current pass's live peak to `live`, the live bytes after a request of `bytes`
 * from the free index, after starting it over if the live bytes before it were under
 * GPUMEM__POOL_PASS_EMPTY of it: a pass begins. The cache's hand-outs are left out (they are
 * small, and the hottest path). */
static inline void note_pass_peak(pool_resource *pool, uint64_t live, size_t bytes) {
  if (live - bytes < pool->pass_peak_live / GPUMEM__POOL_PASS_EMPTY)
    pool->pass_peak_live = 0;
  if (live > pool->pass_peak_live)
    pool->pass_peak_live = live;
}

/* Files an allocated `block` in the live map (a cached one is there already) and counts it;
 * false when the map cannot grow (the block is back as it `was` then). */
static inline bool hand_out(pool_resource *pool, free_set *set, gpumem__block *block, size_t bytes,
                            gpumem__block_state was) {
  block->requested = bytes;
  if (GPUMEM_UNLIKELY(pool->multi_stream) && bytes > GPUMEM__POOL_OPEN_BYTES_MAX)
    gpumem__pool_note_large_asker(pool, set->stream);
  if (was != GPUMEM__BLOCK_CACHED &&
      GPUMEM_UNLIKELY(!gpumem__block_map_insert(&pool->live, block))) {
    take_back(pool, set, block, was);
    return false;
  }
  note_pass_peak(pool, gpumem__counters_allocated(&pool->stats, bytes), bytes);
  /* The set first: once closed (a random workload's sizes close it) or full, the test is
   * the same every time, where one on the size alone is not. */
  if (gpumem__size_set_adds(&pool->served_sizes) && bytes >= GPUMEM__POOL_RECURRING_LEAST)
    gpumem__size_set_add(&pool->served_sizes, gpumem__align_up(bytes, GPUMEM__BLOCK_UNIT));
  return true;
}

/* What to carve from free block `block` for a request of `size` bytes (`search` with its
 * alignment): a small request served from the large region (between passes, on the way to a
 * failure, or aligned past the small region's limit) takes the cache's limit there where the
 * block holds it, so that, freed, it merges back into the hole at once rather than staying
 * cached in it. Cached, such blocks kept ResNet serving's holes from its large requests: over
 * 50 warm passes it held 1.286 times its live peak against 1.148. */
static size_t size_in_region(const pool_resource *pool, const gpumem__block *block, size_t size,
                             size_t search) {
  size_t least = pool->limits.cache_below;
  if (size < least && block->region != region_for(pool, size) &&
      block->size >= least + (search - size))
    return least;
  return size;
}

/* Allocation in full: any stream, alignment, growth, and the failures. Called with the lock
 * held; releases it. */
GPUMEM_NOINLINE static gpumem_status allocate_slow_then_unlock(pool_resource *pool, size_t bytes,
                                                               size_t size, size_t alignment,
                                                               gpumem_stream stream, void **ptr) {
  size_t search = size + (alignment - GPUMEM_DEFAULT_ALIGNMENT);
  const char *why = "the host is out of memory for the pool's bookkeeping";
  free_set *set;
  gpumem__block *block = NULL;
  gpumem__block_state was = GPUMEM__BLOCK_CACHED;
  gpumem_status status = set_for(pool, stream, &set);
  if (status == GPUMEM_OK && alignment == GPUMEM_DEFAULT_ALIGNMENT &&
      (block = cache_pop(pool, set, size))) {
    block->state = GPUMEM__BLOCK_ALLOCATED;
  } else if (status == GPUMEM_OK) {
    status = find_block(pool, set, search, false, &block, &why);
    if (status == GPUMEM_OK && block) {
      was = block->state;
      block = carve(pool, set, block, size_in_region(pool, block, size, search), alignment);
    }
  }
  if (status == GPUMEM_OK && block && hand_out(pool, set, block, bytes, was)) {
    gpumem__biased_lock_release(&pool->lock);
    *ptr = (void *)block->addr;
    return GPUMEM_OK;
  }
  gpumem__biased_lock_release(&pool->lock);
  if (status == GPUMEM_OK) /* a block was found, but no host memory to split or file it */
    gpumem__note_oom(GPUMEM__OOM_HOST, &pool->header, bytes);
  if (status == GPUMEM_OK || status == GPUMEM_ERR_OUT_OF_MEMORY)
    return gpumem__fail_out_of_memory(&pool->header, bytes, why);
  return status;
}

/* Allocation from the free index of the last call's set; allocate_slow_then_unlock when
 * nothing fits. Called with the lock held; releases it. */
static gpumem_status allocate_from_index_then_unlock(pool_resource *pool, free_set *set,
                                                     size_t bytes, size_t size,
                                                     gpumem_stream stream, void **ptr) {
  gpumem__block *block = find_fit(pool, set, region_for(pool, size), size);
  gpumem__block_state was = block ? block->state : GPUMEM__BLOCK_OPEN;
  if (block && (block = carve(pool, set, block, size, GPUMEM_DEFAULT_ALIGNMENT)) &&
      GPUMEM_LIKELY(hand_out(pool, set, block, bytes, was))) {
    gpumem__biased_lock_release(&pool->lock);
    *ptr = (void *)block->addr;
    return GPUMEM_OK;
  }
  return allocate_slow_then_unlock(pool, bytes, size, GPUMEM_DEFAULT_ALIGNMENT, stream, ptr);
}

/* Allocation with the lock held, which it releases. The common cases come first: the
 * stream of the last call with default alignment, from the cache; every call in this
 * function is its last act, so the path through the cache saves no registers. */
static inline gpumem_status allocate_then_unlock(pool_resource *pool, size_t bytes,
                                                 size_t alignment, gpumem_stream stream,
                                                 void **ptr) {
  size_t size = pool->fixed_block ? pool->fixed_block : gpumem__align_up(bytes, GPUMEM__BLOCK_UNIT);
  free_set *set = pool->last_set;
  if (GPUMEM_UNLIKELY(!set || set->stream != stream || alignment != GPUMEM_DEFAULT_ALIGNMENT))
    return allocate_slow_then_unlock(pool, bytes, size, alignment, stream, ptr);
  gpumem__block *block = cache_pop(pool, set, size);
  if (!block)
    return allocate_from_index_then_unlock(pool, set, bytes, size, stream, ptr);
  /* A cached block is in the live map already (see deallocate_then_unlock). */
  block->state = GPUMEM__BLOCK_ALLOCATED;
  block->requested = bytes;
  gpumem__counters_allocated(&pool->stats, bytes);
  gpumem__biased_lock_release(&pool->lock);
  *ptr = (void *)block->addr;
  return GPUMEM_OK;
}

/* Makes the fronts once threads use the pool at the same time; with the lock held, `waited`
 * telling whether this thread found it held. A second thread alone is not enough: threads
 * that take turns (PyTorch's autograd thread and the main one) gain nothing from fronts,
 * whose blocks the pool cannot merge, and lose memory to them (up to 0.6% of the peak on
 * the two-thread training traces, sim). So from the second thread on, the pool counts its
 * shared-lock takes in windows of GPUMEM__POOL_FRONT_WINDOW, and makes the fronts at the end
 * of a window where at least one take in GPUMEM__POOL_FRONT_CONTENDED found the lock held.
 * Where locks are biased, a thread comes here only while no bias holds: the first thread
 * for its first call (the bias is set then), every thread once a second one revoked it,
 * until a thread taking it alone many times in a row has it biased again; where they
 * cannot be (ThreadSanitizer, no membarrier), every call of every thread comes here. */
static void note_thread(pool_resource *pool, bool waited) {
  if (GPUMEM_LIKELY(pool->second_thread)) {
    pool->window_waits += waited;
    if (++pool->window_takes < GPUMEM__POOL_FRONT_WINDOW)
      return;
    if (pool->window_waits * GPUMEM__POOL_FRONT_CONTENDED >= GPUMEM__POOL_FRONT_WINDOW)
      gpumem__pool_enable_fronts(pool);
    pool->window_takes = pool->window_waits = 0;
    return;
  }
  uintptr_t self = gpumem__thread_token();
  if (!pool->first_thread)
    pool->first_thread = self;
  else if (pool->first_thread != self)
    pool->second_thread = true;
}

/* Takes the pool's shared lock; until the fronts are made, notes whether this thread found
 * it held (a relaxed look before taking it) for note_thread. */
static inline void take_shared(pool_resource *pool, bool fronts_made) {
  bool waited = !fronts_made &&
                atomic_load_explicit(&pool->lock.locked, memory_order_relaxed) != GPUMEM__UNLOCKED;
  /* A bias owner found inside counts too: its thread was in the pool at the same time. */
  waited |= gpumem__biased_lock_take_shared(&pool->lock);
  if (GPUMEM_UNLIKELY(!fronts_made))
    note_thread(pool, waited);
}

/* Allocation under the shared lock: a pool without fronts, or a request no front serves. */
GPUMEM_NOINLINE static gpumem_status allocate_locked(pool_resource *pool, size_t bytes,
                                                     size_t alignment, gpumem_stream stream,
                                                     void **ptr, bool fronts_made) {
  take_shared(pool, fronts_made);
  return allocate_then_unlock(pool, bytes, alignment, stream, ptr);
}

gpumem_status gpumem__pool_allocate_locked(pool_resource *pool, size_t bytes, gpumem_stream stream,
                                           void **ptr) {
  return allocate_locked(pool, bytes, GPUMEM_DEFAULT_ALIGNMENT, stream, ptr, true);
}

/* Pools shared between threads (or where locks cannot be biased) take this path always:
 * through the calling thread's front (pool_front.c) once threads met at the lock, else under
 * the shared lock. Each way is a tail call, so that this saves no registers. */
GPUMEM_NOINLINE static gpumem_status allocate_shared(pool_resource *pool, size_t bytes,
                                                     size_t alignment, gpumem_stream stream,
                                                     void **ptr) {
  pool_fronts *fronts = fronts_of(pool);
  if (fronts && alignment == GPUMEM_DEFAULT_ALIGNMENT && bytes - 1 < GPUMEM__POOL_FRONT_LIMIT)
    return gpumem__pool_front_allocate(pool, fronts, bytes, stream, ptr);
  return allocate_locked(pool, bytes, alignment, stream, ptr, fronts != NULL);
}

static gpumem_status pool_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                   gpumem_stream stream, void **ptr) {
  pool_resource *pool = (pool_resource *)mr;
  if (GPUMEM_UNLIKELY(!gpumem__biased_lock_try_as_owner(&pool->lock)))
    return allocate_shared(pool, bytes, alignment, stream, ptr);
  return allocate_then_unlock(pool, bytes, alignment, stream, ptr);
}

/* Frees `block` (in slot `slot` of the live map, its size checked) on `stream`: into the
 * cache, where it keeps its slot, or out of the map into the free index. On failure nothing
 * has changed. Called with the lock held. */
static inline gpumem_status free_block(pool_resource *pool, size_t slot, gpumem__block *block,
                                       size_t bytes, gpumem_stream stream) {
  free_set *set = NULL;
  gpumem_status status = set_for(pool, stream, &set);
  /* A seal is due: record the event first, so that if it fails nothing has changed. */
  bool sealing = status == GPUMEM_OK && pool->multi_stream &&
                 (set->open_frees + 1 >= GPUMEM__POOL_SEAL_EVERY ||
                  (set->open_bytes + block->size > GPUMEM__POOL_OPEN_BYTES_MAX &&
                   gpumem__pool_another_asks_large(pool, set->stream)));
  if (sealing)
    status = gpumem__pool_seal(pool, set);
  if (GPUMEM_UNLIKELY(status != GPUMEM_OK))
    return status;
  count_freed(pool, bytes);
  if (cacheable(pool, block)) {
    if (GPUMEM_UNLIKELY(!cache_has_room(pool, set))) {
      gpumem__pool_flush_cache(pool, set);
      gpumem__pool_seal_if_due(pool, set); /* the merged blocks: other streams' soon */
    }
    cache_insert(set, block);
    return GPUMEM_OK;
  }
  /* A new stream's set merged the caches (set_for), whose blocks left the map: the slot
   * may have moved. */
  if (GPUMEM_UNLIKELY(pool->live.slots[slot].block != block))
    slot = gpumem__block_map_slot_of(&pool->live, block->addr);
  gpumem__block_map_remove_at(&pool->live, slot);
  /* Noted under the size its request looked for (a pool of fixed blocks keeps no places). */
  size_t size = gpumem__align_up(bytes, GPUMEM__BLOCK_UNIT);
  if (keeps_places(pool, size, block->region))
    gpumem__pool_note_place(pool, block, size);
  /* Just after a seal this block is covered by the event too: the record captured all work
   * enqueued before this free. */
  release_block_in_line(pool, set, block, sealing ? GPUMEM__BLOCK_SEALED : GPUMEM__BLOCK_OPEN);
  if (!sealing) {
    set->open_frees++;
    set->open_bytes += block->size;
  }
  /* The block unsealed large neighbours: they are sealed again before the stream can go idle
   * with them. */
  if (GPUMEM_UNLIKELY(set->unsealed_bytes >= GPUMEM__POOL_UNSEALED_MAX))
    gpumem__pool_seal_if_due(pool, set);
  return GPUMEM_OK;
}

/* A free the pool refuses: `block` (found in the live map: allocated, or free in a cache; or
 * NULL) is not a live allocation of `bytes`. Called with the lock held; releases it. */
GPUMEM_COLD static gpumem_status refuse_free_then_unlock(pool_resource *pool, gpumem__block *block,
                                                         void *ptr, size_t bytes, bool *owned) {
  bool live = block && block->state == GPUMEM__BLOCK_ALLOCATED;
  size_t requested = live ? block->requested : 0;
  pool_fronts *fronts = fronts_of(pool);
  if (!block && fronts) /* a front's block, freed with a size no front serves */
    requested = gpumem__pool_front_requested(fronts, ptr);
  bool found = live || requested;
  gpumem__biased_lock_release(&pool->lock);
  if (owned)
    *owned = found;
  if (!found)
    return owned ? GPUMEM_OK
                 : gpumem__fail(GPUMEM_ERR_MISUSE,
                                "deallocate of %p (%zu bytes) from a pool: that pointer is not a "
                                "live allocation of this pool (never allocated here, or already "
                                "freed)",
                                ptr, bytes);
  return gpumem__fail(GPUMEM_ERR_MISUSE,
                      "deallocate of %p from a pool with %zu bytes, but it was allocated with "
                      "%zu bytes",
                      ptr, bytes, requested);
}

/* Frees `block` (its size checked) through free_block, then releases the lock. */
static gpumem_status free_and_unlock(pool_resource *pool, size_t slot, gpumem__block *block,
                                     size_t bytes, gpumem_stream stream, bool *owned) {
  gpumem_status status = free_block(pool, slot, block, bytes, stream);
  gpumem__biased_lock_release(&pool->lock);
  if (owned)
    *owned = true;
  return status;
}

/* deallocate with the lock held, which it releases. The common case, a small block freed
 * on the stream of the last call, goes into the cache without a call; every other call is
 * the function's last act. A cached block keeps its place in the live map (marked cached),
 * so that freeing it and handing it out again write no slot of the map: where two threads
 * take turns, the slot then stays in both processors' caches rather than moving between
 * them at each use. */
static inline gpumem_status deallocate_then_unlock(pool_resource *pool, void *ptr, size_t bytes,
                                                   gpumem_stream stream, bool *owned) {
  size_t slot = gpumem__block_map_slot_of(&pool->live, (uintptr_t)ptr);
  gpumem__block *block = pool->live.slots[slot].block; /* NULL where the run ended empty */
  /* The state first: a cached block's `requested` is its link in the cache. */
  if (GPUMEM_UNLIKELY(!block || block->state != GPUMEM__BLOCK_ALLOCATED ||
                      block->requested != bytes))
    return refuse_free_then_unlock(pool, block, ptr, bytes, owned);
  free_set *set = pool->last_set;
  if (!set || set->stream != stream || !cacheable(pool, block) || !cache_has_room(pool, set))
    return free_and_unlock(pool, slot, block, bytes, stream, owned);
  count_freed(pool, bytes);
  cache_insert(set, block);
  gpumem__biased_lock_release(&pool->lock);
  if (owned)
    *owned = true;
  return GPUMEM_OK;
}

/* A free under the shared lock: a pool without fronts, or a block no front handed out. */
GPUMEM_NOINLINE static gpumem_status deallocate_locked(pool_resource *pool, void *ptr, size_t bytes,
                                                       gpumem_stream stream, bool *owned,
                                                       bool fronts_made) {
  take_shared(pool, fronts_made);
  return deallocate_then_unlock(pool, ptr, bytes, stream, owned);
}

gpumem_status gpumem__pool_deallocate_locked(pool_resource *pool, void *ptr, size_t bytes,
                                             gpumem_stream stream, bool *owned) {
  return deallocate_locked(pool, ptr, bytes, stream, owned, true);
}

/* As allocate_shared: through the fronts once made, each way a tail call. */
GPUMEM_NOINLINE static gpumem_status deallocate_shared(pool_resource *pool, void *ptr, size_t bytes,
                                                       gpumem_stream stream, bool *owned) {
  pool_fronts *fronts = fronts_of(pool);
  if (fronts && bytes - 1 < GPUMEM__POOL_FRONT_LIMIT)
    return gpumem__pool_front_deallocate(pool, fronts, ptr, bytes, stream, owned);
  return deallocate_locked(pool, ptr, bytes, stream, owned, fronts != NULL);
}

/* Frees ptr. When the pool does not own it: with `owned`, *owned = false and GPUMEM_OK
 * with no message (the caller will look elsewhere); without, a misuse failure. */
static inline gpumem_status deallocate(pool_resource *pool, void *ptr, size_t bytes,
                                       gpumem_stream stream, bool *owned) {
  if (GPUMEM_UNLIKELY(!gpumem__biased_lock_try_as_owner(&pool->lock)))
    return deallocate_shared(pool, ptr, bytes, stream, owned);
  return deallocate_then_unlock(pool, ptr, bytes, stream, owned);
}

static gpumem_status pool_deallocate(gpumem_resource *mr, void *ptr, size_t bytes, size_t alignment,
                                     gpumem_stream stream) {
  return deallocate((pool_resource *)mr, ptr, bytes, stream, NULL);
}

gpumem_status gpumem__pool_deallocate_if_owned(gpumem_resource *mr, void *ptr, size_t bytes,
                                               gpumem_stream stream, bool *owned) {
  return deallocate((pool_resource *)mr, ptr, bytes, stream, owned);
}

/* ---------------------------------------------------------------------------------------
 * Facts, life
 * ------------------------------------------------------------------------------------- */

/* Adds a free index's part of a free-memory query to *value. */
static void add_free_fact(gpumem_query what, const gpumem__free_index *index, uint64_t *value) {
  if (what == GPUMEM_QUERY_FREE_BLOCKS)
    *value += index->block_count;
  else if (what == GPUMEM_QUERY_FREE_BYTES)
    *value += index->total_bytes;
  else if (gpumem__free_index_largest(index) > *value)
    *value = gpumem__free_index_largest(index);
}

static gpumem_status pool_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  pool_resource *pool = (pool_resource *)mr;
  if (what == GPUMEM_QUERY_MAX_RESERVED_BYTES) {
    if (!pool->options.maximum_size)
      return GPUMEM_ERR_UNSUPPORTED; /* no maximum */
    *out = pool->options.maximum_size;
    return GPUMEM_OK;
  }
  if (what != GPUMEM_QUERY_LARGEST_FREE_BLOCK && what != GPUMEM_QUERY_FREE_BLOCKS &&
      what != GPUMEM_QUERY_FREE_BYTES)
    return gpumem__pool_front_counters(pool, what, out);
  uint64_t value = 0;
  gpumem__biased_lock_take(&pool->lock);
  /* Cached blocks are free memory that is not merged yet; the answer is about the merged
   * state, which is what an allocation that misses the cache sees. */
  gpumem__pool_flush_caches(pool);
  for (size_t i = 0; i < pool->set_count; i++)
    for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++) {
      add_free_fact(what, &pool->sets[i]->open[r], &value);
      add_free_fact(what, &pool->sets[i]->sealed[r], &value);
    }
  gpumem__biased_lock_release(&pool->lock);
  *out = value;
  return GPUMEM_OK;
}

static void pool_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const pool_resource *pool = (const pool_resource *)mr;
  char holes[48] = "", share[32] = ""; /* named only when not the default, so that most
                                        * pools' specs read as before */
  if (!pool->options.release_holes_over)
    snprintf(holes, sizeof holes, ", release_holes_over=never");
  else if (!pool->holes_gated)
    snprintf(holes, sizeof holes, ", release_holes_over=%u", pool->options.release_holes_over);
  if (pool->options.release_holes_time != GPUMEM_POOL_RELEASE_HOLES_TIME_DEFAULT)
    snprintf(share, sizeof share, ", release_holes_time=%u", pool->options.release_holes_time);
  gpumem__describe_over(mr, buf, size, ", initial=%zu, max=%zu%s%s", pool->options.initial_size,
                        pool->options.maximum_size, holes, share);
}

static void free_structures(pool_resource *pool) {
  for (size_t i = 0; i < pool->set_count; i++) {
    if (pool->sets[i]->event)
      pool->header.dev->event_destroy(pool->sets[i]->event);
    if (!is_fresh(pool, pool->sets[i]))
      free(pool->sets[i]);
  }
  free(pool->sets);
  gpumem__pool_free_fronts(pool);
  gpumem__sorted_free(&pool->chunks);
  gpumem__block_map_destroy(&pool->live);
  gpumem__block_slab_destroy(&pool->slab);
  gpumem__size_set_close(&pool->served_sizes);
  free(pool);
}

static gpumem_status pool_destroy(gpumem_resource *mr) {
  pool_resource *pool = (pool_resource *)mr;
  size_t released = 0;
  gpumem_status status = gpumem__pool_trim_all(pool, NULL, false, &released);
  if (status == GPUMEM_OK && pool->chunks.count > 0)
    status = gpumem__fail(GPUMEM_ERR_INTERNAL,
                          "pool: %zu chunks still held after giving back every free one",
                          pool->chunks.count);
  if (status != GPUMEM_OK)
    return status;
  free_structures(pool);
  return GPUMEM_OK;
}

static const gpumem__resource_ops pool_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "pool",
    .allocate = pool_allocate,
    .deallocate = pool_deallocate,
    .query = pool_query,
    .describe = pool_describe,
    .destroy = pool_destroy,
    .trim = gpumem__pool_trim,
    .validate = gpumem__pool_validate,
};

bool gpumem__is_pool(const gpumem_resource *mr) {
  return mr && mr->ops == &pool_ops;
}

static gpumem_status init_pool(pool_resource *pool, gpumem_resource *upstream,
                               const gpumem_pool_options *options, size_t growth_rounding,
                               size_t fixed_block) {
  gpumem__resource_init_suballocator(&pool->header, &pool_ops, upstream);
  pool->options = *options;
  pool->fixed_block = fixed_block;
  pool->holes_budget_ns = GPUMEM__POOL_HOLES_BURST_NS;
  pool->holes_budget_at_ns = gpumem__now_ns();
  pool->chunks = (gpumem__sorted)GPUMEM__SORTED_INIT(chunk);
  for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++) {
    gpumem__free_index_init(&pool->fresh.open[r]);
    gpumem__free_index_init(&pool->fresh.sealed[r]);
  }
  set_layout(pool, false, false);
  gpumem__pool_init_growth(pool, upstream, growth_rounding, fixed_block);
  gpumem__block_slab_init(&pool->slab);
  gpumem__counters_init(&pool->stats);
  if (!gpumem__block_map_init(&pool->live) || !gpumem__pool_add_set(pool, &pool->fresh))
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_pool_create: out of host memory");
  if (options->initial_size == 0)
    return GPUMEM_OK;
  const char *why = "";
  gpumem__block *initial;
  gpumem_status status = gpumem__pool_grow(pool, &pool->fresh, GPUMEM__POOL_REGION_LARGE,
                                           options->initial_size, &why, &initial);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "gpumem_pool_create: taking the initial %zu bytes",
                                options->initial_size);
  return GPUMEM_OK;
}

gpumem_status gpumem_pool_create(gpumem_resource *upstream, const gpumem_pool_options *opts,
                                 gpumem_resource **out) {
  if (!upstream || !out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_pool_create: %s is NULL",
                        upstream ? "out" : "the upstream resource");
  gpumem_pool_options options = opts ? *opts : (gpumem_pool_options){0};
  if (options.initial_size == 0) {
    gpumem_status status = gpumem__pool_default_initial_size(upstream, &options.initial_size);
    if (status != GPUMEM_OK)
      return gpumem__fail_context(status, "gpumem_pool_create: reading the device's memory");
    if (options.maximum_size && options.initial_size > options.maximum_size)
      options.initial_size = options.maximum_size;
  }
  return gpumem__pool_create_rounded(upstream, &options, 0, 0, out);
}

gpumem_status gpumem__pool_create_rounded(gpumem_resource *upstream,
                                          const gpumem_pool_options *opts, size_t growth_rounding,
                                          size_t fixed_block, gpumem_resource **out) {
  gpumem_pool_options options = *opts;
  if (options.release_holes_over != 0 && options.release_holes_over != GPUMEM_POOL_KEEP_HOLES &&
      (options.release_holes_over < 100 || options.release_holes_over > GPUMEM__POOL_HOLES_MOST))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_pool_create: release_holes_over is %u; it is a percentage of "
                        "the live peak from 100 to %u, 0 (the default, %u) or "
                        "GPUMEM_POOL_KEEP_HOLES (never)",
                        options.release_holes_over, GPUMEM__POOL_HOLES_MOST,
                        GPUMEM_POOL_RELEASE_HOLES_DEFAULT);
  if (options.release_holes_time > 100)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_pool_create: release_holes_time is %u; it is the most "
                        "percentage of the time releases of holes take, from 1 to 100, or 0 "
                        "(the default, %u)",
                        options.release_holes_time, GPUMEM_POOL_RELEASE_HOLES_TIME_DEFAULT);
  if (options.release_holes_time == 0)
    options.release_holes_time = GPUMEM_POOL_RELEASE_HOLES_TIME_DEFAULT;
  /* Held as the pool's paths read it: the percentage, or 0 for never; the default's limits
   * on the request are the pool's holes_gated. */
  bool gated = options.release_holes_over == 0;
  if (gated)
    options.release_holes_over = GPUMEM_POOL_RELEASE_HOLES_DEFAULT;
  else if (options.release_holes_over == GPUMEM_POOL_KEEP_HOLES)
    options.release_holes_over = 0;
  if (options.maximum_size && options.initial_size > options.maximum_size)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_pool_create: initial size %zu exceeds the maximum size %zu",
                        options.initial_size, options.maximum_size);
  pool_resource *pool = calloc(1, sizeof *pool);
  if (!pool)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_pool_create: out of host memory");
  pool->holes_gated = gated;
  gpumem_status status = init_pool(pool, upstream, &options, growth_rounding, fixed_block);
  if (!keeps_served_sizes(pool))
    gpumem__size_set_close(&pool->served_sizes);
  if (status != GPUMEM_OK) {
    /* Only a failed initial growth can leave anything to give back: nothing was taken. */
    gpumem_resource_release(pool->header.upstream);
    free_structures(pool);
    return status;
  }
  *out = &pool->header;
  return GPUMEM_OK;
}
