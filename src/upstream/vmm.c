/* vmm.c: the virtual-memory upstream. It reserves one range of device address space at
 * creation and maps physical memory into it on demand.
 *
 * Placing each block at the lowest free address makes a pool's growth steps land one after
 * another, so the pool above can treat them as one range and merge blocks across them: no
 * fragmentation between growth steps and no need for a large initial pool. Reserved bytes
 * are the physical bytes mapped, the memory this resource really takes from the device.
 *
 * A block's physical memory is made in pieces, cut at every multiple of the piece size from
 * the range's start (most of a large block's at twice that). The driver unmaps and frees
 * physical memory only as the whole piece it was made as, so pieces are what lets a pool's
 * trim give back the free middle of a growth step whose ends are in use; their size weighs
 * that against the driver calls each piece costs when memory is mapped or unmapped. While a
 * caller holds pieces (hold_pieces: a pool moving memory from its holes to where it grows),
 * the physical memory of unmapped pieces is kept and mapped again for pieces of its size:
 * half the driver's cost of a move. */
#include "core/counters.h"
#include "core/sorted.h"
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_PIECE ((size_t)32 << 20)
/* A block of this many pieces or more (a pool's growth of 1 GiB and up over the default
 * pieces) is cut at every multiple of twice the piece size instead, up to the last such
 * multiple inside it, and at every multiple of the piece size past it. Setting access and
 * unmapping cost the driver about 20 and 13 µs a piece whatever its size (docs/gpu-runs.md,
 * twenty-seventh session, run 8), so a pool that moves a large block's memory every pass
 * moves twice as much for the same time: over 50 warm passes on an H200, RoBERTa's 2.7 GiB
 * requests held 1.069 times its live peak at 91 to 112 ns an event instead of 1.204 to
 * 1.212 at 47 to 74, where the time budget ran out (the driver pool 1.085). With twice the
 * piece size no verdict of the 116 recorded traces moves over three warm passes; with four
 * times a hole's edges keep more mapped, and GPT-2 at random lengths held 1.096 against
 * 1.043 (thirty-fifth session, runs 3 and 4). */
#define LARGE_BLOCK_PIECES 32
/* The most pieces held at once (beyond, they are freed as usual): 4 GiB of 32 MiB pieces. */
#define MOST_HELD 128

typedef struct va_range {
  uintptr_t addr;
  size_t size;
} va_range;

/* One piece of physical memory mapped at addr. An allocation is a run of adjacent pieces
 * whose last one ends_allocation; its first is the one after a gap or after another
 * allocation's last. */
typedef struct mapping {
  uintptr_t addr;
  size_t size;      /* mapped bytes: whole granules */
  size_t requested; /* the bytes of the allocation's request that fall in this piece */
  gpumem__vmm_handle handle;
  bool ends_allocation;
} mapping;

typedef struct vmm_resource {
  gpumem_resource header;
  pthread_mutex_t lock;
  gpumem_vmm_options options;
  size_t granularity;
  uintptr_t base;
  gpumem__sorted free_ranges; /* of va_range, by address, never adjacent */
  gpumem__sorted mappings;    /* of mapping, by address */
  gpumem__memory_counters stats;
  gpumem__holder holder; /* listed as holding device memory, for reports */
  /* Physical memory of pieces unmapped while held, counted as reserved until mapped again
   * or freed (hold_pieces); held while any of its users (pools sharing it) holds. */
  unsigned holders;
  size_t held_count;
  struct {
    gpumem__vmm_handle handle;
    size_t size;
  } held[MOST_HELD];
} vmm_resource;

static va_range *range_at(const vmm_resource *self, size_t at) {
  return gpumem__sorted_at(&self->free_ranges, at);
}

static mapping *mapping_at(const vmm_resource *self, size_t at) {
  return gpumem__sorted_at(&self->mappings, at);
}

/* ---- free address ranges ---- */

/* Takes [start, start+size) out of free range `at`, which holds it. The caller made room
 * for one more range. */
