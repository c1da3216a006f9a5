/* size_set.h: an exact set of sizes, which a pool keeps of the large requests it has served
 * so that its default release of holes can tell a loop's recurring shapes from sizes it has
 * never seen (src/suballoc/pool_trim.c). Open addressing with linear probing over sizes in
 * 256-byte units; the table is made at the first size and doubles as it fills, up to
 * GPUMEM__SIZE_SET_MOST sizes, past which the set holds what it has and adds nothing more.
 * A program that draws most of its sizes anew is not repeating a loop's shapes (a random
 * workload), and a set that followed it would cost ever more: once it holds
 * GPUMEM__SIZE_SET_JUDGED_FROM sizes, where more than half of a window of
 * GPUMEM__SIZE_SET_WINDOW requests were new sizes, the set closes for good, frees its table
 * and holds nothing from then on. A loop whose shapes vary (random lengths, graphs
 * of random sizes) asks for a few new sizes a step, and over a long run for thousands: on
 * the 32 recorded traces at most 20% of a window of 512 were new. No locking: the owner
 * locks. */
#ifndef GPUMEM_CORE_SIZE_SET_H
#define GPUMEM_CORE_SIZE_SET_H

#include "core/internal.h"

#define GPUMEM__SIZE_SET_FIRST_LOG2 12 /* 4,096 slots at first */
#define GPUMEM__SIZE_SET_MOST_LOG2 16  /* 65,536 at most: 256 KiB */
/* Half the slots: probe runs stay short. */
#define GPUMEM__SIZE_SET_MOST (((size_t)1 << GPUMEM__SIZE_SET_MOST_LOG2) / 2)
#define GPUMEM__SIZE_SET_WINDOW 1024u
/* Windows are judged only once the set holds this many sizes, the most it held before it
 * grew: no program's set closes sooner than it did then (a model load of many shapes, then
 * a loop). */
#define GPUMEM__SIZE_SET_JUDGED_FROM 2048u
#define GPUMEM__SIZE_SET_UNIT_SHIFT 8

typedef struct gpumem__size_set {
  uint32_t *slots; /* sizes in units, 0 where empty; NULL until the first size, or closed */
  uint32_t count;
  uint8_t slots_log2; /* the table's size, once made */
  bool full;          /* at the most: holds its sizes, adds no more */
  bool closed;        /* holds nothing, adds nothing */
  /* Requests added since the window began, and how many of them were new sizes. */
  uint32_t window_requests, window_new;
} gpumem__size_set;

static inline size_t gpumem__size_set_slots(const gpumem__size_set *set) {
  return (size_t)1 << set->slots_log2;
}

/* The slot where `units`' probe run starts in a table of 2^log2 slots (Fibonacci hashing). */
static inline size_t gpumem__size_set_home(uint32_t units, unsigned log2) {
  return (size_t)(((uint64_t)units * 0x9E3779B97F4A7C15ull) >> (64 - log2));
}

/* The size in units, or 0 for a size the set does not hold: one that is not a whole number
 * of units, or that has too many for 32 bits (a TiB and up), or 0. */
static inline uint32_t gpumem__size_set_units(size_t size) {
  if (size % ((size_t)1 << GPUMEM__SIZE_SET_UNIT_SHIFT) != 0 ||
      size >> GPUMEM__SIZE_SET_UNIT_SHIFT > UINT32_MAX)
    return 0;
  return (uint32_t)(size >> GPUMEM__SIZE_SET_UNIT_SHIFT);
}

/* Whether the set's table holds a size of `units` units (the table made, `units` not 0): a
 * walk of its probe run. */
static inline bool gpumem__size_set_holds(const gpumem__size_set *set, uint32_t units) {
  size_t mask = gpumem__size_set_slots(set) - 1;
  for (size_t i = gpumem__size_set_home(units, set->slots_log2); set->slots[i]; i = (i + 1) & mask)
    if (set->slots[i] == units)
      return true;
  return false;
}

bool gpumem__size_set_contains(const gpumem__size_set *set, size_t size);

/* Whether adding sizes still does anything: the set is neither closed nor full. */
static inline bool gpumem__size_set_adds(const gpumem__size_set *set) {
  return !set->closed && !set->full;
}

/* Adds a size of `units` units that the set does not hold, out of line: the set's first
 * (the table is made), or a new one (the table may double, or the set be full), and the
 * window's judgment (the set may close). Without host memory for a table the size is not
 * added (a later one tries again); nothing fails. */
void gpumem__size_set_insert(gpumem__size_set *set, uint32_t units);

/* Adds `size`, a request's. In line: a loop asks for the sizes it had, which are found at
 * once. */
static inline void gpumem__size_set_add(gpumem__size_set *set, size_t size) {
  uint32_t units = gpumem__size_set_units(size);
  if (!gpumem__size_set_adds(set) || units == 0)
    return;
  if (set->window_requests < UINT32_MAX) /* a long loop with no new size saturates it */
    set->window_requests++;
  if (set->slots && gpumem__size_set_holds(set, units))
    return;
  gpumem__size_set_insert(set, units);
}

/* Closes the set: it holds nothing, and adds nothing. */
void gpumem__size_set_close(gpumem__size_set *set);

/* Checks the set's own structure (level 2's validators): a closed set has no table and no
 * count; an open one holds as many sizes as it counts, at most half its slots (and a full
 * one exactly the most), each found again from its home slot. False, with what is wrong in
 * `why`, when something is. */
bool gpumem__size_set_check(const gpumem__size_set *set, char *why, size_t why_size);

#endif /* GPUMEM_CORE_SIZE_SET_H */
