/* error.c: status names and messages, and the thread's last error.
 *
 * Each thread keeps the message of its last failed gpumem call and the raw CUresult of
 * its last failed driver call, so that a status code can be followed by the detail
 * (request size, resource, what it holds) without any allocation on the failure path. */
#include "core/internal.h"
#include "device/device.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define GPUMEM__MESSAGE_SIZE 1024

static _Thread_local char last_message[GPUMEM__MESSAGE_SIZE];
static _Thread_local int last_cuda_error;
/* Counts the messages set on this thread, so that a caller can tell whether code it called
 * (a user resource's function) set one. */
static _Thread_local uint64_t message_serial;

const char *gpumem_status_name(gpumem_status status) {
  switch (status) {
#define GPUMEM_STATUS_NAME_(name, value, message)                                                  \
  case name:                                                                                       \
    return #name;
    GPUMEM_STATUS_TABLE(GPUMEM_STATUS_NAME_)
#undef GPUMEM_STATUS_NAME_
  }
  return "GPUMEM_STATUS_UNKNOWN";
}

const char *gpumem_status_string(gpumem_status status) {
  switch (status) {
#define GPUMEM_STATUS_MESSAGE_(name, value, message)                                               \
  case name:                                                                                       \
    return message;
    GPUMEM_STATUS_TABLE(GPUMEM_STATUS_MESSAGE_)
#undef GPUMEM_STATUS_MESSAGE_
  }
  return "unknown status";
}

const char *gpumem_last_error_message(void) {
  return last_message;
}

int gpumem_last_cuda_error(void) {
  return last_cuda_error;
}

void gpumem__set_cuda_error(int cuda_error) {
  last_cuda_error = cuda_error;
}

uint64_t gpumem__error_serial(void) {
  return message_serial;
}

void gpumem_set_error_message(const char *message) {
  snprintf(last_message, sizeof last_message, "%s", message ? message : "");
  message_serial++;
}

gpumem_status gpumem__fail(gpumem_status status, const char *format, ...) {
  message_serial++;
  va_list args;
  va_start(args, format);
  vsnprintf(last_message, sizeof last_message, format, args);
  va_end(args);
  return status;
}

void gpumem__clear_error(void) {
  last_message[0] = '\0';
}

gpumem_status gpumem__fail_context(gpumem_status status, const char *format, ...) {
  char context[GPUMEM__MESSAGE_SIZE];
  va_list args;
  va_start(args, format);
  vsnprintf(context, sizeof context, format, args);
  va_end(args);
  char old[GPUMEM__MESSAGE_SIZE];
  memcpy(old, last_message, sizeof old);
  message_serial++;
  snprintf(last_message, sizeof last_message, "%s: %s", context, old);
  return status;
}

const char *gpumem__format_bytes(uint64_t bytes, char *buf, size_t size) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) {
    snprintf(buf, size, "%llu B", (unsigned long long)bytes);
    return buf;
  }
  double value = (double)bytes;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof units / sizeof units[0]) {
    value /= 1024.0;
    unit++;
  }
  snprintf(buf, size, "%.4g %s (%llu B)", value, units[unit], (unsigned long long)bytes);
  return buf;
}

gpumem_status gpumem__prefix_with_spec(const gpumem_resource *mr, gpumem_status status) {
  char spec[512];
  gpumem__describe(mr, spec, sizeof spec);
  return gpumem__fail_context(status, "%s", spec);
}

gpumem_status gpumem__fail_out_of_memory(const gpumem_resource *mr, size_t bytes, const char *why) {
  char spec[256], request[48], held[48], live[48], largest[48];
  gpumem__describe(mr, spec, sizeof spec);
  gpumem__format_bytes(bytes, request, sizeof request);
  uint64_t value;
  strcpy(held, "unknown");
  strcpy(live, "unknown");
  strcpy(largest, "unknown");
  if (gpumem_resource_query(mr, GPUMEM_QUERY_RESERVED_BYTES, &value) == GPUMEM_OK)
    gpumem__format_bytes(value, held, sizeof held);
  if (gpumem_resource_query(mr, GPUMEM_QUERY_LIVE_BYTES, &value) == GPUMEM_OK)
    gpumem__format_bytes(value, live, sizeof live);
  if (gpumem_resource_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK, &value) == GPUMEM_OK)
    gpumem__format_bytes(value, largest, sizeof largest);
  return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                      "out of memory: allocating %s from %s on device %d: %s; the resource "
                      "holds %s, %s of it live, largest free block %s",
                      request, spec, mr->device, why, held, live, largest);
}