static void cut_range(vmm_resource *self, size_t at, uintptr_t start, size_t size) {
  va_range *r = range_at(self, at);
  size_t before = start - r->addr, after = r->addr + r->size - (start + size);
  if (before && after) {
    r->size = before;
    gpumem__sorted_insert_at(&self->free_ranges, at + 1, &(va_range){start + size, after});
  } else if (before) {
    r->size = before;
  } else if (after) {
    *r = (va_range){start + size, after};
  } else {
    gpumem__sorted_remove_at(&self->free_ranges, at);
  }
}

/* Takes `size` bytes at `want` if that range is free, else (want 0, or taken) aligned to
 * `alignment` from the lowest free range that holds them. The caller made room for one more
 * range. */
static bool take_range(vmm_resource *self, uintptr_t want, size_t size, size_t alignment,
                       uintptr_t *addr) {
  if (want) {
    size_t at = gpumem__sorted_floor(&self->free_ranges, want);
    va_range *r = at < self->free_ranges.count ? range_at(self, at) : NULL;
    if (!r || want + size > r->addr + r->size || want + size < want)
      return false;
    cut_range(self, at, want, size);
    *addr = want;
    return true;
  }
  for (size_t i = 0; i < self->free_ranges.count; i++) {
    va_range *r = range_at(self, i);
    uintptr_t start = gpumem__align_up(r->addr, alignment);
    if (start < r->addr || start - r->addr > r->size || r->addr + r->size - start < size)
      continue;
    cut_range(self, i, start, size);
    *addr = start;
    return true;
  }
  return false;
}

/* Returns a range, merging it with free neighbours. Always succeeds: there are never more
 * free ranges than mappings plus one, and allocation keeps room for that many. */
static void give_range(vmm_resource *self, uintptr_t addr, size_t size) {
  size_t at = gpumem__sorted_lower_bound(&self->free_ranges, addr);
  va_range *prev = at > 0 ? range_at(self, at - 1) : NULL;
  va_range *next = at < self->free_ranges.count ? range_at(self, at) : NULL;
  bool joins_prev = prev && prev->addr + prev->size == addr;
  bool joins_next = next && addr + size == next->addr;
  if (joins_prev && joins_next) {
    prev->size += size + next->size;
    gpumem__sorted_remove_at(&self->free_ranges, at);
  } else if (joins_prev) {
    prev->size += size;
  } else if (joins_next) {
    next->addr = addr;
    next->size += size;
  } else {
    gpumem__sorted_insert_at(&self->free_ranges, at, &(va_range){addr, size});
  }
}

/* ---- mappings ---- */

/* Whether a block of `size` bytes is a large one: the capabilities' rule, which the pools
 * above round their releases by, is the only copy of it. */
static bool is_large_block(const vmm_resource *self, size_t size) {
  return size >= self->header.caps.large_block_size;
}

/* The next multiple of `piece` from the range's start after `addr`. */
static uintptr_t next_multiple(const vmm_resource *self, size_t piece, uintptr_t addr) {
  return self->base + ((addr - self->base) / piece + 1) * piece;
}

/* Where the piece that starts at `addr` of a block ending at `end` ends: at the next
 * multiple of the piece size from the range's start, or of the large piece size in a large
 * block where one lies before `end`, or at `end`. */
static uintptr_t piece_end(const vmm_resource *self, bool large, uintptr_t addr, uintptr_t end) {
  if (large) {
    uintptr_t next = next_multiple(self, self->header.caps.large_piece_size, addr);
    if (next <= end)
      return next;
  }
  uintptr_t next = next_multiple(self, self->options.piece_size, addr);
  return next < end ? next : end;
}

/* The most pieces `size` bytes can take: whole pieces and two partial ones at the ends. */
static size_t most_pieces(const vmm_resource *self, size_t size) {
  return size / self->options.piece_size + 2;
}

/* Unmaps the `count` pieces from index `at` (adjacent) after `stream`'s work and forgets
 * them; *requested: the request bytes they held. Nothing changes when the unmap fails. */
