/* sim_vmm.c: the simulated device's virtual memory management (cuMemAddressReserve,
 * cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap), for allocators that grow in place.
 *
 * A reservation is host address space mapped PROT_NONE with MAP_NORESERVE: it costs
 * nothing and faults on touch, as unmapped device addresses do. Physical memory is a
 * number of bytes counted against the device's capacity. Mapping records which range of a
 * reservation it backs; setting access makes that range readable and writable; unmapping
 * drops the pages (so a remap reads zeros, never old data) and makes it PROT_NONE again.
 *
 * Two simplifications, both checked rather than silently wrong: a physical allocation is
 * mapped at one address at a time (host memory cannot alias without a file), and access is
 * set on whole mappings (the sim tracks it per mapping). */
#include "device/sim_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* What an H200's driver charged inside replays of recorded traces, in µs (docs/gpu-runs.md,
 * fiftieth session, call 1): making and freeing a piece of physical memory, mapping it, and
 * for each mapping in the call's range, setting access and unmapping. */
#define H200_CREATE_US 17
#define H200_DESTROY_US 25
#define H200_MAP_US 2
#define H200_SET_ACCESS_US 34
#define H200_UNMAP_US 24

void gpumem__sim_vmm_costs(bool h200, uint64_t call_us) {
  uint64_t ns = call_us * 1000;
  gpumem__sim.vmm_costs =
      h200 ? (sim_vmm_costs){H200_CREATE_US * 1000,     H200_DESTROY_US * 1000, H200_MAP_US * 1000,
                             H200_SET_ACCESS_US * 1000, H200_UNMAP_US * 1000,   true}
           : (sim_vmm_costs){ns, ns, ns, ns, ns, false};
}

/* Spins for a vmm call's `ns` (GPUMEM_SIM_VMM_CALL_US; none by default), outside the lock,
 * over `mappings` mappings where the costs are per mapping. */
static void spend_call_time(uint64_t ns, size_t mappings) {
  if (gpumem__sim.vmm_costs.per_mapping && mappings > 1)
    ns *= mappings;
  if (ns == 0)
    return;
  uint64_t until = gpumem__now_ns() + ns;
  while (gpumem__now_ns() < until) {
  }
}

typedef struct sim_physical {
  uint64_t handle;
  int device;
  size_t size;
  bool mapped;
  bool destroyed; /* vmm_destroy came while mapped: freed at unmap */
} sim_physical;

typedef struct sim_mapping {
  uintptr_t va;
  size_t size;
  sim_physical *physical;
  bool accessible;
} sim_mapping;

static gpumem_status check_supported(const char *call) {
  if (gpumem__sim.vmm_supported)
    return GPUMEM_OK;
  return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                      "simulated device: %s: virtual memory management is off "
                      "(GPUMEM_SIM_VMM=0 or gpumem_sim_config.no_vmm)",
                      call);
}

static bool granular(size_t value) {
  return value % GPUMEM__SIM_GRANULARITY == 0;
}

static gpumem_status check_granular_size(const char *call, size_t bytes) {
  if (bytes != 0 && granular(bytes))
    return GPUMEM_OK;
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                      "simulated device: %s: %zu bytes is not a positive multiple of the "
                      "granularity (%zu bytes)",
                      call, bytes, GPUMEM__SIM_GRANULARITY);
}

/* Counts the call and checks what every entry but release and destroy checks. */
static gpumem_status enter(gpumem_sim_call kind, const char *call, size_t bytes) {
  gpumem_status status = gpumem__sim_enter(kind);
  if (status == GPUMEM_OK)
    status = check_supported(call);
  if (status == GPUMEM_OK)
    status = check_granular_size(call, bytes);
  return status;
}

/* ---------------------------------------------------------------------------------------
 * Address reservations
 * ------------------------------------------------------------------------------------- */

/* Maps PROT_NONE address space of `bytes` aligned to `alignment`, trimming the slack. */
static void *reserve_aligned(size_t bytes, size_t alignment) {
  if (bytes > SIZE_MAX - alignment)
    return NULL;
  size_t length = bytes + alignment;
  void *raw = mmap(NULL, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED)
    return NULL;
  uintptr_t start = gpumem__align_up((uintptr_t)raw, alignment);
  size_t head = start - (uintptr_t)raw, tail = length - head - bytes;
  if (head)
    munmap(raw, head);
  if (tail)
    munmap((void *)(start + bytes), tail);
  return (void *)start;
}

