/* pool_validate.c: the pool's validator (debug level 2; see core/debug.c). Under the pool's
 * lock it gathers every block from where the pool keeps it (the live map, each free set's
 * indexes and cache, the threads' fronts and their live maps, each front's and map's lock
 * held through the walk), checks each holder's own structure and that each block is in the
 * state its holder says, and then, with the blocks in address order, that they tile the
 * chunks without gap or overlap, that their address links are right, that free neighbours
 * were merged, and that the counters are the sums of what the blocks and chunks hold.
 * O(blocks log blocks): it runs after every call only where asked (GPUMEM_DEBUG=2). */
#include "suballoc/pool_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct walk {
  pool_resource *pool;
  gpumem__block **blocks;
  size_t count, capacity;
  /* What the holder being walked says of its blocks. */
  const char *where;
  const free_set *set;
  gpumem__block_state state;
  size_t region;
  uint64_t live_bytes;
  size_t live_map_cached, cached; /* cached blocks the live map holds; in the caches' lists */
  uint64_t front_live_bytes, front_live_count; /* handed out by fronts, still live */
  int front;                                   /* whose map is being walked */
  /* Of each front, the free blocks its maps hold (requested 0), and the blocks in lists and
   * return batches that it holds in its maps (their owner): the same. */
  size_t free_mapped[GPUMEM__THREAD_SLOTS], free_held[GPUMEM__THREAD_SLOTS];
  char why[512];
  bool failed;
  bool no_memory; /* the host had no memory for the walk: nothing is known, nothing said */
} walk;

__attribute__((format(printf, 2, 3))) static bool complain(walk *w, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(w->why, sizeof w->why, format, args);
  va_end(args);
  w->failed = true;
  return false;
}

static const char *state_name(gpumem__block_state state) {
  switch (state) {
  case GPUMEM__BLOCK_ALLOCATED:
    return "allocated";
  case GPUMEM__BLOCK_OPEN:
    return "open";
  case GPUMEM__BLOCK_SEALED:
    return "sealed";
  case GPUMEM__BLOCK_CACHED:
    return "cached";
  case GPUMEM__BLOCK_FRONT:
    return "a thread front's";
  }
  return "in no known state";
}

static bool push(walk *w, gpumem__block *block) {
  if (w->count == w->capacity) {
    size_t capacity = w->capacity ? w->capacity * 2 : 256;
    gpumem__block **grown = realloc(w->blocks, capacity * sizeof *grown);
    if (!grown) {
      w->no_memory = true;
      return complain(w, "out of host memory to validate");
    }
    w->blocks = grown;
    w->capacity = capacity;
  }
  w->blocks[w->count++] = block;
  if (block->size == 0 || block->size % GPUMEM__BLOCK_UNIT || block->addr % GPUMEM__BLOCK_UNIT)
    return complain(w,
                    "%s: block at %#lx has size %zu (not a positive multiple of %zu, or "
                    "misaligned)",
                    w->where, (unsigned long)block->addr, block->size, GPUMEM__BLOCK_UNIT);
  if (block->region >= GPUMEM__POOL_REGION_COUNT ||
      (!w->pool->split_regions && block->region != GPUMEM__POOL_REGION_LARGE))
    return complain(w, "%s: block at %#lx is in region %u, which the pool does not use", w->where,
                    (unsigned long)block->addr, block->region);
  return true;
}

/* A block of a live map (`map` names it) in `state`, holding what was requested of it. */
static bool check_live(walk *w, const gpumem__block *block, gpumem__block_state state,
                       const char *map) {
  if (block->state != state)
    return complain(w, "%s: block at %#lx is %s, not %s", map, (unsigned long)block->addr,
                    state_name(block->state), state_name(state));
  if (block->requested == 0 || block->requested > block->size)
    return complain(w, "%s: block at %#lx of %zu bytes was requested with %zu", map,
                    (unsigned long)block->addr, block->size, block->requested);
  return true;
}

