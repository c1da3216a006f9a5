/* pool.c: the coalescing pool, gpumem's general-purpose suballocator.
 *
 * Memory comes from the upstream in chunks and is cut into blocks described on the host
 * (block.h). Free blocks live in one free set per stream: the stream that freed them. An
 * allocation on stream T looks in T's set first (safe at once: stream order); if nothing
 * fits it steals: T is made to wait for another stream S (one event recorded on S, waited on
 * by T) and all of S's free blocks move to T, so one event pays for many blocks. Only then
 * does the pool grow. A freed block merges with free neighbours of the same set.
 *
 * Memory fresh from the upstream has no pending work, so it sits in a set of its own that
 * any stream takes from without waiting.
 *
 * One spinlock guards the pool; everything under it is constant time except steals, growth
 * and trims, which call the device anyway. */
#include "suballoc/pool.h"

#include "core/spinlock.h"
#include "suballoc/block.h"
#include "suballoc/suballoc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROWTH_ROUNDING ((size_t)2 << 20)

typedef struct free_set {
  gpumem_stream stream;
  bool fresh; /* memory no stream has used yet: taking it needs no wait */
  gpumem__free_index index;
  gpumem__event event; /* recorded on this stream when another steals its blocks */
} free_set;

typedef struct chunk {
  uintptr_t addr;
  size_t size;
} chunk;

typedef struct pool_resource {
  gpumem_resource header;
  gpumem__spinlock lock;
  gpumem_pool_options options;
  bool grows_in_place; /* the upstream maps growth right after the previous chunk */
  size_t growth_rounding;
  free_set fresh;
  free_set **sets; /* every set, the fresh one first */
  size_t set_count, set_capacity;
  free_set *last_set;
  gpumem__block *tail; /* the highest block, which in-place growth extends */
  gpumem__block_map live;
  gpumem__block_slab slab;
  chunk *chunks; /* sorted by address */
  size_t chunk_count, chunk_capacity;
  gpumem__suballoc_stats stats;
} pool_resource;

/* ---------------------------------------------------------------------------------------
 * Blocks
 * ------------------------------------------------------------------------------------- */

/* Cuts `block` at `offset`: it keeps the front, the returned new block the rest. NULL when
 * host memory is exhausted (nothing changed then). */
static gpumem__block *split(pool_resource *pool, gpumem__block *block, size_t offset) {
  gpumem__block *rest = gpumem__block_new(&pool->slab);
  if (!rest)
    return NULL;
  rest->addr = block->addr + offset;
  rest->size = block->size - offset;
  rest->prev_addr = block;
  rest->next_addr = block->next_addr;
  if (block->next_addr)
    block->next_addr->prev_addr = rest;
  block->next_addr = rest;
  block->size = offset;
  if (pool->tail == block)
    pool->tail = rest;
  return rest;
}

/* Joins `next` (the block right after `block`) into `block`. */
static void merge_next(pool_resource *pool, gpumem__block *block, gpumem__block *next) {
  block->size += next->size;
  block->next_addr = next->next_addr;
  if (next->next_addr)
    next->next_addr->prev_addr = block;
  if (pool->tail == next)
    pool->tail = block;
  gpumem__block_delete(&pool->slab, next);
}

