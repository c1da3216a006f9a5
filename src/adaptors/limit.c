/* limit.c: the limit adaptor, which refuses allocations that would take the bytes allocated
 * through it past a maximum, before they reach the upstream.
 *
 * One counter of allocated bytes shared by every thread would be exact, and a cache line
 * that every allocation of every thread writes: 16 threads on an arena would queue on it,
 * and even one thread would pay an atomic instruction (10 to 20 ns on some servers) per
 * call. So the budget is split. Each thread has a slot of its own (a cache line, claimed on
 * its first call), holding credit: budget it may spend without asking anyone. An
 * allocation that its slot's credit covers takes it with plain loads and stores; a free
 * gives its bytes back to the freeing thread's slot. Only when a slot runs dry does its
 * thread take the resource's mutex and draw from the global budget, a batch more than it
 * needs (an eighth of what is left, at most limit/128), so that batches shrink as the limit
 * nears; a slot holding more than four batches returns the surplus. A slot's credit walks
 * up and down with its thread's allocations and frees, and the mutex is taken when it
 * leaves [0, four batches]: with requests of 1 to 256 MiB under a 64 GiB limit, batches of
 * limit/512 sent 6% of calls there, limit/128 sends 0.4% (BENCHMARKS.md's "large" workload
 * run through a model of these rules).
 *
 * Exactness: before refusing, the refuser reclaims the credit of every slot into the global
 * budget, so an allocation fails only if the bytes allocated plus the request exceed the
 * limit. Taking credit from a slot whose owner may be using it at that moment needs the
 * owner to be out: the reclaimer closes every slot's gate and waits its owner out
 * (core/thread_slots.h says why the owner's plain stores are safe against it).
 *
 * A thread finds its slot through core/thread_slots.h (no thread-local storage call, no
 * other thread's line touched). What an allocation reads of the resource sits in the slot
 * (its gate), so that a call touches the owners' line and its slot's, and nothing else of the
 * limit's that a busy pool above or below may have evicted. A thread past the last slot (more than
 * MAX_SLOTS threads used the resource) allocates under the mutex. */
#include "adaptors/adaptor.h"
#include "core/thread_slots.h"
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS GPUMEM__THREAD_SLOTS
#define SLOT_ALIGN GPUMEM__SLOT_ALIGN

/* A thread's share of the budget. The owner writes `credit` and `live_count` (a reclaimer
 * writes `credit` too, while the owner is out of the gate); the rest is set
 * at creation. Relaxed atomics, which compile to plain moves. A slot's live count may go
 * below zero (frees of blocks another thread allocated); their sum is the resource's. */
typedef struct limit_slot {
  gpumem__slot_gate gate; /* closed by a reclaimer, under the mutex */
  int64_t credit_cap;     /* four batches: a slot holding more returns the surplus */
  _Atomic int64_t credit;
  _Atomic int64_t live_count;
} __attribute__((aligned(SLOT_ALIGN))) limit_slot;

typedef struct limit_resource {
  gpumem_resource header;
  int64_t limit;
  int64_t batch;
  bool membarrier; /* gpumem__thread_barrier is available: the reclaimer's fence */
  /* Each slot's owner, apart from the slots so that a lookup reads no other thread's
   * written line. Written once per slot. */
  gpumem__thread_slots owners;
  _Alignas(SLOT_ALIGN) pthread_mutex_t lock;
  int64_t global;                    /* budget in no slot; under lock */
  _Atomic int64_t shared_live_count; /* threads without a slot */
  limit_slot slots[MAX_SLOTS];
} limit_resource;

/* ---------------------------------------------------------------------------------------
 * Slots
 * ------------------------------------------------------------------------------------- */

/* The calling thread's slot, or NULL past the last one. */
static inline limit_slot *thread_slot(limit_resource *self) {
  int i = gpumem__thread_slot(&self->owners);
  return GPUMEM_LIKELY(i >= 0) ? &self->slots[i] : NULL;
}

static inline int64_t load(const _Atomic int64_t *value) {
  return atomic_load_explicit(value, memory_order_relaxed);
}

/* Only the owner writes these, so a load and a store need no atomic instruction. */
static inline void add(_Atomic int64_t *value, int64_t delta) {
  gpumem__slot_add(value, delta);
}

