/* buffer.c: gpumem_buffer, an untyped resizable block of device memory, as RMM's
 * device_buffer: a size, a capacity, a stream every operation is ordered on, and the
 * resource it came from (retained, so the buffer outlives the caller's handle).
 *
 * Every operation either completes or leaves the buffer exactly as it was: a reallocation
 * makes the new block and enqueues the copy before touching the buffer, and undoes both if
 * a later step fails. */
#include "core/internal.h"
#include "device/device.h"

#include <stdlib.h>

struct gpumem_buffer {
  void *data;
  size_t size;
  size_t capacity; /* bytes allocated; data is NULL when 0 */
  gpumem_stream stream;
  gpumem_resource *mr; /* retained */
};

static gpumem_status need_buffer(const void *buf, const char *caller) {
  if (!buf)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: the buffer is NULL", caller);
  return GPUMEM_OK;
}

/* A new empty buffer on `stream` holding a reference to mr (the current resource if NULL). */
static gpumem_status new_buffer(gpumem_stream stream, gpumem_resource *mr, gpumem_buffer **out) {
  if (!mr) {
    gpumem_status status = gpumem_get_current_device_resource(&mr);
    if (status != GPUMEM_OK)
      return status;
  }
  gpumem_buffer *buf = calloc(1, sizeof *buf);
  if (!buf)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_buffer: out of host memory");
  buf->stream = stream;
  buf->mr = gpumem_resource_retain(mr);
  *out = buf;
  return GPUMEM_OK;
}

static void free_buffer(gpumem_buffer *buf) {
  gpumem_resource_release(buf->mr);
  free(buf);
}

/* Moves the contents to a new block of `capacity` bytes on `stream`; on failure nothing
 * changes. */
static gpumem_status reallocate(gpumem_buffer *buf, size_t capacity, gpumem_stream stream) {
  void *data = NULL;
  gpumem_status status = gpumem_allocate(buf->mr, capacity, stream, &data);
  if (status != GPUMEM_OK)
    return status;
  size_t keep = buf->size < capacity ? buf->size : capacity;
  status = gpumem_memcpy_async(data, buf->data, keep, stream);
  if (status == GPUMEM_OK)
    status = gpumem_deallocate(buf->mr, buf->data, buf->capacity, stream);
  if (status != GPUMEM_OK) {
    gpumem_deallocate(buf->mr, data, capacity, stream);
    return status;
  }
  buf->data = data;
  buf->capacity = capacity;
  return GPUMEM_OK;
}

gpumem_status gpumem_buffer_create(size_t size, gpumem_stream stream, gpumem_resource *mr,
                                   gpumem_buffer **out) {
  if (!out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_buffer_create: out is NULL");
  gpumem_buffer *buf = NULL;
  gpumem_status status = new_buffer(stream, mr, &buf);
  if (status != GPUMEM_OK)
    return status;
  status = gpumem_allocate(buf->mr, size, stream, &buf->data);
  if (status != GPUMEM_OK) {
    free_buffer(buf);
    return status;
  }
  buf->size = buf->capacity = size;
  *out = buf;
  return GPUMEM_OK;
}

gpumem_status gpumem_buffer_create_from_host(const void *src, size_t size, gpumem_stream stream,
                                             gpumem_resource *mr, gpumem_buffer **out) {
  if ((!src && size > 0) || !out)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_buffer_create_from_host: %s is NULL",
                        out ? "src" : "out");
  gpumem_buffer *buf = NULL;
  gpumem_status status = gpumem_buffer_create(size, stream, mr, &buf);
  if (status == GPUMEM_OK)
    status = gpumem_memcpy_async(buf->data, src, size, stream);
  if (status != GPUMEM_OK) {
    gpumem_buffer_destroy(buf);
    return status;
  }
  *out = buf;
  return GPUMEM_OK;
}

gpumem_status gpumem_buffer_copy(const gpumem_buffer *src, gpumem_stream stream,
                                 gpumem_resource *mr, gpumem_buffer **out) {
  gpumem_status status = need_buffer(src, "gpumem_buffer_copy");
  if (status != GPUMEM_OK)
    return status;
  gpumem_buffer *buf = NULL;
  status = gpumem_buffer_create(src->size, stream, mr ? mr : src->mr, &buf);
  if (status == GPUMEM_OK)
    status = gpumem_memcpy_async(buf->data, src->data, src->size, stream);
  if (status != GPUMEM_OK) {
    gpumem_buffer_destroy(buf);
    return status;
  }
  *out = buf;
  return GPUMEM_OK;
}

