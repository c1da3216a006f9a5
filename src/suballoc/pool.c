/* pool.c: the coalescing pool, gpumem's general-purpose suballocator.
 *
 * Memory comes from the upstream in chunks and is cut into blocks described on the host
 * (block.h). Free blocks live in one free set per stream: the stream that freed them, which
 * may reuse them at once (stream order). Once a second stream uses the pool, sets are
 * sealed in batches: every SEAL_EVERY-th free on a stream records one event on it, during
 * that free (when the stream is alive by contract), and the blocks freed so far become
 * "sealed". Another stream takes sealed blocks after waiting on that event; it never
 * touches the freeing stream's handle, which the program may have destroyed since. So
 * cross-stream reuse costs one event record per batch of frees and one wait per batch of
 * blocks taken, and a single-stream program never records an event. Free blocks merge only
 * with neighbours of the same set and state, so sealed memory stays sealed.
 *
 * When nothing fits anywhere and the upstream cannot grow, the pool waits for the whole
 * device, after which every free block is safe for every stream, and tries again.
 *
 * Memory fresh from the upstream has no pending work: it sits in a set of its own that any
 * stream takes from without waiting.
 *
 * A single-stream pool keeps up to CACHE_MAX recently freed blocks under 1 MiB whole, in
 * lists by size class, before it coalesces them: programs free and ask again for the same
 * sizes all the time, and a block that goes straight back to the next request of its class
 * costs no splitting, merging or indexing. Under 8 KiB a class is one size; above, a block
 * handed out from the cache may be up to 1/16 larger than the rounded request (cutting it
 * down costs as much as the free index does). The cache is coalesced into the free index
 * when full, before the pool grows, waits for the device or is trimmed, before a
 * free-memory query, and once a second stream comes.
 *
 * Over vmm the pool keeps two regions of its address range, each growing in place: one for
 * requests under 1 MiB, one for the rest. Small blocks then never pin holes between large
 * ones, which is most of what fragmentation costs on real training traces.
 *
 * One biased lock (core/biased_lock.h) guards the pool; everything under it is constant time
 * except steals, growth, seals and trims, which call the device anyway. */
#include "suballoc/pool.h"

#include "core/counters.h"
#include "core/sorted.h"
#include "core/biased_lock.h"
#include "suballoc/block.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROWTH_ROUNDING ((size_t)2 << 20)

/* Most free sets a pool keeps: a program that makes streams without end must not grow them
 * without end. Past this the pool waits for the device, after which every free block is
 * safe for every stream, and folds them all into the fresh set. */
#define MAX_SETS 64

/* How many frees on a stream between two seals: one event record pays for this many. */
#define SEAL_EVERY 16

/* The cache holds blocks under CACHE_LIMIT in one list per class of the free index (a power
 * of two cut in 16: exact sizes under 8 KiB, within 1/16 above), at most CACHE_MAX of them.
 * The limit is that of the small region over vmm: keeping larger blocks whole as well moved
 * large placements enough to cost 2 to 4 % more memory on real traces. */
#define CACHE_LIMIT ((size_t)1 << 20)
#define CACHE_CLASSES 144 /* the classes of sizes under CACHE_LIMIT */
#define CACHE_MAX 1024
/* How many blocks of its class a request looks at for one that is large enough. */
#define CACHE_PROBES 4

/* Regions of a pool that grows in place: requests under SMALL_LIMIT go to their own. */
enum { REGION_LARGE = 0, REGION_SMALL = 1, REGION_COUNT = 2 };
#define SMALL_LIMIT ((size_t)1 << 20)

typedef struct free_set {
  gpumem_stream stream;
  /* Freed on this stream since its last seal: only this stream may reuse them. */
  gpumem__free_index open[REGION_COUNT];
  /* Covered by `event`: another stream may take them after waiting on it. */
  gpumem__free_index sealed[REGION_COUNT];
  unsigned open_frees;
  gpumem__event event; /* recorded on this stream at its last seal */
  /* Blocks freed on this stream and kept whole, by size class (linked through next_free);
   * only while the pool has one stream. */
  gpumem__block *cached[CACHE_CLASSES];
  unsigned cached_count;
} free_set;

/* A region grows from `base` (0: wherever the upstream puts it); growth goes right after its
 * highest block, `tail`, which it extends. */
typedef struct region {
  uintptr_t base;
  gpumem__block *tail;
} region;

typedef struct chunk {
  uintptr_t addr;
  size_t size;
} chunk;

typedef struct pool_resource {
  gpumem_resource header;
  gpumem__biased_lock lock;
  gpumem_pool_options options;
  bool grows_in_place; /* the upstream maps growth right after the previous chunk */
  size_t fixed_block;  /* nonzero: every block has this size (a fixed_size resource's pool) */
  size_t growth_rounding;
  free_set fresh;  /* memory no stream has used yet: taking it needs no wait */
  free_set **sets; /* every set, the fresh one first */
  size_t set_count, set_capacity;
  free_set *last_set;
  bool multi_stream; /* a second stream has used the pool: sets are sealed from then on */
  region regions[REGION_COUNT];
  bool split_regions; /* small requests have a region of their own (over vmm) */
  gpumem__block_map live;
  gpumem__block_slab slab;
  gpumem__sorted chunks; /* of chunk, by address */
  /* Over vmm, trims give back whole pieces of physical memory, which are cut at every
   * multiple of piece_size from piece_origin and at chunks' ends; 0: whole chunks only. */
  size_t piece_size;
  uintptr_t piece_origin;
  gpumem__memory_counters stats;
} pool_resource;

/* ---------------------------------------------------------------------------------------
 * Blocks
 * ------------------------------------------------------------------------------------- */

static region *region_of(pool_resource *pool, const gpumem__block *block) {
  return &pool->regions[block->region];
}

/* The region a request of `size` bytes is served from. */
static size_t region_for(const pool_resource *pool, size_t size) {
  return pool->split_regions && size < SMALL_LIMIT ? REGION_SMALL : REGION_LARGE;
}

