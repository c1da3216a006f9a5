/* sim.c: the simulated device, a device backend in host memory for tests and CI.
 *
 * It models what an allocator depends on, not kernels: devices and their capacity, device,
 * managed and pinned memory, driver pools, streams whose work runs only when the simulation
 * lets it, events, copies, virtual memory, and the detection of memory handed to one stream
 * while another stream's use of it is still pending (a silent data race on a GPU). Runs are
 * deterministic: nothing happens in the background.
 *
 * This file holds the shared state and its sorted-array indexes, the configuration, the
 * device queries, fault injection, the public controls that are not about streams, and the
 * table. All state sits behind one mutex: the sim is a model for tests, not a benchmark,
 * and one lock keeps every entry consistent under many threads. */
#include "device/sim_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

sim_state gpumem__sim = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* As a CUDA context is current per thread, so is the sim's device. */
static _Thread_local int current_device;

int gpumem__sim_current_device(void) {
  return current_device;
}

/* ---------------------------------------------------------------------------------------
 * Sorted arrays
 * ------------------------------------------------------------------------------------- */

/* The first position whose key is >= key. */
static size_t lower_bound(const sim_index *index, uint64_t key) {
  size_t lo = 0, hi = index->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (index->items[mid].key < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

void *gpumem__sim_index_get(const sim_index *index, uint64_t key) {
  size_t at = lower_bound(index, key);
  return at < index->count && index->items[at].key == key ? index->items[at].value.ptr : NULL;
}

gpumem_status gpumem__sim_find_handle(const sim_index *index, const char *call, const char *what,
                                      const void *handle, void **out) {
  *out = gpumem__sim_index_get(index, (uintptr_t)handle);
  if (*out)
    return GPUMEM_OK;
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                      "simulated device: %s: %p is not %s of the simulated device (never "
                      "created, or destroyed)",
                      call, handle, what);
}

void *gpumem__sim_index_floor(const sim_index *index, uint64_t key) {
  size_t at = lower_bound(index, key);
  if (at < index->count && index->items[at].key == key)
    return index->items[at].value.ptr;
  return at > 0 ? index->items[at - 1].value.ptr : NULL;
}

bool gpumem__sim_index_reserve(sim_index *index, size_t extra) {
  if (index->count + extra <= index->capacity)
    return true;
  size_t capacity = index->capacity ? index->capacity * 2 : 16;
  if (capacity < index->count + extra)
    capacity = index->count + extra;
  sim_entry *items = realloc(index->items, capacity * sizeof *items);
  if (!items)
    return false;
  index->items = items;
  index->capacity = capacity;
  return true;
}

/* Inserts an entry at its place, or returns the existing one; NULL when out of memory. */
static sim_entry *index_slot(sim_index *index, uint64_t key) {
  size_t at = lower_bound(index, key);
  if (at < index->count && index->items[at].key == key)
    return &index->items[at];
  if (!gpumem__sim_index_reserve(index, 1))
    return NULL;
  memmove(&index->items[at + 1], &index->items[at], (index->count - at) * sizeof index->items[0]);
  index->count++;
  index->items[at].key = key;
  index->items[at].value.num = 0;
  return &index->items[at];
}

bool gpumem__sim_index_put(sim_index *index, uint64_t key, void *ptr) {
  sim_entry *slot = index_slot(index, key);
  if (!slot)
    return false;
  slot->value.ptr = ptr;
  return true;
}

void gpumem__sim_index_remove(sim_index *index, uint64_t key) {
  size_t at = lower_bound(index, key);
  if (at == index->count || index->items[at].key != key)
    return;
  memmove(&index->items[at], &index->items[at + 1],
          (index->count - at - 1) * sizeof index->items[0]);
  index->count--;
}

void gpumem__sim_index_clear(sim_index *index) {
  free(index->items);
  index->items = NULL;
  index->count = index->capacity = 0;
}

uint64_t gpumem__sim_clock_get(const sim_index *clock, uint64_t stream_id) {
  size_t at = lower_bound(clock, stream_id);
  return at < clock->count && clock->items[at].key == stream_id ? clock->items[at].value.num : 0;
}

bool gpumem__sim_clock_raise(sim_index *clock, uint64_t stream_id, uint64_t seq) {
  sim_entry *slot = index_slot(clock, stream_id);
  if (!slot)
    return false;
  if (slot->value.num < seq)
    slot->value.num = seq;
  return true;
}

/* ---------------------------------------------------------------------------------------
 * Configuration: the given config, whose zero fields fall back to the environment, whose
 * unset variables fall back to the defaults. A value that cannot be read is an error, not
 * a silent default: a CI job that sets GPUMEM_SIM_MEMORY=4Gib should hear about it.
 * ------------------------------------------------------------------------------------- */

typedef struct sim_settings {
  int devices;
  uint64_t memory;
  bool pageable_access, vmm_supported, abort_on_hazard, check_hazards, managed_pools;
  uint64_t vmm_call_us;
  bool vmm_costs_h200;
} sim_settings;

/* Reads an environment option as a number; `fallback` when unset. */
static gpumem_status env_number(gpumem__option option, const char *name, uint64_t fallback,
                                uint64_t *out) {
  const char *text = gpumem__option_string(option);
  uint64_t value = 0;
  size_t used;
  if (!text) {
    *out = fallback;
    return GPUMEM_OK;
  }
  if (!gpumem__parse_size(text, 0, &value, &used) || text[used] != '\0')
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: %s=%s is not a number (sizes accept K, M, G, KiB, "
                        "MiB, GiB suffixes)",
                        name, text);
  *out = value;
  return GPUMEM_OK;
}

static gpumem_status settings_devices(const gpumem_sim_config *config, sim_settings *out) {
  if (config && config->devices != 0) {
    if (config->devices < 0 || config->devices > GPUMEM_MAX_DEVICES)
      return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                          "gpumem_sim_configure: devices = %d; expected 1 to %d", config->devices,
                          GPUMEM_MAX_DEVICES);
    out->devices = config->devices;
    return GPUMEM_OK;
  }
  uint64_t devices = 0;
  gpumem_status status = env_number(GPUMEM__OPT_SIM_DEVICES, "GPUMEM_SIM_DEVICES", 2, &devices);
  if (status != GPUMEM_OK)
    return status;
  if (devices == 0)
    return gpumem__fail(GPUMEM_ERR_NO_DEVICE,
                        "simulated device: GPUMEM_SIM_DEVICES=0 asks for no devices");
  if (devices > GPUMEM_MAX_DEVICES)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: GPUMEM_SIM_DEVICES=%llu; at most %d devices",
                        (unsigned long long)devices, GPUMEM_MAX_DEVICES);
  out->devices = (int)devices;
  return GPUMEM_OK;
}

