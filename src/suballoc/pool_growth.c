/* pool_growth.c: where the pool's memory comes from. Growth takes chunks from the upstream,
 * rounded up and within the pool's maximum; over an upstream that places memory at chosen
 * addresses (vmm, or an adaptor that forwards placement), each region grows in place right
 * after its highest block, and only by the shortfall past a free last block, so that
 * growth steps coalesce. This file and pool_trim.c are the only parts of the pool that
 * speak to the upstream's placement capability. */
#include "suballoc/pool_internal.h"

#include "core/annotate.h"

/* Growth steps round up to this where the upstream does not place memory, and the default
 * initial size down to it. */
#define GROWTH_ROUNDING ((size_t)2 << 20)

static const char too_large[] = "the request is larger than any pool can hold";
static const char at_maximum[] = "the pool has reached its maximum size";
static const char no_host_memory[] = "the host is out of memory for the pool's bookkeeping";

/* How much to ask of the upstream for `size` bytes: rounded up to the growth rounding (by
 * division: it need not be a power of two) within the maximum. NULL and *step, or why not. */
static const char *growth_step(const pool_resource *pool, size_t size, size_t *step) {
  size_t rounding = pool->growth_rounding;
  if (size > SIZE_MAX - rounding)
    return too_large;
  size_t rounded = (size + rounding - 1) / rounding * rounding;
  /* The least step: growing in place, whole granules, which is what gets mapped whatever
   * is asked (no overflow: the rounding is a multiple of the granularity). */
  size_t least =
      pool->grows_in_place ? gpumem__align_up(size, pool->header.upstream->caps.granularity) : size;
  size_t max = pool->options.maximum_size;
  if (max) {
    uint64_t reserved = gpumem__counters_reserved(&pool->stats);
    if (reserved >= max || max - reserved < least)
      return at_maximum;
    if (rounded > max - reserved)
      rounded = least;
  }
  *step = rounded;
  return NULL;
}

/* Whether growth in place for `size` bytes extends region `r`'s last block, free in `set`
 * and too small, by *shortfall alone (within the maximum). */
static bool tail_grows(const pool_resource *pool, const region *r, const free_set *set, size_t size,
                       size_t *shortfall) {
  const gpumem__block *tail = r->tail;
  return tail && free_in_any_state(tail, set) && tail->size < size &&
         !growth_step(pool, size - tail->size, shortfall);
}

bool gpumem__pool_at_maximum(const pool_resource *pool, size_t size) {
  size_t step;
  return growth_step(pool, size, &step) == at_maximum;
}

size_t gpumem__pool_growth_bytes(const pool_resource *pool, size_t ri, const free_set *set,
                                 size_t size) {
  size_t bytes = size;
  if (!pool->grows_in_place || !tail_grows(pool, &pool->regions[ri], set, size, &bytes))
    growth_step(pool, size, &bytes); /* refused: `size` stands for what it would be */
  return bytes;
}

/* Where the small region's growth starts: the middle of the upstream's range. */
static uintptr_t small_region_start(const gpumem_resource *up) {
  return up->caps.range_base +
         up->caps.range_size / 2 / up->caps.granularity * up->caps.granularity;
}

/* Region `ri`'s part of the upstream's range: the large region's is the lower half while
 * requests are split between the regions (the whole range otherwise), the small one's the
 * upper half. */
static void region_bounds(const pool_resource *pool, size_t ri, uintptr_t *start, uintptr_t *end) {
  const gpumem_resource *up = pool->header.upstream;
  *start = ri == GPUMEM__POOL_REGION_LARGE ? up->caps.range_base : small_region_start(up);
  *end = ri == GPUMEM__POOL_REGION_LARGE && pool->split_regions
             ? small_region_start(up)
             : up->caps.range_base + up->caps.range_size;
}

/* The lowest stretch of [start, end) that none of the pool's chunks covers and that holds
 * `least` bytes; 0 when there is none. */