/* Cuts `block` at `offset`: it keeps the front, the returned new block the rest, in the
 * same state and set (and in no index). NULL when host memory is exhausted (nothing changed
 * then). */
static gpumem__block *split(pool_resource *pool, gpumem__block *block, size_t offset) {
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

/* Joins `next` (the block right after `block`) into `block`. */
static void merge_next(pool_resource *pool, gpumem__block *block, gpumem__block *next) {
  block->size += next->size;
  block->next_addr = next->next_addr;
  if (next->next_addr)
    next->next_addr->prev_addr = block;
  region *r = region_of(pool, next);
  if (r->tail == next)
    r->tail = block;
  gpumem__block_delete(&pool->slab, next);
}

static bool is_fresh(const pool_resource *pool, const free_set *set) {
  return set == &pool->fresh;
}

/* The state new memory joins `set` in: it has no pending work, so it is sealed (free for
 * all) in the fresh set, and open in a stream's set like anything that stream will use. */
static gpumem__block_state growth_state(const pool_resource *pool, const free_set *set) {
  return is_fresh(pool, set) ? GPUMEM__BLOCK_SEALED : GPUMEM__BLOCK_OPEN;
}

static gpumem__free_index *index_of(free_set *set, const gpumem__block *block) {
  return block->state == GPUMEM__BLOCK_SEALED ? &set->sealed[block->region]
                                              : &set->open[block->region];
}

static bool free_in(const gpumem__block *block, const free_set *set, gpumem__block_state state) {
  return block->state == state && block->owner == set;
}

/* Files a free block in `set` as `state`, merging it with free neighbours of the same set
 * and state (an open block merged into a sealed one would unseal it; address neighbours
 * are always of the same region, as only a region's own tail is linked to its growth). A
 * neighbour that absorbs the block grows in place in the index. Returns the free block
 * that holds the block's memory now. */
static gpumem__block *release_block(pool_resource *pool, free_set *set, gpumem__block *block,
                                    gpumem__block_state state) {
  gpumem__free_index *index =
      state == GPUMEM__BLOCK_SEALED ? &set->sealed[block->region] : &set->open[block->region];
  gpumem__block *prev = block->prev_addr, *next = block->next_addr;
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

/* The best fitting free block of `set` in region `r` for `size` bytes, open or sealed. */
static gpumem__block *find_in_set(const free_set *set, size_t r, size_t size) {
  gpumem__block *open = gpumem__free_index_find(&set->open[r], size);
  if (set->sealed[r].block_count == 0) /* a single-stream pool's sets never hold sealed blocks */
    return open;
  gpumem__block *sealed = gpumem__free_index_find(&set->sealed[r], size);
  if (!open || (sealed && sealed->size < open->size))
    return sealed;
  return open;
}

/* ---------------------------------------------------------------------------------------
 * Cache of freed blocks
 * ------------------------------------------------------------------------------------- */

static void flush_cache(pool_resource *pool, free_set *set);

/* The cache's list for blocks of `size` bytes (under CACHE_LIMIT): the free index's class,
 * flattened. */
static inline size_t cache_class(size_t size) {
  return gpumem__class_index(size >> GPUMEM__BLOCK_UNIT_SHIFT);
}

/* Whether a freed block of `set` may go to its cache rather than the free index. */
static bool cacheable(const pool_resource *pool, const gpumem__block *block) {
  return !pool->multi_stream && block->size < CACHE_LIMIT;
}

/* Whether the cache of `set` has room for one more block. */
static inline bool cache_has_room(const free_set *set) {
  return set->cached_count < CACHE_MAX;
}

/* Files a free block in the cache of `set`, which has room. */
static inline void cache_insert(free_set *set, gpumem__block *block) {
  size_t c = cache_class(block->size);
  block->state = GPUMEM__BLOCK_CACHED;
  block->owner = set;
  block->next_free = set->cached[c];
  set->cached[c] = block;
  set->cached_count++;
}

static void cache_push(pool_resource *pool, free_set *set, gpumem__block *block) {
  if (GPUMEM_UNLIKELY(!cache_has_room(set)))
    flush_cache(pool, set);
  cache_insert(set, block);
}

/* A cached block of at least `size` bytes, of the request's own class (so at most 1/16
 * larger), taken out of the cache (still marked cached); NULL when there is none. */
static inline gpumem__block *cache_pop(free_set *set, size_t size) {
  if (size >= CACHE_LIMIT)
    return NULL;
  gpumem__block **link = &set->cached[cache_class(size)];
  for (int probes = 0; *link && probes < CACHE_PROBES; probes++, link = &(*link)->next_free) {
    gpumem__block *block = *link;
    if (block->size >= size) {
      *link = block->next_free;
      set->cached_count--;
      return block;
    }
  }
  return NULL;
}

/* Coalesces every cached block of `set` into its open index. */
GPUMEM_COLD static void flush_cache(pool_resource *pool, free_set *set) {
  for (size_t c = 0; c < CACHE_CLASSES && set->cached_count > 0; c++) {
    gpumem__block *block = set->cached[c];
    while (block) {
      gpumem__block *next = block->next_free;
      release_block(pool, set, block, GPUMEM__BLOCK_OPEN);
      set->cached_count--;
      block = next;
    }
    set->cached[c] = NULL;
  }
}

/* Moves one cached block of a class above that of `size` bytes (so larger) into the open
 * index, merged with its free neighbours, and returns the free block holding it now; NULL
 * when the cache has none. Classes are scanned in order: it runs only when the free index
 * had nothing for the request. */
static gpumem__block *uncache_larger(pool_resource *pool, free_set *set, size_t size) {
  size_t first = size < CACHE_LIMIT ? cache_class(size) + 1 : CACHE_CLASSES;
  for (size_t c = first; c < CACHE_CLASSES; c++) {
    gpumem__block *block = set->cached[c];
    if (block) {
      set->cached[c] = block->next_free;
      set->cached_count--;
      return release_block(pool, set, block, GPUMEM__BLOCK_OPEN);
    }
  }
  return NULL;
}

/* Flushes every set's cache. */
static void flush_caches(pool_resource *pool) {
  for (size_t i = 1; i < pool->set_count; i++)
    flush_cache(pool, pool->sets[i]);
}

/* ---------------------------------------------------------------------------------------
 * Free sets
 * ------------------------------------------------------------------------------------- */

static bool add_set(pool_resource *pool, free_set *set) {
  if (pool->set_count == pool->set_capacity) {
    size_t capacity = pool->set_capacity ? pool->set_capacity * 2 : 8;
    free_set **sets = realloc(pool->sets, capacity * sizeof *sets);
    if (!sets)
      return false;
    pool->sets = sets;
    pool->set_capacity = capacity;
  }
  pool->sets[pool->set_count++] = set;
  return true;
}

static gpumem_status find_or_add_set(pool_resource *pool, gpumem_stream stream, free_set **out);
static gpumem_status fold_into_fresh(pool_resource *pool, free_set *keep);

/* The free set of `stream`, created on first use (the stream is checked then, once). */
static inline gpumem_status set_for(pool_resource *pool, gpumem_stream stream, free_set **out) {
  free_set *set = pool->last_set;
  if (GPUMEM_LIKELY(set && set->stream == stream)) {
    *out = set;
    return GPUMEM_OK;
  }
  return find_or_add_set(pool, stream, out);
}

GPUMEM_NOINLINE static gpumem_status find_or_add_set(pool_resource *pool, gpumem_stream stream,
                                                     free_set **out) {
  free_set *set;
  for (size_t i = 1; i < pool->set_count; i++) {
    if (pool->sets[i]->stream == stream) {
      *out = pool->last_set = pool->sets[i];
      return GPUMEM_OK;
    }
  }
  gpumem_status status = gpumem__check_stream(pool->header.dev, pool->header.device, stream);
  if (status != GPUMEM_OK)
    return status;
  if (pool->set_count > MAX_SETS && fold_into_fresh(pool, NULL) != GPUMEM_OK)
    gpumem__clear_error(); /* a failed fold only leaves the sets as they were */
  set = calloc(1, sizeof *set);
  if (!set || !add_set(pool, set)) {
    free(set);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "pool: out of host memory for stream state");
  }
  set->stream = stream;
  for (size_t r = 0; r < REGION_COUNT; r++) {
    gpumem__free_index_init(&set->open[r]);
    gpumem__free_index_init(&set->sealed[r]);
  }
  if (!pool->multi_stream && pool->set_count > 2) {
    /* The second stream: from now on every stream's frees get sealed, the others' first at
     * their next free. */
    pool->multi_stream = true;
    flush_caches(pool);
    for (size_t i = 1; i < pool->set_count; i++)
      pool->sets[i]->open_frees = SEAL_EVERY - 1;
  }
  *out = pool->last_set = set;
  return GPUMEM_OK;
}

typedef struct move_context {
  pool_resource *pool;
  free_set *to;
  gpumem__free_index *from_index;
  gpumem__block_state state;
} move_context;

static void move_block(gpumem__block *block, void *user) {
  move_context *move = user;
  gpumem__free_index_remove(move->from_index, block);
  release_block(move->pool, move->to, block, move->state);
}

/* Moves every block of `index` (of another set, or of `to` itself) into `to` as `state`. */
static void move_index(pool_resource *pool, gpumem__free_index *index, free_set *to,
                       gpumem__block_state state) {
  move_context move = {pool, to, index, state};
  gpumem__free_index_each(index, move_block, &move);
}

/* Records the set's event on its stream, covering everything enqueued there so far, and
 * seals its open blocks. Called during a call on that stream. */
GPUMEM_COLD static gpumem_status seal(pool_resource *pool, free_set *set) {
  const gpumem__device_ops *dev = pool->header.dev;
  gpumem_status status = GPUMEM_OK;
  if (!set->event)
    status = dev->event_create(pool->header.device, &set->event);
  if (status == GPUMEM_OK)
    status = dev->event_record(pool->header.device, set->event, set->stream);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "pool: recording the event that lets other streams "
                                        "reuse this stream's frees");
  for (size_t r = 0; r < REGION_COUNT; r++)
    move_index(pool, &set->open[r], set, GPUMEM__BLOCK_SEALED);
  set->open_frees = 0;
  return GPUMEM_OK;
}

