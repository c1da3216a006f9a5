/* sim_memory.c: the simulated device's memory: device, managed and pinned host memory, the
 * registry of every range it handed out, and driver pools (cudaMallocAsync's model), among
 * them each device's default pool of managed memory (CUDA 13's).
 *
 * All of it is host memory. Blocks of 1 MiB or more come from mmap with MAP_NORESERVE, so
 * that a test may allocate gigabytes and pay only for the pages it touches; smaller ones
 * from aligned_alloc. Device memory (mem_alloc, pool blocks, vmm physical memory) counts
 * against the device's capacity, so out-of-memory paths can be tested; managed memory may
 * oversubscribe the device, up to a host bound.
 *
 * Before any memory goes back to the host, the pending operations that touch it run (as
 * cuMemFree synchronizes): no queued copy or kernel can write into freed memory. */
#include "device/sim_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SIM_MMAP_THRESHOLD ((size_t)1 << 20)

/* A driver pool: its blocks (live and cached) in a list, the cached ones also in an array
 * sorted by (size, address) so that a fitting block is found by binary search. */
typedef struct sim_pool {
  int device;
  gpumem_ipc_handle ipc;
  bool managed; /* a device's default pool of managed memory: never destroyed */
  uint64_t release_threshold;
  uint64_t reserved; /* bytes of all blocks, live and cached */
  sim_alloc *blocks;
  sim_alloc **cached;
  size_t cached_count, cached_capacity;
} sim_pool;

const char *gpumem__sim_kind_name(sim_mem_kind kind) {
  switch (kind) {
  case SIM_MEM_DEVICE:
    return "device";
  case SIM_MEM_MANAGED:
    return "managed";
  case SIM_MEM_HOST:
    return "pinned host";
  case SIM_MEM_POOL:
    return "driver pool";
  case SIM_MEM_VMM:
    return "virtual address reservation";
  }
  return "unknown";
}

/* ---------------------------------------------------------------------------------------
 * Host memory behind the simulated memory
 * ------------------------------------------------------------------------------------- */

/* `bytes` is a multiple of 256. *backing receives the mmap length, 0 for aligned_alloc. */
static void *backing_alloc(size_t bytes, size_t *backing) {
  if (bytes < SIM_MMAP_THRESHOLD) {
    *backing = 0;
    return aligned_alloc(GPUMEM_DEFAULT_ALIGNMENT, bytes);
  }
  void *p =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  *backing = bytes;
  return p;
}

static void backing_free(void *p, size_t backing) {
  if (backing)
    munmap(p, backing);
  else
    free(p);
}

/* ---------------------------------------------------------------------------------------
 * The registry
 * ------------------------------------------------------------------------------------- */

sim_alloc *gpumem__sim_find_allocation(uintptr_t address) {
  sim_alloc *alloc = gpumem__sim_index_floor(&gpumem__sim.allocations, address);
  return alloc && address - alloc->base < alloc->size ? alloc : NULL;
}

sim_alloc *gpumem__sim_register(sim_mem_kind kind, int device, uintptr_t base, size_t size,
                                size_t backing) {
  sim_alloc *alloc = calloc(1, sizeof *alloc);
  if (!alloc)
    return NULL;
  *alloc =
      (sim_alloc){.base = base, .size = size, .backing = backing, .kind = kind, .device = device};
  if (!gpumem__sim_index_put(&gpumem__sim.allocations, base, alloc)) {
    free(alloc);
    return NULL;
  }
  return alloc;
}

void gpumem__sim_unregister(sim_alloc *alloc) {
  gpumem__sim_index_remove(&gpumem__sim.allocations, alloc->base);
  free(alloc);
}