/* Files a free block in `set`, merging it with free neighbours of the same set. */
static void release_block(pool_resource *pool, free_set *set, gpumem__block *block) {
  gpumem__block *prev = block->prev_addr, *next = block->next_addr;
  if (prev && prev->is_free && prev->owner == set) {
    gpumem__free_index_remove(&set->index, prev);
    merge_next(pool, prev, block);
    block = prev;
  }
  if (next && next->is_free && next->owner == set) {
    gpumem__free_index_remove(&set->index, next);
    merge_next(pool, block, next);
  }
  block->is_free = 1;
  block->owner = set;
  gpumem__free_index_insert(&set->index, block);
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

/* The free set of `stream`, created on first use (the stream is checked then, once). */
static gpumem_status set_for(pool_resource *pool, gpumem_stream stream, free_set **out) {
  free_set *set = pool->last_set;
  if (GPUMEM_LIKELY(set && set->stream == stream)) {
    *out = set;
    return GPUMEM_OK;
  }
  for (size_t i = 1; i < pool->set_count; i++) {
    if (pool->sets[i]->stream == stream) {
      *out = pool->last_set = pool->sets[i];
      return GPUMEM_OK;
    }
  }
  gpumem_status status = gpumem__check_stream(pool->header.dev, pool->header.device, stream);
  if (status != GPUMEM_OK)
    return status;
  set = calloc(1, sizeof *set);
  if (!set || !add_set(pool, set)) {
    free(set);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "pool: out of host memory for stream state");
  }
  set->stream = stream;
  gpumem__free_index_init(&set->index);
  *out = pool->last_set = set;
  return GPUMEM_OK;
}

typedef struct move_context {
  pool_resource *pool;
  free_set *from, *to;
} move_context;

static void move_block(gpumem__block *block, void *user) {
  move_context *move = user;
  gpumem__free_index_remove(&move->from->index, block);
  release_block(move->pool, move->to, block);
}

/* Makes `to`'s stream wait for everything enqueued on `from`'s stream so far. If the event
 * cannot be recorded there (the program destroyed that stream, whose work still runs to
 * its end), waiting for the whole device is correct too, only slower. */
static gpumem_status wait_for(pool_resource *pool, free_set *from, free_set *to) {
  if (from->fresh)
    return GPUMEM_OK;
  const gpumem__device_ops *dev = pool->header.dev;
  gpumem_status status = GPUMEM_OK;
  if (!from->event)
    status = dev->event_create(pool->header.device, &from->event);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "pool: creating the event of a stream");
  if (dev->event_record(from->event, from->stream) == GPUMEM_OK)
    status = dev->stream_wait_event(to->stream, from->event);
  else
    status = dev->device_synchronize(pool->header.device);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "pool: making a stream wait for another's frees");
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

/* Gives `to` the free blocks of the first set holding one of `size` bytes, after making
 * `to` wait for that set's stream. *out: the fitting block, or NULL when no set has one. */
static gpumem_status steal(pool_resource *pool, free_set *to, size_t size, gpumem__block **out) {
  *out = NULL;
  for (size_t i = 0; i < pool->set_count; i++) {
    free_set *from = pool->sets[i];
    if (from == to || from->index.total_bytes < size ||
        !gpumem__free_index_find(&from->index, size))
      continue;
    gpumem_status status = wait_for(pool, from, to);
    if (status != GPUMEM_OK)
      return status;
    move_context move = {pool, from, to};
    gpumem__free_index_each(&from->index, move_block, &move);
    if (!from->fresh)
      drop_set(pool, i);
    *out = gpumem__free_index_find(&to->index, size);
    return GPUMEM_OK;
  }
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Chunks and growth
 * ------------------------------------------------------------------------------------- */

static size_t chunk_position(const pool_resource *pool, uintptr_t addr) {
  size_t low = 0, high = pool->chunk_count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (pool->chunks[mid].addr < addr)
      low = mid + 1;
    else
      high = mid;
  }
  return low;
}

static bool add_chunk(pool_resource *pool, uintptr_t addr, size_t size) {
  if (pool->chunk_count == pool->chunk_capacity) {
    size_t capacity = pool->chunk_capacity ? pool->chunk_capacity * 2 : 16;
    chunk *chunks = realloc(pool->chunks, capacity * sizeof *chunks);
    if (!chunks)
      return false;
    pool->chunks = chunks;
    pool->chunk_capacity = capacity;
  }
  size_t at = chunk_position(pool, addr);
  memmove(&pool->chunks[at + 1], &pool->chunks[at], (pool->chunk_count - at) * sizeof(chunk));
  pool->chunks[at] = (chunk){addr, size};
  pool->chunk_count++;
  return true;
}

