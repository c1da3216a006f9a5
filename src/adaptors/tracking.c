/* tracking.c: the tracking adaptor (RMM's tracking_resource_adaptor): it passes every call
 * to its upstream and keeps each outstanding allocation made through it, with its size,
 * stream, time and (optionally) call stack, so that a program can see what it still holds
 * and where it was allocated.
 *
 * It changes no outcome: every call reaches the upstream as the caller made it, and the
 * adaptor's table follows what the upstream did. A free it cannot match is reported (to
 * stderr, or the program's report function) and passed on as it came, as RMM's adaptor does:
 * a pointer it does not track (another tracking adaptor over this one may free through it
 * what it allocated here, or the upstream may have given it out directly), and a size
 * other than the one it recorded. RMM's adaptor passes the recorded size on instead; here
 * the upstream judges the free as it would without the adaptor, so that wrapping a
 * resource to look at it never turns a refused free (GPUMEM_ERR_MISUSE from a pool, which
 * then keeps the block live) into one that succeeds. A pointer the upstream hands out again
 * while its entry is still live (it was freed past the adaptor) is reported and recorded
 * anew.
 *
 * The table (tracking_table.c) is split into shards under biased locks: allocations cost a
 * hash and a few plain stores on one thread, and threads rarely meet. Placement is passed
 * through and tracked (a pool over tracking(vmm) grows in place, and its chunks are the
 * outstanding allocations), pieces a trim cuts off included. */
#include "adaptors/adaptor.h"
#include "adaptors/tracking.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef gpumem__tracking_resource tracking_resource;

/* A clock of a few nanoseconds a reading (the precise one costs 20 to 25 ns, as much as a
 * pool allocation): its steps are a few milliseconds, enough to tell old allocations from
 * new ones. */
