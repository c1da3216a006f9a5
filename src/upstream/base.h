/* base.h: what the base resources (cuda, managed, async, pinned_host, system) share.
 *
 * Each calls the device for every allocation. The shared part here does the rest once:
 * the stream check, alignment beyond what the device call guarantees (by asking for more
 * and aligning inside), the table of live pointers that catches double and foreign frees,
 * and the live and reserved byte counts. A base resource supplies only its raw allocate
 * and free. */
#ifndef GPUMEM_UPSTREAM_BASE_H
#define GPUMEM_UPSTREAM_BASE_H

#include "core/ptrmap.h"
#include "device/device.h"

typedef struct gpumem__base_resource gpumem__base_resource;

typedef struct gpumem__base_impl {
  /* Allocates `bytes` on `stream`, aligned to at least GPUMEM_DEFAULT_ALIGNMENT (larger
   * alignments are over-allocated); on failure sets the thread's error. */
  gpumem_status (*raw_allocate)(gpumem__base_resource *self, size_t bytes, gpumem_stream stream,
                                void **base);
  /* Frees a raw allocation of `bytes`, stream-ordered where the resource can be. */
  gpumem_status (*raw_free)(gpumem__base_resource *self, void *base, size_t bytes,
                            gpumem_stream stream);
  /* Bytes held from the device, when it differs from the sum of raw allocations (a driver
   * pool keeps freed memory); NULL otherwise. */
  gpumem_status (*reserved)(const gpumem__base_resource *self, uint64_t *bytes);
} gpumem__base_impl;

struct gpumem__base_resource {
  gpumem_resource header;
  const gpumem__base_impl *impl;
  gpumem__ptrmap live;
  atomic_uint_fast64_t reserved_bytes, peak_reserved_bytes;
  gpumem__holder holder; /* listed as holding device memory, for reports */
};

/* Initializes the shared part; the resource's own fields are the caller's. A resource of
 * device memory lists itself among the holders (gpumem__holder_add on `holder`) once it is
 * whole; gpumem__base_fini takes it off (a no-op for one never listed), before anything a
 * query reads is freed. */
void gpumem__base_init(gpumem__base_resource *self, const gpumem__resource_ops *ops,
                       const gpumem__base_impl *impl, int device, const gpumem__device_ops *dev);
void gpumem__base_fini(gpumem__base_resource *self);

/* A zeroed base resource of `size` bytes (its own struct, which starts with the base),
 * initialized; for `creator`'s out-of-host-memory message. */
gpumem_status gpumem__base_new(const char *creator, size_t size, const gpumem__resource_ops *ops,
                               const gpumem__base_impl *impl, int device,
                               const gpumem__device_ops *dev, gpumem__base_resource **out);
/* The destroy op of base resources with nothing of their own to give back. */
gpumem_status gpumem__base_destroy(gpumem_resource *mr);

/* The ops every base resource uses for allocate, deallocate and query. */
gpumem_status gpumem__base_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                    gpumem_stream stream, void **ptr);
gpumem_status gpumem__base_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                      size_t alignment, gpumem_stream stream);
gpumem_status gpumem__base_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out);

#endif /* GPUMEM_UPSTREAM_BASE_H */
