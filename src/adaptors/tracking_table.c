/* tracking_table.c: the tracking adaptor's table of outstanding allocations (see
 * tracking.h): shards of open-addressing hash tables, each under its own biased lock.
 *
 * Linear probing with backward-shift deletion, as core/ptrmap.c: no tombstones, so a program
 * that allocates and frees millions of times keeps short probe runs. A shard grows when an
 * insert would take it past half full, counting the room promised to inserts that must not
 * fail (a piece of an allocation cut off by a trim, recorded after the upstream has cut it). */
#include "adaptors/tracking.h"

#include "core/pointer_hash.h"

#include <stdlib.h>
#include <string.h>

/* The top bits pick the shard; the low bits, a slot in it. */
static int shard_index(uintptr_t ptr) {
  return (int)((gpumem__hash_pointer(ptr) >> 58) % GPUMEM__TRACKING_SHARDS);
}

static gpumem__tracking_shard *shard_of(gpumem__tracking_table *table, uintptr_t ptr) {
  return &table->shards[shard_index(ptr)];
}

static void lock(gpumem__tracking_shard *shard) {
  gpumem__biased_lock_take(&shard->lock);
}

static void unlock(gpumem__tracking_shard *shard) {
  gpumem__biased_lock_release(&shard->lock);
}

/* A counter written under the shard's lock: a load and a store. */
static void bump(atomic_uint_fast64_t *counter, uint64_t delta) {
  atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + delta,
                        memory_order_relaxed);
}

void gpumem__tracking_table_init(gpumem__tracking_table *table) {
  memset(table, 0, sizeof *table);
  for (int i = 0; i < GPUMEM__TRACKING_SHARDS; i++) {
    atomic_init(&table->shards[i].bytes, 0);
    atomic_init(&table->shards[i].count, 0);
  }
}

void gpumem__tracking_table_destroy(gpumem__tracking_table *table) {
  for (int i = 0; i < GPUMEM__TRACKING_SHARDS; i++) {
    gpumem__tracking_shard *shard = &table->shards[i];
    for (size_t s = 0; s < shard->capacity; s++)
      if (shard->slots[s].ptr)
        free(shard->slots[s].stack);
    free(shard->slots);
  }
}

/* Index of ptr's slot, or of the empty slot where it would go. Needs capacity > 0. */
static size_t find_slot(const gpumem__tracking_shard *shard, uintptr_t ptr) {
  size_t mask = shard->capacity - 1;
  size_t i = gpumem__hash_pointer(ptr) & mask;
  while (shard->slots[i].ptr != 0 && shard->slots[i].ptr != ptr)
    i = (i + 1) & mask;
  return i;
}

/* ptr's slot, or -1 when it is not in the shard. */
static ptrdiff_t lookup(const gpumem__tracking_shard *shard, uintptr_t ptr) {
  if (shard->capacity == 0)
    return -1;
  size_t i = find_slot(shard, ptr);
  return shard->slots[i].ptr == ptr ? (ptrdiff_t)i : -1;
}

/* Makes room for one more entry beside the promised ones, keeping the shard at most half
 * full. False when the host has no memory for a larger one. */
static bool make_room(gpumem__tracking_shard *shard) {
  if ((shard->used + shard->reserved + 1) * 2 <= shard->capacity)
    return true;
  size_t capacity = shard->capacity ? shard->capacity * 2 : 64;
  gpumem__tracking_entry *slots = calloc(capacity, sizeof *slots);
  if (!slots)
    return false;
  gpumem__tracking_shard grown = {.slots = slots, .capacity = capacity};
  for (size_t i = 0; i < shard->capacity; i++)
    if (shard->slots[i].ptr != 0)
      slots[find_slot(&grown, shard->slots[i].ptr)] = shard->slots[i];
  free(shard->slots);
  shard->slots = slots;
  shard->capacity = capacity;
  return true;
}

static GPUMEM_COLD gpumem_status no_room(gpumem__tracking_shard *shard) {
  unlock(shard);
  return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                      "tracking: out of host memory for the table of outstanding allocations");
}

