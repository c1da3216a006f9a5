/* adaptor.h: what the pass-through adaptors share: the operations that only pass a call on
 * to the upstream, for the tables of adaptors whose rule does not touch that call, and the
 * check of a creation function's handles. */
#ifndef GPUMEM_ADAPTOR_H
#define GPUMEM_ADAPTOR_H

#include "core/internal.h"
#include "core/thread_slots.h"

gpumem_status gpumem__forward_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                         size_t alignment, gpumem_stream stream);
/* An allocation the adaptor got from its upstream but cannot hand out: the block goes back
 * to the upstream and `failure` is returned with the thread's message as it was before the
 * give-back (which may overwrite it). */
gpumem_status gpumem__forward_give_back(gpumem_resource *mr, void *ptr, size_t bytes,
                                        size_t alignment, gpumem_stream stream,
                                        gpumem_status failure);
gpumem_status gpumem__forward_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out);
gpumem_status gpumem__forward_allocate_at(gpumem_resource *mr, uintptr_t addr, size_t bytes,
                                          void **ptr);
gpumem_status gpumem__forward_unmap_pieces(gpumem_resource *mr, uintptr_t addr, size_t size,
                                           int *allocations_added);
void gpumem__forward_hold_pieces(gpumem_resource *mr, bool hold);

/* The live allocations that went through one adaptor, so that releasing it is judged on its
 * own allocations, not on what others allocated from the same upstream. Counted per thread
 * (core/thread_slots.h): a shared counter would cost every call two atomic instructions
 * and, under threads, a cache line they all write. A slot's figures go below zero where a
 * thread frees what another allocated; their sum is the adaptor's. A struct holding one
 * must be allocated aligned to GPUMEM__SLOT_ALIGN (gpumem__adaptor_new). */
typedef struct gpumem__adaptor_live_slot {
  _Atomic int64_t count, bytes;
} __attribute__((aligned(GPUMEM__SLOT_ALIGN))) gpumem__adaptor_live_slot;

typedef struct gpumem__adaptor_live {
  gpumem__thread_slots owners;
  _Atomic int64_t shared_count, shared_bytes; /* threads past the last slot */
  gpumem__adaptor_live_slot slots[GPUMEM__THREAD_SLOTS];
} gpumem__adaptor_live;

/* Adds `count` allocations and `bytes` bytes (negative: subtracts). */
static inline void gpumem__adaptor_live_add(gpumem__adaptor_live *live, int64_t count,
                                            int64_t bytes) {
  int i = gpumem__thread_slot(&live->owners);
  if (GPUMEM_LIKELY(i >= 0)) {
    gpumem__slot_add(&live->slots[i].count, count);
    gpumem__slot_add(&live->slots[i].bytes, bytes);
  } else {
    atomic_fetch_add_explicit(&live->shared_count, count, memory_order_relaxed);
    atomic_fetch_add_explicit(&live->shared_bytes, bytes, memory_order_relaxed);
  }
}

/* A zeroed adaptor struct of `size` bytes, aligned for the slots in it; NULL when the host
 * is out of memory. Freed with free(). */
void *gpumem__adaptor_new(size_t size);

/* Answers the live queries from `live`, the others from mr's upstream. */
gpumem_status gpumem__adaptor_live_query(const gpumem__adaptor_live *live,
                                         const gpumem_resource *mr, gpumem_query what,
                                         uint64_t *out);

/* Trims the upstream (gpumem_resource_trim): what an adaptor over a pool gives back is the
 * pool's free memory. */
gpumem_status gpumem__forward_trim(gpumem_resource *mr, size_t *released);

/* The destroy of an adaptor that holds nothing but its struct (one malloc'd block). */
gpumem_status gpumem__adaptor_free(gpumem_resource *mr);

/* GPUMEM_ERR_INVALID_ARGUMENT naming `caller` and the NULL handle, or GPUMEM_OK. */
gpumem_status gpumem__check_adaptor_args(const char *caller, const gpumem_resource *upstream,
                                         gpumem_resource *const *out);

#endif /* GPUMEM_ADAPTOR_H */
