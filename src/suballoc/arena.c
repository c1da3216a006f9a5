/* arena.c: the arena, a pool per stream over one global pool, for many threads at once.
 *
 * A single pool serializes every thread on its lock. The arena gives each stream a pool of
 * its own (a "local" pool) whose upstream takes superblocks from a global pool; a thread
 * finds its stream's local pool through a small per-thread cache, so threads that each use
 * their own stream share nothing on the hot path. Large allocations skip the local pools.
 *
 * A block freed on a stream whose local pool does not own it (a cross-stream free, or a
 * large block) is found through a registry of superblocks, under the arena's mutex, and
 * freed to its owner, whose free sets apply the pool's cross-stream rules. A free goes where
 * its pointer lies, whatever its size says, and that pool checks the size. When the global
 * pool has no superblock left, a small request falls back to the global pool and, failing
 * that, has every local pool give back its free superblocks and tries again; a large request
 * the global pool cannot serve does the same. */
#include "core/sorted.h"
#include "suballoc/pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SUPERBLOCK ((size_t)4 << 20)

/* Most streams with a pool of their own. A program that makes streams without end (one per
 * task, say) must not grow the arena without end: past this, a new stream shares an
 * existing pool, whose free sets keep the streams' memory apart as in any pool. */
#define MAX_LOCALS 256

typedef struct arena_resource arena_resource;

/* A stream's pool, and the resource through which it takes superblocks. */
typedef struct local_arena {
  gpumem_resource source; /* upstream of `pool`: superblocks from the global pool */
  arena_resource *arena;
  gpumem_stream stream;
  gpumem_resource *pool;
} local_arena;

typedef struct superblock {
  uintptr_t start, end;
  local_arena *owner;
} superblock;

struct arena_resource {
  gpumem_resource header;
  uint64_t id; /* unique for the process: per-thread caches match on it, not on the address */
  gpumem_arena_options options;
  size_t large_threshold;
  gpumem_resource *global;
  pthread_mutex_t lock; /* guards locals and superblocks */
  local_arena **locals;
  size_t local_count, local_capacity;
  size_t next_shared;         /* the pool the next stream past MAX_LOCALS shares */
  gpumem__sorted superblocks; /* of superblock, by start */
};

static atomic_uint_fast64_t next_arena_id = 1;

/* ---------------------------------------------------------------------------------------
 * The superblock registry
 * ------------------------------------------------------------------------------------- */

static bool register_superblock(arena_resource *arena, uintptr_t start, size_t size,
                                local_arena *owner) {
  return gpumem__sorted_insert(&arena->superblocks, &(superblock){start, start + size, owner});
}

static void unregister_superblock(arena_resource *arena, uintptr_t start) {
  size_t at = gpumem__sorted_find(&arena->superblocks, start);
  GPUMEM__ASSERT(&arena->header, at < arena->superblocks.count,
                 "a superblock given back was registered");
  if (at < arena->superblocks.count)
    gpumem__sorted_remove_at(&arena->superblocks, at);
}

static local_arena *owner_of(arena_resource *arena, uintptr_t addr) {
  pthread_mutex_lock(&arena->lock);
  size_t at = gpumem__sorted_floor(&arena->superblocks, addr);
  const superblock *candidate =
      at < arena->superblocks.count ? gpumem__sorted_at(&arena->superblocks, at) : NULL;
  local_arena *owner = candidate && addr < candidate->end ? candidate->owner : NULL;
  pthread_mutex_unlock(&arena->lock);
  return owner;
}

/* ---------------------------------------------------------------------------------------
 * The superblock source: the upstream of each local pool
 * ------------------------------------------------------------------------------------- */

static gpumem_status source_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                     gpumem_stream stream, void **ptr) {
  local_arena *local = (local_arena *)mr;
  arena_resource *arena = local->arena;
  gpumem_resource *global = arena->global;
  void *block;
  gpumem_status status = global->ops->allocate(global, bytes, alignment, stream, &block);
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&arena->lock);
  bool registered = register_superblock(arena, (uintptr_t)block, bytes, local);
  pthread_mutex_unlock(&arena->lock);
  if (!registered) {
    global->ops->deallocate(global, block, bytes, alignment, stream);
    gpumem__note_oom(GPUMEM__OOM_HOST, &arena->header, bytes);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "arena: out of host memory for superblocks");
  }
  *ptr = block;
  return GPUMEM_OK;
}