gpumem_status gpumem__tracking_insert(gpumem__tracking_table *table,
                                      const gpumem__tracking_entry *entry, bool reserved,
                                      gpumem__tracking_entry *old,
                                      gpumem__tracking_replaced *replaced) {
  gpumem__tracking_shard *shard = shard_of(table, entry->ptr);
  lock(shard);
  if (reserved)
    shard->reserved--; /* the promised room is this insert's */
  else if (GPUMEM_UNLIKELY(!make_room(shard)))
    return no_room(shard);
  size_t i = find_slot(shard, entry->ptr);
  gpumem__tracking_entry *slot = &shard->slots[i];
  *replaced = GPUMEM__TRACKING_NEW;
  if (GPUMEM_UNLIKELY(slot->ptr == entry->ptr)) {
    *replaced = slot->freeing ? GPUMEM__TRACKING_TAKEOVER : GPUMEM__TRACKING_STALE;
    *old = *slot;
    bump(&shard->bytes, -(uint64_t)slot->bytes);
    bump(&shard->count, (uint64_t)-1);
    shard->used--;
  }
  *slot = *entry;
  slot->freeing = 0;
  shard->used++;
  bump(&shard->bytes, entry->bytes);
  bump(&shard->count, 1);
  unlock(shard);
  return GPUMEM_OK;
}

gpumem_status gpumem__tracking_reserve(gpumem__tracking_table *table, uintptr_t ptr) {
  gpumem__tracking_shard *shard = shard_of(table, ptr);
  lock(shard);
  if (!make_room(shard))
    return no_room(shard);
  shard->reserved++;
  unlock(shard);
  return GPUMEM_OK;
}

void gpumem__tracking_unreserve(gpumem__tracking_table *table, uintptr_t ptr) {
  gpumem__tracking_shard *shard = shard_of(table, ptr);
  lock(shard);
  shard->reserved--;
  unlock(shard);
}

/* Marks the entry in slot i of the locked shard: its copy goes to *entry. */
static uint32_t mark_slot(gpumem__tracking_shard *shard, size_t i, gpumem__tracking_entry *entry) {
  gpumem__tracking_entry *slot = &shard->slots[i];
  *entry = *slot;
  if (slot->freeing)
    return 0; /* another free of it is in flight */
  if (++shard->serial == 0)
    shard->serial = 1;
  slot->freeing = shard->serial;
  return shard->serial;
}

uint32_t gpumem__tracking_mark(gpumem__tracking_table *table, uintptr_t ptr,
                               gpumem__tracking_entry *entry) {
  gpumem__tracking_shard *shard = shard_of(table, ptr);
  lock(shard);
  ptrdiff_t i = lookup(shard, ptr);
  uint32_t mark = 0;
  if (GPUMEM_LIKELY(i >= 0))
    mark = mark_slot(shard, (size_t)i, entry);
  else
    entry->ptr = 0;
  unlock(shard);
  return mark;
}

uint32_t gpumem__tracking_mark_containing(gpumem__tracking_table *table, uintptr_t addr,
                                          gpumem__tracking_entry *entry) {
  uint32_t mark = gpumem__tracking_mark(table, addr, entry);
  if (entry->ptr)
    return mark;
  for (int s = 0; s < GPUMEM__TRACKING_SHARDS; s++) {
    gpumem__tracking_shard *shard = &table->shards[s];
    lock(shard);
    for (size_t i = 0; i < shard->capacity; i++) {
      const gpumem__tracking_entry *slot = &shard->slots[i];
      if (slot->ptr && slot->ptr < addr && addr < slot->ptr + slot->bytes) {
        mark = mark_slot(shard, i, entry);
        unlock(shard);
        return mark;
      }
    }
    unlock(shard);
  }
  return 0;
}

/* Backward-shift deletion: later members of the probe run move into the hole. */
static void remove_slot(gpumem__tracking_shard *shard, size_t hole) {
  size_t mask = shard->capacity - 1;
  size_t i = hole;
  for (;;) {
    i = (i + 1) & mask;
    if (shard->slots[i].ptr == 0)
      break;
    size_t home = gpumem__hash_pointer(shard->slots[i].ptr) & mask;
    if (gpumem__probe_fills_hole(hole, i, home)) {
      shard->slots[hole] = shard->slots[i];
      hole = i;
    }
  }
  shard->slots[hole].ptr = 0;
  shard->slots[hole].stack = NULL;
  shard->used--;
}

