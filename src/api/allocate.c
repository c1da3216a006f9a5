/* allocate.c: the front end of allocation. It checks arguments once (NULL pointers, size 0,
 * alignment, overflow), so that every resource can rely on documented preconditions, and
 * tells the device backend about each block handed out (the simulated device checks it
 * for cross-stream hazards). In a build with debug level 2, each call validates the
 * resource's whole structure afterwards, failed or not (GPUMEM_DEBUG=2); at level 3 the
 * blocks get guards, poison and a quarantine (guards.c, GPUMEM_DEBUG=3). Under a CUDA tool
 * that reads NVTX memory annotations, each block handed out is annotated (core/annotate.h).
 * An allocation that fails for lack of memory gets the resource's report and verdict after
 * its message (src/core/report.c), on that rare path only. */
#include "api/front_end.h"

/* Level 3's call stacks start at the program's call: the return address of the public
 * function it called, taken there (where the compiler keeps gpumem_allocate's call of the
 * common code as a call, its frame would come first). Nothing is computed below level 3. */
#if GPUMEM__DEBUG_LEVEL >= 3
#define PROGRAM_CALL __builtin_return_address(0)
#else
#define PROGRAM_CALL NULL
#endif

/* The common call, no hand-out heard: the resource writes *ptr itself (untouched on
 * failure). Only a failure needs the request again, so it is kept in the frame rather than
 * in registers the call preserves: their saves and restores were a fifth of the pool's
 * fast allocation. The empty asm statements put the request in memory before the call and
 * make the compiler read it back from there. */
static inline __attribute__((always_inline)) gpumem_status
allocate_unheard(gpumem_resource *mr, size_t bytes, size_t alignment, gpumem_stream stream,
                 void **ptr) {
  struct {
    gpumem_resource *mr;
    size_t bytes, alignment;
  } request = {mr, bytes, alignment};
  __asm__ volatile("" : : "m"(request));
  gpumem_status status = mr->ops->allocate(mr, bytes, alignment, stream, ptr);
  if (GPUMEM_LIKELY(status == GPUMEM_OK))
    return GPUMEM_OK;
  __asm__ volatile("" : "+m"(request));
  return gpumem__allocation_failed(request.mr, status, request.bytes, request.alignment);
}

/* Every other call: the block is heard of as it leaves (and at debug level 2 the resource
 * is validated after each call). Out of line, so that the common call saves no registers. */
GPUMEM_NOINLINE static gpumem_status allocate_heard(gpumem_resource *mr, size_t bytes,
                                                    size_t alignment, gpumem_stream stream,
                                                    void **ptr) {
  void *block;
  gpumem_status status = mr->ops->allocate(mr, bytes, alignment, stream, &block);
#if GPUMEM__DEBUG_LEVEL >= 2
  gpumem__debug_after(mr, "allocate");
#endif
  if (GPUMEM_UNLIKELY(status != GPUMEM_OK))
    return gpumem__allocation_failed(mr, status, bytes, alignment);
  gpumem__hand_out(mr, block, bytes, stream);
  *ptr = block;
  return GPUMEM_OK;
}

static inline __attribute__((always_inline)) gpumem_status
allocate(gpumem_resource *mr, size_t bytes, size_t alignment, gpumem_stream stream, void **ptr,
         const void *caller) {
  if (GPUMEM_UNLIKELY(!mr || !ptr))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_allocate: %s is NULL",
                        mr ? "the out-pointer" : "the resource");
  if (GPUMEM_UNLIKELY(bytes == 0)) {
    *ptr = NULL;
    return GPUMEM_OK;
  }
  if (GPUMEM_UNLIKELY(!gpumem__is_pow2(alignment)))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_allocate: alignment %zu is not a power of two", alignment);
  if (alignment < GPUMEM_DEFAULT_ALIGNMENT)
    alignment = GPUMEM_DEFAULT_ALIGNMENT;
  if (GPUMEM_UNLIKELY(bytes > SIZE_MAX - alignment))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_allocate: %zu bytes with alignment %zu overflows the address "
                        "space",
                        bytes, alignment);
#if GPUMEM__DEBUG_LEVEL >= 3
  if (gpumem__debug_level() >= 3)
    return gpumem__guarded_allocate(mr, bytes, alignment, stream, ptr, caller);
#endif
#if GPUMEM__DEBUG_LEVEL < 2
  if (GPUMEM_LIKELY(!gpumem__hand_out_heard(mr)))
    return allocate_unheard(mr, bytes, alignment, stream, ptr);
#endif
  return allocate_heard(mr, bytes, alignment, stream, ptr);
}

gpumem_status gpumem_allocate_aligned(gpumem_resource *mr, size_t bytes, size_t alignment,
                                      gpumem_stream stream, void **ptr) {
  return allocate(mr, bytes, alignment, stream, ptr, PROGRAM_CALL);
}

gpumem_status gpumem_allocate(gpumem_resource *mr, size_t bytes, gpumem_stream stream, void **ptr) {
#if GPUMEM__DEBUG_LEVEL >= 3
  return allocate(mr, bytes, GPUMEM_DEFAULT_ALIGNMENT, stream, ptr, PROGRAM_CALL);
#else
  return gpumem_allocate_aligned(mr, bytes, GPUMEM_DEFAULT_ALIGNMENT, stream, ptr);
#endif
}

static inline __attribute__((always_inline)) gpumem_status
deallocate(gpumem_resource *mr, void *ptr, size_t bytes, size_t alignment, gpumem_stream stream,
           const void *caller) {
  if (GPUMEM_UNLIKELY(!mr))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_deallocate: the resource is NULL");
  if (!ptr)
    return GPUMEM_OK;
  if (GPUMEM_UNLIKELY(bytes == 0))
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "gpumem_deallocate: %p with size 0; an allocation of size 0 is NULL, so "
                        "this size is wrong",
                        ptr);
  if (GPUMEM_UNLIKELY(!gpumem__is_pow2(alignment)))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_deallocate: alignment %zu is not a power of two", alignment);
  if (alignment < GPUMEM_DEFAULT_ALIGNMENT)
    alignment = GPUMEM_DEFAULT_ALIGNMENT;
#if GPUMEM__DEBUG_LEVEL >= 3
  if (gpumem__debug_level() >= 3)
    return gpumem__guarded_deallocate(mr, ptr, bytes, alignment, stream, caller);
#endif
  /* While a tool watches, the block's annotation goes first (core/annotate.h). */
  gpumem_status status = GPUMEM_UNLIKELY(gpumem__annotating())
                             ? gpumem__annotated_deallocate(mr, ptr, bytes, alignment, stream)
                             : mr->ops->deallocate(mr, ptr, bytes, alignment, stream);
#if GPUMEM__DEBUG_LEVEL >= 2
  gpumem__debug_after(mr, "deallocate");
#endif
  return status;
}

gpumem_status gpumem_deallocate_aligned(gpumem_resource *mr, void *ptr, size_t bytes,
                                        size_t alignment, gpumem_stream stream) {
  return deallocate(mr, ptr, bytes, alignment, stream, PROGRAM_CALL);
}

gpumem_status gpumem_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                gpumem_stream stream) {
#if GPUMEM__DEBUG_LEVEL >= 3
  return deallocate(mr, ptr, bytes, GPUMEM_DEFAULT_ALIGNMENT, stream, PROGRAM_CALL);
#else
  return gpumem_deallocate_aligned(mr, ptr, bytes, GPUMEM_DEFAULT_ALIGNMENT, stream);
#endif
}
