/* async.c: the CUDA driver's own stream-ordered pool, as a resource of its own.
 *
 * Each async resource creates its own driver pool (cuMemPoolCreate) rather than using the
 * device's default pool, so its memory figures are its own and its release threshold does
 * not change anyone else's. The default threshold keeps all freed memory in the pool
 * (UINT64_MAX), the setting under which the driver pool is fastest. A resource given a pool
 * of the program's (options.pool: the device's default pool, say) only allocates from it:
 * it neither changes nor destroys the pool, and counts as reserved only what it allocated,
 * since the pool's own figure is shared with whoever else uses it. A managed resource
 * (options.managed, RMM's cuda_async_managed_memory_resource) allocates managed memory from
 * the device's default pool of managed memory (CUDA 13), which is the driver's and shared by
 * the whole process, so it is treated the same way as a pool of the program's. */
#include "upstream/base.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct async_resource {
  gpumem__base_resource base;
  gpumem_async_options options;
  gpumem__mempool pool;
} async_resource;

static gpumem_status async_raw_allocate(gpumem__base_resource *base_self, size_t bytes,
                                        gpumem_stream stream, void **base) {
  async_resource *self = (async_resource *)base_self;
  return base_self->header.dev->pool_alloc_async(base_self->header.device, self->pool, bytes,
                                                 stream, base);
}

static gpumem_status async_raw_free(gpumem__base_resource *self, void *base, size_t bytes,
                                    gpumem_stream stream) {
  return self->header.dev->free_async(base, stream);
}

static gpumem_status async_reserved(const gpumem__base_resource *base_self, uint64_t *bytes) {
  const async_resource *self = (const async_resource *)base_self;
  return base_self->header.dev->pool_reserved(self->pool, bytes);
}

static const gpumem__base_impl async_impl = {
    .raw_allocate = async_raw_allocate,
    .raw_free = async_raw_free,
    .reserved = async_reserved,
};

/* Over the program's pool the base counts the bytes this resource allocated. */
static const gpumem__base_impl view_impl = {
    .raw_allocate = async_raw_allocate,
    .raw_free = async_raw_free,
};

/* Whether the pool is someone else's (the program's, or the driver's default pool of managed
 * memory): never destroyed, its threshold left alone unless given, reserved bytes counted by
 * the base. */
static bool pool_is_shared(const gpumem_async_options *o) {
  return o->pool || o->managed;
}

static const char *ipc_name(gpumem_ipc_handle ipc) {
  return ipc == GPUMEM_IPC_POSIX_FD ? "posix_fd" : ipc == GPUMEM_IPC_FABRIC ? "fabric" : "none";
}

static void async_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const gpumem_async_options *o = &((const async_resource *)mr)->options;
  if (pool_is_shared(o)) {
    int n = o->managed
                ? snprintf(buf, size, "async(managed=true")
                : snprintf(buf, size, "async(pool=%llu", (unsigned long long)(uintptr_t)o->pool);
    if (o->release_threshold && n >= 0 && (size_t)n < size)
      n += snprintf(buf + n, size - (size_t)n, ", release_threshold=%llu",
                    (unsigned long long)o->release_threshold);
    if (o->initial_size && n >= 0 && (size_t)n < size)
      n += snprintf(buf + n, size - (size_t)n, ", initial=%zu", o->initial_size);
    if (n >= 0 && (size_t)n < size)
      snprintf(buf + n, size - (size_t)n, ")");
    return;
  }
  snprintf(buf, size, "async(release_threshold=%llu, initial=%zu, ipc=%s)",
           (unsigned long long)o->release_threshold, o->initial_size, ipc_name(o->ipc_handle));
}

static gpumem_status async_destroy(gpumem_resource *mr) {
  async_resource *self = (async_resource *)mr;
  /* Off the list of holders first: a report reads the driver pool's figures. */
  gpumem__holder_remove(&self->base.holder);
  /* A pool of the program's (options.pool) or the driver's (managed) is never destroyed here. */
  gpumem_status status =
      pool_is_shared(&self->options) ? GPUMEM_OK : mr->dev->pool_destroy(mr->device, self->pool);
  if (status != GPUMEM_OK) {
    gpumem__holder_add(&self->base.holder, mr);
    return status;
  }
  gpumem__base_fini(&self->base);
  free(self);
  return GPUMEM_OK;
}

static const gpumem__resource_ops async_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "async",
    .allocate = gpumem__base_allocate,
    .deallocate = gpumem__base_deallocate,
    .query = gpumem__base_query,
    .describe = async_describe,
    .destroy = async_destroy,
};

/* Grows the pool to `bytes` once, so the first allocations find memory ready: allocate,
 * free, and wait for the free, with the release threshold keeping the memory. On a stream
 * of the pool's own device, whichever device is current. A free that fails is tried once
 * more after the stream's work: in a shared pool (the driver's managed one) nothing else
 * would ever free the block. */
