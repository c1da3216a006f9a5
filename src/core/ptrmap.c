/* ptrmap.c: sharded open-addressing hash table of live allocations (see ptrmap.h).
 *
 * Linear probing with backward-shift deletion: no tombstones, so a long-running program
 * that allocates and frees millions of times keeps short probe sequences. */
#include "core/ptrmap.h"

#include "core/pointer_hash.h"

#include <stdio.h>
#include <stdlib.h>

static gpumem__ptrmap_shard *shard_of(gpumem__ptrmap *map, uintptr_t ptr) {
  return &map->shards[(gpumem__hash_pointer(ptr) >> 40) % GPUMEM__PTRMAP_SHARDS];
}

void gpumem__ptrmap_init(gpumem__ptrmap *map) {
  for (int i = 0; i < GPUMEM__PTRMAP_SHARDS; i++) {
    pthread_mutex_init(&map->shards[i].lock, NULL);
    map->shards[i].slots = NULL;
    map->shards[i].capacity = 0;
    map->shards[i].used = 0;
  }
  atomic_init(&map->live_bytes, 0);
  atomic_init(&map->live_count, 0);
  atomic_init(&map->peak_bytes, 0);
}

void gpumem__ptrmap_destroy(gpumem__ptrmap *map) {
  for (int i = 0; i < GPUMEM__PTRMAP_SHARDS; i++) {
    free(map->shards[i].slots);
    pthread_mutex_destroy(&map->shards[i].lock);
  }
}

/* Index of ptr's slot, or of the empty slot where it would go. Needs capacity > 0. */
static size_t find_slot(const gpumem__ptrmap_shard *shard, uintptr_t ptr) {
  size_t mask = shard->capacity - 1;
  size_t i = gpumem__hash_pointer(ptr) & mask;
  while (shard->slots[i].ptr != 0 && shard->slots[i].ptr != ptr)
    i = (i + 1) & mask;
  return i;
}

static bool grow(gpumem__ptrmap_shard *shard) {
  size_t capacity = shard->capacity ? shard->capacity * 2 : 64;
  gpumem__ptrmap_entry *slots = calloc(capacity, sizeof *slots);
  if (!slots)
    return false;
  gpumem__ptrmap_shard grown = {.slots = slots, .capacity = capacity, .used = shard->used};
  for (size_t i = 0; i < shard->capacity; i++)
    if (shard->slots[i].ptr != 0)
      slots[find_slot(&grown, shard->slots[i].ptr)] = shard->slots[i];
  free(shard->slots);
  shard->slots = slots;
  shard->capacity = capacity;
  return true;
}

static gpumem_status insert(gpumem__ptrmap *map, void *ptr, size_t bytes, void *base,
                            size_t raw_bytes, bool refuse_live) {
  uintptr_t key = (uintptr_t)ptr;
  gpumem__ptrmap_shard *shard = shard_of(map, key);
  pthread_mutex_lock(&shard->lock);
  if (refuse_live && shard->capacity && shard->slots[find_slot(shard, key)].ptr == key) {
    pthread_mutex_unlock(&shard->lock);
    return GPUMEM_ERR_MISUSE;
  }
  /* Keep the load under one half so probe sequences stay short. */
  if ((shard->used + 1) * 2 > shard->capacity && !grow(shard)) {
    pthread_mutex_unlock(&shard->lock);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "out of host memory for the table of live allocations");
  }
  size_t i = find_slot(shard, key);
  shard->slots[i] = (gpumem__ptrmap_entry){key, bytes, (uintptr_t)base, raw_bytes};
  shard->used++;
  pthread_mutex_unlock(&shard->lock);
  uint64_t live = atomic_fetch_add_explicit(&map->live_bytes, bytes, memory_order_relaxed) + bytes;
  atomic_fetch_add_explicit(&map->live_count, 1, memory_order_relaxed);
  gpumem__atomic_raise(&map->peak_bytes, live);
  return GPUMEM_OK;
}

gpumem_status gpumem__ptrmap_insert(gpumem__ptrmap *map, void *ptr, size_t bytes, void *base,
                                    size_t raw_bytes) {
  return insert(map, ptr, bytes, base, raw_bytes, false);
}

gpumem_status gpumem__ptrmap_insert_new(gpumem__ptrmap *map, void *ptr, size_t bytes) {
  return insert(map, ptr, bytes, ptr, bytes, true);
}

/* Backward-shift deletion: move later members of the probe run into the hole. */
static void remove_slot(gpumem__ptrmap_shard *shard, size_t hole) {
  size_t mask = shard->capacity - 1;
  size_t i = hole;
  for (;;) {
    i = (i + 1) & mask;
    if (shard->slots[i].ptr == 0)
      break;
    size_t home = gpumem__hash_pointer(shard->slots[i].ptr) & mask;
    if (gpumem__probe_fills_hole(hole, i, home)) {
      shard->slots[hole] = shard->slots[i];
      hole = i;
    }
  }
  shard->slots[hole].ptr = 0;
  shard->used--;
}

gpumem_status gpumem__ptrmap_take(gpumem__ptrmap *map, void *ptr, size_t bytes, const char *owner,
                                  void **base, size_t *raw_bytes) {
  uintptr_t key = (uintptr_t)ptr;
  gpumem__ptrmap_shard *shard = shard_of(map, key);
  pthread_mutex_lock(&shard->lock);
  size_t i = shard->capacity ? find_slot(shard, key) : 0;
  if (shard->capacity == 0 || shard->slots[i].ptr != key) {
    pthread_mutex_unlock(&shard->lock);
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "deallocate of %p (%zu bytes) from resource '%s': that pointer is not "
                        "a live allocation of this resource (never allocated here, or already "
                        "freed)",
                        ptr, bytes, owner);
  }
  size_t live_size = shard->slots[i].bytes;
  if (live_size != bytes) {
    pthread_mutex_unlock(&shard->lock);
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "deallocate of %p from resource '%s' with %zu bytes, but it was "
                        "allocated with %zu bytes",
                        ptr, owner, bytes, live_size);
  }
  *base = (void *)shard->slots[i].base;
  *raw_bytes = shard->slots[i].raw_bytes;
  remove_slot(shard, i);
  pthread_mutex_unlock(&shard->lock);
  atomic_fetch_sub_explicit(&map->live_bytes, bytes, memory_order_relaxed);
  atomic_fetch_sub_explicit(&map->live_count, 1, memory_order_relaxed);
  return GPUMEM_OK;
}

gpumem_status gpumem__ptrmap_query(const gpumem__ptrmap *map, gpumem_query what, uint64_t *out) {
  switch (what) {
  case GPUMEM_QUERY_LIVE_BYTES:
    *out = atomic_load_explicit(&map->live_bytes, memory_order_relaxed);
    return GPUMEM_OK;
  case GPUMEM_QUERY_LIVE_COUNT:
    *out = atomic_load_explicit(&map->live_count, memory_order_relaxed);
    return GPUMEM_OK;
  case GPUMEM_QUERY_PEAK_LIVE_BYTES:
    *out = atomic_load_explicit(&map->peak_bytes, memory_order_relaxed);
    return GPUMEM_OK;
  default:
    return GPUMEM_ERR_UNSUPPORTED;
  }
}
