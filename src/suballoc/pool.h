/* pool.h: what the pool needs to know of other resources, and what they may ask of it.
 *
 * The pool grows in place over a vmm upstream: each growth step is mapped right after the
 * previous one, so the pool's blocks can merge across steps. */
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

/* True when `upstream` is a vmm resource: its successive allocations are contiguous. */
bool gpumem__vmm_grows_in_place(const gpumem_resource *upstream);
/* The mapping granularity of a vmm resource. */
size_t gpumem__vmm_granularity(const gpumem_resource *vmm);
/* The size of a vmm resource's pieces: physical memory is made and freed in pieces cut at
 * every multiple of it from the range's start (and at allocations' ends). */
size_t gpumem__vmm_piece_size(const gpumem_resource *vmm);
/* Unmaps [addr, addr+size), a run of whole pieces of live allocations, after the work on the
 * default stream; the rest of each allocation stays (one cut in the middle becomes two,
 * each freed on its own later). Nothing changes on failure. */
gpumem_status gpumem__vmm_unmap_pieces(gpumem_resource *vmm, uintptr_t addr, size_t size);
/* The address range a vmm resource reserved. */
void gpumem__vmm_range(const gpumem_resource *vmm, uintptr_t *base, size_t *size);
/* As allocate, at exactly `addr` (granularity-aligned): GPUMEM_ERR_OUT_OF_MEMORY without a
 * message when that range is not free, so that the caller can grow elsewhere. */
gpumem_status gpumem__vmm_allocate_at(gpumem_resource *vmm, uintptr_t addr, size_t bytes,
                                      void **ptr);

#endif /* GPUMEM_SUBALLOC_POOL_H */