gpumem_status gpumem__sim_check_range(const char *call, const char *role, const void *ptr,
                                      size_t bytes, sim_alloc **alloc) {
  uintptr_t lo = (uintptr_t)ptr;
  if (bytes == 0 || bytes - 1 > UINTPTR_MAX - lo)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: %s: the %s range of %zu bytes at %p is empty or "
                        "wraps around the address space",
                        call, role, bytes, ptr);
  uintptr_t last = lo + bytes - 1;
  sim_alloc *found = gpumem__sim_index_floor(&gpumem__sim.allocations, last);
  if (!found || found->base + found->size <= lo) {
    *alloc = NULL; /* host memory the sim did not give */
    return GPUMEM_OK;
  }
  if (found->base > lo || last - found->base >= found->size)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: %s: the %s range [%p, %p) runs outside the %s "
                        "allocation [%p, %p) it touches",
                        call, role, ptr, (void *)(last + 1), gpumem__sim_kind_name(found->kind),
                        (void *)found->base, (void *)(found->base + found->size));
  if (found->kind == SIM_MEM_VMM) {
    gpumem_status status = gpumem__sim_vmm_check_access(call, lo, bytes);
    if (status != GPUMEM_OK)
      return status;
  }
  *alloc = found;
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Capacity
 * ------------------------------------------------------------------------------------- */

static gpumem_status fail_capacity(int device, size_t bytes, const char *what, uint64_t free_bytes,
                                   uint64_t limit, const char *limit_name) {
  char request[48], available[48], total[48];
  gpumem__format_bytes(bytes, request, sizeof request);
  gpumem__format_bytes(free_bytes, available, sizeof available);
  gpumem__format_bytes(limit, total, sizeof total);
  gpumem__set_cuda_error(GPUMEM__SIM_CUDA_OUT_OF_MEMORY);
  return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                      "simulated device %d: out of memory: %s of %s; %s free of %s of %s", device,
                      what, request, available, total, limit_name);
}

gpumem_status gpumem__sim_charge_device(int device, size_t bytes, const char *what) {
  uint64_t free_bytes = gpumem__sim.capacity - gpumem__sim.used[device];
  if (bytes > free_bytes)
    return fail_capacity(device, bytes, what, free_bytes, gpumem__sim.capacity, "device memory");
  gpumem__sim.used[device] += bytes;
  return GPUMEM_OK;
}

void gpumem__sim_refund_device(int device, size_t bytes) {
  gpumem__sim.used[device] -= bytes;
}

static gpumem_status charge_managed(int device, size_t bytes, const char *what) {
  uint64_t free_bytes = gpumem__sim.managed_limit - gpumem__sim.managed_used[device];
  if (bytes > free_bytes)
    return fail_capacity(device, bytes, what, free_bytes, gpumem__sim.managed_limit,
                         "managed memory (bounded at 4 times the device capacity)");
  gpumem__sim.managed_used[device] += bytes;
  return GPUMEM_OK;
}

/* Managed memory (managed_alloc's, or a pool of managed memory's blocks) counts against the
 * managed bound, pinned host memory against nothing, the rest against the device. */
static gpumem_status charge(sim_mem_kind kind, bool managed, int device, size_t bytes,
                            const char *what) {
  if (managed)
    return charge_managed(device, bytes, what);
  if (kind == SIM_MEM_HOST)
    return GPUMEM_OK;
  return gpumem__sim_charge_device(device, bytes, what);
}

static void refund(sim_mem_kind kind, bool managed, int device, size_t bytes) {
  if (managed)
    gpumem__sim.managed_used[device] -= bytes;
  else if (kind != SIM_MEM_HOST)
    gpumem__sim_refund_device(device, bytes);
}

/* ---------------------------------------------------------------------------------------
 * Device, managed and pinned host memory
 * ------------------------------------------------------------------------------------- */

/* The request rounded to 256 bytes, or 0 when it is 0 or cannot be rounded. */
static size_t rounded_size(size_t bytes) {
  if (bytes == 0 || bytes > SIZE_MAX - GPUMEM_DEFAULT_ALIGNMENT)
    return 0;
  return gpumem__align_up(bytes, GPUMEM_DEFAULT_ALIGNMENT);
}

/* Charges, obtains host memory and registers it; on failure nothing has changed. `managed`:
 * managed memory (always for SIM_MEM_MANAGED; for SIM_MEM_POOL, a pool of managed memory). */
