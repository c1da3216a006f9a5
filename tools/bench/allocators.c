/* allocators.c: the allocators gpumem-bench measures, behind one interface.
 *
 * A gpumem resource is called through the public API (gpumem_allocate), as a user would.
 * The two references call the device layer table directly, so that their figures hold
 * nothing of gpumem but one indirect call:
 *   driver:cuMemAlloc  mem_alloc / mem_free (cuMemAlloc / cuMemFree), synchronous;
 *   driver:async       a driver pool of its own (cuMemPoolCreate) with release threshold
 *                      UINT64_MAX, and pool_alloc_async / free_async on the stream.
 * On the simulated device the same table is the simulation's. A third, harness:none, is no
 * allocator at all: the cost of the benchmark's own work around the calls (the threads
 * workload's handoffs between threads, above all), which bounds what any allocator can show. */
#include "bench/bench.h"
#include "device/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- gpumem resources ---- */

typedef struct resource_allocator {
  bench_allocator base;
  gpumem_resource *mr;
} resource_allocator;

static gpumem_resource *resource_of(bench_allocator *self) {
  return ((resource_allocator *)self)->mr;
}

static gpumem_status resource_allocate(bench_allocator *self, size_t bytes, gpumem_stream stream,
                                       void **ptr) {
  return gpumem_allocate(resource_of(self), bytes, stream, ptr);
}

static gpumem_status resource_deallocate(bench_allocator *self, void *ptr, size_t bytes,
                                         gpumem_stream stream) {
  return gpumem_deallocate(resource_of(self), ptr, bytes, stream);
}

static gpumem_status resource_reserved(bench_allocator *self, uint64_t *bytes) {
  return gpumem_resource_query(resource_of(self), GPUMEM_QUERY_RESERVED_BYTES, bytes);
}

static gpumem_status resource_peak_reserved(bench_allocator *self, uint64_t *bytes) {
  return gpumem_resource_query(resource_of(self), GPUMEM_QUERY_PEAK_RESERVED_BYTES, bytes);
}

static gpumem_status resource_close(bench_allocator *self) {
  gpumem_status status = gpumem_resource_release(resource_of(self));
  free(self);
  return status;
}

/* "reinitialize(pool)" names the resource gpumem_reinitialize(pool_allocator) builds on the
 * device: what a user gets by default, whatever it is there (pool over vmm where the device
 * supports it). */
static gpumem_status resolve_spec(const char *spec, int device, char *resolved, size_t size) {
  if (strcmp(spec, "reinitialize(pool)") != 0) {
    snprintf(resolved, size, "%s", spec);
    return GPUMEM_OK;
  }
  gpumem_reinitialize_options options = {.pool_allocator = 1};
  return gpumem_reinitialize_spec(&options, device, resolved, size);
}

static gpumem_status open_resource(const char *spec, int device, bench_allocator **out) {
  gpumem_resource *mr;
  char resolved[256];
  gpumem_status status = resolve_spec(spec, device, resolved, sizeof resolved);
  if (status == GPUMEM_OK)
    status = bench_define_user_resource(resolved, device);
  if (status == GPUMEM_OK)
    status = gpumem_resource_from_spec_for_device(resolved, device, &mr);
  if (status != GPUMEM_OK)
    return status;
  resource_allocator *self = calloc(1, sizeof *self);
  if (!self) {
    gpumem_resource_release(mr);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem-bench: out of host memory");
  }
  self->base = (bench_allocator){.label = spec,
                                 .allocate = resource_allocate,
                                 .deallocate = resource_deallocate,
                                 .reserved = resource_reserved,
                                 .peak_reserved = resource_peak_reserved,
                                 .close = resource_close,
                                 .resource = mr};
  self->mr = mr;
  *out = &self->base;
  return GPUMEM_OK;
}

/* ---- the references: the device layer, called directly ---- */

typedef struct driver_allocator {
  bench_allocator base;
  const gpumem__device_ops *dev;
  int device;
  gpumem__mempool pool; /* driver:async only */
} driver_allocator;

static driver_allocator *driver_of(bench_allocator *self) {
  return (driver_allocator *)self;
}

static gpumem_status unknown_peak(bench_allocator *self, uint64_t *bytes) {
  return GPUMEM_ERR_UNSUPPORTED;
}

/* cuMemAlloc refuses 0 bytes; gpumem gives NULL for them, and so do the references, so that
 * traces with empty allocations replay the same everywhere. */
static gpumem_status cumemalloc_allocate(bench_allocator *self, size_t bytes, gpumem_stream stream,
                                         void **ptr) {
  if (bytes == 0) {
    *ptr = NULL;
    return GPUMEM_OK;
  }
  driver_allocator *d = driver_of(self);
  return d->dev->mem_alloc(d->device, bytes, ptr);
}

static gpumem_status cumemalloc_deallocate(bench_allocator *self, void *ptr, size_t bytes,
                                           gpumem_stream stream) {
  if (!ptr)
    return GPUMEM_OK;
  driver_allocator *d = driver_of(self);
  return d->dev->mem_free(d->device, ptr);
}