static uint64_t now_ns(void) {
  struct timespec t;
#ifdef CLOCK_MONOTONIC_COARSE
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
#else
  clock_gettime(CLOCK_MONOTONIC, &t);
#endif
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The caller's stack from `from` on (a return address in the caller of the operation: the
 * adaptor's own frames are left out); NULL when the host has no memory for it. */
static gpumem__tracking_stack *capture(const tracking_resource *self, const void *from) {
  void *frames[GPUMEM__TRACKING_MAX_DEPTH];
  int kept = gpumem__backtrace(frames, self->depth, from);
  gpumem__tracking_stack *stack = malloc(sizeof *stack + (size_t)kept * sizeof frames[0]);
  if (stack) {
    stack->depth = kept;
    memcpy(stack->frames, frames, (size_t)kept * sizeof frames[0]);
  }
  return stack;
}

/* A frame a line, "#0 in name+0x1c (module)", each line starting with `indent`. */
static void append_stack(gpumem__text *text, const gpumem__tracking_stack *stack,
                         const char *indent) {
  if (stack->depth == 0)
    gpumem__text_printf(text, "%s(no frames)\n", indent);
  for (int i = 0; i < stack->depth; i++) {
    char frame[512];
    gpumem__format_frame(stack->frames[i], true, frame, sizeof frame);
    gpumem__text_printf(text, "%s#%d in %s\n", indent, i, frame);
  }
}

/* The list of outstanding allocations: a line each, "0x7f..: 1000 B, stream 0x0, at +1.250
 * s", as RMM's list starts each with "POINTER: SIZE B"; with a stack, " : callstack:", its
 * frames and an empty line after them. */
static void append_entries(gpumem__text *text, const gpumem__tracking_entry *entries,
                           size_t count) {
  for (size_t i = 0; i < count; i++) {
    const gpumem__tracking_entry *e = &entries[i];
    gpumem__text_printf(
        text, "0x%" PRIxPTR ": %zu B, stream 0x%" PRIxPTR ", at +%" PRIu64 ".%03" PRIu64 " s",
        e->ptr, e->bytes, (uintptr_t)e->stream, e->time_ns / 1000000000u,
        e->time_ns / 1000000u % 1000u);
    if (e->stack) {
      gpumem__text_printf(text, " : callstack:\n");
      append_stack(text, e->stack, "");
    }
    gpumem__text_printf(text, "\n");
  }
}

/* ---------------------------------------------------------------------------------------
 * Reports
 * ------------------------------------------------------------------------------------- */

/* Hands `text` to the program's report function, or writes it to stderr. The thread's
 * message is the caller's: a report function that makes gpumem calls does not change it. */
static void deliver(const tracking_resource *self, const gpumem__text *text) {
  const char *what = text->failed ? "tracking: a report was lost: out of host memory\n"
                     : text->data ? text->data
                                  : "";
  if (!self->report) {
    fputs(what, stderr);
    return;
  }
  char message[1024];
  snprintf(message, sizeof message, "%s", gpumem_last_error_message());
  uint64_t serial = gpumem__error_serial();
  self->report(what, self->user);
  if (gpumem__error_serial() != serial) {
    if (message[0])
      gpumem__fail(GPUMEM_ERR_INTERNAL, "%s", message); /* the text; callers set the status */
    else
      gpumem__clear_error();
  }
}

/* "tracking(SPEC): " */
static void append_name(gpumem__text *text, const tracking_resource *self) {
  char spec[512];
  gpumem__describe(&self->header, spec, sizeof spec);
  gpumem__text_printf(text, "%s: ", spec);
}

/* What the upstream did with a free passed on: ", which freed it" or ", which refused it
 * (STATUS: message)". */
static void append_outcome(gpumem__text *text, gpumem_status status) {
  if (status == GPUMEM_OK)
    gpumem__text_printf(text, "; passed on to the upstream, which freed it\n");
  else
    gpumem__text_printf(text, "; passed on to the upstream, which refused it (%s: %s)\n",
                        gpumem_status_name(status), gpumem_last_error_message());
}

static void append_entry(gpumem__text *text, const gpumem__tracking_entry *e) {
  gpumem__text_printf(text, "%zu bytes on stream 0x%" PRIxPTR " at +%" PRIu64 ".%03" PRIu64 " s",
                      e->bytes, (uintptr_t)e->stream, e->time_ns / 1000000000u,
                      e->time_ns / 1000000u % 1000u);
}

static void append_allocated_at(gpumem__text *text, const gpumem__tracking_stack *stack) {
  if (stack) {
    gpumem__text_printf(text, "  allocated at:\n");
    append_stack(text, stack, "    ");
  }
}

static GPUMEM_COLD void report_untracked(const tracking_resource *self, void *ptr, size_t bytes,
                                         gpumem_stream stream, bool in_flight,
                                         gpumem_status status) {
  gpumem__text text = {0};
  append_name(&text, self);
  gpumem__text_printf(
      &text, "deallocate of %p (%zu bytes) on stream 0x%" PRIxPTR ": %s (%" PRIu64 " tracked)", ptr,
      bytes, (uintptr_t)stream,
      in_flight ? "another thread is freeing that allocation now"
                : "not an outstanding allocation of this adaptor",
      gpumem__tracking_count(&self->table));
  append_outcome(&text, status);
  deliver(self, &text);
  gpumem__text_free(&text);
}

static GPUMEM_COLD void report_wrong_size(const tracking_resource *self, void *ptr, size_t bytes,
                                          gpumem_stream stream, const gpumem__tracking_entry *e,
                                          const gpumem__tracking_stack *stack,
                                          gpumem_status status) {
  gpumem__text text = {0};
  append_name(&text, self);
  gpumem__text_printf(
      &text, "deallocate of %p with %zu bytes on stream 0x%" PRIxPTR ", but it was allocated with ",
      ptr, bytes, (uintptr_t)stream);
  append_entry(&text, e);
  append_outcome(&text, status);
  append_allocated_at(&text, stack);
  deliver(self, &text);
  gpumem__text_free(&text);
}

static GPUMEM_COLD void report_stale(const tracking_resource *self,
                                     const gpumem__tracking_entry *fresh,
                                     const gpumem__tracking_entry *old) {
  gpumem__text text = {0};
  append_name(&text, self);
  gpumem__text_printf(&text,
                      "the upstream gave out 0x%" PRIxPTR
                      " (%zu bytes) while it was still tracked as an allocation of ",
                      fresh->ptr, fresh->bytes);
  append_entry(&text, old);
  gpumem__text_printf(&text, ": that one was freed past this adaptor (through its upstream "
                             "or another resource); its record is replaced\n");
  append_allocated_at(&text, old->stack);
  deliver(self, &text);
  gpumem__text_free(&text);
}

/* ---------------------------------------------------------------------------------------
 * The operations
 * ------------------------------------------------------------------------------------- */

/* Files a block the upstream just gave: GPUMEM_ERR_OUT_OF_MEMORY (with a message, nothing
 * filed) when the table cannot grow. */
static gpumem_status record(tracking_resource *self, void *block, size_t bytes,
                            gpumem_stream stream, gpumem__tracking_stack *stack) {
  gpumem__tracking_entry entry = {
      (uintptr_t)block, bytes, stream, now_ns() - self->created_ns, stack, 0};
  gpumem__tracking_entry old;
  gpumem__tracking_replaced replaced;
  gpumem_status status = gpumem__tracking_insert(&self->table, &entry, false, &old, &replaced);
  if (GPUMEM_UNLIKELY(status != GPUMEM_OK))
    return status;
  if (GPUMEM_UNLIKELY(replaced != GPUMEM__TRACKING_NEW)) {
    if (replaced == GPUMEM__TRACKING_STALE)
      report_stale(self, &entry, &old);
    free(old.stack);
  }
  return GPUMEM_OK;
}

/* The table could not file a block: it goes back to the upstream, and the allocation fails
 * with the table's status and message. */
static GPUMEM_COLD gpumem_status give_back(tracking_resource *self, void *block, size_t bytes,
                                           size_t alignment, gpumem_stream stream,
                                           gpumem__tracking_stack *stack, gpumem_status status) {
  gpumem__forward_give_back(&self->header, block, bytes, alignment, stream, status);
  free(stack);
  gpumem__note_oom(GPUMEM__OOM_HOST, &self->header, bytes);
  return gpumem__prefix_with_spec(&self->header, status);
}

static GPUMEM_COLD gpumem_status no_stack(const tracking_resource *self, size_t bytes) {
  gpumem__note_oom(GPUMEM__OOM_HOST, &self->header, bytes);
  gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "tracking: out of host memory for a call stack");
  return gpumem__prefix_with_spec(&self->header, GPUMEM_ERR_OUT_OF_MEMORY);
}

