/* cuda.c (upstream): the plain device-memory resource, cuMemAlloc and cuMemFree.
 *
 * The reference every faster resource is measured against: each call goes to the driver,
 * takes tens of microseconds, and cuMemFree synchronizes the device, so the stream is
 * irrelevant to ordering. */
#include "upstream/base.h"

static gpumem_status cuda_raw_allocate(gpumem__base_resource *self, size_t bytes,
                                       gpumem_stream stream, void **base) {
  return self->header.dev->mem_alloc(self->header.device, bytes, base);
}

static gpumem_status cuda_raw_free(gpumem__base_resource *self, void *base, size_t bytes,
                                   gpumem_stream stream) {
  return self->header.dev->mem_free(self->header.device, base);
}

static const gpumem__base_impl cuda_impl = {
    .raw_allocate = cuda_raw_allocate,
    .raw_free = cuda_raw_free,
};

static const gpumem__resource_ops cuda_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "cuda",
    .allocate = gpumem__base_allocate,
    .deallocate = gpumem__base_deallocate,
    .query = gpumem__base_query,
    .destroy = gpumem__base_destroy,
};

gpumem_status gpumem_cuda_create(int device, gpumem_resource **out) {
  if (!out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_cuda_create: out is NULL");
  const gpumem__device_ops *dev;
  gpumem_status status = gpumem__device_for("gpumem_cuda_create", device, &dev, &device);
  if (status != GPUMEM_OK)
    return status;
  gpumem__base_resource *self;
  status = gpumem__base_new("gpumem_cuda_create", sizeof *self, &cuda_ops, &cuda_impl, device, dev,
                            &self);
  if (status != GPUMEM_OK)
    return status;
  self->header.caps.annotatable = true; /* cuMemAlloc allocations */
  gpumem__holder_add(&self->holder, &self->header);
  *out = &self->header;
  return GPUMEM_OK;
}
