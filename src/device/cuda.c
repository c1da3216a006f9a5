/* cuda.c (device): the device layer over the real CUDA driver.
 *
 * The driver is loaded at run time (dlopen of libcuda.so.1, every entry point through
 * cuGetProcAddress), so the library builds wherever cuda.h is present, links no CUDA
 * library, and fails with a clear status where there is no driver or no GPU.
 *
 * Contexts: gpumem lives inside programs that use the CUDA runtime (CuPy, PyTorch), which
 * make a device's primary context current. A call for device d uses the context current on
 * the thread when it belongs to d; otherwise it makes d's primary context current for the
 * call (retaining it once) and restores the caller's context after, so the program never
 * sees its current context change. */
#include "device/device.h"

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The oldest driver whose entry points match the signatures used here (cuMemAdvise and
 * cuMemPrefetchAsync with CUmemLocation arrived in 12.2). */
#define GPUMEM__MIN_DRIVER_VERSION 12020

/* The ABI every entry point is asked for. cuGetProcAddress returns the variant of a
 * function for the version asked, and cuda.h's plain prototypes (which type the pointers
 * below) are the 12.x ones: CUDA 13.0 remapped some names to new signatures (cuCtxGetDevice
 * and cuCtxSynchronize take a context there), so asking at the header's own version would
 * return functions of another shape. */
#define GPUMEM__DRIVER_ABI_VERSION 12080
/* cuStreamGetCtx gained a third parameter in 12.5; the plain prototype is the older one. */
#define GPUMEM__CUDA_ABI_12000 12000

/* Every driver function used, typed from cuda.h's prototypes. */
#define GPUMEM__CUDA_FUNCTIONS(X)                                                                  \
  X(cuInit, GPUMEM__DRIVER_ABI_VERSION)                                                            \
  X(cuGetErrorName, GPUMEM__DRIVER_ABI_VERSION)                                                    \
  X(cuGetErrorString, GPUMEM__DRIVER_ABI_VERSION)                                                  \
  X(cuDeviceGet, GPUMEM__DRIVER_ABI_VERSION)                                                       \
  X(cuDeviceGetCount, GPUMEM__DRIVER_ABI_VERSION)                                                  \
  X(cuDeviceGetName, GPUMEM__DRIVER_ABI_VERSION)                                                   \
  X(cuDeviceGetAttribute, GPUMEM__DRIVER_ABI_VERSION)                                              \
  X(cuDevicePrimaryCtxRetain, GPUMEM__DRIVER_ABI_VERSION)                                          \
  X(cuCtxGetCurrent, GPUMEM__DRIVER_ABI_VERSION)                                                   \
  X(cuCtxSetCurrent, GPUMEM__DRIVER_ABI_VERSION)                                                   \
  X(cuCtxGetDevice, GPUMEM__DRIVER_ABI_VERSION)                                                    \
  X(cuCtxPushCurrent, GPUMEM__DRIVER_ABI_VERSION)                                                  \
  X(cuCtxPopCurrent, GPUMEM__DRIVER_ABI_VERSION)                                                   \
  X(cuCtxSynchronize, GPUMEM__DRIVER_ABI_VERSION)                                                  \
  X(cuMemGetInfo, GPUMEM__DRIVER_ABI_VERSION)                                                      \
  X(cuMemAlloc, GPUMEM__DRIVER_ABI_VERSION)                                                        \
  X(cuMemFree, GPUMEM__DRIVER_ABI_VERSION)                                                         \
  X(cuMemAllocManaged, GPUMEM__DRIVER_ABI_VERSION)                                                 \
  X(cuMemAdvise, GPUMEM__DRIVER_ABI_VERSION)                                                       \
  X(cuMemPrefetchAsync, GPUMEM__DRIVER_ABI_VERSION)                                                \
  X(cuMemHostAlloc, GPUMEM__DRIVER_ABI_VERSION)                                                    \
  X(cuMemFreeHost, GPUMEM__DRIVER_ABI_VERSION)                                                     \
  X(cuPointerGetAttribute, GPUMEM__DRIVER_ABI_VERSION)                                             \
  X(cuMemPoolCreate, GPUMEM__DRIVER_ABI_VERSION)                                                   \
  X(cuMemPoolDestroy, GPUMEM__DRIVER_ABI_VERSION)                                                  \
  X(cuMemPoolSetAttribute, GPUMEM__DRIVER_ABI_VERSION)                                             \
  X(cuMemPoolGetAttribute, GPUMEM__DRIVER_ABI_VERSION)                                             \
  X(cuMemPoolTrimTo, GPUMEM__DRIVER_ABI_VERSION)                                                   \
  X(cuMemAllocFromPoolAsync, GPUMEM__DRIVER_ABI_VERSION)                                           \
  X(cuMemFreeAsync, GPUMEM__DRIVER_ABI_VERSION)                                                    \
  X(cuStreamCreate, GPUMEM__DRIVER_ABI_VERSION)                                                    \
  X(cuStreamDestroy, GPUMEM__DRIVER_ABI_VERSION)                                                   \
  X(cuStreamSynchronize, GPUMEM__DRIVER_ABI_VERSION)                                               \
  X(cuStreamQuery, GPUMEM__DRIVER_ABI_VERSION)                                                     \
  X(cuStreamGetCtx, GPUMEM__CUDA_ABI_12000)                                                        \
  X(cuEventCreate, GPUMEM__DRIVER_ABI_VERSION)                                                     \
  X(cuEventDestroy, GPUMEM__DRIVER_ABI_VERSION)                                                    \
  X(cuEventRecord, GPUMEM__DRIVER_ABI_VERSION)                                                     \
  X(cuEventQuery, GPUMEM__DRIVER_ABI_VERSION)                                                      \
  X(cuEventSynchronize, GPUMEM__DRIVER_ABI_VERSION)                                                \
  X(cuStreamWaitEvent, GPUMEM__DRIVER_ABI_VERSION)                                                 \
  X(cuMemcpyAsync, GPUMEM__DRIVER_ABI_VERSION)                                                     \
  X(cuMemsetD8Async, GPUMEM__DRIVER_ABI_VERSION)                                                   \
  X(cuMemAddressReserve, GPUMEM__DRIVER_ABI_VERSION)                                               \
  X(cuMemAddressFree, GPUMEM__DRIVER_ABI_VERSION)                                                  \
  X(cuMemCreate, GPUMEM__DRIVER_ABI_VERSION)                                                       \
  X(cuMemRelease, GPUMEM__DRIVER_ABI_VERSION)                                                      \
  X(cuMemMap, GPUMEM__DRIVER_ABI_VERSION)                                                          \
  X(cuMemUnmap, GPUMEM__DRIVER_ABI_VERSION)                                                        \
  X(cuMemSetAccess, GPUMEM__DRIVER_ABI_VERSION)                                                    \
  X(cuMemGetAllocationGranularity, GPUMEM__DRIVER_ABI_VERSION)

