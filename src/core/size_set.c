/* size_set.c: the exact set of sizes (size_set.h), its rare paths: a new size, closing, the
 * check of its structure. */
#include "core/size_set.h"

#include <stdio.h>
#include <stdlib.h>

bool gpumem__size_set_contains(const gpumem__size_set *set, size_t size) {
  uint32_t units = gpumem__size_set_units(size);
  return set->slots && units != 0 && gpumem__size_set_holds(set, units);
}

void gpumem__size_set_insert(gpumem__size_set *set, uint32_t units) {
  if (set->count == GPUMEM__SIZE_SET_MOST) {
    gpumem__size_set_close(set);
    return;
  }
  if (!set->slots && !(set->slots = calloc(GPUMEM__SIZE_SET_SLOTS, sizeof *set->slots)))
    return;
  size_t i = gpumem__size_set_home(units);
  while (set->slots[i] && set->slots[i] != units)
    i = (i + 1) % GPUMEM__SIZE_SET_SLOTS;
  if (!set->slots[i]) {
    set->slots[i] = units;
    set->count++;
  }
}

void gpumem__size_set_close(gpumem__size_set *set) {
  free(set->slots);
  *set = (gpumem__size_set){.closed = true};
}

bool gpumem__size_set_check(const gpumem__size_set *set, char *why, size_t why_size) {
  if (set->closed || !set->slots) {
    if (set->count == 0 && !(set->closed && set->slots))
      return true;
    snprintf(why, why_size, "a %s set of sizes %s", set->closed ? "closed" : "tableless",
             set->slots ? "keeps its table" : "counts sizes");
    return false;
  }
  size_t held = 0;
  for (size_t i = 0; i < GPUMEM__SIZE_SET_SLOTS; i++) {
    if (!set->slots[i])
      continue;
    held++;
    if (!gpumem__size_set_holds(set, set->slots[i])) {
      snprintf(why, why_size, "the set of sizes holds %u units in slot %zu, out of its probe run",
               set->slots[i], i);
      return false;
    }
  }
  if (held != set->count || held > GPUMEM__SIZE_SET_MOST) {
    snprintf(why, why_size, "the set of sizes counts %u, its table holds %zu (at most %zu)",
             set->count, held, (size_t)GPUMEM__SIZE_SET_MOST);
    return false;
  }
  return true;
}
