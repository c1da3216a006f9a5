/* size_set.c: the exact set of sizes (size_set.h), its rare paths: a new size, the table's
 * growth, the window's judgment, closing, the check of its structure. */
#include "core/size_set.h"

#include <stdio.h>
#include <stdlib.h>

bool gpumem__size_set_contains(const gpumem__size_set *set, size_t size) {
  uint32_t units = gpumem__size_set_units(size);
  return set->slots && units != 0 && gpumem__size_set_holds(set, units);
}

/* Files `units` in a table of 2^log2 slots that has room and does not hold it. */
static void place(uint32_t *slots, unsigned log2, uint32_t units) {
  size_t mask = ((size_t)1 << log2) - 1, i = gpumem__size_set_home(units, log2);
  while (slots[i])
    i = (i + 1) & mask;
  slots[i] = units;
}

/* A table of twice the slots, the sizes filed again; false (the old one kept) without host
 * memory. */
static bool grow(gpumem__size_set *set) {
  unsigned log2 = set->slots_log2 + 1u;
  uint32_t *slots = calloc((size_t)1 << log2, sizeof *slots);
  if (!slots)
    return false;
  for (size_t i = 0; i < gpumem__size_set_slots(set); i++)
    if (set->slots[i])
      place(slots, log2, set->slots[i]);
  free(set->slots);
  set->slots = slots;
  set->slots_log2 = (uint8_t)log2;
  return true;
}

void gpumem__size_set_insert(gpumem__size_set *set, uint32_t units) {
  /* The window is judged at its first new size past its length: a loop's windows may see
   * none, and one that draws every size anew reaches the judgment at once. */
  set->window_new++;
  if (set->window_requests >= GPUMEM__SIZE_SET_WINDOW) {
    if (set->count >= GPUMEM__SIZE_SET_JUDGED_FROM &&
        (uint64_t)set->window_new * 2 > set->window_requests) {
      gpumem__size_set_close(set);
      return;
    }
    set->window_requests = set->window_new = 0;
  }
  if (!set->slots) {
    if (!(set->slots = calloc((size_t)1 << GPUMEM__SIZE_SET_FIRST_LOG2, sizeof *set->slots)))
      return;
    set->slots_log2 = GPUMEM__SIZE_SET_FIRST_LOG2;
  } else if (set->count + 1 > gpumem__size_set_slots(set) / 2) {
    if (set->slots_log2 == GPUMEM__SIZE_SET_MOST_LOG2) {
      set->full = true;
      return;
    }
    if (!grow(set))
      return;
  }
  place(set->slots, set->slots_log2, units);
  set->count++;
}

void gpumem__size_set_close(gpumem__size_set *set) {
  free(set->slots);
  *set = (gpumem__size_set){.closed = true};
}

bool gpumem__size_set_check(const gpumem__size_set *set, char *why, size_t why_size) {
  if (set->closed || !set->slots) {
    if (set->count == 0 && !set->full && !(set->closed && set->slots))
      return true;
    snprintf(why, why_size, "a %s set of sizes %s", set->closed ? "closed" : "tableless",
             set->slots  ? "keeps its table"
             : set->full ? "is full"
                         : "counts sizes");
    return false;
  }
  if (set->slots_log2 < GPUMEM__SIZE_SET_FIRST_LOG2 ||
      set->slots_log2 > GPUMEM__SIZE_SET_MOST_LOG2) {
    snprintf(why, why_size, "the set of sizes has a table of 2^%u slots", set->slots_log2);
    return false;
  }
  size_t held = 0, slots = gpumem__size_set_slots(set);
  for (size_t i = 0; i < slots; i++) {
    if (!set->slots[i])
      continue;
    held++;
    if (!gpumem__size_set_holds(set, set->slots[i])) {
      snprintf(why, why_size, "the set of sizes holds %u units in slot %zu, out of its probe run",
               set->slots[i], i);
      return false;
    }
  }
  if (held != set->count || held > slots / 2 || (set->full && held != GPUMEM__SIZE_SET_MOST)) {
    snprintf(why, why_size, "the set of sizes counts %u, its table holds %zu (at most %zu%s)",
             set->count, held, slots / 2, set->full ? ", full" : "");
    return false;
  }
  return true;
}