static uintptr_t lowest_gap(const pool_resource *pool, uintptr_t start, uintptr_t end,
                            size_t least) {
  uintptr_t from = start;
  size_t i = gpumem__sorted_lower_bound(&pool->chunks, start);
  if (i > 0) { /* a chunk that starts below and reaches in */
    const chunk *c = chunk_at(pool, i - 1);
    if (c->addr + c->size > from)
      from = c->addr + c->size;
  }
  for (; from < end; i++) {
    const chunk *c = i < pool->chunks.count ? chunk_at(pool, i) : NULL;
    uintptr_t to = c && c->addr < end ? c->addr : end;
    if (to > from && to - from >= least)
      return from;
    if (!c || c->addr >= end)
      break;
    from = c->addr + c->size;
  }
  return 0;
}

uintptr_t gpumem__pool_wrap_growth(pool_resource *pool, size_t ri, const free_set *set,
                                   size_t size) {
  region *r = &pool->regions[ri];
  size_t full = 0;
  if (!pool->grows_in_place || growth_step(pool, size, &full))
    return 0;
  size_t wanted = gpumem__pool_growth_bytes(pool, ri, set, size);
  uintptr_t next = r->tail ? r->tail->addr + r->tail->size : r->base, start, end;
  region_bounds(pool, ri, &start, &end);
  if (next < start || next > end)
    return 0; /* growth goes wherever the upstream puts it: nothing to keep in place */
  size_t above = gpumem__sorted_lower_bound(&pool->chunks, next);
  if (end - next >= wanted &&
      (above == pool->chunks.count || chunk_at(pool, above)->addr - next >= wanted))
    return 0; /* room right after the tail */
  /* Room enough to climb through again for as long as it took to get here, or at least
   * for this growth. */
  size_t reserved = (size_t)gpumem__counters_reserved(&pool->stats);
  uintptr_t gap = lowest_gap(pool, start, end, reserved > full ? reserved : full);
  if (!gap && reserved > full)
    gap = lowest_gap(pool, start, end, full);
  if (!gap)
    return 0;
  uintptr_t from = r->base;
  pool->tail_before_wrap = r->tail;
  r->tail = NULL;
  r->base = gap;
  return from;
}

/* Memory for region `r` of `set` for `size` bytes. Growing in place, it goes right after the
 * region's last block; if that block is free in `set` (open or sealed: new memory joins a
 * stream's set open, which unseals it), the two merge and only the shortfall is asked for.
 * Otherwise, or when that address range is taken, the full step goes wherever the upstream
 * puts it. */
static gpumem_status take_from_upstream(pool_resource *pool, region *r, free_set *set, size_t size,
                                        void **memory, size_t *taken, const char **why) {
  size_t full = 0;
  /* Near the maximum the shortfall may fit where the full step does not: the full step's
   * refusal counts only where the shortfall does not apply. */
  const char *full_why = growth_step(pool, size, &full);
  gpumem_resource *up = pool->header.upstream;
  const gpumem__block *tail = r->tail;
  uintptr_t next = tail ? tail->addr + tail->size : r->base;
  uint64_t serial = gpumem__error_serial();
  if (pool->grows_in_place && next) {
    size_t shortfall = 0;
    bool extends = tail_grows(pool, r, set, size, &shortfall);
    size_t wanted = extends ? shortfall : full;
    if ((extends || !full_why) && up->ops->allocate_at(up, next, wanted, memory) == GPUMEM_OK) {
      *taken = wanted;
      return GPUMEM_OK;
    }
  }
  if ((*why = full_why)) {
    gpumem__note_oom(full_why == too_large ? GPUMEM__OOM_TOO_LARGE : GPUMEM__OOM_LIMIT,
                     &pool->header, size);
    return GPUMEM_ERR_OUT_OF_MEMORY;
  }
  *taken = full;
  *why = "its upstream could not give more memory";
  gpumem_status status = up->ops->allocate(up, full, GPUMEM_DEFAULT_ALIGNMENT, set->stream, memory);
  /* A growth in place that failed with a message (the device out of memory for the
   * shortfall) and a full step elsewhere that served: the failure is absorbed, and no
   * stale message stays behind a call that succeeded. */
  if (status == GPUMEM_OK && gpumem__error_serial() != serial)
    gpumem__absorb_error();
  return status;
}