static void remove_chunk(pool_resource *pool, size_t at) {
  memmove(&pool->chunks[at], &pool->chunks[at + 1],
          (pool->chunk_count - at - 1) * sizeof(chunk));
  pool->chunk_count--;
}

/* How much to ask of the upstream for a request of `size` bytes, within the maximum; 0 when
 * the maximum leaves no room. */
static size_t growth_step(const pool_resource *pool, size_t size) {
  size_t step = gpumem__align_up(size, pool->growth_rounding);
  size_t max = pool->options.maximum_size;
  if (!max)
    return step;
  uint64_t reserved = gpumem__stats_reserved(&pool->stats);
  if (reserved >= max || max - reserved < size)
    return 0;
  return step <= max - reserved ? step : size;
}

/* Takes a chunk of at least `size` bytes from the upstream on `set`'s stream and files it
 * in `set`. On failure *why says why in words for the out-of-memory message. */
static gpumem_status grow(pool_resource *pool, free_set *set, size_t size, const char **why) {
  size_t step = growth_step(pool, size);
  if (step == 0) {
    *why = "the pool has reached its maximum size";
    return GPUMEM_ERR_OUT_OF_MEMORY;
  }
  gpumem__block *block = gpumem__block_new(&pool->slab);
  if (!block) {
    *why = "the host is out of memory for the pool's bookkeeping";
    return GPUMEM_ERR_OUT_OF_MEMORY;
  }
  void *memory;
  gpumem_resource *up = pool->header.upstream;
  gpumem_status status =
      up->ops->allocate(up, step, GPUMEM_DEFAULT_ALIGNMENT, set->stream, &memory);
  if (status == GPUMEM_OK && !add_chunk(pool, (uintptr_t)memory, step)) {
    up->ops->deallocate(up, memory, step, GPUMEM_DEFAULT_ALIGNMENT, set->stream);
    status = GPUMEM_ERR_OUT_OF_MEMORY;
  }
  if (status != GPUMEM_OK) {
    gpumem__block_delete(&pool->slab, block);
    *why = "its upstream could not give more memory";
    return status;
  }
  block->addr = (uintptr_t)memory;
  block->size = step;
  gpumem__block *tail = pool->tail;
  if (pool->grows_in_place && tail && tail->addr + tail->size == block->addr) {
    block->prev_addr = tail;
    tail->next_addr = block;
  }
  if (!tail || block->addr > tail->addr)
    pool->tail = block;
  gpumem__stats_add_reserved(&pool->stats, step);
  release_block(pool, set, block);
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Allocate and free
 * ------------------------------------------------------------------------------------- */

/* Cuts an allocation of `size` bytes at `alignment` out of free block `block` of `set`.
 * NULL when host memory for the split is exhausted (the block is filed back then). */
static gpumem__block *carve(pool_resource *pool, free_set *set, gpumem__block *block,
                            size_t size, size_t alignment) {
  gpumem__free_index_remove(&set->index, block);
  uintptr_t aligned = gpumem__align_up(block->addr, alignment);
  if (aligned != block->addr) {
    gpumem__block *rest = split(pool, block, aligned - block->addr);
    gpumem__free_index_insert(&set->index, block);
    if (!rest)
      return NULL;
    block = rest;
  }
  if (block->size - size >= GPUMEM__BLOCK_UNIT) {
    /* Without host memory for the split the caller simply gets the whole block. */
    gpumem__block *rest = split(pool, block, size);
    if (rest) {
      rest->is_free = 1;
      rest->owner = set;
      gpumem__free_index_insert(&set->index, rest);
    }
  }
  block->is_free = 0;
  return block;
}

/* Finds or makes a free block for the request in `set`. */
static gpumem_status find_block(pool_resource *pool, free_set *set, size_t search,
                                gpumem__block **out, const char **why) {
  gpumem__block *block = gpumem__free_index_find(&set->index, search);
  gpumem_status status = GPUMEM_OK;
  if (!block)
    status = steal(pool, set, search, &block);
  if (status == GPUMEM_OK && !block) {
    status = grow(pool, set, search, why);
    if (status == GPUMEM_OK)
      block = gpumem__free_index_find(&set->index, search);
  }
  *out = block;
  return status;
}

static gpumem_status pool_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                   gpumem_stream stream, void **ptr) {
  pool_resource *pool = (pool_resource *)mr;
  size_t size = gpumem__align_up(bytes, GPUMEM__BLOCK_UNIT);
  size_t search = size + (alignment - GPUMEM_DEFAULT_ALIGNMENT);
  const char *why = "the host is out of memory for the pool's bookkeeping";
  gpumem__spin_lock(&pool->lock);
  free_set *set;
  gpumem__block *block = NULL;
  gpumem_status status = set_for(pool, stream, &set);
  if (status == GPUMEM_OK)
    status = find_block(pool, set, search, &block, &why);
  if (status == GPUMEM_OK && block && (block = carve(pool, set, block, size, alignment))) {
    block->requested = bytes;
    block->owner = set;
    if (GPUMEM_LIKELY(gpumem__block_map_insert(&pool->live, block))) {
      gpumem__stats_allocated(&pool->stats, bytes);
      gpumem__spin_unlock(&pool->lock);
      *ptr = (void *)block->addr;
      return GPUMEM_OK;
    }
    release_block(pool, set, block);
  }
  gpumem__spin_unlock(&pool->lock);
  if (status == GPUMEM_OK || status == GPUMEM_ERR_OUT_OF_MEMORY)
    return gpumem__fail_out_of_memory(mr, bytes, why);
  return status;
}