static gpumem_status allocate(sim_mem_kind kind, bool managed, int device, size_t bytes,
                              const char *call, sim_alloc **out) {
  gpumem_status status = gpumem__sim_check_device(call, device);
  if (status != GPUMEM_OK)
    return status;
  size_t size = rounded_size(bytes);
  if (size == 0)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: %s: cannot allocate %zu bytes", call, bytes);
  status = charge(kind, managed, device, size, call);
  if (status != GPUMEM_OK)
    return status;
  size_t backing;
  void *p = backing_alloc(size, &backing);
  sim_alloc *alloc = p ? gpumem__sim_register(kind, device, (uintptr_t)p, size, backing) : NULL;
  if (!alloc) {
    if (p)
      backing_free(p, backing);
    refund(kind, managed, device, size);
    gpumem__set_cuda_error(GPUMEM__SIM_CUDA_OUT_OF_MEMORY);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "simulated device %d: %s of %zu bytes: the host is out of memory", device,
                        call, bytes);
  }
  alloc->managed = managed;
  *out = alloc;
  return GPUMEM_OK;
}

/* Gives an allocation's memory back to the host, after the work that touches it. */
static void release(sim_alloc *alloc) {
  gpumem__sim_drain_range(alloc->base, alloc->base + alloc->size);
  refund(alloc->kind, alloc->managed, alloc->device, alloc->size);
  backing_free((void *)alloc->base, alloc->backing);
  gpumem__sim_unregister(alloc);
}

static gpumem_status fail_foreign(const char *call, const void *ptr, const char *origin) {
  gpumem__set_cuda_error(GPUMEM__SIM_CUDA_INVALID_VALUE);
  sim_alloc *inside = gpumem__sim_find_allocation((uintptr_t)ptr);
  if (inside && inside->base == (uintptr_t)ptr && inside->kind == SIM_MEM_POOL && inside->cached)
    return gpumem__fail(GPUMEM_ERR_CUDA,
                        "simulated device: %s(%p): the block was already freed with free_async",
                        call, ptr);
  if (inside && inside->base == (uintptr_t)ptr)
    return gpumem__fail(GPUMEM_ERR_CUDA,
                        "simulated device: %s(%p): this is %s memory, not memory from %s", call,
                        ptr, gpumem__sim_kind_name(inside->kind), origin);
  if (inside)
    return gpumem__fail(GPUMEM_ERR_CUDA,
                        "simulated device: %s(%p): not the start of a block from %s (it lies "
                        "inside %s memory that starts at %p)",
                        call, ptr, origin, gpumem__sim_kind_name(inside->kind),
                        (void *)inside->base);
  return gpumem__fail(GPUMEM_ERR_CUDA,
                      "simulated device: %s(%p): the address was not returned by %s, or was "
                      "already freed",
                      call, ptr, origin);
}

/* The free of mem_free, managed_free and host_free: cuMemFree-like, it synchronizes. */
/* A free entry: under the lock, counted as a MEM_FREE call (which can be planned to fail)
 * where `counted`. */
