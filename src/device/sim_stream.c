/* sim_stream.c: the simulated device's streams, events, copies and simulated kernels, and
 * the detection of cross-stream hazards, which is what the sim exists for.
 *
 * Each stream keeps a queue of pending operations numbered 1, 2, 3... in enqueue order.
 * Nothing runs when it is enqueued: work runs when the simulation lets it (a
 * synchronization, gpumem_sim_complete, a free that synchronizes), so a test decides which
 * stream has finished what. An event marks a point in a stream's numbering. Waiting on an
 * event enqueues a wait (running the waiting stream first runs the other stream up to the
 * point) and merges the event's vector clock into the waiting stream's: a stream's clock
 * says, for every other stream, up to which operation its later work is ordered after.
 *
 * A hand-out of memory on stream B is a hazard when some other stream S still has a pending
 * operation touching those bytes that B's clock does not cover: nothing orders B's coming
 * use after S's, which on a GPU is a silent data race. */
#include "device/sim_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum sim_op_kind {
  SIM_OP_COPY,
  SIM_OP_SET,
  SIM_OP_LAUNCH,
  SIM_OP_PREFETCH,
  SIM_OP_WAIT
} sim_op_kind;

struct sim_op {
  sim_op *prev, *next;
  uint64_t seq;
  sim_op_kind kind;
  void *dst; /* the range written (copies, sets, kernels) or prefetched */
  size_t bytes;
  const void *src; /* copies: the source, when it is sim memory read when the op runs */
  void *staging;   /* copies from host memory: the bytes read at enqueue time */
  unsigned char value;
  uint64_t wait_stream, wait_point; /* waits */
};

typedef struct sim_event {
  int device;
  bool recorded;
  uint64_t stream_id, point;
  sim_index clock; /* the recording stream's clock at the record, its own entry included */
} sim_event;

static const char *op_name(sim_op_kind kind) {
  switch (kind) {
  case SIM_OP_COPY:
    return "copy";
  case SIM_OP_SET:
    return "memset";
  case SIM_OP_LAUNCH:
    return "kernel launch";
  case SIM_OP_PREFETCH:
    return "prefetch";
  case SIM_OP_WAIT:
    return "event wait";
  }
  return "operation";
}

/* ---------------------------------------------------------------------------------------
 * Streams: creation and lookup
 * ------------------------------------------------------------------------------------- */

sim_stream *gpumem__sim_stream_new(int device, bool is_default) {
  sim_stream *stream = calloc(1, sizeof *stream);
  if (stream) {
    stream->id = gpumem__sim.next_stream_id++;
    stream->device = device;
    stream->is_default = is_default;
  }
  return stream;
}

bool gpumem__sim_stream_register(sim_stream *stream) {
  if (!gpumem__sim_index_reserve(&gpumem__sim.streams_by_handle, 1) ||
      !gpumem__sim_index_reserve(&gpumem__sim.streams_by_id, 1))
    return false;
  gpumem__sim_index_put(&gpumem__sim.streams_by_handle, (uintptr_t)stream, stream);
  gpumem__sim_index_put(&gpumem__sim.streams_by_id, stream->id, stream);
  return true;
}

/* NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD: a device's default stream. */
static bool is_special_handle(gpumem_stream handle) {
  return (uintptr_t)handle <= 2;
}

gpumem_status gpumem__sim_resolve_stream_of(const char *call, int device, gpumem_stream handle,
                                            sim_stream **stream) {
  if (is_special_handle(handle)) {
    *stream = gpumem__sim.default_stream[device];
    return GPUMEM_OK;
  }
  return gpumem__sim_find_handle(&gpumem__sim.streams_by_handle, call, "a stream", handle,
                                 (void **)stream);
}

gpumem_status gpumem__sim_resolve_stream(const char *call, gpumem_stream handle,
                                         sim_stream **stream) {
  return gpumem__sim_resolve_stream_of(call, gpumem__sim_current_device(), handle, stream);
}

bool gpumem__sim_stream_reached(uint64_t stream_id, uint64_t point) {
  const sim_stream *stream = gpumem__sim_index_get(&gpumem__sim.streams_by_id, stream_id);
  return !stream || stream->completed >= point;
}