/* Forgets an emptied stream set, so that sets of streams the program has finished with do
 * not pile up; the stream gets a new one if it frees again. */
static void drop_set(pool_resource *pool, size_t at) {
  free_set *set = pool->sets[at];
  if (set->event)
    pool->header.dev->event_destroy(set->event);
  if (pool->last_set == set)
    pool->last_set = NULL;
  pool->sets[at] = pool->sets[--pool->set_count];
  free(set);
}

static size_t open_blocks(const free_set *set) {
  size_t count = set->cached_count;
  for (size_t r = 0; r < REGION_COUNT; r++)
    count += set->open[r].block_count;
  return count;
}

/* Gives `to` the sealed blocks of region `r` of the first other set holding one of `size`
 * bytes there, after making `to`'s stream wait on that set's event (fresh memory needs no
 * wait). *out: the fitting block, or NULL when no set has one. */
static gpumem_status steal(pool_resource *pool, free_set *to, size_t r, size_t size,
                           gpumem__block **out) {
  *out = NULL;
  for (size_t i = 0; i < pool->set_count; i++) {
    free_set *from = pool->sets[i];
    if (from == to || from->sealed[r].total_bytes < size ||
        !gpumem__free_index_find(&from->sealed[r], size))
      continue;
    if (!is_fresh(pool, from)) {
      gpumem_status status =
          pool->header.dev->stream_wait_event(pool->header.device, to->stream, from->event);
      if (status != GPUMEM_OK)
        return gpumem__fail_context(status, "pool: making a stream wait for another's frees");
    }
    /* Taken blocks are open in `to`: their last use is on another stream, which only
     * `to`'s own next seal covers for third streams. The wait covers both regions. */
    for (size_t other = 0; other < REGION_COUNT; other++)
      move_index(pool, &from->sealed[other], to, GPUMEM__BLOCK_OPEN);
    if (!is_fresh(pool, from) && open_blocks(from) == 0)
      drop_set(pool, i);
    *out = find_in_set(to, r, size);
    return GPUMEM_OK;
  }
  return GPUMEM_OK;
}

