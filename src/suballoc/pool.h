/* pool.h: what the pool needs to know of other resources, and what they may ask of it.
 *
 * The pool grows in place over a vmm upstream: each growth step is mapped right after the
 * previous one, so the pool's blocks can merge across steps. */
#ifndef GPUMEM_SUBALLOC_POOL_H
#define GPUMEM_SUBALLOC_POOL_H

#include "device/device.h"

bool gpumem__is_pool(const gpumem_resource *mr);

/* True when `upstream` is a vmm resource: its successive allocations are contiguous. */
bool gpumem__vmm_grows_in_place(const gpumem_resource *upstream);
/* The mapping granularity of a vmm resource. */
size_t gpumem__vmm_granularity(const gpumem_resource *vmm);

#endif /* GPUMEM_SUBALLOC_POOL_H */