static bool visit_live(gpumem__block *block, void *user) {
  walk *w = user;
  if (block->state == GPUMEM__BLOCK_CACHED) { /* it keeps its slot; gather_cache finds it */
    w->live_map_cached++;
    return push(w, block);
  }
  if (!check_live(w, block, GPUMEM__BLOCK_ALLOCATED, "live map"))
    return false;
  if (w->pool->fixed_block && block->size != w->pool->fixed_block)
    return complain(w, "live map: block at %#lx has %zu bytes, not the fixed block size %zu",
                    (unsigned long)block->addr, block->size, w->pool->fixed_block);
  w->live_bytes += block->requested;
  return push(w, block);
}

static bool visit_free(gpumem__block *block, void *user) {
  walk *w = user;
  if (block->state != w->state || block->owner != w->set || block->region != w->region)
    return complain(w, "%s: block at %#lx is %s, of %s set, in region %u", w->where,
                    (unsigned long)block->addr, state_name(block->state),
                    block->owner == w->set ? "this" : "another", block->region);
  return push(w, block);
}

static bool gather_index(walk *w, const gpumem__free_index *index, const char *where) {
  w->where = where;
  char why[400];
  if (!gpumem__free_index_check(index, visit_free, w, why, sizeof why))
    return w->failed ? false : complain(w, "%s: %s", where, why);
  return true;
}

static bool gather_cache(walk *w, const free_set *set, size_t s) {
  size_t count = 0;
  if (set->cached[GPUMEM__POOL_CACHE_CLASSES])
    return complain(w, "set %zu cache: a block in the list past the last class", s);
  for (size_t c = 0; c < GPUMEM__POOL_CACHE_CLASSES; c++)
    for (gpumem__block *b = set->cached[c]; b; b = b->next_free) {
      if (++count > set->cached_count)
        return complain(w, "set %zu: more cached blocks than its count %u (or a cycle)", s,
                        set->cached_count);
      if (b->state != GPUMEM__BLOCK_CACHED || b->owner != set)
        return complain(w, "set %zu cache: block at %#lx is %s, of %s set", s,
                        (unsigned long)b->addr, state_name(b->state),
                        b->owner == set ? "this" : "another");
      if (b->size >= GPUMEM__POOL_CACHE_LIMIT || cache_class(b->size) != c)
        return complain(w, "set %zu cache: block at %#lx of %zu bytes is in class %zu", s,
                        (unsigned long)b->addr, b->size, c);
      /* The live map holds it (visit_live gathered it from there). */
      size_t slot = gpumem__block_map_slot_of(&w->pool->live, b->addr);
      if (w->pool->live.slots[slot].block != b)
        return complain(w, "set %zu cache: block at %#lx is not in the live map", s,
                        (unsigned long)b->addr);
      w->cached++;
    }
  if (count != set->cached_count)
    return complain(w, "set %zu: cache count %u but %zu cached blocks", s, set->cached_count,
                    count);
  if (count > w->pool->limits.cache_max)
    return complain(w, "set %zu caches %zu blocks, more than its layout's %u", s, count,
                    w->pool->limits.cache_max);
  return true;
}

/* Front i of the pool being walked. */
static const pool_front *front_at(const walk *w, int i) {
  return &atomic_load_explicit(&w->pool->fronts, memory_order_relaxed)->fronts[i];
}

/* A block of a front's map: handed out and live, or free in a front's list or a return
 * batch (gathered there). */
static bool visit_front_live(gpumem__block *block, void *user) {
  walk *w = user;
  if (block->owner != front_at(w, w->front))
    return complain(w, "front %d: its map holds block at %#lx, which says another holds it",
                    w->front, (unsigned long)block->addr);
  if (block->state == GPUMEM__BLOCK_FRONT && block->requested == 0) {
    w->free_mapped[w->front]++;
    return true;
  }
  if (!check_live(w, block, GPUMEM__BLOCK_FRONT, "front live map"))
    return false;
  w->front_live_bytes += block->requested;
  w->front_live_count++;
  w->where = "front live map";
  return push(w, block);
}

static bool is_set_of(const pool_resource *pool, const free_set *set) {
  for (size_t s = 0; s < pool->set_count; s++)
    if (pool->sets[s] == set)
      return true;
  return false;
}

