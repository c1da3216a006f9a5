/* pinned_host.c: page-locked host memory, cuMemHostAlloc.
 *
 * Pinned memory is what makes host-device copies fast and truly asynchronous; it is also
 * scarce system-wide, so a pool over this resource is the usual way to use it. */
#include "upstream/base.h"

#include <stdio.h>

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
    .raw_allocate = pinned_raw_allocate,
    .raw_free = pinned_raw_free,
};

static void pinned_describe(const gpumem_resource *mr, char *buf, size_t size) {
  unsigned flags = ((const pinned_resource *)mr)->options.flags;
  snprintf(buf, size, "pinned_host(mapped=%s, write_combined=%s)",
           (flags & GPUMEM_PINNED_DEVICE_MAPPED) ? "true" : "false",
           (flags & GPUMEM_PINNED_WRITE_COMBINED) ? "true" : "false");
}

static const gpumem__resource_ops pinned_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "pinned_host",
    .allocate = gpumem__base_allocate,
    .deallocate = gpumem__base_deallocate,
    .query = gpumem__base_query,
    .describe = pinned_describe,
    .destroy = gpumem__base_destroy,
};

gpumem_status gpumem_pinned_host_create(int device, const gpumem_pinned_host_options *opts,
                                        gpumem_resource **out) {
  if (!out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_pinned_host_create: out is NULL");
  gpumem_pinned_host_options options = opts ? *opts : (gpumem_pinned_host_options){0};
  const unsigned known = GPUMEM__PINNED_FLAGS;
  if (options.flags & ~known)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_pinned_host_create: unknown flags 0x%x", options.flags & ~known);
  /* Portable always: a pinned pool is shared by every context of the process. */
  options.flags |= GPUMEM_PINNED_PORTABLE;
  const gpumem__device_ops *dev;
  gpumem_status status = gpumem__device_for("gpumem_pinned_host_create", device, &dev, &device);
  if (status != GPUMEM_OK)
    return status;
  pinned_resource *self;
  status = gpumem__base_new("gpumem_pinned_host_create", sizeof *self, &pinned_ops, &pinned_impl,
                            device, dev, (gpumem__base_resource **)&self);
  if (status != GPUMEM_OK)
    return status;
  self->options = options;
  self->base.header.caps.memory = GPUMEM_MEMORY_PINNED_HOST;
  self->base.header.caps.annotatable = true; /* cuMemHostAlloc allocations */
  *out = &self->base.header;
  return GPUMEM_OK;
}
