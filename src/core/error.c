/* error.c: status names and messages, and the thread's last error.
 *
 * Each thread keeps the message of its last failed gpumem call and the raw CUresult of
 * its last failed driver call, so that a status code can be followed by the detail
 * (request size, resource, what it holds) without any allocation on the failure path. Only
 * an out-of-memory report, which can be longer than the fixed buffer, goes to a buffer on
 * the heap, kept per thread and freed when the thread ends. The thread also keeps the
 * cause of its last refusal for lack of memory, which the report's verdict reads. */
#include "core/internal.h"
#include "device/device.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPUMEM__MESSAGE_SIZE 1024

static _Thread_local char last_message[GPUMEM__MESSAGE_SIZE];
static _Thread_local int last_cuda_error;
/* Counts the messages set on this thread, so that a caller can tell whether code it called
 * (a user resource's function) set one. */
static _Thread_local uint64_t message_serial;
/* A message too long for last_message (an out-of-memory report), when long_in_use. */
static _Thread_local char *long_message;
static _Thread_local size_t long_capacity;
static _Thread_local bool long_in_use;
static _Thread_local gpumem__oom_note last_oom;
static _Thread_local uint64_t oom_serial;
static _Thread_local char oom_said[GPUMEM__OOM_SAID_SIZE];

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
  return long_in_use ? long_message : last_message;
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
  (void)gpumem__fail(GPUMEM_OK, "%s", message ? message : "");
}

gpumem_status gpumem__fail(gpumem_status status, const char *format, ...) {
  message_serial++;
  long_in_use = false;
  va_list args;
  va_start(args, format);
  vsnprintf(last_message, sizeof last_message, format, args);
  va_end(args);
  return status;
}

void gpumem__clear_error(void) {
  last_message[0] = '\0';
  long_in_use = false;
}

static _Atomic uint64_t absorbed_errors;

void gpumem__absorb_error(void) {
  gpumem__clear_error();
  atomic_fetch_add_explicit(&absorbed_errors, 1, memory_order_relaxed);
}

uint64_t gpumem__absorbed_errors(void) {
  return atomic_load_explicit(&absorbed_errors, memory_order_relaxed);
}

/* The long buffer goes with its thread: a key's destructor, which runs on the ending
 * thread, frees it (and forgets it, should a later destructor fail a gpumem call). */
static pthread_key_t long_key;
static pthread_once_t long_key_once = PTHREAD_ONCE_INIT;
static bool long_key_made;

static void free_long_message(void *memory) {
  free(memory);
  long_message = NULL;
  long_capacity = 0;
  long_in_use = false;
}

static void make_long_key(void) {
  long_key_made = pthread_key_create(&long_key, free_long_message) == 0;
}

bool gpumem__set_long_message(const char *text, size_t length) {
  if (length < sizeof last_message) {
    (void)gpumem__fail(GPUMEM_OK, "%.*s", (int)length, text);
    return true;
  }
  if (length + 1 > long_capacity) {
    pthread_once(&long_key_once, make_long_key);
    char *grown = long_key_made ? realloc(long_message, length + 1) : NULL;
    if (!grown)
      return false;
    long_message = grown;
    long_capacity = length + 1;
    pthread_setspecific(long_key, grown);
  }
  memcpy(long_message, text, length);
  long_message[length] = '\0';
  long_in_use = true;
  message_serial++;
  return true;
}

void gpumem__note_oom(gpumem__oom_cause cause, const gpumem_resource *mr, uint64_t bytes) {
  last_oom = (gpumem__oom_note){cause, mr, bytes, ++oom_serial, ""};
}

void gpumem__note_oom_said(const gpumem_resource *mr, uint64_t bytes, const char *said) {
  if (said != oom_said) /* a resource passing on another's words gives these very ones */
    snprintf(oom_said, sizeof oom_said, "%s", said ? said : "");
  last_oom = (gpumem__oom_note){GPUMEM__OOM_OTHER, mr, bytes, ++oom_serial, oom_said};
}

gpumem__oom_note gpumem__last_oom(void) {
  return last_oom;
}

gpumem_status gpumem__fail_context(gpumem_status status, const char *format, ...) {
  char context[GPUMEM__MESSAGE_SIZE];
  va_list args;
  va_start(args, format);
  vsnprintf(context, sizeof context, format, args);
  va_end(args);
  char old[GPUMEM__MESSAGE_SIZE];
  snprintf(old, sizeof old, "%s", gpumem_last_error_message());
  return gpumem__fail(status, "%s: %s", context, old);
}

const char *gpumem__format_bytes_short(uint64_t bytes, char *buf, size_t size) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
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
  snprintf(buf, size, "%.4g %s", value, units[unit]);
  return buf;
}

const char *gpumem__format_bytes(uint64_t bytes, char *buf, size_t size) {
  if (bytes < 1024)
    return gpumem__format_bytes_short(bytes, buf, size);
  char scaled[32];
  snprintf(buf, size, "%s (%llu B)", gpumem__format_bytes_short(bytes, scaled, sizeof scaled),
           (unsigned long long)bytes);
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