static gpumem_status tracking_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                       gpumem_stream stream, void **ptr) {
  tracking_resource *self = (tracking_resource *)mr;
  gpumem__tracking_stack *stack = NULL;
  if (self->capture_stacks && !(stack = capture(self, __builtin_return_address(0))))
    return no_stack(self, bytes);
  void *block;
  gpumem_status status =
      mr->upstream->ops->allocate(mr->upstream, bytes, alignment, stream, &block);
  if (GPUMEM_UNLIKELY(status != GPUMEM_OK)) {
    free(stack);
    return gpumem__fail_through(mr, status);
  }
  status = record(self, block, bytes, stream, stack);
  if (GPUMEM_UNLIKELY(status != GPUMEM_OK))
    return give_back(self, block, bytes, alignment, stream, stack, status);
  *ptr = block;
  return GPUMEM_OK;
}

/* A free of a pointer the table does not hold (or whose free another thread has in flight):
 * passed on, and reported. */
static GPUMEM_COLD gpumem_status free_untracked(tracking_resource *self, void *ptr, size_t bytes,
                                                size_t alignment, gpumem_stream stream,
                                                bool in_flight) {
  gpumem_resource *up = self->header.upstream;
  gpumem_status status = up->ops->deallocate(up, ptr, bytes, alignment, stream);
  report_untracked(self, ptr, bytes, stream, in_flight, status);
  return gpumem__fail_through(&self->header, status);
}

/* A free with a size other than the recorded one: passed on as it came, and reported with
 * the allocation's record. */