static gpumem_status unmap_pieces(vmm_resource *self, size_t at, size_t count, gpumem_stream stream,
                                  size_t *requested) {
  const gpumem__device_ops *dev = self->header.dev;
  uintptr_t addr = mapping_at(self, at)->addr;
  const mapping *last = mapping_at(self, at + count - 1);
  size_t size = last->addr + last->size - addr;
  /* The driver does not order an unmap after the work that uses the memory. */
  gpumem_status status = dev->stream_synchronize(stream);
  if (status == GPUMEM_OK)
    status = dev->vmm_unmap((void *)addr, size);
  if (status != GPUMEM_OK)
    return gpumem__fail_context(status, "vmm: unmapping %zu bytes at %p", size, (void *)addr);
  *requested = 0;
  size_t freed = 0;
  for (size_t i = 0; i < count; i++) {
    const mapping *m = mapping_at(self, at + i);
    *requested += m->requested;
    if (self->holders > 0 && self->held_count < MOST_HELD) {
      self->held[self->held_count].handle = m->handle;
      self->held[self->held_count++].size = m->size;
    } else {
      dev->vmm_destroy(m->handle);
      freed += m->size;
    }
  }
  gpumem__sorted_remove_range(&self->mappings, at, count);
  give_range(self, addr, size);
  gpumem__counters_sub_reserved(&self->stats, freed);
  gpumem__counters_bump(&self->stats.live_bytes, -(uint64_t)*requested);
  return GPUMEM_OK;
}

/* Frees held piece `i`'s physical memory, no longer counted as reserved; the caller drops
 * it from the list. */
static void destroy_held(vmm_resource *self, size_t i) {
  self->header.dev->vmm_destroy(self->held[i].handle);
  gpumem__counters_sub_reserved(&self->stats, self->held[i].size);
}

/* Frees the held memory not mapped again. */
static void free_held(vmm_resource *self) {
  for (size_t i = 0; i < self->held_count; i++)
    destroy_held(self, i);
  self->held_count = 0;
}

/* Physical memory for a piece of `size` bytes: held memory of that size (no longer counted
 * as reserved: the mapping will be), or new; a device out of memory gets the held memory
 * of other sizes back first, so that holding never makes a growth fail. */
static gpumem_status piece_memory(vmm_resource *self, size_t size, gpumem__vmm_handle *handle) {
  for (size_t i = self->held_count; i-- > 0;)
    if (self->held[i].size == size) {
      *handle = self->held[i].handle;
      self->held[i] = self->held[--self->held_count];
      gpumem__counters_sub_reserved(&self->stats, size);
      return GPUMEM_OK;
    }
  const gpumem__device_ops *dev = self->header.dev;
  gpumem_status status = dev->vmm_create(self->header.device, size, handle);
  if (status == GPUMEM_ERR_OUT_OF_MEMORY && self->held_count > 0) {
    gpumem__absorb_error();
    free_held(self);
    status = dev->vmm_create(self->header.device, size, handle);
  }
  return status;
}

/* Before a run of pieces [addr, end) makes new physical memory, frees the held memory it
 * will not map again: kept while new pieces are made, it would take more of the device than
 * the holder counts as reserved (on an H200, GPT-2 generation's replay took 1.370 times its
 * live peak where its pool counted 1.205). Held pieces of the run's sizes
 * stay for it; where the run makes nothing new, all stay until the hold ends. */
static void free_held_unneeded(vmm_resource *self, uintptr_t addr, uintptr_t end) {
  bool needed[MOST_HELD] = {false};
  bool makes_new = false;
  bool large = is_large_block(self, end - addr);
  for (uintptr_t cursor = addr, next; cursor < end; cursor = next) {
    next = piece_end(self, large, cursor, end);
    size_t i = 0;
    while (i < self->held_count && (needed[i] || self->held[i].size != next - cursor))
      i++;
    if (i < self->held_count)
      needed[i] = true;
    else
      makes_new = true;
  }
  if (!makes_new)
    return;
  size_t kept = 0;
  for (size_t i = 0; i < self->held_count; i++)
    if (needed[i])
      self->held[kept++] = self->held[i];
    else
      destroy_held(self, i);
  self->held_count = kept;
}

