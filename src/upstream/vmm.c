/* vmm.c: the virtual-memory upstream. It reserves one range of device address space at
 * creation and maps physical memory into it on demand, one physical allocation per block.
 *
 * Placing each block at the lowest free address makes a pool's growth steps land one after
 * another, so the pool above can treat them as one range and merge blocks across them: no
 * fragmentation between growth steps and no need for a large initial pool. Reserved bytes
 * are the physical bytes mapped, the memory this resource really takes from the device. */
#include "suballoc/pool.h"
#include "suballoc/suballoc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct va_range {
  uintptr_t addr;
  size_t size;
} va_range;

typedef struct mapping {
  uintptr_t addr;
  size_t size; /* mapped bytes: the request rounded up to the granularity */
  size_t requested;
  gpumem__vmm_handle handle;
} mapping;

typedef struct vmm_resource {
  gpumem_resource header;
  pthread_mutex_t lock;
  gpumem_vmm_options options;
  size_t granularity;
  uintptr_t base;
  va_range *free_ranges; /* sorted by address, never adjacent */
  size_t free_count, free_capacity;
  mapping *mappings; /* sorted by address */
  size_t mapping_count, mapping_capacity;
  gpumem__suballoc_stats stats;
} vmm_resource;

/* Grows a sorted array so one more element fits. */
static bool make_room(void **items, size_t *capacity, size_t count, size_t element) {
  if (count < *capacity)
    return true;
  size_t larger = *capacity ? *capacity * 2 : 16;
  void *grown = realloc(*items, larger * element);
  if (!grown)
    return false;
  *items = grown;
  *capacity = larger;
  return true;
}

/* ---- free address ranges ---- */

/* Takes `size` bytes aligned to `alignment` from the lowest free range that holds them. */
static bool take_range(vmm_resource *self, size_t size, size_t alignment, uintptr_t *addr) {
  for (size_t i = 0; i < self->free_count; i++) {
    va_range r = self->free_ranges[i];
    uintptr_t start = gpumem__align_up(r.addr, alignment);
    if (start < r.addr || start - r.addr > r.size || r.addr + r.size - start < size)
      continue;
    size_t before = start - r.addr, after = r.addr + r.size - (start + size);
    if (before && after) {
      memmove(&self->free_ranges[i + 2], &self->free_ranges[i + 1],
              (self->free_count - i - 1) * sizeof(va_range));
      self->free_ranges[i] = (va_range){r.addr, before};
      self->free_ranges[i + 1] = (va_range){start + size, after};
      self->free_count++;
    } else if (before) {
      self->free_ranges[i].size = before;
    } else if (after) {
      self->free_ranges[i] = (va_range){start + size, after};
    } else {
      memmove(&self->free_ranges[i], &self->free_ranges[i + 1],
              (self->free_count - i - 1) * sizeof(va_range));
      self->free_count--;
    }
    *addr = start;
    return true;
  }
  return false;
}

/* Returns a range, merging it with free neighbours. Always succeeds: there are never more
 * free ranges than mappings plus one, and allocation keeps room for that many. */
static void give_range(vmm_resource *self, uintptr_t addr, size_t size) {
  size_t at = 0;
  while (at < self->free_count && self->free_ranges[at].addr < addr)
    at++;
  bool joins_prev =
      at > 0 && self->free_ranges[at - 1].addr + self->free_ranges[at - 1].size == addr;
  bool joins_next = at < self->free_count && addr + size == self->free_ranges[at].addr;
  if (joins_prev && joins_next) {
    self->free_ranges[at - 1].size += size + self->free_ranges[at].size;
    memmove(&self->free_ranges[at], &self->free_ranges[at + 1],
            (self->free_count - at - 1) * sizeof(va_range));
    self->free_count--;
  } else if (joins_prev) {
    self->free_ranges[at - 1].size += size;
  } else if (joins_next) {
    self->free_ranges[at].addr = addr;
    self->free_ranges[at].size += size;
  } else {
    memmove(&self->free_ranges[at + 1], &self->free_ranges[at],
            (self->free_count - at) * sizeof(va_range));
    self->free_ranges[at] = (va_range){addr, size};
    self->free_count++;
  }
}

/* ---- mappings ---- */

static size_t mapping_position(const vmm_resource *self, uintptr_t addr) {
  size_t low = 0, high = self->mapping_count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (self->mappings[mid].addr < addr)
      low = mid + 1;
    else
      high = mid;
  }
  return low;
}