static gpumem_status settings_memory(const gpumem_sim_config *config, sim_settings *out) {
  if (config && config->memory != 0) {
    out->memory = config->memory;
    return GPUMEM_OK;
  }
  gpumem_status status =
      env_number(GPUMEM__OPT_SIM_MEMORY, "GPUMEM_SIM_MEMORY", (uint64_t)8 << 30, &out->memory);
  if (status == GPUMEM_OK && out->memory == 0)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: GPUMEM_SIM_MEMORY=0; a device needs some memory");
  return status;
}

/* A switch: off when the config turns it off, else from the environment (default on),
 * which may say 0/1, false/true, off/on or no/yes. */
static gpumem_status settings_switch(bool config_off, gpumem__option option, const char *name,
                                     bool *out) {
  static const char *const off[] = {"0", "false", "off", "no"};
  static const char *const on[] = {"1", "true", "on", "yes"};
  const char *text = gpumem__option_string(option);
  *out = !config_off;
  if (config_off || !text)
    return GPUMEM_OK;
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
    if (strcasecmp(text, off[i]) == 0) {
      *out = false;
      return GPUMEM_OK;
    }
    if (strcasecmp(text, on[i]) == 0)
      return GPUMEM_OK;
  }
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                      "simulated device: %s=%s; expected 0 or 1 (or false/true, off/on, no/yes)",
                      name, text);
}

