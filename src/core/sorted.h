/* sorted.h: growable arrays of structs kept sorted by their first field, a uintptr_t key
 * (an address). The suballocators keep chunks, mappings, address ranges and superblocks in
 * such arrays: few entries, read far more often than changed, so a binary search over a
 * contiguous array beats any linked structure. No locking: the owner locks. */
#ifndef GPUMEM_SORTED_H
#define GPUMEM_SORTED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gpumem__sorted {
  void *items;
  size_t count, capacity;
  size_t stride; /* bytes per element; the key is its first field */
} gpumem__sorted;

#define GPUMEM__SORTED_INIT(type)                                                                  \
  { NULL, 0, 0, sizeof(type) }

/* The first position whose key is >= key. */
size_t gpumem__sorted_lower_bound(const gpumem__sorted *array, uintptr_t key);
/* The position of the element whose key is exactly `key`; array->count when there is none. */
size_t gpumem__sorted_find(const gpumem__sorted *array, uintptr_t key);
/* The position of the last element whose key is <= key (the one a range starting there
 * would hold `key` in); array->count when there is none. */
size_t gpumem__sorted_floor(const gpumem__sorted *array, uintptr_t key);

/* Makes room for `count` elements in all. False when host memory is exhausted. */
bool gpumem__sorted_reserve(gpumem__sorted *array, size_t count);

/* Inserts a copy of `item` in key order. False when host memory is exhausted. */
bool gpumem__sorted_insert(gpumem__sorted *array, const void *item);

/* Inserts at `at`, where the caller made room (gpumem__sorted_reserve). */
void gpumem__sorted_insert_at(gpumem__sorted *array, size_t at, const void *item);

void gpumem__sorted_remove_at(gpumem__sorted *array, size_t at);
/* Removes the `count` elements from `at` with one move, where one remove_at per element
 * would move the tail `count` times. */
void gpumem__sorted_remove_range(gpumem__sorted *array, size_t at, size_t count);
/* Moves the elements from `at` up by `count` and returns the first of the `count` slots left
 * for the caller to fill, in key order, before anything else reads the array. The caller
 * reserved the room. */
void *gpumem__sorted_open_gap(gpumem__sorted *array, size_t at, size_t count);

void gpumem__sorted_free(gpumem__sorted *array);

static inline void *gpumem__sorted_at(const gpumem__sorted *array, size_t at) {
  return (char *)array->items + at * array->stride;
}

#endif /* GPUMEM_SORTED_H */
