/* counters.h: the cheap, always-on counters of a resource that keeps its own books (the
 * suballocators, and upstreams such as vmm): reserved and live bytes, their peaks, and the
 * live count, which answer the counter queries.
 *
 * Counters are updated under the resource's own lock but read without it by queries, so
 * they are relaxed atomics: a query costs a load, never a lock. Writers hold the lock, so
 * an update is a relaxed load and store (plain moves), not a locked read-modify-write,
 * which would cost more than the rest of an allocation. */
#ifndef GPUMEM_CORE_COUNTERS_H
#define GPUMEM_CORE_COUNTERS_H

#include "core/internal.h"

typedef struct gpumem__memory_counters {
  atomic_uint_fast64_t reserved, peak_reserved;
  atomic_uint_fast64_t live_bytes, peak_live_bytes, live_count;
} gpumem__memory_counters;

static inline void gpumem__counters_init(gpumem__memory_counters *s) {
  atomic_init(&s->reserved, 0);
  atomic_init(&s->peak_reserved, 0);
  atomic_init(&s->live_bytes, 0);
  atomic_init(&s->peak_live_bytes, 0);
  atomic_init(&s->live_count, 0);
}

static inline uint64_t gpumem__counters_reserved(const gpumem__memory_counters *s) {
  return atomic_load_explicit(&s->reserved, memory_order_relaxed);
}

/* Adds `delta` (may wrap for subtraction) to a counter only its lock holder writes. */
static inline uint64_t gpumem__counters_bump(atomic_uint_fast64_t *counter, uint64_t delta) {
  uint64_t value = atomic_load_explicit(counter, memory_order_relaxed) + delta;
  atomic_store_explicit(counter, value, memory_order_relaxed);
  return value;
}

static inline void gpumem__counters_raise_peak(atomic_uint_fast64_t *peak, uint64_t value) {
  if (value > atomic_load_explicit(peak, memory_order_relaxed))
    atomic_store_explicit(peak, value, memory_order_relaxed);
}

static inline void gpumem__counters_add_reserved(gpumem__memory_counters *s, uint64_t bytes) {
  gpumem__counters_raise_peak(&s->peak_reserved, gpumem__counters_bump(&s->reserved, bytes));
}

static inline void gpumem__counters_sub_reserved(gpumem__memory_counters *s, uint64_t bytes) {
  gpumem__counters_bump(&s->reserved, -bytes);
}

/* Counts an allocation of `bytes`; returns the live bytes now. */
static inline uint64_t gpumem__counters_allocated(gpumem__memory_counters *s, uint64_t bytes) {
  uint64_t live = gpumem__counters_bump(&s->live_bytes, bytes);
  gpumem__counters_raise_peak(&s->peak_live_bytes, live);
  gpumem__counters_bump(&s->live_count, 1);
  return live;
}

static inline void gpumem__counters_freed(gpumem__memory_counters *s, uint64_t bytes) {
  gpumem__counters_bump(&s->live_bytes, -bytes);
  gpumem__counters_bump(&s->live_count, (uint64_t)-1);
}

/* Answers the counter queries; GPUMEM_ERR_UNSUPPORTED for the others. */
static inline gpumem_status gpumem__counters_query(const gpumem__memory_counters *s,
                                                   gpumem_query what, uint64_t *out) {
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

#endif /* GPUMEM_CORE_COUNTERS_H */