bool gpumem__tracking_finish(gpumem__tracking_table *table, uintptr_t ptr, uint32_t mark,
                             size_t bytes, gpumem__tracking_stack **stack) {
  gpumem__tracking_shard *shard = shard_of(table, ptr);
  lock(shard);
  ptrdiff_t i = lookup(shard, ptr);
  if (GPUMEM_UNLIKELY(i < 0 || shard->slots[i].freeing != mark)) {
    unlock(shard);
    return false;
  }
  gpumem__tracking_entry *slot = &shard->slots[i];
  bump(&shard->bytes, (uint64_t)bytes - slot->bytes);
  if (bytes == 0) {
    *stack = slot->stack;
    bump(&shard->count, (uint64_t)-1);
    remove_slot(shard, (size_t)i);
  } else {
    slot->bytes = bytes;
    slot->freeing = 0;
  }
  unlock(shard);
  return true;
}

uint64_t gpumem__tracking_bytes(const gpumem__tracking_table *table) {
  uint64_t sum = 0;
  for (int i = 0; i < GPUMEM__TRACKING_SHARDS; i++)
    sum += atomic_load_explicit(&table->shards[i].bytes, memory_order_relaxed);
  return sum;
}

uint64_t gpumem__tracking_count(const gpumem__tracking_table *table) {
  uint64_t sum = 0;
  for (int i = 0; i < GPUMEM__TRACKING_SHARDS; i++)
    sum += atomic_load_explicit(&table->shards[i].count, memory_order_relaxed);
  return sum;
}

/* ---------------------------------------------------------------------------------------
 * Copies for reports
 * ------------------------------------------------------------------------------------- */

void gpumem__tracking_free_copy(gpumem__tracking_entry *entries, size_t count) {
  for (size_t i = 0; i < count; i++)
    free(entries[i].stack);
  free(entries);
}

gpumem__tracking_stack *gpumem__tracking_copy_stack(const gpumem__tracking_stack *stack) {
  if (!stack)
    return NULL;
  size_t size = sizeof *stack + (size_t)stack->depth * sizeof stack->frames[0];
  gpumem__tracking_stack *copy = malloc(size);
  if (copy)
    memcpy(copy, stack, size);
  return copy;
}

/* Appends the locked shard's entries to entries[*count...] (room for them all), each with
 * its own copy of its stack. False when the host has no memory for a stack. */
static bool copy_shard(const gpumem__tracking_shard *shard, gpumem__tracking_entry *entries,
                       size_t *count) {
  for (size_t i = 0; i < shard->capacity; i++) {
    const gpumem__tracking_entry *slot = &shard->slots[i];
    if (!slot->ptr)
      continue;
    gpumem__tracking_entry copy = *slot;
    if (slot->stack && !(copy.stack = gpumem__tracking_copy_stack(slot->stack)))
      return false;
    entries[(*count)++] = copy;
  }
  return true;
}

static int by_address(const void *a, const void *b) {
  uintptr_t x = ((const gpumem__tracking_entry *)a)->ptr;
  uintptr_t y = ((const gpumem__tracking_entry *)b)->ptr;
  return (x > y) - (x < y);
}

gpumem_status gpumem__tracking_copy(gpumem__tracking_table *table, gpumem__tracking_entry **entries,
                                    size_t *count) {
  gpumem__tracking_entry *all = NULL;
  size_t have = 0, room = 0;
  for (int s = 0; s < GPUMEM__TRACKING_SHARDS; s++) {
    gpumem__tracking_shard *shard = &table->shards[s];
    lock(shard);
    /* Room grows outside the lock: the shard may have grown meanwhile, so look again. */
    while (have + shard->used > room) {
      size_t wanted = have + shard->used + 64;
      unlock(shard);
      gpumem__tracking_entry *grown = realloc(all, wanted * sizeof *grown);
      if (!grown)
        goto out_of_memory;
      all = grown;
      room = wanted;
      lock(shard);
    }
    bool copied = copy_shard(shard, all, &have);
    unlock(shard);
    if (!copied)
      goto out_of_memory;
  }
  if (have)
    qsort(all, have, sizeof *all, by_address);
  *entries = all;
  *count = have;
  return GPUMEM_OK;
out_of_memory:
  gpumem__tracking_free_copy(all, have);
  return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                      "tracking: out of host memory for a copy of the outstanding allocations");
}

