/* managed.c: managed (unified) memory, cuMemAllocManaged.
 *
 * Managed memory pages between host and device on demand, so a program can use more than
 * the device holds (oversubscription) at the price of page faults. Two options make it
 * faster where the program knows its access pattern: prefetching each allocation to the
 * device on its stream, and memory advice (read-mostly, preferred location, accessed-by). */
#include "upstream/base.h"

#include <stdio.h>

typedef struct managed_resource {
  gpumem__base_resource base;
  gpumem_managed_options options;
} managed_resource;

static gpumem_status managed_raw_allocate(gpumem__base_resource *base_self, size_t bytes,
                                          gpumem_stream stream, void **base) {
  managed_resource *self = (managed_resource *)base_self;
  const gpumem__device_ops *dev = base_self->header.dev;
  int device = base_self->header.device;
  void *ptr;
  gpumem_status status = dev->managed_alloc(device, bytes, &ptr);
  if (status != GPUMEM_OK)
    return status;
  if (self->options.advice)
    status = dev->advise(ptr, bytes, self->options.advice, device);
  if (status == GPUMEM_OK && self->options.prefetch)
    status = dev->prefetch(ptr, bytes, device, stream);
  if (status != GPUMEM_OK) {
    /* The caller asked for advice or prefetch; a block without them is not what it asked
     * for, so the allocation fails whole. */
    char message[512];
    snprintf(message, sizeof message, "%s", gpumem_last_error_message());
    dev->managed_free(device, ptr);
    return gpumem__fail(status, "%s", message);
  }
  *base = ptr;
  return GPUMEM_OK;
}

static gpumem_status managed_raw_free(gpumem__base_resource *self, void *base, size_t bytes,
                                      gpumem_stream stream) {
  return self->header.dev->managed_free(self->header.device, base);
}

static const gpumem__base_impl managed_impl = {
    .raw_allocate = managed_raw_allocate,
    .raw_free = managed_raw_free,
};

static void managed_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const gpumem_managed_options *o = &((const managed_resource *)mr)->options;
  unsigned a = o->advice;
  const char *location = (a & GPUMEM_ADVISE_PREFERRED_LOCATION_DEVICE)
                             ? ", preferred_location=device"
                         : (a & GPUMEM_ADVISE_PREFERRED_LOCATION_HOST) ? ", preferred_location=host"
                                                                       : "";
  snprintf(buf, size, "managed(prefetch=%s%s%s%s)", o->prefetch ? "true" : "false",
           (a & GPUMEM_ADVISE_READ_MOSTLY) ? ", read_mostly=true" : "", location,
           (a & GPUMEM_ADVISE_ACCESSED_BY_DEVICE) ? ", accessed_by_device=true" : "");
}

static const gpumem__resource_ops managed_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "managed",
    .allocate = gpumem__base_allocate,
    .deallocate = gpumem__base_deallocate,
    .query = gpumem__base_query,
    .describe = managed_describe,
    .destroy = gpumem__base_destroy,
};

gpumem_status gpumem_managed_create(int device, const gpumem_managed_options *opts,
                                    gpumem_resource **out) {
  if (!out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_managed_create: out is NULL");
  gpumem_managed_options options = opts ? *opts : (gpumem_managed_options){0};
  const unsigned known = GPUMEM__ADVICE_FLAGS;
  if (options.advice & ~known)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_managed_create: unknown advice flags 0x%x",
                        options.advice & ~known);
  if ((options.advice & GPUMEM_ADVISE_PREFERRED_LOCATION_DEVICE) &&
      (options.advice & GPUMEM_ADVISE_PREFERRED_LOCATION_HOST))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_managed_create: the preferred location is either the device or "
                        "the host, not both");
  const gpumem__device_ops *dev;
  gpumem_status status = gpumem__device_for("gpumem_managed_create", device, &dev, &device);
  if (status != GPUMEM_OK)
    return status;
  managed_resource *self;
  status = gpumem__base_new("gpumem_managed_create", sizeof *self, &managed_ops, &managed_impl,
                            device, dev, (gpumem__base_resource **)&self);
  if (status != GPUMEM_OK)
    return status;
  self->options = options;
  self->base.header.caps.memory = GPUMEM_MEMORY_MANAGED;
  self->base.header.caps.annotatable = true; /* cuMemAllocManaged allocations */
  *out = &self->base.header;
  return GPUMEM_OK;
}