static gpumem_status reserve(int device, size_t bytes, size_t alignment, void **va) {
  gpumem_status status = gpumem__sim_check_device("vmm_reserve", device);
  if (status != GPUMEM_OK)
    return status;
  if (alignment != 0 && !gpumem__is_pow2(alignment))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: vmm_reserve: alignment %zu is not a power of two",
                        alignment);
  if (alignment < GPUMEM__SIM_GRANULARITY)
    alignment = GPUMEM__SIM_GRANULARITY;
  void *start = reserve_aligned(bytes, alignment);
  sim_alloc *alloc =
      start ? gpumem__sim_register(SIM_MEM_VMM, device, (uintptr_t)start, bytes, bytes) : NULL;
  if (!alloc) {
    if (start)
      munmap(start, bytes);
    gpumem__set_cuda_error(GPUMEM__SIM_CUDA_OUT_OF_MEMORY);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "simulated device %d: vmm_reserve: no host address space for %zu bytes",
                        device, bytes);
  }
  *va = start;
  return GPUMEM_OK;
}

gpumem_status gpumem__sim_vmm_reserve(int device, size_t bytes, size_t alignment, void **va) {
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = enter(GPUMEM_SIM_CALL_VMM_RESERVE, "vmm_reserve", bytes);
  if (status == GPUMEM_OK)
    status = reserve(device, bytes, alignment, va);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* The reservation that starts at va, or a failure naming the call. */
static gpumem_status find_reservation(const char *call, void *va, sim_alloc **out) {
  sim_alloc *alloc = gpumem__sim_index_get(&gpumem__sim.allocations, (uintptr_t)va);
  if (alloc && alloc->kind == SIM_MEM_VMM) {
    *out = alloc;
    return GPUMEM_OK;
  }
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                      "simulated device: %s(%p): not the start of an address range from "
                      "vmm_reserve (or already released)",
                      call, va);
}

/* The mapping with the highest address below `end`, when it overlaps [start, end). */
static sim_mapping *mapping_overlapping(uintptr_t start, uintptr_t end) {
  sim_mapping *mapping = gpumem__sim_index_floor(&gpumem__sim.mappings, end - 1);
  return mapping && mapping->va + mapping->size > start ? mapping : NULL;
}

static gpumem_status release(void *va, size_t bytes) {
  sim_alloc *alloc = NULL;
  gpumem_status status = find_reservation("vmm_release", va, &alloc);
  if (status != GPUMEM_OK)
    return status;
  if (bytes != alloc->size)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: vmm_release(%p, %zu): the reservation is %zu bytes; "
                        "release it whole",
                        va, bytes, alloc->size);
  sim_mapping *mapped = mapping_overlapping(alloc->base, alloc->base + alloc->size);
  if (mapped)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: vmm_release(%p): %zu bytes at %p are still mapped; "
                        "unmap them first",
                        va, mapped->size, (void *)mapped->va);
  munmap(va, alloc->size);
  gpumem__sim_unregister(alloc);
  return GPUMEM_OK;
}

gpumem_status gpumem__sim_vmm_release(void *va, size_t bytes) {
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = check_supported("vmm_release");
  if (status == GPUMEM_OK)
    status = release(va, bytes);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* ---------------------------------------------------------------------------------------
 * Physical memory
 * ------------------------------------------------------------------------------------- */

static gpumem_status create(int device, size_t bytes, gpumem__vmm_handle *handle) {
  gpumem_status status = gpumem__sim_check_device("vmm_create", device);
  if (status == GPUMEM_OK)
    status = gpumem__sim_charge_device(device, bytes, "vmm_create");
  if (status != GPUMEM_OK)
    return status;
  sim_physical *physical = calloc(1, sizeof *physical);
  uint64_t id = gpumem__sim.next_vmm_handle;
  if (!physical || !gpumem__sim_index_put(&gpumem__sim.vmm_handles, id, physical)) {
    free(physical);
    gpumem__sim_refund_device(device, bytes);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "simulated device: vmm_create: the host is out of memory");
  }
  gpumem__sim.next_vmm_handle++;
  *physical = (sim_physical){.handle = id, .device = device, .size = bytes};
  *handle = id;
  return GPUMEM_OK;
}