/* Maps physical memory at [addr, addr+size); undoes its own steps on failure. */
static gpumem_status map_range(vmm_resource *self, uintptr_t addr, size_t size,
                               gpumem__vmm_handle *handle) {
  const gpumem__device_ops *dev = self->header.dev;
  int device = self->header.device;
  gpumem_status status = dev->vmm_create(device, size, handle);
  if (status != GPUMEM_OK)
    return status;
  status = dev->vmm_map((void *)addr, size, *handle);
  if (status == GPUMEM_OK) {
    status = dev->vmm_set_access((void *)addr, size, device);
    if (status != GPUMEM_OK)
      dev->vmm_unmap((void *)addr, size);
  }
  if (status != GPUMEM_OK)
    dev->vmm_destroy(*handle);
  return status;
}

static gpumem_status vmm_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                  gpumem_stream stream, void **ptr) {
  vmm_resource *self = (vmm_resource *)mr;
  size_t size = gpumem__align_up(bytes, self->granularity);
  if (size < bytes)
    return gpumem__fail_out_of_memory(mr, bytes, "the size overflows");
  size_t va_alignment = alignment > self->granularity ? alignment : self->granularity;
  pthread_mutex_lock(&self->lock);
  uintptr_t addr;
  gpumem_status status = GPUMEM_OK;
  /* Room for one more mapping and for the free ranges it can ever split off, so that the
   * paths that give memory back never need to allocate. */
  bool have_room = make_room((void **)&self->mappings, &self->mapping_capacity, self->mapping_count,
                             sizeof(mapping)) &&
                   make_room((void **)&self->free_ranges, &self->free_capacity,
                             self->mapping_count + 2, sizeof(va_range));
  if (!have_room || !take_range(self, size, va_alignment, &addr)) {
    pthread_mutex_unlock(&self->lock);
    return gpumem__fail_out_of_memory(
        mr, bytes, have_room ? "its reserved address range is full" : "the host is out of memory");
  }
  gpumem__vmm_handle handle;
  status = map_range(self, addr, size, &handle);
  if (status != GPUMEM_OK) {
    give_range(self, addr, size);
    pthread_mutex_unlock(&self->lock);
    if (status == GPUMEM_ERR_OUT_OF_MEMORY)
      return gpumem__fail_out_of_memory(mr, bytes, "the device has no more physical memory");
    return gpumem__fail_context(status, "vmm: mapping %zu bytes", size);
  }
  size_t at = mapping_position(self, addr);
  memmove(&self->mappings[at + 1], &self->mappings[at],
          (self->mapping_count - at) * sizeof(mapping));
  self->mappings[at] = (mapping){addr, size, bytes, handle};
  self->mapping_count++;
  gpumem__stats_add_reserved(&self->stats, size);
  gpumem__stats_allocated(&self->stats, bytes);
  pthread_mutex_unlock(&self->lock);
  *ptr = (void *)addr;
  return GPUMEM_OK;
}

static gpumem_status unmap_at(vmm_resource *self, size_t at, gpumem_stream stream) {
  const gpumem__device_ops *dev = self->header.dev;
  mapping m = self->mappings[at];
  /* The driver does not order an unmap after the work that uses the memory. */
  gpumem_status status = dev->stream_synchronize(stream);
  if (status == GPUMEM_OK)
    status = dev->vmm_unmap((void *)m.addr, m.size);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "vmm: unmapping %zu bytes at %p", m.size, (void *)m.addr);
  dev->vmm_destroy(m.handle);
  memmove(&self->mappings[at], &self->mappings[at + 1],
          (self->mapping_count - at - 1) * sizeof(mapping));
  self->mapping_count--;
  give_range(self, m.addr, m.size);
  gpumem__stats_sub_reserved(&self->stats, m.size);
  gpumem__stats_freed(&self->stats, m.requested);
  return GPUMEM_OK;
}

static gpumem_status vmm_deallocate(gpumem_resource *mr, void *ptr, size_t bytes, size_t alignment,
                                    gpumem_stream stream) {
  vmm_resource *self = (vmm_resource *)mr;
  pthread_mutex_lock(&self->lock);
  size_t at = mapping_position(self, (uintptr_t)ptr);
  gpumem_status status;
  if (at == self->mapping_count || self->mappings[at].addr != (uintptr_t)ptr)
    status = gpumem__fail(GPUMEM_ERR_MISUSE,
                          "deallocate of %p (%zu bytes) from resource 'vmm': that pointer is "
                          "not a live allocation of this resource (never allocated here, or "
                          "already freed)",
                          ptr, bytes);
  else if (self->mappings[at].requested != bytes)
    status = gpumem__fail(GPUMEM_ERR_MISUSE,
                          "deallocate of %p from resource 'vmm' with %zu bytes, but it was "
                          "allocated with %zu bytes",
                          ptr, bytes, self->mappings[at].requested);
  else
    status = unmap_at(self, at, stream);
  pthread_mutex_unlock(&self->lock);
  return status;
}

