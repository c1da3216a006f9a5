/* resource.c: the life of a resource (reference counting, refusal to destroy one whose
 * memory is still in use) and the public calls that read its facts.
 *
 * Adaptors and suballocators retain their upstream, so a user may release a handle right
 * after composing: the chain stays alive as long as its top does. */
#include "core/internal.h"
#include "device/device.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upstreams whose last release failed after the resource above them was destroyed. The
 * caller's release of that resource succeeded, so no handle to them is left anywhere: they
 * are kept here and released again at every later release until their destroy succeeds,
 * rather than lost with their memory. */
static pthread_mutex_t orphans_lock = PTHREAD_MUTEX_INITIALIZER;
static gpumem_resource **orphans;
static size_t orphan_capacity;
static atomic_size_t orphan_count; /* read without the lock: releases pay nothing when 0 */

static void keep_orphan(gpumem_resource *mr) {
  pthread_mutex_lock(&orphans_lock);
  size_t count = atomic_load_explicit(&orphan_count, memory_order_relaxed);
  if (count == orphan_capacity) {
    size_t capacity = orphan_capacity ? 2 * orphan_capacity : 8;
    gpumem_resource **grown = realloc(orphans, capacity * sizeof *grown);
    if (grown) {
      orphans = grown;
      orphan_capacity = capacity;
    }
  }
  if (count < orphan_capacity) /* else the host is out of memory: lost, as it must be */
    orphans[count++] = mr;
  atomic_store_explicit(&orphan_count, count, memory_order_relaxed);
  pthread_mutex_unlock(&orphans_lock);
}

static gpumem_status release(gpumem_resource *mr);

/* Releases each kept upstream once more; those that fail again are kept again. The list is
 * taken whole under the lock first, as a release may keep new orphans. */
static void retry_orphans(void) {
  if (atomic_load_explicit(&orphan_count, memory_order_relaxed) == 0)
    return;
  pthread_mutex_lock(&orphans_lock);
  gpumem_resource **taken = orphans;
  size_t count = atomic_load_explicit(&orphan_count, memory_order_relaxed);
  orphans = NULL;
  orphan_capacity = 0;
  atomic_store_explicit(&orphan_count, 0, memory_order_relaxed);
  pthread_mutex_unlock(&orphans_lock);
  for (size_t i = 0; i < count; i++)
    if (release(taken[i]) != GPUMEM_OK)
      keep_orphan(taken[i]);
  free(taken);
}

void gpumem__resource_init(gpumem_resource *mr, const gpumem__resource_ops *ops, int device,
                           const gpumem__device_ops *dev, gpumem_resource *upstream) {
  mr->ops = ops;
  mr->upstream = gpumem_resource_retain(upstream);
  mr->device = device;
  mr->dev = dev;
  mr->caps = (gpumem__capabilities){.memory = GPUMEM_MEMORY_DEVICE};
  mr->passes_through = false;
  atomic_init(&mr->refcount, 1);
}

void gpumem__resource_init_pass_through(gpumem_resource *mr, const gpumem__resource_ops *ops,
                                        gpumem_resource *upstream) {
  gpumem__resource_init(mr, ops, upstream->device, upstream->dev, upstream);
  mr->caps = upstream->caps;
  mr->passes_through = true;
  if (!gpumem__places_at_address(mr))
    gpumem__drop_placement(mr);
}

void gpumem__resource_init_suballocator(gpumem_resource *mr, const gpumem__resource_ops *ops,
                                        gpumem_resource *upstream) {
  gpumem__resource_init(mr, ops, upstream->device, upstream->dev, upstream);
  mr->caps = (gpumem__capabilities){.memory = upstream->caps.memory, .stream_ordered = true};
}

gpumem_status gpumem_resource_get_capabilities(const gpumem_resource *mr,
                                               gpumem_resource_capabilities *caps) {
  size_t first = offsetof(gpumem_resource_capabilities, piece_size) + sizeof caps->piece_size;
  if (!mr || !caps || caps->size < first)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_resource_get_capabilities: %s",
                        !mr     ? "the resource is NULL"
                        : !caps ? "caps is NULL"
                                : "caps->size is smaller than any version of the struct: set it "
                                  "to sizeof(gpumem_resource_capabilities)");
  bool placement = gpumem__places_at_address(mr);
  gpumem_resource_capabilities filled = {
      .size = caps->size,
      .version = GPUMEM_CAPABILITIES_VERSION,
      .device = mr->device,
      .memory = mr->caps.memory,
      .stream_ordered = mr->caps.stream_ordered,
      .places_at_address = placement,
      .granularity = placement ? mr->caps.granularity : 0,
      .piece_size = placement ? mr->caps.piece_size : 0,
  };
  size_t copied = caps->size < sizeof filled ? caps->size : sizeof filled;
  memcpy(caps, &filled, copied);
  return GPUMEM_OK;
}