static gpumem_status pool_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                     size_t alignment, gpumem_stream stream) {
  pool_resource *pool = (pool_resource *)mr;
  gpumem__spin_lock(&pool->lock);
  gpumem__block *block = gpumem__block_map_take(&pool->live, (uintptr_t)ptr);
  size_t requested = block ? block->requested : 0;
  free_set *set = NULL;
  gpumem_status status = GPUMEM_OK;
  if (block && requested == bytes)
    status = set_for(pool, stream, &set);
  if (GPUMEM_LIKELY(block && requested == bytes && status == GPUMEM_OK)) {
    gpumem__stats_freed(&pool->stats, bytes);
    release_block(pool, set, block);
    gpumem__spin_unlock(&pool->lock);
    return GPUMEM_OK;
  }
  if (block) /* put back: the call changes nothing */
    gpumem__block_map_insert(&pool->live, block);
  gpumem__spin_unlock(&pool->lock);
  if (!block)
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "deallocate of %p (%zu bytes) from a pool: that pointer is not a live "
                        "allocation of this pool (never allocated here, or already freed)",
                        ptr, bytes);
  if (requested != bytes)
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "deallocate of %p from a pool with %zu bytes, but it was allocated "
                        "with %zu bytes",
                        ptr, bytes, requested);
  return status;
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

/* Detaches `block` from its address neighbours (it is about to leave the pool). */
static void unlink_block(pool_resource *pool, gpumem__block *block) {
  if (block->prev_addr)
    block->prev_addr->next_addr = NULL;
  if (block->next_addr)
    block->next_addr->prev_addr = NULL;
  if (pool->tail == block)
    pool->tail = block->prev_addr;
}

/* Gives back to the upstream every chunk lying wholly inside free block `block` of `set`.
 * Pieces of the block outside those chunks stay free in `set`. */
