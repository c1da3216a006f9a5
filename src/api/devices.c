/* devices.c: the public calls about devices and streams, thin checks over the device
 * layer, for programs and tools that do not use the CUDA runtime themselves. */
#include "core/internal.h"
#include "device/device.h"

/* The backend, or a failure with the caller's name in the message. */
static const gpumem__device_ops *backend(const char *caller, gpumem_status *status) {
  const gpumem__device_ops *dev = gpumem__device_get(status);
  if (!dev)
    gpumem__fail_context(*status, "%s", caller);
  return dev;
}

#define GPUMEM__NEED_OUT(out, caller)                                                              \
  do {                                                                                             \
    if (!(out))                                                                                    \
      return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: %s is NULL", caller, #out);            \
  } while (0)

gpumem_status gpumem_device_count(int *count) {
  GPUMEM__NEED_OUT(count, "gpumem_device_count");
  gpumem_status status;
  const gpumem__device_ops *dev = backend("gpumem_device_count", &status);
  return dev ? dev->device_count(count) : status;
}

gpumem_status gpumem_get_device(int *device) {
  GPUMEM__NEED_OUT(device, "gpumem_get_device");
  gpumem_status status;
  const gpumem__device_ops *dev = backend("gpumem_get_device", &status);
  return dev ? dev->get_device(device) : status;
}

gpumem_status gpumem_set_device(int device) {
  gpumem_status status;
  const gpumem__device_ops *dev = backend("gpumem_set_device", &status);
  if (!dev)
    return status;
  status = gpumem__resolve_device(dev, device, &device);
  return status == GPUMEM_OK ? dev->set_device(device) : status;
}

gpumem_status gpumem_device_memory_info(int device, size_t *free_bytes, size_t *total_bytes) {
  GPUMEM__NEED_OUT(free_bytes, "gpumem_device_memory_info");
  GPUMEM__NEED_OUT(total_bytes, "gpumem_device_memory_info");
  gpumem_status status;
  const gpumem__device_ops *dev = backend("gpumem_device_memory_info", &status);
  if (!dev)
    return status;
  status = gpumem__resolve_device(dev, device, &device);
  return status == GPUMEM_OK ? dev->mem_info(device, free_bytes, total_bytes) : status;
}

gpumem_status gpumem_device_name(int device, char *name, size_t size) {
  GPUMEM__NEED_OUT(name, "gpumem_device_name");
  if (size == 0)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_device_name: size is 0");
  gpumem_status status;
  const gpumem__device_ops *dev = backend("gpumem_device_name", &status);
  if (!dev)
    return status;
  status = gpumem__resolve_device(dev, device, &device);
  return status == GPUMEM_OK ? dev->device_name(device, name, size) : status;
}

gpumem_status gpumem_stream_create(int device, gpumem_stream *out) {
  GPUMEM__NEED_OUT(out, "gpumem_stream_create");
  gpumem_status status;
  const gpumem__device_ops *dev = backend("gpumem_stream_create", &status);
  if (!dev)
    return status;
  status = gpumem__resolve_device(dev, device, &device);
  return status == GPUMEM_OK ? dev->stream_create(device, out) : status;
}

gpumem_status gpumem_stream_destroy(gpumem_stream stream) {
  gpumem_status status;
  const gpumem__device_ops *dev = backend("gpumem_stream_destroy", &status);
  return dev ? dev->stream_destroy(stream) : status;
}

gpumem_status gpumem_stream_synchronize(gpumem_stream stream) {
  gpumem_status status;
  const gpumem__device_ops *dev = backend("gpumem_stream_synchronize", &status);
  return dev ? dev->stream_synchronize(stream) : status;
}

gpumem_status gpumem_memcpy_async(void *dst, const void *src, size_t bytes, gpumem_stream stream) {
  if (bytes == 0)
    return GPUMEM_OK;
  if (!dst || !src)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_memcpy_async: %s is NULL",
                        dst ? "src" : "dst");
  gpumem_status status;
  const gpumem__device_ops *dev = backend("gpumem_memcpy_async", &status);
  return dev ? dev->memcpy_async(dst, src, bytes, stream) : status;
}

gpumem_status gpumem_prefetch(void *ptr, size_t bytes, int device, gpumem_stream stream) {
  if (bytes == 0)
    return GPUMEM_OK;
  if (!ptr)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_prefetch: ptr is NULL");
  gpumem_status status;
  const gpumem__device_ops *dev = backend("gpumem_prefetch", &status);
  if (!dev)
    return status;
  status = gpumem__resolve_device(dev, device, &device);
  int managed = 0;
  if (status == GPUMEM_OK)
    status = dev->pointer_is_managed(ptr, &managed);
  if (status == GPUMEM_OK && !managed)
    return GPUMEM_ERR_UNSUPPORTED; /* nothing to move: not an error worth a message */
  return status == GPUMEM_OK ? dev->prefetch(ptr, bytes, device, stream) : status;
}

gpumem_status gpumem_memset_async(void *dst, int value, size_t bytes, gpumem_stream stream) {
  if (bytes == 0)
    return GPUMEM_OK;
  if (!dst)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_memset_async: dst is NULL");
  gpumem_status status;
  const gpumem__device_ops *dev = backend("gpumem_memset_async", &status);
  return dev ? dev->memset_async(dst, (unsigned char)value, bytes, stream) : status;
}