/* ---------------------------------------------------------------------------------------
 * Running work
 * ------------------------------------------------------------------------------------- */

static void free_op(sim_op *op) {
  free(op->staging);
  free(op);
}

static void run_op(const sim_op *op) {
  switch (op->kind) {
  case SIM_OP_COPY:
    memmove(op->dst, op->staging ? op->staging : op->src, op->bytes);
    break;
  case SIM_OP_SET:
  case SIM_OP_LAUNCH:
    if (op->bytes)
      memset(op->dst, op->value, op->bytes);
    break;
  case SIM_OP_PREFETCH:
    break; /* where managed pages live is not modelled */
  case SIM_OP_WAIT: {
    sim_stream *other = gpumem__sim_index_get(&gpumem__sim.streams_by_id, op->wait_stream);
    if (other)
      gpumem__sim_run_until(other, op->wait_point);
    break;
  }
  }
}

/* A wait may run another stream, whose waits only name points enqueued before it, so the
 * recursion always ends: a stream is never asked to run past the operation it is running. */
void gpumem__sim_run_until(sim_stream *stream, uint64_t point) {
  while (stream->head && stream->head->seq <= point) {
    sim_op *op = stream->head;
    stream->head = op->next;
    if (stream->head)
      stream->head->prev = NULL;
    else
      stream->tail = NULL;
    run_op(op);
    stream->completed = op->seq;
    if (op->kind != SIM_OP_WAIT)
      stream->touching--;
    free_op(op);
  }
}

static void run_all(sim_stream *stream) {
  gpumem__sim_run_until(stream, stream->enqueued);
}

void gpumem__sim_run_device(int device) {
  for (size_t i = 0; i < gpumem__sim.streams_by_id.count; i++) {
    sim_stream *stream = gpumem__sim.streams_by_id.items[i].value.ptr;
    if (stream->device == device)
      run_all(stream);
  }
}

static bool overlaps(uintptr_t start, size_t bytes, uintptr_t lo, uintptr_t hi) {
  return bytes > 0 && start < hi && lo < start + bytes;
}

static bool op_touches(const sim_op *op, uintptr_t lo, uintptr_t hi) {
  if (op->kind == SIM_OP_WAIT)
    return false;
  return overlaps((uintptr_t)op->dst, op->bytes, lo, hi) ||
         (op->src && !op->staging && overlaps((uintptr_t)op->src, op->bytes, lo, hi));
}

/* The latest pending operation of the stream that touches [lo, hi) and is numbered above
 * `after`, or NULL. Walks from the newest, so covered work is never looked at. */
static const sim_op *last_toucher(const sim_stream *stream, uintptr_t lo, uintptr_t hi,
                                  uint64_t after) {
  if (stream->touching == 0)
    return NULL; /* only waits: a stream that just orders others costs nothing here */
  for (const sim_op *op = stream->tail; op && op->seq > after; op = op->prev)
    if (op_touches(op, lo, hi))
      return op;
  return NULL;
}

void gpumem__sim_drain_range(uintptr_t lo, uintptr_t hi) {
  for (size_t i = 0; i < gpumem__sim.streams_by_id.count; i++) {
    sim_stream *stream = gpumem__sim.streams_by_id.items[i].value.ptr;
    const sim_op *op = last_toucher(stream, lo, hi, 0);
    if (op)
      gpumem__sim_run_until(stream, op->seq);
  }
}

/* ---------------------------------------------------------------------------------------
 * Enqueueing
 * ------------------------------------------------------------------------------------- */

static gpumem_status new_op(const char *call, sim_op_kind kind, sim_op **out) {
  sim_op *op = calloc(1, sizeof *op);
  if (!op)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "simulated device: %s: the host is out of "
                        "memory",
                        call);
  op->kind = kind;
  *out = op;
  return GPUMEM_OK;
}

static void enqueue(sim_stream *stream, sim_op *op) {
  op->seq = ++stream->enqueued;
  if (op->kind != SIM_OP_WAIT)
    stream->touching++;
  op->prev = stream->tail;
  if (stream->tail)
    stream->tail->next = op;
  else
    stream->head = op;
  stream->tail = op;
}