/* Maps physical memory at [addr, addr+size) piece by piece and files the pieces as one
 * allocation of `bytes`; undoes its own steps on failure. The caller made room for the
 * pieces' records. If the undo's unmap fails too, the pieces mapped so far stay mapped and
 * on file, each a piece of no allocation (nothing requested of it), so that their memory is
 * counted as reserved, their addresses stay taken and destroy unmaps them later; *stranded
 * gets their bytes, which start at addr (0 otherwise). */
static gpumem_status map_pieces(vmm_resource *self, uintptr_t addr, size_t size, size_t bytes,
                                size_t *stranded) {
  const gpumem__device_ops *dev = self->header.dev;
  int device = self->header.device;
  uintptr_t end = addr + size;
  bool large = is_large_block(self, size);
  size_t pieces = 0;
  for (uintptr_t cursor = addr; cursor < end; cursor = piece_end(self, large, cursor, end))
    pieces++;
  /* One move of the records above for the whole run, not one per piece. */
  size_t at = gpumem__sorted_lower_bound(&self->mappings, addr), count = 0;
  mapping *filed = gpumem__sorted_open_gap(&self->mappings, at, pieces);
  if (self->held_count > 0)
    free_held_unneeded(self, addr, end);
  gpumem_status status = GPUMEM_OK;
  for (uintptr_t cursor = addr; cursor < end && status == GPUMEM_OK;) {
    uintptr_t next = piece_end(self, large, cursor, end);
    gpumem__vmm_handle handle;
    status = piece_memory(self, next - cursor, &handle);
    if (status == GPUMEM_OK) {
      status = dev->vmm_map((void *)cursor, next - cursor, handle);
      if (status != GPUMEM_OK)
        dev->vmm_destroy(handle);
    }
    if (status == GPUMEM_OK) {
      size_t held = bytes < next - cursor ? bytes : next - cursor;
      bytes -= held;
      filed[count++] = (mapping){cursor, next - cursor, held, handle, next == end};
    }
    cursor = next;
  }
  /* Access for the whole run at once: the driver's cost is per call more than per byte. */
  if (status == GPUMEM_OK)
    status = dev->vmm_set_access((void *)addr, size, device);
  *stranded = 0;
  if (status != GPUMEM_OK) {
    size_t mapped = count > 0 ? filed[count - 1].addr + filed[count - 1].size - addr : 0;
    if (mapped > 0 && dev->vmm_unmap((void *)addr, mapped) != GPUMEM_OK) {
      for (size_t i = 0; i < count; i++)
        filed[i] = (mapping){filed[i].addr, filed[i].size, 0, filed[i].handle, true};
      gpumem__sorted_remove_range(&self->mappings, at + count, pieces - count);
      *stranded = mapped;
      return status;
    }
    for (size_t i = 0; i < count; i++)
      dev->vmm_destroy(filed[i].handle);
    gpumem__sorted_remove_range(&self->mappings, at, pieces);
  }
  return status;
}

/* Allocates at `want` (0: anywhere). With `quiet`, a taken or exhausted address range fails
 * without a message, for a caller that will try elsewhere. */