/* A free block of a front's list or a return batch: counted for the front whose map holds
 * it. */
static bool held_free(walk *w, const gpumem__block *b) {
  const pool_front *holder = b->owner, *first = front_at(w, 0);
  if (holder < first || holder >= first + GPUMEM__THREAD_SLOTS)
    return complain(w, "free front block at %#lx says no front's map holds it",
                    (unsigned long)b->addr);
  w->free_held[holder - first]++;
  return true;
}

/* A front's blocks: free on its stream, in the lists of their class. */
static bool gather_front(walk *w, const pool_front *f, int i) {
  size_t count = 0, bytes = 0;
  if (f->set && (!is_set_of(w->pool, f->set) || f->set->stream != f->stream))
    return complain(w, "front %d is bound to a set the pool does not have, or of another stream",
                    i);
  for (size_t c = 0; c < GPUMEM__POOL_FRONT_CLASSES; c++) {
    size_t length = 0;
    for (gpumem__block *b = f->lists[c]; b; b = b->next_free) {
      if (++length > f->lengths[c])
        return complain(w, "front %d: more blocks in class %zu than its length %u (or a cycle)", i,
                        c, (unsigned)f->lengths[c]);
      if (b->state != GPUMEM__BLOCK_FRONT || gpumem__pool_front_class(b->size) != c)
        return complain(w, "front %d: block at %#lx of %zu bytes is %s, in class %zu", i,
                        (unsigned long)b->addr, b->size, state_name(b->state), c);
      if (b->requested != 0)
        return complain(w, "front %d: block at %#lx in its list is requested as if live", i,
                        (unsigned long)b->addr);
      if (!held_free(w, b))
        return false;
      bytes += b->size;
      w->where = "front";
      if (!push(w, b))
        return false;
    }
    if (length != f->lengths[c])
      return complain(w, "front %d: %zu blocks in class %zu, but its length is %u", i, length, c,
                      (unsigned)f->lengths[c]);
    count += length;
  }
  if (bytes != f->bytes || (count > 0 && !f->set))
    return complain(w, "front %d: %zu blocks of %zu bytes, but it counts %zu bytes%s", i, count,
                    bytes, f->bytes, f->set ? "" : ", and it has no set");
  return true;
}

/* The blocks of a return batch (pool_returns.c), free in its set, of `set` when not NULL. */
static bool gather_return(walk *w, const pool_return *batch, const free_set *set, int i,
                          const char *where) {
  size_t bytes = 0;
  if (!batch->set || !is_set_of(w->pool, batch->set) || (set && batch->set != set))
    return complain(w, "front %d: a return batch in its %s is of a set the pool does not have%s", i,
                    where, set ? ", or not of its own" : "");
  if (batch->owner < 0 || batch->owner >= GPUMEM__THREAD_SLOTS)
    return complain(w, "front %d: a return batch in its %s is for front %d, which is none", i,
                    where, batch->owner);
  if (batch->count > 2 * GPUMEM__POOL_RETURN_BLOCKS)
    return complain(w, "front %d: a return batch in its %s counts %zu blocks, past its room", i,
                    where, batch->count);
  for (size_t k = 0; k < batch->count; k++) {
    gpumem__block *b = batch->blocks[k];
    if (b->state != GPUMEM__BLOCK_FRONT || b->requested != 0)
      return complain(w, "front %d: block at %#lx in a return batch in its %s is %s%s", i,
                      (unsigned long)b->addr, where, state_name(b->state),
                      b->requested ? ", requested as if live" : "");
    if (b->owner != front_at(w, batch->owner))
      return complain(w,
                      "front %d: block at %#lx in a return batch in its %s, for front %d, is "
                      "held in another front's maps",
                      i, (unsigned long)b->addr, where, batch->owner);
    bytes += b->size;
    if (!held_free(w, b))
      return false;
    w->where = "return batch";
    if (!push(w, b))
      return false;
  }
  if (bytes != batch->bytes)
    return complain(w, "front %d: a return batch in its %s holds %zu bytes, but counts %zu", i,
                    where, bytes, batch->bytes);
  return true;
}