static gpumem_status settings_hazard(const gpumem_sim_config *config, sim_settings *out) {
  const char *text = gpumem__option_string(GPUMEM__OPT_SIM_HAZARD);
  out->check_hazards = true;
  if (config && config->abort_on_hazard) {
    out->abort_on_hazard = true;
  } else if (!text || strcmp(text, "count") == 0) {
    out->abort_on_hazard = false;
  } else if (strcmp(text, "abort") == 0) {
    out->abort_on_hazard = true;
  } else if (strcmp(text, "off") == 0) {
    out->abort_on_hazard = false;
    out->check_hazards = false;
  } else {
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: GPUMEM_SIM_HAZARD=%s; expected 'count', 'abort' or "
                        "'off'",
                        text);
  }
  return GPUMEM_OK;
}

/* GPUMEM_SIM_VMM_CALL_US: microseconds each vmm call takes (on an H200, 50 makes a pool's
 * replay of the LSTM and speech traces give back holes and grow as it does there:
 * docs/traces.md), at most a second; or `h200`, each kind of call what an H200 charged
 * inside replays (gpumem__sim_vmm_costs). */
static gpumem_status settings_vmm_call(sim_settings *out) {
  const char *text = gpumem__option_string(GPUMEM__OPT_SIM_VMM_CALL_US);
  uint64_t value = 0;
  size_t used;
  if (!text)
    return GPUMEM_OK;
  if (strcmp(text, "h200") == 0) {
    out->vmm_costs_h200 = true;
    return GPUMEM_OK;
  }
  if (!gpumem__parse_size(text, 0, &value, &used) || text[used] != '\0' || value > 1000000)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: GPUMEM_SIM_VMM_CALL_US=%s; expected microseconds a "
                        "call, at most 1000000 (a second), or 'h200'",
                        text);
  out->vmm_call_us = value;
  return GPUMEM_OK;
}

static gpumem_status read_settings(const gpumem_sim_config *config, sim_settings *out) {
  gpumem_status status = settings_devices(config, out);
  if (status == GPUMEM_OK)
    status = settings_memory(config, out);
  if (status == GPUMEM_OK)
    status = settings_switch(config && config->no_pageable_access, GPUMEM__OPT_SIM_PAGEABLE,
                             "GPUMEM_SIM_PAGEABLE", &out->pageable_access);
  if (status == GPUMEM_OK)
    status = settings_switch(config && config->no_vmm, GPUMEM__OPT_SIM_VMM, "GPUMEM_SIM_VMM",
                             &out->vmm_supported);
  if (status == GPUMEM_OK)
    status = settings_switch(config && config->no_managed_pools, GPUMEM__OPT_SIM_MANAGED_POOLS,
                             "GPUMEM_SIM_MANAGED_POOLS", &out->managed_pools);
  if (status == GPUMEM_OK)
    status = settings_hazard(config, out);
  if (status == GPUMEM_OK)
    status = settings_vmm_call(out);
  return status;
}

/* Each device gets its default stream (what NULL, legacy and per-thread handles mean). */
static gpumem_status create_default_streams(int devices) {
  for (int device = 0; device < devices; device++) {
    sim_stream *stream = gpumem__sim_stream_new(device, true);
    if (!stream || !gpumem__sim_stream_register(stream)) {
      free(stream);
      return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                          "simulated device: host memory exhausted creating default streams");
    }
    gpumem__sim.default_stream[device] = stream;
  }
  return GPUMEM_OK;
}

