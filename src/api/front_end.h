/* front_end.h: the steps that the front end's plain path (allocate.c) and its guarded path
 * at debug level 3 (guards.c) share around a resource's allocate and free. */
#ifndef GPUMEM_API_FRONT_END_H
#define GPUMEM_API_FRONT_END_H

#include "core/annotate.h"
#include "core/internal.h"
#include "device/device.h"

/* A failed allocation's status, with the out-of-memory report added to its message. */
static inline gpumem_status gpumem__allocation_failed(const gpumem_resource *mr,
                                                      gpumem_status status, size_t bytes,
                                                      size_t alignment) {
  return status == GPUMEM_ERR_OUT_OF_MEMORY ? gpumem__report_out_of_memory(mr, bytes, alignment)
                                            : status;
}

/* Whether a block leaving the front end is heard of (gpumem__hand_out). */
static inline bool gpumem__hand_out_heard(const gpumem_resource *mr) {
  return mr->dev->note_handout != NULL || gpumem__annotating();
}

/* A block leaves the front end: the simulated device checks it for cross-stream hazards,
 * and a CUDA tool that reads annotations hears of it. */
static inline void gpumem__hand_out(gpumem_resource *mr, void *block, size_t bytes,
                                    gpumem_stream stream) {
  if (GPUMEM_UNLIKELY(mr->dev->note_handout != NULL))
    mr->dev->note_handout(block, bytes, stream);
  if (GPUMEM_UNLIKELY(gpumem__annotating()))
    gpumem__annotate_block_add(block, bytes);
}

#endif /* GPUMEM_API_FRONT_END_H */
