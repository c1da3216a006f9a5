/* reinitialize.c: gpumem_reinitialize, the C twin of rmm.reinitialize: one call that gives
 * each listed device a resource chosen by two switches (pool, managed memory) and sizes.
 *
 * Every resource is built before any is installed, so a failure on one device leaves every
 * device with the resource it had. */
#include "adaptors/log_file.h"
#include "core/internal.h"
#include "device/device.h"

#include <stdio.h>
#include <stdlib.h>

static gpumem_status check_options(const gpumem_reinitialize_options *options) {
  if (!options)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_reinitialize: options is NULL");
  if (options->devices && options->device_count == 0)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_reinitialize: a device list with no devices");
  if (options->device_count > GPUMEM_MAX_DEVICES)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_reinitialize: %zu devices, at most %d",
                        options->device_count, GPUMEM_MAX_DEVICES);
  if (options->maximum_pool_size && options->initial_pool_size > options->maximum_pool_size)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_reinitialize: Initial pool size exceeds the maximum pool size "
                        "(%zu > %zu bytes)",
                        options->initial_pool_size, options->maximum_pool_size);
  if (options->logging && !options->log_file_name && !gpumem__option_string(GPUMEM__OPT_LOG_FILE))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_reinitialize: logging needs a file: give log_file_name or set "
                        "GPUMEM_LOG_FILE");
  return GPUMEM_OK;
}

/* Puts the spec in `spec` inside "log(..., file=NAME.devN.EXT)" when logging is asked. */
static gpumem_status wrap_in_log(const gpumem_reinitialize_options *options, int device, char *spec,
                                 size_t size) {
  if (!options->logging)
    return GPUMEM_OK;
  const char *name =
      options->log_file_name ? options->log_file_name : gpumem__option_string(GPUMEM__OPT_LOG_FILE);
  char path[4200], file[4300], inner[256];
  gpumem_status status = gpumem__log_device_name(name, device, path, sizeof path);
  if (status != GPUMEM_OK)
    return status;
  gpumem__log_spec_file(path, false, file, sizeof file);
  snprintf(inner, sizeof inner, "%s", spec);
  int written = snprintf(spec, size, "log(%s, %s)", inner, file);
  if (written < 0 || (size_t)written >= size)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_reinitialize_spec: the spec needs a buffer of %d bytes",
                        written + 1);
  return GPUMEM_OK;
}

gpumem_status gpumem_reinitialize_spec(const gpumem_reinitialize_options *options, int device,
                                       char *spec, size_t size) {
  gpumem_status status = check_options(options);
  if (status != GPUMEM_OK)
    return status;
  if (!spec || size == 0)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_reinitialize_spec: no buffer");
  const gpumem__device_ops *dev = gpumem__device_get(&status);
  if (!dev)
    return status;
  status = gpumem__resolve_device(dev, device, &device);
  if (status != GPUMEM_OK)
    return status;
  if (!options->pool_allocator) {
    snprintf(spec, size, "%s", options->managed_memory ? "managed" : "cuda");
    return wrap_in_log(options, device, spec, size);
  }
  const char *upstream = "managed";
  if (!options->managed_memory) {
    int64_t vmm = 0;
    status = dev->device_attribute(device, GPUMEM__ATTR_VMM_SUPPORTED, &vmm);
    if (status != GPUMEM_OK)
      return status;
    upstream = vmm ? "vmm" : "cuda";
    /* Over vmm a pool grows in whole granules: a maximum that cannot hold the initial size
     * rounded up to one (any maximum below a granule) is one only a pool over cuda keeps. */
    int64_t granularity = 0;
    if (vmm && options->maximum_pool_size)
      status = dev->device_attribute(device, GPUMEM__ATTR_VMM_GRANULARITY, &granularity);
    if (status != GPUMEM_OK)
      return status;
    size_t g = (size_t)granularity, least = options->initial_pool_size;
    if (g > 0 && (least ? (least - 1) / g + 1 : 1) > options->maximum_pool_size / g)
      upstream = "cuda";
  }
  snprintf(spec, size, "pool(%s, initial=%zu, max=%zu)", upstream, options->initial_pool_size,
           options->maximum_pool_size);
  return wrap_in_log(options, device, spec, size);
}

gpumem_status gpumem_reinitialize(const gpumem_reinitialize_options *options) {
  gpumem_status status = check_options(options);
  if (status != GPUMEM_OK)
    return status;
  static const int device_zero = 0;
  const int *devices = options->devices ? options->devices : &device_zero;
  size_t count = options->devices ? options->device_count : 1;
  gpumem_resource *built[GPUMEM_MAX_DEVICES] = {0};
  for (size_t i = 0; i < count && status == GPUMEM_OK; i++) {
    char spec[4500]; /* with a log's file name */
    status = gpumem_reinitialize_spec(options, devices[i], spec, sizeof spec);
    if (status == GPUMEM_OK)
      status = gpumem_resource_from_spec_for_device(spec, devices[i], &built[i]);
    if (status != GPUMEM_OK)
      gpumem__fail_context(status, "gpumem_reinitialize: device %d", devices[i]);
  }
  for (size_t i = 0; i < count; i++) {
    if (status == GPUMEM_OK)
      gpumem_set_per_device_resource(devices[i], built[i]);
    gpumem_resource_release(built[i]);
  }
  return status;
}
