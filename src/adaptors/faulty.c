/* faulty.c: the fault-injection adaptor. It forwards every call to its upstream except the
 * allocations it is told to fail (the Nth, or every Nth), which fail with a chosen status
 * before reaching the upstream, so the upstream is untouched. Tests sweep the failure over
 * every allocation of a workload to prove that each failure path leaves things whole. */
#include "adaptors/adaptor.h"
#include "core/internal.h"
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct faulty_resource {
  gpumem_resource header;
  pthread_mutex_t lock; /* guards options against gpumem_faulty_reset */
  gpumem_faulty_options options;
  /* Whether options fail any call: read without the lock, so that a faulty adaptor told to
   * fail nothing (a pool over faulty(vmm)) costs no lock per call. */
  atomic_bool armed;
  atomic_uint_fast64_t calls; /* allocations asked since creation or reset */
  gpumem__adaptor_live live;
} faulty_resource;

/* Whether allocation number `call` fails, and with which status. */
static bool should_fail(faulty_resource *self, uint64_t call, gpumem_status *status) {
  if (GPUMEM_LIKELY(!atomic_load_explicit(&self->armed, memory_order_acquire)))
    return false;
  pthread_mutex_lock(&self->lock);
  uint64_t at = self->options.fail_at, every = self->options.fail_every;
  *status = self->options.status;
  pthread_mutex_unlock(&self->lock);
  return (at != 0 && call == at) || (every != 0 && call % every == 0);
}

static gpumem_status faulty_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                     gpumem_stream stream, void **ptr) {
  faulty_resource *self = (faulty_resource *)mr;
  uint64_t call = atomic_fetch_add_explicit(&self->calls, 1, memory_order_relaxed) + 1;
  gpumem_status injected;
  if (should_fail(self, call, &injected)) {
    if (injected == GPUMEM_ERR_OUT_OF_MEMORY) {
      gpumem__note_oom(GPUMEM__OOM_INJECTED, mr, bytes);
      return gpumem__fail_out_of_memory(mr, bytes, "failure injected by the faulty adaptor");
    }
    return gpumem__fail(injected, "faulty: injected failure of allocation #%llu (%zu bytes)",
                        (unsigned long long)call, bytes);
  }
  gpumem_status status = mr->upstream->ops->allocate(mr->upstream, bytes, alignment, stream, ptr);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "faulty (no failure injected)");
  gpumem__adaptor_live_add(&self->live, 1, (int64_t)bytes);
  return GPUMEM_OK;
}

static gpumem_status faulty_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                       size_t alignment, gpumem_stream stream) {
  faulty_resource *self = (faulty_resource *)mr;
  gpumem_status status = mr->upstream->ops->deallocate(mr->upstream, ptr, bytes, alignment, stream);
  if (status == GPUMEM_OK) {
    gpumem__adaptor_live_add(&self->live, -1, -(int64_t)bytes);
  }
  return status;
}

/* Placement passes through with the same injection as allocate: a chosen failure makes a
 * pool above grow elsewhere, the path a taken address range takes. */
static gpumem_status faulty_allocate_at(gpumem_resource *mr, uintptr_t addr, size_t bytes,
                                        void **ptr) {
  faulty_resource *self = (faulty_resource *)mr;
  uint64_t call = atomic_fetch_add_explicit(&self->calls, 1, memory_order_relaxed) + 1;
  gpumem_status injected;
  if (should_fail(self, call, &injected))
    return GPUMEM_ERR_OUT_OF_MEMORY; /* quiet, as the contract's taken range is */
  gpumem_status status = mr->upstream->ops->allocate_at(mr->upstream, addr, bytes, ptr);
  if (status == GPUMEM_OK) {
    gpumem__adaptor_live_add(&self->live, 1, (int64_t)bytes);
  }
  return status;
}

static gpumem_status faulty_unmap_pieces(gpumem_resource *mr, uintptr_t addr, size_t size,
                                         int *allocations_added) {
  faulty_resource *self = (faulty_resource *)mr;
  gpumem_status status =
      mr->upstream->ops->unmap_pieces(mr->upstream, addr, size, allocations_added);
  if (status == GPUMEM_OK)
    gpumem__adaptor_live_add(&self->live, *allocations_added, -(int64_t)size);
  return status;
}