/* ---------------------------------------------------------------------------------------
 * Stream entries
 * ------------------------------------------------------------------------------------- */

gpumem_status gpumem__sim_stream_device(gpumem_stream handle, int *device) {
  if (is_special_handle(handle)) {
    *device = GPUMEM_CURRENT_DEVICE;
    return GPUMEM_OK;
  }
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *stream = NULL;
  gpumem_status status = gpumem__sim_resolve_stream("stream_device", handle, &stream);
  if (status == GPUMEM_OK)
    *device = stream->device;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_stream_create(int device, gpumem_stream *out) {
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_STREAM_CREATE);
  if (status == GPUMEM_OK)
    status = gpumem__sim_check_device("stream_create", device);
  if (status == GPUMEM_OK) {
    sim_stream *stream = gpumem__sim_stream_new(device, false);
    if (stream && gpumem__sim_stream_register(stream)) {
      *out = (gpumem_stream)stream;
    } else {
      free(stream);
      status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                            "simulated device: stream_create: the host is out of memory");
    }
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* Resolves a handle that must name a stream the caller created. */
static gpumem_status resolve_created(const char *call, gpumem_stream handle, sim_stream **stream) {
  gpumem_status status = gpumem__sim_resolve_stream(call, handle, stream);
  if (status == GPUMEM_OK && (*stream)->is_default)
    status =
        gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                     "simulated device: %s: a device's default stream cannot be destroyed", call);
  return status;
}