gpumem_status gpumem__sim_device_init(const gpumem_sim_config *config) {
  sim_settings settings = {0};
  gpumem_status status = read_settings(config, &settings);
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem__sim.device_count = settings.devices;
  gpumem__sim.capacity = settings.memory;
  /* Managed memory may exceed the device (oversubscription) but not the host forever. */
  gpumem__sim.managed_limit = settings.memory > UINT64_MAX / 4 ? UINT64_MAX : settings.memory * 4;
  gpumem__sim.pageable_access = settings.pageable_access;
  gpumem__sim.vmm_supported = settings.vmm_supported;
  gpumem__sim.managed_pools = settings.managed_pools;
  gpumem__sim.abort_on_hazard = settings.abort_on_hazard;
  gpumem__sim_vmm_costs(settings.vmm_costs_h200, settings.vmm_call_us);
  /* No resource exists yet: the front end reads the hook from here on. */
  gpumem__sim_device_ops.note_handout = settings.check_hazards ? gpumem__sim_note_handout : NULL;
  gpumem__sim.next_stream_id = 1;
  gpumem__sim.next_vmm_handle = 1;
  status = create_default_streams(settings.devices);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* ---------------------------------------------------------------------------------------
 * Devices
 * ------------------------------------------------------------------------------------- */

gpumem_status gpumem__sim_check_device(const char *call, int device) {
  if (device >= 0 && device < gpumem__sim.device_count)
    return GPUMEM_OK;
  return gpumem__fail(GPUMEM_ERR_INVALID_DEVICE,
                      "simulated device: %s: device %d does not exist (there are %d, 0 to %d)",
                      call, device, gpumem__sim.device_count, gpumem__sim.device_count - 1);
}

static gpumem_status sim_device_count(int *count) {
  /* Set once at initialization, before the table is published: no lock needed. */
  *count = gpumem__sim.device_count;
  return GPUMEM_OK;
}

static gpumem_status sim_device_name(int device, char *name, size_t size) {
  gpumem_status status = gpumem__sim_check_device("device_name", device);
  if (status != GPUMEM_OK)
    return status;
  if (!name || size == 0)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: device_name: no room for the name");
  snprintf(name, size, "gpumem simulated device %d", device);
  return GPUMEM_OK;
}

static gpumem_status sim_device_attribute(int device, gpumem__device_attr attr, int64_t *value) {
  gpumem_status status = gpumem__sim_check_device("device_attribute", device);
  if (status != GPUMEM_OK)
    return status;
  switch (attr) {
  case GPUMEM__ATTR_PAGEABLE_MEMORY_ACCESS:
    *value = gpumem__sim.pageable_access;
    return GPUMEM_OK;
  case GPUMEM__ATTR_VMM_SUPPORTED:
    *value = gpumem__sim.vmm_supported;
    return GPUMEM_OK;
  case GPUMEM__ATTR_VMM_GRANULARITY:
    *value = (int64_t)GPUMEM__SIM_GRANULARITY;
    return GPUMEM_OK;
  case GPUMEM__ATTR_MEMPOOL_SUPPORTED:
  case GPUMEM__ATTR_CONCURRENT_MANAGED:
  case GPUMEM__ATTR_IPC_POSIX_FD_SUPPORTED:
    *value = 1;
    return GPUMEM_OK;
  }
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                      "simulated device: device_attribute: unknown attribute %d", (int)attr);
}

static gpumem_status sim_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
  gpumem_status status = gpumem__sim_check_device("mem_info", device);
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&gpumem__sim.lock);
  *free_bytes = (size_t)(gpumem__sim.capacity - gpumem__sim.used[device]);
  *total_bytes = (size_t)gpumem__sim.capacity;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return GPUMEM_OK;
}

static gpumem_status sim_get_device(int *device) {
  *device = current_device;
  return GPUMEM_OK;
}

static gpumem_status sim_set_device(int device) {
  gpumem_status status = gpumem__sim_check_device("set_device", device);
  if (status == GPUMEM_OK)
    current_device = device;
  return status;
}

/* ---------------------------------------------------------------------------------------
 * Fault injection and call counts
 * ------------------------------------------------------------------------------------- */

