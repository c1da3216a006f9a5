/* tracking.c: the tracking adaptor keeps every outstanding allocation and changes no
 * outcome.
 *
 * - Its figures and its list (sizes, streams, times, addresses in order, stacks with named
 *   frames and at most the depth asked) follow allocations and frees; the list is written
 *   whole or not at all, with the size it needs.
 * - Frees it cannot match are reported and passed on as they came: a pointer it does not
 *   track (a tracking adaptor over another frees through the inner one what the outer one
 *   allocated), a wrong size (refused by a pool, which keeps the block, and so does the
 *   adaptor; freed by an upstream that takes any size, and then gone from the list with
 *   its recorded size); a pointer given out again while still tracked is reported and its
 *   record replaced; one freed and given out again while its free is in flight is taken
 *   over quietly. A report function that makes failing gpumem calls leaves the caller's
 *   message alone.
 * - Placement: a pool over tracking(vmm) grows in place, its chunks are the outstanding
 *   allocations, and a trim that cuts pieces off them (front, back, middle) keeps the table
 *   equal to the pool's reserved bytes; a cut past the bytes asked leaves nothing.
 * - Threads allocate, free each other's blocks and read the list at once; the table stays
 *   whole (the level-2 validator), and finds a table corrupted on purpose. */
#include "adaptors/tracking.h"
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static gpumem_resource *const untouched = (gpumem_resource *)(uintptr_t)0x5eed;

/* ---- reports, kept by the report function ---- */

typedef struct reports {
  int count;
  char last[8192];
} reports;

static void keep_report(const char *text, void *user) {
  reports *r = user;
  r->count++;
  snprintf(r->last, sizeof r->last, "%s", text);
}

static gpumem_resource *tracking_over(gpumem_resource *upstream, int stacks, int depth,
                                      reports *r) {
  gpumem_tracking_options opts = {
      .capture_stacks = stacks, .stack_depth = depth, .report = keep_report, .user = r};
  gpumem_resource *mr;
  CHECK_OK(gpumem_tracking_create(upstream, &opts, &mr));
  return mr;
}

static gpumem_resource *build(const char *spec) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec(spec, &mr));
  return mr;
}

static size_t allocated(gpumem_resource *mr) {
  size_t bytes = 0;
  CHECK_OK(gpumem_tracking_get_allocated_bytes(mr, &bytes));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), bytes);
  return bytes;
}

/* The list, in a buffer of the caller's (freed by the caller). Other threads may add to it
 * between the call that gives the size and the one that writes it: then again, with room. */
static char *list_of(gpumem_resource *mr) {
  size_t needed = 0;
  CHECK_STATUS(gpumem_tracking_get_outstanding_allocations_str(mr, NULL, 0, &needed),
               GPUMEM_ERR_INVALID_ARGUMENT);
  for (;;) {
    CHECK(needed >= 1);
    size_t room = needed + 4096;
    char *text = malloc(room);
    CHECK(text != NULL);
    size_t used = 0;
    gpumem_status status = gpumem_tracking_get_outstanding_allocations_str(mr, text, room, &used);
    if (status == GPUMEM_OK) {
      CHECK_EQ(used, strlen(text) + 1);
      return text;
    }
    CHECK_STATUS(status, GPUMEM_ERR_INVALID_ARGUMENT);
    CHECK(used > room);
    needed = 2 * used;
    free(text);
  }
}

static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *at = text; (at = strstr(at, needle)) != NULL; at += strlen(needle))
    n++;
  return n;
}

/* ---- figures and the list ---- */

