/* annotate.c: the NVTX memory annotations of annotate.h: which heaps and regions the tool
 * was told of, kept in two sorted arrays under one lock, and the calls into NVTX (or a
 * test's stand-in). Nothing here is on a hot path unless a tool is attached. */
#include "core/annotate.h"

#include "core/sorted.h"
#include "device/device.h"

#include <pthread.h>

#if defined(__has_include)
#if __has_include(<nvtx3/nvToolsExtMem.h>)
#define GPUMEM__HAVE_NVTX 1
#endif
#endif

#ifdef GPUMEM__HAVE_NVTX
/* NVTX is header-only: its calls find the tool (named by NVTX_INJECTION64_PATH, which
 * compute-sanitizer sets) on first use and are a null-pointer check after that. */
#define NVTX_AS_SYSTEM_HEADER
#include <nvtx3/nvToolsExtMem.h>
#endif

atomic_bool gpumem__annotations_on = false;

typedef struct heap_entry {
  uintptr_t base; /* the key */
  size_t bytes;
  void *handle;
} heap_entry;

typedef struct region_entry {
  uintptr_t ptr; /* the key */
  size_t bytes;
} region_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static gpumem__sorted heaps = GPUMEM__SORTED_INIT(heap_entry);
static gpumem__sorted regions = GPUMEM__SORTED_INIT(region_entry);

/* ---- the calls into NVTX ---- */

#ifdef GPUMEM__HAVE_NVTX
static pthread_once_t domain_once = PTHREAD_ONCE_INIT;
static nvtxDomainHandle_t domain;

static void create_domain(void) {
  domain = nvtxDomainCreateA("gpumem");
}

static void *nvtx_heap_register(void *base, size_t bytes) {
  pthread_once(&domain_once, create_domain);
  nvtxMemVirtualRangeDesc_t range = {.size = bytes, .ptr = base};
  nvtxMemHeapDesc_t desc = {
      .extCompatID = NVTX_EXT_COMPATID_MEM,
      .structSize = sizeof desc,
      .usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR,
      .type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS,
      .typeSpecificDescSize = sizeof range,
      .typeSpecificDesc = &range,
  };
  return nvtxMemHeapRegister(domain, &desc);
}

static void nvtx_heap_unregister(void *heap) {
  nvtxMemHeapUnregister(domain, (nvtxMemHeapHandle_t)heap);
}

static void nvtx_region_register(void *heap, void *ptr, size_t bytes) {
  nvtxMemVirtualRangeDesc_t range = {.size = bytes, .ptr = ptr};
  nvtxMemRegionsRegisterBatch_t batch = {
      .extCompatID = NVTX_EXT_COMPATID_MEM,
      .structSize = sizeof batch,
      .regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS,
      .heap = (nvtxMemHeapHandle_t)heap,
      .regionCount = 1,
      .regionDescElementSize = sizeof range,
      .regionDescElements = &range,
  };
  nvtxMemRegionsRegister(domain, &batch);
}

static void nvtx_region_unregister(void *ptr) {
  nvtxMemRegionRef_t ref = {.pointer = ptr};
  nvtxMemRegionsUnregisterBatch_t batch = {
      .extCompatID = NVTX_EXT_COMPATID_MEM,
      .structSize = sizeof batch,
      .refType = NVTX_MEM_REGION_REF_TYPE_POINTER,
      .refCount = 1,
      .refElementSize = sizeof ref,
      .refElements = &ref,
  };
  nvtxMemRegionsUnregister(domain, &batch);
}
#else
/* Without NVTX's headers no tool hears of anything: every heap is refused. */
static void *nvtx_heap_register(void *base, size_t bytes) {
  (void)base, (void)bytes;
  return NULL;
}
static void nvtx_heap_unregister(void *heap) {
  (void)heap;
}
static void nvtx_region_register(void *heap, void *ptr, size_t bytes) {
  (void)heap, (void)ptr, (void)bytes;
}
static void nvtx_region_unregister(void *ptr) {
  (void)ptr;
}
#endif

static const gpumem__annotation_api nvtx_api = {
    nvtx_heap_register,
    nvtx_heap_unregister,
    nvtx_region_register,
    nvtx_region_unregister,
};
static const gpumem__annotation_api *api = &nvtx_api;

