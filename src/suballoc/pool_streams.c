/* pool_streams.c: the pool's free sets, one per stream, and how memory moves between them
 * (see pool.c for the scheme): a stream's set found or made on its first call (the second
 * stream's folds once), the seal that records one event for a batch of frees, the idle take
 * of another stream's sealed blocks once their work is done, the steal of fresh memory and,
 * when the pool cannot grow, of another stream's sealed blocks after waiting on its event,
 * and the fold that, after waiting for the whole device, makes every free block free for
 * all. These run off the fast paths: each calls the device or runs once per stream. */
#include "suballoc/pool_internal.h"

#include <stdlib.h>

/* Most free sets a pool keeps: a program that makes streams without end must not grow them
 * without end. Past this the pool waits for the device, after which every free block is
 * safe for every stream, and folds them all into the fresh set. */
#define MAX_SETS 64

bool gpumem__pool_add_set(pool_resource *pool, free_set *set) {
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

/* Blocks of the set that other streams may take after its event: a set keeps them in the
 * region a steal left alone. */
static size_t sealed_blocks(const free_set *set) {
  size_t count = 0;
  for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++)
    count += set->sealed[r].block_count;
  return count;
}

static size_t open_blocks(const free_set *set) {
  size_t count = set->cached_count;
  for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++)
    count += set->open[r].block_count;
  return count;
}

/* Whether any stream's set holds free blocks, or a batch of returns is on its way to one. */
static bool holds_frees(const pool_resource *pool) {
  for (size_t i = 1; i < pool->set_count; i++) {
    const free_set *set = pool->sets[i];
    if (open_blocks(set) + sealed_blocks(set) > 0 ||
        atomic_load_explicit(&set->returns, memory_order_acquire) > 0)
      return true;
  }
  return false;
}

gpumem_status gpumem__pool_find_or_add_set(pool_resource *pool, gpumem_stream stream,
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
  if (pool->set_count > MAX_SETS && gpumem__pool_fold_into_fresh(pool, NULL) != GPUMEM_OK)
    gpumem__clear_error(); /* a failed fold only leaves the sets as they were */
  set = calloc(1, sizeof *set);
  if (!set || !gpumem__pool_add_set(pool, set)) {
    free(set);
    gpumem__note_oom(GPUMEM__OOM_HOST, &pool->header, 0);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "pool: out of host memory for stream state");
  }
  set->stream = stream;
  for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++) {
    gpumem__free_index_init(&set->open[r]);
    gpumem__free_index_init(&set->sealed[r]);
  }
  if (!pool->multi_stream && pool->set_count > 2) {
    /* The second stream: from now on every stream's frees get sealed, the others' first at
     * their next free. */
    set_layout(pool, pool->split_regions, true);
    /* What the first stream asked for went unnoted: it counts as asking for large blocks. */
    for (size_t i = 1; i < pool->set_count; i++)
      if (pool->sets[i] != set)
        gpumem__pool_note_large_asker(pool, pool->sets[i]->stream);
    gpumem__pool_flush_caches(pool);
    /* Once, a wait for the device: the first stream's frees so far, open and never to be
     * sealed if it frees no more, join the fresh set, free for every stream. Left open, a
     * real serving trace's first stream held 52 MB that the second could not take. With
     * nothing freed, there is nothing to wait for. */
    if (holds_frees(pool) && gpumem__pool_fold_into_fresh(pool, set) != GPUMEM_OK)
      gpumem__absorb_error(); /* a failed fold only leaves the sets as they were */
    for (size_t i = 1; i < pool->set_count; i++)
      pool->sets[i]->open_frees = GPUMEM__POOL_SEAL_EVERY - 1;
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

gpumem_status gpumem__pool_seal(pool_resource *pool, free_set *set) {
  GPUMEM__ASSERT(&pool->header, gpumem__biased_lock_held(&pool->lock),
                 "a seal runs under the pool's lock");
  const gpumem__device_ops *dev = pool->header.dev;
  gpumem_status status = GPUMEM_OK;
  if (!set->event)
    status = dev->event_create(pool->header.device, &set->event);
  if (status == GPUMEM_OK)
    status = dev->event_record(pool->header.device, set->event, set->stream);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "pool: recording the event that lets other streams "
                                        "reuse this stream's frees");
  for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++)
    move_index(pool, &set->open[r], set, GPUMEM__BLOCK_SEALED);
  set->open_frees = 0;
  set->open_bytes = 0;
  set->unsealed_bytes = 0;
  return GPUMEM_OK;
}