/* ---------------------------------------------------------------------------------------
 * Validation (debug level 2)
 * ------------------------------------------------------------------------------------- */

static gpumem_status check_shard(const gpumem__tracking_shard *shard, int index) {
  if (shard->capacity & (shard->capacity - 1))
    return gpumem__fail(GPUMEM_ERR_INTERNAL,
                        "tracking: shard %d has a capacity of %zu slots, not a power of two", index,
                        shard->capacity);
  if (shard->capacity && (shard->used + shard->reserved) * 2 > shard->capacity)
    return gpumem__fail(GPUMEM_ERR_INTERNAL,
                        "tracking: shard %d holds %zu entries and %zu promised in %zu slots, "
                        "more than half",
                        index, shard->used, shard->reserved, shard->capacity);
  size_t used = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < shard->capacity; i++) {
    const gpumem__tracking_entry *e = &shard->slots[i];
    if (!e->ptr)
      continue;
    used++;
    bytes += e->bytes;
    if (e->bytes == 0)
      return gpumem__fail(GPUMEM_ERR_INTERNAL, "tracking: shard %d: %p is tracked with 0 bytes",
                          index, (void *)e->ptr);
    if (shard_index(e->ptr) != index)
      return gpumem__fail(GPUMEM_ERR_INTERNAL, "tracking: %p is in shard %d, not its own",
                          (void *)e->ptr, index);
    /* Reachable from its home: no empty slot and no copy of itself before it. */
    size_t mask = shard->capacity - 1;
    for (size_t j = gpumem__hash_pointer(e->ptr) & mask; j != i; j = (j + 1) & mask) {
      if (!shard->slots[j].ptr || shard->slots[j].ptr == e->ptr)
        return gpumem__fail(GPUMEM_ERR_INTERNAL,
                            "tracking: shard %d: %p in slot %zu cannot be found from its home "
                            "slot %zu (slot %zu is %s)",
                            index, (void *)e->ptr, i, (size_t)(gpumem__hash_pointer(e->ptr) & mask),
                            j, shard->slots[j].ptr ? "a copy of it" : "empty");
    }
    if (e->stack && (e->stack->depth < 0 || e->stack->depth > GPUMEM__TRACKING_MAX_DEPTH))
      return gpumem__fail(GPUMEM_ERR_INTERNAL, "tracking: %p has a stack of %d frames",
                          (void *)e->ptr, e->stack->depth);
  }
  if (used != shard->used)
    return gpumem__fail(GPUMEM_ERR_INTERNAL,
                        "tracking: shard %d counts %zu entries in use and holds %zu", index,
                        shard->used, used);
  uint64_t counted = atomic_load_explicit(&shard->count, memory_order_relaxed);
  uint64_t counted_bytes = atomic_load_explicit(&shard->bytes, memory_order_relaxed);
  if (counted != used || counted_bytes != bytes)
    return gpumem__fail(GPUMEM_ERR_INTERNAL,
                        "tracking: shard %d counts %llu allocations of %llu bytes and holds %zu "
                        "of %llu bytes",
                        index, (unsigned long long)counted, (unsigned long long)counted_bytes, used,
                        (unsigned long long)bytes);
  return GPUMEM_OK;
}

gpumem_status gpumem__tracking_validate(gpumem__tracking_table *table) {
  for (int s = 0; s < GPUMEM__TRACKING_SHARDS; s++) {
    gpumem__tracking_shard *shard = &table->shards[s];
    lock(shard);
    gpumem_status status = check_shard(shard, s);
    unlock(shard);
    if (status != GPUMEM_OK)
      return status;
  }
  return GPUMEM_OK;
}