static gpumem_status source_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                       size_t alignment, gpumem_stream stream) {
  local_arena *local = (local_arena *)mr;
  arena_resource *arena = local->arena;
  /* Out of the registry first: once the global pool has the superblock back, another
   * stream's pool may get the same address and register it. */
  pthread_mutex_lock(&arena->lock);
  unregister_superblock(arena, (uintptr_t)ptr);
  pthread_mutex_unlock(&arena->lock);
  gpumem_status status =
      arena->global->ops->deallocate(arena->global, ptr, bytes, alignment, stream);
  if (status != GPUMEM_OK) {
    pthread_mutex_lock(&arena->lock);
    register_superblock(arena, (uintptr_t)ptr, bytes, local); /* room: it was just there */
    pthread_mutex_unlock(&arena->lock);
  }
  return status;
}

static void source_describe(const gpumem_resource *mr, char *buf, size_t size) {
  snprintf(buf, size, "arena superblocks");
}

/* The arena frees local arenas itself, after their pools are gone. */
static gpumem_status source_destroy(gpumem_resource *mr) {
  return GPUMEM_OK;
}

static const gpumem__resource_ops source_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "arena_superblocks",
    .allocate = source_allocate,
    .deallocate = source_deallocate,
    .describe = source_describe,
    .destroy = source_destroy,
};

/* ---------------------------------------------------------------------------------------
 * Finding a stream's local pool
 * ------------------------------------------------------------------------------------- */

enum { CACHE_ENTRIES = 4 };

typedef struct cache_entry {
  uint64_t arena_id;
  gpumem_stream stream;
  local_arena *local;
} cache_entry;

static _Thread_local cache_entry thread_cache[CACHE_ENTRIES];
static _Thread_local unsigned thread_cache_next;

static local_arena *cached_local(const arena_resource *arena, gpumem_stream stream) {
  for (int i = 0; i < CACHE_ENTRIES; i++)
    if (thread_cache[i].arena_id == arena->id && thread_cache[i].stream == stream)
      return thread_cache[i].local;
  return NULL;
}

static void cache_local(const arena_resource *arena, local_arena *local) {
  cache_entry *entry = &thread_cache[thread_cache_next++ % CACHE_ENTRIES];
  *entry = (cache_entry){arena->id, local->stream, local};
}

static gpumem_status out_of_host_memory(arena_resource *arena) {
  gpumem__note_oom(GPUMEM__OOM_HOST, &arena->header, 0);
  return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "arena: out of host memory");
}

/* Creates the local pool of `stream`; called with the arena's lock held. */
static gpumem_status new_local(arena_resource *arena, gpumem_stream stream, local_arena **out) {
  if (arena->local_count == arena->local_capacity) {
    size_t capacity = arena->local_capacity ? arena->local_capacity * 2 : 16;
    local_arena **grown = realloc(arena->locals, capacity * sizeof *grown);
    if (!grown)
      return out_of_host_memory(arena);
    arena->locals = grown;
    arena->local_capacity = capacity;
  }
  local_arena *local = calloc(1, sizeof *local);
  if (!local)
    return out_of_host_memory(arena);
  gpumem__resource_init(&local->source, &source_ops, arena->header.device, arena->header.dev, NULL);
  local->source.caps.memory = arena->header.caps.memory;
  local->arena = arena;
  local->stream = stream;
  /* Empty at first: the first superblock is taken when the stream first allocates, so no
   * device call happens under the arena's lock here. Its requests are under half a
   * superblock, so it grows by exactly one superblock at a time: arena_deallocate relies on
   * every superblock having that size. */
  /* Its source makes no pieces to give back. */
  gpumem_pool_options options = {.release_holes_over = GPUMEM_POOL_KEEP_HOLES};
  gpumem_status status = gpumem__pool_create_rounded(
      &local->source, &options, arena->options.superblock_size, 0, &local->pool);
  if (status != GPUMEM_OK) {
    free(local);
    if (status == GPUMEM_ERR_OUT_OF_MEMORY) /* only host memory: the pool takes nothing yet */
      gpumem__note_oom(GPUMEM__OOM_HOST, &arena->header, 0);
    return status;
  }
  arena->locals[arena->local_count++] = local;
  *out = local;
  return GPUMEM_OK;
}

