/* size_set.h: an exact set of sizes, which a pool keeps of the large requests it has served
 * so that its default release of holes can tell a loop's recurring shapes from sizes it has
 * never seen (src/suballoc/pool_trim.c). Open addressing with linear probing over sizes in
 * 256-byte units; the table is made at the first size. The set holds at most
 * GPUMEM__SIZE_SET_MOST sizes: at a new size past that it closes for good, frees its table
 * and holds nothing from then on. A program that asks for that many different sizes is not
 * repeating a loop's shapes (a random workload draws every size anew), and a set that grew
 * with it would cost ever more. No locking: the owner locks. */
#ifndef GPUMEM_CORE_SIZE_SET_H
#define GPUMEM_CORE_SIZE_SET_H

#include "core/internal.h"

#define GPUMEM__SIZE_SET_SLOTS_LOG2 12
#define GPUMEM__SIZE_SET_SLOTS ((size_t)1 << GPUMEM__SIZE_SET_SLOTS_LOG2)
/* Half the slots: probe runs stay short. */
#define GPUMEM__SIZE_SET_MOST (GPUMEM__SIZE_SET_SLOTS / 2)
#define GPUMEM__SIZE_SET_UNIT_SHIFT 8

typedef struct gpumem__size_set {
  uint32_t *slots; /* sizes in units, 0 where empty; NULL until the first size, or closed */
  uint32_t count;
  bool closed;
} gpumem__size_set;

/* The slot where `units`' probe run starts (Fibonacci hashing). */
static inline size_t gpumem__size_set_home(uint32_t units) {
  return (size_t)(((uint64_t)units * 0x9E3779B97F4A7C15ull) >> (64 - GPUMEM__SIZE_SET_SLOTS_LOG2));
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
  for (size_t i = gpumem__size_set_home(units); set->slots[i]; i = (i + 1) % GPUMEM__SIZE_SET_SLOTS)
    if (set->slots[i] == units)
      return true;
  return false;
}

bool gpumem__size_set_contains(const gpumem__size_set *set, size_t size);

/* Adds a size of `units` units that the set does not hold, out of line: the set's first
 * (the table is made), or a new one, or one past the most (the set closes). Without host
 * memory for the table the size is not added (a later one tries again); nothing fails. */
void gpumem__size_set_insert(gpumem__size_set *set, uint32_t units);

/* Adds `size`. In line: a loop asks for the sizes it had, which are found at once. */
static inline void gpumem__size_set_add(gpumem__size_set *set, size_t size) {
  uint32_t units = gpumem__size_set_units(size);
  if (set->closed || units == 0 || (set->slots && gpumem__size_set_holds(set, units)))
    return;
  gpumem__size_set_insert(set, units);
}

/* Closes the set: it holds nothing, and adds nothing. */
void gpumem__size_set_close(gpumem__size_set *set);

/* Checks the set's own structure (level 2's validators): a closed set has no table and no
 * count; an open one holds as many sizes as it counts, at most GPUMEM__SIZE_SET_MOST, each
 * found again from its home slot. False, with what is wrong in `why`, when something is. */
bool gpumem__size_set_check(const gpumem__size_set *set, char *why, size_t why_size);

#endif /* GPUMEM_CORE_SIZE_SET_H */