bool gpumem__annotations_built(void) {
#ifdef GPUMEM__HAVE_NVTX
  return true;
#else
  return false;
#endif
}

void gpumem__annotate_use_api(const gpumem__annotation_api *replacement) {
  pthread_mutex_lock(&lock);
  api = replacement ? replacement : &nvtx_api;
  gpumem__sorted_free(&heaps);
  gpumem__sorted_free(&regions);
  atomic_store(&gpumem__annotations_on, false);
  pthread_mutex_unlock(&lock);
}

/* ---- heaps ---- */

void gpumem__annotate_heap_add(const gpumem_resource *upstream, void *base, size_t bytes) {
  if (!upstream->caps.annotatable)
    return;
  pthread_mutex_lock(&lock);
  void *handle = api->heap_register(base, bytes);
  if (handle) {
    if (gpumem__sorted_insert(&heaps, &(heap_entry){(uintptr_t)base, bytes, handle}))
      atomic_store(&gpumem__annotations_on, true);
    else /* no host memory to remember it: the tool must not keep what we cannot undo */
      api->heap_unregister(handle);
  }
  pthread_mutex_unlock(&lock);
}

bool gpumem__annotate_heap_remove(void *base) {
  if (!gpumem__annotating())
    return false;
  pthread_mutex_lock(&lock);
  size_t at = gpumem__sorted_find(&heaps, (uintptr_t)base);
  bool had = at < heaps.count;
  if (had) {
    heap_entry heap = *(heap_entry *)gpumem__sorted_at(&heaps, at);
    gpumem__sorted_remove_at(&heaps, at);
    /* The tool drops the heap's regions with it; so do we (a chunk goes back only when no
     * block in it is live, but a program may have leaked one). */
    size_t first = gpumem__sorted_lower_bound(&regions, heap.base);
    size_t last = gpumem__sorted_lower_bound(&regions, heap.base + heap.bytes);
    gpumem__sorted_remove_range(&regions, first, last - first);
    api->heap_unregister(heap.handle);
  }
  pthread_mutex_unlock(&lock);
  return had;
}

/* ---- regions ---- */

void gpumem__annotate_block_add(void *ptr, size_t bytes) {
  uintptr_t p = (uintptr_t)ptr;
  pthread_mutex_lock(&lock);
  size_t h = gpumem__sorted_floor(&heaps, p);
  if (h < heaps.count) {
    const heap_entry *heap = gpumem__sorted_at(&heaps, h);
    bool inside = p - heap->base < heap->bytes && bytes <= heap->bytes - (p - heap->base);
    if (inside && gpumem__sorted_find(&regions, p) == regions.count &&
        gpumem__sorted_insert(&regions, &(region_entry){p, bytes}))
      api->region_register(heap->handle, ptr, bytes);
  }
  pthread_mutex_unlock(&lock);
}

/* Waits for the stream and unregisters ptr's region; *bytes_registered gets its size (0:
 * none). */
static void block_remove(gpumem_resource *mr, void *ptr, gpumem_stream stream,
                         size_t *bytes_registered) {
  *bytes_registered = 0;
  pthread_mutex_lock(&lock);
  bool known = gpumem__sorted_find(&regions, (uintptr_t)ptr) < regions.count;
  pthread_mutex_unlock(&lock);
  if (!known)
    return;
  /* Work already queued on the stream may still use the block: the tool must see it
   * registered until that work is done. A failure to wait leaves the wait to the tool's
   * report, which is the best that can be had. */
  (void)mr->dev->stream_synchronize(stream);
  pthread_mutex_lock(&lock);
  size_t at = gpumem__sorted_find(&regions, (uintptr_t)ptr);
  if (at < regions.count) { /* another thread may have freed it meanwhile (a misuse) */
    *bytes_registered = ((region_entry *)gpumem__sorted_at(&regions, at))->bytes;
    gpumem__sorted_remove_at(&regions, at);
    api->region_unregister(ptr);
  }
  pthread_mutex_unlock(&lock);
}

gpumem_status gpumem__annotated_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                           size_t alignment, gpumem_stream stream) {
  size_t registered;
  block_remove(mr, ptr, stream, &registered);
  gpumem_status status = mr->ops->deallocate(mr, ptr, bytes, alignment, stream);
  if (status != GPUMEM_OK && registered)
    gpumem__annotate_block_add(ptr, registered);
  return status;
}
