/* retry.c: the failure callback adaptor. It forwards every call to its upstream; when an
 * allocation fails for want of memory it asks a callback (with the request's size) whether
 * to try again, and does while the callback says yes. The callback may free memory, wait
 * for streams whose frees are pending, or shrink a cache: what a program does before giving
 * up on an allocation.
 *
 * The spec grammar cannot carry a function, so "retry(UPSTREAM, attempts=N)" gets a
 * callback of its own: wait for the whole device (so that memory freed on any stream, e.g.
 * in a driver pool under retry(async), becomes free) and try again, up to N times.
 *
 * No lock is held across the callback, so it may allocate from this very adaptor; a failure
 * inside the callback on the same thread is not retried again (a thread-local depth), so a
 * callback that allocates cannot recurse without end.
 *
 * Everything else passes through untouched, its live figures too (as aligned and prefetch
 * report theirs): counting its own would cost every call of a pass-through adaptor more
 * than the forwarding does. So its last release is refused while its upstream has live
 * allocations, its own or another's: cautious, never unsafe. */
#include "adaptors/adaptor.h"
#include "core/internal.h"
#include "device/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest message kept across the callback: the thread's message buffer. */
#define RETRY_MESSAGE_SIZE 1024

typedef struct retry_resource {
  gpumem_resource header;
  gpumem_failure_callback_options options;
  /* Most retries of one allocation; 0: as many as the callback wants. */
  uint64_t max_retries;
  bool builtin; /* the spec's callback: waits for the device */
} retry_resource;

/* Callbacks of retry adaptors running on this thread: a failure inside one is final. */
static _Thread_local int callback_depth;

/* The upstream failed an allocation with `status`: the callback decides, again and again. */
static GPUMEM_NOINLINE gpumem_status retry_after(retry_resource *self, size_t bytes,
                                                 size_t alignment, gpumem_stream stream, void **ptr,
                                                 gpumem_status status) {
  gpumem_resource *mr = &self->header, *up = mr->upstream;
  uint64_t retries = 0;
  for (; status == GPUMEM_ERR_OUT_OF_MEMORY && callback_depth == 0; retries++) {
    if (self->max_retries && retries >= self->max_retries)
      break;
    /* The callback may fail calls of its own: the upstream's message is the one to report
     * if it gives up. */
    char message[RETRY_MESSAGE_SIZE];
    snprintf(message, sizeof message, "%s", gpumem_last_error_message());
    callback_depth++;
    int again = self->options.callback(bytes, self->options.user);
    callback_depth--;
    if (!again) {
      gpumem__fail(status, "%s", message);
      break;
    }
    status = up->ops->allocate(up, bytes, alignment, stream, ptr);
  }
  if (status == GPUMEM_OK)
    return GPUMEM_OK;
  /* The upstream's message, with what this adaptor did about it. */
  if (status != GPUMEM_ERR_OUT_OF_MEMORY)
    return gpumem__fail_context(status, "retry (not retried: not out of memory)");
  if (callback_depth > 0)
    return gpumem__fail_context(status, "retry (not retried: inside a failure callback)");
  return gpumem__fail_context(status, "retry (gave up after %llu %s)", (unsigned long long)retries,
                              retries == 1 ? "retry" : "retries");
}

/* Passes allocations through; only a failure costs more than the call. */
static gpumem_status retry_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                    gpumem_stream stream, void **ptr) {
  gpumem_resource *up = mr->upstream;
  gpumem_status status = up->ops->allocate(up, bytes, alignment, stream, ptr);
  if (GPUMEM_LIKELY(status == GPUMEM_OK))
    return status;
  return retry_after((retry_resource *)mr, bytes, alignment, stream, ptr, status);
}

static void retry_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const retry_resource *self = (const retry_resource *)mr;
  if (self->builtin)
    gpumem__describe_over(mr, buf, size, ", attempts=%llu", (unsigned long long)self->max_retries);
  else /* a program's callback: no spec can name it */
    gpumem__describe_over(mr, buf, size, ", callback=user");
}

static gpumem_status retry_destroy(gpumem_resource *mr) {
  retry_resource *self = (retry_resource *)mr;
  if (self->options.destroy)
    self->options.destroy(self->options.user);
  free(mr);
  return GPUMEM_OK;
}

static const gpumem__resource_ops retry_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "retry",
    .allocate = retry_allocate,
    .deallocate = gpumem__forward_deallocate,
    .query = gpumem__forward_query,
    .describe = retry_describe,
    .destroy = retry_destroy,
    .allocate_at = gpumem__forward_allocate_at,
    .unmap_pieces = gpumem__forward_unmap_pieces,
    .hold_pieces = gpumem__forward_hold_pieces,
    .trim = gpumem__forward_trim,
};

static gpumem_status create(gpumem_resource *upstream, const gpumem_failure_callback_options *opts,
                            uint64_t max_retries, bool builtin, gpumem_resource **out) {
  static const char who[] = "gpumem_failure_callback_create";
  if (!upstream || !opts || !out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who,
                        !upstream ? "the upstream resource"
                        : !opts   ? "opts"
                                  : "out");
  if (!builtin && !opts->callback)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: opts->callback is NULL", who);
  retry_resource *self = calloc(1, sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
  gpumem__resource_init_pass_through(&self->header, &retry_ops, upstream);
  self->options = *opts;
  self->max_retries = max_retries;
  self->builtin = builtin;
  if (builtin)
    self->options.user = self;
  *out = &self->header;
  return GPUMEM_OK;
}

gpumem_status gpumem_failure_callback_create(gpumem_resource *upstream,
                                             const gpumem_failure_callback_options *opts,
                                             gpumem_resource **out) {
  return create(upstream, opts, 0, false, out);
}

/* The spec's callback: wait for every stream of the device, so that memory freed on any of
 * them is free, then try again (retry_allocate counts the attempts). */
static int synchronize_device(size_t bytes, void *user) {
  const gpumem_resource *mr = user;
  return mr->dev->device_synchronize(mr->device) == GPUMEM_OK;
}

gpumem_status gpumem__retry_create(gpumem_resource *upstream, uint64_t attempts,
                                   gpumem_resource **out) {
  gpumem_failure_callback_options opts = {.callback = synchronize_device};
  return create(upstream, &opts, attempts, true, out);
}
