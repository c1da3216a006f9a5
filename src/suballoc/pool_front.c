/* pool_front.c: the pool's thread fronts, which let a pool that many threads use scale with
 * them. A pool used by one thread never has them: its biased lock (core/biased_lock.h)
 * costs plain loads and stores, and its paths stay exactly as they are. Once a second
 * thread takes the lock, the bias is revoked for good and every call would take the shared
 * lock, which sixteen threads fight over (850 ns an operation on the H100 host, 38 times
 * one thread's cost); from then on requests under GPUMEM__POOL_FRONT_LIMIT go through a
 * front of the calling thread instead.
 *
 * A front (one per thread slot, core/thread_slots.h: no thread-local storage) holds whole
 * blocks by size class, all free on one stream, the front's: the stream they were freed on,
 * so it may reuse them at once, as the pool's own free sets do. It refills in batches under
 * the pool's lock, carving blocks at the top of their class, so that every block of a class
 * fits every request of it; it gives all its blocks back, open in their stream's set, when
 * it is full, when its thread turns to another stream, and whenever the pool would grow,
 * fold, trim or answer a free-memory query. So memory one thread's front holds never makes
 * the pool grow or fail for another: before growing, the pool drains every front and looks
 * again (blocks of another stream then need that stream's seal, or the fold before a
 * failure, as any free block of that stream does). A front never records an event: the
 * blocks it gives back are sealed by a later call on their own stream (a drain that runs
 * in a call on the front's stream seals at once when a seal is due).
 *
 * Blocks a front hands out are found by address in one of GPUMEM__POOL_LIVE_SHARDS live
 * maps, each under a lock of its own, so that a free from any thread finds its block and
 * checks its size without the pool's lock; the freeing thread's front takes it (a consumer
 * thread absorbs what a producer allocated, with no lock that both take on every call).
 * Blocks held or handed out by fronts are in state GPUMEM__BLOCK_FRONT, which the pool's
 * merging never touches; only the pool's lock holder changes a block's state, its neighbours
 * and its size, so front code reads those and writes only its lists and `requested`.
 *
 * Locks, in the order they are taken: the pool's lock, a front's lock, a shard's lock. A
 * front's thread never waits for the pool's lock while it holds its front's, so the pool's
 * lock holder may drain every front. Front and shard locks are short spin locks (a few list
 * and map operations, no device call); each is nearly always taken by one thread, so it
 * costs an uncontended atomic exchange on a line that stays in that thread's cache.
 *
 * Why fronts of blocks rather than a sub-pool per thread over superblocks (as the arena
 * keeps per stream): a sub-pool keeps every superblock it has touched, so memory would stay
 * with the thread that once used it; a block freed by another thread would have to go back
 * to its owner's sub-pool, under that owner's lock, which every consumer of one producer
 * would fight over; and a thread's sub-pool would need the pool's whole machinery again.
 * Fronts keep only whole free blocks, which the pool takes back at any time, and leave
 * stream rules, growth and trim to the pool.
 *
 * Counters: a front counts what it hands out and takes back, and queries add the fronts to
 * the pool's counters, so live bytes and counts are exact when read; the peak of live bytes
 * is raised from that sum at each refill and query, so it may miss a peak between them. */
#include "suballoc/pool_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* A refill carves this many bytes' worth of blocks, within these counts; a list that grows
 * past two such batches gives one back. So a front holds little beyond what its thread
 * turns over, and most free memory stays in the pool, where any refill finds it. */
#define REFILL_BYTES ((size_t)64 << 10)
#define REFILL_MAX 32

_Static_assert(GPUMEM__POOL_LIVE_SHARDS == 64, "shard_of keeps 6 bits");
_Static_assert(GPUMEM__POOL_FRONT_LIMIT < GPUMEM__POOL_CACHE_LIMIT / 2,
               "fronts' blocks, at the top of their class, are under the cache's limit");

/* ---------------------------------------------------------------------------------------
 * Spin locks, shards, lists
 * ------------------------------------------------------------------------------------- */

GPUMEM_NOINLINE static void spin_lock_slow(atomic_int *lock) {
  for (unsigned spins = 0;; spins++) {
    if (!atomic_load_explicit(lock, memory_order_relaxed) &&
        !atomic_exchange_explicit(lock, 1, memory_order_acquire))
      return;
    if (spins < 64)
      gpumem__cpu_relax();
    else
      sched_yield();
  }
}

static inline void spin_lock(atomic_int *lock) {
  if (GPUMEM_UNLIKELY(atomic_exchange_explicit(lock, 1, memory_order_acquire)))
    spin_lock_slow(lock);
}

