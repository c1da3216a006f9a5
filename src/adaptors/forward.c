/* forward.c: the operations of pass-through adaptors that only hand a call to the upstream
 * (see adaptor.h). An adaptor's own rule lives in its own file; these keep the rest of its
 * table from being written again in each. */
#include "adaptors/adaptor.h"

#include <stdio.h>

#include <stdlib.h>
#include <string.h>

gpumem_status gpumem__forward_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                         size_t alignment, gpumem_stream stream) {
  return mr->upstream->ops->deallocate(mr->upstream, ptr, bytes, alignment, stream);
}

gpumem_status gpumem__forward_give_back(gpumem_resource *mr, void *ptr, size_t bytes,
                                        size_t alignment, gpumem_stream stream,
                                        gpumem_status failure) {
  char message[512];
  snprintf(message, sizeof message, "%s", gpumem_last_error_message());
  mr->upstream->ops->deallocate(mr->upstream, ptr, bytes, alignment, stream);
  return gpumem__fail(failure, "%s", message);
}

gpumem_status gpumem__forward_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  const gpumem_resource *up = mr->upstream;
  return up->ops->query ? up->ops->query(up, what, out) : GPUMEM_ERR_UNSUPPORTED;
}

gpumem_status gpumem__adaptor_live_query(const gpumem__adaptor_live *live,
                                         const gpumem_resource *mr, gpumem_query what,
                                         uint64_t *out) {
  if (what != GPUMEM_QUERY_LIVE_COUNT && what != GPUMEM_QUERY_LIVE_BYTES)
    return gpumem__forward_query(mr, what, out);
  bool count = what == GPUMEM_QUERY_LIVE_COUNT;
  int64_t sum =
      atomic_load_explicit(count ? &live->shared_count : &live->shared_bytes, memory_order_relaxed);
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++)
    sum += atomic_load_explicit(count ? &live->slots[i].count : &live->slots[i].bytes,
                                memory_order_relaxed);
  *out = sum > 0 ? (uint64_t)sum : 0; /* a sum read while frees move between slots */
  return GPUMEM_OK;
}

gpumem_status gpumem__forward_trim(gpumem_resource *mr, size_t *released) {
  size_t upstream_released = 0;
  gpumem_status status = gpumem_resource_trim(mr->upstream, &upstream_released);
  *released += upstream_released;
  return gpumem__fail_through(mr, status);
}

void *gpumem__adaptor_new(size_t size) {
  size_t rounded = gpumem__align_up(size, GPUMEM__SLOT_ALIGN);
  void *memory = aligned_alloc(GPUMEM__SLOT_ALIGN, rounded);
  if (memory)
    memset(memory, 0, rounded);
  return memory;
}

gpumem_status gpumem__forward_allocate_at(gpumem_resource *mr, uintptr_t addr, size_t bytes,
                                          void **ptr) {
  return mr->upstream->ops->allocate_at(mr->upstream, addr, bytes, ptr);
}

void gpumem__forward_hold_pieces(gpumem_resource *mr, bool hold) {
  gpumem__hold_pieces(mr->upstream, hold);
}

gpumem_status gpumem__forward_unmap_pieces(gpumem_resource *mr, uintptr_t addr, size_t size,
                                           int *allocations_added) {
  return mr->upstream->ops->unmap_pieces(mr->upstream, addr, size, allocations_added);
}

gpumem_status gpumem__adaptor_free(gpumem_resource *mr) {
  free(mr);
  return GPUMEM_OK;
}

gpumem_status gpumem__check_adaptor_args(const char *caller, const gpumem_resource *upstream,
                                         gpumem_resource *const *out) {
  if (upstream && out)
    return GPUMEM_OK;
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: %s is NULL", caller,
                      upstream ? "out" : "the upstream resource");
}