static gpumem_status free_entry(bool counted, sim_mem_kind kind, void *ptr, const char *call,
                                const char *origin) {
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = counted ? gpumem__sim_enter(GPUMEM_SIM_CALL_MEM_FREE) : GPUMEM_OK;
  sim_alloc *alloc = gpumem__sim_index_get(&gpumem__sim.allocations, (uintptr_t)ptr);
  if (status == GPUMEM_OK && (!alloc || alloc->kind != kind))
    status = fail_foreign(call, ptr, origin);
  if (status == GPUMEM_OK) {
    gpumem__sim_run_device(alloc->device);
    release(alloc);
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

static gpumem_status alloc_entry(gpumem_sim_call call_kind, sim_mem_kind kind, int device,
                                 size_t bytes, const char *call, void **ptr) {
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = gpumem__sim_enter(call_kind);
  sim_alloc *alloc = NULL;
  if (status == GPUMEM_OK)
    status = allocate(kind, kind == SIM_MEM_MANAGED, device, bytes, call, &alloc);
  if (status == GPUMEM_OK)
    *ptr = (void *)alloc->base;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_mem_alloc(int device, size_t bytes, void **ptr) {
  return alloc_entry(GPUMEM_SIM_CALL_MEM_ALLOC, SIM_MEM_DEVICE, device, bytes, "mem_alloc", ptr);
}

gpumem_status gpumem__sim_mem_free(int device, void *ptr) {
  return free_entry(true, SIM_MEM_DEVICE, ptr, "mem_free", "mem_alloc");
}

gpumem_status gpumem__sim_managed_alloc(int device, size_t bytes, void **ptr) {
  return alloc_entry(GPUMEM_SIM_CALL_MANAGED_ALLOC, SIM_MEM_MANAGED, device, bytes, "managed_alloc",
                     ptr);
}

gpumem_status gpumem__sim_managed_free(int device, void *ptr) {
  return free_entry(false, SIM_MEM_MANAGED, ptr, "managed_free", "managed_alloc");
}

gpumem_status gpumem__sim_host_alloc(int device, size_t bytes, unsigned flags, void **ptr) {
  const unsigned known = GPUMEM__PINNED_FLAGS;
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_HOST_ALLOC);
  if (status == GPUMEM_OK && (flags & ~known))
    status = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                          "simulated device: host_alloc: unknown flags 0x%x", flags & ~known);
  sim_alloc *alloc = NULL;
  if (status == GPUMEM_OK)
    status = allocate(SIM_MEM_HOST, false, device, bytes, "host_alloc", &alloc);
  if (status == GPUMEM_OK)
    *ptr = (void *)alloc->base;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_host_free(int device, void *ptr) {
  return free_entry(false, SIM_MEM_HOST, ptr, "host_free", "host_alloc");
}

/* Advice changes where managed pages live, which the sim does not model; it checks the
 * arguments so that misuse fails here as it would on a GPU. */
gpumem_status gpumem__sim_advise(void *ptr, size_t bytes, unsigned advice, int device) {
  const unsigned known = GPUMEM__ADVICE_FLAGS;
  if (advice & ~known)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "simulated device: advise: unknown advice flags 0x%x", advice & ~known);
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_alloc *alloc = NULL;
  gpumem_status status = gpumem__sim_check_device("advise", device);
  if (status == GPUMEM_OK)
    status = gpumem__sim_check_range("advise", "advised", ptr, bytes, &alloc);
  if (status == GPUMEM_OK && (!alloc || !alloc->managed))
    status = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                          "simulated device: advise(%p, %zu bytes): advice applies to managed "
                          "memory only, and this is %s memory",
                          ptr, bytes, alloc ? gpumem__sim_kind_name(alloc->kind) : "host");
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* ---------------------------------------------------------------------------------------
 * Driver pools: the cached blocks, sorted by (size, address)
 * ------------------------------------------------------------------------------------- */

static bool block_before(const sim_alloc *block, size_t size, uintptr_t base) {
  return block->size < size || (block->size == size && block->base < base);
}

static size_t cached_lower_bound(const sim_pool *pool, size_t size, uintptr_t base) {
  size_t lo = 0, hi = pool->cached_count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (block_before(pool->cached[mid], size, base))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static bool cached_reserve(sim_pool *pool) {
  if (pool->cached_count < pool->cached_capacity)
    return true;
  size_t capacity = pool->cached_capacity ? pool->cached_capacity * 2 : 16;
  sim_alloc **cached = realloc(pool->cached, capacity * sizeof *cached);
  if (!cached)
    return false;
  pool->cached = cached;
  pool->cached_capacity = capacity;
  return true;
}

/* The caller has reserved room. */
static void cached_insert(sim_pool *pool, sim_alloc *block) {
  size_t at = cached_lower_bound(pool, block->size, block->base);
  memmove(&pool->cached[at + 1], &pool->cached[at],
          (pool->cached_count - at) * sizeof pool->cached[0]);
  pool->cached[at] = block;
  pool->cached_count++;
}

static void cached_remove_at(sim_pool *pool, size_t at) {
  memmove(&pool->cached[at], &pool->cached[at + 1],
          (pool->cached_count - at - 1) * sizeof pool->cached[0]);
  pool->cached_count--;
}

/* ---------------------------------------------------------------------------------------
 * Driver pools: blocks
 * ------------------------------------------------------------------------------------- */

static void link_block(sim_pool *pool, sim_alloc *block) {
  block->pool = pool;
  block->pool_prev = NULL;
  block->pool_next = pool->blocks;
  if (pool->blocks)
    pool->blocks->pool_prev = block;
  pool->blocks = block;
  pool->reserved += block->size;
}

static void release_block(sim_pool *pool, sim_alloc *block) {
  if (block->pool_prev)
    block->pool_prev->pool_next = block->pool_next;
  else
    pool->blocks = block->pool_next;
  if (block->pool_next)
    block->pool_next->pool_prev = block->pool_prev;
  pool->reserved -= block->size;
  release(block);
}

/* Whether a block's free has completed as far as every stream can tell. */
static bool free_completed(const sim_alloc *block) {
  return gpumem__sim_stream_reached(block->free_stream, block->free_point);
}

/* Gives cached blocks back, largest first, until the pool holds at most `keep` bytes.
 * only_completed: keep blocks whose free is still pending (a synchronization of one device
 * must not run another device's work). */
static void release_cached(sim_pool *pool, uint64_t keep, bool only_completed) {
  for (size_t at = pool->cached_count; at-- > 0 && pool->reserved > keep;) {
    sim_alloc *block = pool->cached[at];
    if (only_completed && !free_completed(block))
      continue;
    cached_remove_at(pool, at);
    release_block(pool, block);
  }
}

void gpumem__sim_apply_release_thresholds(int device) {
  for (size_t i = 0; i < gpumem__sim.pools.count; i++) {
    sim_pool *pool = gpumem__sim.pools.items[i].value.ptr;
    if (pool->device == device && pool->reserved > pool->release_threshold)
      release_cached(pool, pool->release_threshold, true);
  }
}

/* A cached block may serve `stream` when its free is ordered before the stream's new work:
 * freed on that very stream, or the free has completed, or the stream waited for an event
 * recorded after it (the driver follows event dependencies by default). */
static bool reusable_on(const sim_alloc *block, const sim_stream *stream) {
  return block->free_stream == stream->id || free_completed(block) ||
         gpumem__sim_clock_get(&stream->clock, block->free_stream) >= block->free_point;
}

/* A cached block of size in [size, 2 * size) that `stream` may use, removed from the cache. */
static sim_alloc *take_cached(sim_pool *pool, size_t size, const sim_stream *stream) {
  size_t limit = size > SIZE_MAX / 2 ? SIZE_MAX : size * 2;
  for (size_t at = cached_lower_bound(pool, size, 0);
       at < pool->cached_count && pool->cached[at]->size < limit; at++) {
    sim_alloc *block = pool->cached[at];
    if (reusable_on(block, stream)) {
      cached_remove_at(pool, at);
      return block;
    }
  }
  return NULL;
}

/* New memory for the pool (device memory, or managed memory for a pool of it). When the
 * memory is exhausted, the pool first gives back its own cached blocks whose frees have
 * completed, as the driver does. */
static gpumem_status grow_pool(sim_pool *pool, size_t bytes, sim_alloc **out) {
  size_t size = rounded_size(bytes);
  int device = pool->device;
  uint64_t room = pool->managed ? gpumem__sim.managed_limit - gpumem__sim.managed_used[device]
                                : gpumem__sim.capacity - gpumem__sim.used[device];
  if (size != 0 && size > room)
    release_cached(pool, 0, true);
  sim_alloc *block = NULL;
  gpumem_status status =
      allocate(SIM_MEM_POOL, pool->managed, device, bytes, "pool_alloc_async", &block);
  if (status != GPUMEM_OK)
    return status;
  link_block(pool, block);
  *out = block;
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Driver pools: entries
 * ------------------------------------------------------------------------------------- */

static gpumem_status find_pool(const char *call, gpumem__mempool handle, sim_pool **pool) {
  return gpumem__sim_find_handle(&gpumem__sim.pools, call, "a driver pool", handle, (void **)pool);
}

/* The device layer's callers name the pool's device (the real driver needs a context of
 * it); a wrong one is a bug in gpumem, caught here. */
static gpumem_status find_pool_of_device(const char *call, int device, gpumem__mempool handle,
                                         sim_pool **pool) {
  gpumem_status status = find_pool(call, handle, pool);
  if (status == GPUMEM_OK && (*pool)->device != device)
    return gpumem__fail(GPUMEM_ERR_INVALID_DEVICE,
                        "simulated device: %s: pool %p belongs to device %d, not device %d", call,
                        (void *)handle, (*pool)->device, device);
  return status;
}

static gpumem_status check_ipc(gpumem_ipc_handle ipc) {
  if (ipc == GPUMEM_IPC_NONE || ipc == GPUMEM_IPC_POSIX_FD)
    return GPUMEM_OK;
  if (ipc == GPUMEM_IPC_FABRIC)
    return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                        "simulated device: pool_create: fabric handles (multi-node NVLink) are "
                        "not supported; use GPUMEM_IPC_POSIX_FD or GPUMEM_IPC_NONE");
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                      "simulated device: pool_create: unknown IPC handle type %d", (int)ipc);
}

gpumem_status gpumem__sim_pool_create(int device, gpumem_ipc_handle ipc, gpumem__mempool *out) {
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_POOL_CREATE);
  if (status == GPUMEM_OK)
    status = gpumem__sim_check_device("pool_create", device);
  if (status == GPUMEM_OK)
    status = check_ipc(ipc);
  sim_pool *pool = NULL;
  if (status == GPUMEM_OK) {
    pool = calloc(1, sizeof *pool);
    if (!pool || !gpumem__sim_index_put(&gpumem__sim.pools, (uintptr_t)pool, pool)) {
      free(pool);
      status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                            "simulated device: pool_create: the host is out of memory");
    }
  }
  if (status == GPUMEM_OK) {
    /* As CUDA: a new pool's release threshold is 0, so synchronizing releases its cache. */
    pool->device = device;
    pool->ipc = ipc;
    *out = (gpumem__mempool)pool;
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_pool_destroy(int device, gpumem__mempool handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_pool *pool = NULL;
  gpumem_status status = find_pool_of_device("pool_destroy", device, handle, &pool);
  if (status == GPUMEM_OK && pool->managed) {
    gpumem__set_cuda_error(GPUMEM__SIM_CUDA_INVALID_VALUE);
    status = gpumem__fail(GPUMEM_ERR_CUDA,
                          "simulated device: pool_destroy: pool %p is device %d's default pool "
                          "of managed memory, which cannot be destroyed",
                          (void *)handle, device);
  }
  if (status == GPUMEM_OK) {
    gpumem__sim_run_device(pool->device);
    while (pool->blocks)
      release_block(pool, pool->blocks);
    gpumem__sim_index_remove(&gpumem__sim.pools, (uintptr_t)pool);
    free(pool->cached);
    free(pool);
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_pool_set_release_threshold(gpumem__mempool handle, uint64_t bytes) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_pool *pool = NULL;
  gpumem_status status = find_pool("pool_set_release_threshold", handle, &pool);
  if (status == GPUMEM_OK)
    pool->release_threshold = bytes;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_pool_reserved(gpumem__mempool handle, uint64_t *bytes) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_pool *pool = NULL;
  gpumem_status status = find_pool("pool_reserved", handle, &pool);
  if (status == GPUMEM_OK)
    *bytes = pool->reserved;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

uint64_t gpumem__sim_managed_pool_cached(int device) {
  const sim_pool *pool = gpumem__sim.managed_pool[device];
  uint64_t bytes = 0;
  for (size_t at = 0; pool && at < pool->cached_count; at++)
    bytes += pool->cached[at]->size;
  return bytes;
}

gpumem_status gpumem__sim_pool_trim(gpumem__mempool handle, size_t keep) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_pool *pool = NULL;
  gpumem_status status = find_pool("pool_trim", handle, &pool);
  if (status == GPUMEM_OK) {
    gpumem__sim_run_device(pool->device);
    release_cached(pool, keep, false);
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_pool_alloc_async(int device, gpumem__mempool handle, size_t bytes,
                                           gpumem_stream stream_handle, void **ptr) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_pool *pool = NULL;
  sim_stream *stream = NULL;
  sim_alloc *block = NULL;
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_POOL_ALLOC);
  if (status == GPUMEM_OK && !gpumem__sim_index_get(&gpumem__sim.pools, (uintptr_t)handle)) {
    /* The driver's answer for a pool it does not know (never created, or destroyed since):
     * an allocation failure with CUDA_ERROR_INVALID_VALUE, not a refused argument. */
    gpumem__set_cuda_error(GPUMEM__SIM_CUDA_INVALID_VALUE);
    status = gpumem__fail(GPUMEM_ERR_CUDA,
                          "simulated device: pool_alloc_async: %p is not a driver pool of the "
                          "simulated device (never created, or destroyed)",
                          (void *)handle);
  }
  if (status == GPUMEM_OK)
    status = find_pool_of_device("pool_alloc_async", device, handle, &pool);
  if (status == GPUMEM_OK)
    status = gpumem__sim_resolve_stream_of("pool_alloc_async", device, stream_handle, &stream);
  if (status == GPUMEM_OK && rounded_size(bytes) == 0)
    status = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                          "simulated device: pool_alloc_async: cannot allocate %zu bytes", bytes);
  if (status == GPUMEM_OK) {
    block = take_cached(pool, rounded_size(bytes), stream);
    if (!block)
      status = grow_pool(pool, bytes, &block);
  }
  if (status == GPUMEM_OK) {
    block->cached = false;
    *ptr = (void *)block->base;
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_free_async(void *ptr, gpumem_stream stream_handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *stream = NULL;
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_POOL_FREE);
  if (status == GPUMEM_OK)
    status = gpumem__sim_resolve_stream("free_async", stream_handle, &stream);
  sim_alloc *block = NULL;
  if (status == GPUMEM_OK) {
    block = gpumem__sim_index_get(&gpumem__sim.allocations, (uintptr_t)ptr);
    if (!block || block->kind != SIM_MEM_POOL || block->cached)
      status = fail_foreign("free_async", ptr, "pool_alloc_async");
  }
  if (status == GPUMEM_OK && !cached_reserve(block->pool))
    status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                          "simulated device: free_async: the host is out of memory");
  if (status == GPUMEM_OK) {
    /* Free once the stream's work enqueued so far is done: that is the free point. */
    block->cached = true;
    block->free_stream = stream->id;
    block->free_point = stream->enqueued;
    cached_insert(block->pool, block);
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* The device's default pool of managed memory, made on first use and kept for the life of
 * the process, as the driver's. Counted as a pool_create call (so that fault injection
 * reaches it). */
gpumem_status gpumem__sim_pool_default_managed(int device, gpumem__mempool *out) {
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_POOL_CREATE);
  if (status == GPUMEM_OK)
    status = gpumem__sim_check_device("pool_default_managed", device);
  if (status == GPUMEM_OK && !gpumem__sim.managed_pools)
    status = gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                          "simulated device: pool_default_managed: this driver has no pools of "
                          "managed memory (they need CUDA 13.0; GPUMEM_SIM_MANAGED_POOLS=0)");
  sim_pool *pool = status == GPUMEM_OK ? gpumem__sim.managed_pool[device] : NULL;
  if (status == GPUMEM_OK && !pool) {
    pool = calloc(1, sizeof *pool);
    if (!pool || !gpumem__sim_index_put(&gpumem__sim.pools, (uintptr_t)pool, pool)) {
      free(pool);
      pool = NULL;
      status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                            "simulated device: pool_default_managed: the host is out of memory");
    } else {
      /* As CUDA's default pools: release threshold 0, no IPC handles. */
      pool->device = device;
      pool->managed = true;
      gpumem__sim.managed_pool[device] = pool;
    }
  }
  if (status == GPUMEM_OK)
    *out = (gpumem__mempool)pool;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}
