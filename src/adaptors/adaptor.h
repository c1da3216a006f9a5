/* adaptor.h: what the pass-through adaptors share: the operations that only pass a call on
 * to the upstream, for the tables of adaptors whose rule does not touch that call, and the
 * check of a creation function's handles. */
#ifndef GPUMEM_ADAPTOR_H
#define GPUMEM_ADAPTOR_H

#include "core/internal.h"

gpumem_status gpumem__forward_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                         size_t alignment, gpumem_stream stream);
gpumem_status gpumem__forward_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out);
gpumem_status gpumem__forward_allocate_at(gpumem_resource *mr, uintptr_t addr, size_t bytes,
                                          void **ptr);
gpumem_status gpumem__forward_unmap_pieces(gpumem_resource *mr, uintptr_t addr, size_t size,
                                           int *allocations_added);

/* The destroy of an adaptor that holds nothing but its struct (one malloc'd block). */
gpumem_status gpumem__adaptor_free(gpumem_resource *mr);

/* GPUMEM_ERR_INVALID_ARGUMENT naming `caller` and the NULL handle, or GPUMEM_OK. */
gpumem_status gpumem__check_adaptor_args(const char *caller, const gpumem_resource *upstream,
                                         gpumem_resource *const *out);

#endif /* GPUMEM_ADAPTOR_H */
