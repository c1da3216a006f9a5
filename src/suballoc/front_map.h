/* front_map.h: a map of a pool's thread front (pool_front.c): from address to the blocks
 * the front holds or handed out, written under a lock by its writers, read without any
 * lock by the threads that free the front's blocks.
 *
 * Such a reader (a consumer freeing what a producer allocated) must not write the map's
 * lines: sixteen threads taking a lock on the producer's maps and deleting from them made
 * every producer allocation wait for lines the consumers held. So a writer brackets each
 * change with the map's sequence number (odd while it writes), and a reader looks the
 * address up between two reads of it, again until they agree (a seqlock). Slots are
 * atomics read and written relaxed; a table's shape is fixed for its life, and a larger
 * table is built and published before the writer's change, so readers never wait for the
 * copy; an outgrown table is kept until the map's end, since a reader may still be in it.
 *
 * The same open addressing as gpumem__block_map (block.h): linear probing, backward-shift
 * deletion; but at most a quarter full (gpumem__front_map_room): at an eighth, as the
 * pool's own map, 16 threads on their own streams ran no faster (docs/gpu-runs.md,
 * eighteenth session, runs 10, 13 and 14), and sixteen threads' maps would take twice the
 * memory. */
#ifndef GPUMEM_SUBALLOC_FRONT_MAP_H
#define GPUMEM_SUBALLOC_FRONT_MAP_H

#include "core/biased_lock.h"
#include "suballoc/block.h"

typedef struct front_map_slot {
  _Atomic uintptr_t addr; /* 0: empty */
  gpumem__block *_Atomic block;
} front_map_slot;

/* A table and its shape, fixed for its life: a reader loads one pointer and has all three. */
typedef struct front_table {
  struct front_table *outgrown; /* the table this one replaced, kept for its readers */
  size_t mask;                  /* capacity - 1, the capacity a power of two */
  unsigned shift;               /* 64 - log2(capacity): a hash keeps its top bits */
  front_map_slot slots[];
} front_table;

typedef struct front_map {
  atomic_uint seq;            /* odd while a writer changes the map */
  front_table *_Atomic table; /* NULL until made */
  size_t count;               /* writers only */
} front_map;

/* Makes the map's table; false when host memory is exhausted (the map stays unmade). Under
 * the writers' lock. */
bool gpumem__front_map_init(front_map *map);
/* Frees the map, the tables it outgrew too (no reader left). */
void gpumem__front_map_destroy(front_map *map);
/* Doubles the table, published whole (readers go on in the old one, which it copies and
 * keeps); false when host memory is exhausted (nothing changed then). Under the writers'
 * lock. */
GPUMEM_COLD bool gpumem__front_map_grow(front_map *map);
/* Grows the made map until `extra` more blocks go in without growing; false when host
 * memory is exhausted. Under the writers' lock. */
bool gpumem__front_map_reserve(front_map *map, size_t extra);
/* Calls fn on every block of the map (its writers stopped). */
void gpumem__front_map_each(const front_map *map, void (*fn)(gpumem__block *block, void *user),
                            void *user);
/* Checks the map as gpumem__block_map_check does (every writer and reader stopped). */
bool gpumem__front_map_check(const front_map *map, bool (*fn)(gpumem__block *block, void *user),
                             void *user, char *why, size_t why_size);

static inline front_table *gpumem__front_map_table(const front_map *map) {
  return atomic_load_explicit(&map->table, memory_order_acquire);
}

/* The most blocks table `t` holds before the map grows. */
static inline size_t gpumem__front_map_room(const front_table *t) {
  return (t->mask + 1) / 4;
}

static inline size_t gpumem__front_map_home(const front_table *t, uintptr_t addr) {
  return (size_t)(((uint64_t)addr * 0x9E3779B97F4A7C15ull) >> t->shift);
}

static inline uintptr_t gpumem__front_slot_addr(const front_map_slot *slot) {
  return atomic_load_explicit(&slot->addr, memory_order_relaxed);
}

/* The slot holding addr, or the empty slot ending its probe run (a writer's view). */
static inline size_t gpumem__front_table_slot_of(const front_table *t, uintptr_t addr) {
  size_t i = gpumem__front_map_home(t, addr);
  uintptr_t at;
  while ((at = gpumem__front_slot_addr(&t->slots[i])) && at != addr)
    i = (i + 1) & t->mask;
  return i;
}

static inline void gpumem__front_map_write_begin(front_map *map) {
  unsigned seq = atomic_load_explicit(&map->seq, memory_order_relaxed);
  atomic_store_explicit(&map->seq, seq + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release); /* odd before any change */
}

