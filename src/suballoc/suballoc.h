/* suballoc.h: what the suballocators share beyond blocks: their cheap statistics.
 *
 * Counters are updated under each suballocator's own lock but read without it by queries,
 * so they are relaxed atomics: a query costs a load, never a lock. Writers hold the lock,
 * so an update is a relaxed load and store (plain moves), not a locked read-modify-write,
 * which would cost more than the rest of an allocation. */
#ifndef GPUMEM_SUBALLOC_H
#define GPUMEM_SUBALLOC_H

#include "core/internal.h"

typedef struct gpumem__suballoc_stats {
  atomic_uint_fast64_t reserved, peak_reserved;
  atomic_uint_fast64_t live_bytes, peak_live_bytes, live_count;
} gpumem__suballoc_stats;

static inline void gpumem__stats_init(gpumem__suballoc_stats *s) {
  atomic_init(&s->reserved, 0);
  atomic_init(&s->peak_reserved, 0);
  atomic_init(&s->live_bytes, 0);
  atomic_init(&s->peak_live_bytes, 0);
  atomic_init(&s->live_count, 0);
}

static inline uint64_t gpumem__stats_reserved(const gpumem__suballoc_stats *s) {
  return atomic_load_explicit(&s->reserved, memory_order_relaxed);
}

/* Adds `delta` (may wrap for subtraction) to a counter only its lock holder writes. */
static inline uint64_t gpumem__stats_bump(atomic_uint_fast64_t *counter, uint64_t delta) {
  uint64_t value = atomic_load_explicit(counter, memory_order_relaxed) + delta;
  atomic_store_explicit(counter, value, memory_order_relaxed);
  return value;
}

static inline void gpumem__stats_raise_peak(atomic_uint_fast64_t *peak, uint64_t value) {
  if (value > atomic_load_explicit(peak, memory_order_relaxed))
    atomic_store_explicit(peak, value, memory_order_relaxed);
}

static inline void gpumem__stats_add_reserved(gpumem__suballoc_stats *s, uint64_t bytes) {
  gpumem__stats_raise_peak(&s->peak_reserved, gpumem__stats_bump(&s->reserved, bytes));
}

static inline void gpumem__stats_sub_reserved(gpumem__suballoc_stats *s, uint64_t bytes) {
  gpumem__stats_bump(&s->reserved, -bytes);
}

static inline void gpumem__stats_allocated(gpumem__suballoc_stats *s, uint64_t bytes) {
  gpumem__stats_raise_peak(&s->peak_live_bytes, gpumem__stats_bump(&s->live_bytes, bytes));
  gpumem__stats_bump(&s->live_count, 1);
}

static inline void gpumem__stats_freed(gpumem__suballoc_stats *s, uint64_t bytes) {
  gpumem__stats_bump(&s->live_bytes, -bytes);
  gpumem__stats_bump(&s->live_count, (uint64_t)-1);
}

/* Answers the counter queries; GPUMEM_ERR_UNSUPPORTED for the others. */
static inline gpumem_status gpumem__stats_query(const gpumem__suballoc_stats *s, gpumem_query what,
                                                uint64_t *out) {
  const atomic_uint_fast64_t *counter;
  switch (what) {
  case GPUMEM_QUERY_RESERVED_BYTES:
    counter = &s->reserved;
    break;
  case GPUMEM_QUERY_PEAK_RESERVED_BYTES:
    counter = &s->peak_reserved;
    break;
  case GPUMEM_QUERY_LIVE_BYTES:
    counter = &s->live_bytes;
    break;
  case GPUMEM_QUERY_PEAK_LIVE_BYTES:
    counter = &s->peak_live_bytes;
    break;
  case GPUMEM_QUERY_LIVE_COUNT:
    counter = &s->live_count;
    break;
  default:
    return GPUMEM_ERR_UNSUPPORTED;
  }
  *out = atomic_load_explicit(counter, memory_order_relaxed);
  return GPUMEM_OK;
}

#endif /* GPUMEM_SUBALLOC_H */
