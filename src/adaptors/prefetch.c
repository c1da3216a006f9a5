/* prefetch.c: the prefetch adaptor, which moves each new allocation of managed memory to
 * its device on the allocation's stream (RMM's prefetch_resource_adaptor), so that the
 * first kernel to touch it does not fault its pages in one by one.
 *
 * Whether the memory is managed is a capability of the upstream, known at creation (a pool
 * over managed memory reports it too); over any other memory the adaptor only passes calls
 * on. A prefetch that fails fails the allocation: the memory goes back to the upstream
 * first, so nothing leaks, and the driver's status and message come through (RMM lets the
 * error through too, but keeps the memory). Placement passes through without a prefetch:
 * only device memory (vmm) is ever placed. */
#include "adaptors/adaptor.h"
#include "device/device.h"

#include <stdio.h>
#include <stdlib.h>

static GPUMEM_COLD gpumem_status give_back(gpumem_resource *mr, void *ptr, size_t bytes,
                                           size_t alignment, gpumem_stream stream,
                                           gpumem_status failure) {
  gpumem__forward_give_back(mr, ptr, bytes, alignment, stream, failure);
  return gpumem__fail_context(failure, "prefetch: prefetching %zu bytes at %p to device %d", bytes,
                              ptr, mr->device);
}

static gpumem_status prefetch_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                       gpumem_stream stream, void **ptr) {
  void *block;
  gpumem_status status =
      mr->upstream->ops->allocate(mr->upstream, bytes, alignment, stream, &block);
  if (GPUMEM_UNLIKELY(status != GPUMEM_OK))
    return gpumem__fail_through(mr, status);
  if (mr->caps.memory == GPUMEM_MEMORY_MANAGED) {
    status = mr->dev->prefetch(block, bytes, mr->device, stream);
    if (GPUMEM_UNLIKELY(status != GPUMEM_OK))
      return give_back(mr, block, bytes, alignment, stream, status);
  }
  *ptr = block;
  return GPUMEM_OK;
}

static void prefetch_describe(const gpumem_resource *mr, char *buf, size_t size) {
  gpumem__describe_over(mr, buf, size, "%s", "");
}

static const gpumem__resource_ops prefetch_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "prefetch",
    .allocate = prefetch_allocate,
    .deallocate = gpumem__forward_deallocate,
    .query = gpumem__forward_query,
    .describe = prefetch_describe,
    .destroy = gpumem__adaptor_free,
    .allocate_at = gpumem__forward_allocate_at,
    .unmap_pieces = gpumem__forward_unmap_pieces,
    .hold_pieces = gpumem__forward_hold_pieces,
    .trim = gpumem__forward_trim,
};

gpumem_status gpumem_prefetch_create(gpumem_resource *upstream, gpumem_resource **out) {
  gpumem_status status = gpumem__check_adaptor_args("gpumem_prefetch_create", upstream, out);
  if (status != GPUMEM_OK)
    return status;
  gpumem_resource *self = calloc(1, sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_prefetch_create: out of host memory");
  gpumem__resource_init_pass_through(self, &prefetch_ops, upstream);
  *out = self;
  return GPUMEM_OK;
}
