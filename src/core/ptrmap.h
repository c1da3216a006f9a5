/* ptrmap.h: the table of live allocations a resource keeps to know its own pointers.
 *
 * Base resources (cuda, managed, async, pinned_host, system) call a driver that costs
 * microseconds, so a hash lookup per call is cheap beside it and buys exact misuse
 * detection: a pointer the resource never gave, a double free, a wrong size, and live
 * bytes and counts for statistics and for refusing to destroy a resource still in use.
 *
 * The table is split into shards by pointer hash, each with its own lock, so that threads
 * freeing different pointers rarely contend. Thread-safe. */
#ifndef GPUMEM_PTRMAP_H
#define GPUMEM_PTRMAP_H

#include "core/internal.h"

#include <pthread.h>

#define GPUMEM__PTRMAP_SHARDS 16

typedef struct gpumem__ptrmap_entry {
  uintptr_t ptr;    /* 0: empty slot */
  size_t bytes;     /* the size the user asked for */
  uintptr_t base;   /* what the upstream returned (differs from ptr when over-aligned) */
  size_t raw_bytes; /* what was asked of the upstream (more than bytes when over-aligned) */
} gpumem__ptrmap_entry;

typedef struct gpumem__ptrmap_shard {
  pthread_mutex_t lock;
  gpumem__ptrmap_entry *slots;
  size_t capacity; /* a power of two, or 0 */
  size_t used;
} gpumem__ptrmap_shard;

typedef struct gpumem__ptrmap {
  gpumem__ptrmap_shard shards[GPUMEM__PTRMAP_SHARDS];
  atomic_uint_fast64_t live_bytes, live_count, peak_bytes;
} gpumem__ptrmap;

void gpumem__ptrmap_init(gpumem__ptrmap *map);
void gpumem__ptrmap_destroy(gpumem__ptrmap *map);

/* Records a new allocation. GPUMEM_ERR_OUT_OF_MEMORY (host memory) on failure. */
gpumem_status gpumem__ptrmap_insert(gpumem__ptrmap *map, void *ptr, size_t bytes, void *base,
                                    size_t raw_bytes);

/* As gpumem__ptrmap_insert (base and raw size the same as ptr and bytes), but refuses a
 * pointer that is already live: GPUMEM_ERR_MISUSE, with no message set and nothing
 * changed. For upstreams that cannot be trusted to hand out each pointer once. */
gpumem_status gpumem__ptrmap_insert_new(gpumem__ptrmap *map, void *ptr, size_t bytes);

/* Removes `ptr` if it is live with exactly `bytes`, giving its base and raw size. Otherwise returns
 * GPUMEM_ERR_MISUSE with a message naming `owner` (a resource name) and changes nothing. */
gpumem_status gpumem__ptrmap_take(gpumem__ptrmap *map, void *ptr, size_t bytes, const char *owner,
                                  void **base, size_t *raw_bytes);

/* Answers the live-memory queries (LIVE_BYTES, LIVE_COUNT, PEAK_LIVE_BYTES); UNSUPPORTED
 * for the others. */
gpumem_status gpumem__ptrmap_query(const gpumem__ptrmap *map, gpumem_query what, uint64_t *out);

#endif /* GPUMEM_PTRMAP_H */