gpumem_status gpumem__sim_vmm_create(int device, size_t bytes, gpumem__vmm_handle *handle) {
  spend_call_time(gpumem__sim.vmm_costs.create_ns, 1);
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = enter(GPUMEM_SIM_CALL_VMM_CREATE, "vmm_create", bytes);
  if (status == GPUMEM_OK)
    status = create(device, bytes, handle);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

static gpumem_status find_physical(const char *call, gpumem__vmm_handle handle,
                                   sim_physical **out) {
  sim_physical *physical = gpumem__sim_index_get(&gpumem__sim.vmm_handles, handle);
  if (physical && !physical->destroyed) {
    *out = physical;
    return GPUMEM_OK;
  }
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                      "simulated device: %s: %llu is not a physical allocation from vmm_create "
                      "(or it was destroyed)",
                      call, (unsigned long long)handle);
}

static void forget_physical(sim_physical *physical) {
  gpumem__sim_refund_device(physical->device, physical->size);
  gpumem__sim_index_remove(&gpumem__sim.vmm_handles, physical->handle);
  free(physical);
}

gpumem_status gpumem__sim_vmm_destroy(gpumem__vmm_handle handle) {
  spend_call_time(gpumem__sim.vmm_costs.destroy_ns, 1);
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_physical *physical = NULL;
  gpumem_status status = check_supported("vmm_destroy");
  if (status == GPUMEM_OK)
    status = find_physical("vmm_destroy", handle, &physical);
  if (status == GPUMEM_OK) {
    /* As cuMemRelease: a mapped allocation lives on until it is unmapped. */
    if (physical->mapped)
      physical->destroyed = true;
    else
      forget_physical(physical);
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* ---------------------------------------------------------------------------------------
 * Mapping
 * ------------------------------------------------------------------------------------- */

static gpumem_status check_map_target(void *va, size_t bytes) {
  uintptr_t start = (uintptr_t)va;
  if (!granular(start))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: vmm_map(%p): the address is not a multiple of the "
                        "granularity (%zu bytes)",
                        va, GPUMEM__SIM_GRANULARITY);
  sim_alloc *reservation = gpumem__sim_find_allocation(start);
  if (!reservation || reservation->kind != SIM_MEM_VMM ||
      bytes > reservation->base + reservation->size - start)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: vmm_map(%p, %zu bytes): the range is not inside an "
                        "address range from vmm_reserve",
                        va, bytes);
  sim_mapping *mapped = mapping_overlapping(start, start + bytes);
  if (mapped)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: vmm_map(%p, %zu bytes): %zu bytes at %p are already "
                        "mapped",
                        va, bytes, mapped->size, (void *)mapped->va);
  return GPUMEM_OK;
}

static gpumem_status check_map_source(size_t bytes, const sim_physical *physical) {
  if (bytes > physical->size)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: vmm_map: %zu bytes asked of a physical allocation "
                        "of %zu bytes",
                        bytes, physical->size);
  if (physical->mapped)
    return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                        "simulated device: vmm_map: physical allocation %llu is already mapped; "
                        "the simulated device maps each one at one address at a time",
                        (unsigned long long)physical->handle);
  return GPUMEM_OK;
}

static gpumem_status map(void *va, size_t bytes, gpumem__vmm_handle handle) {
  sim_physical *physical = NULL;
  gpumem_status status = find_physical("vmm_map", handle, &physical);
  if (status == GPUMEM_OK)
    status = check_map_target(va, bytes);
  if (status == GPUMEM_OK)
    status = check_map_source(bytes, physical);
  if (status != GPUMEM_OK)
    return status;
  sim_mapping *mapping = calloc(1, sizeof *mapping);
  if (!mapping || !gpumem__sim_index_put(&gpumem__sim.mappings, (uintptr_t)va, mapping)) {
    free(mapping);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "simulated device: vmm_map: the host is out of memory");
  }
  *mapping = (sim_mapping){.va = (uintptr_t)va, .size = bytes, .physical = physical};
  physical->mapped = true;
  return GPUMEM_OK;
}

gpumem_status gpumem__sim_vmm_map(void *va, size_t bytes, gpumem__vmm_handle handle) {
  spend_call_time(gpumem__sim.vmm_costs.map_ns, 1);
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = enter(GPUMEM_SIM_CALL_VMM_MAP, "vmm_map", bytes);
  if (status == GPUMEM_OK)
    status = map(va, bytes, handle);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* Checks that [va, va + bytes) is exactly a run of adjacent whole mappings. */
static gpumem_status check_whole_mappings(const char *call, void *va, size_t bytes) {
  uintptr_t cursor = (uintptr_t)va, end = cursor + bytes;
  while (cursor < end) {
    sim_mapping *mapping = gpumem__sim_index_get(&gpumem__sim.mappings, cursor);
    if (!mapping)
      return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                          "simulated device: %s(%p, %zu bytes): no mapping starts at %p (the "
                          "range must be whole mappings made by vmm_map)",
                          call, va, bytes, (void *)cursor);
    cursor += mapping->size;
  }
  if (cursor != end)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: %s(%p, %zu bytes): the range ends inside a mapping "
                        "that ends at %p",
                        call, va, bytes, (void *)cursor);
  return GPUMEM_OK;
}

