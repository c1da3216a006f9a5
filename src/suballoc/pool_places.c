/* pool_places.c: the places of a loop's large blocks. A pool that grows in place and gives
 * holes back remembers, for each size of GPUMEM__POOL_PLACES_LEAST and up, where its last
 * blocks were freed, and once a size recurs (GPUMEM__POOL_PLACES_AFTER frees, none more
 * than GPUMEM__POOL_PLACES_GAP frees of other large sizes after the last) a request of it
 * goes back to one of those places when the memory there is free, cut out of the middle of
 * a larger free block if need be, rather than to the best fit. A training loop's step then
 * lays its large blocks out as the last step did, and a layout that fitted stays fitted:
 * best fit moves them step by step into holes that the next step's blocks no longer fit
 * (pool_internal.h says what it wins). */
#include "suballoc/pool_internal.h"

#include <string.h>

static pool_place *place_of(pool_places *places, size_t size) {
  for (size_t i = 0; i < GPUMEM__POOL_PLACES_SIZES; i++)
    if (places->sizes[i].size == size)
      return &places->sizes[i];
  return NULL;
}

void gpumem__pool_note_place(pool_resource *pool, const gpumem__block *block, size_t size) {
  pool_places *places = &pool->places;
  pool_place *place = place_of(places, size);
  if (!place) { /* the size freed longest ago makes room */
    place = &places->sizes[0];
    for (size_t i = 1; i < GPUMEM__POOL_PLACES_SIZES; i++)
      if (places->sizes[i].last_free < place->last_free)
        place = &places->sizes[i];
    memset(place, 0, sizeof *place);
    place->size = size;
  }
  /* A size that recurs only across passes (a loop of varying shapes that meets the same
   * length again) has no last step's layout to go back to: its count starts over. */
  if (places->clock - place->last_free > GPUMEM__POOL_PLACES_GAP)
    place->frees = 0;
  place->last_free = ++places->clock;
  if (place->frees < GPUMEM__POOL_PLACES_AFTER)
    place->frees++;
  /* Newest first, each address once: the address moves to the front, the oldest drops. */
  unsigned at = 0;
  while (at < place->count && place->addr[at] != block->addr)
    at++;
  if (at == place->count && place->count < GPUMEM__POOL_PLACES_EACH)
    place->count++;
  if (at == place->count)
    at--;
  memmove(&place->addr[1], &place->addr[0], at * sizeof place->addr[0]);
  place->addr[0] = block->addr;
}

/* The free block of `set` in the large region that holds [addr, addr + size), found by
 * walking down from the region's last block, at most GPUMEM__POOL_PLACES_WALK blocks; NULL
 * when there is none (in use, another set's, unmapped, or out of the walk's reach). */
static gpumem__block *free_block_holding(pool_resource *pool, free_set *set, uintptr_t addr,
                                         size_t size) {
  gpumem__block *block = pool->regions[GPUMEM__POOL_REGION_LARGE].tail;
  for (unsigned steps = 0; block && steps < GPUMEM__POOL_PLACES_WALK; steps++) {
    if (block->addr <= addr)
      return block->addr + block->size >= addr + size && free_in_any_state(block, set) ? block
                                                                                       : NULL;
    block = block->prev_addr;
  }
  return NULL;
}

gpumem__block *gpumem__pool_fit_in_place(pool_resource *pool, free_set *set, size_t size) {
  pool_place *place = place_of(&pool->places, size);
  if (!place || place->frees < GPUMEM__POOL_PLACES_AFTER)
    return NULL;
  for (unsigned i = 0; i < place->count; i++) {
    uintptr_t addr = place->addr[i];
    gpumem__block *block = free_block_holding(pool, set, addr, size);
    if (!block)
      continue;
    if (block->addr == addr)
      return block;
    /* What lies below the place stays free. Without host memory for the cut: NULL, and the
     * best fit, which may need none. */
    return split_free(pool, index_of(set, block), block, addr - block->addr);
  }
  return NULL;
}
