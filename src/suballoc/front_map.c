/* front_map.c: the cold parts of a thread front's live map (front_map.h): a lookup that met
 * a writer, making the map, growing it, freeing it, and checking it. */
#include "suballoc/front_map.h"

#include <stdio.h>
#include <stdlib.h>

#define MAP_INITIAL_LOG2 10

static front_table *new_table(unsigned log2) {
  front_table *t = calloc(1, sizeof *t + ((size_t)1 << log2) * sizeof t->slots[0]);
  if (t) {
    t->mask = ((size_t)1 << log2) - 1;
    t->shift = 64 - log2;
  }
  return t;
}

gpumem__block *gpumem__front_map_lookup_again(const front_map *map, uintptr_t addr) {
  gpumem__block *found;
  for (unsigned spins = 0; !gpumem__front_map_read(map, addr, &found); spins++)
    gpumem__spin_pause(spins); /* a writer mid-change */
  return found;
}

bool gpumem__front_map_init(front_map *map) {
  front_table *t = new_table(MAP_INITIAL_LOG2);
  if (!t)
    return false;
  map->count = 0;
  atomic_store_explicit(&map->table, t, memory_order_release);
  return true;
}

void gpumem__front_map_destroy(front_map *map) {
  front_table *t = atomic_load_explicit(&map->table, memory_order_relaxed);
  while (t) {
    front_table *outgrown = t->outgrown;
    free(t);
    t = outgrown;
  }
  atomic_store_explicit(&map->table, NULL, memory_order_relaxed);
  map->count = 0;
}

bool gpumem__front_map_grow(front_map *map) {
  front_table *old = atomic_load_explicit(&map->table, memory_order_relaxed);
  front_table *bigger = new_table((unsigned)(64 - old->shift + 1));
  if (!bigger)
    return false;
  for (size_t i = 0; i <= old->mask; i++) {
    uintptr_t addr = gpumem__front_slot_addr(&old->slots[i]);
    if (!addr)
      continue;
    front_map_slot *slot = &bigger->slots[gpumem__front_table_slot_of(bigger, addr)];
    atomic_store_explicit(&slot->block,
                          atomic_load_explicit(&old->slots[i].block, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&slot->addr, addr, memory_order_relaxed);
  }
  bigger->outgrown = old; /* readers may still be in it: freed with the map */
  atomic_store_explicit(&map->table, bigger, memory_order_release);
  return true;
}

bool gpumem__front_map_reserve(front_map *map, size_t extra) {
  while (map->count + extra > gpumem__front_map_room(gpumem__front_map_table(map)))
    if (!gpumem__front_map_grow(map))
      return false;
  return true;
}

void gpumem__front_map_each(const front_map *map, void (*fn)(gpumem__block *block, void *user),
                            void *user) {
  const front_table *t = gpumem__front_map_table(map);
  for (size_t i = 0; t && i <= t->mask; i++)
    if (gpumem__front_slot_addr(&t->slots[i]))
      fn(atomic_load_explicit(&t->slots[i].block, memory_order_relaxed), user);
}

bool gpumem__front_map_check(const front_map *map, bool (*fn)(gpumem__block *block, void *user),
                             void *user, char *why, size_t why_size) {
  const front_table *t = gpumem__front_map_table(map);
  size_t count = 0;
  if (atomic_load_explicit(&map->seq, memory_order_relaxed) & 1) {
    snprintf(why, why_size, "address map: a writer left it mid-change");
    return false;
  }
  for (size_t i = 0; t && i <= t->mask; i++) {
    uintptr_t addr = gpumem__front_slot_addr(&t->slots[i]);
    if (!addr)
      continue;
    count++;
    gpumem__block *b = atomic_load_explicit(&t->slots[i].block, memory_order_relaxed);
    if (!gpumem__map_check_slot(addr, b, i, gpumem__front_table_slot_of(t, addr), why, why_size) ||
        (fn && !fn(b, user)))
      return false;
  }
  return gpumem__map_check_count(map->count, count, why, why_size);
}