/* A front's return batches: the one it fills (of its own set), and those in its inbox. */
static bool gather_returns(walk *w, const pool_front *f, int i) {
  if (f->pending && !f->set)
    return complain(w, "front %d: it fills a return batch but is bound to no set", i);
  if (f->pending && !gather_return(w, f->pending, f->set, i, "pending batch"))
    return false;
  size_t bytes = 0;
  for (const pool_return *batch = atomic_load_explicit(&f->inbox, memory_order_relaxed); batch;
       batch = batch->next) {
    if (!gather_return(w, batch, NULL, i, "inbox"))
      return false;
    if (batch->owner != i)
      return complain(w, "front %d: a batch in its inbox is for front %d", i, batch->owner);
    bytes += batch->bytes;
  }
  if (bytes != f->inbox_bytes)
    return complain(w, "front %d: its inbox holds %zu bytes, but it counts %zu", i, bytes,
                    f->inbox_bytes);
  return true;
}

/* Return batches of `set` in every front, pending or sent. */
static unsigned returns_of(pool_fronts *fronts, const free_set *set) {
  unsigned count = 0;
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++) {
    const pool_front *f = &fronts->fronts[i];
    count += f->pending && f->pending->set == set;
    for (const pool_return *batch = atomic_load_explicit(&f->inbox, memory_order_relaxed); batch;
         batch = batch->next)
      count += batch->set == set;
  }
  return count;
}

/* The fronts and their live maps and return batches, whose locks the caller holds; and each
 * set's counts of the fronts bound to it and of its return batches. */
static bool gather_fronts(walk *w, pool_fronts *fronts) {
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++)
    for (size_t k = 0; k < GPUMEM__POOL_LIVE_SHARDS; k++) {
      char why[400];
      w->front = i;
      if (!gpumem__front_map_check(&fronts->fronts[i].shards[k].map, visit_front_live, w, why,
                                   sizeof why))
        return w->failed ? false : complain(w, "front %d: live map %zu: %s", i, k, why);
    }
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++)
    if (!gather_front(w, &fronts->fronts[i], i) || !gather_returns(w, &fronts->fronts[i], i))
      return false;
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++)
    if (w->free_mapped[i] != w->free_held[i])
      return complain(w,
                      "front %d: its maps hold %zu blocks requested with 0, but lists and return "
                      "batches %zu of its blocks",
                      i, w->free_mapped[i], w->free_held[i]);
  for (size_t s = 0; s < w->pool->set_count; s++) {
    const free_set *set = w->pool->sets[s];
    unsigned bound = 0, returns = returns_of(fronts, set);
    for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++)
      bound += fronts->fronts[i].set == set;
    if (bound != set->fronts)
      return complain(w, "set %zu counts %u fronts, but %u are bound to it", s, set->fronts, bound);
    if (returns != atomic_load_explicit(&set->returns, memory_order_relaxed))
      return complain(w, "set %zu counts %u return batches, but fronts hold %u of it", s,
                      atomic_load_explicit(&set->returns, memory_order_relaxed), returns);
  }
  return true;
}

/* Every block, from where the pool keeps it, each holder checked on the way. */
static bool gather(walk *w) {
  pool_resource *pool = w->pool;
  char why[400];
  if (!gpumem__block_map_check(&pool->live, visit_live, w, why, sizeof why))
    return w->failed ? false : complain(w, "%s", why);
  if (pool->set_count == 0 || pool->sets[0] != &pool->fresh)
    return complain(w, "the fresh set is not the first of the %zu sets", pool->set_count);
  bool last_found = pool->last_set == NULL;
  for (size_t s = 0; s < pool->set_count; s++) {
    const free_set *set = pool->sets[s];
    last_found |= set == pool->last_set;
    w->set = set;
    for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++) {
      char where[64];
      w->region = r;
      w->state = GPUMEM__BLOCK_OPEN;
      snprintf(where, sizeof where, "set %zu, open index of region %zu", s, r);
      if (!gather_index(w, &set->open[r], where))
        return false;
      w->state = GPUMEM__BLOCK_SEALED;
      snprintf(where, sizeof where, "set %zu, sealed index of region %zu", s, r);
      if (!gather_index(w, &set->sealed[r], where))
        return false;
    }
    if (!gather_cache(w, set, s))
      return false;
  }
  if (!last_found)
    return complain(w, "the last call's free set is not one of the pool's sets");
  pool_fronts *fronts = fronts_of(pool);
  return !fronts || gather_fronts(w, fronts);
}