gpumem_status gpumem__sim_stream_destroy(gpumem_stream handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *stream = NULL;
  gpumem_status status = resolve_created("stream_destroy", handle, &stream);
  if (status == GPUMEM_OK) {
    /* The stream's work still runs (as on a GPU); afterwards its id means "all done". */
    run_all(stream);
    gpumem__sim_index_remove(&gpumem__sim.streams_by_handle, (uintptr_t)stream);
    gpumem__sim_index_remove(&gpumem__sim.streams_by_id, stream->id);
    gpumem__sim_index_clear(&stream->clock);
    free(stream);
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_stream_synchronize(gpumem_stream handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *stream = NULL;
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_SYNCHRONIZE);
  if (status == GPUMEM_OK)
    status = gpumem__sim_resolve_stream("stream_synchronize", handle, &stream);
  if (status == GPUMEM_OK) {
    run_all(stream);
    gpumem__sim_apply_release_thresholds(stream->device);
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_device_synchronize(int device) {
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_SYNCHRONIZE);
  if (status == GPUMEM_OK)
    status = gpumem__sim_check_device("device_synchronize", device);
  if (status == GPUMEM_OK) {
    gpumem__sim_run_device(device);
    gpumem__sim_apply_release_thresholds(device);
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_stream_query(gpumem_stream handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *stream = NULL;
  gpumem_status status = gpumem__sim_resolve_stream("stream_query", handle, &stream);
  if (status == GPUMEM_OK && stream->completed < stream->enqueued)
    status = GPUMEM_ERR_NOT_READY;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* ---------------------------------------------------------------------------------------
 * Events
 * ------------------------------------------------------------------------------------- */

static gpumem_status find_event(const char *call, gpumem__event handle, sim_event **event) {
  return gpumem__sim_find_handle(&gpumem__sim.events, call, "an event", handle, (void **)event);
}

gpumem_status gpumem__sim_event_create(int device, gpumem__event *out) {
  pthread_mutex_lock(&gpumem__sim.lock);
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_EVENT_CREATE);
  if (status == GPUMEM_OK)
    status = gpumem__sim_check_device("event_create", device);
  if (status == GPUMEM_OK) {
    sim_event *event = calloc(1, sizeof *event);
    if (event && gpumem__sim_index_put(&gpumem__sim.events, (uintptr_t)event, event)) {
      event->device = device;
      *out = (gpumem__event)event;
    } else {
      free(event);
      status = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                            "simulated device: event_create: the host is out of memory");
    }
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_event_destroy(gpumem__event handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_event *event = NULL;
  gpumem_status status = find_event("event_destroy", handle, &event);
  if (status == GPUMEM_OK) {
    gpumem__sim_index_remove(&gpumem__sim.events, (uintptr_t)event);
    gpumem__sim_index_clear(&event->clock);
    free(event);
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* The stream's clock with its own entry at its last enqueued operation. */
static bool snapshot_clock(const sim_stream *stream, sim_index *out) {
  sim_index clock = {0};
  if (!gpumem__sim_index_reserve(&clock, stream->clock.count + 1))
    return false;
  if (stream->clock.count)
    memcpy(clock.items, stream->clock.items, stream->clock.count * sizeof clock.items[0]);
  clock.count = stream->clock.count;
  gpumem__sim_clock_raise(&clock, stream->id, stream->enqueued); /* room reserved */
  *out = clock;
  return true;
}

static gpumem_status record(sim_event *event, sim_stream *stream) {
  if (stream->device != event->device)
    return gpumem__fail(GPUMEM_ERR_INVALID_STREAM,
                        "simulated device: event_record: the event belongs to device %d and "
                        "the stream to device %d",
                        event->device, stream->device);
  sim_index clock;
  if (!snapshot_clock(stream, &clock))
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "simulated device: event_record: the host is out of memory");
  gpumem__sim_index_clear(&event->clock);
  event->clock = clock;
  event->recorded = true;
  event->stream_id = stream->id;
  event->point = stream->enqueued;
  return GPUMEM_OK;
}

/* The device layer's callers name the event's device; a wrong one is a bug in gpumem. */
static gpumem_status check_event_device(const char *call, const sim_event *event, int device) {
  if (event->device == device)
    return GPUMEM_OK;
  return gpumem__fail(GPUMEM_ERR_INVALID_DEVICE,
                      "simulated device: %s: the event belongs to device %d, not device %d", call,
                      event->device, device);
}

/* What event_record and stream_wait_event share, under the lock: the call counted (and
 * failed when planned), the event found and checked to be `device`'s, and the stream
 * resolved (a default stream means that device's). */
static gpumem_status event_and_stream(gpumem_sim_call kind, const char *call, int device,
                                      gpumem__event event_handle, gpumem_stream stream_handle,
                                      sim_event **event, sim_stream **stream) {
  gpumem_status status = gpumem__sim_enter(kind);
  if (status == GPUMEM_OK)
    status = find_event(call, event_handle, event);
  if (status == GPUMEM_OK)
    status = check_event_device(call, *event, device);
  if (status == GPUMEM_OK)
    status = gpumem__sim_resolve_stream_of(call, device, stream_handle, stream);
  return status;
}

gpumem_status gpumem__sim_event_record(int device, gpumem__event handle,
                                       gpumem_stream stream_handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_event *event = NULL;
  sim_stream *stream = NULL;
  gpumem_status status = event_and_stream(GPUMEM_SIM_CALL_EVENT_RECORD, "event_record", device,
                                          handle, stream_handle, &event, &stream);
  if (status == GPUMEM_OK)
    status = record(event, stream);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_event_query(gpumem__event handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_event *event = NULL;
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_EVENT_QUERY);
  if (status == GPUMEM_OK)
    status = find_event("event_query", handle, &event);
  if (status == GPUMEM_OK && event->recorded &&
      !gpumem__sim_stream_reached(event->stream_id, event->point))
    status = GPUMEM_ERR_NOT_READY;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem__sim_event_synchronize(gpumem__event handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_event *event = NULL;
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_SYNCHRONIZE);
  if (status == GPUMEM_OK)
    status = find_event("event_synchronize", handle, &event);
  if (status == GPUMEM_OK && event->recorded) {
    sim_stream *stream = gpumem__sim_index_get(&gpumem__sim.streams_by_id, event->stream_id);
    if (stream)
      gpumem__sim_run_until(stream, event->point);
    gpumem__sim_apply_release_thresholds(event->device);
  }
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* Enqueues the wait and merges the event's clock; room is made first so that a failure
 * changes nothing. */
static gpumem_status wait_event(sim_stream *stream, const sim_event *event) {
  if (!event->recorded)
    return GPUMEM_OK; /* as CUDA: waiting for a never-recorded event waits for nothing */
  sim_op *op = NULL;
  gpumem_status status = new_op("stream_wait_event", SIM_OP_WAIT, &op);
  if (status != GPUMEM_OK)
    return status;
  if (!gpumem__sim_index_reserve(&stream->clock, event->clock.count)) {
    free_op(op);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "simulated device: stream_wait_event: the host is out of memory");
  }
  op->wait_stream = event->stream_id;
  op->wait_point = event->point;
  enqueue(stream, op);
  for (size_t i = 0; i < event->clock.count; i++)
    if (event->clock.items[i].key != stream->id)
      gpumem__sim_clock_raise(&stream->clock, event->clock.items[i].key,
                              event->clock.items[i].value.num);
  return GPUMEM_OK;
}

gpumem_status gpumem__sim_stream_wait_event(int device, gpumem_stream stream_handle,
                                            gpumem__event handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_event *event = NULL;
  sim_stream *stream = NULL;
  gpumem_status status = event_and_stream(GPUMEM_SIM_CALL_STREAM_WAIT, "stream_wait_event", device,
                                          handle, stream_handle, &event, &stream);
  if (status == GPUMEM_OK)
    status = wait_event(stream, event);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* ---------------------------------------------------------------------------------------
 * Copies, sets, prefetches and simulated kernels
 * ------------------------------------------------------------------------------------- */

static gpumem_status enqueue_copy(sim_stream *stream, void *dst, const void *src, size_t bytes) {
  sim_alloc *dst_alloc = NULL, *src_alloc = NULL;
  gpumem_status status =
      gpumem__sim_check_range("memcpy_async", "destination", dst, bytes, &dst_alloc);
  if (status == GPUMEM_OK)
    status = gpumem__sim_check_range("memcpy_async", "source", src, bytes, &src_alloc);
  sim_op *op = NULL;
  if (status == GPUMEM_OK)
    status = new_op("memcpy_async", SIM_OP_COPY, &op);
  if (status != GPUMEM_OK)
    return status;
  if (!src_alloc) {
    /* Pageable host memory: the driver synchronizes with the stream, so that earlier work
     * writing the source is done, and stages the bytes before the call returns, so that the
     * caller may reuse the buffer at once. */
    op->staging = malloc(bytes);
    if (!op->staging) {
      free_op(op);
      return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                          "simulated device: memcpy_async: no host memory to stage %zu bytes",
                          bytes);
    }
    run_all(stream);
    memcpy(op->staging, src, bytes);
  }
  op->dst = dst;
  op->src = src;
  op->bytes = bytes;
  enqueue(stream, op);
  return GPUMEM_OK;
}

gpumem_status gpumem__sim_memcpy_async(void *dst, const void *src, size_t bytes,
                                       gpumem_stream handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *stream = NULL;
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_MEMCPY);
  if (status == GPUMEM_OK)
    status = gpumem__sim_resolve_stream("memcpy_async", handle, &stream);
  if (status == GPUMEM_OK && bytes != 0 && (!dst || !src))
    status = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "simulated device: memcpy_async: NULL %s",
                          dst ? "source" : "destination");
  if (status == GPUMEM_OK && bytes != 0)
    status = enqueue_copy(stream, dst, src, bytes);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* Enqueues an operation over a range already checked. */
static gpumem_status enqueue_fill(const char *call, sim_op_kind kind, sim_stream *stream, void *dst,
                                  size_t bytes, unsigned char value) {
  sim_op *op = NULL;
  gpumem_status status = new_op(call, kind, &op);
  if (status != GPUMEM_OK)
    return status;
  op->dst = dst;
  op->bytes = bytes;
  op->value = value;
  enqueue(stream, op);
  return GPUMEM_OK;
}

/* Memory a kernel or a memset may touch: whatever the sim gave (pinned host memory is
 * device-accessible under unified addressing, as on a GPU) and, where the device has
 * pageable memory access, host memory it did not give. */
static gpumem_status check_device_accessible(const char *call, void *ptr, size_t bytes) {
  sim_alloc *alloc = NULL;
  gpumem_status status = gpumem__sim_check_range(call, "target", ptr, bytes, &alloc);
  if (status == GPUMEM_OK && !alloc && !gpumem__sim.pageable_access)
    status = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                          "simulated device: %s(%p, %zu bytes): pageable host memory, which "
                          "this device cannot access (GPUMEM_SIM_PAGEABLE=0)",
                          call, ptr, bytes);
  return status;
}

gpumem_status gpumem__sim_memset_async(void *dst, unsigned char value, size_t bytes,
                                       gpumem_stream handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *stream = NULL;
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_MEMSET);
  if (status == GPUMEM_OK)
    status = gpumem__sim_resolve_stream("memset_async", handle, &stream);
  if (status == GPUMEM_OK && bytes != 0)
    status = check_device_accessible("memset_async", dst, bytes);
  if (status == GPUMEM_OK && bytes != 0)
    status = enqueue_fill("memset_async", SIM_OP_SET, stream, dst, bytes, value);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* Prefetches move managed pages, so the range must lie inside one managed allocation. */
static gpumem_status check_managed(const char *call, void *ptr, size_t bytes) {
  sim_alloc *alloc = NULL;
  gpumem_status status = gpumem__sim_check_range(call, "target", ptr, bytes, &alloc);
  if (status != GPUMEM_OK || (alloc && alloc->managed))
    return status;
  return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                      "simulated device: %s(%p, %zu bytes): needs managed memory, and this is %s "
                      "memory",
                      call, ptr, bytes, alloc ? gpumem__sim_kind_name(alloc->kind) : "host");
}

gpumem_status gpumem__sim_pointer_is_managed(const void *ptr, int *managed) {
  pthread_mutex_lock(&gpumem__sim.lock);
  const sim_alloc *alloc = gpumem__sim_find_allocation((uintptr_t)ptr);
  *managed = alloc && alloc->managed;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return GPUMEM_OK;
}

gpumem_status gpumem__sim_prefetch(void *ptr, size_t bytes, int device, gpumem_stream handle) {
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *stream = NULL;
  gpumem_status status = gpumem__sim_enter(GPUMEM_SIM_CALL_PREFETCH);
  if (status == GPUMEM_OK)
    status = gpumem__sim_resolve_stream("prefetch", handle, &stream);
  /* -1 is CU_DEVICE_CPU: a prefetch to the host. */
  if (status == GPUMEM_OK && device != -1)
    status = gpumem__sim_check_device("prefetch", device);
  if (status == GPUMEM_OK)
    status = check_managed("prefetch", ptr, bytes);
  if (status == GPUMEM_OK)
    status = enqueue_fill("prefetch", SIM_OP_PREFETCH, stream, ptr, bytes, 0);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

/* ---------------------------------------------------------------------------------------
 * Hazard detection
 * ------------------------------------------------------------------------------------- */

typedef struct sim_hazard {
  uint64_t conflicts; /* pending unordered operations touching the range */
  const sim_stream *other;
  uint64_t seq;
  sim_op_kind kind;
} sim_hazard;

/* Every other stream's pending operations not covered by the receiver's clock. */
static void find_hazards(const sim_stream *receiver, uintptr_t lo, uintptr_t hi,
                         sim_hazard *hazard) {
  for (size_t i = 0; i < gpumem__sim.streams_by_id.count; i++) {
    const sim_stream *other = gpumem__sim.streams_by_id.items[i].value.ptr;
    if (other == receiver || other->touching == 0)
      continue;
    uint64_t ordered = gpumem__sim_clock_get(&receiver->clock, other->id);
    for (const sim_op *op = other->tail; op && op->seq > ordered; op = op->prev) {
      if (!op_touches(op, lo, hi))
        continue;
      if (hazard->conflicts++ == 0) {
        hazard->other = other;
        hazard->seq = op->seq;
        hazard->kind = op->kind;
      }
    }
  }
}

/* "stream 0x5610... (sim stream 7, device 1)": the handle the user knows, and the id and
 * device that tell streams apart in a log. */
static const char *describe_stream(const sim_stream *stream, char *buf, size_t size) {
  if (stream->is_default)
    snprintf(buf, size, "the default stream (sim stream %llu, device %d)",
             (unsigned long long)stream->id, stream->device);
  else
    snprintf(buf, size, "stream %p (sim stream %llu, device %d)", (const void *)stream,
             (unsigned long long)stream->id, stream->device);
  return buf;
}

/* Formats the report under the lock (the streams may go once it is released). */
static void format_hazard(void *ptr, size_t bytes, const sim_stream *receiver,
                          const sim_hazard *hazard, char *line, size_t size) {
  char mine[96], theirs[96];
  snprintf(line, size,
           "gpumem simulated device: HAZARD: %zu bytes at %p handed out on %s while %s still "
           "has a pending %s (operation #%llu) touching them%s; nothing orders the "
           "receiving stream after that work (no event recorded after it and waited on); on "
           "a GPU this is a silent data race\n",
           bytes, ptr, describe_stream(receiver, mine, sizeof mine),
           describe_stream(hazard->other, theirs, sizeof theirs), op_name(hazard->kind),
           (unsigned long long)hazard->seq,
           hazard->conflicts > 1 ? " (and other pending operations too)" : "");
}

void gpumem__sim_note_handout(void *ptr, size_t bytes, gpumem_stream handle) {
  if (!ptr || bytes == 0 || bytes - 1 > UINTPTR_MAX - (uintptr_t)ptr)
    return;
  char line[768];
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *receiver =
      is_special_handle(handle)
          ? gpumem__sim.default_stream[gpumem__sim_current_device()]
          : gpumem__sim_index_get(&gpumem__sim.streams_by_handle, (uintptr_t)handle);
  sim_hazard hazard = {0};
  if (receiver)
    find_hazards(receiver, (uintptr_t)ptr, (uintptr_t)ptr + bytes, &hazard);
  if (hazard.conflicts)
    format_hazard(ptr, bytes, receiver, &hazard, line, sizeof line);
  bool abort_now = gpumem__sim.abort_on_hazard;
  pthread_mutex_unlock(&gpumem__sim.lock);
  if (!hazard.conflicts)
    return;
  atomic_fetch_add(&gpumem__sim.hazards, 1);
  fputs(line, stderr);
  if (abort_now) {
    fputs("gpumem simulated device: aborting at the first hazard, as configured "
          "(GPUMEM_SIM_HAZARD=abort or gpumem_sim_config.abort_on_hazard)\n",
          stderr);
    abort();
  }
}

/* ---------------------------------------------------------------------------------------
 * The public controls about streams (gpumem/sim.h)
 * ------------------------------------------------------------------------------------- */

gpumem_status gpumem_sim_complete(gpumem_stream handle) {
  gpumem_status status = gpumem__sim_require("gpumem_sim_complete");
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *stream = NULL;
  status = gpumem__sim_resolve_stream("gpumem_sim_complete", handle, &stream);
  if (status == GPUMEM_OK)
    run_all(stream);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem_sim_complete_all(void) {
  gpumem_status status = gpumem__sim_require("gpumem_sim_complete_all");
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&gpumem__sim.lock);
  for (size_t i = 0; i < gpumem__sim.streams_by_id.count; i++)
    run_all(gpumem__sim.streams_by_id.items[i].value.ptr);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return GPUMEM_OK;
}

gpumem_status gpumem_sim_pending(gpumem_stream handle, uint64_t *count) {
  gpumem_status status = gpumem__sim_require("gpumem_sim_pending");
  if (status == GPUMEM_OK && !count)
    status = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem_sim_pending: count is NULL");
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *stream = NULL;
  status = gpumem__sim_resolve_stream("gpumem_sim_pending", handle, &stream);
  if (status == GPUMEM_OK)
    *count = stream->enqueued - stream->completed;
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}

gpumem_status gpumem_sim_launch(gpumem_stream handle, void *ptr, size_t bytes, int value) {
  gpumem_status status = gpumem__sim_require("gpumem_sim_launch");
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&gpumem__sim.lock);
  sim_stream *stream = NULL;
  status = gpumem__sim_resolve_stream("gpumem_sim_launch", handle, &stream);
  /* A kernel over no bytes touches nothing but still takes its place in the stream. */
  if (status == GPUMEM_OK && bytes != 0)
    status = check_device_accessible("gpumem_sim_launch", ptr, bytes);
  if (status == GPUMEM_OK)
    status = enqueue_fill("gpumem_sim_launch", SIM_OP_LAUNCH, stream, bytes ? ptr : NULL, bytes,
                          (unsigned char)value);
  pthread_mutex_unlock(&gpumem__sim.lock);
  return status;
}