static void test_figures_and_list(void) {
  reports r = {0};
  gpumem_resource *cuda = build("cuda");
  gpumem_resource *mr = tracking_over(cuda, 0, 0, &r);
  CHECK_OK(gpumem_resource_release(cuda)); /* the adaptor keeps it */
  CHECK_EQ(allocated(mr), 0);
  char *text = list_of(mr);
  CHECK(strcmp(text, "") == 0);
  free(text);
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(GPUMEM_CURRENT_DEVICE, &stream));
  enum { count = 10 };
  void *blocks[count];
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_allocate(mr, MiB + (size_t)i, i % 2 ? stream : NULL, &blocks[i]));
  for (int i = 0; i < count; i += 2)
    CHECK_OK(gpumem_deallocate(mr, blocks[i], MiB + (size_t)i, NULL));
  CHECK_EQ(allocated(mr), 5 * MiB + 1 + 3 + 5 + 7 + 9);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 5);
  text = list_of(mr);
  /* A line each, "POINTER: SIZE B, stream S, at +T s", by address. */
  CHECK_EQ(count_of(text, "\n"), 5);
  CHECK_EQ(count_of(text, "callstack"), 0);
  uintptr_t previous = 0;
  for (const char *line = text; *line; line = strchr(line, '\n') + 1) {
    unsigned long long ptr, stream_value;
    size_t bytes;
    unsigned seconds, millis;
    CHECK_EQ(sscanf(line, "0x%llx: %zu B, stream 0x%llx, at +%u.%u s", &ptr, &bytes, &stream_value,
                    &seconds, &millis),
             5);
    CHECK(ptr > previous);
    previous = (uintptr_t)ptr;
    int i = (int)(bytes - MiB);
    CHECK(i % 2 == 1 && i < count);
    CHECK_PTR_EQ((void *)(uintptr_t)ptr, blocks[i]);
    CHECK_PTR_EQ((void *)(uintptr_t)stream_value, stream);
    CHECK(seconds < 60);
  }
  free(text);
  for (int i = 1; i < count; i += 2)
    CHECK_OK(gpumem_deallocate(mr, blocks[i], MiB + (size_t)i, stream));
  CHECK_EQ(allocated(mr), 0);
  text = list_of(mr);
  CHECK(strcmp(text, "") == 0);
  free(text);
  CHECK_EQ(r.count, 0);
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_destroy(stream));
  printf("figures and list passed\n");
}

/* Not static, and the program is linked with -rdynamic and its symbols visible: the dynamic
 * symbol table names it. */
void tracking_test_allocate_here(gpumem_resource *mr, size_t bytes, void **ptr);
__attribute__((noinline)) void tracking_test_allocate_here(gpumem_resource *mr, size_t bytes,
                                                           void **ptr) {
  CHECK_OK(gpumem_allocate(mr, bytes, NULL, ptr));
  __asm__ volatile("" ::: "memory"); /* not a tail call: this frame stays on the stack */
}

static void test_stacks(void) {
  reports r = {0};
  gpumem_resource *pool = build("pool(vmm)");
  gpumem_resource *deep = tracking_over(pool, 1, 0, &r);
  gpumem_resource *shallow = tracking_over(pool, 1, 2, &r);
  CHECK_OK(gpumem_resource_release(pool));
  void *a, *b;
  tracking_test_allocate_here(deep, 1000, &a);
  tracking_test_allocate_here(shallow, 2000, &b);
  char *text = list_of(deep);
  CHECK_CONTAINS(text, ": 1000 B, stream 0x0, at +");
  CHECK_CONTAINS(text, " : callstack:\n#0 in ");
  CHECK_CONTAINS(text, "tracking_test_allocate_here+0x");
  CHECK_CONTAINS(text,
                 "(test_tracking)\n"); /* a named frame of the program: "name+0x.. (module)" */
  CHECK(count_of(text, "\n#") <= 32);
  CHECK(strstr(text, "\n\n") != NULL); /* an empty line after the frames */
  free(text);
  text = list_of(shallow);
  CHECK_EQ(count_of(text, "\n#"), 2); /* the depth asked, counted from the caller's frames */
  free(text);
  /* A wrong size is reported with the stack of the allocation. */
  CHECK_STATUS(gpumem_deallocate(deep, a, 999, NULL), GPUMEM_ERR_MISUSE);
  CHECK_EQ(r.count, 1);
  CHECK_CONTAINS(r.last, "allocated at:\n    #0 in ");
  CHECK_CONTAINS(r.last, "tracking_test_allocate_here+0x");
  CHECK_OK(gpumem_deallocate(deep, a, 1000, NULL));
  CHECK_OK(gpumem_deallocate(shallow, b, 2000, NULL));
  CHECK_OK(gpumem_resource_release(deep));
  CHECK_OK(gpumem_resource_release(shallow));
  printf("stacks passed\n");
}

/* ---- the buffer and bad arguments ---- */

