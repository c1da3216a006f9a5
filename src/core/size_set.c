/* size_set.c: the exact set of sizes (size_set.h), its rare paths: a new size, closing. */
#include "core/size_set.h"

#include <stdlib.h>

bool gpumem__size_set_contains(const gpumem__size_set *set, size_t size) {
  uint32_t units = gpumem__size_set_units(size);
  if (!set->slots || units == 0)
    return false;
  for (size_t i = gpumem__size_set_home(units); set->slots[i]; i = (i + 1) % GPUMEM__SIZE_SET_SLOTS)
    if (set->slots[i] == units)
      return true;
  return false;
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
