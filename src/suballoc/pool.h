/* pool.h: what the pool needs to know of other resources, and what they may ask of it.
 *
 * The pool grows in place over an upstream that places memory at chosen addresses (vmm, and
 * pass-through adaptors over it; see gpumem__resource_ops): each growth step is mapped right
 * after the previous one, so the pool's blocks can merge across steps. */
#ifndef GPUMEM_SUBALLOC_POOL_H
#define GPUMEM_SUBALLOC_POOL_H

#include "device/device.h"

bool gpumem__is_pool(const gpumem_resource *mr);

/* gpumem_pool_create for pools inside other suballocators: the options are taken as they are
 * (an initial size of 0 takes nothing), and growth comes in multiples of `growth_rounding`
 * (a multiple of 256; 0: the default). A nonzero `fixed_block` (a multiple of 256) makes
 * every block exactly that size, whatever the request up to it: the pool under a
 * fixed_size resource. */
gpumem_status gpumem__pool_create_rounded(gpumem_resource *upstream,
                                          const gpumem_pool_options *opts, size_t growth_rounding,
                                          size_t fixed_block, gpumem_resource **out);

/* Frees ptr if the pool owns it (*owned true then, and the status is the free's); when it
 * does not, returns GPUMEM_OK with *owned false and sets no message. */
gpumem_status gpumem__pool_deallocate_if_owned(gpumem_resource *pool, void *ptr, size_t bytes,
                                               gpumem_stream stream, bool *owned);

/* The pool's validate operation (pool_validate.c). */
gpumem_status gpumem__pool_validate(const gpumem_resource *pool);

/* Calls fn on each chunk of the pool in address order, under the pool's lock, until fn
 * returns false; returns false then. For validators of resources built on pools (the arena
 * checks its superblock registry against its streams' pools this way). */
bool gpumem__pool_each_chunk(const gpumem_resource *pool,
                             bool (*fn)(uintptr_t addr, size_t size, void *user), void *user);

/* Sums of the fronts' counts of what their threads did since the
 * first thread came (gpumem-bench threads --stats): how often threads met on shared lines. */
typedef struct gpumem__pool_front_stats {
  uint64_t ops;           /* allocations and frees through fronts */
  uint64_t pool_locks;    /* of those, the ones that took the pool's lock */
  uint64_t shared_locks;  /* looks in other fronts' maps: lines their threads write */
  uint64_t refills;       /* batches the fronts took from the pool */
  uint64_t give_backs;    /* batches they gave back as their lists grew long */
  uint64_t grows;         /* refills that made the pool grow */
  uint64_t flushes;       /* fronts holding blocks that the pool emptied (growth, queries) */
  uint64_t trims;         /* fronts the pool took down to their reserve before growing */
  uint64_t returns_sent;  /* batches of other fronts' blocks that threads freed, sent back */
  uint64_t returns_taken; /* such batches their owners took */
  uint64_t held_bytes;    /* free in the fronts now */
  uint64_t lock_wait_ns;  /* the fronts' threads waited for the pool's lock (refills, ...) */
  uint64_t lock_hold_ns;  /* and held it */
} gpumem__pool_front_stats;
/* Makes the pool's thread fronts now, as threads meeting at its lock would (for tests of
 * the fronts; no thread may use the pool meanwhile); false when `mr` is no pool or cannot
 * have fronts. */
bool gpumem__pool_make_fronts(gpumem_resource *mr);
/* False when `mr` is no pool, or one without fronts. */
bool gpumem__pool_front_stats_of(const gpumem_resource *mr, gpumem__pool_front_stats *out);

#endif /* GPUMEM_SUBALLOC_POOL_H */