/* Waits for the whole device; then no free block has pending work, so every set's blocks
 * join the fresh set (where neighbours from different streams merge) and the other sets
 * are dropped, but for `keep` (the set of a call in progress, emptied; may be NULL). */
static gpumem_status fold_into_fresh(pool_resource *pool, free_set *keep) {
  gpumem_status status = pool->header.dev->device_synchronize(pool->header.device);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "pool: waiting for the device");
  flush_caches(pool);
  for (size_t i = pool->set_count; i-- > 1;) {
    free_set *set = pool->sets[i];
    for (size_t r = 0; r < REGION_COUNT; r++) {
      move_index(pool, &set->open[r], &pool->fresh, GPUMEM__BLOCK_SEALED);
      move_index(pool, &set->sealed[r], &pool->fresh, GPUMEM__BLOCK_SEALED);
    }
    if (set != keep)
      drop_set(pool, i);
  }
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Chunks and growth
 * ------------------------------------------------------------------------------------- */

static chunk *chunk_at(const pool_resource *pool, size_t at) {
  return gpumem__sorted_at(&pool->chunks, at);
}

/* How much to ask of the upstream for `size` bytes: rounded up to the growth rounding (by
 * division: it need not be a power of two) within the maximum. NULL and *step, or why not. */
static const char *growth_step(const pool_resource *pool, size_t size, size_t *step) {
  size_t rounding = pool->growth_rounding;
  if (size > SIZE_MAX - rounding)
    return "the request is larger than any pool can hold";
  size_t rounded = (size + rounding - 1) / rounding * rounding;
  /* The least step: over vmm whole granules, which is what gets mapped whatever is asked
   * (no overflow: the rounding is a multiple of the granularity). */
  size_t least =
      pool->grows_in_place ? gpumem__align_up(size, pool->header.upstream->caps.granularity) : size;
  size_t max = pool->options.maximum_size;
  if (max) {
    uint64_t reserved = gpumem__counters_reserved(&pool->stats);
    if (reserved >= max || max - reserved < least)
      return "the pool has reached its maximum size";
    if (rounded > max - reserved)
      rounded = least;
  }
  *step = rounded;
  return NULL;
}

/* Memory for region `r` of `set` for `size` bytes. Growing in place, it goes right after the
 * region's last block; if that block is free in `set`, the two merge and only the shortfall
 * is asked for. Otherwise, or when that address range is taken, the full step goes wherever
 * the upstream puts it. */
static gpumem_status take_from_upstream(pool_resource *pool, region *r, free_set *set, size_t size,
                                        void **memory, size_t *taken, const char **why) {
  size_t full = 0;
  /* Near the maximum the shortfall may fit where the full step does not: the full step's
   * refusal counts only where the shortfall does not apply. */
  const char *full_why = growth_step(pool, size, &full);
  gpumem_resource *up = pool->header.upstream;
  const gpumem__block *tail = r->tail;
  uintptr_t next = tail ? tail->addr + tail->size : r->base;
  if (pool->grows_in_place && next) {
    size_t shortfall = 0;
    bool tail_grows = tail && free_in(tail, set, growth_state(pool, set)) && tail->size < size &&
                      !growth_step(pool, size - tail->size, &shortfall);
    size_t wanted = tail_grows ? shortfall : full;
    if ((tail_grows || !full_why) && up->ops->allocate_at(up, next, wanted, memory) == GPUMEM_OK) {
      *taken = wanted;
      return GPUMEM_OK;
    }
  }
  if ((*why = full_why))
    return GPUMEM_ERR_OUT_OF_MEMORY;
  *taken = full;
  *why = "its upstream could not give more memory";
  return up->ops->allocate(up, full, GPUMEM_DEFAULT_ALIGNMENT, set->stream, memory);
}

/* Takes memory for at least `size` bytes from the upstream for region `ri` on `set`'s
 * stream and files it in `set`; *grown_block: the free block holding it now (merged with
 * the region's free tail when it grew in place). On failure *why says why, for the
 * out-of-memory message. */
static gpumem_status grow(pool_resource *pool, free_set *set, size_t ri, size_t size,
                          const char **why, gpumem__block **grown_block) {
  gpumem__block *block = gpumem__block_new(&pool->slab);
  if (!block) {
    *why = "the host is out of memory for the pool's bookkeeping";
    return GPUMEM_ERR_OUT_OF_MEMORY;
  }
  region *r = &pool->regions[ri];
  void *memory;
  size_t step = 0;
  gpumem_status status = take_from_upstream(pool, r, set, size, &memory, &step, why);
  chunk grown = {(uintptr_t)memory, step};
  if (status == GPUMEM_OK && !gpumem__sorted_insert(&pool->chunks, &grown)) {
    gpumem_resource *up = pool->header.upstream;
    up->ops->deallocate(up, memory, step, GPUMEM_DEFAULT_ALIGNMENT, set->stream);
    *why = "the host is out of memory for the pool's bookkeeping";
    status = GPUMEM_ERR_OUT_OF_MEMORY;
  }
  if (status != GPUMEM_OK) {
    gpumem__block_delete(&pool->slab, block);
    return status;
  }
  block->addr = (uintptr_t)memory;
  block->size = step;
  block->region = (uint8_t)ri;
  gpumem__block *last = r->tail;
  if (pool->grows_in_place && last && last->addr + last->size == block->addr) {
    block->prev_addr = last;
    last->next_addr = block;
  }
  /* The region's growth follows its highest chunk, wherever the upstream put it. */
  if (!last || block->addr > last->addr)
    r->tail = block;
  gpumem__counters_add_reserved(&pool->stats, step);
  *grown_block = release_block(pool, set, block, growth_state(pool, set));
  return GPUMEM_OK;
}

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
  size_t old_size = block->size;
  gpumem__block *rest = split(pool, block, gpumem__align_up(block->addr, alignment) - block->addr);
  if (!rest)
    return NULL;
  gpumem__free_index_resized(index, block, old_size);
  gpumem__free_index_insert(index, rest);
  return rest;
}