static gpumem_status trim_block(pool_resource *pool, free_set *set, gpumem__block *block,
                                size_t *released) {
  gpumem_resource *up = pool->header.upstream;
  gpumem__free_index_remove(&set->index, block);
  size_t at = chunk_position(pool, block->addr);
  while (at < pool->chunk_count && block) {
    chunk c = pool->chunks[at];
    if (c.addr + c.size > block->addr + block->size)
      break;
    gpumem__block *piece = block, *after = NULL;
    if (c.addr > block->addr) {
      piece = split(pool, block, c.addr - block->addr);
      if (!piece)
        break;
      piece->is_free = 1;
      piece->owner = set;
      gpumem__free_index_insert(&set->index, block);
    }
    if (piece->size > c.size && !(after = split(pool, piece, c.size))) {
      release_block(pool, set, piece);
      block = NULL;
      break;
    }
    if (after) {
      after->is_free = 1;
      after->owner = set;
    }
    /* The device was synchronized before the trim: no work uses the chunk any more, and
     * the default stream, unlike the set's, cannot have been destroyed. */
    gpumem_status status =
        up->ops->deallocate(up, (void *)c.addr, c.size, GPUMEM_DEFAULT_ALIGNMENT, NULL);
    if (status != GPUMEM_OK) {
      release_block(pool, set, piece);
      if (after)
        release_block(pool, set, after);
      return status;
    }
    unlink_block(pool, piece);
    gpumem__block_delete(&pool->slab, piece);
    remove_chunk(pool, at);
    gpumem__stats_sub_reserved(&pool->stats, c.size);
    *released += c.size;
    block = after;
  }
  if (block)
    gpumem__free_index_insert(&set->index, block);
  return GPUMEM_OK;
}

/* Gives back every whole free chunk; called with the lock held. Waits for the device first:
 * freed blocks may still be used by work on streams that the program may have destroyed
 * since, so their streams cannot order the return. After that wait no free block has
 * pending work, so all of them join the fresh set, where neighbours from different streams
 * finally merge into whole chunks. */
static gpumem_status trim_all(pool_resource *pool, size_t *released) {
  gpumem_status status = pool->header.dev->device_synchronize(pool->header.device);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "pool trim: waiting for the device");
  while (pool->set_count > 1) {
    move_context move = {pool, pool->sets[1], &pool->fresh};
    gpumem__free_index_each(&move.from->index, move_block, &move);
    drop_set(pool, 1);
  }
  block_list list = {0};
  gpumem__free_index_each(&pool->fresh.index, collect_block, &list);
  if (list.failed)
    status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "pool trim: out of host memory");
  for (size_t j = 0; j < list.count && status == GPUMEM_OK; j++)
    status = trim_block(pool, &pool->fresh, list.items[j], released);
  free(list.items);
  return status;
}

gpumem_status gpumem_pool_trim(gpumem_resource *mr, size_t *released) {
  if (!gpumem__is_pool(mr))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_pool_trim: %s is not a pool",
                        mr ? gpumem_resource_name(mr) : "NULL");
  pool_resource *pool = (pool_resource *)mr;
  size_t total = 0;
  gpumem__spin_lock(&pool->lock);
  gpumem_status status = trim_all(pool, &total);
  gpumem__spin_unlock(&pool->lock);
  if (released)
    *released = total;
  return status;
}

/* ---------------------------------------------------------------------------------------
 * Facts, life
 * ------------------------------------------------------------------------------------- */

static gpumem_status pool_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  pool_resource *pool = (pool_resource *)mr;
  if (what != GPUMEM_QUERY_LARGEST_FREE_BLOCK && what != GPUMEM_QUERY_FREE_BLOCKS &&
      what != GPUMEM_QUERY_FREE_BYTES)
    return gpumem__stats_query(&pool->stats, what, out);
  uint64_t value = 0;
  gpumem__spin_lock(&pool->lock);
  for (size_t i = 0; i < pool->set_count; i++) {
    const gpumem__free_index *index = &pool->sets[i]->index;
    if (what == GPUMEM_QUERY_FREE_BLOCKS) {
      value += index->block_count;
    } else if (what == GPUMEM_QUERY_FREE_BYTES) {
      value += index->total_bytes;
    } else {
      size_t largest = gpumem__free_index_largest(index);
      value = largest > value ? largest : value;
    }
  }
  gpumem__spin_unlock(&pool->lock);
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
    if (pool->sets[i] != &pool->fresh)
      free(pool->sets[i]);
  }
  free(pool->sets);
  free(pool->chunks);
  gpumem__block_map_destroy(&pool->live);
  gpumem__block_slab_destroy(&pool->slab);
  free(pool);
}

