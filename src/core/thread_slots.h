/* thread_slots.h: a slot per thread in a resource, found without thread-local storage, for
 * counters that each thread writes with plain stores (no atomic instruction, no cache line
 * written by two threads) and a reader sums.
 *
 * A thread finds its slot where its token (the thread pointer) hashes, in a table of owners
 * that only claims write. A slot belongs to a token for good; a new thread with the token of
 * one that ended takes its slot over, which is safe since the old thread writes no more.
 * Past GPUMEM__THREAD_SLOTS threads, the rest get no slot (-1) and their caller falls back
 * to a shared path. */
#ifndef GPUMEM_CORE_THREAD_SLOTS_H
#define GPUMEM_CORE_THREAD_SLOTS_H

#include "core/internal.h"
#include "core/thread_barrier.h"

#include <pthread.h>
#include <sched.h>

#define GPUMEM__THREAD_SLOTS 64
/* Two cache lines: the adjacent-line prefetcher pulls pairs. */
#define GPUMEM__SLOT_ALIGN 128

typedef struct gpumem__thread_slots {
  atomic_uintptr_t owners[GPUMEM__THREAD_SLOTS]; /* a thread token each; 0: free */
} gpumem__thread_slots;

static inline unsigned gpumem__thread_slot_hash(uintptr_t token) {
  return (unsigned)(((uint64_t)token * 0x9E3779B97F4A7C15ull) >> 58); /* 6 bits: 64 slots */
}

/* Looks the token up from its hash on (open addressing), claiming the first free slot on
 * the way when it has none. -1 when every slot is taken. */
static GPUMEM_NOINLINE int gpumem__thread_slot_claim(gpumem__thread_slots *slots, uintptr_t token) {
  for (unsigned n = 0, i = gpumem__thread_slot_hash(token); n < GPUMEM__THREAD_SLOTS;
       n++, i = (i + 1) % GPUMEM__THREAD_SLOTS) {
    uintptr_t owner = atomic_load_explicit(&slots->owners[i], memory_order_relaxed);
    if (owner == token)
      return (int)i;
    if (owner == 0 && atomic_compare_exchange_strong(&slots->owners[i], &owner, token))
      return (int)i; /* else another thread took it: probe on */
  }
  return -1;
}

/* The calling thread's slot where its token hashes, which it almost always is; -1 when it is
 * elsewhere or not yet claimed (gpumem__thread_slot_claim finds or claims it). */
static inline int gpumem__thread_slot_at_home(gpumem__thread_slots *slots) {
  uintptr_t token = gpumem__thread_token();
  unsigned i = gpumem__thread_slot_hash(token);
  return atomic_load_explicit(&slots->owners[i], memory_order_relaxed) == token ? (int)i : -1;
}

/* The calling thread's slot: where its token hashes, almost always. */
static inline int gpumem__thread_slot(gpumem__thread_slots *slots) {
  int slot = gpumem__thread_slot_at_home(slots);
  if (GPUMEM_LIKELY(slot >= 0))
    return slot;
  return gpumem__thread_slot_claim(slots, gpumem__thread_token());
}

/* Whether slot i was ever claimed. */
static inline bool gpumem__thread_slot_used(const gpumem__thread_slots *slots, int i) {
  return atomic_load_explicit(&slots->owners[i], memory_order_relaxed) != 0;
}

/* The gate of a slot, between its owner, which enters with plain stores, and a stopper that
 * holds the resource's mutex and needs every owner out (the limit's reclaim, the statistics'
 * reads). The owner stores `inside`, then loads `closed`; the stopper stores `closed`, then
 * loads `inside`. A processor may reorder each side's store after its load, so the stopper
 * runs membarrier(2) between them (a barrier on every thread, so that owners need none):
 * either the owner sees the gate closed (and takes its caller's mutex path) or the stopper
 * sees it inside (and waits). Where membarrier is missing, or under ThreadSanitizer, both
 * sides use a sequentially consistent fence. */
typedef struct gpumem__slot_gate {
  atomic_int inside;
  atomic_int closed; /* written by the stopper, under the resource's mutex */
  bool membarrier;   /* gpumem__thread_barrier is in use: read by the owner on every entry */
} gpumem__slot_gate;

/* Enters the gate for plain use of the slot; false while it is closed (nothing held then). */
static inline bool gpumem__gate_enter(gpumem__slot_gate *gate) {
  atomic_store_explicit(&gate->inside, 1, memory_order_relaxed);
  if (GPUMEM_LIKELY(gate->membarrier))
    atomic_signal_fence(memory_order_seq_cst); /* the stopper's membarrier is the fence */
  else
    atomic_thread_fence(memory_order_seq_cst);
  if (GPUMEM_LIKELY(!atomic_load_explicit(&gate->closed, memory_order_acquire)))
    return true;
  atomic_store_explicit(&gate->inside, 0, memory_order_release);
  return false;
}

static inline void gpumem__gate_leave(gpumem__slot_gate *gate) {
  atomic_store_explicit(&gate->inside, 0, memory_order_release);
}

/* The stopper's side, after closing the gates and before waiting owners out. A kernel that
 * refuses the barrier it once offered would leave no safe way on: the process stops. */
static inline void gpumem__gate_fence(bool membarrier) {
  atomic_thread_fence(memory_order_seq_cst);
  if (membarrier && !gpumem__thread_barrier())
    __builtin_trap();
}

/* Waits until the owner is out of a closed gate. */
static inline void gpumem__gate_wait_out(const gpumem__slot_gate *gate) {
  for (unsigned spins = 0; atomic_load_explicit(&gate->inside, memory_order_acquire); spins++)
    if (spins > 128)
      sched_yield();
}

/* A counter only its slot's owner writes: a load and a store, no atomic instruction. */
static inline void gpumem__slot_add(_Atomic int64_t *value, int64_t delta) {
  atomic_store_explicit(value, atomic_load_explicit(value, memory_order_relaxed) + delta,
                        memory_order_relaxed);
}

/* The same for a count that only grows. */
static inline void gpumem__slot_count(_Atomic uint64_t *value, uint64_t amount) {
  atomic_store_explicit(value, atomic_load_explicit(value, memory_order_relaxed) + amount,
                        memory_order_relaxed);
}

#endif /* GPUMEM_CORE_THREAD_SLOTS_H */