static struct {
#define GPUMEM__DECLARE_FN_(name, abi) __typeof__(name) *name;
  GPUMEM__CUDA_FUNCTIONS(GPUMEM__DECLARE_FN_)
#undef GPUMEM__DECLARE_FN_
  /* Optional (driver 12.8+): cheaper than going through the stream's context. */
  CUresult (*cuStreamGetDevice)(CUstream, CUdevice *);
  /* Optional (driver 13.0+): default pools of managed memory. Typed here, not from cuda.h,
   * so that the library still builds against 12.x headers, which lack it. */
  CUresult (*cuMemGetDefaultMemPool)(CUmemoryPool *, CUmemLocation *, CUmemAllocationType);
} cu;

/* The first driver with pools of managed memory (cuMemGetDefaultMemPool). */
#define GPUMEM__MANAGED_POOL_DRIVER_VERSION 13000
/* CU_MEM_ALLOCATION_TYPE_MANAGED, spelled out for the same reason. */
#define GPUMEM__CU_MEM_ALLOCATION_TYPE_MANAGED ((CUmemAllocationType)0x2)

static int driver_version_loaded;

static int device_count;
static CUdevice device_handles[GPUMEM_MAX_DEVICES];
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(CUcontext) primary_contexts[GPUMEM_MAX_DEVICES];

/* ---------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------- */

static gpumem_status status_of(CUresult result) {
  switch (result) {
  case CUDA_SUCCESS:
    return GPUMEM_OK;
  case CUDA_ERROR_OUT_OF_MEMORY:
    return GPUMEM_ERR_OUT_OF_MEMORY;
  case CUDA_ERROR_NOT_READY:
    return GPUMEM_ERR_NOT_READY;
  case CUDA_ERROR_INVALID_DEVICE:
    return GPUMEM_ERR_INVALID_DEVICE;
  case CUDA_ERROR_NOT_SUPPORTED:
    return GPUMEM_ERR_UNSUPPORTED;
  default:
    return GPUMEM_ERR_CUDA;
  }
}

/* Records a failed driver call and returns its status; `call` names it in the message. */
static gpumem_status cu_fail(CUresult result, const char *call) {
  const char *name = "CUDA_ERROR_UNKNOWN", *text = "unknown error";
  if (cu.cuGetErrorName)
    cu.cuGetErrorName(result, &name);
  if (cu.cuGetErrorString)
    cu.cuGetErrorString(result, &text);
  gpumem__set_cuda_error((int)result);
  return gpumem__fail(status_of(result), "%s failed: %s (%d: %s)", call, name, (int)result, text);
}