static int by_address(const void *a, const void *b) {
  uintptr_t x = (*(gpumem__block *const *)a)->addr, y = (*(gpumem__block *const *)b)->addr;
  return x < y ? -1 : x > y;
}

/* Whether two free blocks would have been merged when the later was filed: of one set,
 * whatever their states, since an open block unseals its sealed neighbours. */
static bool mergeable(const gpumem__block *a, const gpumem__block *b) {
  return free_in_any_state(a, b->owner) && free_in_any_state(b, a->owner);
}

/* The links of block i of the sorted blocks; `inside`: its end is inside a chunk (not at a
 * chunk's start), where the pool never breaks the chain. */
static bool check_links(walk *w, size_t i, bool inside) {
  gpumem__block *b = w->blocks[i];
  gpumem__block *next = i + 1 < w->count ? w->blocks[i + 1] : NULL;
  gpumem__block *prev = i > 0 ? w->blocks[i - 1] : NULL;
  bool touching = next && next->addr == b->addr + b->size;
  if (b->next_addr &&
      (b->next_addr != next || !touching || next->prev_addr != b || next->region != b->region))
    return complain(w, "block at %#lx: its next address link is not the block right after it",
                    (unsigned long)b->addr);
  if (b->prev_addr && (b->prev_addr != prev || prev->next_addr != b))
    return complain(w,
                    "block at %#lx: its previous address link is not the block right "
                    "before it",
                    (unsigned long)b->addr);
  if (inside && touching && b->next_addr != next)
    return complain(w, "blocks at %#lx and %#lx inside one chunk are not linked",
                    (unsigned long)b->addr, (unsigned long)next->addr);
  if (b->next_addr && mergeable(b, next))
    return complain(w, "free blocks at %#lx (%s) and %#lx (%s) of one set were not merged",
                    (unsigned long)b->addr, state_name(b->state), (unsigned long)next->addr,
                    state_name(next->state));
  return true;
}

/* Whether `addr` lies strictly inside a chunk (not at its start or end). */
static bool inside_chunk(const pool_resource *pool, uintptr_t addr) {
  size_t f = gpumem__sorted_floor(&pool->chunks, addr);
  return f < pool->chunks.count && chunk_at(pool, f)->addr < addr &&
         addr < chunk_at(pool, f)->addr + chunk_at(pool, f)->size;
}

/* The blocks tile the chunks: each run of touching chunks is covered by blocks end to end,
 * and no block lies outside them. */
