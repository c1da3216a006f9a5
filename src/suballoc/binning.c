/* binning.c: requests routed by size to bins, the rest to the upstream.
 *
 * Small requests of similar sizes are where a general pool spends its time splitting and
 * merging; giving each size class a fixed_size resource of its own makes them constant time
 * and keeps them from fragmenting the large blocks. Bins are sorted by size; a request goes
 * to the first bin at least as large, and a free of the same size finds the same bin, which
 * knows its live blocks and refuses any other pointer or size. Requests no bin takes go to
 * the upstream and are recorded, so that a free with a wrong size can never reach the
 * upstream and give back a bin's chunk. The exponent bins are created when first used, each
 * taking about 2 MiB at a time from the upstream, so an unused bin costs nothing; when the
 * upstream runs out, the bins give their free chunks back and the request is tried again. */
#include "core/biased_lock.h"
#include "suballoc/block.h"
#include "suballoc/pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BINS 64
#define BIN_CHUNK ((size_t)2 << 20)

typedef struct bin {
  size_t size;
  _Atomic(gpumem_resource *) resource; /* NULL until first use for exponent bins */
  bool added; /* the resource is the program's (gpumem_binning_add_bin), not one made here */
} bin;

typedef struct binning_resource {
  gpumem_resource header;
  gpumem_binning_options options;
  pthread_mutex_t lock; /* guards bin creation */
  bin bins[MAX_BINS];
  size_t bin_count;
  /* Requests no bin takes, served by the upstream directly: a free reaches the upstream only
   * for a pointer recorded here with its size. The upstream also holds the bins' chunks, so
   * a free routed by its size alone could give back a chunk whose blocks are in use. A map
   * of the pool's kind under a biased lock: one thread's large requests pay no atomic
   * instruction for it. */
  gpumem__biased_lock direct_lock;
  gpumem__block_map direct;
  gpumem__block_slab direct_slab;
  /* Written under direct_lock, read by queries without it. */
  atomic_uint_fast64_t direct_bytes, direct_count;
} binning_resource;

/* ---------------------------------------------------------------------------------------
 * The record of requests served by the upstream directly
 * ------------------------------------------------------------------------------------- */

static void add_direct_figures(binning_resource *self, int64_t bytes, int64_t count) {
  GPUMEM__ASSERT(&self->header,
                 count >= 0 || atomic_load_explicit(&self->direct_count, memory_order_relaxed) >=
                                   (uint64_t)-count,
                 "the count of direct requests never goes below zero");
  atomic_store_explicit(&self->direct_bytes,
                        atomic_load_explicit(&self->direct_bytes, memory_order_relaxed) + bytes,
                        memory_order_relaxed);
  atomic_store_explicit(&self->direct_count,
                        atomic_load_explicit(&self->direct_count, memory_order_relaxed) + count,
                        memory_order_relaxed);
}

/* Records ptr as served directly with `bytes`; false when host memory is exhausted. */
static bool record_direct(binning_resource *self, void *ptr, size_t bytes) {
  gpumem__biased_lock_take(&self->direct_lock);
  gpumem__block *block = gpumem__block_new(&self->direct_slab);
  bool recorded = block != NULL;
  if (block) {
    block->addr = (uintptr_t)ptr;
    block->requested = bytes;
    recorded = gpumem__block_map_insert(&self->direct, block);
    if (recorded)
      add_direct_figures(self, (int64_t)bytes, 1);
    else
      gpumem__block_delete(&self->direct_slab, block);
  }
  gpumem__biased_lock_release(&self->direct_lock);
  return recorded;
}

/* Takes ptr out of the record if it was served directly with exactly `bytes`; otherwise
 * GPUMEM_ERR_MISUSE with a message, and nothing changed. */
static gpumem_status unrecord_direct(binning_resource *self, void *ptr, size_t bytes) {
  gpumem__biased_lock_take(&self->direct_lock);
  gpumem__block *block = gpumem__block_map_take(&self->direct, (uintptr_t)ptr);
  size_t requested = block ? block->requested : 0;
  if (GPUMEM_LIKELY(block && requested == bytes)) {
    gpumem__block_delete(&self->direct_slab, block);
    add_direct_figures(self, -(int64_t)bytes, -1);
  } else if (block) {
    gpumem__block_map_put(&self->direct, block); /* room: it was just there */
  }
  gpumem__biased_lock_release(&self->direct_lock);
  if (GPUMEM_LIKELY(block && requested == bytes))
    return GPUMEM_OK;
  if (block)
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "deallocate of %p from a binning resource with %zu bytes, but it was "
                        "allocated with %zu bytes",
                        ptr, bytes, requested);
  return gpumem__fail(GPUMEM_ERR_MISUSE,
                      "deallocate of %p (%zu bytes) from a binning resource: no bin takes that "
                      "size, and the upstream served no live allocation there for this resource "
                      "(a block from a bin is freed with the size it was allocated with)",
                      ptr, bytes);
}