static gpumem_status allocate_at(vmm_resource *self, uintptr_t want, size_t bytes, size_t alignment,
                                 bool quiet, void **ptr) {
  gpumem_resource *mr = &self->header;
  size_t size = gpumem__align_up(bytes, self->granularity);
  if (size < bytes) {
    gpumem__note_oom(GPUMEM__OOM_TOO_LARGE, mr, bytes);
    return gpumem__fail_out_of_memory(mr, bytes, "the size overflows");
  }
  size_t va_alignment = alignment > self->granularity ? alignment : self->granularity;
  /* More than the whole range can never fit: say so before making room for its pieces. */
  if (size > self->options.reserve_size) {
    if (quiet)
      return GPUMEM_ERR_OUT_OF_MEMORY;
    gpumem__note_oom(GPUMEM__OOM_TOO_LARGE, mr, bytes);
    return gpumem__fail_out_of_memory(mr, bytes, "its reserved address range is full");
  }
  /* The range starts at a multiple of the granularity only, so the first multiple of a larger
   * alignment lies up to the alignment less a granule into it: a request with less room than
   * that after it would fit or not by where the driver put the range
   * (aligned(vmm(reserve=1GiB), alignment=32GiB) built in one process and failed in the
   * next). Such a request fails, whatever the range's address; one with that room always
   * fits an empty range. */
  if (!want && alignment > self->granularity &&
      alignment - self->granularity > self->options.reserve_size - size) {
    char why[128];
    snprintf(why, sizeof why, "its reserved address range cannot promise an alignment of %zu",
             alignment);
    gpumem__note_oom(GPUMEM__OOM_TOO_LARGE, mr, bytes);
    return gpumem__fail_out_of_memory(mr, bytes, why);
  }
  pthread_mutex_lock(&self->lock);
  uintptr_t addr;
  /* Room for the pieces and for the free ranges they can ever split off (never more than
   * the pieces plus one), so that the paths that give memory back never need to allocate. */
  size_t pieces = self->mappings.count + most_pieces(self, size);
  bool have_room = gpumem__sorted_reserve(&self->mappings, pieces) &&
                   gpumem__sorted_reserve(&self->free_ranges, pieces + 1);
  if (!have_room || !take_range(self, want, size, va_alignment, &addr)) {
    pthread_mutex_unlock(&self->lock);
    if (quiet && have_room)
      return GPUMEM_ERR_OUT_OF_MEMORY;
    gpumem__note_oom(have_room ? GPUMEM__OOM_LIMIT : GPUMEM__OOM_HOST, mr, bytes);
    return gpumem__fail_out_of_memory(
        mr, bytes, have_room ? "its reserved address range is full" : "the host is out of memory");
  }
  size_t stranded;
  gpumem_status status = map_pieces(self, addr, size, bytes, &stranded);
  if (status != GPUMEM_OK) {
    if (stranded < size)
      give_range(self, addr + stranded, size - stranded);
    gpumem__counters_add_reserved(&self->stats, stranded);
    pthread_mutex_unlock(&self->lock);
    if (status == GPUMEM_ERR_OUT_OF_MEMORY) {
      gpumem__note_oom(GPUMEM__OOM_DEVICE, mr, size);
      return gpumem__fail_out_of_memory(mr, bytes, "the device has no more physical memory");
    }
    return gpumem__fail_context(status, "vmm: mapping %zu bytes", size);
  }
  gpumem__counters_add_reserved(&self->stats, size);
  gpumem__counters_allocated(&self->stats, bytes);
  pthread_mutex_unlock(&self->lock);
  *ptr = (void *)addr;
  return GPUMEM_OK;
}

static gpumem_status vmm_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                  gpumem_stream stream, void **ptr) {
  return allocate_at((vmm_resource *)mr, 0, bytes, alignment, false, ptr);
}

/* True when piece `at` continues the allocation of the piece before it. */
static bool continues_allocation(const vmm_resource *self, size_t at) {
  if (at == 0)
    return false;
  const mapping *before = mapping_at(self, at - 1);
  return !before->ends_allocation && before->addr + before->size == mapping_at(self, at)->addr;
}