static inline void spin_unlock(atomic_int *lock) {
  atomic_store_explicit(lock, 0, memory_order_release);
}

void gpumem__pool_spin(atomic_int *lock, bool take) {
  if (take)
    spin_lock(lock);
  else
    spin_unlock(lock);
}

/* The live map of `addr`: blocks carved together (a refill's batch) share a page, and so a
 * shard, which their thread then keeps in its cache. */
static inline pool_live_shard *shard_of(pool_fronts *fronts, uintptr_t addr) {
  return &fronts->shards[((uint64_t)(addr >> 12) * 0x9E3779B97F4A7C15ull) >> 58];
}

/* The size a front carves for a request of `bytes`: the top of the request's class. */
static inline size_t front_size(size_t bytes) {
  uint64_t units = gpumem__align_up(bytes, GPUMEM__BLOCK_UNIT) >> GPUMEM__BLOCK_UNIT_SHIFT;
  int shift = gpumem__class_shift(units);
  return (size_t)((((units >> shift) + 1) << shift) - 1) << GPUMEM__BLOCK_UNIT_SHIFT;
}

/* How many blocks of `size` bytes a refill carves, and a give-back returns. */
static inline size_t batch_of(size_t size) {
  size_t n = REFILL_BYTES / size;
  return n < 1 ? 1 : n > REFILL_MAX ? REFILL_MAX : n;
}

static inline gpumem__block *front_pop(pool_front *f, size_t c) {
  gpumem__block *block = f->lists[c];
  if (block) {
    f->lists[c] = block->next_free;
    f->lengths[c]--;
    f->count--;
    f->bytes -= block->size;
  }
  return block;
}

/* Files a block in its class's list; returns whether the list is now over two batches, so
 * that one batch should go back to the pool. */
static inline bool front_push(pool_front *f, gpumem__block *block) {
  size_t c = cache_class(block->size);
  block->next_free = f->lists[c];
  f->lists[c] = block;
  f->count++;
  f->bytes += block->size;
  return ++f->lengths[c] > 2 * batch_of(block->size);
}

static inline void front_count(pool_front *f, int64_t bytes, int64_t count) {
  gpumem__slot_add(&f->live_bytes, bytes);
  gpumem__slot_add(&f->live_count, count);
}

/* Binds an empty front to `set`; under the pool's lock and the front's. */
static void bind(pool_front *f, free_set *set) {
  f->set = set;
  f->stream = set->stream;
  set->fronts++;
}

/* Gives the front's blocks back to its set, open; under the pool's lock and the front's.
 * Returns whether it held any. */
static bool flush_front(pool_resource *pool, pool_front *f) {
  free_set *set = f->set;
  if (!set)
    return false;
  set->open_frees += f->count;
  for (size_t c = 0; c < GPUMEM__POOL_CACHE_CLASSES && f->count > 0; c++) {
    gpumem__block *block;
    while ((block = front_pop(f, c)))
      release_block(pool, set, block, GPUMEM__BLOCK_OPEN);
  }
  GPUMEM__ASSERT(&pool->header, f->count == 0 && f->bytes == 0, "a flushed front is empty");
  set->fronts--;
  f->set = NULL;
  return true;
}

/* Seals `set` if a seal is due; called during a call on its stream. A failed seal only
 * leaves the blocks open. */
static void seal_if_due(pool_resource *pool, free_set *set) {
  if (pool->multi_stream && set->open_frees >= GPUMEM__POOL_SEAL_EVERY &&
      gpumem__pool_seal(pool, set) != GPUMEM_OK)
    gpumem__clear_error();
}

/* ---------------------------------------------------------------------------------------
 * Life, counters
 * ------------------------------------------------------------------------------------- */

void gpumem__pool_enable_fronts(pool_resource *pool) {
  if (atomic_load_explicit(&pool->fronts, memory_order_relaxed) || pool->fixed_block)
    return;
  pool_fronts *fronts = aligned_alloc(GPUMEM__SLOT_ALIGN, sizeof *fronts);
  if (!fronts)
    return;
  memset(fronts, 0, sizeof *fronts);
  for (size_t i = 0; i < GPUMEM__POOL_LIVE_SHARDS; i++) {
    if (!gpumem__block_map_init(&fronts->shards[i].map)) {
      while (i-- > 0)
        gpumem__block_map_destroy(&fronts->shards[i].map);
      free(fronts);
      return;
    }
  }
  atomic_store_explicit(&pool->fronts, fronts, memory_order_release);
}