static gpumem_status pool_destroy(gpumem_resource *mr) {
  pool_resource *pool = (pool_resource *)mr;
  size_t released = 0;
  gpumem_status status = trim_all(pool, &released);
  if (status == GPUMEM_OK && pool->chunk_count > 0)
    status = gpumem__fail(GPUMEM_ERR_INTERNAL, "pool: %zu chunks still held after giving back "
                                               "every free one",
                          pool->chunk_count);
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

bool gpumem__is_pool(const gpumem_resource *mr) { return mr && mr->ops == &pool_ops; }

/* The default initial size: half the device's free memory for device-memory upstreams, none
 * for those that grow in place or hand out host memory. */
static gpumem_status default_initial_size(const gpumem_resource *upstream, bool grows_in_place,
                                          size_t *size) {
  const gpumem_resource *base = upstream;
  while (base->upstream)
    base = base->upstream;
  const char *kind = base->ops->kind;
  *size = 0;
  if (grows_in_place || !strcmp(kind, "pinned_host") || !strcmp(kind, "system"))
    return GPUMEM_OK;
  size_t free_bytes, total_bytes;
  gpumem_status status = upstream->dev->mem_info(upstream->device, &free_bytes, &total_bytes);
  if (status == GPUMEM_OK)
    *size = (free_bytes / 2) & ~(GROWTH_ROUNDING - 1);
  return status;
}

static gpumem_status init_pool(pool_resource *pool, gpumem_resource *upstream,
                               const gpumem_pool_options *options) {
  gpumem__resource_init(&pool->header, &pool_ops, upstream->device, upstream->dev, upstream);
  pool->options = *options;
  pool->grows_in_place = gpumem__vmm_grows_in_place(upstream);
  pool->growth_rounding = GROWTH_ROUNDING;
  if (pool->grows_in_place)
    pool->growth_rounding = gpumem__vmm_granularity(upstream);
  pool->fresh.fresh = true;
  gpumem__free_index_init(&pool->fresh.index);
  gpumem__block_slab_init(&pool->slab);
  gpumem__stats_init(&pool->stats);
  if (!gpumem__block_map_init(&pool->live) || !add_set(pool, &pool->fresh))
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_pool_create: out of host memory");
  if (options->initial_size == 0)
    return GPUMEM_OK;
  const char *why = "";
  gpumem_status status = grow(pool, &pool->fresh, options->initial_size, &why);
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
    gpumem_status status = default_initial_size(
        upstream, gpumem__vmm_grows_in_place(upstream), &options.initial_size);
    if (status != GPUMEM_OK)
      return gpumem__fail_context(status, "gpumem_pool_create: reading the device's memory");
    if (options.maximum_size && options.initial_size > options.maximum_size)
      options.initial_size = options.maximum_size;
  }
  if (options.maximum_size && options.initial_size > options.maximum_size)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_pool_create: initial size %zu exceeds the maximum size %zu",
                        options.initial_size, options.maximum_size);
  pool_resource *pool = calloc(1, sizeof *pool);
  if (!pool)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_pool_create: out of host memory");
  gpumem_status status = init_pool(pool, upstream, &options);
  if (status != GPUMEM_OK) {
    /* Only a failed initial growth can leave anything to give back: nothing was taken. */
    gpumem_resource_release(pool->header.upstream);
    free_structures(pool);
    return status;
  }
  *out = &pool->header;
  return GPUMEM_OK;
}