/* Moves every slot's credit to the global budget. Called with the mutex held. */
static void reclaim(limit_resource *self) {
  /* Every slot, claimed or not: a thread claiming one now finds the flag too. */
  for (int i = 0; i < MAX_SLOTS; i++)
    atomic_store_explicit(&self->slots[i].gate.closed, 1, memory_order_relaxed);
  gpumem__gate_fence(self->membarrier);
  for (int i = 0; i < MAX_SLOTS; i++) {
    limit_slot *slot = &self->slots[i];
    if (!gpumem__thread_slot_used(&self->owners, i))
      continue; /* never claimed: no credit, and a claim now finds the mutex taken */
    gpumem__gate_wait_out(&slot->gate);
    self->global += load(&slot->credit);
    atomic_store_explicit(&slot->credit, 0, memory_order_relaxed);
  }
  for (int i = 0; i < MAX_SLOTS; i++)
    atomic_store_explicit(&self->slots[i].gate.closed, 0, memory_order_release);
}

/* The credit a slot keeps around requests of `bytes`: the resource's batch, or room for two
 * such requests when they are larger, so that a thread allocating and freeing blocks larger
 * than the batch (hundreds of MiB under a limit of tens of GiB) does not take the mutex for
 * each. A reclaim gets back whatever a slot keeps. */
static inline int64_t batch_for(const limit_resource *self, int64_t bytes) {
  return bytes > self->batch / 2 ? 2 * bytes : self->batch;
}

/* The budget for `bytes` from the global budget (and every slot's, if needed), with a batch
 * more for the slot. False when the limit does not allow it. */
static GPUMEM_NOINLINE bool take_slow(limit_resource *self, limit_slot *slot, int64_t bytes) {
  pthread_mutex_lock(&self->lock);
  int64_t have = slot ? load(&slot->credit) : 0;
  if (self->global + have < bytes) {
    reclaim(self);
    have = 0;
  }
  bool ok = self->global + have >= bytes;
  if (ok && slot) {
    int64_t left = self->global + have - bytes;
    int64_t batch = batch_for(self, bytes);
    int64_t keep = left / 8 < batch ? left / 8 : batch;
    atomic_store_explicit(&slot->credit, keep, memory_order_relaxed);
    self->global = left - keep;
    add(&slot->live_count, 1);
  } else if (ok) {
    self->global -= bytes;
    add(&self->shared_live_count, 1);
  }
  pthread_mutex_unlock(&self->lock);
  return ok;
}

/* Takes the budget of one allocation of `bytes` from the slot's credit alone; false when it
 * does not cover it (or a reclaim runs, or the thread has no slot): nothing taken then. */
static inline bool take_from_slot(limit_resource *self, limit_slot *slot, int64_t bytes) {
  if (GPUMEM_LIKELY(slot != NULL) && GPUMEM_LIKELY(gpumem__gate_enter(&slot->gate))) {
    int64_t credit = load(&slot->credit);
    if (GPUMEM_LIKELY(credit >= bytes)) {
      atomic_store_explicit(&slot->credit, credit - bytes, memory_order_relaxed);
      add(&slot->live_count, 1);
      gpumem__gate_leave(&slot->gate);
      return true;
    }
    gpumem__gate_leave(&slot->gate);
  }
  return false;
}

/* Takes the budget of one allocation of `bytes`; false: past the limit. */
static inline bool take(limit_resource *self, limit_slot *slot, int64_t bytes) {
  return take_from_slot(self, slot, bytes) || take_slow(self, slot, bytes);
}

static GPUMEM_NOINLINE void put_slow(limit_resource *self, limit_slot *slot, int64_t bytes,
                                     int64_t allocations) {
  pthread_mutex_lock(&self->lock);
  if (slot) {
    int64_t credit = load(&slot->credit) + bytes;
    int64_t batch = batch_for(self, bytes);
    int64_t keep = credit < batch ? credit : batch;
    atomic_store_explicit(&slot->credit, keep, memory_order_relaxed);
    self->global += credit - keep;
    add(&slot->live_count, allocations);
  } else {
    self->global += bytes;
    add(&self->shared_live_count, allocations);
  }
  pthread_mutex_unlock(&self->lock);
}

/* Gives back the budget of `bytes` freed; `allocations`: the change in live allocations. */
static inline void put(limit_resource *self, limit_slot *slot, int64_t bytes, int64_t allocations) {
  if (GPUMEM_LIKELY(slot != NULL) && GPUMEM_LIKELY(gpumem__gate_enter(&slot->gate))) {
    int64_t credit = load(&slot->credit) + bytes;
    /* At most four batch_for(bytes), without its branch: 8 * bytes is the larger exactly
     * when requests are larger than half a batch. */
    if (GPUMEM_LIKELY(credit <= slot->credit_cap || credit <= 8 * bytes)) {
      atomic_store_explicit(&slot->credit, credit, memory_order_relaxed);
      add(&slot->live_count, allocations);
      gpumem__gate_leave(&slot->gate);
      return;
    }
    gpumem__gate_leave(&slot->gate);
  }
  put_slow(self, slot, bytes, allocations);
}