static GPUMEM_COLD gpumem_status free_wrong_size(tracking_resource *self, void *ptr, size_t bytes,
                                                 size_t alignment, gpumem_stream stream,
                                                 uint32_t mark, const gpumem__tracking_entry *e) {
  /* The entry's stack goes with the entry if the upstream frees the block: a copy for the
   * report (none if the host has no memory for it). */
  gpumem__tracking_stack *stack = gpumem__tracking_copy_stack(e->stack);
  gpumem_resource *up = self->header.upstream;
  gpumem_status status = up->ops->deallocate(up, ptr, bytes, alignment, stream);
  gpumem__tracking_stack *removed = NULL;
  gpumem__tracking_finish(&self->table, (uintptr_t)ptr, mark, status == GPUMEM_OK ? 0 : e->bytes,
                          &removed);
  free(removed);
  report_wrong_size(self, ptr, bytes, stream, e, stack, status);
  free(stack);
  return gpumem__fail_through(&self->header, status);
}

static gpumem_status tracking_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                         size_t alignment, gpumem_stream stream) {
  tracking_resource *self = (tracking_resource *)mr;
  gpumem__tracking_entry entry;
  uint32_t mark = gpumem__tracking_mark(&self->table, (uintptr_t)ptr, &entry);
  if (GPUMEM_UNLIKELY(mark == 0))
    return free_untracked(self, ptr, bytes, alignment, stream, entry.ptr != 0);
  if (GPUMEM_UNLIKELY(entry.bytes != bytes))
    return free_wrong_size(self, ptr, bytes, alignment, stream, mark, &entry);
  gpumem_status status = mr->upstream->ops->deallocate(mr->upstream, ptr, bytes, alignment, stream);
  gpumem__tracking_stack *stack = NULL;
  gpumem__tracking_finish(&self->table, (uintptr_t)ptr, mark, status == GPUMEM_OK ? 0 : bytes,
                          &stack);
  free(stack);
  return gpumem__fail_through(mr, status);
}

/* Placement is tracked as allocation; a refusal stays quiet, as a taken range is. */
static gpumem_status tracking_allocate_at(gpumem_resource *mr, uintptr_t addr, size_t bytes,
                                          void **ptr) {
  tracking_resource *self = (tracking_resource *)mr;
  gpumem__tracking_stack *stack = NULL;
  if (self->capture_stacks && !(stack = capture(self, __builtin_return_address(0))))
    return GPUMEM_ERR_OUT_OF_MEMORY;
  void *block;
  gpumem_status status = mr->upstream->ops->allocate_at(mr->upstream, addr, bytes, &block);
  if (status != GPUMEM_OK) {
    free(stack);
    return status;
  }
  status = record(self, block, bytes, NULL, stack);
  if (status != GPUMEM_OK) {
    mr->upstream->ops->deallocate(mr->upstream, block, bytes, GPUMEM_DEFAULT_ALIGNMENT, NULL);
    free(stack);
    gpumem__clear_error();
    return status;
  }
  *ptr = block;
  return GPUMEM_OK;
}

/* What is left of an allocation after a cut: its part before the cut stays its entry (with
 * `keep` bytes; 0: none), its part after the cut is a new entry (`rest` bytes at
 * `rest_ptr`; 0: none), whose record is promised before the upstream cuts so that it cannot
 * fail afterwards. The upstream's pieces are whole granules, so a cut may reach past the
 * bytes an allocation asked for: then nothing is left after it. */
typedef struct cut_plan {
  size_t keep, rest;
  uintptr_t rest_ptr;
  bool reserved;                      /* the rest's record is promised */
  gpumem__tracking_stack *rest_stack; /* a copy, where the entry stays too */
} cut_plan;

static gpumem_status plan_cut(tracking_resource *self, const gpumem__tracking_entry *e,
                              uintptr_t addr, size_t size, cut_plan *plan) {
  uintptr_t end = e->ptr + e->bytes, cut_end = addr + size;
  *plan = (cut_plan){
      .keep = addr - e->ptr, .rest = cut_end < end ? end - cut_end : 0, .rest_ptr = cut_end};
  if (plan->rest == 0)
    return GPUMEM_OK;
  if (gpumem__tracking_reserve(&self->table, cut_end) != GPUMEM_OK)
    return GPUMEM_ERR_OUT_OF_MEMORY;
  if (plan->keep && e->stack && !(plan->rest_stack = gpumem__tracking_copy_stack(e->stack))) {
    gpumem__tracking_unreserve(&self->table, cut_end);
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "tracking: out of host memory for a call stack");
  }
  plan->reserved = true;
  return GPUMEM_OK;
}

