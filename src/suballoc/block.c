/* block.c: block structs, their slab, the segregated-fit free index and the address map
 * (see block.h). */
#include "suballoc/block.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Slab
 * ------------------------------------------------------------------------------------- */

#define SLAB_PAGE_BLOCKS 256

void gpumem__block_slab_init(gpumem__block_slab *slab) {
  memset(slab, 0, sizeof *slab);
}

void gpumem__block_slab_destroy(gpumem__block_slab *slab) {
  for (size_t i = 0; i < slab->page_count; i++)
    free(slab->pages[i]);
  free(slab->pages);
  memset(slab, 0, sizeof *slab);
}

static bool add_page(gpumem__block_slab *slab) {
  if (slab->page_count == slab->page_capacity) {
    size_t capacity = slab->page_capacity ? slab->page_capacity * 2 : 16;
    void **pages = realloc(slab->pages, capacity * sizeof *pages);
    if (!pages)
      return false;
    slab->pages = pages;
    slab->page_capacity = capacity;
  }
  gpumem__block *page = malloc(SLAB_PAGE_BLOCKS * sizeof *page);
  if (!page)
    return false;
  slab->pages[slab->page_count++] = page;
  for (size_t i = 0; i < SLAB_PAGE_BLOCKS; i++) {
    page[i].next_free = slab->spare;
    slab->spare = &page[i];
  }
  return true;
}

gpumem__block *gpumem__block_new(gpumem__block_slab *slab) {
  if (GPUMEM_UNLIKELY(!slab->spare) && !add_page(slab))
    return NULL;
  gpumem__block *block = slab->spare;
  slab->spare = block->next_free;
  memset(block, 0, sizeof *block);
  return block;
}

void gpumem__block_delete(gpumem__block_slab *slab, gpumem__block *block) {
  block->next_free = slab->spare;
  slab->spare = block;
}

/* ---------------------------------------------------------------------------------------
 * Free index
 * ------------------------------------------------------------------------------------- */

static inline int msb64(uint64_t x) {
  return 63 - __builtin_clzll(x);
}

/* The class a block of `size` bytes is filed under: the largest class whose lower bound
 * is at most size. */
static inline void class_of(size_t size, int *fl, int *sl) {
  uint64_t units = size >> GPUMEM__BLOCK_UNIT_SHIFT;
  if (units < GPUMEM__SL_COUNT) {
    *fl = 0;
    *sl = (int)units;
    return;
  }
  int msb = msb64(units);
  *fl = msb - GPUMEM__SL_SHIFT + 1;
  *sl = (int)(units >> (msb - GPUMEM__SL_SHIFT)) - GPUMEM__SL_COUNT;
}

/* The smallest class in which every block holds at least `size` bytes. */
static inline void class_at_least(size_t size, int *fl, int *sl) {
  uint64_t units = size >> GPUMEM__BLOCK_UNIT_SHIFT;
  if (units >= GPUMEM__SL_COUNT)
    units += ((uint64_t)1 << (msb64(units) - GPUMEM__SL_SHIFT)) - 1;
  class_of(units << GPUMEM__BLOCK_UNIT_SHIFT, fl, sl);
}

void gpumem__free_index_init(gpumem__free_index *index) {
  memset(index, 0, sizeof *index);
}

/* Links `block` into class (fl, sl). Counts are the callers' business. */
static inline void link_into_class(gpumem__free_index *index, gpumem__block *block, int fl,
                                   int sl) {
  gpumem__block *head = index->heads[fl][sl];
  block->index_fl = (uint8_t)fl;
  block->index_sl = (uint8_t)sl;
  block->prev_free = NULL;
  block->next_free = head;
  if (head)
    head->prev_free = block;
  index->heads[fl][sl] = block;
  index->fl_bitmap |= (uint64_t)1 << fl;
  index->sl_bitmap[fl] |= 1u << sl;
}

/* Unlinks `block` from the class it is filed under. */
static inline void unlink_from_class(gpumem__free_index *index, gpumem__block *block) {
  int fl = block->index_fl, sl = block->index_sl;
  gpumem__block *prev = block->prev_free, *next = block->next_free;
  if (next)
    next->prev_free = prev;
  if (prev) {
    prev->next_free = next;
    return;
  }
  index->heads[fl][sl] = next;
  if (!next) { /* the class is empty now */
    index->sl_bitmap[fl] &= ~(1u << sl);
    if (!index->sl_bitmap[fl])
      index->fl_bitmap &= ~((uint64_t)1 << fl);
  }
}