static bool check_tiling(walk *w) {
  const pool_resource *pool = w->pool;
  size_t j = 0;
  uint64_t reserved = 0;
  for (size_t k = 0; k < pool->chunks.count; k++) {
    const chunk *c = chunk_at(pool, k);
    reserved += c->size;
    if (c->size == 0 ||
        (k > 0 && chunk_at(pool, k - 1)->addr + chunk_at(pool, k - 1)->size > c->addr))
      return complain(w, "chunk %zu at %#lx of %zu bytes is empty or overlaps the one before", k,
                      (unsigned long)c->addr, c->size);
    /* A large block's pieces end at a multiple of the large piece size (none: 0). */
    if (c->large_until &&
        (!pool->large_piece_size || (c->large_until - pool->piece_origin) % pool->large_piece_size))
      return complain(w, "chunk %zu at %#lx: its large pieces end at %#lx, no multiple of %zu", k,
                      (unsigned long)c->addr, (unsigned long)c->large_until,
                      pool->large_piece_size);
  }
  if (reserved != gpumem__counters_reserved(&pool->stats))
    return complain(w, "the reserved counter says %llu bytes, the chunks hold %llu",
                    (unsigned long long)gpumem__counters_reserved(&pool->stats),
                    (unsigned long long)reserved);
  for (size_t k = 0; k < pool->chunks.count; k++) {
    const chunk *c = chunk_at(pool, k);
    uintptr_t end = c->addr + c->size;
    uintptr_t at = c->addr;
    /* A block may start in an earlier chunk it was merged across (growth in place). */
    if (j > 0 && w->blocks[j - 1]->addr + w->blocks[j - 1]->size > c->addr)
      at = w->blocks[j - 1]->addr + w->blocks[j - 1]->size;
    while (at < end) {
      if (j == w->count || w->blocks[j]->addr != at)
        return complain(w, "chunk at %#lx of %zu bytes: %s at %#lx", (unsigned long)c->addr,
                        c->size,
                        j < w->count && w->blocks[j]->addr < at ? "blocks overlap"
                                                                : "no block covers the memory",
                        (unsigned long)at);
      const gpumem__block *b = w->blocks[j];
      at = b->addr + b->size;
      if (at > end && !(k + 1 < pool->chunks.count && chunk_at(pool, k + 1)->addr == end))
        return complain(w, "block at %#lx of %zu bytes runs past the end of its chunk",
                        (unsigned long)b->addr, b->size);
      j++;
    }
  }
  if (j != w->count)
    return complain(w, "block at %#lx of %zu bytes (%s) lies in no chunk",
                    (unsigned long)w->blocks[j]->addr, w->blocks[j]->size,
                    state_name(w->blocks[j]->state));
  /* Every block is where it should be: now their links. */
  for (j = 0; j < w->count; j++)
    if (!check_links(w, j, inside_chunk(pool, w->blocks[j]->addr + w->blocks[j]->size)))
      return false;
  return true;
}

static bool check_regions_and_counters(walk *w) {
  pool_resource *pool = w->pool;
  for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++) {
    const gpumem__block *tail = pool->regions[r].tail;
    if (!tail)
      continue;
    gpumem__block *const *found =
        w->count ? bsearch(&tail, w->blocks, w->count, sizeof *w->blocks, by_address) : NULL;
    if (!found || *found != tail || tail->region != r || tail->next_addr)
      return complain(w, "region %zu: its growth point is not a last block of the region", r);
  }
  pool_fronts *fronts = fronts_of(pool);
  uint64_t live_count, live_bytes;
  /* With fronts, the counters' sums (the fronts' locks held, so exact) against every live
   * block; the peak is raised only now and then (pool_front.c), so it is not checked. */
  gpumem__pool_front_counters(pool, GPUMEM_QUERY_LIVE_COUNT, &live_count);
  gpumem__pool_front_counters(pool, GPUMEM_QUERY_LIVE_BYTES, &live_bytes);
  if (w->live_map_cached != w->cached)
    return complain(w, "the live map holds %zu cached blocks, the caches %zu", w->live_map_cached,
                    w->cached);
  if (live_count != pool->live.count - w->live_map_cached + w->front_live_count)
    return complain(
        w, "the live count says %llu, the live maps hold %llu blocks",
        (unsigned long long)live_count,
        (unsigned long long)(pool->live.count - w->live_map_cached + w->front_live_count));
  if (live_bytes != w->live_bytes + w->front_live_bytes)
    return complain(w,
                    "the live bytes counter says %llu, the live blocks were requested with "
                    "%llu",
                    (unsigned long long)live_bytes,
                    (unsigned long long)(w->live_bytes + w->front_live_bytes));
  if ((!fronts &&
       atomic_load_explicit(&pool->stats.peak_live_bytes, memory_order_relaxed) < live_bytes) ||
      atomic_load_explicit(&pool->stats.peak_reserved, memory_order_relaxed) <
          gpumem__counters_reserved(&pool->stats))
    return complain(w, "a peak counter is below its current value");
  /* The pass's peak is one of the live bytes as the pool's own counter saw them, which the
   * pool's peak was raised to in the same hand-out. */
  uint64_t peak_live = atomic_load_explicit(&pool->stats.peak_live_bytes, memory_order_relaxed);
  if (pool->pass_peak_live > peak_live)
    return complain(w, "the pass's live peak (%llu) is above the pool's (%llu)",
                    (unsigned long long)pool->pass_peak_live, (unsigned long long)peak_live);
  return true;
}