static inline void gpumem__front_map_write_end(front_map *map) {
  unsigned seq = atomic_load_explicit(&map->seq, memory_order_relaxed);
  atomic_store_explicit(&map->seq, seq + 1, memory_order_release);
}

/* Files `block` in the made map; false when the table had to grow and host memory is
 * exhausted (nothing changed then). Under the writers' lock. */
static inline bool gpumem__front_map_insert(front_map *map, gpumem__block *block) {
  front_table *t = gpumem__front_map_table(map);
  if (map->count + 1 > gpumem__front_map_room(t)) {
    if (!gpumem__front_map_grow(map))
      return false;
    t = gpumem__front_map_table(map);
  }
  gpumem__front_map_write_begin(map);
  front_map_slot *slot = &t->slots[gpumem__front_table_slot_of(t, block->addr)];
  atomic_store_explicit(&slot->block, block, memory_order_relaxed);
  atomic_store_explicit(&slot->addr, block->addr, memory_order_relaxed);
  map->count++;
  gpumem__front_map_write_end(map);
  return true;
}

/* Removes the block at addr; returns it, NULL when absent. Under the writers' lock. */
static inline gpumem__block *gpumem__front_map_take(front_map *map, uintptr_t addr) {
  front_table *t = gpumem__front_map_table(map);
  if (!t)
    return NULL;
  size_t hole = gpumem__front_table_slot_of(t, addr);
  if (!gpumem__front_slot_addr(&t->slots[hole]))
    return NULL;
  gpumem__block *found = atomic_load_explicit(&t->slots[hole].block, memory_order_relaxed);
  gpumem__front_map_write_begin(map);
  /* Backward-shift deletion keeps probe runs unbroken without tombstones. */
  for (size_t i = hole;;) {
    i = (i + 1) & t->mask;
    uintptr_t next = gpumem__front_slot_addr(&t->slots[i]);
    if (!next)
      break;
    size_t home = gpumem__front_map_home(t, next);
    bool home_in_gap = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (!home_in_gap) {
      atomic_store_explicit(&t->slots[hole].block,
                            atomic_load_explicit(&t->slots[i].block, memory_order_relaxed),
                            memory_order_relaxed);
      atomic_store_explicit(&t->slots[hole].addr, next, memory_order_relaxed);
      hole = i;
    }
  }
  atomic_store_explicit(&t->slots[hole].addr, 0, memory_order_relaxed);
  atomic_store_explicit(&t->slots[hole].block, NULL, memory_order_relaxed);
  map->count--;
  gpumem__front_map_write_end(map);
  return found;
}

/* One reading of the block at addr (NULL when absent) for gpumem__front_map_lookup; false
 * when a writer was mid-change or changed the map meanwhile, and the reading counts for
 * nothing. */
static inline bool gpumem__front_map_read(const front_map *map, uintptr_t addr,
                                          gpumem__block **found) {
  unsigned seq = atomic_load_explicit(&map->seq, memory_order_acquire);
  if (seq & 1)
    return false;
  *found = NULL;
  front_table *t = gpumem__front_map_table(map);
  if (t) {
    size_t i = gpumem__front_map_home(t, addr);
    /* At most the table's size: a torn view may have no empty slot. */
    for (size_t n = 0; n <= t->mask; n++, i = (i + 1) & t->mask) {
      uintptr_t at = gpumem__front_slot_addr(&t->slots[i]);
      if (!at)
        break;
      if (at == addr) {
        *found = atomic_load_explicit(&t->slots[i].block, memory_order_relaxed);
        break;
      }
    }
  }
  atomic_thread_fence(memory_order_acquire);
  return atomic_load_explicit(&map->seq, memory_order_relaxed) == seq;
}

/* gpumem__front_map_lookup's readings after a first one that a writer spoiled: spins, then
 * yields to a writer that was preempted. Out of line, so that the lookup's callers, the
 * fronts' frees, keep no registers for its call. */
gpumem__block *gpumem__front_map_lookup_again(const front_map *map, uintptr_t addr);

/* The block at addr, NULL when absent: a reader's view, under no lock, as the map was at
 * some moment of the call. */
static inline gpumem__block *gpumem__front_map_lookup(const front_map *map, uintptr_t addr) {
  gpumem__block *found;
  if (GPUMEM_LIKELY(gpumem__front_map_read(map, addr, &found)))
    return found;
  return gpumem__front_map_lookup_again(map, addr);
}

#endif /* GPUMEM_SUBALLOC_FRONT_MAP_H */