static gpumem_status local_for(arena_resource *arena, gpumem_stream stream, local_arena **out) {
  local_arena *local = cached_local(arena, stream);
  if (GPUMEM_LIKELY(local != NULL)) {
    *out = local;
    return GPUMEM_OK;
  }
  gpumem_status status = GPUMEM_OK;
  pthread_mutex_lock(&arena->lock);
  for (size_t i = 0; i < arena->local_count && !local; i++)
    if (arena->locals[i]->stream == stream)
      local = arena->locals[i];
  if (!local && arena->local_count >= MAX_LOCALS) {
    local = arena->locals[arena->next_shared++ % arena->local_count];
    local->stream = stream; /* found under this stream from now on */
  }
  if (!local)
    status = new_local(arena, stream, &local);
  pthread_mutex_unlock(&arena->lock);
  if (status != GPUMEM_OK)
    return status;
  cache_local(arena, local);
  *out = local;
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Allocate and free
 * ------------------------------------------------------------------------------------- */

/* A copy of the list of local pools, taken under the arena's mutex, so that callers can
 * call into the pools without it (a growing pool takes the mutex itself, for the
 * registry). Locals are only removed when the arena is destroyed. NULL when empty or when
 * host memory is exhausted. *superblocks (may be NULL): how many superblocks the locals
 * held at that moment. */
static local_arena **snapshot_locals(arena_resource *arena, size_t *count, size_t *superblocks) {
  pthread_mutex_lock(&arena->lock);
  if (superblocks)
    *superblocks = arena->superblocks.count;
  *count = arena->local_count;
  local_arena **locals = *count ? malloc(*count * sizeof *locals) : NULL;
  if (locals)
    memcpy(locals, arena->locals, *count * sizeof *locals);
  else
    *count = 0;
  pthread_mutex_unlock(&arena->lock);
  return locals;
}

/* Has every local pool give its free superblocks back to the global pool. Returns the
 * first failure, after trying every pool. */
static gpumem_status reclaim_superblocks(arena_resource *arena) {
  size_t count;
  local_arena **locals = snapshot_locals(arena, &count, NULL);
  gpumem_status status = GPUMEM_OK;
  for (size_t i = 0; i < count; i++) {
    size_t moved = 0; /* within the arena: not given back */
    gpumem_resource *pool = locals[i]->pool;
    gpumem_status trimmed = pool->ops->trim(pool, &moved);
    if (status == GPUMEM_OK)
      status = trimmed;
  }
  free(locals);
  return status;
}

/* Requests of a quarter superblock or more go to the global pool directly. */
static bool is_large(const arena_resource *arena, size_t bytes, size_t alignment) {
  return bytes >= arena->large_threshold || alignment >= arena->large_threshold;
}

/* A large request the global pool cannot serve: the streams' pools may hold whole free
 * superblocks, which only they can give back. */
GPUMEM_COLD static gpumem_status allocate_large_after_reclaim(arena_resource *arena, size_t bytes,
                                                              size_t alignment,
                                                              gpumem_stream stream, void **ptr) {
  gpumem_resource *global = arena->global;
  reclaim_superblocks(arena);
  gpumem_status status = global->ops->allocate(global, bytes, alignment, stream, ptr);
  if (status == GPUMEM_ERR_OUT_OF_MEMORY)
    return gpumem__fail_out_of_memory(&arena->header, bytes,
                                      "the global pool has no room, even after the streams' "
                                      "pools gave back their free superblocks");
  return gpumem__fail_through(&arena->header, status);
}

static gpumem_status arena_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                    gpumem_stream stream, void **ptr) {
  arena_resource *arena = (arena_resource *)mr;
  gpumem_resource *global = arena->global;
  gpumem_status status;
  if (is_large(arena, bytes, alignment)) {
    status = global->ops->allocate(global, bytes, alignment, stream, ptr);
    if (GPUMEM_LIKELY(status != GPUMEM_ERR_OUT_OF_MEMORY))
      return gpumem__fail_through(mr, status);
    return allocate_large_after_reclaim(arena, bytes, alignment, stream, ptr);
  }
  local_arena *local;
  status = local_for(arena, stream, &local);
  if (status != GPUMEM_OK)
    return status;
  gpumem_resource *pool = local->pool;
  status = pool->ops->allocate(pool, bytes, alignment, stream, ptr);
  if (GPUMEM_LIKELY(status != GPUMEM_ERR_OUT_OF_MEMORY))
    return status;
  /* No superblock left: the global pool may still fit the request itself, or the other
   * streams may hold whole free superblocks. */
  status = global->ops->allocate(global, bytes, alignment, stream, ptr);
  if (status != GPUMEM_ERR_OUT_OF_MEMORY)
    return gpumem__fail_through(mr, status);
  reclaim_superblocks(arena);
  status = pool->ops->allocate(pool, bytes, alignment, stream, ptr);
  if (status == GPUMEM_ERR_OUT_OF_MEMORY)
    return gpumem__fail_out_of_memory(mr, bytes,
                                      "neither the stream's pool nor the global pool "
                                      "has room, even after reclaiming free "
                                      "superblocks");
  return status;
}