static gpumem_status tracking_unmap_pieces(gpumem_resource *mr, uintptr_t addr, size_t size,
                                           int *allocations_added) {
  tracking_resource *self = (tracking_resource *)mr;
  gpumem_resource *up = mr->upstream;
  gpumem__tracking_entry e;
  uint32_t mark = gpumem__tracking_mark_containing(&self->table, addr, &e);
  if (mark == 0) /* not made through this adaptor: the upstream's affair alone */
    return up->ops->unmap_pieces(up, addr, size, allocations_added);
  cut_plan plan;
  gpumem_status status = plan_cut(self, &e, addr, size, &plan);
  if (status == GPUMEM_OK)
    status = up->ops->unmap_pieces(up, addr, size, allocations_added);
  gpumem__tracking_stack *removed = NULL;
  bool ours = gpumem__tracking_finish(&self->table, e.ptr, mark,
                                      status == GPUMEM_OK ? plan.keep : e.bytes, &removed);
  if (plan.reserved && (status != GPUMEM_OK || !ours)) {
    gpumem__tracking_unreserve(&self->table, plan.rest_ptr);
  } else if (plan.reserved) {
    gpumem__tracking_entry rest = {
        plan.rest_ptr, plan.rest, e.stream, e.time_ns, plan.keep ? plan.rest_stack : removed, 0};
    gpumem__tracking_entry old;
    gpumem__tracking_replaced replaced;
    gpumem__tracking_insert(&self->table, &rest, true, &old, &replaced); /* room promised */
    if (replaced != GPUMEM__TRACKING_NEW)
      free(old.stack);
    if (plan.keep)
      plan.rest_stack = NULL;
    else
      removed = NULL;
  }
  free(removed);
  free(plan.rest_stack);
  return status;
}

static gpumem_status tracking_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  const tracking_resource *self = (const tracking_resource *)mr;
  if (what == GPUMEM_QUERY_LIVE_BYTES) {
    *out = gpumem__tracking_bytes(&self->table);
    return GPUMEM_OK;
  }
  if (what == GPUMEM_QUERY_LIVE_COUNT) {
    *out = gpumem__tracking_count(&self->table);
    return GPUMEM_OK;
  }
  return gpumem__forward_query(mr, what, out);
}

static void tracking_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const tracking_resource *self = (const tracking_resource *)mr;
  gpumem__describe_over(mr, buf, size, ", stacks=%s, depth=%d",
                        self->capture_stacks ? "true" : "false", self->depth);
}

static gpumem_status tracking_destroy(gpumem_resource *mr) {
  tracking_resource *self = (tracking_resource *)mr;
  gpumem__tracking_table_destroy(&self->table);
  free(self);
  return GPUMEM_OK;
}

static gpumem_status tracking_validate(const gpumem_resource *mr) {
  return gpumem__tracking_validate(&((tracking_resource *)mr)->table);
}

static const gpumem__resource_ops tracking_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "tracking",
    .allocate = tracking_allocate,
    .deallocate = tracking_deallocate,
    .query = tracking_query,
    .describe = tracking_describe,
    .destroy = tracking_destroy,
    .allocate_at = tracking_allocate_at,
    .unmap_pieces = tracking_unmap_pieces,
    .hold_pieces = gpumem__forward_hold_pieces,
    .trim = gpumem__forward_trim,
    .validate = tracking_validate,
};

/* ---------------------------------------------------------------------------------------
 * The public calls
 * ------------------------------------------------------------------------------------- */