/* The set's own stream may use a sealed block and an open one at once; other streams lose
 * the sealed one until the set's next seal (GPUMEM__POOL_SEAL_EVERY frees away, or at once
 * past GPUMEM__POOL_UNSEALED_MAX, so that a stream gone idle keeps little from them). Kept
 * apart, a busy stream's free memory ends up cut into open and sealed pieces that no large
 * request fits: with a side stream of 120 small copies, a real serving trace held 1.46
 * times its live peak instead of 1.31. Only pools of several streams come here. */
void gpumem__pool_unseal_neighbours(free_set *set, const gpumem__block *block) {
  gpumem__free_index *sealed = &set->sealed[block->region], *open = &set->open[block->region];
  gpumem__block *neighbours[2] = {block->prev_addr, block->next_addr};
  for (size_t i = 0; i < 2; i++) {
    gpumem__block *n = neighbours[i];
    if (n && free_in(n, set, GPUMEM__BLOCK_SEALED)) {
      gpumem__free_index_remove(sealed, n);
      n->state = GPUMEM__BLOCK_OPEN;
      gpumem__free_index_insert(open, n);
      set->unsealed_bytes += n->size;
    }
  }
}

void gpumem__pool_seal_if_due(pool_resource *pool, free_set *set) {
  if (pool->multi_stream &&
      (set->open_frees >= GPUMEM__POOL_SEAL_EVERY ||
       set->unsealed_bytes >= GPUMEM__POOL_UNSEALED_MAX) &&
      gpumem__pool_seal(pool, set) != GPUMEM_OK)
    gpumem__absorb_error(); /* the blocks stay open, for the set's next seal */
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

/* Whether another stream's set that gave its blocks away may go: nothing free left in it,
 * and no thread's front or batch of returns on its way to it. */
static bool emptied(const pool_resource *pool, free_set *set) {
  return !is_fresh(pool, set) && open_blocks(set) == 0 && sealed_blocks(set) == 0 &&
         set->fronts == 0 && atomic_load_explicit(&set->returns, memory_order_acquire) == 0;
}

/* Moves a piece of `size` bytes of the fresh set's free block `block` into `to`, open; the
 * rest stays fresh. For a pool at its maximum: taken whole, the fresh memory sat in the first
 * stream's set, merged with that stream's frees and sealed under its latest work, and every
 * other stream, unable to grow, waited for that work to take it (four streams of 8 MiB
 * blocks over pool(cuda, initial=256MiB, max=256MiB): 23 waits in 24 allocations). */
static void take_piece(pool_resource *pool, free_set *to, gpumem__block *block, size_t size) {
  gpumem__block *piece = gpumem__pool_carve(pool, &pool->fresh, block, size);
  if (piece)
    release_block(pool, to, piece, GPUMEM__BLOCK_OPEN);
}

gpumem_status gpumem__pool_steal(pool_resource *pool, free_set *to, size_t r, size_t size,
                                 bool fresh_only, gpumem__block **out) {
  GPUMEM__ASSERT(&pool->header, gpumem__biased_lock_held(&pool->lock),
                 "a steal runs under the pool's lock");
  *out = NULL;
  for (size_t i = 0; i < pool->set_count; i++) {
    free_set *from = pool->sets[i];
    gpumem__block *fit;
    if (from == to || (fresh_only && !is_fresh(pool, from)) || from->sealed[r].total_bytes < size ||
        !(fit = gpumem__free_index_find(&from->sealed[r], size)))
      continue;
    if (!is_fresh(pool, from)) {
      gpumem_status status =
          pool->header.dev->stream_wait_event(pool->header.device, to->stream, from->event);
      if (status != GPUMEM_OK)
        return gpumem__fail_context(status, "pool: making a stream wait for another's frees");
    }
    /* Taken blocks join `to` open, their last use on another stream, and the seal below
     * covers them for third streams. Fresh memory goes whole (a request's piece of it in a
     * pool at its maximum, take_piece says why); another stream's sealed blocks only in
     * the request's region: a side stream that takes a few small blocks must not take a
     * busy stream's large free memory with them and hold it (on a real two-stream trace
     * the busy stream then grew its pool fourfold), while a stream that takes many blocks
     * of a size still gets them with one wait. */
    if (is_fresh(pool, from) && pool->multi_stream && gpumem__pool_at_maximum(pool, size))
      take_piece(pool, to, fit, size);
    else
      for (size_t other = 0; other < GPUMEM__POOL_REGION_COUNT; other++)
        if (other == r || is_fresh(pool, from))
          move_index(pool, &from->sealed[other], to, GPUMEM__BLOCK_OPEN);
    /* Sealed at once, what was taken is the other streams' again once `to` is idle: left
     * open until `to`'s next seal, a stream that took the fresh memory whole kept it from
     * the other for sixteen frees. */
    if (pool->multi_stream && gpumem__pool_seal(pool, to) != GPUMEM_OK)
      gpumem__absorb_error(); /* the blocks stay open, for the set's next seal */
    if (emptied(pool, from))
      drop_set(pool, i);
    *out = find_fit(pool, to, r, size);
    return GPUMEM_OK;
  }
  return GPUMEM_OK;
}

size_t gpumem__pool_take_idle(pool_resource *pool, free_set *to, size_t r) {
  GPUMEM__ASSERT(&pool->header, gpumem__biased_lock_held(&pool->lock),
                 "a take of idle sets runs under the pool's lock");
  size_t taken = 0;
  for (size_t i = 0; i < pool->set_count; i++) {
    free_set *from = pool->sets[i];
    if (from == to || is_fresh(pool, from) || from->sealed[r].block_count == 0 ||
        (from->fronts > 0 && from->sealed[r].total_bytes < GPUMEM__POOL_WORKING_RESERVE) ||
        gpumem__stream_is_per_thread(from->stream))
      continue;
    /* The event, not the stream: the program may have destroyed the stream since. A failed
     * query leaves the set as it was; work not done yet sets no message. */
    gpumem_status status = pool->header.dev->event_query(from->event);
    if (status != GPUMEM_OK) {
      if (status != GPUMEM_ERR_NOT_READY)
        gpumem__absorb_error();
      continue;
    }
    /* Sealed in `to` as well, with no pending work: other streams may take them from it.
     * `to` is sealed first: a steal waits on its event, which must exist, and a sealed block
     * merges only with sealed neighbours, where an open one would have unsealed them. */
    if ((!to->event || open_blocks(to) > 0) && gpumem__pool_seal(pool, to) != GPUMEM_OK) {
      gpumem__absorb_error();
      return taken;
    }
    move_index(pool, &from->sealed[r], to, GPUMEM__BLOCK_SEALED);
    taken++;
    if (emptied(pool, from))
      drop_set(pool, i--); /* the last set moved into place i */
  }
  return taken;
}

gpumem_status gpumem__pool_fold_into_fresh(pool_resource *pool, free_set *keep) {
  /* Fronts first: a front's thread may free, into its front, a block its stream's work
   * still uses; once flushed, its frees wait for this lock, so the wait below covers all. */
  gpumem__pool_flush_caches(pool);
  gpumem_status status = pool->header.dev->device_synchronize(pool->header.device);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "pool: waiting for the device");
  for (size_t i = pool->set_count; i-- > 1;) {
    free_set *set = pool->sets[i];
    for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++) {
      move_index(pool, &set->open[r], &pool->fresh, GPUMEM__BLOCK_SEALED);
      move_index(pool, &set->sealed[r], &pool->fresh, GPUMEM__BLOCK_SEALED);
    }
    set->open_bytes = set->unsealed_bytes = 0;
    GPUMEM__ASSERT(&pool->header, set->fronts == 0, "fronts were flushed with the caches");
    /* A thread that freed on the set's stream may be sending a batch of it meanwhile. */
    if (set != keep && atomic_load_explicit(&set->returns, memory_order_acquire) == 0)
      drop_set(pool, i);
  }
  return GPUMEM_OK;
}

void gpumem__pool_ask_large(pool_resource *pool, free_set *set) {
  gpumem__pool_note_large_asker(pool, set->stream);
  for (size_t i = 1; i < pool->set_count; i++) {
    if (pool->sets[i] != set && pool->sets[i]->open_bytes > GPUMEM__POOL_OPEN_BYTES_MAX) {
      if (gpumem__pool_fold_into_fresh(pool, set) != GPUMEM_OK)
        gpumem__absorb_error(); /* a failed fold only leaves the sets as they were */
      return;
    }
  }
}