static const char *const call_names[GPUMEM_SIM_CALL_KIND_COUNT] = {
    [GPUMEM_SIM_CALL_MEM_ALLOC] = "mem_alloc",
    [GPUMEM_SIM_CALL_MEM_FREE] = "mem_free",
    [GPUMEM_SIM_CALL_MANAGED_ALLOC] = "managed_alloc",
    [GPUMEM_SIM_CALL_HOST_ALLOC] = "host_alloc",
    [GPUMEM_SIM_CALL_POOL_CREATE] = "pool_create",
    [GPUMEM_SIM_CALL_POOL_ALLOC] = "pool_alloc_async",
    [GPUMEM_SIM_CALL_POOL_FREE] = "free_async",
    [GPUMEM_SIM_CALL_STREAM_CREATE] = "stream_create",
    [GPUMEM_SIM_CALL_EVENT_CREATE] = "event_create",
    [GPUMEM_SIM_CALL_EVENT_RECORD] = "event_record",
    [GPUMEM_SIM_CALL_STREAM_WAIT] = "stream_wait_event",
    [GPUMEM_SIM_CALL_SYNCHRONIZE] = "synchronize",
    [GPUMEM_SIM_CALL_MEMCPY] = "memcpy_async",
    [GPUMEM_SIM_CALL_MEMSET] = "memset_async",
    [GPUMEM_SIM_CALL_PREFETCH] = "prefetch",
    [GPUMEM_SIM_CALL_VMM_RESERVE] = "vmm_reserve",
    [GPUMEM_SIM_CALL_VMM_CREATE] = "vmm_create",
    [GPUMEM_SIM_CALL_VMM_MAP] = "vmm_map",
    [GPUMEM_SIM_CALL_VMM_SET_ACCESS] = "vmm_set_access",
    [GPUMEM_SIM_CALL_VMM_UNMAP] = "vmm_unmap",
    [GPUMEM_SIM_CALL_EVENT_QUERY] = "event_query",
};

/* Calls that obtain memory or address space, which a driver fails as out of memory. */
static bool is_allocation(gpumem_sim_call kind) {
  return kind == GPUMEM_SIM_CALL_MEM_ALLOC || kind == GPUMEM_SIM_CALL_MANAGED_ALLOC ||
         kind == GPUMEM_SIM_CALL_HOST_ALLOC || kind == GPUMEM_SIM_CALL_POOL_ALLOC ||
         kind == GPUMEM_SIM_CALL_VMM_RESERVE || kind == GPUMEM_SIM_CALL_VMM_CREATE;
}

gpumem_status gpumem__sim_enter(gpumem_sim_call kind) {
  uint64_t number = ++gpumem__sim.calls[kind];
  if (GPUMEM_LIKELY(gpumem__sim.fail_at[kind] != number))
    return GPUMEM_OK;
  gpumem__sim.fail_at[kind] = 0;
  bool allocation = is_allocation(kind);
  gpumem__set_cuda_error(allocation ? GPUMEM__SIM_CUDA_OUT_OF_MEMORY : GPUMEM__SIM_CUDA_UNKNOWN);
  return gpumem__fail(allocation ? GPUMEM_ERR_OUT_OF_MEMORY : GPUMEM_ERR_CUDA,
                      "simulated device: injected failure of %s call #%llu "
                      "(gpumem_sim_fail_call)",
                      call_names[kind], (unsigned long long)number);
}

gpumem_status gpumem__sim_require(const char *function) {
  gpumem_status status;
  const gpumem__device_ops *ops = gpumem__device_get(&status);
  if (ops == &gpumem__sim_device_ops)
    return GPUMEM_OK;
  return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                      "%s: the simulated device is not the backend in use (%s); select it "
                      "with GPUMEM_DEVICE=sim or gpumem_sim_configure before first use",
                      function, ops ? ops->name : "the backend failed to initialize");
}

/* The quiet form, for the functions that cannot return a status. */
static bool sim_active(void) {
  return gpumem__device_get(NULL) == &gpumem__sim_device_ops;
}

static gpumem_status check_call_kind(const char *function, gpumem_sim_call kind) {
  if ((int)kind >= 0 && kind < GPUMEM_SIM_CALL_KIND_COUNT)
    return GPUMEM_OK;
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: unknown call kind %d (0 to %d)", function,
                      (int)kind, GPUMEM_SIM_CALL_KIND_COUNT - 1);
}

gpumem_status gpumem_sim_fail_call(gpumem_sim_call kind, uint64_t nth) {
  gpumem_status status = gpumem__sim_require("gpumem_sim_fail_call");
  if (status == GPUMEM_OK)
    status = check_call_kind("gpumem_sim_fail_call", kind);
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem__sim.fail_at[kind] = nth == 0 ? 0 : gpumem__sim.calls[kind] + nth;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return GPUMEM_OK;
}

uint64_t gpumem_sim_call_count(gpumem_sim_call kind) {
  if (!sim_active() || (int)kind < 0 || kind >= GPUMEM_SIM_CALL_KIND_COUNT)
    return 0;
  pthread_mutex_lock(&gpumem__sim.lock);
  uint64_t count = gpumem__sim.calls[kind];
  pthread_mutex_unlock(&gpumem__sim.lock);
  return count;
}