void gpumem__pool_free_fronts(pool_resource *pool) {
  pool_fronts *fronts = atomic_load_explicit(&pool->fronts, memory_order_relaxed);
  if (!fronts)
    return;
  for (size_t i = 0; i < GPUMEM__POOL_LIVE_SHARDS; i++)
    gpumem__block_map_destroy(&fronts->shards[i].map);
  free(fronts);
}

bool gpumem__pool_flush_fronts(pool_resource *pool, const free_set *only, free_set *calling) {
  pool_fronts *fronts = atomic_load_explicit(&pool->fronts, memory_order_acquire);
  if (!fronts)
    return false;
  bool any = false;
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++) {
    if (!gpumem__thread_slot_used(&fronts->slots, i))
      continue;
    pool_front *f = &fronts->fronts[i];
    spin_lock(&f->lock);
    if (!only || f->set == only)
      any |= flush_front(pool, f);
    spin_unlock(&f->lock);
  }
  if (any && calling)
    seal_if_due(pool, calling);
  return any;
}

/* Live bytes and count, fronts included (sums of relaxed loads: exact at rest). */
static void live_totals(const pool_resource *pool, pool_fronts *fronts, int64_t *bytes,
                        int64_t *count) {
  *bytes = (int64_t)atomic_load_explicit(&pool->stats.live_bytes, memory_order_relaxed) +
           atomic_load_explicit(&fronts->unslotted_live_bytes, memory_order_relaxed);
  *count = (int64_t)atomic_load_explicit(&pool->stats.live_count, memory_order_relaxed) +
           atomic_load_explicit(&fronts->unslotted_live_count, memory_order_relaxed);
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++) {
    *bytes += atomic_load_explicit(&fronts->fronts[i].live_bytes, memory_order_relaxed);
    *count += atomic_load_explicit(&fronts->fronts[i].live_count, memory_order_relaxed);
  }
}

static void raise_peak(pool_resource *pool, pool_fronts *fronts) {
  int64_t bytes, count;
  live_totals(pool, fronts, &bytes, &count);
  if (bytes > 0)
    gpumem__counters_raise_peak(&pool->stats.peak_live_bytes, (uint64_t)bytes);
}