static gpumem_status vmm_deallocate(gpumem_resource *mr, void *ptr, size_t bytes, size_t alignment,
                                    gpumem_stream stream) {
  vmm_resource *self = (vmm_resource *)mr;
  pthread_mutex_lock(&self->lock);
  size_t at = gpumem__sorted_find(&self->mappings, (uintptr_t)ptr);
  gpumem_status status = GPUMEM_OK;
  if (at == self->mappings.count || continues_allocation(self, at)) {
    status = gpumem__fail(GPUMEM_ERR_MISUSE,
                          "deallocate of %p (%zu bytes) from resource 'vmm': that pointer is "
                          "not a live allocation of this resource (never allocated here, or "
                          "already freed)",
                          ptr, bytes);
  } else {
    size_t count = 1, allocated = mapping_at(self, at)->requested;
    for (; !mapping_at(self, at + count - 1)->ends_allocation; count++)
      allocated += mapping_at(self, at + count)->requested;
    size_t requested;
    if (allocated != bytes)
      status = gpumem__fail(GPUMEM_ERR_MISUSE,
                            "deallocate of %p from resource 'vmm' with %zu bytes, but it was "
                            "allocated with %zu bytes",
                            ptr, bytes, allocated);
    else if ((status = unmap_pieces(self, at, count, stream, &requested)) == GPUMEM_OK)
      gpumem__counters_bump(&self->stats.live_count, (uint64_t)-1);
  }
  pthread_mutex_unlock(&self->lock);
  return status;
}

/* The placement operation of the contract: see gpumem__resource_ops.unmap_pieces. */
static gpumem_status vmm_unmap_pieces(gpumem_resource *mr, uintptr_t addr, size_t size,
                                      int *allocations_added) {
  vmm_resource *self = (vmm_resource *)mr;
  pthread_mutex_lock(&self->lock);
  size_t at = gpumem__sorted_find(&self->mappings, addr), count = 0;
  uintptr_t cursor = addr;
  /* Whole pieces of one allocation, each starting where the one before it ends. */
  while (at + count < self->mappings.count && mapping_at(self, at + count)->addr == cursor &&
         cursor < addr + size && (count == 0 || !mapping_at(self, at + count - 1)->ends_allocation))
    cursor += mapping_at(self, at + count++)->size;
  gpumem_status status = GPUMEM_OK;
  if (count == 0 || cursor != addr + size) {
    status = gpumem__fail(
        GPUMEM_ERR_INTERNAL,
        "vmm: unmapping %zu bytes at %p: not a run of whole mapped pieces of one allocation", size,
        (void *)addr);
  } else {
    /* An allocation cut in the middle becomes two; one cut at an end stays one. */
    bool front_stays = continues_allocation(self, at);
    bool back_stays = !mapping_at(self, at + count - 1)->ends_allocation;
    size_t requested;
    status = unmap_pieces(self, at, count, NULL, &requested);
    if (status == GPUMEM_OK) {
      if (front_stays)
        mapping_at(self, at - 1)->ends_allocation = true;
      *allocations_added = (int)front_stays + (int)back_stays - 1;
      gpumem__counters_bump(&self->stats.live_count, (uint64_t)(int64_t)*allocations_added);
    }
  }
  pthread_mutex_unlock(&self->lock);
  return status;
}

static gpumem_status vmm_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  return gpumem__counters_query(&((const vmm_resource *)mr)->stats, what, out);
}

static void vmm_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const vmm_resource *self = (const vmm_resource *)mr;
  snprintf(buf, size, "vmm(reserve=%zu, piece=%zu)", self->options.reserve_size,
           self->options.piece_size);
}

static void release_everything(vmm_resource *self) {
  const gpumem__device_ops *dev = self->header.dev;
  free_held(self);
  for (size_t i = 0; i < self->mappings.count; i++) {
    dev->vmm_unmap((void *)mapping_at(self, i)->addr, mapping_at(self, i)->size);
    dev->vmm_destroy(mapping_at(self, i)->handle);
  }
  if (self->base)
    dev->vmm_release((void *)self->base, self->options.reserve_size);
  gpumem__sorted_free(&self->mappings);
  gpumem__sorted_free(&self->free_ranges);
  pthread_mutex_destroy(&self->lock);
  free(self);
}

/* Only pieces of no allocation are left when a vmm resource is destroyed (pieces stranded
 * by a failed undo). Unmaps them from the last; one that cannot be unmapped stops the
 * destroy, which leaves the resource valid with what is still mapped, to be tried again. */
