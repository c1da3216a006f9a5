/* current.c: the current resource of each device, as RMM's per-device resource.
 *
 * Each device has one slot. An empty slot is filled on first use with the default: the
 * spec in GPUMEM_RESOURCE (the same spec for every device, built for that device), else a
 * cuda resource. Reads are a single atomic load so that libraries asking for the current
 * resource on every allocation pay nothing; writes take a lock and retain what they store.
 *
 * A replaced resource whose allocations are still live cannot be destroyed: the program may
 * free them later, through it. It is retired instead, kept in a list, and each later write
 * destroys the retired resources whose allocations have all been freed. */
#include "adaptors/log_file.h"
#include "core/internal.h"
#include "device/device.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(gpumem_resource *) slots[GPUMEM_MAX_DEVICES];
static gpumem_resource **retired; /* guarded by slots_lock */
static size_t retired_count, retired_capacity;

static uint64_t live_count_of(gpumem_resource *mr) {
  uint64_t live = 0;
  gpumem_resource_query(mr, GPUMEM_QUERY_LIVE_COUNT, &live);
  return live;
}

/* Drops the slot's reference to a replaced resource. The last reference to a resource with
 * live allocations moves to the retired list rather than failing. Under slots_lock. */
static void retire(gpumem_resource *previous) {
  if (!previous)
    return;
  bool last = atomic_load_explicit(&previous->refcount, memory_order_acquire) == 1;
  if (!last || live_count_of(previous) == 0) {
    gpumem_resource_release(previous);
    return;
  }
  if (retired_count == retired_capacity) {
    size_t capacity = retired_capacity ? 2 * retired_capacity : 8;
    gpumem_resource **grown = realloc(retired, capacity * sizeof *grown);
    if (!grown)
      return; /* out of host memory: keep it alive forever, its memory stays valid */
    retired = grown;
    retired_capacity = capacity;
  }
  retired[retired_count++] = previous;
}

/* Destroys the retired resources that no longer hold live allocations. Under slots_lock. */
static void destroy_freed_retired(void) {
  size_t kept = 0;
  for (size_t i = 0; i < retired_count; i++) {
    if (live_count_of(retired[i]) == 0 && gpumem_resource_release(retired[i]) == GPUMEM_OK)
      continue;
    retired[kept++] = retired[i];
  }
  retired_count = kept;
}

/* The device index `caller` was given, resolved and checked. */
static gpumem_status resolve(const char *caller, int device, int *resolved) {
  const gpumem__device_ops *dev;
  return gpumem__device_for(caller, device, &dev, resolved);
}

/* GPUMEM_LOG_FILE: the default resource inside a log adaptor writing the named file with
 * ".devN" before its extension, so that any program's allocations can be logged. */
static gpumem_status log_default(int device, gpumem_resource **mr) {
  const char *name = gpumem__option_string(GPUMEM__OPT_LOG_FILE);
  if (!name)
    return GPUMEM_OK;
  char path[4200];
  gpumem_log_options opts = {.file_name = path};
  gpumem_resource *logged = NULL;
  gpumem_status status = gpumem__log_device_name(name, device, path, sizeof path);
  if (status == GPUMEM_OK)
    status = gpumem_log_create(*mr, &opts, &logged);
  gpumem_resource_release(*mr); /* the log holds it, or it goes with the failure */
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "GPUMEM_LOG_FILE");
  *mr = logged;
  return GPUMEM_OK;
}

static gpumem_status create_default(int device, gpumem_resource **out) {
  const char *spec = gpumem__option_string(GPUMEM__OPT_RESOURCE);
  gpumem_resource *mr = NULL;
  gpumem_status status = spec ? gpumem_resource_from_spec_for_device(spec, device, &mr)
                              : gpumem_cuda_create(device, &mr);
  if (status != GPUMEM_OK)
    return spec ? gpumem__fail_context(status, "GPUMEM_RESOURCE") : status;
  status = log_default(device, &mr);
  if (status == GPUMEM_OK)
    *out = mr;
  return status;
}

gpumem_status gpumem_get_per_device_resource(int device, gpumem_resource **mr) {
  if (!mr)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_get_per_device_resource: mr is NULL");
  gpumem_status status = resolve("gpumem_get_per_device_resource", device, &device);
  if (status != GPUMEM_OK)
    return status;
  gpumem_resource *current = atomic_load_explicit(&slots[device], memory_order_acquire);
  if (GPUMEM_LIKELY(current != NULL)) {
    *mr = current;
    return GPUMEM_OK;
  }
  pthread_mutex_lock(&slots_lock);
  current = atomic_load_explicit(&slots[device], memory_order_acquire);
  if (!current) {
    status = create_default(device, &current);
    if (status == GPUMEM_OK)
      atomic_store_explicit(&slots[device], current, memory_order_release);
  }
  pthread_mutex_unlock(&slots_lock);
  if (status == GPUMEM_OK)
    *mr = current;
  return status;
}

gpumem_status gpumem_get_current_device_resource(gpumem_resource **mr) {
  return gpumem_get_per_device_resource(GPUMEM_CURRENT_DEVICE, mr);
}

gpumem_status gpumem_set_per_device_resource(int device, gpumem_resource *mr) {
  gpumem_status status = resolve("gpumem_set_per_device_resource", device, &device);
  if (status != GPUMEM_OK)
    return status;
  if (mr && mr->device != device)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_set_per_device_resource: resource '%s' is for device %d, not "
                        "device %d",
                        mr->ops->kind, mr->device, device);
  gpumem_resource_retain(mr);
  pthread_mutex_lock(&slots_lock);
  gpumem_resource *previous = atomic_exchange_explicit(&slots[device], mr, memory_order_acq_rel);
  destroy_freed_retired();
  retire(previous);
  pthread_mutex_unlock(&slots_lock);
  return GPUMEM_OK;
}

gpumem_status gpumem_set_current_device_resource(gpumem_resource *mr) {
  if (!mr)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_set_current_device_resource: mr is NULL (to restore the default, "
                        "use gpumem_set_per_device_resource with NULL)");
  return gpumem_set_per_device_resource(mr->device, mr);
}
