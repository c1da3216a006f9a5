/* device.h: the device layer, the one place gpumem meets a device.
 *
 * Everything above src/device calls the device through the table of function pointers
 * below, never CUDA directly. Two backends fill it: cuda.c (the CUDA driver API loaded at
 * run time) and sim.c (a simulated device in host memory). gpumem__device_get() returns
 * the backend in use, initializing it on first use.
 *
 * Conventions for every entry:
 * - Returns GPUMEM_OK or a failure status; on failure it has already set the thread's error
 *   message (gpumem__fail) and, for driver errors, the raw CUresult. Out-parameters are
 *   untouched on failure.
 * - Device indices are valid (callers check them with gpumem__resolve_device).
 * - Calls that act in a device's context (allocations, stream and event creation) take the
 *   device and make its context current themselves for the call's duration; calls on
 *   streams, events and pointers work whatever context is current.
 * - Thread-safe. */
#ifndef GPUMEM_DEVICE_H
#define GPUMEM_DEVICE_H

#include "../core/internal.h"

/* Opaque handles, the same values as CUevent, CUmemoryPool and CUmemGenericAllocationHandle. */
typedef struct CUevent_st *gpumem__event;
typedef struct CUmemPoolHandle_st *gpumem__mempool;
typedef uint64_t gpumem__vmm_handle;

typedef enum gpumem__device_attr {
  GPUMEM__ATTR_PAGEABLE_MEMORY_ACCESS, /* 1: the device reads and writes malloc memory */
  GPUMEM__ATTR_VMM_SUPPORTED,          /* 1: cuMemCreate/cuMemMap work */
  GPUMEM__ATTR_VMM_GRANULARITY,        /* bytes: the recommended mapping granularity */
  GPUMEM__ATTR_MEMPOOL_SUPPORTED,      /* 1: cuMemAllocAsync works */
  GPUMEM__ATTR_CONCURRENT_MANAGED,     /* 1: managed memory can be used while kernels run */
  GPUMEM__ATTR_IPC_POSIX_FD_SUPPORTED  /* 1: driver pools can export POSIX file descriptors */
} gpumem__device_attr;

typedef struct gpumem__device_ops {
  const char *name; /* "cuda" or "sim" */

  /* ---- devices ---- */
  gpumem_status (*device_count)(int *count);
  gpumem_status (*device_name)(int device, char *name, size_t size);
  gpumem_status (*device_attribute)(int device, gpumem__device_attr attr, int64_t *value);
  gpumem_status (*mem_info)(int device, size_t *free_bytes, size_t *total_bytes);
  /* Device of the context current on this thread; 0 when none is. */
  gpumem_status (*get_device)(int *device);
  /* Makes the device's primary context current on this thread. */
  gpumem_status (*set_device)(int device);
  /* The device a stream belongs to; GPUMEM_CURRENT_DEVICE for the special handles (NULL,
   * legacy, per-thread) that mean "the current device's". */
  gpumem_status (*stream_device)(gpumem_stream stream, int *device);

  /* ---- memory ---- */
  gpumem_status (*mem_alloc)(int device, size_t bytes, void **ptr);
  /* May synchronize the device (cuMemFree does). */
  gpumem_status (*mem_free)(int device, void *ptr);
  gpumem_status (*managed_alloc)(int device, size_t bytes, void **ptr);
  gpumem_status (*managed_free)(int device, void *ptr);
  /* Whether ptr points into managed memory (0 for any other, or unknown, address). */
  gpumem_status (*pointer_is_managed)(const void *ptr, int *managed);
  /* Enqueues a prefetch of managed memory to `device` on `stream`. */
  gpumem_status (*prefetch)(void *ptr, size_t bytes, int device, gpumem_stream stream);
  /* Applies gpumem_managed_advice flags to managed memory. */
  gpumem_status (*advise)(void *ptr, size_t bytes, unsigned advice, int device);
  /* flags: gpumem_pinned_flags */
  gpumem_status (*host_alloc)(int device, size_t bytes, unsigned flags, void **ptr);
  gpumem_status (*host_free)(int device, void *ptr);

  /* ---- driver memory pools (cuMemPoolCreate and stream-ordered allocation) ---- */
  gpumem_status (*pool_create)(int device, gpumem_ipc_handle ipc, gpumem__mempool *pool);
  /* `device` is the one the pool was created for: the driver needs a context of it. */
  gpumem_status (*pool_destroy)(int device, gpumem__mempool pool);
  gpumem_status (*pool_set_release_threshold)(gpumem__mempool pool, uint64_t bytes);
  /* Bytes the pool holds from the device (cuMemPoolAttrReservedMemCurrent). */
  gpumem_status (*pool_reserved)(gpumem__mempool pool, uint64_t *bytes);
  /* Releases free memory above `keep` bytes (cuMemPoolTrimTo). */
  gpumem_status (*pool_trim)(gpumem__mempool pool, size_t keep);
  gpumem_status (*pool_alloc_async)(int device, gpumem__mempool pool, size_t bytes,
                                    gpumem_stream stream, void **ptr);
  gpumem_status (*free_async)(void *ptr, gpumem_stream stream);
  /* The device's default pool of managed memory (cuMemGetDefaultMemPool with a device
   * location and CU_MEM_ALLOCATION_TYPE_MANAGED): the driver's, never to be destroyed.
   * GPUMEM_ERR_UNSUPPORTED with a message where the driver has no pools of managed memory
   * (before CUDA 13.0). */
  gpumem_status (*pool_default_managed)(int device, gpumem__mempool *pool);

  /* ---- streams and events ---- */
  /* A non-blocking stream on `device`. */
  gpumem_status (*stream_create)(int device, gpumem_stream *stream);
  gpumem_status (*stream_destroy)(gpumem_stream stream);
  gpumem_status (*stream_synchronize)(gpumem_stream stream);
  /* Waits for all work on every stream of the device (cuCtxSynchronize). */
  gpumem_status (*device_synchronize)(int device);
  /* GPUMEM_OK when all work on the stream is done, GPUMEM_ERR_NOT_READY when not (no
   * message is set for NOT_READY). */
  gpumem_status (*stream_query)(gpumem_stream stream);
  /* An event without timing, on `device`. */
  gpumem_status (*event_create)(int device, gpumem__event *event);
  gpumem_status (*event_destroy)(gpumem__event event);
  /* `device` is the event's device. A special stream (NULL, legacy, per-thread) means that
   * device's default stream, whichever device is current: a resource of device 1 given the
   * default stream means device 1's. */
  gpumem_status (*event_record)(int device, gpumem__event event, gpumem_stream stream);
  /* GPUMEM_OK when the recorded work is done, GPUMEM_ERR_NOT_READY when not. */
  gpumem_status (*event_query)(gpumem__event event);
  gpumem_status (*event_synchronize)(gpumem__event event);
  /* Work enqueued on `stream` after this call waits for the event's recorded work. `device`
   * is the event's device, whose default stream a special stream means (as event_record). */
  gpumem_status (*stream_wait_event)(int device, gpumem_stream stream, gpumem__event event);

  /* ---- copies ---- */
  /* Any direction (unified addressing). From pageable host memory the source has been
   * read when the call returns. */
  gpumem_status (*memcpy_async)(void *dst, const void *src, size_t bytes, gpumem_stream stream);
  gpumem_status (*memset_async)(void *dst, unsigned char value, size_t bytes, gpumem_stream stream);

  /* ---- virtual memory management ---- */
  /* Reserves a virtual address range of `bytes` (a multiple of the granularity). */
  gpumem_status (*vmm_reserve)(int device, size_t bytes, size_t alignment, void **va);
  gpumem_status (*vmm_release)(void *va, size_t bytes);
  /* Physical memory of `bytes` on `device` (a multiple of the granularity). */
  gpumem_status (*vmm_create)(int device, size_t bytes, gpumem__vmm_handle *handle);
  gpumem_status (*vmm_destroy)(gpumem__vmm_handle handle);
  gpumem_status (*vmm_map)(void *va, size_t bytes, gpumem__vmm_handle handle);
  /* Grants `device` read and write access to a mapped range. */
  gpumem_status (*vmm_set_access)(void *va, size_t bytes, int device);
  gpumem_status (*vmm_unmap)(void *va, size_t bytes);

  /* ---- hooks ---- */
  /* Called by the front end for every allocation it hands out, when the backend sets it
   * (the simulated device checks for cross-stream hazards); NULL for cuda. */
  void (*note_handout)(void *ptr, size_t bytes, gpumem_stream stream);
} gpumem__device_ops;