/* Cuts an allocation of `size` bytes at `alignment` out of the front of free block `block`
 * of `set` (the lowest addresses first, which keeps a pool that grows in place low). The
 * free rest stays where it was, usually without moving in the index; the piece skipped for
 * an over-aligned allocation stays free too. NULL when host memory for a split is exhausted
 * (nothing changed then). In line: every allocation from the free index comes here. */
static inline gpumem__block *carve(pool_resource *pool, free_set *set, gpumem__block *block,
                                   size_t size, size_t alignment) {
  gpumem__free_index *index = index_of(set, block);
  if (GPUMEM_UNLIKELY(block->addr & (alignment - 1)) &&
      !(block = skip_to_alignment(pool, index, block, alignment)))
    return NULL;
  gpumem__block *taken;
  if (block->size - size < GPUMEM__BLOCK_UNIT || !(taken = split_front(pool, block, size))) {
    /* An exact fit, or no host memory to split: the caller gets the whole block. */
    gpumem__free_index_remove(index, block);
    taken = block;
  } else {
    gpumem__free_index_resized(index, block, block->size + size);
  }
  taken->state = GPUMEM__BLOCK_ALLOCATED;
  return taken;
}

/* A fitting block of `set` in any region, or from another set's sealed blocks in any. */
static gpumem_status find_anywhere(pool_resource *pool, free_set *set, size_t search,
                                   gpumem__block **out) {
  gpumem_status status = GPUMEM_OK;
  *out = NULL;
  for (size_t r = 0; r < REGION_COUNT && !*out; r++)
    *out = find_in_set(set, r, search);
  for (size_t r = 0; r < REGION_COUNT && !*out && status == GPUMEM_OK; r++)
    status = steal(pool, set, r, search, out);
  return status;
}

/* Finds or makes a free block for the request: in the request's region, the stream's own
 * blocks, then other streams' sealed blocks, then growth; when growth fails, any region,
 * and last a wait for the whole device. */
static gpumem_status find_block(pool_resource *pool, free_set *set, size_t search,
                                gpumem__block **out, const char **why) {
  size_t ri = region_for(pool, search);
  gpumem__block *block = find_in_set(set, ri, search);
  gpumem_status status = GPUMEM_OK;
  if (!block)
    status = steal(pool, set, ri, search, &block);
  /* Cached blocks are under CACHE_LIMIT: they may make room in the small region (or a pool
   * without regions), never in the large one. One of a larger class is enough; only when
   * there is none does the whole cache merge, which may join smaller ones into room. */
  if (status == GPUMEM_OK && !block && set->cached_count > 0 &&
      (ri == REGION_SMALL || !pool->split_regions) &&
      !(block = uncache_larger(pool, set, search))) {
    flush_cache(pool, set);
    block = find_in_set(set, ri, search);
  }
  if (status == GPUMEM_OK && !block)
    status = grow(pool, set, ri, search, why, &block);
  if (status == GPUMEM_ERR_OUT_OF_MEMORY) {
    status = find_anywhere(pool, set, search, &block);
    if (status == GPUMEM_OK && !block && pool->set_count > 1) {
      /* Other streams' unsealed blocks, or blocks of streams gone since, may fit. */
      status = fold_into_fresh(pool, set);
      if (status == GPUMEM_OK)
        status = find_anywhere(pool, set, search, &block);
    }
    if (status == GPUMEM_OK && !block)
      status = GPUMEM_ERR_OUT_OF_MEMORY;
  }
  *out = block;
  return status;
}

/* Files an allocated `block` in the live map and counts it; false when the map cannot grow
 * (the block is free again then). */
static inline bool hand_out(pool_resource *pool, free_set *set, gpumem__block *block,
                            size_t bytes) {
  block->requested = bytes;
  if (GPUMEM_UNLIKELY(!gpumem__block_map_insert(&pool->live, block))) {
    release_block(pool, set, block, GPUMEM__BLOCK_OPEN);
    return false;
  }
  gpumem__counters_allocated(&pool->stats, bytes);
  return true;
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
  gpumem_status status = set_for(pool, stream, &set);
  if (status == GPUMEM_OK && alignment == GPUMEM_DEFAULT_ALIGNMENT &&
      (block = cache_pop(set, size))) {
    block->state = GPUMEM__BLOCK_ALLOCATED;
  } else if (status == GPUMEM_OK) {
    status = find_block(pool, set, search, &block, &why);
    if (status == GPUMEM_OK && block)
      block = carve(pool, set, block, size, alignment);
  }
  if (status == GPUMEM_OK && block && hand_out(pool, set, block, bytes)) {
    gpumem__biased_lock_release(&pool->lock);
    *ptr = (void *)block->addr;
    return GPUMEM_OK;
  }
  gpumem__biased_lock_release(&pool->lock);
  if (status == GPUMEM_OK || status == GPUMEM_ERR_OUT_OF_MEMORY)
    return gpumem__fail_out_of_memory(&pool->header, bytes, why);
  return status;
}

/* Allocation from the free index of the last call's set; allocate_slow_then_unlock when nothing
 * fits. Called with the lock held; releases it. */