gpumem_status gpumem__pool_grow(pool_resource *pool, free_set *set, size_t ri, size_t size,
                                const char **why, gpumem__block **grown_block) {
  gpumem__block *block = gpumem__block_new(&pool->slab);
  if (!block) {
    *why = no_host_memory;
    gpumem__note_oom(GPUMEM__OOM_HOST, &pool->header, size);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "%s", no_host_memory);
  }
  region *r = &pool->regions[ri];
  void *memory;
  size_t step = 0;
  uint64_t serial = gpumem__error_serial();
  gpumem_status status = take_from_upstream(pool, r, set, size, &memory, &step, why);
  chunk grown = {(uintptr_t)memory, step, gpumem__pool_large_until(pool, (uintptr_t)memory, step)};
  if (status == GPUMEM_OK && !gpumem__sorted_insert(&pool->chunks, &grown)) {
    gpumem_resource *up = pool->header.upstream;
    up->ops->deallocate(up, memory, step, GPUMEM_DEFAULT_ALIGNMENT, set->stream);
    *why = no_host_memory;
    gpumem__note_oom(GPUMEM__OOM_HOST, &pool->header, size);
    status = GPUMEM_ERR_OUT_OF_MEMORY;
    serial = gpumem__error_serial(); /* whatever the upstream said, it is not why */
  }
  if (status != GPUMEM_OK) {
    gpumem__block_delete(&pool->slab, block);
    /* The thread's message says why: the upstream's own after the pool's reason, or the
     * reason alone where nothing below set one (the pool's refusals, an upstream that
     * refused quietly), so that a caller adding context never quotes a stale message. */
    if (gpumem__error_serial() == serial)
      return gpumem__fail(status, "%s", *why);
    return gpumem__fail_context(status, "%s", *why);
  }
  gpumem__annotate_heap_add(pool->header.upstream, memory, step);
  block->addr = (uintptr_t)memory;
  block->size = step;
  block->region = (uint8_t)ri;
  gpumem__block *last = r->tail;
  if (pool->grows_in_place && last && last->addr + last->size == block->addr) {
    block->prev_addr = last;
    last->next_addr = block;
  }
  /* The region's growth follows its highest chunk, wherever the upstream put it. */
  if (!last || block->addr > last->addr)
    r->tail = block;
  gpumem__counters_add_reserved(&pool->stats, step);
  *grown_block = release_block(pool, set, block, growth_state(pool, set));
  return GPUMEM_OK;
}

gpumem_status gpumem__pool_default_initial_size(const gpumem_resource *upstream, size_t *size) {
  gpumem_memory_kind memory = upstream->caps.memory;
  *size = 0;
  if (gpumem__places_at_address(upstream) || memory == GPUMEM_MEMORY_PINNED_HOST ||
      memory == GPUMEM_MEMORY_HOST)
    return GPUMEM_OK;
  size_t free_bytes, total_bytes;
  gpumem_status status = upstream->dev->mem_info(upstream->device, &free_bytes, &total_bytes);
  if (status == GPUMEM_OK)
    *size = (free_bytes / 2) & ~(GROWTH_ROUNDING - 1);
  return status;
}

void gpumem__pool_init_growth(pool_resource *pool, const gpumem_resource *upstream,
                              size_t growth_rounding, size_t fixed_block) {
  pool->grows_in_place = gpumem__places_at_address(upstream);
  pool->growth_rounding = growth_rounding ? growth_rounding : GROWTH_ROUNDING;
  if (!pool->grows_in_place)
    return;
  /* Growth steps are whole granules (by default one), or the upstream would map more than
   * the pool counts. */
  size_t granularity = upstream->caps.granularity;
  pool->growth_rounding =
      growth_rounding ? gpumem__align_up(growth_rounding, granularity) : granularity;
  /* Large requests grow up from the start of the upstream's range, small ones from its
   * middle; a pool of equal blocks has no small requests to keep apart. */
  uintptr_t base = upstream->caps.range_base;
  pool->regions[GPUMEM__POOL_REGION_LARGE].base = base;
  pool->piece_origin = base;
  pool->piece_size = upstream->caps.piece_size;
  pool->large_block_size = upstream->caps.large_block_size;
  pool->large_piece_size = upstream->caps.large_piece_size;
  pool->regions[GPUMEM__POOL_REGION_SMALL].base = small_region_start(upstream);
  set_layout(pool, !fixed_block, pool->multi_stream);
}