/* The first bin holding `bytes`, or NULL for the upstream. */
static bin *bin_for(binning_resource *self, size_t bytes) {
  for (size_t i = 0; i < self->bin_count; i++)
    if (bytes <= self->bins[i].size)
      return &self->bins[i];
  return NULL;
}

static gpumem_status resource_of_bin(binning_resource *self, bin *b, gpumem_resource **out) {
  gpumem_resource *resource = atomic_load_explicit(&b->resource, memory_order_acquire);
  if (GPUMEM_LIKELY(resource != NULL)) {
    *out = resource;
    return GPUMEM_OK;
  }
  gpumem_status status = GPUMEM_OK;
  pthread_mutex_lock(&self->lock);
  resource = atomic_load_explicit(&b->resource, memory_order_acquire);
  if (!resource) {
    size_t blocks = b->size < BIN_CHUNK ? BIN_CHUNK / b->size : 1;
    gpumem_fixed_size_options options = {.block_size = b->size, .blocks_to_preallocate = blocks};
    status = gpumem_fixed_size_create(self->header.upstream, &options, &resource);
    if (status == GPUMEM_OK)
      atomic_store_explicit(&b->resource, resource, memory_order_release);
    else if (status == GPUMEM_ERR_OUT_OF_MEMORY) /* host memory: the bin takes nothing yet */
      gpumem__note_oom(GPUMEM__OOM_HOST, &self->header, b->size);
  }
  pthread_mutex_unlock(&self->lock);
  if (status == GPUMEM_OK)
    *out = resource;
  return status;
}

/* Gives the free chunks of the bins made here back to the upstream; *released grows by
 * their bytes. The program's bins (gpumem_binning_add_bin) are its own to trim. Returns the
 * first failure, after trying every bin. */
static gpumem_status trim_bins(binning_resource *self, size_t *released) {
  gpumem_status status = GPUMEM_OK;
  for (size_t i = 0; i < self->bin_count; i++) {
    gpumem_resource *resource = atomic_load_explicit(&self->bins[i].resource, memory_order_acquire);
    if (!resource || self->bins[i].added || !gpumem__can_trim(resource))
      continue;
    gpumem_status trimmed = resource->ops->trim(resource, released);
    if (status == GPUMEM_OK)
      status = trimmed;
  }
  return status;
}

/* Out of line, as deallocate_direct: the bins' paths then save no registers for it. */
GPUMEM_NOINLINE static gpumem_status allocate_direct(binning_resource *self, size_t bytes,
                                                     size_t alignment, gpumem_stream stream,
                                                     void **ptr) {
  gpumem_resource *up = self->header.upstream;
  void *memory;
  gpumem_status status = up->ops->allocate(up, bytes, alignment, stream, &memory);
  if (status != GPUMEM_OK)
    return gpumem__fail_through(&self->header, status);
  if (!record_direct(self, memory, bytes)) {
    up->ops->deallocate(up, memory, bytes, alignment, stream);
    gpumem__note_oom(GPUMEM__OOM_HOST, &self->header, bytes);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "binning: out of host memory to record an allocation");
  }
  *ptr = memory;
  return GPUMEM_OK;
}

static gpumem_status allocate_once(binning_resource *self, size_t bytes, size_t alignment,
                                   gpumem_stream stream, void **ptr) {
  bin *b = alignment == GPUMEM_DEFAULT_ALIGNMENT ? bin_for(self, bytes) : NULL;
  if (!b)
    return allocate_direct(self, bytes, alignment, stream, ptr);
  gpumem_resource *target;
  gpumem_status status = resource_of_bin(self, b, &target);
  if (status != GPUMEM_OK)
    return status;
  return target->ops->allocate(target, bytes, alignment, stream, ptr);
}

/* Out of memory: the bins may hold free chunks that the upstream could serve the request
 * from (or another bin grow by). They go back, and the request is tried again; without this,
 * memory a bin took once would stay in it for good. */
