/* fixed_size.c: one block size for every allocation.
 *
 * A fixed-size resource is a pool whose blocks all have the block size, whatever the request
 * (up to it), and which grows by `blocks_to_preallocate` blocks at a time. Equal blocks always find
 * an exact fit in the pool's free index (constant time, no search), and the pool brings the stream
 * rules (per-stream reuse, other streams' blocks once their work is done) that any
 * suballocator needs. */
#include "suballoc/pool.h"

#include <stdio.h>
#include <stdlib.h>

#define DEFAULT_BLOCK ((size_t)1 << 20)
#define DEFAULT_PREALLOCATE 128

typedef struct fixed_size_resource {
  gpumem_resource header;
  gpumem_fixed_size_options options;
  gpumem_resource *pool;
} fixed_size_resource;

static gpumem_status refuse(const fixed_size_resource *self, size_t bytes, size_t alignment) {
  if (alignment > GPUMEM_DEFAULT_ALIGNMENT)
    return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                        "fixed_size(block=%zu) does not align blocks beyond 256 bytes (asked: %zu)",
                        self->options.block_size, alignment);
  gpumem__note_oom(GPUMEM__OOM_TOO_LARGE, &self->header, bytes);
  return gpumem__fail_out_of_memory(&self->header, bytes,
                                    "the request is larger than the resource's block size");
}

static gpumem_status fixed_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                    gpumem_stream stream, void **ptr) {
  fixed_size_resource *self = (fixed_size_resource *)mr;
  if (bytes > self->options.block_size || alignment > GPUMEM_DEFAULT_ALIGNMENT)
    return refuse(self, bytes, alignment);
  gpumem_resource *pool = self->pool;
  gpumem_status status = pool->ops->allocate(pool, bytes, alignment, stream, ptr);
  if (status != GPUMEM_OK) {
    /* The pool inside is this resource to a report: its refusal is told as this one's. */
    gpumem__oom_note note = gpumem__last_oom();
    if (status == GPUMEM_ERR_OUT_OF_MEMORY && note.mr == pool)
      gpumem__note_oom(note.cause, mr, note.bytes);
    return gpumem__fail_context(status, "fixed_size(block=%zu)", self->options.block_size);
  }
  return GPUMEM_OK;
}

static gpumem_status fixed_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                      size_t alignment, gpumem_stream stream) {
  fixed_size_resource *self = (fixed_size_resource *)mr;
  if (bytes > self->options.block_size)
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "deallocate of %p with %zu bytes from fixed_size(block=%zu): no block "
                        "of this resource is that large",
                        ptr, bytes, self->options.block_size);
  gpumem_resource *pool = self->pool;
  return pool->ops->deallocate(pool, ptr, bytes, alignment, stream);
}

static gpumem_status fixed_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  const gpumem_resource *pool = ((const fixed_size_resource *)mr)->pool;
  return pool->ops->query(pool, what, out);
}

static void fixed_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const fixed_size_resource *self = (const fixed_size_resource *)mr;
  gpumem__describe_over(mr, buf, size, ", block=%zu, prealloc=%zu", self->options.block_size,
                        self->options.blocks_to_preallocate);
}

static gpumem_status fixed_destroy(gpumem_resource *mr) {
  fixed_size_resource *self = (fixed_size_resource *)mr;
  gpumem_status status = gpumem_resource_release(self->pool);
  if (status != GPUMEM_OK)
    return status;
  free(self);
  return GPUMEM_OK;
}

static gpumem_status fixed_trim(gpumem_resource *mr, size_t *released) {
  gpumem_resource *pool = ((fixed_size_resource *)mr)->pool;
  return pool->ops->trim(pool, released);
}

static gpumem_status fixed_validate(const gpumem_resource *mr) {
  return gpumem__validate_one(((const fixed_size_resource *)mr)->pool);
}

static const gpumem__resource_ops fixed_size_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "fixed_size",
    .allocate = fixed_allocate,
    .deallocate = fixed_deallocate,
    .query = fixed_query,
    .describe = fixed_describe,
    .destroy = fixed_destroy,
    .trim = fixed_trim,
    .validate = fixed_validate,
};

gpumem_status gpumem_fixed_size_create(gpumem_resource *upstream,
                                       const gpumem_fixed_size_options *opts,
                                       gpumem_resource **out) {
  if (!upstream || !out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_fixed_size_create: %s is NULL",
                        upstream ? "out" : "the upstream resource");
  gpumem_fixed_size_options options = opts ? *opts : (gpumem_fixed_size_options){0};
  if (options.block_size == 0)
    options.block_size = DEFAULT_BLOCK;
  if (options.blocks_to_preallocate == 0)
    options.blocks_to_preallocate = DEFAULT_PREALLOCATE;
  if (options.block_size > SIZE_MAX - (GPUMEM_DEFAULT_ALIGNMENT - 1))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_fixed_size_create: block size %zu overflows when rounded up to "
                        "256",
                        options.block_size);
  options.block_size = gpumem__align_up(options.block_size, GPUMEM_DEFAULT_ALIGNMENT);
  if (options.block_size > SIZE_MAX / options.blocks_to_preallocate)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_fixed_size_create: %zu blocks of %zu bytes overflow",
                        options.blocks_to_preallocate, options.block_size);
  fixed_size_resource *self = calloc(1, sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_fixed_size_create: out of host memory");
  /* Nothing taken at creation: a bin that is never used costs nothing. Holes stay mapped:
   * blocks of one size leave holes that the next of them fits. */
  gpumem_pool_options pool_options = {.release_holes_over = GPUMEM_POOL_KEEP_HOLES};
  gpumem_status status = gpumem__pool_create_rounded(
      upstream, &pool_options, options.block_size * options.blocks_to_preallocate,
      options.block_size, &self->pool);
  if (status != GPUMEM_OK) {
    free(self);
    return status;
  }
  gpumem__resource_init_suballocator(&self->header, &fixed_size_ops, upstream);
  self->options = options;
  *out = &self->header;
  return GPUMEM_OK;
}