/* ---------------------------------------------------------------------------------------
 * The resource
 * ------------------------------------------------------------------------------------- */

/* The live allocations: the sum of the slots' counts and the slotless threads'. */
static uint64_t live_count(const limit_resource *self) {
  int64_t sum = load(&self->shared_live_count);
  for (int i = 0; i < MAX_SLOTS; i++)
    sum += load(&self->slots[i].live_count);
  return sum > 0 ? (uint64_t)sum : 0; /* a sum read while frees move between slots */
}

/* The budget is conserved: what is neither in the global budget nor in a slot's credit is
 * allocated (or being allocated). So allocations need not count bytes, which saves every
 * call a load and a store; this read takes the mutex, for the global budget. */
static uint64_t allocated_bytes(const limit_resource *self) {
  limit_resource *mutable_self = (limit_resource *)self;
  pthread_mutex_lock(&mutable_self->lock);
  int64_t free_budget = self->global;
  for (int i = 0; i < MAX_SLOTS; i++)
    free_budget += load(&self->slots[i].credit);
  pthread_mutex_unlock(&mutable_self->lock);
  int64_t allocated = self->limit - free_budget;
  return allocated > 0 ? (uint64_t)allocated : 0;
}

static GPUMEM_COLD gpumem_status refuse(limit_resource *self, size_t bytes) {
  char limit[48], allocated[48], why[160];
  gpumem__format_bytes((uint64_t)self->limit, limit, sizeof limit);
  gpumem__format_bytes(allocated_bytes(self), allocated, sizeof allocated);
  snprintf(why, sizeof why, "past its limit of %s, with %s allocated through it", limit, allocated);
  gpumem__note_oom(GPUMEM__OOM_LIMIT, &self->header, bytes);
  return gpumem__fail_out_of_memory(&self->header, bytes, why);
}

/* The upstream refused an allocation whose budget was taken: the budget goes back. */
static GPUMEM_NOINLINE gpumem_status give_back(limit_resource *self, size_t bytes,
                                               gpumem_status status) {
  put(self, thread_slot(self), (int64_t)bytes, -1);
  return gpumem__fail_through(&self->header, status);
}

/* An allocation the slot's credit does not cover: the mutex, the global budget, a reclaim. */
static GPUMEM_NOINLINE gpumem_status allocate_slowly(limit_resource *self, limit_slot *slot,
                                                     size_t bytes, size_t alignment,
                                                     gpumem_stream stream, void **ptr) {
  if (bytes > (uint64_t)self->limit || !take_slow(self, slot, (int64_t)bytes))
    return refuse(self, bytes);
  gpumem_resource *up = self->header.upstream;
  gpumem_status status = up->ops->allocate(up, bytes, alignment, stream, ptr);
  return GPUMEM_LIKELY(status == GPUMEM_OK) ? status : give_back(self, bytes, status);
}

/* The fast path keeps only what the upstream's failure needs across its call, so that it
 * saves few registers; everything rarer is out of line. */
static gpumem_status limit_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                    gpumem_stream stream, void **ptr) {
  limit_resource *self = (limit_resource *)mr;
  limit_slot *slot = thread_slot(self);
  /* No credit covers more than the limit: only a size past int64_t needs a test here. */
  if (GPUMEM_UNLIKELY((int64_t)bytes < 0) ||
      GPUMEM_UNLIKELY(!take_from_slot(self, slot, (int64_t)bytes)))
    return allocate_slowly(self, slot, bytes, alignment, stream, ptr);
  gpumem_status status = mr->upstream->ops->allocate(mr->upstream, bytes, alignment, stream, ptr);
  return GPUMEM_LIKELY(status == GPUMEM_OK) ? status : give_back(self, bytes, status);
}

static gpumem_status limit_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                      size_t alignment, gpumem_stream stream) {
  limit_resource *self = (limit_resource *)mr;
  gpumem_status status = mr->upstream->ops->deallocate(mr->upstream, ptr, bytes, alignment, stream);
  if (GPUMEM_LIKELY(status == GPUMEM_OK))
    put(self, thread_slot(self), (int64_t)bytes, -1);
  return status;
}

/* Placement counts as allocation. A refusal is quiet, as a taken range is, so that a pool
 * above grows by a plain allocation, which the limit refuses with its message. */
static gpumem_status limit_allocate_at(gpumem_resource *mr, uintptr_t addr, size_t bytes,
                                       void **ptr) {
  limit_resource *self = (limit_resource *)mr;
  limit_slot *slot = thread_slot(self);
  if (bytes > (uint64_t)self->limit || !take(self, slot, (int64_t)bytes))
    return GPUMEM_ERR_OUT_OF_MEMORY;
  gpumem_status status = mr->upstream->ops->allocate_at(mr->upstream, addr, bytes, ptr);
  if (status != GPUMEM_OK)
    put(self, slot, (int64_t)bytes, -1);
  return status;
}