GPUMEM_COLD static gpumem_status allocate_after_trim(binning_resource *self, size_t bytes,
                                                     size_t alignment, gpumem_stream stream,
                                                     void **ptr) {
  char first[1024];
  snprintf(first, sizeof first, "%s", gpumem_last_error_message());
  size_t released = 0;
  trim_bins(self, &released);
  if (released == 0) /* nothing changed: the first failure stands */
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "%s", first);
  gpumem_status status = allocate_once(self, bytes, alignment, stream, ptr);
  if (status == GPUMEM_ERR_OUT_OF_MEMORY)
    return gpumem__fail_context(status, "even after the bins gave %zu free bytes back", released);
  return status;
}

static gpumem_status binning_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                      gpumem_stream stream, void **ptr) {
  binning_resource *self = (binning_resource *)mr;
  gpumem_status status = allocate_once(self, bytes, alignment, stream, ptr);
  if (GPUMEM_LIKELY(status != GPUMEM_ERR_OUT_OF_MEMORY))
    return status;
  return allocate_after_trim(self, bytes, alignment, stream, ptr);
}

/* A free no bin takes: only a pointer the upstream served directly, with its size. */
GPUMEM_NOINLINE static gpumem_status deallocate_direct(binning_resource *self, void *ptr,
                                                       size_t bytes, size_t alignment,
                                                       gpumem_stream stream) {
  gpumem_status status = unrecord_direct(self, ptr, bytes);
  if (status != GPUMEM_OK)
    return gpumem__fail_through(&self->header, status);
  gpumem_resource *up = self->header.upstream;
  status = up->ops->deallocate(up, ptr, bytes, alignment, stream);
  /* Still live: recorded again. The map has room, as it was just there; a struct is a
   * spare, as one was just deleted. */
  if (status != GPUMEM_OK)
    record_direct(self, ptr, bytes);
  return gpumem__fail_through(&self->header, status);
}

/* A free of a bin's size goes to that bin, which holds the pointer live with that size or
 * refuses it, changing nothing; the rest only to the upstream's allocations made here. */
static gpumem_status binning_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                        size_t alignment, gpumem_stream stream) {
  binning_resource *self = (binning_resource *)mr;
  bin *b = alignment == GPUMEM_DEFAULT_ALIGNMENT ? bin_for(self, bytes) : NULL;
  if (!b)
    return deallocate_direct(self, ptr, bytes, alignment, stream);
  gpumem_resource *target = atomic_load_explicit(&b->resource, memory_order_acquire);
  if (!target)
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "deallocate of %p (%zu bytes) from a binning resource: the bin of that "
                        "size has never allocated anything",
                        ptr, bytes);
  /* A tail call: the bin's own message says what is wrong with a refused free. */
  return target->ops->deallocate(target, ptr, bytes, alignment, stream);
}

/* Live and free figures sum the bins' (plus the requests served directly); reserved bytes
 * are the upstream's, which already count what the bins took from it. */
static gpumem_status binning_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  binning_resource *self = (binning_resource *)mr;
  const gpumem_resource *up = mr->upstream;
  switch (what) {
  case GPUMEM_QUERY_RESERVED_BYTES:
  case GPUMEM_QUERY_PEAK_RESERVED_BYTES:
    return up->ops->query ? up->ops->query(up, what, out) : GPUMEM_ERR_UNSUPPORTED;
  case GPUMEM_QUERY_LIVE_BYTES:
  case GPUMEM_QUERY_LIVE_COUNT:
  case GPUMEM_QUERY_FREE_BYTES:
  case GPUMEM_QUERY_FREE_BLOCKS:
  case GPUMEM_QUERY_LARGEST_FREE_BLOCK:
    break;
  default:
    return GPUMEM_ERR_UNSUPPORTED;
  }
  uint64_t total = 0, value;
  for (size_t i = 0; i < self->bin_count; i++) {
    const gpumem_resource *resource = atomic_load(&self->bins[i].resource);
    if (!resource || !resource->ops->query || resource->ops->query(resource, what, &value))
      continue;
    if (what == GPUMEM_QUERY_LARGEST_FREE_BLOCK)
      total = value > total ? value : total;
    else
      total += value;
  }
  if (what == GPUMEM_QUERY_LIVE_BYTES)
    total += atomic_load_explicit(&self->direct_bytes, memory_order_relaxed);
  if (what == GPUMEM_QUERY_LIVE_COUNT)
    total += atomic_load_explicit(&self->direct_count, memory_order_relaxed);
  *out = total;
  return GPUMEM_OK;
}