static void test_buffer(void) {
  gpumem_resource *mr = build("tracking(pool(vmm))");
  void *p;
  CHECK_OK(gpumem_allocate(mr, 4096, NULL, &p));
  size_t needed = 0;
  CHECK_FAILS_WITH(gpumem_tracking_get_outstanding_allocations_str(mr, NULL, 0, &needed),
                   GPUMEM_ERR_INVALID_ARGUMENT, "it needs a buffer of");
  char message[64];
  snprintf(message, sizeof message, "needs a buffer of %zu bytes", needed);
  CHECK_CONTAINS(gpumem_last_error_message(), message);
  char buf[512];
  memset(buf, 'x', sizeof buf);
  size_t again = 0;
  CHECK_FAILS_WITH(gpumem_tracking_get_outstanding_allocations_str(mr, buf, needed - 1, &again),
                   GPUMEM_ERR_INVALID_ARGUMENT, message);
  CHECK_EQ(again, needed);
  for (size_t i = 0; i < sizeof buf; i++) /* nothing written, not even a cut list */
    CHECK_EQ(buf[i], 'x');
  CHECK_OK(gpumem_tracking_get_outstanding_allocations_str(mr, buf, needed, NULL));
  CHECK_EQ(strlen(buf) + 1, needed);
  CHECK_FAILS_WITH(gpumem_tracking_get_outstanding_allocations_str(mr, NULL, 10, NULL),
                   GPUMEM_ERR_INVALID_ARGUMENT, "buf is NULL");
  CHECK_FAILS_WITH(gpumem_tracking_get_outstanding_allocations_str(NULL, buf, sizeof buf, NULL),
                   GPUMEM_ERR_INVALID_ARGUMENT, "the resource is NULL");
  gpumem_resource *cuda = build("cuda");
  size_t bytes = 77;
  CHECK_FAILS_WITH(gpumem_tracking_get_allocated_bytes(cuda, &bytes), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not a tracking adaptor");
  CHECK_EQ(bytes, 77);
  CHECK_FAILS_WITH(gpumem_tracking_get_allocated_bytes(mr, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "bytes is NULL");
  CHECK_FAILS_WITH(gpumem_tracking_log_outstanding_allocations(cuda), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not a tracking adaptor");
  CHECK_FAILS_WITH(gpumem_tracking_get_outstanding_allocations_str(cuda, buf, sizeof buf, NULL),
                   GPUMEM_ERR_INVALID_ARGUMENT, "not a tracking adaptor");
  /* Creation. */
  gpumem_resource *out = untouched;
  gpumem_tracking_options opts = {.stack_depth = -1};
  CHECK_FAILS_WITH(gpumem_tracking_create(cuda, &opts, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "stack_depth -1");
  opts.stack_depth = 257;
  CHECK_FAILS_WITH(gpumem_tracking_create(cuda, &opts, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "stack_depth 257");
  CHECK_FAILS_WITH(gpumem_tracking_create(NULL, NULL, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "upstream");
  CHECK_FAILS_WITH(gpumem_tracking_create(cuda, NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT, "out");
  CHECK_PTR_EQ(out, untouched);
  opts.stack_depth = 256;
  CHECK_OK(gpumem_tracking_create(cuda, &opts, &out));
  CHECK_OK(gpumem_resource_release(out));
  CHECK_OK(gpumem_resource_release(cuda));
  /* The last release with an allocation outstanding is refused. */
  CHECK_FAILS_WITH(gpumem_resource_release(mr), GPUMEM_ERR_MISUSE, "1 live allocation");
  CHECK_OK(gpumem_deallocate(mr, p, 4096, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("buffer and bad arguments passed\n");
}

static void test_log(void) {
  reports r = {0};
  gpumem_resource *cuda = build("cuda");
  gpumem_resource *mr = tracking_over(cuda, 0, 0, &r);
  CHECK_OK(gpumem_resource_release(cuda));
  void *p[2];
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &p[0]));
  CHECK_OK(gpumem_allocate(mr, 3000, NULL, &p[1]));
  CHECK_OK(gpumem_tracking_log_outstanding_allocations(mr));
  CHECK_EQ(r.count, 1);
  CHECK_CONTAINS(r.last, "tracking(cuda, stacks=false, depth=32): Outstanding Allocations: 2 (");
  CHECK_CONTAINS(r.last, ": 1000 B, stream 0x0");
  CHECK_CONTAINS(r.last, ": 3000 B, stream 0x0");
  CHECK_OK(gpumem_deallocate(mr, p[0], 1000, NULL));
  CHECK_OK(gpumem_deallocate(mr, p[1], 3000, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("log passed\n");
}

/* ---- frees it cannot match ---- */

/* Two adaptors, one over the other, as RMM's tests stack them. */
static void test_nested(void) {
  reports outer_reports = {0}, inner_reports = {0};
  gpumem_resource *cuda = build("cuda");
  gpumem_resource *outer = tracking_over(cuda, 1, 0, &outer_reports);
  gpumem_resource *inner = tracking_over(outer, 0, 0, &inner_reports);
  CHECK_OK(gpumem_resource_release(cuda));
  enum { count = 10, more = 5 };
  void *blocks[count + more];
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_allocate(outer, MiB, NULL, &blocks[i]));
  for (int i = count; i < count + more; i++)
    CHECK_OK(gpumem_allocate(inner, MiB, NULL, &blocks[i]));
  CHECK_EQ(allocated(outer), (count + more) * MiB);
  CHECK_EQ(allocated(inner), more * MiB);
  CHECK_U64_EQ(check_query(outer, GPUMEM_QUERY_LIVE_COUNT), count + more);
  /* Everything freed through the inner one: what the outer one allocated is not the inner
   * one's, reported and passed on, and the outer one frees it. */
  for (int i = 0; i < count + more; i++)
    CHECK_OK(gpumem_deallocate(inner, blocks[i], MiB, NULL));
  CHECK_EQ(inner_reports.count, count);
  CHECK_EQ(outer_reports.count, 0);
  CHECK_CONTAINS(inner_reports.last, "not an outstanding allocation of this adaptor (5 tracked)");
  CHECK_CONTAINS(inner_reports.last, "passed on to the upstream, which freed it");
  CHECK_EQ(allocated(outer), 0);
  CHECK_EQ(allocated(inner), 0); /* never below zero */
  CHECK_U64_EQ(check_query(inner, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(inner));
  CHECK_OK(gpumem_resource_release(outer));
  printf("nested adaptors passed\n");
}

static void test_refused_frees(void) {
  reports r = {0};
  gpumem_resource *pool = build("pool(vmm)");
  gpumem_resource *mr = tracking_over(pool, 0, 0, &r);
  void *p, *q;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &p));
  CHECK_OK(gpumem_allocate(mr, 3000, NULL, &q));
  /* A wrong size goes to the pool as it came; the pool refuses it and keeps the block, and
   * so does the adaptor. */
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 500, NULL), GPUMEM_ERR_MISUSE, "tracking(pool(vmm(");
  CHECK_CONTAINS(gpumem_last_error_message(), "with 500 bytes, but it was allocated with 1000");
  CHECK_EQ(r.count, 1);
  CHECK_CONTAINS(r.last, "with 500 bytes on stream 0x0, but it was allocated with 1000 bytes on "
                         "stream 0x0 at +");
  CHECK_CONTAINS(r.last, "passed on to the upstream, which refused it (GPUMEM_ERR_MISUSE: ");
  CHECK(strstr(r.last, "allocated at:") == NULL); /* no stacks kept */
  CHECK_EQ(allocated(mr), 4000);
  CHECK_U64_EQ(check_query(pool, GPUMEM_QUERY_LIVE_BYTES), 4000);
  /* A pointer inside a block, and one of the host: not tracked, passed on, refused. */
  CHECK_FAILS_WITH(gpumem_deallocate(mr, (char *)q + 256, 1000, NULL), GPUMEM_ERR_MISUSE,
                   "not a live allocation");
  CHECK_EQ(r.count, 2);
  CHECK_CONTAINS(r.last, "not an outstanding allocation of this adaptor (2 tracked); passed on to "
                         "the upstream, which refused it");
  static char host[4096] __attribute__((aligned(256)));
  CHECK_STATUS(gpumem_deallocate(mr, host, 100, NULL), GPUMEM_ERR_MISUSE);
  CHECK_EQ(r.count, 3);
  CHECK_EQ(allocated(mr), 4000);
  CHECK_OK(gpumem__validate(mr));
  /* The right frees still work, and a double free is refused. */
  CHECK_OK(gpumem_deallocate(mr, p, 1000, NULL));
  CHECK_STATUS(gpumem_deallocate(mr, p, 1000, NULL), GPUMEM_ERR_MISUSE);
  CHECK_EQ(r.count, 4);
  CHECK_OK(gpumem_deallocate(mr, q, 3000, NULL));
  CHECK_EQ(allocated(mr), 0);
  /* Without a report function, reports go to stderr; nothing else changes. */
  gpumem_resource *quiet = build("tracking(cuda)");
  CHECK_STATUS(gpumem_deallocate(quiet, host, 100, NULL), GPUMEM_ERR_MISUSE);
  CHECK_OK(gpumem_resource_release(quiet));
  /* A pointer given out again while still tracked: freed past the adaptor, through the pool. */
  CHECK_OK(gpumem_allocate(mr, 2000, NULL, &p));
  CHECK_OK(gpumem_deallocate(pool, p, 2000, NULL));
  CHECK_OK(gpumem_allocate(mr, 2000, NULL, &q));
  CHECK_PTR_EQ(q, p);
  CHECK_EQ(r.count, 5);
  CHECK_CONTAINS(r.last, "the upstream gave out");
  CHECK_CONTAINS(r.last, "while it was still tracked as an allocation of 2000 bytes");
  CHECK_EQ(allocated(mr), 2000);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_OK(gpumem_deallocate(mr, q, 2000, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(pool));
  printf("refused frees passed\n");
}

/* An upstream that takes any size (no gpumem resource does): host memory, freed whatever
 * size comes. */
static gpumem_status lax_allocate(gpumem_resource *self, size_t bytes, size_t alignment,
                                  gpumem_stream stream, void **ptr) {
  void *p = aligned_alloc(alignment, gpumem__align_up(bytes, alignment));
  if (!p)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "lax: no host memory");
  *ptr = p;
  return GPUMEM_OK;
}

static gpumem_status lax_deallocate(gpumem_resource *self, void *ptr, size_t bytes,
                                    size_t alignment, gpumem_stream stream) {
  free(ptr);
  return GPUMEM_OK;
}

static gpumem_status lax_destroy(gpumem_resource *self) {
  return GPUMEM_OK;
}

static void test_wrong_size_freed(void) {
  static const gpumem__resource_ops lax_ops = {.version = GPUMEM__RESOURCE_OPS_VERSION,
                                               .kind = "lax",
                                               .allocate = lax_allocate,
                                               .deallocate = lax_deallocate,
                                               .destroy = lax_destroy};
  gpumem_resource *cuda = build("cuda"); /* for its device backend */
  gpumem_resource lax;
  gpumem__resource_init(&lax, &lax_ops, cuda->device, cuda->dev, NULL);
  reports r = {0};
  gpumem_resource *mr = tracking_over(&lax, 1, 0, &r);
  void *p, *q;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &p));
  CHECK_OK(gpumem_allocate(mr, 3000, NULL, &q));
  CHECK_OK(gpumem_deallocate(mr, p, 5000, NULL));
  CHECK_EQ(r.count, 1);
  CHECK_CONTAINS(r.last, "with 5000 bytes on stream 0x0, but it was allocated with 1000 bytes");
  CHECK_CONTAINS(r.last, "passed on to the upstream, which freed it");
  CHECK_CONTAINS(r.last, "allocated at:\n    #0 in ");
  CHECK_EQ(allocated(mr), 3000); /* the recorded size went */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_deallocate(mr, q, 3000, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(cuda));
  printf("wrong size freed by a lax upstream passed\n");
}

/* A user resource whose free gives the memory back and, before returning, has it allocated
 * again through the adaptor over it: the address comes back while the adaptor's free of it
 * is in flight, as when another thread gets it at that moment. */
typedef struct echo_state {
  gpumem_resource *backing, *tracking;
  void *again; /* what the allocation inside the free got */
  bool echo;
} echo_state;

static gpumem_status echo_allocate(void *state, size_t bytes, size_t alignment,
                                   gpumem_stream stream, void **ptr) {
  return gpumem_allocate_aligned(((echo_state *)state)->backing, bytes, alignment, stream, ptr);
}

static gpumem_status echo_deallocate(void *state, void *ptr, size_t bytes, size_t alignment,
                                     gpumem_stream stream) {
  echo_state *s = state;
  gpumem_status status = gpumem_deallocate_aligned(s->backing, ptr, bytes, alignment, stream);
  if (status == GPUMEM_OK && s->echo) {
    s->echo = false;
    CHECK_OK(gpumem_allocate(s->tracking, bytes, stream, &s->again));
  }
  return status;
}

static void test_takeover(void) {
  echo_state state = {.backing = build("pool(vmm)")};
  gpumem_user_resource_ops ops = {.size = sizeof ops,
                                  .version = GPUMEM_USER_RESOURCE_OPS_VERSION,
                                  .allocate = echo_allocate,
                                  .deallocate = echo_deallocate,
                                  .memory = GPUMEM_MEMORY_DEVICE,
                                  .stream_ordered = 1,
                                  .name = "echo"};
  gpumem_resource *user;
  CHECK_OK(gpumem_user_resource_create(GPUMEM_CURRENT_DEVICE, &ops, &state, &user));
  reports r = {0};
  state.tracking = tracking_over(user, 1, 0, &r);
  void *p;
  CHECK_OK(gpumem_allocate(state.tracking, 4096, NULL, &p));
  state.echo = true;
  CHECK_OK(gpumem_deallocate(state.tracking, p, 4096, NULL));
  CHECK_PTR_EQ(state.again, p); /* the pool gave the same block */
  CHECK_EQ(r.count, 0);         /* a race, not a misuse */
  CHECK_EQ(allocated(state.tracking), 4096);
  CHECK_U64_EQ(check_query(state.tracking, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_OK(gpumem__validate(state.tracking));
  CHECK_OK(gpumem_deallocate(state.tracking, state.again, 4096, NULL));
  CHECK_EQ(allocated(state.tracking), 0);
  CHECK_OK(gpumem_resource_release(state.tracking));
  CHECK_OK(gpumem_resource_release(user));
  CHECK_OK(gpumem_resource_release(state.backing));
  printf("takeover passed\n");
}

/* A report function that makes a failing gpumem call: the caller still reads the message of
 * its own call. */
static void failing_report(const char *text, void *user) {
  (*(int *)user)++;
  CHECK_STATUS(gpumem_resource_query(NULL, GPUMEM_QUERY_LIVE_BYTES, NULL),
               GPUMEM_ERR_INVALID_ARGUMENT);
}

static void test_report_keeps_message(void) {
  gpumem_resource *cuda = build("cuda");
  int calls = 0;
  gpumem_tracking_options opts = {.report = failing_report, .user = &calls};
  gpumem_resource *mr;
  CHECK_OK(gpumem_tracking_create(cuda, &opts, &mr));
  static char host[512] __attribute__((aligned(256)));
  CHECK_FAILS_WITH(gpumem_deallocate(mr, host, 100, NULL), GPUMEM_ERR_MISUSE,
                   "not a live allocation");
  CHECK_EQ(calls, 1);
  CHECK(strstr(gpumem_last_error_message(), "gpumem_resource_query") == NULL);
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(cuda));
  printf("report function keeps the message passed\n");
}

/* ---- placement ---- */

static void check_table_is_pool(gpumem_resource *pool, gpumem_resource *tracking) {
  CHECK_EQ(allocated(tracking), check_query(pool, GPUMEM_QUERY_RESERVED_BYTES));
  CHECK_OK(gpumem__validate(pool));
}

static void test_placement(void) {
  gpumem_resource *probe;
  if (gpumem_resource_from_spec("vmm", &probe) != GPUMEM_OK) {
    printf("placement: skipped, no virtual memory management\n");
    return;
  }
  CHECK_OK(gpumem_resource_release(probe));
  reports r = {0};
  gpumem_resource *vmm = build("vmm(piece=2MiB)");
  gpumem_resource *tracking = tracking_over(vmm, 1, 0, &r);
  CHECK_OK(gpumem_resource_release(vmm));
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_OK(gpumem_resource_get_capabilities(tracking, &caps));
  CHECK_EQ(caps.places_at_address, 1);
  gpumem_resource *pool;
  CHECK_OK(gpumem_pool_create(tracking, NULL, &pool));
  /* One growth step of five pieces, then five blocks in it, one a piece. */
  enum { count = 5 };
  void *blocks[count];
  CHECK_OK(gpumem_allocate(pool, count * 2 * MiB, NULL, &blocks[0]));
  check_table_is_pool(pool, tracking);
  CHECK_EQ(allocated(tracking), count * 2 * MiB); /* the growth step, placed */
  CHECK_OK(gpumem_deallocate(pool, blocks[0], count * 2 * MiB, NULL));
  for (int i = 0; i < count; i++) {
    CHECK_OK(gpumem_allocate(pool, 2 * MiB, NULL, &blocks[i]));
    CHECK_PTR_EQ(blocks[i], (char *)blocks[0] + (size_t)i * 2 * MiB);
  }
  CHECK_EQ(allocated(tracking), count * 2 * MiB);
  /* A trim cuts off the front, the back and the middle: three entries become two. */
  for (int i = 0; i < count; i += 2)
    CHECK_OK(gpumem_deallocate(pool, blocks[i], 2 * MiB, NULL));
  size_t released;
  CHECK_OK(gpumem_pool_trim(pool, &released));
  CHECK_EQ(released, 3 * 2 * MiB);
  check_table_is_pool(pool, tracking);
  CHECK_EQ(allocated(tracking), 2 * 2 * MiB);
  CHECK_U64_EQ(check_query(tracking, GPUMEM_QUERY_LIVE_COUNT), 2);
  char *text = list_of(tracking);
  char line[64];
  snprintf(line, sizeof line, "%p: 2097152 B, stream 0x0, at +", blocks[1]);
  CHECK_CONTAINS(text, line);
  snprintf(line, sizeof line, "%p: 2097152 B, stream 0x0, at +", blocks[3]);
  CHECK_CONTAINS(text, line);
  CHECK_EQ(count_of(text, "callstack"), 2); /* each piece keeps its growth step's stack */
  free(text);
  CHECK_OK(gpumem_deallocate(pool, blocks[1], 2 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(pool, blocks[3], 2 * MiB, NULL));
  CHECK_OK(gpumem_pool_trim(pool, &released));
  CHECK_EQ(allocated(tracking), 0);
  CHECK_EQ(r.count, 0);
  /* Pieces are whole granules: a cut may reach past the bytes an allocation asked for (1000
   * bytes, mapped as a granule), and then nothing of it is left. */
  void *small;
  CHECK_OK(gpumem_allocate(tracking, 1000, NULL, &small));
  int added = 0;
  CHECK_OK(gpumem_stream_synchronize(NULL));
  CHECK_OK(tracking->ops->unmap_pieces(tracking, (uintptr_t)small, caps.granularity, &added));
  CHECK_EQ(added, -1);
  CHECK_EQ(allocated(tracking), 0);
  CHECK_U64_EQ(check_query(tracking, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem__validate(tracking));
  CHECK_OK(gpumem_resource_release(pool));
  CHECK_OK(gpumem_resource_release(tracking));
  printf("placement passed\n");
}

/* ---- threads ---- */

enum { thread_count = 8, rounds = 3000, slots_per_thread = 32 };

typedef struct block_record {
  void *ptr;
  size_t bytes;
} block_record;

typedef struct shared_blocks {
  gpumem_resource *mr;
  _Atomic(block_record *) blocks[thread_count * slots_per_thread];
} shared_blocks;

static void free_record(gpumem_resource *mr, block_record *record) {
  CHECK_OK(gpumem_deallocate(mr, record->ptr, record->bytes, NULL));
  free(record);
}

/* Each thread allocates into random slots of the shared array and frees what it finds
 * there, often a block another thread allocated; now and then it reads the list. */
static void *churn(void *arg) {
  shared_blocks *shared = ((void **)arg)[0];
  unsigned seed = (unsigned)(uintptr_t)((void **)arg)[1];
  for (int i = 0; i < rounds; i++) {
    seed = seed * 1103515245u + 12345u;
    size_t slot = (seed >> 8) % (thread_count * slots_per_thread);
    block_record *old = atomic_exchange(&shared->blocks[slot], NULL);
    if (old)
      free_record(shared->mr, old);
    block_record *record = malloc(sizeof *record);
    CHECK(record != NULL);
    record->bytes = 256 + (seed >> 4) % (64 * KiB);
    CHECK_OK(gpumem_allocate(shared->mr, record->bytes, NULL, &record->ptr));
    block_record *expected = NULL;
    if (!atomic_compare_exchange_strong(&shared->blocks[slot], &expected, record))
      free_record(shared->mr, record);
    if (seed % 500 == 0)
      free(list_of(shared->mr));
  }
  return NULL;
}

static void test_threads(const char *spec) {
  static shared_blocks shared;
  memset(&shared, 0, sizeof shared);
  shared.mr = build(spec);
  pthread_t threads[thread_count];
  void *args[thread_count][2];
  for (int t = 0; t < thread_count; t++) {
    args[t][0] = &shared;
    args[t][1] = (void *)(uintptr_t)(t + 1);
    CHECK_EQ(pthread_create(&threads[t], NULL, churn, args[t]), 0);
  }
  for (int t = 0; t < thread_count; t++)
    CHECK_EQ(pthread_join(threads[t], NULL), 0);
  CHECK_OK(gpumem__validate(shared.mr));
  uint64_t expected = 0, count = 0;
  for (size_t i = 0; i < thread_count * slots_per_thread; i++) {
    block_record *record = atomic_load(&shared.blocks[i]);
    if (record) {
      expected += record->bytes;
      count++;
    }
  }
  CHECK(count > 0);
  CHECK_U64_EQ(allocated(shared.mr), expected);
  CHECK_U64_EQ(check_query(shared.mr, GPUMEM_QUERY_LIVE_COUNT), count);
  for (size_t i = 0; i < thread_count * slots_per_thread; i++) {
    block_record *record = atomic_load(&shared.blocks[i]);
    if (record)
      free_record(shared.mr, record);
  }
  CHECK_EQ(allocated(shared.mr), 0);
  CHECK_OK(gpumem_resource_release(shared.mr));
  printf("threads on %s passed\n", spec);
}

/* ---- the validator finds a corrupted table ---- */

static void test_validate(void) {
  gpumem_resource *mr = build("tracking(cuda)");
  enum { count = 200 };
  void *blocks[count];
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_allocate(mr, 1000, NULL, &blocks[i]));
  CHECK_OK(gpumem__validate(mr));
  gpumem__tracking_resource *self = (gpumem__tracking_resource *)mr;
  /* A shard whose count disagrees with its entries. */
  gpumem__tracking_shard *shard = NULL;
  for (int s = 0; s < GPUMEM__TRACKING_SHARDS && !shard; s++)
    if (self->table.shards[s].used > 1)
      shard = &self->table.shards[s];
  CHECK(shard != NULL);
  atomic_fetch_add(&shard->bytes, 1);
  CHECK_FAILS_WITH(gpumem__validate(mr), GPUMEM_ERR_INTERNAL, "counts");
  atomic_fetch_sub(&shard->bytes, 1);
  CHECK_OK(gpumem__validate(mr));
  /* An entry moved one slot on, into an empty one: the slot it left, now empty, lies
   * between its home and it. */
  size_t from = SIZE_MAX;
  for (size_t i = 0; i + 1 < shard->capacity && from == SIZE_MAX; i++)
    if (shard->slots[i].ptr && !shard->slots[i + 1].ptr)
      from = i;
  CHECK(from != SIZE_MAX);
  shard->slots[from + 1] = shard->slots[from];
  shard->slots[from].ptr = 0;
  CHECK_FAILS_WITH(gpumem__validate(mr), GPUMEM_ERR_INTERNAL, "cannot be found from its home slot");
  shard->slots[from] = shard->slots[from + 1];
  shard->slots[from + 1].ptr = 0;
  CHECK_OK(gpumem__validate(mr));
  size_t back = from;
  /* An entry of 0 bytes. */
  size_t saved = shard->slots[back].bytes;
  shard->slots[back].bytes = 0;
  atomic_fetch_sub(&shard->bytes, saved);
  CHECK_FAILS_WITH(gpumem__validate(mr), GPUMEM_ERR_INTERNAL, "with 0 bytes");
  shard->slots[back].bytes = saved;
  atomic_fetch_add(&shard->bytes, saved);
  CHECK_OK(gpumem__validate(mr));
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_deallocate(mr, blocks[i], 1000, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("validate passed\n");
}

int main(void) {
  check_init_backend();
  test_figures_and_list();
  test_stacks();
  test_buffer();
  test_log();
  test_nested();
  test_refused_frees();
  test_wrong_size_freed();
  test_takeover();
  test_report_keeps_message();
  test_placement();
  test_threads("tracking(pool(vmm))");
  test_threads("tracking(arena(vmm), stacks=true, depth=4)");
  test_threads("tracking(cuda)");
  test_validate();
  return 0;
}