gpumem_resource *gpumem_resource_retain(gpumem_resource *mr) {
  if (mr)
    atomic_fetch_add_explicit(&mr->refcount, 1, memory_order_relaxed);
  return mr;
}

gpumem_status gpumem_resource_release(gpumem_resource *mr) {
  retry_orphans();
  return release(mr);
}

/* A failure leaves `mr` alive and the reference the caller's; success consumes it. */
static gpumem_status release(gpumem_resource *mr) {
  if (!mr)
    return GPUMEM_OK;
  if (atomic_fetch_sub_explicit(&mr->refcount, 1, memory_order_acq_rel) != 1)
    return GPUMEM_OK;
#if GPUMEM__DEBUG_LEVEL >= 3
  /* Level 3's quarantine holds blocks the program freed: they go back first. */
  gpumem_status held = gpumem__guards_before_release(mr);
  if (held != GPUMEM_OK) {
    atomic_fetch_add_explicit(&mr->refcount, 1, memory_order_relaxed);
    return held;
  }
#endif
  uint64_t live_count = 0, live_bytes = 0;
  if (gpumem_resource_query(mr, GPUMEM_QUERY_LIVE_COUNT, &live_count) == GPUMEM_OK &&
      live_count > 0) {
    /* Destroying now would free memory the program still uses. Keep the caller's
     * reference alive instead, so it can free the allocations and release again. */
    atomic_fetch_add_explicit(&mr->refcount, 1, memory_order_relaxed);
    char spec[256], bytes[48] = "unknown size";
    gpumem__describe(mr, spec, sizeof spec);
    if (gpumem_resource_query(mr, GPUMEM_QUERY_LIVE_BYTES, &live_bytes) == GPUMEM_OK)
      gpumem__format_bytes(live_bytes, bytes, sizeof bytes);
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "last release of resource %s with %llu live allocation%s (%s): not "
                        "destroyed, so that memory in use stays valid; the handle is still "
                        "yours: free the allocations, then release it again",
                        spec, (unsigned long long)live_count, live_count == 1 ? "" : "s", bytes);
  }
  gpumem_resource *upstream = mr->upstream;
  gpumem_status status = mr->ops->destroy(mr);
  if (status != GPUMEM_OK) {
    atomic_fetch_add_explicit(&mr->refcount, 1, memory_order_relaxed);
    return gpumem__fail_context(status,
                                "last release of resource '%s': not destroyed, the "
                                "handle is still yours; release it again",
                                mr->ops->kind);
  }
#if GPUMEM__DEBUG_LEVEL >= 3
  gpumem__guards_forget(mr);
#endif
  /* `mr` is gone, so the release succeeded whatever happens below: an upstream that cannot
   * be destroyed now (its own last release failing) is kept for a later try. */
  if (release(upstream) != GPUMEM_OK)
    keep_orphan(upstream);
  return GPUMEM_OK;
}

const char *gpumem_resource_name(const gpumem_resource *mr) {
  return mr ? mr->ops->kind : "(null)";
}

int gpumem_resource_device(const gpumem_resource *mr) {
  return mr ? mr->device : -1;
}

void gpumem__describe(const gpumem_resource *mr, char *buf, size_t size) {
  if (size == 0)
    return;
  if (mr->ops->describe)
    mr->ops->describe(mr, buf, size);
  else
    snprintf(buf, size, "%s", mr->ops->kind);
}

void gpumem__describe_over(const gpumem_resource *mr, char *buf, size_t size, const char *params,
                           ...) {
  if (size == 0)
    return;
  size_t used = (size_t)snprintf(buf, size, "%s(", mr->ops->kind);
  if (used + 1 < size) {
    gpumem__describe(mr->upstream, buf + used, size - used);
    used += strlen(buf + used);
  }
  if (used + 1 < size) {
    va_list args;
    va_start(args, params);
    vsnprintf(buf + used, size - used, params, args);
    va_end(args);
    used += strlen(buf + used);
  }
  if (used + 1 < size)
    snprintf(buf + used, size - used, ")");
}