static void binning_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const binning_resource *self = (const binning_resource *)mr;
  gpumem__describe_over(mr, buf, size, ", min=%d, max=%d", self->options.min_exponent,
                        self->options.max_exponent);
}

static gpumem_status binning_destroy(gpumem_resource *mr) {
  binning_resource *self = (binning_resource *)mr;
  /* The bins made here first: if one cannot be destroyed, the resource lives on, and the
   * ones already gone are made again when next used, as before. The program's bins go
   * last, as a slot emptied here would be refilled with a fixed_size bin, not theirs. */
  for (int added = 0; added <= 1; added++)
    for (size_t i = self->bin_count; i-- > 0;) {
      if (self->bins[i].added != (bool)added)
        continue;
      gpumem_resource *resource = atomic_load(&self->bins[i].resource);
      gpumem_status status = gpumem_resource_release(resource);
      if (status != GPUMEM_OK)
        return status;
      atomic_store(&self->bins[i].resource, NULL);
    }
  gpumem__block_map_destroy(&self->direct);
  gpumem__block_slab_destroy(&self->direct_slab);
  pthread_mutex_destroy(&self->lock);
  free(self);
  return GPUMEM_OK;
}

static gpumem_status binning_trim(gpumem_resource *mr, size_t *released) {
  return trim_bins((binning_resource *)mr, released);
}

/* ---------------------------------------------------------------------------------------
 * Validation (debug level 2)
 * ------------------------------------------------------------------------------------- */

static bool add_direct(gpumem__block *block, void *user) {
  uint64_t *bytes = user;
  *bytes += block->requested;
  return true;
}

/* The record of direct requests: the map's structure, and the figures its sums. */
static gpumem_status check_direct(binning_resource *self) {
  char why[400];
  uint64_t bytes = 0;
  gpumem__biased_lock_take(&self->direct_lock);
  bool ok = gpumem__block_map_check(&self->direct, add_direct, &bytes, why, sizeof why);
  uint64_t count = self->direct.count;
  uint64_t said_bytes = atomic_load_explicit(&self->direct_bytes, memory_order_relaxed);
  uint64_t said_count = atomic_load_explicit(&self->direct_count, memory_order_relaxed);
  gpumem__biased_lock_release(&self->direct_lock);
  if (!ok)
    return gpumem__fail(GPUMEM_ERR_INTERNAL, "binning validation: direct requests: %s", why);
  if (bytes != said_bytes || count != said_count)
    return gpumem__fail(GPUMEM_ERR_INTERNAL,
                        "binning validation: direct requests counted as %llu bytes in %llu, "
                        "recorded as %llu bytes in %llu",
                        (unsigned long long)said_bytes, (unsigned long long)said_count,
                        (unsigned long long)bytes, (unsigned long long)count);
  return GPUMEM_OK;
}

/* Bins in increasing size, each one's resource valid (a program's bin with what is under
 * it), and the record of direct requests. */
static gpumem_status binning_validate(const gpumem_resource *mr) {
  binning_resource *self = (binning_resource *)mr;
  gpumem_status status = GPUMEM_OK;
  pthread_mutex_lock(&self->lock);
  for (size_t i = 0; i < self->bin_count && status == GPUMEM_OK; i++) {
    const gpumem_resource *resource = atomic_load(&self->bins[i].resource);
    if (i > 0 && self->bins[i - 1].size >= self->bins[i].size)
      status = gpumem__fail(GPUMEM_ERR_INTERNAL,
                            "binning validation: bin %zu (%zu bytes) is not larger than the one "
                            "before (%zu bytes)",
                            i, self->bins[i].size, self->bins[i - 1].size);
    else if (resource)
      status = self->bins[i].added ? gpumem__validate(resource) : gpumem__validate_one(resource);
    if (status != GPUMEM_OK && resource)
      status = gpumem__fail_context(status, "binning validation: the bin of %zu bytes",
                                    self->bins[i].size);
  }
  pthread_mutex_unlock(&self->lock);
  return status == GPUMEM_OK ? check_direct(self) : status;
}

/* The bins that exist (made when first used, or added), for reports. */
static size_t binning_parts(const gpumem_resource *mr, gpumem__part *parts, size_t capacity) {
  binning_resource *self = (binning_resource *)mr;
  size_t count = 0;
  pthread_mutex_lock(&self->lock);
  for (size_t i = 0; i < self->bin_count; i++) {
    const gpumem_resource *resource = atomic_load(&self->bins[i].resource);
    if (resource && count < capacity)
      parts[count] = (gpumem__part){resource, "bin", self->bins[i].size};
    count += resource != NULL;
  }
  pthread_mutex_unlock(&self->lock);
  return count;
}