void gpumem__free_index_insert(gpumem__free_index *index, gpumem__block *block) {
  int fl, sl;
  class_of(block->size, &fl, &sl);
  link_into_class(index, block, fl, sl);
  index->block_count++;
  index->total_bytes += block->size;
}

void gpumem__free_index_remove(gpumem__free_index *index, gpumem__block *block) {
  unlink_from_class(index, block);
  index->block_count--;
  index->total_bytes -= block->size;
}

void gpumem__free_index_resized(gpumem__free_index *index, gpumem__block *block, size_t old_size) {
  index->total_bytes += block->size - old_size;
  int fl, sl;
  class_of(block->size, &fl, &sl);
  if (fl == block->index_fl && sl == block->index_sl)
    return;
  unlink_from_class(index, block);
  link_into_class(index, block, fl, sl);
}

/* How many blocks of the request's own class are looked at for the best fit: enough to
 * find an exact size among repeats, few enough to keep allocation constant-time. */
#define BEST_FIT_PROBES 4

gpumem__block *gpumem__free_index_find(const gpumem__free_index *index, size_t size) {
  if (index->block_count == 0)
    return NULL;
  int fl, sl;
  class_of(size, &fl, &sl);
  if (fl >= GPUMEM__FL_COUNT)
    return NULL;
  gpumem__block *best = NULL;
  int probes = 0;
  for (gpumem__block *b = index->heads[fl][sl]; b && probes < BEST_FIT_PROBES;
       b = b->next_free, probes++) {
    if (b->size >= size &&
        (!best || b->size < best->size || (b->size == best->size && b->addr < best->addr)))
      best = b;
    if (best && best->size == size)
      break;
  }
  if (best)
    return best;
  class_at_least(size, &fl, &sl);
  if (fl >= GPUMEM__FL_COUNT)
    return NULL;
  uint32_t sl_map = index->sl_bitmap[fl] & (~0u << sl);
  if (!sl_map) {
    uint64_t fl_map = fl + 1 < 64 ? index->fl_bitmap & (~(uint64_t)0 << (fl + 1)) : 0;
    if (!fl_map)
      return NULL;
    fl = __builtin_ctzll(fl_map);
    sl_map = index->sl_bitmap[fl];
  }
  sl = __builtin_ctz(sl_map);
  return index->heads[fl][sl];
}

size_t gpumem__free_index_largest(const gpumem__free_index *index) {
  if (!index->fl_bitmap)
    return 0;
  int fl = msb64(index->fl_bitmap);
  int sl = 31 - __builtin_clz(index->sl_bitmap[fl]);
  size_t largest = 0;
  for (const gpumem__block *b = index->heads[fl][sl]; b; b = b->next_free)
    if (b->size > largest)
      largest = b->size;
  return largest;
}

void gpumem__free_index_each(const gpumem__free_index *index,
                             void (*fn)(gpumem__block *block, void *user), void *user) {
  for (int fl = 0; fl < GPUMEM__FL_COUNT; fl++) {
    if (!(index->fl_bitmap & ((uint64_t)1 << fl)))
      continue;
    for (int sl = 0; sl < GPUMEM__SL_COUNT; sl++) {
      gpumem__block *b = index->heads[fl][sl];
      while (b) {
        gpumem__block *next = b->next_free;
        fn(b, user);
        b = next;
      }
    }
  }
}

/* ---------------------------------------------------------------------------------------
 * Address map
 * ------------------------------------------------------------------------------------- */

#define MAP_INITIAL_LOG2 10

bool gpumem__block_map_init(gpumem__block_map *map) {
  map->capacity = (size_t)1 << MAP_INITIAL_LOG2;
  map->shift = 64 - MAP_INITIAL_LOG2;
  map->count = 0;
  map->slots = calloc(map->capacity, sizeof *map->slots);
  return map->slots != NULL;
}

void gpumem__block_map_destroy(gpumem__block_map *map) {
  free(map->slots);
  map->slots = NULL;
  map->capacity = map->count = 0;
}

bool gpumem__block_map_grow(gpumem__block_map *map) {
  gpumem__block_map bigger = {
      .capacity = map->capacity * 2, .shift = map->shift - 1, .count = map->count};
  bigger.slots = calloc(bigger.capacity, sizeof *bigger.slots);
  if (!bigger.slots)
    return false;
  for (size_t i = 0; i < map->capacity; i++)
    if (map->slots[i].addr)
      bigger.slots[gpumem__block_map_slot_of(&bigger, map->slots[i].addr)] = map->slots[i];
  free(map->slots);
  *map = bigger;
  return true;
}
