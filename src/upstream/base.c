/* base.c: the shared part of the base resources (see base.h). */
#include "upstream/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gpumem__base_init(gpumem__base_resource *self, const gpumem__resource_ops *ops,
                       const gpumem__base_impl *impl, int device, const gpumem__device_ops *dev) {
  gpumem__resource_init(&self->header, ops, device, dev, NULL);
  self->impl = impl;
  gpumem__ptrmap_init(&self->live);
  atomic_init(&self->reserved_bytes, 0);
  atomic_init(&self->peak_reserved_bytes, 0);
  self->holder = (gpumem__holder){&self->holder, &self->holder, &self->header};
}

void gpumem__base_fini(gpumem__base_resource *self) {
  gpumem__holder_remove(&self->holder);
  gpumem__ptrmap_destroy(&self->live);
}

gpumem_status gpumem__base_new(const char *creator, size_t size, const gpumem__resource_ops *ops,
                               const gpumem__base_impl *impl, int device,
                               const gpumem__device_ops *dev, gpumem__base_resource **out) {
  gpumem__base_resource *self = calloc(1, size);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "%s: out of host memory", creator);
  gpumem__base_init(self, ops, impl, device, dev);
  *out = self;
  return GPUMEM_OK;
}

gpumem_status gpumem__base_destroy(gpumem_resource *mr) {
  gpumem__base_fini((gpumem__base_resource *)mr);
  free(mr);
  return GPUMEM_OK;
}

static void add_reserved(gpumem__base_resource *self, size_t raw_bytes) {
  uint64_t now =
      atomic_fetch_add_explicit(&self->reserved_bytes, raw_bytes, memory_order_relaxed) + raw_bytes;
  gpumem__atomic_raise(&self->peak_reserved_bytes, now);
}

/* Bytes to ask of the device so that an `alignment`-aligned block of `bytes` fits. The
 * front end made sure that this does not overflow. */
static size_t raw_size(size_t bytes, size_t alignment) {
  return alignment > GPUMEM_DEFAULT_ALIGNMENT ? bytes + alignment - GPUMEM_DEFAULT_ALIGNMENT
                                              : bytes;
}

gpumem_status gpumem__base_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                    gpumem_stream stream, void **ptr) {
  gpumem__base_resource *self = (gpumem__base_resource *)mr;
  gpumem_status status = gpumem__check_stream(mr->dev, mr->device, stream);
  if (status != GPUMEM_OK)
    return status;
  size_t raw_bytes = raw_size(bytes, alignment);
  void *base;
  status = self->impl->raw_allocate(self, raw_bytes, stream, &base);
  if (status == GPUMEM_ERR_OUT_OF_MEMORY) {
    char why[512];
    snprintf(why, sizeof why, "%s", gpumem_last_error_message());
    bool device =
        mr->caps.memory == GPUMEM_MEMORY_DEVICE || mr->caps.memory == GPUMEM_MEMORY_MANAGED;
    gpumem__note_oom(device ? GPUMEM__OOM_DEVICE : GPUMEM__OOM_HOST, mr, raw_bytes);
    return gpumem__fail_out_of_memory(mr, bytes, why);
  }
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "allocating %zu bytes from resource '%s'", bytes,
                                mr->ops->kind);
  void *aligned = (void *)gpumem__align_up((uintptr_t)base, alignment);
  status = gpumem__ptrmap_insert(&self->live, aligned, bytes, base, raw_bytes);
  if (status != GPUMEM_OK) {
    self->impl->raw_free(self, base, raw_bytes, stream);
    gpumem__note_oom(GPUMEM__OOM_HOST, mr, bytes);
    return status;
  }
  if (!self->impl->reserved) /* else the device's own figure is the one queries answer */
    add_reserved(self, raw_bytes);
  *ptr = aligned;
  return GPUMEM_OK;
}

gpumem_status gpumem__base_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                      size_t alignment, gpumem_stream stream) {
  gpumem__base_resource *self = (gpumem__base_resource *)mr;
  void *base;
  size_t raw_bytes;
  gpumem_status status =
      gpumem__ptrmap_take(&self->live, ptr, bytes, mr->ops->kind, &base, &raw_bytes);
  if (status != GPUMEM_OK)
    return status;
  status = self->impl->raw_free(self, base, raw_bytes, stream);
  if (status != GPUMEM_OK) {
    /* Leave the resource as it was: the block stays live and can be freed again. */
    gpumem__ptrmap_insert(&self->live, ptr, bytes, base, raw_bytes);
    return gpumem__fail_context(status, "freeing %p (%zu bytes) to resource '%s'", ptr, bytes,
                                mr->ops->kind);
  }
  if (!self->impl->reserved)
    atomic_fetch_sub_explicit(&self->reserved_bytes, raw_bytes, memory_order_relaxed);
  return GPUMEM_OK;
}

gpumem_status gpumem__base_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  const gpumem__base_resource *self = (const gpumem__base_resource *)mr;
  switch (what) {
  case GPUMEM_QUERY_RESERVED_BYTES:
    if (self->impl->reserved)
      return self->impl->reserved(self, out);
    *out = atomic_load_explicit(&self->reserved_bytes, memory_order_relaxed);
    return GPUMEM_OK;
  case GPUMEM_QUERY_PEAK_RESERVED_BYTES:
    if (self->impl->reserved)
      return GPUMEM_ERR_UNSUPPORTED;
    *out = atomic_load_explicit(&self->peak_reserved_bytes, memory_order_relaxed);
    return GPUMEM_OK;
  default:
    return gpumem__ptrmap_query(&self->live, what, out);
  }
}