/* Makes the whole mappings of [va, va + bytes) accessible; *mappings: how many. */
static gpumem_status set_access(void *va, size_t bytes, size_t *mappings) {
  gpumem_status status = check_whole_mappings("vmm_set_access", va, bytes);
  if (status != GPUMEM_OK)
    return status;
  if (mprotect(va, bytes, PROT_READ | PROT_WRITE) != 0)
    return gpumem__fail(GPUMEM_ERR_INTERNAL, "simulated device: vmm_set_access: mprotect: %s",
                        strerror(errno));
  for (uintptr_t cursor = (uintptr_t)va; cursor < (uintptr_t)va + bytes;) {
    sim_mapping *mapping = gpumem__sim_index_get(&gpumem__sim.mappings, cursor);
    mapping->accessible = true;
    cursor += mapping->size;
    (*mappings)++;
  }
  return GPUMEM_OK;
}

gpumem_status gpumem__sim_vmm_set_access(void *va, size_t bytes, int device) {
  size_t mappings = 0;
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = enter(GPUMEM_SIM_CALL_VMM_SET_ACCESS, "vmm_set_access", bytes);
  if (status == GPUMEM_OK)
    status = gpumem__sim_check_device("vmm_set_access", device);
  if (status == GPUMEM_OK)
    status = set_access(va, bytes, &mappings);
  pthread_mutex_unlock(&gpumem__sim.lock);
  spend_call_time(gpumem__sim.vmm_costs.set_access_ns, mappings);
  return status;
}

static void unmap_one(sim_mapping *mapping) {
  sim_physical *physical = mapping->physical;
  gpumem__sim_index_remove(&gpumem__sim.mappings, mapping->va);
  free(mapping);
  physical->mapped = false;
  if (physical->destroyed)
    forget_physical(physical);
}

/* Unmaps the whole mappings of [va, va + bytes); *mappings: how many. */
static gpumem_status unmap(void *va, size_t bytes, size_t *mappings) {
  gpumem_status status = check_whole_mappings("vmm_unmap", va, bytes);
  if (status != GPUMEM_OK)
    return status;
  /* As cuMemUnmap: queued work that might touch the range runs first. */
  sim_alloc *reservation = gpumem__sim_find_allocation((uintptr_t)va);
  gpumem__sim_run_device(reservation->device);
  gpumem__sim_drain_range((uintptr_t)va, (uintptr_t)va + bytes);
  madvise(va, bytes, MADV_DONTNEED);
  mprotect(va, bytes, PROT_NONE);
  for (uintptr_t cursor = (uintptr_t)va; cursor < (uintptr_t)va + bytes;) {
    sim_mapping *mapping = gpumem__sim_index_get(&gpumem__sim.mappings, cursor);
    cursor += mapping->size;
    unmap_one(mapping);
    (*mappings)++;
  }
  return GPUMEM_OK;
}

gpumem_status gpumem__sim_vmm_unmap(void *va, size_t bytes) {
  size_t mappings = 0;
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = enter(GPUMEM_SIM_CALL_VMM_UNMAP, "vmm_unmap", bytes);
  if (status == GPUMEM_OK)
    status = unmap(va, bytes, &mappings);
  pthread_mutex_unlock(&gpumem__sim.lock);
  spend_call_time(gpumem__sim.vmm_costs.unmap_ns, mappings);
  return status;
}

gpumem_status gpumem__sim_vmm_check_access(const char *call, uintptr_t address, size_t bytes) {
  uintptr_t end = address + bytes;
  sim_mapping *mapping = gpumem__sim_index_floor(&gpumem__sim.mappings, address);
  uintptr_t cursor = address;
  while (mapping && mapping->accessible && cursor >= mapping->va &&
         cursor < mapping->va + mapping->size) {
    cursor = mapping->va + mapping->size;
    if (cursor >= end)
      return GPUMEM_OK;
    mapping = gpumem__sim_index_get(&gpumem__sim.mappings, cursor);
  }
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                      "simulated device: %s: %p lies in a virtual address reservation but is "
                      "not mapped and made accessible (vmm_map, then vmm_set_access)",
                      call, (void *)cursor);
}