static gpumem_status allocate_from_index_then_unlock(pool_resource *pool, free_set *set,
                                                     size_t bytes, size_t size,
                                                     gpumem_stream stream, void **ptr) {
  gpumem__block *block = find_in_set(set, region_for(pool, size), size);
  if (block && (block = carve(pool, set, block, size, GPUMEM_DEFAULT_ALIGNMENT)) &&
      GPUMEM_LIKELY(hand_out(pool, set, block, bytes))) {
    gpumem__biased_lock_release(&pool->lock);
    *ptr = (void *)block->addr;
    return GPUMEM_OK;
  }
  return allocate_slow_then_unlock(pool, bytes, size, GPUMEM_DEFAULT_ALIGNMENT, stream, ptr);
}

/* A cached block back to the cache it came from, when the live map must grow first. */
GPUMEM_COLD static gpumem_status unpop_and_allocate_then_unlock(pool_resource *pool, free_set *set,
                                                                gpumem__block *block, size_t bytes,
                                                                size_t size, gpumem_stream stream,
                                                                void **ptr) {
  cache_insert(set, block);
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
  gpumem__block *block = cache_pop(set, size);
  if (!block)
    return allocate_from_index_then_unlock(pool, set, bytes, size, stream, ptr);
  if (GPUMEM_UNLIKELY(!gpumem__block_map_has_room(&pool->live)))
    return unpop_and_allocate_then_unlock(pool, set, block, bytes, size, stream,
                                          ptr); /* the map must grow */
  block->state = GPUMEM__BLOCK_ALLOCATED;
  block->requested = bytes;
  gpumem__block_map_put(&pool->live, block);
  gpumem__counters_allocated(&pool->stats, bytes);
  gpumem__biased_lock_release(&pool->lock);
  *ptr = (void *)block->addr;
  return GPUMEM_OK;
}

/* Pools shared between threads (or where locks cannot be biased) take this path always. */
GPUMEM_NOINLINE static gpumem_status allocate_shared(pool_resource *pool, size_t bytes,
                                                     size_t alignment, gpumem_stream stream,
                                                     void **ptr) {
  gpumem__biased_lock_take_shared(&pool->lock);
  return allocate_then_unlock(pool, bytes, alignment, stream, ptr);
}

static gpumem_status pool_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                   gpumem_stream stream, void **ptr) {
  pool_resource *pool = (pool_resource *)mr;
  if (GPUMEM_UNLIKELY(!gpumem__biased_lock_try_as_owner(&pool->lock)))
    return allocate_shared(pool, bytes, alignment, stream, ptr);
  return allocate_then_unlock(pool, bytes, alignment, stream, ptr);
}

/* Frees `block` (taken from the live map, its size checked) on `stream`; on failure puts
 * it back in the live map, so that nothing changes. Called with the lock held. */
static inline gpumem_status free_block(pool_resource *pool, gpumem__block *block, size_t bytes,
                                       gpumem_stream stream) {
  free_set *set = NULL;
  gpumem_status status = set_for(pool, stream, &set);
  /* A seal is due: record the event first, so that if it fails nothing has changed. */
  bool sealing = status == GPUMEM_OK && pool->multi_stream && set->open_frees + 1 >= SEAL_EVERY;
  if (sealing)
    status = seal(pool, set);
  if (GPUMEM_UNLIKELY(status != GPUMEM_OK)) {
    gpumem__block_map_insert(&pool->live, block);
    return status;
  }
  gpumem__counters_freed(&pool->stats, bytes);
  if (cacheable(pool, block)) {
    cache_push(pool, set, block);
    return GPUMEM_OK;
  }
  /* Just after a seal this block is covered by the event too: the record captured all work
   * enqueued before this free. */
  release_block(pool, set, block, sealing ? GPUMEM__BLOCK_SEALED : GPUMEM__BLOCK_OPEN);
  if (!sealing)
    set->open_frees++;
  return GPUMEM_OK;
}

/* A free the pool refuses: `block` (taken from the live map, or NULL) was not allocated
 * with `bytes`. Called with the lock held; releases it. */