/* Frees ptr to what holds it, found by its address: the pool of the stream whose superblock
 * it lies in, else the global pool (large blocks, and small ones it served when a stream's
 * pool had no room). Each refuses, changing nothing, a pointer it does not hold live or a
 * size other than the allocation's, so a wrong size can never free the wrong thing. */
GPUMEM_NOINLINE static gpumem_status free_by_address(arena_resource *arena, void *ptr, size_t bytes,
                                                     size_t alignment, gpumem_stream stream) {
  local_arena *owner = owner_of(arena, (uintptr_t)ptr);
  gpumem_resource *holder = owner ? owner->pool : arena->global;
  return gpumem__fail_through(&arena->header,
                              holder->ops->deallocate(holder, ptr, bytes, alignment, stream));
}

/* The fast paths try the likely holder first, which checks the pointer and its size: for a
 * small size the stream's own pool, for a large one the global pool. The global pool also
 * holds the superblocks, as blocks of exactly the superblock size; it refuses a free of any
 * other size, so only a free of that size could give back a superblock in use, and only
 * those look at the registry first. */
static gpumem_status arena_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                      size_t alignment, gpumem_stream stream) {
  arena_resource *arena = (arena_resource *)mr;
  bool owned = false;
  gpumem_status status;
  if (!is_large(arena, bytes, alignment)) {
    local_arena *local = cached_local(arena, stream);
    if (local) {
      status = gpumem__pool_deallocate_if_owned(local->pool, ptr, bytes, stream, &owned);
      if (GPUMEM_LIKELY(owned))
        return status;
    }
    /* Freed on another stream than the one that allocated it, from a thread that has not
     * used this stream yet, or served by the global pool. */
    return free_by_address(arena, ptr, bytes, alignment, stream);
  }
  if (GPUMEM_UNLIKELY(bytes == arena->options.superblock_size))
    return free_by_address(arena, ptr, bytes, alignment, stream);
  status = gpumem__pool_deallocate_if_owned(arena->global, ptr, bytes, stream, &owned);
  if (GPUMEM_LIKELY(owned && status != GPUMEM_ERR_MISUSE))
    return gpumem__fail_through(mr, status);
  /* Not a large block with that size: a small block (with a wrong size) or a stranger. */
  return free_by_address(arena, ptr, bytes, alignment, stream);
}

static gpumem_status arena_trim(gpumem_resource *mr, size_t *released) {
  arena_resource *arena = (arena_resource *)mr;
  gpumem_status status = reclaim_superblocks(arena);
  gpumem_status trimmed = arena->global->ops->trim(arena->global, released);
  return status != GPUMEM_OK ? status : trimmed;
}

/* ---------------------------------------------------------------------------------------
 * Facts, life
 * ------------------------------------------------------------------------------------- */

static uint64_t fact(const gpumem_resource *mr, gpumem_query what) {
  uint64_t value = 0;
  if (mr->ops->query)
    mr->ops->query(mr, what, &value);
  return value;
}

/* The global pool counts superblocks as live allocations; the arena counts what the local
 * pools hand out instead. */