/* Longest spec gpumem_resource_describe writes: far beyond the deepest chain a spec may
 * have (16 resources of under 200 characters each). */
#define DESCRIBE_MAX ((size_t)1 << 20)

/* The whole spec of mr in a buffer of its own, grown until the spec fits with room to spare
 * (so that it is known not to be cut); *length: its length. NULL when host memory is
 * exhausted or the spec is longer than DESCRIBE_MAX (message set). */
static char *describe_whole(const gpumem_resource *mr, size_t *length) {
  char *spec = NULL;
  for (size_t capacity = 1024; capacity <= DESCRIBE_MAX; capacity *= 2) {
    char *grown = realloc(spec, capacity);
    if (!grown)
      break;
    spec = grown;
    gpumem__describe(mr, spec, capacity);
    *length = strlen(spec);
    if (*length + 1 < capacity)
      return spec;
  }
  free(spec);
  gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
               "gpumem_resource_describe: out of host memory, or a spec longer than %zu bytes",
               DESCRIBE_MAX);
  return NULL;
}

gpumem_status gpumem_resource_describe(const gpumem_resource *mr, char *buf, size_t size) {
  if (!mr || !buf || size == 0)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_resource_describe: resource and buffer must not be NULL and "
                        "size must be positive");
  /* Short specs, the common case, need no heap buffer. */
  char small[512];
  gpumem__describe(mr, small, sizeof small);
  size_t length = strlen(small);
  char *spec = small;
  if (length + 1 >= sizeof small && !(spec = describe_whole(mr, &length)))
    return GPUMEM_ERR_OUT_OF_MEMORY;
  gpumem_status status = GPUMEM_OK;
  if (length < size)
    memcpy(buf, spec, length + 1);
  else
    status = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                          "gpumem_resource_describe: the spec of this '%s' resource needs a "
                          "buffer of %zu bytes (with its NUL); the buffer has %zu",
                          mr->ops->kind, length + 1, size);
  if (spec != small)
    free(spec);
  return status;
}

gpumem_status gpumem_resource_trim(gpumem_resource *mr, size_t *released) {
  if (!mr)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_resource_trim: the resource is NULL");
  if (!gpumem__can_trim(mr))
    return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                        "gpumem_resource_trim: a '%s' resource keeps no free memory to give "
                        "back (pool, arena, binning and fixed_size do, and adaptors over them)",
                        mr->ops->kind);
  size_t total = 0;
#if GPUMEM__DEBUG_LEVEL >= 3
  gpumem__guards_before_trim(mr); /* live guards checked, the quarantine given back */
#endif
  gpumem_status status = mr->ops->trim(mr, &total);
#if GPUMEM__DEBUG_LEVEL >= 2
  gpumem__debug_after(mr, "trim");
#endif
  if (released) /* also after a failure part way: what went back before it stays back */
    *released = total;
  return status;
}

gpumem_status gpumem_resource_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  if (!mr || !out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_resource_query: resource and out must not be NULL");
  uint64_t value;
  gpumem_status status = mr->ops->query ? mr->ops->query(mr, what, &value) : GPUMEM_ERR_UNSUPPORTED;
#if GPUMEM__DEBUG_LEVEL >= 3
  if (status == GPUMEM_OK)
    value = gpumem__guards_adjust(mr, what, value); /* without level 3's guards */
#endif
  if (status == GPUMEM_OK)
    *out = value;
  else if (status == GPUMEM_ERR_UNSUPPORTED)
    gpumem__fail(status, "resource '%s' does not know the fact %d asked of it", mr->ops->kind,
                 (int)what);
  return status;
}

gpumem_status gpumem_resource_upstream(const gpumem_resource *mr, gpumem_resource **upstream) {
  if (!mr || !upstream)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_resource_upstream: resource and out must not be NULL");
  if (!mr->upstream)
    return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                        "resource '%s' is a base resource: it has no "
                        "upstream",
                        mr->ops->kind);
  *upstream = mr->upstream;
  return GPUMEM_OK;
}