GPUMEM_COLD static gpumem_status refuse_free_then_unlock(pool_resource *pool, gpumem__block *block,
                                                         void *ptr, size_t bytes, bool *owned) {
  size_t requested = block ? block->requested : 0;
  if (block) /* a wrong size: the block stays live (the map has room: it was just there) */
    gpumem__block_map_insert(&pool->live, block);
  gpumem__biased_lock_release(&pool->lock);
  if (owned)
    *owned = block != NULL;
  if (!block)
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
static gpumem_status free_and_unlock(pool_resource *pool, gpumem__block *block, size_t bytes,
                                     gpumem_stream stream, bool *owned) {
  gpumem_status status = free_block(pool, block, bytes, stream);
  gpumem__biased_lock_release(&pool->lock);
  if (owned)
    *owned = true;
  return status;
}

/* deallocate with the lock held, which it releases. The common case, a small block freed
 * on the stream of the last call, goes into the cache without a call; every other call is
 * the function's last act. */
static inline gpumem_status deallocate_then_unlock(pool_resource *pool, void *ptr, size_t bytes,
                                                   gpumem_stream stream, bool *owned) {
  gpumem__block *block = gpumem__block_map_take(&pool->live, (uintptr_t)ptr);
  if (GPUMEM_UNLIKELY(!block || block->requested != bytes))
    return refuse_free_then_unlock(pool, block, ptr, bytes, owned);
  free_set *set = pool->last_set;
  if (!set || set->stream != stream || !cacheable(pool, block) || !cache_has_room(set))
    return free_and_unlock(pool, block, bytes, stream, owned);
  gpumem__counters_freed(&pool->stats, bytes);
  cache_insert(set, block);
  gpumem__biased_lock_release(&pool->lock);
  if (owned)
    *owned = true;
  return GPUMEM_OK;
}

GPUMEM_NOINLINE static gpumem_status deallocate_shared(pool_resource *pool, void *ptr, size_t bytes,
                                                       gpumem_stream stream, bool *owned) {
  gpumem__biased_lock_take_shared(&pool->lock);
  return deallocate_then_unlock(pool, ptr, bytes, stream, owned);
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
 * Trim
 * ------------------------------------------------------------------------------------- */

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
 * dropped), so the live map and the fresh set's indexes hold them all. */
GPUMEM_COLD static gpumem__block *highest_block(pool_resource *pool, uint8_t ri,
                                                const gpumem__block *skip) {
  highest_context h = {ri, skip, NULL};
  for (size_t i = 0; i < pool->live.capacity; i++)
    if (pool->live.slots[i].addr)
      note_highest(pool->live.slots[i].block, &h);
  for (size_t r = 0; r < REGION_COUNT; r++) {
    gpumem__free_index_each(&pool->fresh.open[r], note_highest, &h);
    gpumem__free_index_each(&pool->fresh.sealed[r], note_highest, &h);
  }
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
  /* Growth now continues after the region's block before it; when that is not linked (a
   * chunk in between went back earlier), after the highest block left, so that growth lands
   * next to it and links to it rather than going to the region's base, which is taken. */
  if (r->tail != block)
    return;
  if (prev || !pool->grows_in_place) /* without growth in place, chunks are never linked */
    r->tail = prev;
  else
    r->tail = highest_block(pool, block->region, block);
}

/* The first range [*a, *b) of free block `block` that can go back to the upstream, in chunk
 * *at: a whole chunk, or over vmm whole pieces of one. False when there is none. */
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
    size_t p = pool->piece_size;
    if (p) { /* round in to piece boundaries, where the chunk's own ends are not reached */
      if (lo != c->addr)
        lo = pool->piece_origin + (lo - pool->piece_origin + p - 1) / p * p;
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
  /* The device was synchronized before the trim: no work uses the memory any more, and the
   * default stream, unlike a freeing stream, cannot have been destroyed. */
  if (a == c->addr && b == c_end)
    status = up->ops->deallocate(up, (void *)a, b - a, GPUMEM_DEFAULT_ALIGNMENT, NULL);
  else
    status = up->ops->unmap_pieces(up, a, b - a, &(int){0});
  if (status != GPUMEM_OK)
    return status;
  if (a == c->addr && b == c_end) {
    gpumem__sorted_remove_at(&pool->chunks, at);
  } else if (a == c->addr) {
    *c = (chunk){b, c_end - b};
  } else {
    c->size = a - c->addr;
    if (b != c_end)
      gpumem__sorted_insert_at(&pool->chunks, at + 1, &(chunk){b, c_end - b});
  }
  gpumem__counters_sub_reserved(&pool->stats, b - a);
  return GPUMEM_OK;
}

/* Gives back to the upstream every whole chunk, and over vmm every run of whole pieces,
 * lying inside free block `block` of the fresh set. The rest of the block stays free. */
static gpumem_status trim_block(pool_resource *pool, gpumem__block *block, size_t *released) {
  free_set *set = &pool->fresh;
  gpumem__free_index *index = index_of(set, block); /* every piece stays in its region */
  gpumem__free_index_remove(index, block);
  size_t at;
  uintptr_t a, b;
  while (block && next_releasable(pool, block, &at, &a, &b)) {
    /* Only a cut in the middle makes a chunk record more: whole chunks and ends go back
     * without host memory, as before pieces. */
    const chunk *c = chunk_at(pool, at);
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
      release_block(pool, set, piece, GPUMEM__BLOCK_SEALED);
      block = NULL;
      break;
    }
    gpumem_status status = release_range(pool, at, a, b);
    if (status != GPUMEM_OK) {
      /* Undo the cuts: `after` is in no index yet, so it rejoins `piece` directly, and the
       * whole is filed back (merging with the front piece, which is). */
      if (after)
        merge_next(pool, piece, after);
      release_block(pool, set, piece, GPUMEM__BLOCK_SEALED);
      return status;
    }
    unlink_block(pool, piece);
    gpumem__block_delete(&pool->slab, piece);
    *released += b - a;
    block = after;
  }
  if (block)
    gpumem__free_index_insert(index, block);
  return GPUMEM_OK;
}

/* Gives back every whole free chunk; called with the lock held. Freed blocks may still be
 * used by work on their streams, so this waits for the device and folds every free block
 * into the fresh set first, where neighbours from different streams merge into whole
 * chunks. */
static gpumem_status trim_all(pool_resource *pool, size_t *released) {
  gpumem_status status = fold_into_fresh(pool, NULL);
  block_list list = {0};
  for (size_t r = 0; r < REGION_COUNT && status == GPUMEM_OK; r++)
    gpumem__free_index_each(&pool->fresh.sealed[r], collect_block, &list);
  if (list.failed)
    status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "pool trim: out of host memory");
  for (size_t j = 0; j < list.count && status == GPUMEM_OK; j++)
    status = trim_block(pool, list.items[j], released);
  free(list.items);
  return status;
}

gpumem_status gpumem_pool_trim(gpumem_resource *mr, size_t *released) {
  if (!gpumem__is_pool(mr))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_pool_trim: %s is not a pool",
                        mr ? gpumem_resource_name(mr) : "NULL");
  pool_resource *pool = (pool_resource *)mr;
  size_t total = 0;
  gpumem__biased_lock_take(&pool->lock);
  gpumem_status status = trim_all(pool, &total);
  gpumem__biased_lock_release(&pool->lock);
  if (released)
    *released = total;
  return status;
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
  if (what != GPUMEM_QUERY_LARGEST_FREE_BLOCK && what != GPUMEM_QUERY_FREE_BLOCKS &&
      what != GPUMEM_QUERY_FREE_BYTES)
    return gpumem__counters_query(&pool->stats, what, out);
  uint64_t value = 0;
  gpumem__biased_lock_take(&pool->lock);
  /* Cached blocks are free memory that is not merged yet; the answer is about the merged
   * state, which is what an allocation that misses the cache sees. */
  flush_caches(pool);
  for (size_t i = 0; i < pool->set_count; i++)
    for (size_t r = 0; r < REGION_COUNT; r++) {
      add_free_fact(what, &pool->sets[i]->open[r], &value);
      add_free_fact(what, &pool->sets[i]->sealed[r], &value);
    }
  gpumem__biased_lock_release(&pool->lock);
  *out = value;
  return GPUMEM_OK;
}

