/* pool_cache.c: the slow paths of the pool's cache of freed blocks (see pool.c for what the
 * cache is for; its fast paths, taking and filing a block, are in line in pool_internal.h):
 * merging cached blocks into the free index, all of them when the cache is full or the pool
 * is about to grow, wait or answer a free-memory query, or one larger block when a request
 * finds nothing else. */
#include "suballoc/pool_internal.h"

void gpumem__pool_flush_cache(pool_resource *pool, free_set *set) {
  /* With several streams the merged blocks are open frees of the set: counted, so that a
   * stream whose frees all go to its cache still seals them, at its next free past it. */
  if (pool->multi_stream && set->cached_count > 0)
    set->open_frees += set->cached_count;
  for (size_t c = 0; c < GPUMEM__POOL_CACHE_CLASSES && set->cached_count > 0; c++) {
    gpumem__block *block = set->cached[c];
    while (block) {
      gpumem__block *next = block->next_free;
      gpumem__block_map_take(&pool->live, block->addr); /* out of the cache, out of the map */
      release_block(pool, set, block, GPUMEM__BLOCK_OPEN);
      set->cached_count--;
      block = next;
    }
    set->cached[c] = NULL;
  }
}

/* Classes are scanned in order: this runs only when the free index had nothing for the
 * request. */
gpumem__block *gpumem__pool_uncache_larger(pool_resource *pool, free_set *set, size_t size) {
  size_t first =
      size < GPUMEM__POOL_CACHE_LIMIT ? cache_class(size) + 1 : GPUMEM__POOL_CACHE_CLASSES;
  for (size_t c = first; c < GPUMEM__POOL_CACHE_CLASSES; c++) {
    gpumem__block *block = set->cached[c];
    if (block) {
      set->cached[c] = block->next_free;
      set->cached_count--;
      gpumem__block_map_take(&pool->live, block->addr);
      return release_block(pool, set, block, GPUMEM__BLOCK_OPEN);
    }
  }
  return NULL;
}

void gpumem__pool_flush_caches(pool_resource *pool) {
  /* The threads' fronts too: their blocks are free memory kept whole as well. */
  gpumem__pool_flush_fronts(pool);
  for (size_t i = 1; i < pool->set_count; i++)
    gpumem__pool_flush_cache(pool, pool->sets[i]);
}