static gpumem_status warm_pool(const gpumem__device_ops *dev, int device, gpumem__mempool pool,
                               size_t bytes) {
  gpumem_stream stream;
  gpumem_status status = dev->stream_create(device, &stream);
  if (status != GPUMEM_OK)
    return status;
  void *ptr;
  status = dev->pool_alloc_async(device, pool, bytes, stream, &ptr);
  gpumem_status freed = status == GPUMEM_OK ? dev->free_async(ptr, stream) : GPUMEM_OK;
  gpumem_status synced = dev->stream_synchronize(stream);
  if (freed != GPUMEM_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", gpumem_last_error_message());
    if (dev->free_async(ptr, stream) == GPUMEM_OK)
      synced = dev->stream_synchronize(stream);
    status = gpumem__fail(freed, "%s", why); /* the first failure is the one to tell */
  }
  gpumem_status destroyed = dev->stream_destroy(stream);
  return status != GPUMEM_OK ? status : synced != GPUMEM_OK ? synced : destroyed;
}

/* The driver pool the resource allocates from: a new one, the program's (checked to be a
 * pool the driver knows) or the device's default pool of managed memory, with the release
 * threshold set where it is the resource's to set. */
static gpumem_status get_pool(const gpumem__device_ops *dev, int device,
                              gpumem_async_options *options, gpumem__mempool *pool) {
  if (pool_is_shared(options)) {
    uint64_t reserved;
    gpumem_status status;
    if (options->managed) {
      status = dev->pool_default_managed(device, pool); /* the driver's: no need to check it */
    } else {
      *pool = (gpumem__mempool)options->pool;
      status = dev->pool_reserved(*pool, &reserved);
    }
    if (status == GPUMEM_OK && options->release_threshold)
      status = dev->pool_set_release_threshold(*pool, options->release_threshold);
    return status;
  }
  if (options->release_threshold == 0)
    options->release_threshold = UINT64_MAX;
  gpumem_status status = dev->pool_create(device, options->ipc_handle, pool);
  if (status == GPUMEM_OK)
    status = dev->pool_set_release_threshold(*pool, options->release_threshold);
  return status;
}

gpumem_status gpumem_async_create(int device, const gpumem_async_options *opts,
                                  gpumem_resource **out) {
  if (!out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_async_create: out is NULL");
  gpumem_async_options options = opts ? *opts : (gpumem_async_options){0};
  if (options.ipc_handle != GPUMEM_IPC_NONE && options.ipc_handle != GPUMEM_IPC_POSIX_FD &&
      options.ipc_handle != GPUMEM_IPC_FABRIC)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_async_create: unknown IPC handle "
                        "type %d",
                        (int)options.ipc_handle);
  if (options.pool && options.ipc_handle != GPUMEM_IPC_NONE)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_async_create: an IPC handle type for a pool of the program's "
                        "(its own handle types apply)");
  if (options.managed && (options.pool || options.ipc_handle != GPUMEM_IPC_NONE))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_async_create: managed allocates from the device's default pool "
                        "of managed memory, which takes no %s",
                        options.pool ? "pool of the program's" : "IPC handle type");
  options.managed = options.managed != 0;
  const gpumem__device_ops *dev;
  gpumem_status status = gpumem__device_for("gpumem_async_create", device, &dev, &device);
  if (status != GPUMEM_OK)
    return status;
  int64_t supported = 0;
  status = dev->device_attribute(device, GPUMEM__ATTR_MEMPOOL_SUPPORTED, &supported);
  if (status == GPUMEM_OK && !supported)
    status = gpumem__fail(GPUMEM_ERR_UNSUPPORTED, "device %d has no stream-ordered memory pools",
                          device);
  if (status == GPUMEM_OK && options.managed)
    status = dev->device_attribute(device, GPUMEM__ATTR_CONCURRENT_MANAGED, &supported);
  if (status == GPUMEM_OK && options.managed && !supported)
    status = gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                          "device %d has no concurrent managed access, which pools of managed "
                          "memory need",
                          device);
  gpumem__mempool pool = NULL;
  if (status == GPUMEM_OK)
    status = get_pool(dev, device, &options, &pool);
  if (status == GPUMEM_OK && options.initial_size > 0)
    status = warm_pool(dev, device, pool, options.initial_size);
  async_resource *self = NULL;
  if (status == GPUMEM_OK && !(self = calloc(1, sizeof *self)))
    status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "out of host memory");
  if (status != GPUMEM_OK) {
    if (pool && !pool_is_shared(&options))
      dev->pool_destroy(device, pool);
    return gpumem__fail_context(status, "gpumem_async_create on device %d", device);
  }
  gpumem__base_init(&self->base, &async_ops, pool_is_shared(&options) ? &view_impl : &async_impl,
                    device, dev);
  self->base.header.caps.stream_ordered = true;
  if (options.managed)
    self->base.header.caps.memory = GPUMEM_MEMORY_MANAGED;
  /* Not annotatable: compute-sanitizer refuses a heap over a driver pool's allocation
   * (measured with 2025.3), so a pool over async is seen only as the driver pool's blocks. */
  self->options = options;
  self->pool = pool;
  gpumem__holder_add(&self->base.holder, &self->base.header);
  *out = &self->base.header;
  return GPUMEM_OK;
}

gpumem_status gpumem_async_pool_handle(const gpumem_resource *mr, void **pool) {
  if (!mr || !pool || mr->ops != &async_ops)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_async_pool_handle: %s",
                        !mr     ? "mr is NULL"
                        : !pool ? "pool is NULL"
                                : "not an async resource");
  *pool = (void *)((const async_resource *)mr)->pool;
  return GPUMEM_OK;
}
