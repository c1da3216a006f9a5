/* stats.h: the statistics adaptor's structure (stats.c), apart so that tests of internals
 * can reach it (tests/statistics.c corrupts it to prove the validator finds what is wrong). */
#ifndef GPUMEM_ADAPTORS_STATS_H
#define GPUMEM_ADAPTORS_STATS_H

#include "adaptors/adaptor.h"
#include "core/thread_slots.h"

#include <pthread.h>

/* A thread's counts since the top counters were pushed (or last collected). The owner writes
 * its gate's `inside` and the figures; the mutex holder closes the gate and writes the thresholds
 * and (with the owner out) the figures. Relaxed atomics, which compile to plain moves. */
typedef struct stats_slot {
  gpumem__slot_gate gate; /* closed: not joined yet, or the mutex holder needs the slot still */
  _Atomic int64_t flush_bytes, flush_count;
  _Atomic int64_t bytes, count; /* current, not yet in the shared sums; may go below zero */
  _Atomic int64_t total_bytes, total_count;
  _Atomic int64_t peak_bytes, peak_count; /* the highest shared sum + own bytes (count) seen */
} __attribute__((aligned(GPUMEM__SLOT_ALIGN))) stats_slot;

typedef struct stats_frame {
  gpumem_statistics_counter bytes, count;
} stats_frame;

typedef struct stats_resource {
  gpumem_resource header;
  bool membarrier; /* gpumem__thread_barrier is available: the stopper's fence */
  int64_t flush_bytes, flush_count;
  gpumem__thread_slots owners;
  /* The shared sums of the top counters' current values: read at every allocation, written
   * when a thread adds its changes (rarely) or the stack moves. */
  struct {
    _Atomic int64_t bytes, count;
  } __attribute__((aligned(GPUMEM__SLOT_ALIGN))) flushed; /* one line: one miss after a flush */
  _Alignas(GPUMEM__SLOT_ALIGN) pthread_mutex_t lock;
  /* The rest is under the lock. */
  uint64_t joined; /* a bit per slot whose thread has joined */
  bool shared;     /* several threads have counted: the slots flush */
  /* The top counters' peaks and totals as of the last push, pop or read (the slots hold
   * what came since). */
  int64_t peak_bytes, peak_count, total_bytes, total_count;
  stats_frame *saved; /* the counters below the top, bottom first */
  size_t depth, capacity;
  stats_slot spill; /* for threads past the last slot, which count under the lock */
  stats_slot slots[GPUMEM__THREAD_SLOTS];
} stats_resource;

#endif /* GPUMEM_ADAPTORS_STATS_H */
