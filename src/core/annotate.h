/* annotate.h: tells CUDA's tools (compute-sanitizer) where gpumem's blocks are, through the
 * NVTX memory API, so that a kernel writing past a pool block or into a freed one is
 * reported as it would be for a cudaMalloc allocation.
 *
 * Two levels, as the tools want them: a *heap* is a chunk a suballocator took from an
 * upstream whose allocations the tools see as allocations of their own (cuMemAlloc,
 * cuMemAllocManaged, cuMemHostAlloc: the capability `annotatable`); a *region* is a block the
 * front end handed to the program from inside a heap. Memory of a heap outside every region
 * (free pool memory, the rest of an arena's superblock, a bin's unused slots) is then out
 * of bounds to the tools. Blocks handed between suballocators (an arena's superblock, a
 * bin's chunk) are neither: the tools accept neither nested heaps nor heaps over virtual
 * memory mappings or a driver pool's blocks (measured with compute-sanitizer 2025.3;
 * docs/gpu-runs.md), so memory from vmm is seen only as its mapped pieces and memory from
 * async as the driver pool's blocks.
 *
 * Annotations switch themselves on when a tool accepts the first heap and cost one
 * predictable branch per allocation and free otherwise. With a tool, a free first waits for
 * its stream (the tool would otherwise see work still queued touch an unregistered block)
 * and the bookkeeping takes one lock: a program under compute-sanitizer is slow anyway.
 * Thread-safe. */
#ifndef GPUMEM_ANNOTATE_H
#define GPUMEM_ANNOTATE_H

#include "core/internal.h"

/* True once a tool has accepted a heap: only then do blocks get regions. */
extern atomic_bool gpumem__annotations_on;

static inline bool gpumem__annotating(void) {
  return atomic_load_explicit(&gpumem__annotations_on, memory_order_relaxed);
}

/* A suballocator took [base, base+bytes) from `upstream`: registers it as a heap when the
 * upstream's allocations are ones the tools know. Failures are silent (annotations are a
 * debugging aid; the allocation stands). */
void gpumem__annotate_heap_add(const gpumem_resource *upstream, void *base, size_t bytes);

/* [base, ...) is about to go back to its upstream: unregisters its heap, if it has one.
 * Returns true when it had one, so that a failed give-back can add it again. */
bool gpumem__annotate_heap_remove(void *base);

/* The front end handed out [ptr, ptr+bytes): registers it as a region of the heap that holds
 * it, if any (a block already registered, by a nested front end call, is left as it is). */
void gpumem__annotate_block_add(void *ptr, size_t bytes);

/* The front end's free of `ptr` through `mr` while a tool watches: waits for the stream and
 * unregisters the block's region, if it has one (the resource may hand the memory out again
 * at once), then frees it; if the free fails, the block is registered again. */
gpumem_status gpumem__annotated_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                           size_t alignment, gpumem_stream stream);

/* The calls into the tool, replaceable so that tests can watch them without a tool. A
 * heap handle of NULL means the tool refused the heap (or there is no tool). */
typedef struct gpumem__annotation_api {
  void *(*heap_register)(void *base, size_t bytes);
  void (*heap_unregister)(void *heap);
  void (*region_register)(void *heap, void *ptr, size_t bytes);
  void (*region_unregister)(void *ptr);
} gpumem__annotation_api;

/* Uses `api` (NULL: NVTX, the default) from now on; forgets every heap and region and
 * switches annotations off until a heap is accepted. For tests, with no allocation live. */
void gpumem__annotate_use_api(const gpumem__annotation_api *api);

/* True when this build can speak NVTX (its headers were found at build time). */
bool gpumem__annotations_built(void);

#endif /* GPUMEM_ANNOTATE_H */