gpumem_status gpumem_buffer_copy_to_host(const gpumem_buffer *buf, void *dst, size_t size) {
  gpumem_status status = need_buffer(buf, "gpumem_buffer_copy_to_host");
  if (status != GPUMEM_OK)
    return status;
  if (size > buf->size)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_buffer_copy_to_host: %zu bytes asked of a buffer of %zu", size,
                        buf->size);
  if (size == 0)
    return GPUMEM_OK;
  if (!dst)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_buffer_copy_to_host: dst is NULL");
  status = gpumem_memcpy_async(dst, buf->data, size, buf->stream);
  return status == GPUMEM_OK ? gpumem_stream_synchronize(buf->stream) : status;
}

gpumem_status gpumem_buffer_copy_from_host(gpumem_buffer *buf, size_t offset, const void *src,
                                           size_t size) {
  gpumem_status status = need_buffer(buf, "gpumem_buffer_copy_from_host");
  if (status != GPUMEM_OK)
    return status;
  if (offset > buf->size || size > buf->size - offset)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_buffer_copy_from_host: bytes %zu to %zu are outside the buffer "
                        "of %zu",
                        offset, offset + size, buf->size);
  return gpumem_memcpy_async((char *)buf->data + offset, src, size, buf->stream);
}

gpumem_status gpumem_buffer_resize(gpumem_buffer *buf, size_t size, gpumem_stream stream) {
  gpumem_status status = need_buffer(buf, "gpumem_buffer_resize");
  if (status != GPUMEM_OK)
    return status;
  if (size > buf->capacity) {
    status = reallocate(buf, size, stream);
    if (status != GPUMEM_OK)
      return status;
  }
  buf->size = size;
  buf->stream = stream;
  return GPUMEM_OK;
}

gpumem_status gpumem_buffer_reserve(gpumem_buffer *buf, size_t capacity, gpumem_stream stream) {
  gpumem_status status = need_buffer(buf, "gpumem_buffer_reserve");
  if (status != GPUMEM_OK)
    return status;
  if (capacity > buf->capacity) {
    status = reallocate(buf, capacity, stream);
    if (status != GPUMEM_OK)
      return status;
  }
  buf->stream = stream;
  return GPUMEM_OK;
}

gpumem_status gpumem_buffer_shrink_to_fit(gpumem_buffer *buf, gpumem_stream stream) {
  gpumem_status status = need_buffer(buf, "gpumem_buffer_shrink_to_fit");
  if (status != GPUMEM_OK)
    return status;
  if (buf->size < buf->capacity) {
    status = reallocate(buf, buf->size, stream);
    if (status != GPUMEM_OK)
      return status;
  }
  buf->stream = stream;
  return GPUMEM_OK;
}

gpumem_status gpumem_buffer_set_stream(gpumem_buffer *buf, gpumem_stream stream) {
  gpumem_status status = need_buffer(buf, "gpumem_buffer_set_stream");
  if (status == GPUMEM_OK)
    buf->stream = stream;
  return status;
}

gpumem_status gpumem_buffer_destroy(gpumem_buffer *buf) {
  if (!buf)
    return GPUMEM_OK;
  gpumem_status status = gpumem_deallocate(buf->mr, buf->data, buf->capacity, buf->stream);
  if (status != GPUMEM_OK)
    return status;
  free_buffer(buf);
  return GPUMEM_OK;
}

void *gpumem_buffer_data(const gpumem_buffer *buf) {
  return buf ? buf->data : NULL;
}
size_t gpumem_buffer_size(const gpumem_buffer *buf) {
  return buf ? buf->size : 0;
}
size_t gpumem_buffer_capacity(const gpumem_buffer *buf) {
  return buf ? buf->capacity : 0;
}
gpumem_stream gpumem_buffer_stream(const gpumem_buffer *buf) {
  return buf ? buf->stream : NULL;
}
gpumem_resource *gpumem_buffer_resource(const gpumem_buffer *buf) {
  return buf ? buf->mr : NULL;
}