static const gpumem__resource_ops binning_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "binning",
    .allocate = binning_allocate,
    .deallocate = binning_deallocate,
    .query = binning_query,
    .describe = binning_describe,
    .destroy = binning_destroy,
    .trim = binning_trim,
    .validate = binning_validate,
    .parts = binning_parts,
};

/* Inserts a bin in size order, retaining `resource` only once it is stored. A bin of an
 * existing size has its resource replaced, but only when the old one holds no live
 * allocations: their frees would otherwise reach the new resource. */
static gpumem_status insert_bin(binning_resource *self, size_t size, gpumem_resource *resource) {
  size_t at = 0;
  while (at < self->bin_count && self->bins[at].size < size)
    at++;
  if (at < self->bin_count && self->bins[at].size == size) {
    gpumem_resource *old = atomic_load(&self->bins[at].resource);
    if (old == resource)
      return GPUMEM_OK;
    uint64_t live = 0;
    if (old && gpumem_resource_query(old, GPUMEM_QUERY_LIVE_COUNT, &live) == GPUMEM_OK && live)
      return gpumem__fail(GPUMEM_ERR_MISUSE,
                          "gpumem_binning_add_bin: the bin of %zu bytes has %llu live "
                          "allocations; free them before replacing it",
                          size, (unsigned long long)live);
    /* The old bin goes first: if it cannot be destroyed, the release leaves it held here
     * and the bin unchanged, as the failure promises. */
    gpumem_status status = gpumem_resource_release(old);
    if (status != GPUMEM_OK)
      return status;
    atomic_store(&self->bins[at].resource, gpumem_resource_retain(resource));
    self->bins[at].added = resource != NULL;
    return GPUMEM_OK;
  }
  if (self->bin_count == MAX_BINS)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "binning: at most %d bins", MAX_BINS);
  memmove(&self->bins[at + 1], &self->bins[at], (self->bin_count - at) * sizeof(bin));
  self->bins[at].size = size;
  atomic_init(&self->bins[at].resource, gpumem_resource_retain(resource));
  self->bins[at].added = resource != NULL;
  self->bin_count++;
  return GPUMEM_OK;
}

gpumem_status gpumem_binning_add_bin(gpumem_resource *mr, size_t size,
                                     gpumem_resource *bin_resource) {
  if (!mr || mr->ops != &binning_ops)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_binning_add_bin: %s is not a binning resource",
                        mr ? mr->ops->kind : "NULL");
  if (size == 0 || size > ((size_t)1 << 62))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_binning_add_bin: bad bin size %zu",
                        size);
  binning_resource *self = (binning_resource *)mr;
  pthread_mutex_lock(&self->lock);
  gpumem_status status = insert_bin(self, size, bin_resource);
  pthread_mutex_unlock(&self->lock);
  return status;
}

gpumem_status gpumem_binning_create(gpumem_resource *upstream, const gpumem_binning_options *opts,
                                    gpumem_resource **out) {
  if (!upstream || !out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_binning_create: %s is NULL",
                        upstream ? "out" : "the upstream resource");
  gpumem_binning_options options = opts ? *opts : (gpumem_binning_options){0};
  bool no_bins = options.no_exponent_bins != 0;
  if (no_bins) {
    options.min_exponent = 0;
    options.max_exponent = 0;
  } else {
    options.min_exponent = options.min_exponent ? options.min_exponent : 8;
    options.max_exponent = options.max_exponent ? options.max_exponent : 20;
  }
  if (!no_bins && (options.min_exponent < 8 || options.max_exponent > 40 ||
                   options.min_exponent > options.max_exponent))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_binning_create: bin exponents %d to %d: need 8 <= min <= max "
                        "<= 40 (bins of 256 B to 1 TiB)",
                        options.min_exponent, options.max_exponent);
  binning_resource *self = calloc(1, sizeof *self);
  if (!self || !gpumem__block_map_init(&self->direct)) {
    free(self);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_binning_create: out of host memory");
  }
  gpumem__block_slab_init(&self->direct_slab);
  gpumem__resource_init_suballocator(&self->header, &binning_ops, upstream);
  pthread_mutex_init(&self->lock, NULL);
  self->options = options;
  for (int e = options.min_exponent; !no_bins && e <= options.max_exponent; e++)
    insert_bin(self, (size_t)1 << e, NULL);
  *out = &self->header;
  return GPUMEM_OK;
}