static gpumem_status vmm_destroy(gpumem_resource *mr) {
  vmm_resource *self = (vmm_resource *)mr;
  const gpumem__device_ops *dev = mr->dev;
  gpumem__holder_remove(&self->holder);
  while (self->mappings.count > 0) {
    const mapping *last = mapping_at(self, self->mappings.count - 1);
    gpumem_status status = dev->vmm_unmap((void *)last->addr, last->size);
    if (status != GPUMEM_OK) {
      gpumem__holder_add(&self->holder, mr); /* it lives on, holding what is left */
      return gpumem__fail_context(status, "vmm: unmapping %zu bytes at %p to destroy it",
                                  last->size, (void *)last->addr);
    }
    dev->vmm_destroy(last->handle);
    gpumem__counters_sub_reserved(&self->stats, last->size);
    gpumem__sorted_remove_at(&self->mappings, self->mappings.count - 1);
  }
  release_everything(self);
  return GPUMEM_OK;
}

/* The placement operation of the contract: see gpumem__resource_ops.hold_pieces. */
static void vmm_hold_pieces(gpumem_resource *mr, bool hold) {
  vmm_resource *self = (vmm_resource *)mr;
  pthread_mutex_lock(&self->lock);
  if (hold)
    self->holders++;
  else if (--self->holders == 0)
    free_held(self);
  pthread_mutex_unlock(&self->lock);
}

/* The placement operation of the contract: see gpumem__resource_ops.allocate_at. */
static gpumem_status vmm_allocate_at(gpumem_resource *mr, uintptr_t addr, size_t bytes,
                                     void **ptr) {
  return allocate_at((vmm_resource *)mr, addr, bytes, GPUMEM_DEFAULT_ALIGNMENT, true, ptr);
}

static const gpumem__resource_ops vmm_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "vmm",
    .allocate = vmm_allocate,
    .deallocate = vmm_deallocate,
    .query = vmm_query,
    .describe = vmm_describe,
    .destroy = vmm_destroy,
    .allocate_at = vmm_allocate_at,
    .unmap_pieces = vmm_unmap_pieces,
    .hold_pieces = vmm_hold_pieces,
};

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
  /* Within the range (which is whole granules), so that rounding up cannot overflow. */
  size_t piece = options->piece_size ? options->piece_size : DEFAULT_PIECE;
  piece = piece < options->reserve_size ? piece : options->reserve_size;
  options->piece_size = gpumem__align_up(piece, *granularity);
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
  self->holder = (gpumem__holder){&self->holder, &self->holder, &self->header};
  pthread_mutex_init(&self->lock, NULL);
  self->options = options;
  self->granularity = granularity;
  self->free_ranges = (gpumem__sorted)GPUMEM__SORTED_INIT(va_range);
  self->mappings = (gpumem__sorted)GPUMEM__SORTED_INIT(mapping);
  gpumem__counters_init(&self->stats);
  void *base = NULL;
  status = dev->vmm_reserve(device, options.reserve_size, granularity, &base);
  if (status == GPUMEM_OK) {
    self->base = (uintptr_t)base;
    self->header.caps = (gpumem__capabilities){
        .memory = GPUMEM_MEMORY_DEVICE,
        .places_at_address = true,
        .granularity = granularity,
        .piece_size = options.piece_size,
        .large_block_size = LARGE_BLOCK_PIECES * options.piece_size,
        .large_piece_size = 2 * options.piece_size,
        .range_base = self->base,
        .range_size = options.reserve_size,
    };
    if (!gpumem__sorted_insert(&self->free_ranges, &(va_range){self->base, options.reserve_size}))
      status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_vmm_create: out of host memory");
  }
  if (status != GPUMEM_OK) {
    release_everything(self);
    return gpumem__fail_context(status, "gpumem_vmm_create: reserving %zu bytes of address space",
                                options.reserve_size);
  }
  gpumem__holder_add(&self->holder, &self->header);
  *out = &self->header;
  return GPUMEM_OK;
}