uint64_t gpumem_sim_hazard_count(void) {
  return sim_active() ? atomic_load(&gpumem__sim.hazards) : 0;
}

void gpumem_sim_reset_hazards(void) {
  if (sim_active())
    atomic_store(&gpumem__sim.hazards, 0);
}

/* One of the device's counters of memory in use, read under the simulator's lock, less
 * what the driver's default pool of managed memory keeps cached where `less_managed_cache`. */
static gpumem_status read_used(const char *call, const uint64_t *counters, bool less_managed_cache,
                               int device, uint64_t *bytes) {
  gpumem_status status = gpumem__sim_require(call);
  if (status == GPUMEM_OK)
    status = gpumem__sim_check_device(call, device);
  if (status == GPUMEM_OK && !bytes)
    status = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", call);
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&gpumem__sim.lock);
  *bytes = counters[device] - (less_managed_cache ? gpumem__sim_managed_pool_cached(device) : 0);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return GPUMEM_OK;
}

gpumem_status gpumem_sim_device_used(int device, uint64_t *bytes) {
  return read_used("gpumem_sim_device_used", gpumem__sim.used, false, device, bytes);
}

gpumem_status gpumem_sim_managed_used(int device, uint64_t *bytes) {
  return read_used("gpumem_sim_managed_used", gpumem__sim.managed_used, true, device, bytes);
}

/* ---------------------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------------------- */

/* Not const: initialization leaves out the hand-out hook when hazards are not checked. */
gpumem__device_ops gpumem__sim_device_ops = {
    .name = "sim",
    .device_count = sim_device_count,
    .device_name = sim_device_name,
    .device_attribute = sim_device_attribute,
    .mem_info = sim_mem_info,
    .get_device = sim_get_device,
    .set_device = sim_set_device,
    .stream_device = gpumem__sim_stream_device,
    .mem_alloc = gpumem__sim_mem_alloc,
    .mem_free = gpumem__sim_mem_free,
    .managed_alloc = gpumem__sim_managed_alloc,
    .managed_free = gpumem__sim_managed_free,
    .pointer_is_managed = gpumem__sim_pointer_is_managed,
    .prefetch = gpumem__sim_prefetch,
    .advise = gpumem__sim_advise,
    .host_alloc = gpumem__sim_host_alloc,
    .host_free = gpumem__sim_host_free,
    .pool_create = gpumem__sim_pool_create,
    .pool_destroy = gpumem__sim_pool_destroy,
    .pool_set_release_threshold = gpumem__sim_pool_set_release_threshold,
    .pool_reserved = gpumem__sim_pool_reserved,
    .pool_trim = gpumem__sim_pool_trim,
    .pool_alloc_async = gpumem__sim_pool_alloc_async,
    .free_async = gpumem__sim_free_async,
    .pool_default_managed = gpumem__sim_pool_default_managed,
    .stream_create = gpumem__sim_stream_create,
    .stream_destroy = gpumem__sim_stream_destroy,
    .stream_synchronize = gpumem__sim_stream_synchronize,
    .device_synchronize = gpumem__sim_device_synchronize,
    .stream_query = gpumem__sim_stream_query,
    .event_create = gpumem__sim_event_create,
    .event_destroy = gpumem__sim_event_destroy,
    .event_record = gpumem__sim_event_record,
    .event_query = gpumem__sim_event_query,
    .event_synchronize = gpumem__sim_event_synchronize,
    .stream_wait_event = gpumem__sim_stream_wait_event,
    .memcpy_async = gpumem__sim_memcpy_async,
    .memset_async = gpumem__sim_memset_async,
    .vmm_reserve = gpumem__sim_vmm_reserve,
    .vmm_release = gpumem__sim_vmm_release,
    .vmm_create = gpumem__sim_vmm_create,
    .vmm_destroy = gpumem__sim_vmm_destroy,
    .vmm_map = gpumem__sim_vmm_map,
    .vmm_set_access = gpumem__sim_vmm_set_access,
    .vmm_unmap = gpumem__sim_vmm_unmap,
    .note_handout = gpumem__sim_note_handout,
};