/* Whether `stream` is the per-thread default stream's handle (CU_STREAM_PER_THREAD), which
 * names the calling thread's own stream: the same handle on another thread is another
 * stream. */
static inline bool gpumem__stream_is_per_thread(gpumem_stream stream) {
  return stream == (gpumem_stream)(uintptr_t)0x2;
}

/* Every flag of gpumem_pinned_flags and of gpumem_managed_advice, for checking what callers
 * pass. */
#define GPUMEM__PINNED_FLAGS                                                                       \
  (GPUMEM_PINNED_PORTABLE | GPUMEM_PINNED_DEVICE_MAPPED | GPUMEM_PINNED_WRITE_COMBINED)
#define GPUMEM__ADVICE_FLAGS                                                                       \
  (GPUMEM_ADVISE_READ_MOSTLY | GPUMEM_ADVISE_PREFERRED_LOCATION_DEVICE |                           \
   GPUMEM_ADVISE_PREFERRED_LOCATION_HOST | GPUMEM_ADVISE_ACCESSED_BY_DEVICE)

/* The backend in use, initialized on first call. On failure returns NULL and sets the
 * thread's error (status in *status when status is not NULL). */
const gpumem__device_ops *gpumem__device_get(gpumem_status *status);

/* Resolves GPUMEM_CURRENT_DEVICE and checks an index: GPUMEM_ERR_INVALID_DEVICE with a
 * message when it is out of range. */
gpumem_status gpumem__resolve_device(const gpumem__device_ops *dev, int device, int *resolved);

/* Both of the above for a public entry point `caller`: the backend and the resolved device,
 * or a failure whose message starts with the caller's name. */
gpumem_status gpumem__device_for(const char *caller, int device, const gpumem__device_ops **dev,
                                 int *resolved);

/* Checks that `stream` may be used with memory of `device`: GPUMEM_ERR_INVALID_STREAM with a
 * message when it belongs to another device. */
gpumem_status gpumem__check_stream(const gpumem__device_ops *dev, int device, gpumem_stream stream);

/* The backends. */
extern const gpumem__device_ops gpumem__cuda_device_ops;
extern gpumem__device_ops gpumem__sim_device_ops; /* its note_handout set by sim's init */

/* Initialization of each backend: called once by gpumem__device_get. The cuda backend
 * loads the driver; sim reads its configuration. */
gpumem_status gpumem__cuda_device_init(void);
gpumem_status gpumem__sim_device_init(const gpumem_sim_config *config);

#endif /* GPUMEM_DEVICE_H */
