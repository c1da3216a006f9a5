/* sorted.c: sorted arrays of structs keyed by their first field (see sorted.h). */
#include "core/sorted.h"

#include <stdlib.h>
#include <string.h>

static uintptr_t key_at(const gpumem__sorted *array, size_t at) {
  uintptr_t key;
  memcpy(&key, (const char *)array->items + at * array->stride, sizeof key);
  return key;
}

size_t gpumem__sorted_lower_bound(const gpumem__sorted *array, uintptr_t key) {
  size_t low = 0, high = array->count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (key_at(array, mid) < key)
      low = mid + 1;
    else
      high = mid;
  }
  return low;
}

size_t gpumem__sorted_find(const gpumem__sorted *array, uintptr_t key) {
  size_t at = gpumem__sorted_lower_bound(array, key);
  return at < array->count && key_at(array, at) == key ? at : array->count;
}

size_t gpumem__sorted_floor(const gpumem__sorted *array, uintptr_t key) {
  size_t after = gpumem__sorted_lower_bound(array, key + 1);
  return after > 0 ? after - 1 : array->count;
}

bool gpumem__sorted_reserve(gpumem__sorted *array, size_t count) {
  if (count <= array->capacity)
    return true;
  size_t capacity = array->capacity ? array->capacity : 16;
  while (capacity < count)
    capacity *= 2;
  void *items = realloc(array->items, capacity * array->stride);
  if (!items)
    return false;
  array->items = items;
  array->capacity = capacity;
  return true;
}

void gpumem__sorted_insert_at(gpumem__sorted *array, size_t at, const void *item) {
  char *base = array->items;
  memmove(base + (at + 1) * array->stride, base + at * array->stride,
          (array->count - at) * array->stride);
  memcpy(base + at * array->stride, item, array->stride);
  array->count++;
}

bool gpumem__sorted_insert(gpumem__sorted *array, const void *item) {
  if (!gpumem__sorted_reserve(array, array->count + 1))
    return false;
  uintptr_t key;
  memcpy(&key, item, sizeof key);
  gpumem__sorted_insert_at(array, gpumem__sorted_lower_bound(array, key), item);
  return true;
}

void gpumem__sorted_remove_at(gpumem__sorted *array, size_t at) {
  char *base = array->items;
  memmove(base + at * array->stride, base + (at + 1) * array->stride,
          (array->count - at - 1) * array->stride);
  array->count--;
}

void gpumem__sorted_remove_range(gpumem__sorted *array, size_t at, size_t count) {
  char *base = array->items;
  memmove(base + at * array->stride, base + (at + count) * array->stride,
          (array->count - at - count) * array->stride);
  array->count -= count;
}

void *gpumem__sorted_open_gap(gpumem__sorted *array, size_t at, size_t count) {
  char *base = array->items;
  memmove(base + (at + count) * array->stride, base + at * array->stride,
          (array->count - at) * array->stride);
  array->count += count;
  return base + at * array->stride;
}

void gpumem__sorted_free(gpumem__sorted *array) {
  free(array->items);
  array->items = NULL;
  array->count = array->capacity = 0;
}