gpumem_status gpumem__pool_front_counters(const pool_resource *pool, gpumem_query what,
                                          uint64_t *out) {
  pool_fronts *fronts = atomic_load_explicit(&pool->fronts, memory_order_acquire);
  if (!fronts || (what != GPUMEM_QUERY_LIVE_BYTES && what != GPUMEM_QUERY_LIVE_COUNT &&
                  what != GPUMEM_QUERY_PEAK_LIVE_BYTES))
    return gpumem__counters_query(&pool->stats, what, out);
  int64_t bytes, count;
  live_totals(pool, fronts, &bytes, &count);
  if (what == GPUMEM_QUERY_PEAK_LIVE_BYTES) {
    /* The counters are atomics: raising the peak from a query is safe. */
    raise_peak((pool_resource *)pool, fronts);
    return gpumem__counters_query(&pool->stats, what, out);
  }
  int64_t value = what == GPUMEM_QUERY_LIVE_BYTES ? bytes : count;
  *out = value > 0 ? (uint64_t)value : 0;
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Allocate
 * ------------------------------------------------------------------------------------- */

/* The front had no block of the class for this stream: a batch from the pool, under its
 * lock. False when the pool has none without the locked path's last resorts (folding,
 * failing), which the caller then takes. */
GPUMEM_NOINLINE static bool refill_and_allocate(pool_resource *pool, pool_fronts *fronts,
                                                pool_front *f, size_t bytes, size_t size,
                                                gpumem_stream stream, void **ptr) {
  gpumem__biased_lock_take(&pool->lock);
  free_set *set;
  if (set_for(pool, stream, &set) != GPUMEM_OK) {
    gpumem__biased_lock_release(&pool->lock);
    gpumem__clear_error(); /* the locked path meets the same failure and reports it */
    return false;
  }
  spin_lock(&f->lock);
  if (f->set && f->set != set) /* another stream's blocks; not that stream's call: no seal */
    flush_front(pool, f);
  spin_unlock(&f->lock);
  /* The front's lock is free while the pool carves: growth drains every front. */
  gpumem__block *batch[REFILL_MAX];
  size_t want = REFILL_BYTES / size, n = 0;
  want = want < 1 ? 1 : want > REFILL_MAX ? REFILL_MAX : want;
  const char *why;
  while (n < want) {
    gpumem__block *block;
    gpumem_status status = gpumem__pool_take_block(pool, set, size, n == 0, &block, &why);
    if (status != GPUMEM_OK)
      gpumem__clear_error();
    if (status != GPUMEM_OK || !block)
      break;
    block->state = GPUMEM__BLOCK_FRONT;
    batch[n++] = block;
  }
  if (n == 0) {
    gpumem__biased_lock_release(&pool->lock);
    return false;
  }
  spin_lock(&f->lock);
  if (!f->set) /* only this thread binds its front: it is unbound, or bound to `set` */
    bind(f, set);
  for (size_t k = 1; k < n; k++)
    front_push(f, batch[k]);
  gpumem__block *block = batch[0];
  block->requested = bytes;
  pool_live_shard *shard = shard_of(fronts, block->addr);
  spin_lock(&shard->lock);
  bool filed = gpumem__block_map_insert(&shard->map, block);
  spin_unlock(&shard->lock);
  *ptr = (void *)block->addr;
  if (!filed)
    front_push(f, block);
  else
    front_count(f, (int64_t)bytes, 1);
  spin_unlock(&f->lock);
  raise_peak(pool, fronts);
  gpumem__biased_lock_release(&pool->lock);
  return filed;
}

bool gpumem__pool_front_allocate(pool_resource *pool, pool_fronts *fronts, size_t bytes,
                                 gpumem_stream stream, void **ptr, gpumem_status *status) {
  int slot = gpumem__thread_slot(&fronts->slots);
  if (GPUMEM_UNLIKELY(slot < 0))
    return false;
  pool_front *f = &fronts->fronts[slot];
  size_t size = front_size(bytes);
  gpumem__block *block = NULL;
  spin_lock(&f->lock);
  if (GPUMEM_UNLIKELY(!f->set || f->stream != stream ||
                      !(block = front_pop(f, cache_class(size))))) {
    spin_unlock(&f->lock);
    *status = GPUMEM_OK;
    return refill_and_allocate(pool, fronts, f, bytes, size, stream, ptr);
  }
  block->requested = bytes;
  pool_live_shard *shard = shard_of(fronts, block->addr);
  spin_lock(&shard->lock);
  bool filed = gpumem__block_map_insert(&shard->map, block);
  spin_unlock(&shard->lock);
  if (GPUMEM_UNLIKELY(!filed)) {
    front_push(f, block);
    spin_unlock(&f->lock);
    return false;
  }
  front_count(f, (int64_t)bytes, 1);
  *ptr = (void *)block->addr;
  spin_unlock(&f->lock);
  *status = GPUMEM_OK;
  return true;
}

/* ---------------------------------------------------------------------------------------
 * Free
 * ------------------------------------------------------------------------------------- */

/* Takes the block at `ptr` out of its shard when it was allocated with `bytes`. *status:
 * a misuse failure when it was allocated with another size (it stays live). NULL when no
 * front handed it out, or on misuse. Under the caller's locks, if any. */
static gpumem__block *take_live(pool_fronts *fronts, void *ptr, size_t bytes,
                                gpumem_status *status) {
  pool_live_shard *shard = shard_of(fronts, (uintptr_t)ptr);
  spin_lock(&shard->lock);
  gpumem__block *block = gpumem__block_map_take(&shard->map, (uintptr_t)ptr);
  size_t requested = block ? block->requested : 0;
  if (block && requested != bytes) {
    gpumem__block_map_put(&shard->map, block); /* room: it was just there */
    block = NULL;
  }
  spin_unlock(&shard->lock);
  *status = GPUMEM_OK;
  if (requested && requested != bytes)
    *status = gpumem__fail(GPUMEM_ERR_MISUSE,
                           "deallocate of %p from a pool with %zu bytes, but it was allocated "
                           "with %zu bytes",
                           ptr, bytes, requested);
  return block;
}

/* Whether a front handed `ptr` out and it is live. */
static bool is_front_live(pool_fronts *fronts, void *ptr) {
  pool_live_shard *shard = shard_of(fronts, (uintptr_t)ptr);
  spin_lock(&shard->lock);
  size_t at = gpumem__block_map_slot_of(&shard->map, (uintptr_t)ptr);
  bool live = shard->map.slots[at].addr != 0;
  spin_unlock(&shard->lock);
  return live;
}

/* A thread past the slots' count: the block goes straight to its stream's set. */
GPUMEM_COLD static bool free_unslotted(pool_resource *pool, pool_fronts *fronts, void *ptr,
                                       size_t bytes, gpumem_stream stream, gpumem_status *status) {
  if (!is_front_live(fronts, ptr))
    return false;
  gpumem__biased_lock_take(&pool->lock);
  free_set *set;
  gpumem__block *block = NULL;
  bool handled = (*status = set_for(pool, stream, &set)) != GPUMEM_OK;
  if (!handled && (block = take_live(fronts, ptr, bytes, status))) {
    atomic_fetch_sub_explicit(&fronts->unslotted_live_bytes, (int64_t)bytes, memory_order_relaxed);
    atomic_fetch_sub_explicit(&fronts->unslotted_live_count, 1, memory_order_relaxed);
    release_block(pool, set, block, GPUMEM__BLOCK_OPEN);
    set->open_frees++;
    seal_if_due(pool, set);
  }
  gpumem__biased_lock_release(&pool->lock);
  return handled || block || *status != GPUMEM_OK; /* else freed meanwhile */
}

/* A list of the front grew past two batches: one batch goes back to the front's set, in
 * this call on its stream (which may seal it). */
GPUMEM_NOINLINE static void give_back_batch(pool_resource *pool, pool_front *f, size_t size) {
  gpumem__biased_lock_take(&pool->lock);
  spin_lock(&f->lock);
  free_set *set = f->set; /* a drain may have emptied the front meanwhile */
  size_t c = cache_class(size);
  for (size_t n = batch_of(size); set && n > 0 && f->lengths[c] > 0; n--) {
    release_block(pool, set, front_pop(f, c), GPUMEM__BLOCK_OPEN);
    set->open_frees++;
  }
  spin_unlock(&f->lock);
  if (set)
    seal_if_due(pool, set);
  gpumem__biased_lock_release(&pool->lock);
}

/* The front cannot take the block as it is (bound to another stream, to none, or full):
 * under the pool's lock it gives its blocks back and binds to the stream of this call. */
GPUMEM_NOINLINE static bool free_slow(pool_resource *pool, pool_fronts *fronts, pool_front *f,
                                      void *ptr, size_t bytes, gpumem_stream stream,
                                      gpumem_status *status) {
  /* Frees of blocks no front handed out bind nothing: the caller's locked path has them. */
  if (!is_front_live(fronts, ptr))
    return false;
  gpumem__biased_lock_take(&pool->lock);
  free_set *set;
  if ((*status = set_for(pool, stream, &set)) != GPUMEM_OK) {
    gpumem__biased_lock_release(&pool->lock); /* nothing changed: the block stays live */
    return true;
  }
  spin_lock(&f->lock);
  if (f->set && f->set != set)
    flush_front(pool, f); /* not a call on that stream: no seal */
  if (!f->set)
    bind(f, set);
  gpumem__block *block = take_live(fronts, ptr, bytes, status);
  size_t size = block ? block->size : 0; /* once the lock is free, a drain may merge it */
  bool over = false;
  if (block) {
    over = front_push(f, block);
    front_count(f, -(int64_t)bytes, -1);
  }
  spin_unlock(&f->lock);
  gpumem__biased_lock_release(&pool->lock);
  if (over)
    give_back_batch(pool, f, size);
  return block || *status != GPUMEM_OK; /* else freed meanwhile: the locked path says so */
}

bool gpumem__pool_front_deallocate(pool_resource *pool, pool_fronts *fronts, void *ptr,
                                   size_t bytes, gpumem_stream stream, bool *owned,
                                   gpumem_status *status) {
  int slot = gpumem__thread_slot(&fronts->slots);
  bool handled;
  if (GPUMEM_UNLIKELY(slot < 0)) {
    handled = free_unslotted(pool, fronts, ptr, bytes, stream, status);
  } else {
    pool_front *f = &fronts->fronts[slot];
    spin_lock(&f->lock);
    if (GPUMEM_UNLIKELY(!f->set || f->stream != stream)) {
      spin_unlock(&f->lock);
      handled = free_slow(pool, fronts, f, ptr, bytes, stream, status);
    } else {
      gpumem__block *block = take_live(fronts, ptr, bytes, status);
      size_t size = block ? block->size : 0; /* once the lock is free, a drain may merge it */
      bool over = false;
      if (block) {
        over = front_push(f, block);
        front_count(f, -(int64_t)bytes, -1);
      }
      spin_unlock(&f->lock);
      if (GPUMEM_UNLIKELY(over))
        give_back_batch(pool, f, size);
      handled = block || *status != GPUMEM_OK;
    }
  }
  if (handled && owned)
    *owned = true;
  return handled;
}