static gpumem_status vmm_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  return gpumem__stats_query(&((const vmm_resource *)mr)->stats, what, out);
}

static void vmm_describe(const gpumem_resource *mr, char *buf, size_t size) {
  snprintf(buf, size, "vmm(reserve=%zu)", ((const vmm_resource *)mr)->options.reserve_size);
}

static void release_everything(vmm_resource *self) {
  const gpumem__device_ops *dev = self->header.dev;
  for (size_t i = 0; i < self->mapping_count; i++) {
    dev->vmm_unmap((void *)self->mappings[i].addr, self->mappings[i].size);
    dev->vmm_destroy(self->mappings[i].handle);
  }
  if (self->base)
    dev->vmm_release((void *)self->base, self->options.reserve_size);
  free(self->mappings);
  free(self->free_ranges);
  pthread_mutex_destroy(&self->lock);
  free(self);
}

static gpumem_status vmm_destroy(gpumem_resource *mr) {
  release_everything((vmm_resource *)mr);
  return GPUMEM_OK;
}

static const gpumem__resource_ops vmm_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "vmm",
    .allocate = vmm_allocate,
    .deallocate = vmm_deallocate,
    .query = vmm_query,
    .describe = vmm_describe,
    .destroy = vmm_destroy,
};

bool gpumem__vmm_grows_in_place(const gpumem_resource *upstream) {
  return upstream && upstream->ops == &vmm_ops;
}

size_t gpumem__vmm_granularity(const gpumem_resource *vmm) {
  return ((const vmm_resource *)vmm)->granularity;
}

/* Checks the device and fills the granularity and the reservation size. */
static gpumem_status plan(const gpumem__device_ops *dev, int device, gpumem_vmm_options *options,
                          size_t *granularity) {
  int64_t supported = 0, value = 0;
  gpumem_status status = dev->device_attribute(device, GPUMEM__ATTR_VMM_SUPPORTED, &supported);
  if (status == GPUMEM_OK && !supported)
    return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                        "gpumem_vmm_create: device %d does not support virtual memory "
                        "management; use 'cuda' as the pool's upstream instead",
                        device);
  if (status == GPUMEM_OK)
    status = dev->device_attribute(device, GPUMEM__ATTR_VMM_GRANULARITY, &value);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "gpumem_vmm_create");
  *granularity = value > 0 ? (size_t)value : (size_t)2 << 20;
  if (options->reserve_size == 0) {
    size_t free_bytes, total_bytes;
    status = dev->mem_info(device, &free_bytes, &total_bytes);
    if (status != GPUMEM_OK)
      return gpumem__fail_context(status, "gpumem_vmm_create");
    options->reserve_size = 4 * total_bytes;
  }
  options->reserve_size = gpumem__align_up(options->reserve_size, *granularity);
  return GPUMEM_OK;
}

gpumem_status gpumem_vmm_create(int device, const gpumem_vmm_options *opts, gpumem_resource **out) {
  if (!out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_vmm_create: out is NULL");
  gpumem_vmm_options options = opts ? *opts : (gpumem_vmm_options){0};
  gpumem_status status;
  const gpumem__device_ops *dev = gpumem__device_get(&status);
  if (!dev)
    return gpumem__fail_context(status, "gpumem_vmm_create");
  status = gpumem__resolve_device(dev, device, &device);
  size_t granularity = 0;
  if (status == GPUMEM_OK)
    status = plan(dev, device, &options, &granularity);
  if (status != GPUMEM_OK)
    return status;
  vmm_resource *self = calloc(1, sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_vmm_create: out of host memory");
  gpumem__resource_init(&self->header, &vmm_ops, device, dev, NULL);
  pthread_mutex_init(&self->lock, NULL);
  self->options = options;
  self->granularity = granularity;
  gpumem__stats_init(&self->stats);
  void *base = NULL;
  status = dev->vmm_reserve(device, options.reserve_size, granularity, &base);
  if (status == GPUMEM_OK) {
    self->base = (uintptr_t)base;
    self->free_ranges = malloc(16 * sizeof(va_range));
    if (!self->free_ranges)
      status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_vmm_create: out of host memory");
  }
  if (status != GPUMEM_OK) {
    release_everything(self);
    return gpumem__fail_context(status, "gpumem_vmm_create: reserving %zu bytes of address space",
                                options.reserve_size);
  }
  self->free_capacity = 16;
  self->free_ranges[0] = (va_range){self->base, options.reserve_size};
  self->free_count = 1;
  *out = &self->header;
  return GPUMEM_OK;
}