static gpumem_status arena_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  arena_resource *arena = (arena_resource *)mr;
  const gpumem_resource *global = arena->global;
  switch (what) {
  case GPUMEM_QUERY_RESERVED_BYTES:
  case GPUMEM_QUERY_PEAK_RESERVED_BYTES:
  case GPUMEM_QUERY_MAX_RESERVED_BYTES:
    return global->ops->query(global, what, out);
  case GPUMEM_QUERY_LIVE_BYTES:
  case GPUMEM_QUERY_LIVE_COUNT:
  case GPUMEM_QUERY_FREE_BYTES:
  case GPUMEM_QUERY_FREE_BLOCKS:
  case GPUMEM_QUERY_LARGEST_FREE_BLOCK:
    break;
  default:
    return GPUMEM_ERR_UNSUPPORTED;
  }
  /* The pieces are read one after another while other threads may move superblocks between
   * the global pool and the local ones, so the sum can be off by the superblocks moved
   * meanwhile: it is kept signed and never reported below zero. */
  size_t count, superblocks;
  local_arena **locals = snapshot_locals(arena, &count, &superblocks);
  int64_t value = (int64_t)fact(global, what);
  for (size_t i = 0; i < count; i++) {
    const gpumem_resource *pool = locals[i]->pool;
    int64_t local = (int64_t)fact(pool, what);
    if (what == GPUMEM_QUERY_LARGEST_FREE_BLOCK)
      value = local > value ? local : value;
    else
      value += local;
    if (what == GPUMEM_QUERY_LIVE_BYTES)
      value -= (int64_t)fact(pool, GPUMEM_QUERY_RESERVED_BYTES);
  }
  free(locals);
  if (what == GPUMEM_QUERY_LIVE_COUNT)
    value -= (int64_t)superblocks;
  *out = value > 0 ? (uint64_t)value : 0;
  return GPUMEM_OK;
}

static void arena_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const arena_resource *arena = (const arena_resource *)mr;
  gpumem__describe_over(mr, buf, size, ", size=%zu, max=%zu, superblock=%zu", arena->options.size,
                        arena->options.maximum_size, arena->options.superblock_size);
}

static void free_arena(arena_resource *arena) {
  for (size_t i = 0; i < arena->local_count; i++)
    free(arena->locals[i]);
  free(arena->locals);
  gpumem__sorted_free(&arena->superblocks);
  pthread_mutex_destroy(&arena->lock);
  free(arena);
}

static gpumem_status arena_destroy(gpumem_resource *mr) {
  arena_resource *arena = (arena_resource *)mr;
  /* A new id first: threads' caches then find no local pool of this arena, so none can
   * reach one freed below even if this destroy fails half way and the arena lives on. */
  arena->id = atomic_fetch_add(&next_arena_id, 1);
  /* Each local pool gives its superblocks back to the global pool as it goes. A local pool
   * that cannot stays, with the arena, for another release. */
  while (arena->local_count > 0) {
    local_arena *local = arena->locals[arena->local_count - 1];
    gpumem_status status = gpumem_resource_release(local->pool);
    if (status != GPUMEM_OK)
      return status;
    free(local);
    arena->local_count--;
  }
  gpumem_status status = gpumem_resource_release(arena->global);
  if (status != GPUMEM_OK)
    return status;
  free_arena(arena);
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Validation (debug level 2)
 * ------------------------------------------------------------------------------------- */

typedef struct registry_check {
  arena_resource *arena;
  local_arena *local;
  uintptr_t bad;
} registry_check;

/* A chunk of a stream's pool is a superblock registered to that stream. Called under the
 * pool's lock; takes the arena's after it, in the order growth takes them. */
static bool chunk_registered(uintptr_t addr, size_t size, void *user) {
  registry_check *check = user;
  arena_resource *arena = check->arena;
  pthread_mutex_lock(&arena->lock);
  size_t at = gpumem__sorted_find(&arena->superblocks, addr);
  const superblock *sb =
      at < arena->superblocks.count ? gpumem__sorted_at(&arena->superblocks, at) : NULL;
  bool ok = sb && sb->end == addr + size && sb->owner == check->local;
  pthread_mutex_unlock(&arena->lock);
  if (!ok)
    check->bad = addr;
  return ok;
}

/* The registry: sorted, disjoint superblocks of the superblock size, each owned by a
 * stream's pool of this arena. */
static gpumem_status check_registry(arena_resource *arena) {
  gpumem_status status = GPUMEM_OK;
  pthread_mutex_lock(&arena->lock);
  for (size_t i = 0; i < arena->superblocks.count && status == GPUMEM_OK; i++) {
    const superblock *sb = gpumem__sorted_at(&arena->superblocks, i);
    const superblock *next =
        i + 1 < arena->superblocks.count ? gpumem__sorted_at(&arena->superblocks, i + 1) : NULL;
    bool known = false;
    for (size_t l = 0; l < arena->local_count && !known; l++)
      known = arena->locals[l] == sb->owner;
    if (sb->end - sb->start != arena->options.superblock_size || (next && next->start < sb->end) ||
        !known)
      status = gpumem__fail(GPUMEM_ERR_INTERNAL,
                            "arena validation: superblock %zu at %#lx to %#lx is not of the "
                            "superblock size, overlaps the next or has no known owner",
                            i, (unsigned long)sb->start, (unsigned long)sb->end);
  }
  pthread_mutex_unlock(&arena->lock);
  return status;
}

static gpumem_status arena_validate(const gpumem_resource *mr) {
  arena_resource *arena = (arena_resource *)mr;
  gpumem_status status = gpumem__validate_one(arena->global);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "arena validation: the global pool");
  size_t count;
  local_arena **locals = snapshot_locals(arena, &count, NULL);
  for (size_t i = 0; i < count && status == GPUMEM_OK; i++) {
    registry_check check = {arena, locals[i], 0};
    status = gpumem__validate_one(locals[i]->pool);
    if (status != GPUMEM_OK)
      status = gpumem__fail_context(status, "arena validation: the pool of stream %p",
                                    (void *)locals[i]->stream);
    else if (!gpumem__pool_each_chunk(locals[i]->pool, chunk_registered, &check))
      status = gpumem__fail(GPUMEM_ERR_INTERNAL,
                            "arena validation: the pool of stream %p holds a chunk at %#lx "
                            "that is not a superblock registered to it",
                            (void *)locals[i]->stream, (unsigned long)check.bad);
  }
  free(locals);
  return status == GPUMEM_OK ? check_registry(arena) : status;
}