#define CU_CHECK(call, name)                                                                       \
  do {                                                                                             \
    CUresult cu_result_ = (call);                                                                  \
    if (GPUMEM_UNLIKELY(cu_result_ != CUDA_SUCCESS))                                               \
      return cu_fail(cu_result_, name);                                                            \
  } while (0)

/* ---------------------------------------------------------------------------------------
 * Contexts
 * ------------------------------------------------------------------------------------- */

static gpumem_status primary_context(int device, CUcontext *ctx) {
  CUcontext primary = atomic_load_explicit(&primary_contexts[device], memory_order_acquire);
  if (GPUMEM_LIKELY(primary != NULL)) {
    *ctx = primary;
    return GPUMEM_OK;
  }
  pthread_mutex_lock(&primary_lock);
  primary = atomic_load_explicit(&primary_contexts[device], memory_order_acquire);
  CUresult result = CUDA_SUCCESS;
  if (!primary) {
    /* Retained for the life of the process: resources of the device may live that long. */
    result = cu.cuDevicePrimaryCtxRetain(&primary, device_handles[device]);
    if (result == CUDA_SUCCESS)
      atomic_store_explicit(&primary_contexts[device], primary, memory_order_release);
  }
  pthread_mutex_unlock(&primary_lock);
  CU_CHECK(result, "cuDevicePrimaryCtxRetain");
  *ctx = primary;
  return GPUMEM_OK;
}

static int ordinal_of(CUdevice handle) {
  for (int i = 0; i < device_count; i++)
    if (device_handles[i] == handle)
      return i;
  return -1;
}

typedef struct context_scope {
  CUcontext previous;
  bool restore;
} context_scope;

/* Makes a context of `device` current unless one is; remembers what to restore. When no
 * context was current, the primary context stays current after, as the runtime leaves it. */