static gpumem_status limit_unmap_pieces(gpumem_resource *mr, uintptr_t addr, size_t size,
                                        int *allocations_added) {
  limit_resource *self = (limit_resource *)mr;
  gpumem_status status =
      mr->upstream->ops->unmap_pieces(mr->upstream, addr, size, allocations_added);
  if (status == GPUMEM_OK)
    put(self, thread_slot(self), (int64_t)size, *allocations_added);
  return status;
}

static gpumem_status limit_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  const limit_resource *self = (const limit_resource *)mr;
  if (what == GPUMEM_QUERY_LIVE_BYTES) {
    *out = allocated_bytes(self);
    return GPUMEM_OK;
  }
  if (what == GPUMEM_QUERY_LIVE_COUNT) {
    *out = live_count(self);
    return GPUMEM_OK;
  }
  if (what == GPUMEM_QUERY_LIMIT_BYTES) {
    *out = (uint64_t)self->limit;
    return GPUMEM_OK;
  }
  return gpumem__forward_query(mr, what, out);
}

static void limit_describe(const gpumem_resource *mr, char *buf, size_t size) {
  gpumem__describe_over(mr, buf, size, ", max=%llu",
                        (unsigned long long)((const limit_resource *)mr)->limit);
}

static gpumem_status limit_destroy(gpumem_resource *mr) {
  limit_resource *self = (limit_resource *)mr;
  pthread_mutex_destroy(&self->lock);
  free(self);
  return GPUMEM_OK;
}

static const gpumem__resource_ops limit_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "limit",
    .allocate = limit_allocate,
    .deallocate = limit_deallocate,
    .query = limit_query,
    .describe = limit_describe,
    .destroy = limit_destroy,
    .allocate_at = limit_allocate_at,
    .unmap_pieces = limit_unmap_pieces,
    .hold_pieces = gpumem__forward_hold_pieces,
    .trim = gpumem__forward_trim,
};

gpumem_status gpumem_limit_create(gpumem_resource *upstream, const gpumem_limit_options *opts,
                                  gpumem_resource **out) {
  gpumem_status status = gpumem__check_adaptor_args("gpumem_limit_create", upstream, out);
  if (status != GPUMEM_OK)
    return status;
  size_t maximum = opts ? opts->maximum_size : 0;
  if (maximum == 0 || maximum > (size_t)INT64_MAX)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_limit_create: the limit (maximum_size; 'max' in a spec) %s",
                        maximum == 0 ? "is missing or zero: give the most bytes to allow"
                                     : "is larger than any device");
  limit_resource *self = aligned_alloc(SLOT_ALIGN, sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_limit_create: out of host memory");
  memset(self, 0, sizeof *self);
  gpumem__resource_init_pass_through(&self->header, &limit_ops, upstream);
  self->limit = (int64_t)maximum;
  self->batch = self->limit / 128;
  self->global = self->limit;
  self->membarrier = gpumem__thread_barrier_available();
  for (int i = 0; i < MAX_SLOTS; i++) {
    self->slots[i].gate.membarrier = self->membarrier;
    self->slots[i].credit_cap = 4 * self->batch;
  }
  pthread_mutex_init(&self->lock, NULL);
  *out = &self->header;
  return GPUMEM_OK;
}

static gpumem_status limit_of(const char *caller, const gpumem_resource *mr, size_t *bytes,
                              const limit_resource **self) {
  if (!mr || mr->ops != &limit_ops || !bytes)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: %s", caller,
                        !bytes ? "bytes is NULL"
                        : mr   ? "the resource is not a limit adaptor"
                               : "the resource is NULL");
  *self = (const limit_resource *)mr;
  return GPUMEM_OK;
}

gpumem_status gpumem_limit_get_allocated_bytes(const gpumem_resource *mr, size_t *bytes) {
  const limit_resource *self = NULL;
  gpumem_status status = limit_of("gpumem_limit_get_allocated_bytes", mr, bytes, &self);
  if (status == GPUMEM_OK)
    *bytes = (size_t)allocated_bytes(self);
  return status;
}

gpumem_status gpumem_limit_get_allocation_limit(const gpumem_resource *mr, size_t *bytes) {
  const limit_resource *self = NULL;
  gpumem_status status = limit_of("gpumem_limit_get_allocation_limit", mr, bytes, &self);
  if (status == GPUMEM_OK)
    *bytes = (size_t)self->limit;
  return status;
}