/* The global pool and each stream's pool, for reports. */
static size_t arena_parts(const gpumem_resource *mr, gpumem__part *parts, size_t capacity) {
  arena_resource *arena = (arena_resource *)mr;
  if (capacity > 0)
    parts[0] = (gpumem__part){arena->global, "global", 0};
  pthread_mutex_lock(&arena->lock);
  size_t count = 1 + arena->local_count;
  for (size_t i = 0; i + 1 < capacity && i < arena->local_count; i++)
    parts[i + 1] = (gpumem__part){arena->locals[i]->pool, "stream",
                                  (uint64_t)(uintptr_t)arena->locals[i]->stream};
  pthread_mutex_unlock(&arena->lock);
  return count;
}

static const gpumem__resource_ops arena_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "arena",
    .allocate = arena_allocate,
    .deallocate = arena_deallocate,
    .query = arena_query,
    .describe = arena_describe,
    .destroy = arena_destroy,
    .trim = arena_trim,
    .validate = arena_validate,
    .parts = arena_parts,
};

gpumem_status gpumem_arena_create(gpumem_resource *upstream, const gpumem_arena_options *opts,
                                  gpumem_resource **out) {
  if (!upstream || !out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_arena_create: %s is NULL",
                        upstream ? "out" : "the upstream resource");
  gpumem_arena_options options = opts ? *opts : (gpumem_arena_options){0};
  if (options.superblock_size == 0)
    options.superblock_size = DEFAULT_SUPERBLOCK;
  if (options.superblock_size % GPUMEM_DEFAULT_ALIGNMENT != 0 ||
      options.superblock_size < 4 * GPUMEM_DEFAULT_ALIGNMENT)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_arena_create: superblock size %zu must be a multiple of 256 and "
                        "at least 1 KiB",
                        options.superblock_size);
  arena_resource *arena = calloc(1, sizeof *arena);
  if (!arena)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_arena_create: out of host memory");
  /* Holes stay mapped, as the arena was measured: the pool's default release of holes was
   * chosen on traces replayed through the pool itself. */
  gpumem_pool_options global_options = {.initial_size = options.size,
                                        .maximum_size = options.maximum_size,
                                        .release_holes_over = GPUMEM_POOL_KEEP_HOLES};
  gpumem_status status = gpumem_pool_create(upstream, &global_options, &arena->global);
  if (status != GPUMEM_OK) {
    free(arena);
    return gpumem__fail_context(status, "gpumem_arena_create: creating the global pool");
  }
  gpumem__resource_init_suballocator(&arena->header, &arena_ops, upstream);
  arena->id = atomic_fetch_add(&next_arena_id, 1);
  arena->options = options;
  arena->large_threshold = options.superblock_size / 4;
  arena->superblocks = (gpumem__sorted)GPUMEM__SORTED_INIT(superblock);
  pthread_mutex_init(&arena->lock, NULL);
  *out = &arena->header;
  return GPUMEM_OK;
}