/* The sizes served, kept only where the default's gate can release (pool.c). */
static bool check_served_sizes(walk *w) {
  const pool_resource *pool = w->pool;
  if (!pool->served_sizes.closed && !keeps_served_sizes(pool))
    return complain(w, "the pool keeps the sizes it served, but its release of holes never "
                       "asks for them");
  char why[256];
  if (!gpumem__size_set_check(&pool->served_sizes, why, sizeof why))
    return complain(w, "%s", why);
  return true;
}

/* The hot paths' limits say what split_regions and multi_stream say (set_layout). */
static bool check_layout(walk *w) {
  pool_limits have = w->pool->limits,
              want = limits_of(w->pool->split_regions, w->pool->multi_stream);
  if (have.small_below != want.small_below || have.cache_below != want.cache_below ||
      have.cache_max != want.cache_max)
    return complain(w,
                    "the limits of the hot paths (small region under %zu, cache under %zu, up "
                    "to %u blocks) are not those of its layout (%zu, %zu, %u)",
                    have.small_below, have.cache_below, have.cache_max, want.small_below,
                    want.cache_below, want.cache_max);
  return true;
}

/* release_flat's stand-in for a missing neighbour reads as no free block of any set. */
static bool check_sink(walk *w) {
  const gpumem__block *sink = &w->pool->sink;
  if (sink->state != GPUMEM__BLOCK_ALLOCATED || sink->owner || sink->size || sink->addr)
    return complain(w, "the merges' stand-in block reads as a block (state %d, %zu bytes at %#lx)",
                    (int)sink->state, sink->size, (unsigned long)sink->addr);
  return true;
}

static gpumem_status validate_locked(pool_resource *pool) {
  walk w = {.pool = pool};
  bool ok = check_sink(&w) && gather(&w);
  if (ok) {
    if (w.count) /* no array at all when the pool holds nothing */
      qsort(w.blocks, w.count, sizeof *w.blocks, by_address);
    ok = check_layout(&w) && check_tiling(&w) && check_regions_and_counters(&w) &&
         check_served_sizes(&w);
  }
  free(w.blocks);
  if (!ok && !w.no_memory)
    return gpumem__fail(GPUMEM_ERR_INTERNAL, "pool validation: %s", w.why);
  return GPUMEM_OK;
}

/* Takes (or releases) every front's lock, then every front live map's and inbox's: the
 * order of the fronts' own paths, a front's lock before a map's or an inbox's. */
static void lock_fronts(pool_fronts *fronts, bool take) {
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++)
    gpumem__pool_spin(&fronts->fronts[i].lock, take);
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++) {
    for (size_t k = 0; k < GPUMEM__POOL_LIVE_SHARDS; k++)
      gpumem__pool_spin(&fronts->fronts[i].shards[k].lock, take);
    gpumem__pool_spin(&fronts->fronts[i].inbox_lock, take);
  }
}

gpumem_status gpumem__pool_validate(const gpumem_resource *mr) {
  pool_resource *pool = (pool_resource *)mr;
  gpumem__biased_lock_take(&pool->lock);
  pool_fronts *fronts = fronts_of(pool);
  if (fronts)
    lock_fronts(fronts, true);
  gpumem_status status = validate_locked(pool);
  if (fronts)
    lock_fronts(fronts, false);
  gpumem__biased_lock_release(&pool->lock);
  return status;
}

bool gpumem__pool_each_chunk(const gpumem_resource *mr,
                             bool (*fn)(uintptr_t addr, size_t size, void *user), void *user) {
  pool_resource *pool = (pool_resource *)mr;
  bool ok = true;
  gpumem__biased_lock_take(&pool->lock);
  for (size_t k = 0; k < pool->chunks.count && ok; k++)
    ok = fn(chunk_at(pool, k)->addr, chunk_at(pool, k)->size, user);
  gpumem__biased_lock_release(&pool->lock);
  return ok;
}
