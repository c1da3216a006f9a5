/* pinned_host.c: page-locked host memory, cuMemHostAlloc.
 *
 * Pinned memory is what makes host-device copies fast and truly asynchronous; it is also
 * scarce system-wide, so a pool over this resource is the usual way to use it. */
#include "upstream/base.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct pinned_resource {
  gpumem__base_resource base;
  gpumem_pinned_host_options options;
} pinned_resource;

static gpumem_status pinned_raw_allocate(gpumem__base_resource *base_self, size_t bytes,
                                         gpumem_stream stream, void **base) {
  const pinned_resource *self = (const pinned_resource *)base_self;
  return base_self->header.dev->host_alloc(base_self->header.device, bytes, self->options.flags,
                                           base);
}

static gpumem_status pinned_raw_free(gpumem__base_resource *self, void *base, size_t bytes,
                                     gpumem_stream stream) {
  return self->header.dev->host_free(self->header.device, base);
}

static const gpumem__base_impl pinned_impl = {
    .natural_alignment = GPUMEM_DEFAULT_ALIGNMENT,
    .raw_allocate = pinned_raw_allocate,
    .raw_free = pinned_raw_free,
};

static void pinned_describe(const gpumem_resource *mr, char *buf, size_t size) {
  unsigned flags = ((const pinned_resource *)mr)->options.flags;
  snprintf(buf, size, "pinned_host(mapped=%s, write_combined=%s)",
           (flags & GPUMEM_PINNED_DEVICE_MAPPED) ? "true" : "false",
           (flags & GPUMEM_PINNED_WRITE_COMBINED) ? "true" : "false");
}

static gpumem_status pinned_destroy(gpumem_resource *mr) {
  gpumem__base_fini((gpumem__base_resource *)mr);
  free(mr);
  return GPUMEM_OK;
}

static const gpumem__resource_ops pinned_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "pinned_host",
    .allocate = gpumem__base_allocate,
    .deallocate = gpumem__base_deallocate,
    .query = gpumem__base_query,
    .describe = pinned_describe,
    .destroy = pinned_destroy,
};

gpumem_status gpumem_pinned_host_create(int device, const gpumem_pinned_host_options *opts,
                                        gpumem_resource **out) {
  if (!out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_pinned_host_create: out is NULL");
  gpumem_pinned_host_options options = opts ? *opts : (gpumem_pinned_host_options){0};
  const unsigned known =
      GPUMEM_PINNED_PORTABLE | GPUMEM_PINNED_DEVICE_MAPPED | GPUMEM_PINNED_WRITE_COMBINED;
  if (options.flags & ~known)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_pinned_host_create: unknown flags 0x%x", options.flags & ~known);
  /* Portable always: a pinned pool is shared by every context of the process. */
  options.flags |= GPUMEM_PINNED_PORTABLE;
  const gpumem__device_ops *dev;
  gpumem_status status = gpumem__base_prepare("gpumem_pinned_host_create", device, &dev, &device);
  if (status != GPUMEM_OK)
    return status;
  pinned_resource *self = calloc(1, sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_pinned_host_create: out of host memory");
  gpumem__base_init(&self->base, &pinned_ops, &pinned_impl, device, dev);
  self->options = options;
  *out = &self->base.header;
  return GPUMEM_OK;
}