static gpumem_status driver_close(bench_allocator *self) {
  driver_allocator *d = driver_of(self);
  gpumem_status status = d->pool ? d->dev->pool_destroy(d->device, d->pool) : GPUMEM_OK;
  free(d);
  return status;
}

static gpumem_status async_allocate(bench_allocator *self, size_t bytes, gpumem_stream stream,
                                    void **ptr) {
  if (bytes == 0) {
    *ptr = NULL;
    return GPUMEM_OK;
  }
  driver_allocator *d = driver_of(self);
  return d->dev->pool_alloc_async(d->device, d->pool, bytes, stream, ptr);
}

static gpumem_status async_deallocate(bench_allocator *self, void *ptr, size_t bytes,
                                      gpumem_stream stream) {
  if (!ptr)
    return GPUMEM_OK;
  return driver_of(self)->dev->free_async(ptr, stream);
}

static gpumem_status async_reserved(bench_allocator *self, uint64_t *bytes) {
  return driver_of(self)->dev->pool_reserved(driver_of(self)->pool, bytes);
}

/* The pool keeps everything freed to it (release threshold UINT64_MAX), as RMM's
 * cuda_async_memory_resource does: the setting under which the driver pool is fastest. */
static gpumem_status create_driver_pool(driver_allocator *d) {
  gpumem_status status = d->dev->pool_create(d->device, GPUMEM_IPC_NONE, &d->pool);
  if (status != GPUMEM_OK)
    return status;
  status = d->dev->pool_set_release_threshold(d->pool, UINT64_MAX);
  if (status != GPUMEM_OK) {
    d->dev->pool_destroy(d->device, d->pool);
    d->pool = NULL;
  }
  return status;
}

static gpumem_status open_driver(const char *label, int device, bench_allocator **out) {
  gpumem_status status;
  const gpumem__device_ops *dev = gpumem__device_get(&status);
  if (!dev)
    return status;
  if ((status = gpumem__resolve_device(dev, device, &device)) != GPUMEM_OK)
    return status;
  driver_allocator *d = calloc(1, sizeof *d);
  if (!d)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem-bench: out of host memory");
  d->dev = dev;
  d->device = device;
  d->base = (bench_allocator){.label = label, .peak_reserved = unknown_peak, .close = driver_close};
  if (strcmp(label, BENCH_REF_CUMEMALLOC) == 0) {
    d->base.allocate = cumemalloc_allocate;
    d->base.deallocate = cumemalloc_deallocate;
  } else {
    d->base.allocate = async_allocate;
    d->base.deallocate = async_deallocate;
    d->base.reserved = async_reserved;
    if ((status = create_driver_pool(d)) != GPUMEM_OK) {
      free(d);
      return status;
    }
  }
  *out = &d->base;
  return GPUMEM_OK;
}

/* ---- harness:none: no allocator ---- */

/* One address for every allocation: nothing reads or writes it. */
static unsigned char none_memory;

static gpumem_status none_allocate(bench_allocator *self, size_t bytes, gpumem_stream stream,
                                   void **ptr) {
  *ptr = bytes ? &none_memory : NULL;
  return GPUMEM_OK;
}

static gpumem_status none_deallocate(bench_allocator *self, void *ptr, size_t bytes,
                                     gpumem_stream stream) {
  return GPUMEM_OK;
}

static gpumem_status none_close(bench_allocator *self) {
  free(self);
  return GPUMEM_OK;
}

static gpumem_status open_none(const char *label, bench_allocator **out) {
  bench_allocator *none = malloc(sizeof *none);
  if (!none)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem-bench: out of host memory");
  *none = (bench_allocator){.label = label,
                            .allocate = none_allocate,
                            .deallocate = none_deallocate,
                            .peak_reserved = unknown_peak,
                            .close = none_close};
  *out = none;
  return GPUMEM_OK;
}

gpumem_status bench_allocator_open(const char *label, int device, bench_allocator **out) {
  if (strcmp(label, BENCH_REF_CUMEMALLOC) == 0 || strcmp(label, BENCH_REF_ASYNC) == 0)
    return open_driver(label, device, out);
  if (strcmp(label, BENCH_HARNESS_NONE) == 0)
    return open_none(label, out);
  return open_resource(label, device, out);
}

bench_allocator *bench_open_or_die(const char *label, int device) {
  bench_allocator *alloc = NULL;
  gpumem_status status = bench_allocator_open(label, device, &alloc);
  if (status != GPUMEM_OK) {
    char what[512];
    snprintf(what, sizeof what, "creating '%s' on device %d", label, device);
    bench_die(status, what);
  }
  return alloc;
}

void bench_close_or_die(bench_allocator *alloc) {
  char what[512];
  snprintf(what, sizeof what, "releasing '%s'", alloc->label);
  gpumem_status status = alloc->close(alloc);
  if (status != GPUMEM_OK)
    bench_die(status, what);
}