gpumem_status gpumem_tracking_create(gpumem_resource *upstream, const gpumem_tracking_options *opts,
                                     gpumem_resource **out) {
  gpumem_status status = gpumem__check_adaptor_args("gpumem_tracking_create", upstream, out);
  if (status != GPUMEM_OK)
    return status;
  gpumem_tracking_options options = opts ? *opts : (gpumem_tracking_options){0};
  if (options.stack_depth < 0 || options.stack_depth > GPUMEM__TRACKING_MAX_DEPTH)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_tracking_create: stack_depth %d is not from 0 (the default, "
                        "%d) to %d",
                        options.stack_depth, GPUMEM__TRACKING_DEFAULT_DEPTH,
                        GPUMEM__TRACKING_MAX_DEPTH);
  tracking_resource *self = gpumem__adaptor_new(sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_tracking_create: out of host memory");
  gpumem__resource_init_pass_through(&self->header, &tracking_ops, upstream);
  self->capture_stacks = options.capture_stacks != 0;
  self->depth = options.stack_depth ? options.stack_depth : GPUMEM__TRACKING_DEFAULT_DEPTH;
  self->report = options.report;
  self->user = options.user;
  self->created_ns = now_ns();
  gpumem__tracking_table_init(&self->table);
  if (self->capture_stacks) {
    /* The first backtrace() loads the unwinder (and allocates): here, not in an allocation. */
    void *frame;
    gpumem__backtrace(&frame, 1, NULL);
  }
  *out = &self->header;
  return GPUMEM_OK;
}

static tracking_resource *tracking_of(const char *caller, const gpumem_resource *mr) {
  if (mr && mr->ops == &tracking_ops)
    return (tracking_resource *)mr;
  gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: %s", caller,
               mr ? "the resource is not a tracking adaptor" : "the resource is NULL");
  return NULL;
}

gpumem_status gpumem_tracking_get_allocated_bytes(const gpumem_resource *mr, size_t *bytes) {
  tracking_resource *self = tracking_of("gpumem_tracking_get_allocated_bytes", mr);
  if (!self)
    return GPUMEM_ERR_INVALID_ARGUMENT;
  if (!bytes)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_tracking_get_allocated_bytes: bytes is NULL");
  *bytes = (size_t)gpumem__tracking_bytes(&self->table);
  return GPUMEM_OK;
}

/* The list of outstanding allocations as text (`text` zeroed by the caller). */
static gpumem_status list(tracking_resource *self, gpumem__text *text) {
  gpumem__tracking_entry *entries;
  size_t count;
  gpumem_status status = gpumem__tracking_copy(&self->table, &entries, &count);
  if (status != GPUMEM_OK)
    return status;
  append_entries(text, entries, count);
  gpumem__tracking_free_copy(entries, count);
  if (text->failed)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "tracking: out of host memory for the list of outstanding allocations");
  return GPUMEM_OK;
}

gpumem_status gpumem_tracking_get_outstanding_allocations_str(const gpumem_resource *mr, char *buf,
                                                              size_t size, size_t *needed) {
  static const char caller[] = "gpumem_tracking_get_outstanding_allocations_str";
  tracking_resource *self = tracking_of(caller, mr);
  if (!self)
    return GPUMEM_ERR_INVALID_ARGUMENT;
  if (!buf && size)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: buf is NULL with a size of %zu", caller,
                        size);
  gpumem__text text = {0};
  gpumem_status status = list(self, &text);
  if (status == GPUMEM_OK)
    status = gpumem__text_copy_out(caller, &text, buf, size, needed);
  gpumem__text_free(&text);
  return status;
}

gpumem_status gpumem_tracking_log_outstanding_allocations(const gpumem_resource *mr) {
  tracking_resource *self = tracking_of("gpumem_tracking_log_outstanding_allocations", mr);
  if (!self)
    return GPUMEM_ERR_INVALID_ARGUMENT;
  gpumem__text text = {0};
  append_name(&text, self);
  char bytes[48];
  gpumem__format_bytes(gpumem__tracking_bytes(&self->table), bytes, sizeof bytes);
  gpumem__text_printf(&text, "Outstanding Allocations: %" PRIu64 " (%s)\n",
                      gpumem__tracking_count(&self->table), bytes);
  gpumem_status status = list(self, &text);
  if (status == GPUMEM_OK)
    deliver(self, &text);
  gpumem__text_free(&text);
  return status;
}