static gpumem_status enter_device(int device, context_scope *scope) {
  CUcontext current = NULL;
  CU_CHECK(cu.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  scope->previous = current;
  scope->restore = false;
  if (current) {
    CUdevice handle;
    if (cu.cuCtxGetDevice(&handle) == CUDA_SUCCESS && handle == device_handles[device])
      return GPUMEM_OK;
  }
  CUcontext primary = NULL;
  gpumem_status status = primary_context(device, &primary);
  if (status != GPUMEM_OK)
    return status;
  CU_CHECK(cu.cuCtxSetCurrent(primary), "cuCtxSetCurrent");
  scope->restore = current != NULL;
  return GPUMEM_OK;
}

static void leave_device(const context_scope *scope) {
  if (scope->restore)
    cu.cuCtxSetCurrent(scope->previous);
}

static bool is_special_stream(gpumem_stream stream) {
  return stream == NULL || stream == (gpumem_stream)CU_STREAM_LEGACY ||
         stream == (gpumem_stream)CU_STREAM_PER_THREAD;
}

/* Driver calls need some context current. With none, use the stream's own context, or
 * device 0's primary context for the special streams (as the runtime does on first use). */
static gpumem_status ensure_context(gpumem_stream stream) {
  CUcontext current = NULL;
  CU_CHECK(cu.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (GPUMEM_LIKELY(current != NULL))
    return GPUMEM_OK;
  if (!is_special_stream(stream)) {
    CU_CHECK(cu.cuStreamGetCtx((CUstream)stream, &current), "cuStreamGetCtx");
  } else {
    gpumem_status status = primary_context(0, &current);
    if (status != GPUMEM_OK)
      return status;
  }
  CU_CHECK(cu.cuCtxSetCurrent(current), "cuCtxSetCurrent");
  return GPUMEM_OK;
}

/* Runs `expr` (a CUresult expression) with `device` current; returns its status. */
#define IN_DEVICE(device, expr, name)                                                              \
  do {                                                                                             \
    context_scope scope_;                                                                          \
    gpumem_status scope_status_ = enter_device((device), &scope_);                                 \
    if (scope_status_ != GPUMEM_OK)                                                                \
      return scope_status_;                                                                        \
    CUresult scope_result_ = (expr);                                                               \
    leave_device(&scope_);                                                                         \
    CU_CHECK(scope_result_, name);                                                                 \
    return GPUMEM_OK;                                                                              \
  } while (0)

#define ON_STREAM(stream, expr, name)                                                              \
  do {                                                                                             \
    gpumem_status stream_status_ = ensure_context(stream);                                         \
    if (stream_status_ != GPUMEM_OK)                                                               \
      return stream_status_;                                                                       \
    CU_CHECK((expr), name);                                                                        \
    return GPUMEM_OK;                                                                              \
  } while (0)

/* As ON_STREAM for work of `device`: the special streams mean the current context's, so
 * that device is made current for them (its default stream, whichever device is current). */
#define ON_DEVICE_STREAM(device, stream, expr, name)                                               \
  do {                                                                                             \
    if (is_special_stream(stream))                                                                 \
      IN_DEVICE(device, expr, name);                                                               \
    ON_STREAM(stream, expr, name);                                                                 \
  } while (0)

/* ---------------------------------------------------------------------------------------
 * Loading the driver
 * ------------------------------------------------------------------------------------- */

static const char *const no_gpu_hint =
    "; to run without a GPU, use the simulated device: GPUMEM_DEVICE=sim";

static gpumem_status load_functions(void *library, int driver_version) {
  __typeof__(cuGetProcAddress) *get_proc =
      (__typeof__(cuGetProcAddress) *)dlsym(library, "cuGetProcAddress_v2");
  if (!get_proc)
    return gpumem__fail(GPUMEM_ERR_NO_DRIVER, "the CUDA driver has no cuGetProcAddress_v2%s",
                        no_gpu_hint);
  CUdriverProcAddressQueryResult found;
#define GPUMEM__LOAD_FN_(name, abi)                                                                \
  if (get_proc(#name, (void **)&cu.name, driver_version < (abi) ? driver_version : (abi),          \
               CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS ||                             \
      !cu.name)                                                                                    \
    return gpumem__fail(GPUMEM_ERR_NO_DRIVER, "the CUDA driver (version %d) lacks %s%s",           \
                        driver_version, #name, no_gpu_hint);
  GPUMEM__CUDA_FUNCTIONS(GPUMEM__LOAD_FN_)
#undef GPUMEM__LOAD_FN_
  /* Asked at the same ABI as the rest, for the same reason: the prototype is 12.8's. */
  int stream_device_abi =
      driver_version < GPUMEM__DRIVER_ABI_VERSION ? driver_version : GPUMEM__DRIVER_ABI_VERSION;
  if (get_proc("cuStreamGetDevice", (void **)&cu.cuStreamGetDevice, stream_device_abi,
               CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS)
    cu.cuStreamGetDevice = NULL;
  if (driver_version < GPUMEM__MANAGED_POOL_DRIVER_VERSION ||
      get_proc("cuMemGetDefaultMemPool", (void **)&cu.cuMemGetDefaultMemPool,
               GPUMEM__MANAGED_POOL_DRIVER_VERSION, CU_GET_PROC_ADDRESS_DEFAULT,
               &found) != CUDA_SUCCESS)
    cu.cuMemGetDefaultMemPool = NULL;
  driver_version_loaded = driver_version;
  return GPUMEM_OK;
}

gpumem_status gpumem__cuda_device_init(void) {
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library)
    return gpumem__fail(GPUMEM_ERR_NO_DRIVER, "cannot load the CUDA driver (%s)%s", dlerror(),
                        no_gpu_hint);
  __typeof__(cuDriverGetVersion) *get_version =
      (__typeof__(cuDriverGetVersion) *)dlsym(library, "cuDriverGetVersion");
  int driver_version = 0;
  if (!get_version || get_version(&driver_version) != CUDA_SUCCESS)
    return gpumem__fail(GPUMEM_ERR_NO_DRIVER, "the CUDA driver does not report its version%s",
                        no_gpu_hint);
  if (driver_version < GPUMEM__MIN_DRIVER_VERSION)
    return gpumem__fail(GPUMEM_ERR_NO_DRIVER,
                        "the CUDA driver supports CUDA %d.%d; gpumem needs 12.2 or newer%s",
                        driver_version / 1000, driver_version % 1000 / 10, no_gpu_hint);
  gpumem_status status = load_functions(library, driver_version);
  if (status != GPUMEM_OK)
    return status;
  CUresult result = cu.cuInit(0);
  if (result == CUDA_ERROR_NO_DEVICE) {
    gpumem__set_cuda_error((int)result);
    return gpumem__fail(GPUMEM_ERR_NO_DEVICE, "the CUDA driver sees no GPU%s", no_gpu_hint);
  }
  if (result != CUDA_SUCCESS) {
    cu_fail(result, "cuInit");
    return gpumem__fail_context(GPUMEM_ERR_NO_DRIVER, "the CUDA driver cannot start%s",
                                no_gpu_hint);
  }
  CU_CHECK(cu.cuDeviceGetCount(&device_count), "cuDeviceGetCount");
  if (device_count == 0)
    return gpumem__fail(GPUMEM_ERR_NO_DEVICE, "the CUDA driver sees no GPU%s", no_gpu_hint);
  if (device_count > GPUMEM_MAX_DEVICES)
    device_count = GPUMEM_MAX_DEVICES;
  for (int i = 0; i < device_count; i++)
    CU_CHECK(cu.cuDeviceGet(&device_handles[i], i), "cuDeviceGet");
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Devices
 * ------------------------------------------------------------------------------------- */

static gpumem_status cuda_device_count(int *count) {
  *count = device_count;
  return GPUMEM_OK;
}

static gpumem_status cuda_device_name(int device, char *name, size_t size) {
  CU_CHECK(cu.cuDeviceGetName(name, size > 1024 ? 1024 : (int)size, device_handles[device]),
           "cuDeviceGetName");
  return GPUMEM_OK;
}

static gpumem_status cuda_granularity(int device, int64_t *value) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_handles[device];
  size_t granularity = 0;
  CU_CHECK(
      cu.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      "cuMemGetAllocationGranularity");
  *value = (int64_t)granularity;
  return GPUMEM_OK;
}

static gpumem_status cuda_device_attribute(int device, gpumem__device_attr attr, int64_t *value) {
  CUdevice_attribute which;
  switch (attr) {
  case GPUMEM__ATTR_PAGEABLE_MEMORY_ACCESS:
    which = CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS;
    break;
  case GPUMEM__ATTR_VMM_SUPPORTED:
    which = CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
    break;
  case GPUMEM__ATTR_MEMPOOL_SUPPORTED:
    which = CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED;
    break;
  case GPUMEM__ATTR_CONCURRENT_MANAGED:
    which = CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS;
    break;
  case GPUMEM__ATTR_IPC_POSIX_FD_SUPPORTED:
    which = CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED;
    break;
  case GPUMEM__ATTR_VMM_GRANULARITY:
    return cuda_granularity(device, value);
  default:
    return gpumem__fail(GPUMEM_ERR_INTERNAL, "unknown device attribute %d", (int)attr);
  }
  int result = 0;
  CU_CHECK(cu.cuDeviceGetAttribute(&result, which, device_handles[device]), "cuDeviceGetAttribute");
  *value = result;
  return GPUMEM_OK;
}

static gpumem_status cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
  IN_DEVICE(device, cu.cuMemGetInfo(free_bytes, total_bytes), "cuMemGetInfo");
}

static gpumem_status cuda_get_device(int *device) {
  CUcontext current = NULL;
  CU_CHECK(cu.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (!current) {
    *device = 0;
    return GPUMEM_OK;
  }
  CUdevice handle;
  CU_CHECK(cu.cuCtxGetDevice(&handle), "cuCtxGetDevice");
  int ordinal = ordinal_of(handle);
  *device = ordinal < 0 ? 0 : ordinal;
  return GPUMEM_OK;
}

static gpumem_status cuda_set_device(int device) {
  CUcontext primary = NULL;
  gpumem_status status = primary_context(device, &primary);
  if (status != GPUMEM_OK)
    return status;
  CU_CHECK(cu.cuCtxSetCurrent(primary), "cuCtxSetCurrent");
  return GPUMEM_OK;
}

static gpumem_status cuda_stream_device(gpumem_stream stream, int *device) {
  if (is_special_stream(stream)) {
    *device = GPUMEM_CURRENT_DEVICE;
    return GPUMEM_OK;
  }
  CUdevice handle;
  if (cu.cuStreamGetDevice) {
    CU_CHECK(cu.cuStreamGetDevice((CUstream)stream, &handle), "cuStreamGetDevice");
  } else {
    CUcontext ctx;
    CU_CHECK(cu.cuStreamGetCtx((CUstream)stream, &ctx), "cuStreamGetCtx");
    CU_CHECK(cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
    CUresult result = cu.cuCtxGetDevice(&handle);
    cu.cuCtxPopCurrent(&ctx);
    CU_CHECK(result, "cuCtxGetDevice");
  }
  int ordinal = ordinal_of(handle);
  if (ordinal < 0)
    return gpumem__fail(GPUMEM_ERR_INVALID_DEVICE,
                        "stream %p belongs to a device gpumem does not know (driver device %d)",
                        stream, (int)handle);
  *device = ordinal;
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Memory
 * ------------------------------------------------------------------------------------- */

static gpumem_status cuda_mem_alloc(int device, size_t bytes, void **ptr) {
  IN_DEVICE(device, cu.cuMemAlloc((CUdeviceptr *)ptr, bytes), "cuMemAlloc");
}

static gpumem_status cuda_mem_free(int device, void *ptr) {
  IN_DEVICE(device, cu.cuMemFree((CUdeviceptr)ptr), "cuMemFree");
}

static gpumem_status cuda_managed_alloc(int device, size_t bytes, void **ptr) {
  IN_DEVICE(device, cu.cuMemAllocManaged((CUdeviceptr *)ptr, bytes, CU_MEM_ATTACH_GLOBAL),
            "cuMemAllocManaged");
}

static gpumem_status cuda_prefetch(void *ptr, size_t bytes, int device, gpumem_stream stream) {
  CUmemLocation location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device_handles[device]};
  IN_DEVICE(device, cu.cuMemPrefetchAsync((CUdeviceptr)ptr, bytes, location, 0, (CUstream)stream),
            "cuMemPrefetchAsync");
}

static CUresult advise_all(void *ptr, size_t bytes, unsigned advice, int device) {
  CUmemLocation on_device = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device_handles[device]};
  CUmemLocation on_host = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0};
  CUresult result = CUDA_SUCCESS;
  if (advice & GPUMEM_ADVISE_READ_MOSTLY)
    result = cu.cuMemAdvise((CUdeviceptr)ptr, bytes, CU_MEM_ADVISE_SET_READ_MOSTLY, on_device);
  if (result == CUDA_SUCCESS && (advice & GPUMEM_ADVISE_PREFERRED_LOCATION_DEVICE))
    result =
        cu.cuMemAdvise((CUdeviceptr)ptr, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_device);
  if (result == CUDA_SUCCESS && (advice & GPUMEM_ADVISE_PREFERRED_LOCATION_HOST))
    result = cu.cuMemAdvise((CUdeviceptr)ptr, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_host);
  if (result == CUDA_SUCCESS && (advice & GPUMEM_ADVISE_ACCESSED_BY_DEVICE))
    result = cu.cuMemAdvise((CUdeviceptr)ptr, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, on_device);
  return result;
}

static gpumem_status cuda_pointer_is_managed(const void *ptr, int *managed) {
  unsigned int value = 0;
  /* An address the driver does not know is simply not managed memory. */
  if (cu.cuPointerGetAttribute(&value, CU_POINTER_ATTRIBUTE_IS_MANAGED, (CUdeviceptr)ptr) !=
      CUDA_SUCCESS)
    value = 0;
  *managed = value != 0;
  return GPUMEM_OK;
}

static gpumem_status cuda_advise(void *ptr, size_t bytes, unsigned advice, int device) {
  IN_DEVICE(device, advise_all(ptr, bytes, advice, device), "cuMemAdvise");
}

static gpumem_status cuda_managed_free(int device, void *ptr) {
  IN_DEVICE(device, cu.cuMemFree((CUdeviceptr)ptr), "cuMemFree (managed)");
}

static gpumem_status cuda_host_alloc(int device, size_t bytes, unsigned flags, void **ptr) {
  unsigned cu_flags = 0;
  if (flags & GPUMEM_PINNED_PORTABLE)
    cu_flags |= CU_MEMHOSTALLOC_PORTABLE;
  if (flags & GPUMEM_PINNED_DEVICE_MAPPED)
    cu_flags |= CU_MEMHOSTALLOC_DEVICEMAP;
  if (flags & GPUMEM_PINNED_WRITE_COMBINED)
    cu_flags |= CU_MEMHOSTALLOC_WRITECOMBINED;
  IN_DEVICE(device, cu.cuMemHostAlloc(ptr, bytes, cu_flags), "cuMemHostAlloc");
}

static gpumem_status cuda_host_free(int device, void *ptr) {
  IN_DEVICE(device, cu.cuMemFreeHost(ptr), "cuMemFreeHost");
}

/* ---------------------------------------------------------------------------------------
 * Driver pools
 * ------------------------------------------------------------------------------------- */

static gpumem_status cuda_pool_create(int device, gpumem_ipc_handle ipc, gpumem__mempool *pool) {
  CUmemPoolProps props = {0};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = ipc == GPUMEM_IPC_POSIX_FD ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                      : ipc == GPUMEM_IPC_FABRIC ? CU_MEM_HANDLE_TYPE_FABRIC
                                                 : CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device_handles[device];
  CUmemoryPool created;
  context_scope scope;
  gpumem_status status = enter_device(device, &scope);
  if (status != GPUMEM_OK)
    return status;
  CUresult result = cu.cuMemPoolCreate(&created, &props);
  leave_device(&scope);
  CU_CHECK(result, "cuMemPoolCreate");
  *pool = (gpumem__mempool)created;
  return GPUMEM_OK;
}

static gpumem_status cuda_pool_destroy(int device, gpumem__mempool pool) {
  IN_DEVICE(device, cu.cuMemPoolDestroy((CUmemoryPool)pool), "cuMemPoolDestroy");
}

static gpumem_status cuda_pool_set_release_threshold(gpumem__mempool pool, uint64_t bytes) {
  cuuint64_t value = bytes;
  CU_CHECK(cu.cuMemPoolSetAttribute((CUmemoryPool)pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value),
           "cuMemPoolSetAttribute");
  return GPUMEM_OK;
}

static gpumem_status cuda_pool_reserved(gpumem__mempool pool, uint64_t *bytes) {
  cuuint64_t value = 0;
  CU_CHECK(
      cu.cuMemPoolGetAttribute((CUmemoryPool)pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value),
      "cuMemPoolGetAttribute");
  *bytes = value;
  return GPUMEM_OK;
}

static gpumem_status cuda_pool_trim(gpumem__mempool pool, size_t keep) {
  CU_CHECK(cu.cuMemPoolTrimTo((CUmemoryPool)pool, keep), "cuMemPoolTrimTo");
  return GPUMEM_OK;
}

static gpumem_status cuda_pool_alloc_async(int device, gpumem__mempool pool, size_t bytes,
                                           gpumem_stream stream, void **ptr) {
  ON_DEVICE_STREAM(
      device, stream,
      cu.cuMemAllocFromPoolAsync((CUdeviceptr *)ptr, bytes, (CUmemoryPool)pool, (CUstream)stream),
      "cuMemAllocFromPoolAsync");
}

static gpumem_status cuda_free_async(void *ptr, gpumem_stream stream) {
  ON_STREAM(stream, cu.cuMemFreeAsync((CUdeviceptr)ptr, (CUstream)stream), "cuMemFreeAsync");
}

static gpumem_status cuda_pool_default_managed(int device, gpumem__mempool *pool) {
  if (!cu.cuMemGetDefaultMemPool)
    return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                        "the CUDA driver (version %d) has no pools of managed memory "
                        "(cuMemGetDefaultMemPool needs CUDA 13.0 or newer)",
                        driver_version_loaded);
  CUmemLocation location = {0};
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = device_handles[device];
  CUmemoryPool found;
  context_scope scope;
  gpumem_status status = enter_device(device, &scope);
  if (status != GPUMEM_OK)
    return status;
  CUresult result =
      cu.cuMemGetDefaultMemPool(&found, &location, GPUMEM__CU_MEM_ALLOCATION_TYPE_MANAGED);
  leave_device(&scope);
  CU_CHECK(result, "cuMemGetDefaultMemPool");
  *pool = (gpumem__mempool)found;
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Streams and events
 * ------------------------------------------------------------------------------------- */

static gpumem_status cuda_stream_create(int device, gpumem_stream *stream) {
  IN_DEVICE(device, cu.cuStreamCreate((CUstream *)stream, CU_STREAM_NON_BLOCKING),
            "cuStreamCreate");
}

static gpumem_status cuda_stream_destroy(gpumem_stream stream) {
  ON_STREAM(stream, cu.cuStreamDestroy((CUstream)stream), "cuStreamDestroy");
}

static gpumem_status cuda_stream_synchronize(gpumem_stream stream) {
  ON_STREAM(stream, cu.cuStreamSynchronize((CUstream)stream), "cuStreamSynchronize");
}

static gpumem_status cuda_device_synchronize(int device) {
  IN_DEVICE(device, cu.cuCtxSynchronize(), "cuCtxSynchronize");
}

static gpumem_status cuda_stream_query(gpumem_stream stream) {
  gpumem_status status = ensure_context(stream);
  if (status != GPUMEM_OK)
    return status;
  CUresult result = cu.cuStreamQuery((CUstream)stream);
  if (result == CUDA_ERROR_NOT_READY)
    return GPUMEM_ERR_NOT_READY;
  CU_CHECK(result, "cuStreamQuery");
  return GPUMEM_OK;
}

static gpumem_status cuda_event_create(int device, gpumem__event *event) {
  IN_DEVICE(device, cu.cuEventCreate((CUevent *)event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
}

static gpumem_status cuda_event_destroy(gpumem__event event) {
  ON_STREAM(NULL, cu.cuEventDestroy((CUevent)event), "cuEventDestroy");
}

static gpumem_status cuda_event_record(int device, gpumem__event event, gpumem_stream stream) {
  ON_DEVICE_STREAM(device, stream, cu.cuEventRecord((CUevent)event, (CUstream)stream),
                   "cuEventRecord");
}

static gpumem_status cuda_event_query(gpumem__event event) {
  gpumem_status status = ensure_context(NULL);
  if (status != GPUMEM_OK)
    return status;
  CUresult result = cu.cuEventQuery((CUevent)event);
  if (result == CUDA_ERROR_NOT_READY)
    return GPUMEM_ERR_NOT_READY;
  CU_CHECK(result, "cuEventQuery");
  return GPUMEM_OK;
}

static gpumem_status cuda_event_synchronize(gpumem__event event) {
  ON_STREAM(NULL, cu.cuEventSynchronize((CUevent)event), "cuEventSynchronize");
}

static gpumem_status cuda_stream_wait_event(int device, gpumem_stream stream, gpumem__event event) {
  ON_DEVICE_STREAM(device, stream, cu.cuStreamWaitEvent((CUstream)stream, (CUevent)event, 0),
                   "cuStreamWaitEvent");
}

/* ---------------------------------------------------------------------------------------
 * Copies
 * ------------------------------------------------------------------------------------- */

static gpumem_status cuda_memcpy_async(void *dst, const void *src, size_t bytes,
                                       gpumem_stream stream) {
  ON_STREAM(stream, cu.cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, bytes, (CUstream)stream),
            "cuMemcpyAsync");
}

static gpumem_status cuda_memset_async(void *dst, unsigned char value, size_t bytes,
                                       gpumem_stream stream) {
  ON_STREAM(stream, cu.cuMemsetD8Async((CUdeviceptr)dst, value, bytes, (CUstream)stream),
            "cuMemsetD8Async");
}

/* ---------------------------------------------------------------------------------------
 * Virtual memory management
 * ------------------------------------------------------------------------------------- */

static gpumem_status cuda_vmm_reserve(int device, size_t bytes, size_t alignment, void **va) {
  IN_DEVICE(device, cu.cuMemAddressReserve((CUdeviceptr *)va, bytes, alignment, 0, 0),
            "cuMemAddressReserve");
}

static gpumem_status cuda_vmm_release(void *va, size_t bytes) {
  ON_STREAM(NULL, cu.cuMemAddressFree((CUdeviceptr)va, bytes), "cuMemAddressFree");
}

static gpumem_status cuda_vmm_create(int device, size_t bytes, gpumem__vmm_handle *handle) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_handles[device];
  IN_DEVICE(device, cu.cuMemCreate((CUmemGenericAllocationHandle *)handle, bytes, &prop, 0),
            "cuMemCreate");
}

static gpumem_status cuda_vmm_destroy(gpumem__vmm_handle handle) {
  ON_STREAM(NULL, cu.cuMemRelease((CUmemGenericAllocationHandle)handle), "cuMemRelease");
}

static gpumem_status cuda_vmm_map(void *va, size_t bytes, gpumem__vmm_handle handle) {
  ON_STREAM(NULL, cu.cuMemMap((CUdeviceptr)va, bytes, 0, (CUmemGenericAllocationHandle)handle, 0),
            "cuMemMap");
}

static gpumem_status cuda_vmm_set_access(void *va, size_t bytes, int device) {
  CUmemAccessDesc access = {0};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_handles[device];
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  IN_DEVICE(device, cu.cuMemSetAccess((CUdeviceptr)va, bytes, &access, 1), "cuMemSetAccess");
}

static gpumem_status cuda_vmm_unmap(void *va, size_t bytes) {
  ON_STREAM(NULL, cu.cuMemUnmap((CUdeviceptr)va, bytes), "cuMemUnmap");
}

const gpumem__device_ops gpumem__cuda_device_ops = {
    .name = "cuda",
    .device_count = cuda_device_count,
    .device_name = cuda_device_name,
    .device_attribute = cuda_device_attribute,
    .mem_info = cuda_mem_info,
    .get_device = cuda_get_device,
    .set_device = cuda_set_device,
    .stream_device = cuda_stream_device,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .managed_alloc = cuda_managed_alloc,
    .managed_free = cuda_managed_free,
    .pointer_is_managed = cuda_pointer_is_managed,
    .prefetch = cuda_prefetch,
    .advise = cuda_advise,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .pool_create = cuda_pool_create,
    .pool_destroy = cuda_pool_destroy,
    .pool_set_release_threshold = cuda_pool_set_release_threshold,
    .pool_reserved = cuda_pool_reserved,
    .pool_trim = cuda_pool_trim,
    .pool_alloc_async = cuda_pool_alloc_async,
    .free_async = cuda_free_async,
    .pool_default_managed = cuda_pool_default_managed,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .device_synchronize = cuda_device_synchronize,
    .stream_query = cuda_stream_query,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .stream_wait_event = cuda_stream_wait_event,
    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,
    .vmm_reserve = cuda_vmm_reserve,
    .vmm_release = cuda_vmm_release,
    .vmm_create = cuda_vmm_create,
    .vmm_destroy = cuda_vmm_destroy,
    .vmm_map = cuda_vmm_map,
    .vmm_set_access = cuda_vmm_set_access,
    .vmm_unmap = cuda_vmm_unmap,
    .note_handout = NULL,
};
