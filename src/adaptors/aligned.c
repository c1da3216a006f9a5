/* aligned.c: the aligned adaptor, which raises the alignment of requests of at least a
 * threshold to a chosen power of two (RMM's aligned_resource_adaptor).
 *
 * gpumem's resources take an alignment with every request, so the adaptor only passes the
 * raised alignment down, and the same to deallocate: no table of pointers, no padding. A
 * pool over the adaptor asks for growth at chosen addresses, which are multiples of the
 * upstream's granularity: that keeps the promise only while the alignment is at most the
 * granularity, so above it the adaptor does not claim placement and the pool grows by
 * plain (aligned) allocations. */
#include "adaptors/adaptor.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct aligned_resource {
  gpumem_resource header;
  size_t alignment, threshold;
} aligned_resource;

static inline size_t raised(const aligned_resource *self, size_t bytes, size_t alignment) {
  return bytes >= self->threshold && alignment < self->alignment ? self->alignment : alignment;
}

static gpumem_status aligned_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                      gpumem_stream stream, void **ptr) {
  const aligned_resource *self = (const aligned_resource *)mr;
  alignment = raised(self, bytes, alignment);
  if (GPUMEM_UNLIKELY(bytes > SIZE_MAX - alignment))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "aligned: %zu bytes with alignment %zu overflows the address space", bytes,
                        alignment);
  return gpumem__fail_through(
      mr, mr->upstream->ops->allocate(mr->upstream, bytes, alignment, stream, ptr));
}

static gpumem_status aligned_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                        size_t alignment, gpumem_stream stream) {
  alignment = raised((const aligned_resource *)mr, bytes, alignment);
  return mr->upstream->ops->deallocate(mr->upstream, ptr, bytes, alignment, stream);
}

static void aligned_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const aligned_resource *self = (const aligned_resource *)mr;
  gpumem__describe_over(mr, buf, size, ", alignment=%zu, threshold=%zu", self->alignment,
                        self->threshold);
}

static const gpumem__resource_ops aligned_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "aligned",
    .allocate = aligned_allocate,
    .deallocate = aligned_deallocate,
    .query = gpumem__forward_query,
    .describe = aligned_describe,
    .destroy = gpumem__adaptor_free,
    .allocate_at = gpumem__forward_allocate_at,
    .unmap_pieces = gpumem__forward_unmap_pieces,
    .hold_pieces = gpumem__forward_hold_pieces,
    .trim = gpumem__forward_trim,
};

gpumem_status gpumem_aligned_create(gpumem_resource *upstream, const gpumem_aligned_options *opts,
                                    gpumem_resource **out) {
  gpumem_status status = gpumem__check_adaptor_args("gpumem_aligned_create", upstream, out);
  if (status != GPUMEM_OK)
    return status;
  gpumem_aligned_options options = opts ? *opts : (gpumem_aligned_options){0};
  if (options.alignment == 0)
    options.alignment = GPUMEM_DEFAULT_ALIGNMENT;
  if (!gpumem__is_pow2(options.alignment))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_aligned_create: the alignment %zu is not a power of two",
                        options.alignment);
  aligned_resource *self = calloc(1, sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_aligned_create: out of host memory");
  gpumem__resource_init_pass_through(&self->header, &aligned_ops, upstream);
  if (self->header.caps.places_at_address && options.alignment > self->header.caps.granularity)
    gpumem__drop_placement(&self->header);
  self->alignment = options.alignment;
  self->threshold = options.threshold;
  /* The promise, for debug level 3's guards; over another promise, one that covers both. */
  gpumem__capabilities *caps = &self->header.caps;
  if (options.alignment > GPUMEM_DEFAULT_ALIGNMENT) {
    caps->align_threshold = caps->align_promise && caps->align_threshold < options.threshold
                                ? caps->align_threshold
                                : options.threshold;
    if (caps->align_promise < options.alignment)
      caps->align_promise = options.alignment;
  }
  *out = &self->header;
  return GPUMEM_OK;
}
