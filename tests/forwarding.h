/* forwarding.h: resources the tests build that no spec can name, for the suites that are
 * driven by lists of specs (conformance, fault_sweep).
 *
 *   "user:SPEC"            a user resource (gpumem_user_resource_create, written with the
 *                          public API only) that forwards every call to a resource built
 *                          from SPEC (or from another name of this list)
 *   "pool:NAME"            a pool (initial size 1: one growth step) over what NAME builds
 *   "retry(pool:NAME)"     a failure callback adaptor whose callback says no, over that pool
 *
 * Anything else is a spec. */
#ifndef GPUMEM_TESTS_FORWARDING_H
#define GPUMEM_TESTS_FORWARDING_H

#include "check.h"

#include <stdatomic.h>

/* The failure callback of "retry(pool:...)": counts and says no. */
static atomic_int retry_callbacks; /* calls of never_retry */
static int never_retry(size_t bytes, void *user) {
  atomic_fetch_add(&retry_callbacks, 1);
  return 0;
}

static gpumem_status forward_allocate(void *state, size_t bytes, size_t alignment,
                                      gpumem_stream stream, void **ptr) {
  return gpumem_allocate_aligned(state, bytes, alignment, stream, ptr);
}

static gpumem_status forward_deallocate(void *state, void *ptr, size_t bytes, size_t alignment,
                                        gpumem_stream stream) {
  return gpumem_deallocate_aligned(state, ptr, bytes, alignment, stream);
}

static gpumem_status forward_query(void *state, gpumem_query what, uint64_t *out) {
  return gpumem_resource_query(state, what, out);
}

static void forward_destroy(void *state) {
  CHECK_OK(gpumem_resource_release(state));
}

static gpumem_status make_resource(const char *spec, gpumem_resource **out);

/* "user:SPEC": a user resource over the resource SPEC builds. */
static gpumem_status make_user(const char *spec, gpumem_resource **out) {
  gpumem_resource *backing;
  gpumem_status status = make_resource(spec, &backing);
  if (status != GPUMEM_OK)
    return status;
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_OK(gpumem_resource_get_capabilities(backing, &caps));
  gpumem_user_resource_ops ops = {
      .size = sizeof ops,
      .version = GPUMEM_USER_RESOURCE_OPS_VERSION,
      .allocate = forward_allocate,
      .deallocate = forward_deallocate,
      .query = forward_query,
      .destroy = forward_destroy,
      .memory = caps.memory,
      .stream_ordered = caps.stream_ordered,
      .name = "forwarding",
  };
  status = gpumem_user_resource_create(gpumem_resource_device(backing), &ops, backing, out);
  if (status != GPUMEM_OK)
    gpumem_resource_release(backing);
  return status;
}

/* A resource from a spec, or from one of the names above; "retry(pool:NAME)" wraps the pool
 * in a failure callback adaptor whose callback counts and says no (built by hand: the
 * spec's retry has a callback of its own). */
static gpumem_status make_resource(const char *spec, gpumem_resource **out) {
  if (strncmp(spec, "user:", 5) == 0)
    return make_user(spec + 5, out);
  if (strncmp(spec, "pool:", 5) == 0 || strncmp(spec, "retry(pool:", 11) == 0) {
    bool retry = spec[0] == 'r';
    char inner[256];
    snprintf(inner, sizeof inner, "%s", spec + (retry ? 11 : 5));
    if (retry)
      inner[strlen(inner) - 1] = '\0';
    gpumem_resource *upstream, *pool;
    gpumem_status status = make_resource(inner, &upstream);
    if (status != GPUMEM_OK)
      return status;
    gpumem_pool_options opts = {.initial_size = 1}; /* one growth step: it grows from there */
    status = gpumem_pool_create(upstream, &opts, &pool);
    CHECK_OK(gpumem_resource_release(upstream));
    if (status != GPUMEM_OK || !retry) {
      *out = pool;
      return status;
    }
    gpumem_failure_callback_options never = {.callback = never_retry};
    status = gpumem_failure_callback_create(pool, &never, out);
    CHECK_OK(gpumem_resource_release(pool));
    return status;
  }
  return gpumem_resource_from_spec(spec, out);
}

#endif /* GPUMEM_TESTS_FORWARDING_H */
