/* system.c: host malloc as device memory, for devices that access pageable host memory
 * (HMM or ATS systems such as Grace Hopper).
 *
 * The driver knows nothing of these blocks, so it cannot delay a free until the work that
 * uses the block is done, as cuMemFree does: the resource synchronizes the stream before
 * free() instead. */
#include "upstream/base.h"

#include <stdlib.h>

static gpumem_status system_raw_allocate(gpumem__base_resource *self, size_t bytes,
                                         gpumem_stream stream, void **base) {
  void *ptr = NULL;
  if (posix_memalign(&ptr, GPUMEM_DEFAULT_ALIGNMENT, bytes) != 0)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "host malloc failed");
  *base = ptr;
  return GPUMEM_OK;
}

static gpumem_status system_raw_free(gpumem__base_resource *self, void *base, size_t bytes,
                                     gpumem_stream stream) {
  gpumem_status status = self->header.dev->stream_synchronize(stream);
  if (status != GPUMEM_OK)
    return status;
  free(base);
  return GPUMEM_OK;
}

static const gpumem__base_impl system_impl = {
    .raw_allocate = system_raw_allocate,
    .raw_free = system_raw_free,
};

static const gpumem__resource_ops system_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "system",
    .allocate = gpumem__base_allocate,
    .deallocate = gpumem__base_deallocate,
    .query = gpumem__base_query,
    .destroy = gpumem__base_destroy,
};

gpumem_status gpumem_system_create(int device, gpumem_resource **out) {
  if (!out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_system_create: out is NULL");
  const gpumem__device_ops *dev;
  gpumem_status status = gpumem__device_for("gpumem_system_create", device, &dev, &device);
  if (status != GPUMEM_OK)
    return status;
  int64_t pageable = 0;
  status = dev->device_attribute(device, GPUMEM__ATTR_PAGEABLE_MEMORY_ACCESS, &pageable);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "gpumem_system_create");
  if (!pageable)
    return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                        "gpumem_system_create: device %d cannot access pageable host memory "
                        "(it needs HMM or ATS); use 'managed' or 'pinned_host' instead",
                        device);
  gpumem__base_resource *self;
  status = gpumem__base_new("gpumem_system_create", sizeof *self, &system_ops, &system_impl, device,
                            dev, &self);
  if (status == GPUMEM_OK) {
    self->header.caps.memory = GPUMEM_MEMORY_HOST;
    *out = &self->header;
  }
  return status;
}