static gpumem_status faulty_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  return gpumem__adaptor_live_query(&((const faulty_resource *)mr)->live, mr, what, out);
}

static const char *status_word(gpumem_status status) {
  switch (status) {
  case GPUMEM_ERR_OUT_OF_MEMORY:
    return "out_of_memory";
  case GPUMEM_ERR_CUDA:
    return "cuda";
  default:
    return "injected";
  }
}

static void faulty_describe(const gpumem_resource *mr, char *buf, size_t size) {
  faulty_resource *self = (faulty_resource *)mr;
  pthread_mutex_lock(&self->lock);
  gpumem_faulty_options o = self->options;
  pthread_mutex_unlock(&self->lock);
  gpumem__describe_over(mr, buf, size, ", fail_at=%llu, fail_every=%llu, status=%s",
                        (unsigned long long)o.fail_at, (unsigned long long)o.fail_every,
                        status_word(o.status));
}

static gpumem_status faulty_destroy(gpumem_resource *mr) {
  faulty_resource *self = (faulty_resource *)mr;
  pthread_mutex_destroy(&self->lock);
  free(self);
  return GPUMEM_OK;
}

static const gpumem__resource_ops faulty_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "faulty",
    .allocate = faulty_allocate,
    .deallocate = faulty_deallocate,
    .query = faulty_query,
    .describe = faulty_describe,
    .destroy = faulty_destroy,
    .allocate_at = faulty_allocate_at,
    .unmap_pieces = faulty_unmap_pieces,
    .hold_pieces = gpumem__forward_hold_pieces,
    .trim = gpumem__forward_trim,
};

static gpumem_status checked_options(const gpumem_faulty_options *opts,
                                     gpumem_faulty_options *out) {
  gpumem_faulty_options options = opts ? *opts : (gpumem_faulty_options){0};
  if (options.status == GPUMEM_OK)
    options.status = GPUMEM_ERR_INJECTED_FAULT;
  if (options.status != GPUMEM_ERR_INJECTED_FAULT && options.status != GPUMEM_ERR_OUT_OF_MEMORY &&
      options.status != GPUMEM_ERR_CUDA)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "faulty: the injected status must be GPUMEM_ERR_INJECTED_FAULT, "
                        "GPUMEM_ERR_OUT_OF_MEMORY or GPUMEM_ERR_CUDA, not %s",
                        gpumem_status_name(options.status));
  *out = options;
  return GPUMEM_OK;
}

gpumem_status gpumem_faulty_create(gpumem_resource *upstream, const gpumem_faulty_options *opts,
                                   gpumem_resource **out) {
  if (!upstream || !out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_faulty_create: %s is NULL",
                        upstream ? "out" : "the upstream resource");
  gpumem_faulty_options options;
  gpumem_status status = checked_options(opts, &options);
  if (status != GPUMEM_OK)
    return status;
  faulty_resource *self = gpumem__adaptor_new(sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_faulty_create: out of host memory");
  gpumem__resource_init_pass_through(&self->header, &faulty_ops, upstream);
  pthread_mutex_init(&self->lock, NULL);
  self->options = options;
  atomic_init(&self->armed, options.fail_at || options.fail_every);
  *out = &self->header;
  return GPUMEM_OK;
}

gpumem_status gpumem_faulty_reset(gpumem_resource *mr, const gpumem_faulty_options *opts) {
  if (!mr || mr->ops != &faulty_ops)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_faulty_reset: %s is not a faulty resource",
                        mr ? mr->ops->kind : "NULL");
  faulty_resource *self = (faulty_resource *)mr;
  gpumem_faulty_options options;
  gpumem_status status = checked_options(opts, &options);
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&self->lock);
  self->options = options;
  atomic_store(&self->calls, 0);
  atomic_store_explicit(&self->armed, options.fail_at || options.fail_every, memory_order_release);
  pthread_mutex_unlock(&self->lock);
  return GPUMEM_OK;
}