static void pool_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const pool_resource *pool = (const pool_resource *)mr;
  char upstream[512];
  gpumem__describe(mr->upstream, upstream, sizeof upstream);
  snprintf(buf, size, "pool(%s, initial=%zu, max=%zu)", upstream, pool->options.initial_size,
           pool->options.maximum_size);
}

static void free_structures(pool_resource *pool) {
  for (size_t i = 0; i < pool->set_count; i++) {
    if (pool->sets[i]->event)
      pool->header.dev->event_destroy(pool->sets[i]->event);
    if (!is_fresh(pool, pool->sets[i]))
      free(pool->sets[i]);
  }
  free(pool->sets);
  gpumem__sorted_free(&pool->chunks);
  gpumem__block_map_destroy(&pool->live);
  gpumem__block_slab_destroy(&pool->slab);
  free(pool);
}

static gpumem_status pool_destroy(gpumem_resource *mr) {
  pool_resource *pool = (pool_resource *)mr;
  size_t released = 0;
  gpumem_status status = trim_all(pool, &released);
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
};

bool gpumem__is_pool(const gpumem_resource *mr) {
  return mr && mr->ops == &pool_ops;
}

/* The default initial size: half the device's free memory for device-memory upstreams, none
 * for those that grow in place or hand out host memory. */
static gpumem_status default_initial_size(const gpumem_resource *upstream, size_t *size) {
  gpumem_memory_kind memory = upstream->caps.memory;
  *size = 0;
  if (gpumem__places_at_address(upstream) || memory == GPUMEM_MEMORY_PINNED_HOST ||
      memory == GPUMEM_MEMORY_HOST)
    return GPUMEM_OK;
  size_t free_bytes, total_bytes;
  gpumem_status status = upstream->dev->mem_info(upstream->device, &free_bytes, &total_bytes);
  if (status == GPUMEM_OK)
    *size = (free_bytes / 2) & ~(GROWTH_ROUNDING - 1);
  return status;
}

static gpumem_status init_pool(pool_resource *pool, gpumem_resource *upstream,
                               const gpumem_pool_options *options, size_t growth_rounding,
                               size_t fixed_block) {
  gpumem__resource_init_suballocator(&pool->header, &pool_ops, upstream);
  pool->options = *options;
  pool->fixed_block = fixed_block;
  pool->chunks = (gpumem__sorted)GPUMEM__SORTED_INIT(chunk);
  pool->grows_in_place = gpumem__places_at_address(upstream);
  pool->growth_rounding = growth_rounding ? growth_rounding : GROWTH_ROUNDING;
  for (size_t r = 0; r < REGION_COUNT; r++) {
    gpumem__free_index_init(&pool->fresh.open[r]);
    gpumem__free_index_init(&pool->fresh.sealed[r]);
  }
  if (pool->grows_in_place) {
    /* Growth steps are whole granules (by default one), or the vmm would map more than the
     * pool counts. */
    size_t granularity = upstream->caps.granularity;
    pool->growth_rounding =
        growth_rounding ? gpumem__align_up(growth_rounding, granularity) : granularity;
    /* Large requests grow up from the start of the vmm range, small ones from its middle;
     * a pool of equal blocks has no small requests to keep apart. */
    uintptr_t base = upstream->caps.range_base;
    size_t size = upstream->caps.range_size;
    pool->regions[REGION_LARGE].base = base;
    pool->piece_origin = base;
    pool->piece_size = upstream->caps.piece_size;
    pool->regions[REGION_SMALL].base = base + size / 2 / granularity * granularity;
    pool->split_regions = !fixed_block;
  }
  gpumem__block_slab_init(&pool->slab);
  gpumem__counters_init(&pool->stats);
  if (!gpumem__block_map_init(&pool->live) || !add_set(pool, &pool->fresh))
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_pool_create: out of host memory");
  if (options->initial_size == 0)
    return GPUMEM_OK;
  const char *why = "";
  gpumem__block *initial;
  gpumem_status status =
      grow(pool, &pool->fresh, REGION_LARGE, options->initial_size, &why, &initial);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "gpumem_pool_create: taking the initial %zu bytes (%s)",
                                options->initial_size, why);
  return GPUMEM_OK;
}

gpumem_status gpumem_pool_create(gpumem_resource *upstream, const gpumem_pool_options *opts,
                                 gpumem_resource **out) {
  if (!upstream || !out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_pool_create: %s is NULL",
                        upstream ? "out" : "the upstream resource");
  gpumem_pool_options options = opts ? *opts : (gpumem_pool_options){0};
  if (options.initial_size == 0) {
    gpumem_status status = default_initial_size(upstream, &options.initial_size);
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
  if (options.maximum_size && options.initial_size > options.maximum_size)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_pool_create: initial size %zu exceeds the maximum size %zu",
                        options.initial_size, options.maximum_size);
  pool_resource *pool = calloc(1, sizeof *pool);
  if (!pool)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_pool_create: out of host memory");
  gpumem_status status = init_pool(pool, upstream, &options, growth_rounding, fixed_block);
  if (status != GPUMEM_OK) {
    /* Only a failed initial growth can leave anything to give back: nothing was taken. */
    gpumem_resource_release(pool->header.upstream);
    free_structures(pool);
    return status;
  }
  *out = &pool->header;
  return GPUMEM_OK;
}
