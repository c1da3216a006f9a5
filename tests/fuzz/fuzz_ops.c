/* fuzz_ops.c: a libFuzzer target that drives a resource with a sequence of API calls read
 * from the input and checks every answer against a model (the blocks that should be live).
 *
 * The first byte picks a resource from `resources` (every suballocator and adaptor, some
 * composed); the rest is a sequence of operations, each an opcode byte and the bytes of its
 * arguments (missing bytes read as 0): allocate (size, alignment, stream), free a live block
 * (on its stream, or on another after synchronizing its stream), misuse (a wrong size, a
 * double free, a pointer inside a block, a pointer of another resource or of the host, the
 * last release while blocks are live: each must return GPUMEM_ERR_MISUSE and change
 * nothing), trim, synchronize or complete streams, read back what a block's stream wrote
 * into it, and calls made while the simulated device fails its Nth next call of a kind.
 *
 * After every operation: no two live blocks overlap, each is aligned as asked (and as the
 * resource promises), live bytes and count equal the model's, a failed allocation left the
 * out-pointer and the figures alone (one out of memory ends its message with a verdict line),
 * a limit refused what passes its maximum, a tracking adaptor (made over a row's resource)
 * holds the model's bytes and lists its blocks, and reported each refused free once, a
 * statistics adaptor's counters equal a model of its counter stack (the verify opcode pushes
 * or pops there too); a block read back holds what its stream wrote; a trim is followed by the
 * resource's report and JSON stats, read whole. At the end every block is freed, live bytes are
 * 0, the resource is released, no cross-stream hazard was seen (each block is written on its
 * stream when allocated, so handing it to another stream too early is caught) and the device
 * holds no memory. */
#include "fuzz.h"
#include "../forwarding.h"

#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

typedef struct resource_row {
  const char *spec;
  size_t alignment;   /* every block is aligned to at least this (0: 256) */
  size_t largest;     /* larger requests must fail (0: no such bound) */
  bool default_align; /* alignments above 256 are refused (GPUMEM_ERR_UNSUPPORTED) */
  size_t limit;       /* the outermost resource is a limit of this many bytes (0: not) */
  int tracking;       /* 1: a tracking adaptor over the spec's resource (2: keeping stacks) */
  bool stats;         /* the outermost resource is a statistics adaptor */
} resource_row;

static const resource_row resources[] = {
    {.spec = "pool(vmm)"},
    {.spec = "pool(cuda, initial=1)"},
    {.spec = "arena(vmm)"},
    {.spec = "binning(pool(vmm))"},
    {.spec = "fixed_size(cuda, block=64KiB, prealloc=4)",
     .largest = 64 * KiB,
     .default_align = true},
    {.spec = "limit(pool(vmm), max=256MiB)", .limit = 256 * MiB},
    {.spec = "aligned(pool(vmm), alignment=4KiB)", .alignment = 4 * KiB},
    {.spec = "prefetch(pool(managed))"},
    {.spec = "retry(pool(cuda, initial=1))"},
    {.spec = "faulty(pool(vmm), fail_every=7)"},
    {.spec = "pool(limit(vmm, max=256MiB))"},
    {.spec = "pool(vmm, max=64MiB)"},
    {.spec = "arena(cuda, size=32MiB, superblock=1MiB)"},
    {.spec = "binning(pool(vmm), min=10, max=22)"},
    {.spec = "pool(async)"},
    {.spec = "pool(aligned(vmm, alignment=4MiB))"},
    {.spec = "pool(retry(vmm))"},
    {.spec = "fixed_size(pool(vmm), block=4KiB, prealloc=16)",
     .largest = 4 * KiB,
     .default_align = true},
    {.spec = "pool(pinned_host)"},
    {.spec = "faulty(arena(vmm), fail_at=3)"},
    {.spec = "limit(arena(vmm), max=64MiB)", .limit = 64 * MiB},
    {.spec = "aligned(binning(pool(vmm), min=10, max=22), alignment=64KiB, threshold=4KiB)"},
    {.spec = "pool(vmm)", .tracking = 2},
    {.spec = "pool(tracking(vmm(piece=2MiB)))"},
    {.spec = "arena(vmm)", .tracking = 1},
    {.spec = "stats(pool(vmm))", .stats = true},
    {.spec = "pool(stats(vmm(piece=2MiB)))"},
    {.spec = "stats(arena(vmm), flush_bytes=1, flush_count=1)", .stats = true},
    {.spec = "log(pool(vmm), file=/tmp/gpumem-fuzz-ops-%p.csv)"}, /* unlinked once open */
    /* Rows are appended: an input's first byte picks its row, and the corpus keeps its. */
    {.spec = "user:cuda"}, /* written through the public API (forwarding.h's names) */
    {.spec = "pool:user:cuda"},
    {.spec = "pool(log(vmm, file=/tmp/gpumem-fuzz-ops-%p.csv))"},
    /* Over the driver pool of another async resource, made for the input (%llu: its handle). */
    {.spec = "async(pool=%llu)"},
    {.spec = "pool(async(pool=%llu), initial=1)"},
    /* The device's default pool of managed memory, shared by every input. */
    {.spec = "async(managed=true)"},
    {.spec = "pool(async(managed=true), initial=1)"},
    /* A pool that gives back the pieces of its holes before each growth past its live peak;
     * with no budget of time, before every one. */
    {.spec = "pool(vmm(piece=2MiB), release_holes_over=100)"},
    {.spec = "pool(vmm(piece=2MiB), release_holes_over=100, release_holes_time=100)"},
};
#define RESOURCE_COUNT (sizeof resources / sizeof resources[0])

/* Device calls an operation may be made to fail. */
static const gpumem_sim_call faultable[] = {
    GPUMEM_SIM_CALL_MEM_ALLOC,    GPUMEM_SIM_CALL_MEM_FREE,       GPUMEM_SIM_CALL_MANAGED_ALLOC,
    GPUMEM_SIM_CALL_HOST_ALLOC,   GPUMEM_SIM_CALL_POOL_ALLOC,     GPUMEM_SIM_CALL_POOL_FREE,
    GPUMEM_SIM_CALL_EVENT_CREATE, GPUMEM_SIM_CALL_EVENT_RECORD,   GPUMEM_SIM_CALL_STREAM_WAIT,
    GPUMEM_SIM_CALL_SYNCHRONIZE,  GPUMEM_SIM_CALL_PREFETCH,       GPUMEM_SIM_CALL_VMM_CREATE,
    GPUMEM_SIM_CALL_VMM_MAP,      GPUMEM_SIM_CALL_VMM_SET_ACCESS, GPUMEM_SIM_CALL_VMM_UNMAP,
    GPUMEM_SIM_CALL_EVENT_QUERY,
};
#define FAULTABLE_COUNT (sizeof faultable / sizeof faultable[0])

enum { stream_count = 4, max_live = 64, max_ops = 400, max_freed = 8, max_depth = 32 };

typedef struct block {
  uintptr_t start;
  size_t bytes, alignment;
  int stream;
  uint8_t value; /* what its stream wrote at its start and end */
} block;

/* The state of one input: the resource, its row, the model and the bytes still unread. */
typedef struct run {
  const resource_row *row;
  gpumem_resource *mr;
  block live[max_live];
  int live_count;
  uint64_t live_bytes;
  uintptr_t freed[max_freed]; /* recently freed addresses, for double frees */
  int freed_next;
  uint8_t next_value;
  bool device_fault;             /* a device call is armed to fail during this operation */
  int reports, reports_expected; /* of the tracking adaptor: received, and frees refused */
  /* A statistics adaptor's counter stack, as it should be: bytes and counts per level. */
  gpumem_statistics_counter stat_bytes[max_depth + 1], stat_count[max_depth + 1];
  int depth;
  const uint8_t *data;
  size_t size, pos;
} run;

static gpumem_stream streams[stream_count]; /* [0] is the legacy default stream (NULL) */

/* GPUMEM_FUZZ_TRACE=1 prints each operation and its outcome, to read what an input does. */
static bool tracing;
#define TRACE(...)                                                                                 \
  do {                                                                                             \
    if (tracing)                                                                                   \
      fprintf(stderr, __VA_ARGS__);                                                                \
  } while (0)

static uint8_t next_byte(run *r) {
  return r->pos < r->size ? r->data[r->pos++] : 0;
}

static uint32_t next_u16(run *r) {
  uint32_t low = next_byte(r);
  return low | (uint32_t)next_byte(r) << 8;
}

/* The file of the log row, named as its spec names it: unlinked as soon as the log has it
 * open, so that no file is left however the fuzzer ends. */
static void remove_log(void) {
  char log[64];
  snprintf(log, sizeof log, "/tmp/gpumem-fuzz-ops-%ld.csv", (long)getpid());
  remove(log);
}

static void init_once(void) {
  static bool done;
  if (done)
    return;
  done = true;
  tracing = getenv("GPUMEM_FUZZ_TRACE") != NULL;
  /* 1 GiB: room for the 256 MiB limits to be what stops them; abort at the first hazard,
   * so that the crash's stack is the allocation that caused it. */
  gpumem_sim_config config = {.memory = (uint64_t)1 << 30, .abort_on_hazard = 1};
  fuzz_sim_init(&config);
  for (int i = 1; i < stream_count; i++)
    FUZZ_OK(gpumem_stream_create(0, &streams[i]));
}

/* ---- the model ---- */

static uint64_t query(const run *r, gpumem_query what, bool *known) {
  uint64_t value = 0;
  gpumem_status status = gpumem_resource_query(r->mr, what, &value);
  FUZZ_CHECK(status == GPUMEM_OK || status == GPUMEM_ERR_UNSUPPORTED, "query %d: %s", (int)what,
             gpumem_status_name(status));
  *known = status == GPUMEM_OK;
  return value;
}

/* ---- the statistics model: a counter stack as the adaptor's ---- */

static void stat_add(gpumem_statistics_counter *c, int64_t value) {
  c->current += value;
  if (value > 0) {
    c->total += value;
    c->peak = c->current > c->peak ? c->current : c->peak;
  }
}

static void stat_fold(gpumem_statistics_counter *parent, const gpumem_statistics_counter *child) {
  int64_t lifted = parent->current + child->peak;
  parent->peak = parent->peak > lifted ? parent->peak : lifted;
  parent->current += child->current;
  parent->total += child->total;
}

static void stat_counted(run *r, int64_t bytes, int64_t count) {
  if (r->row->stats) {
    stat_add(&r->stat_bytes[r->depth], bytes);
    stat_add(&r->stat_count[r->depth], count);
  }
}

/* The counters `s` (from the adaptor) equal the model's at `level`. */
static void check_counters(const run *r, const gpumem_statistics *s, int level, const char *what) {
  const gpumem_statistics_counter *b = &r->stat_bytes[level], *c = &r->stat_count[level];
  FUZZ_CHECK(memcmp(&s->bytes, b, sizeof *b) == 0 && memcmp(&s->count, c, sizeof *c) == 0,
             "%s: %s: bytes {%lld, %lld, %lld} count {%lld, %lld, %lld}, the model bytes {%lld, "
             "%lld, %lld} count {%lld, %lld, %lld}",
             r->row->spec, what, (long long)s->bytes.current, (long long)s->bytes.peak,
             (long long)s->bytes.total, (long long)s->count.current, (long long)s->count.peak,
             (long long)s->count.total, (long long)b->current, (long long)b->peak,
             (long long)b->total, (long long)c->current, (long long)c->peak, (long long)c->total);
}

/* Pushes or pops the statistics adaptor's counters (which % 4 is 0 or 1): true when it did. */
static bool op_statistics(run *r, uint8_t which) {
  if (!r->row->stats || which % 4 > 1)
    return false;
  gpumem_statistics s = {.size = sizeof s};
  if (which % 4 == 0 && r->depth < max_depth) {
    FUZZ_OK(gpumem_statistics_push(r->mr, &s));
    TRACE("push: depth %d\n", r->depth + 1);
    check_counters(r, &s, r->depth, "push");
    r->depth++;
    memset(&r->stat_bytes[r->depth], 0, sizeof r->stat_bytes[0]);
    memset(&r->stat_count[r->depth], 0, sizeof r->stat_count[0]);
  } else if (which % 4 == 1 && r->depth > 0) {
    FUZZ_OK(gpumem_statistics_pop(r->mr, &s));
    TRACE("pop: depth %d\n", r->depth - 1);
    check_counters(r, &s, r->depth, "pop");
    r->depth--;
    stat_fold(&r->stat_bytes[r->depth], &r->stat_bytes[r->depth + 1]);
    stat_fold(&r->stat_count[r->depth], &r->stat_count[r->depth + 1]);
  } else if (which % 4 == 1) {
    gpumem_statistics kept = {.size = sizeof kept, .version = 77};
    gpumem_status status = gpumem_statistics_pop(r->mr, &kept);
    FUZZ_CHECK(status == GPUMEM_ERR_MISUSE && kept.version == 77 &&
                   strstr(gpumem_last_error_message(), "no counters were pushed"),
               "%s: a pop with nothing pushed: %s: %s", r->row->spec, gpumem_status_name(status),
               gpumem_last_error_message());
  }
  return true;
}

/* The resource's figures agree with the model. */
static void check_figures(const run *r) {
  bool known;
  uint64_t bytes = query(r, GPUMEM_QUERY_LIVE_BYTES, &known);
  FUZZ_CHECK(!known || bytes == r->live_bytes, "%s: live bytes %llu, the model %llu", r->row->spec,
             (unsigned long long)bytes, (unsigned long long)r->live_bytes);
  uint64_t count = query(r, GPUMEM_QUERY_LIVE_COUNT, &known);
  FUZZ_CHECK(!known || count == (uint64_t)r->live_count, "%s: live count %llu, the model %d",
             r->row->spec, (unsigned long long)count, r->live_count);
  if (r->row->stats) {
    gpumem_statistics s = {.size = sizeof s};
    FUZZ_OK(gpumem_statistics_get(r->mr, &s));
    check_counters(r, &s, r->depth, "get");
  }
  if (r->row->limit) {
    size_t allocated = 0;
    FUZZ_OK(gpumem_limit_get_allocated_bytes(r->mr, &allocated));
    FUZZ_CHECK(allocated == r->live_bytes, "%s: the limit counts %zu bytes, the model %llu",
               r->row->spec, allocated, (unsigned long long)r->live_bytes);
  }
  if (r->row->tracking) {
    size_t allocated = 0;
    FUZZ_OK(gpumem_tracking_get_allocated_bytes(r->mr, &allocated));
    FUZZ_CHECK(allocated == r->live_bytes, "%s: tracking holds %zu bytes, the model %llu",
               r->row->spec, allocated, (unsigned long long)r->live_bytes);
    FUZZ_CHECK(r->reports == r->reports_expected, "%s: %d reports of refused frees, expected %d",
               r->row->spec, r->reports, r->reports_expected);
  }
}

/* A tracking adaptor's list has a line for each live block, with its size. */
static void check_tracking_list(const run *r) {
  static char text[1 << 16];
  size_t needed = 0;
  FUZZ_OK(gpumem_tracking_get_outstanding_allocations_str(r->mr, text, sizeof text, &needed));
  for (int i = 0; i < r->live_count; i++) {
    char line[64];
    snprintf(line, sizeof line, "0x%llx: %zu B, stream ", (unsigned long long)r->live[i].start,
             r->live[i].bytes);
    FUZZ_CHECK(strstr(text, line) != NULL, "%s: block %p+%zu missing from the list:\n%s",
               r->row->spec, (void *)r->live[i].start, r->live[i].bytes, text);
  }
  int lines = 0;
  for (const char *at = text; (at = strstr(at, " B, stream ")) != NULL; at++)
    lines++;
  FUZZ_CHECK(lines == r->live_count, "%s: %d blocks listed, the model has %d", r->row->spec, lines,
             r->live_count);
}

/* What a refused call must leave as it was. */
typedef struct figures {
  uint64_t live_bytes, live_count, reserved;
} figures;

static figures figures_of(const run *r) {
  bool known;
  figures f = {query(r, GPUMEM_QUERY_LIVE_BYTES, &known), query(r, GPUMEM_QUERY_LIVE_COUNT, &known),
               query(r, GPUMEM_QUERY_RESERVED_BYTES, &known)};
  return f;
}

static int find_live_start(const run *r, uintptr_t address) {
  for (int i = 0; i < r->live_count; i++) {
    if (r->live[i].start == address)
      return i;
  }
  return -1;
}

/* Files a new block, after checking its place against every live one. */
static void claim(run *r, void *ptr, size_t bytes, size_t alignment, int stream) {
  uintptr_t start = (uintptr_t)ptr;
  size_t promised = alignment > r->row->alignment ? alignment : r->row->alignment;
  promised = promised > GPUMEM_DEFAULT_ALIGNMENT ? promised : GPUMEM_DEFAULT_ALIGNMENT;
  FUZZ_CHECK(ptr != NULL, "%s: success with NULL for %zu bytes", r->row->spec, bytes);
  FUZZ_CHECK(start % promised == 0, "%s: %p for %zu bytes is not aligned to %zu", r->row->spec, ptr,
             bytes, promised);
  for (int i = 0; i < r->live_count; i++) {
    const block *b = &r->live[i];
    FUZZ_CHECK(start + bytes <= b->start || b->start + b->bytes <= start,
               "%s: %p+%zu overlaps live block %p+%zu", r->row->spec, ptr, bytes, (void *)b->start,
               b->bytes);
  }
  r->next_value = (uint8_t)(r->next_value % 255 + 1);
  r->live[r->live_count++] = (block){start, bytes, alignment, stream, r->next_value};
  r->live_bytes += bytes;
  stat_counted(r, (int64_t)bytes, 1);
}

static void unclaim(run *r, int index) {
  r->freed[r->freed_next] = r->live[index].start;
  r->freed_next = (r->freed_next + 1) % max_freed;
  r->live_bytes -= r->live[index].bytes;
  stat_counted(r, -(int64_t)r->live[index].bytes, -1);
  r->live[index] = r->live[--r->live_count];
}

/* ---- operations ---- */

static size_t pick_size(run *r) {
  uint8_t kind = next_byte(r);
  uint32_t value = next_u16(r);
  switch (kind % 8) {
  case 0:
    return value % 5 == 0 ? 0 : value % 4096 + 1;
  case 1:
  case 2:
    return value % (256 * KiB) + 1;
  case 3:
    return (size_t)value * 128 + 1; /* up to 8 MiB */
  case 4:
    return (size_t)value * 1536 + 1; /* up to 96 MiB */
  case 5:
    return (size_t)1 << (30 + value % 31); /* 1 GiB to 1 EiB: out of memory */
  case 6: /* 256, 272 or 288 MiB: sizes that recur, whose places a pool over vmm keeps */
    return (256 + (size_t)(value % 3) * 16) * MiB;
  default:
    return (size_t)256 << (value % 11); /* 256 B to 256 KiB, exact powers of two */
  }
}

static size_t pick_alignment(run *r) {
  uint8_t a = next_byte(r);
  return a < 160 ? GPUMEM_DEFAULT_ALIGNMENT : (size_t)1 << (a % 16 + 8); /* up to 4 MiB */
}

/* The block is used on its stream (a simulated kernel writes its first and last bytes), so
 * that the simulation sees a block handed to another stream before that work is done. */
static void touch(const block *b) {
  size_t n = b->bytes < 256 ? b->bytes : 256;
  FUZZ_OK(gpumem_sim_launch(streams[b->stream], (void *)b->start, n, b->value));
  FUZZ_OK(gpumem_sim_launch(streams[b->stream], (void *)(b->start + b->bytes - n), n, b->value));
}

/* The text ends with one line "verdict: WORD: ..." (the report's last newline aside). */
static bool ends_with_verdict(const char *text) {
  size_t length = strlen(text);
  while (length > 0 && text[length - 1] == '\n')
    length--;
  size_t start = length;
  while (start > 0 && text[start - 1] != '\n')
    start--;
  return strncmp(text + start, "verdict: ", 9) == 0;
}

/* The report (for a request of `bytes`) and the JSON stats, each read into a buffer of the
 * size it asks for. */
static void read_reports(const run *r, size_t bytes) {
  for (int which = 0; which < 2; which++) {
    size_t needed = 0;
    gpumem_status status = which ? gpumem_resource_stats_json(r->mr, NULL, 0, &needed)
                                 : gpumem_resource_report(r->mr, bytes, 0, NULL, 0, &needed);
    FUZZ_CHECK(status == GPUMEM_ERR_INVALID_ARGUMENT && needed > 1, "%s: size of a report: %s",
               r->row->spec, gpumem_status_name(status));
    char *text = malloc(needed + 4096);
    FUZZ_CHECK(text != NULL, "out of host memory");
    status = which ? gpumem_resource_stats_json(r->mr, text, needed + 4096, NULL)
                   : gpumem_resource_report(r->mr, bytes, 0, text, needed + 4096, NULL);
    FUZZ_CHECK(status == GPUMEM_OK, "%s: report: %s: %s", r->row->spec, gpumem_status_name(status),
               gpumem_last_error_message());
    FUZZ_CHECK(which ? text[0] == '{' && text[strlen(text) - 1] == '}' : ends_with_verdict(text),
               "%s: a report or stats document is not whole: %s", r->row->spec, text);
    free(text);
  }
}

static bool allowed_failure(const run *r, gpumem_status status) {
  return status == GPUMEM_ERR_OUT_OF_MEMORY ||
         (status == GPUMEM_ERR_INJECTED_FAULT && strstr(r->row->spec, "faulty")) ||
         (r->device_fault && status == GPUMEM_ERR_CUDA);
}

static void op_allocate(run *r) {
  size_t bytes = pick_size(r);
  size_t alignment = pick_alignment(r);
  int stream = next_byte(r) % stream_count;
  if (r->live_count == max_live)
    return;
  figures before = figures_of(r);
  void *ptr = (void *)(uintptr_t)0x5eed;
  gpumem_status status = gpumem_allocate_aligned(r->mr, bytes, alignment, streams[stream], &ptr);
  TRACE("allocate %zu aligned %zu on stream %d: %s %p\n", bytes, alignment, stream,
        gpumem_status_name(status), ptr);
  bool too_large = r->row->largest && bytes > r->row->largest;
  bool over_limit = r->row->limit && r->live_bytes + bytes > r->row->limit;
  bool misaligned = r->row->default_align && alignment > GPUMEM_DEFAULT_ALIGNMENT;
  if (status == GPUMEM_OK && bytes == 0) { /* size 0: NULL, whatever else was asked */
    FUZZ_CHECK(ptr == NULL, "%s: size 0 gave %p", r->row->spec, ptr);
    return;
  }
  if (status == GPUMEM_OK) {
    FUZZ_CHECK(!too_large && !over_limit && !misaligned,
               "%s: %zu bytes aligned to %zu allocated (past its largest, its limit or its "
               "alignments), with %llu bytes live",
               r->row->spec, bytes, alignment, (unsigned long long)r->live_bytes);
    claim(r, ptr, bytes, alignment, stream);
    touch(&r->live[r->live_count - 1]);
    return;
  }
  FUZZ_CHECK(ptr == (void *)(uintptr_t)0x5eed, "%s: a failed allocation wrote %p", r->row->spec,
             ptr);
  FUZZ_CHECK(gpumem_last_error_message()[0] != '\0', "%s: %s with no message", r->row->spec,
             gpumem_status_name(status));
  bool expected = allowed_failure(r, status) || (misaligned && status == GPUMEM_ERR_UNSUPPORTED);
  FUZZ_CHECK(expected, "%s: %zu bytes aligned to %zu on stream %d: %s: %s", r->row->spec, bytes,
             alignment, stream, gpumem_status_name(status), gpumem_last_error_message());
  FUZZ_CHECK(status != GPUMEM_ERR_OUT_OF_MEMORY || ends_with_verdict(gpumem_last_error_message()),
             "%s: out of memory without a verdict: %s", r->row->spec, gpumem_last_error_message());
  figures after = figures_of(r);
  FUZZ_CHECK(before.live_bytes == after.live_bytes && before.live_count == after.live_count,
             "%s: a failed allocation changed the live figures", r->row->spec);
}

/* Frees live block `index` on its stream, or on another one after synchronizing its own (its
 * work is done, so any stream may free it). */
static void op_free(run *r) {
  uint8_t which = next_byte(r), how = next_byte(r);
  if (r->live_count == 0)
    return;
  int index = which % r->live_count;
  block b = r->live[index];
  int stream = b.stream;
  if (how >= 192) {
    gpumem_status synced = gpumem_stream_synchronize(streams[b.stream]);
    FUZZ_CHECK(synced == GPUMEM_OK || r->device_fault, "synchronize: %s",
               gpumem_last_error_message());
    if (synced != GPUMEM_OK)
      return;
    stream = how % stream_count;
  }
  gpumem_status status =
      gpumem_deallocate_aligned(r->mr, (void *)b.start, b.bytes, b.alignment, streams[stream]);
  TRACE("free %p+%zu on stream %d: %s\n", (void *)b.start, b.bytes, stream,
        gpumem_status_name(status));
  if (status == GPUMEM_OK) {
    unclaim(r, index);
    return;
  }
  /* Only a device call made to fail may fail a free, and the block stays live. */
  FUZZ_CHECK(r->device_fault && status != GPUMEM_ERR_MISUSE, "%s: freeing %p+%zu: %s: %s",
             r->row->spec, (void *)b.start, b.bytes, gpumem_status_name(status),
             gpumem_last_error_message());
}

/* A free the resource must refuse, changing nothing. */
static void expect_misuse(run *r, void *ptr, size_t bytes, size_t alignment, int stream,
                          const char *what) {
  figures before = figures_of(r);
  gpumem_status status = gpumem_deallocate_aligned(r->mr, ptr, bytes, alignment, streams[stream]);
  TRACE("misuse: %s %p+%zu on stream %d: %s\n", what, ptr, bytes, stream,
        gpumem_status_name(status));
  r->reports_expected += r->row->tracking != 0; /* reported, then refused by the upstream */
  FUZZ_CHECK(status == GPUMEM_ERR_MISUSE, "%s: %s (%p, %zu bytes): %s, not GPUMEM_ERR_MISUSE",
             r->row->spec, what, ptr, bytes, gpumem_status_name(status));
  FUZZ_CHECK(gpumem_last_error_message()[0] != '\0', "%s: %s: no message", r->row->spec, what);
  figures after = figures_of(r);
  FUZZ_CHECK(memcmp(&before, &after, sizeof before) == 0,
             "%s: %s changed the figures: live %llu -> %llu bytes, %llu -> %llu blocks, "
             "reserved %llu -> %llu",
             r->row->spec, what, (unsigned long long)before.live_bytes,
             (unsigned long long)after.live_bytes, (unsigned long long)before.live_count,
             (unsigned long long)after.live_count, (unsigned long long)before.reserved,
             (unsigned long long)after.reserved);
  check_figures(r);
}

static void op_misuse(run *r) {
  uint8_t kind = next_byte(r), which = next_byte(r);
  uint32_t delta = next_u16(r);
  int stream = next_byte(r) % stream_count;
  const block *b = r->live_count ? &r->live[which % r->live_count] : NULL;
  switch (kind % 6) {
  case 0: /* a live block with a wrong size */
    if (b) {
      size_t wrong = delta % 2 ? b->bytes + delta : b->bytes > delta ? b->bytes - delta : 1;
      if (wrong != b->bytes)
        expect_misuse(r, (void *)b->start, wrong, b->alignment, b->stream, "a wrong size");
    }
    return;
  case 1: { /* a pointer freed before: a double free, unless it was handed out again */
    uintptr_t stale = r->freed[which % max_freed];
    if (stale && find_live_start(r, stale) < 0)
      expect_misuse(r, (void *)stale, delta + 1, GPUMEM_DEFAULT_ALIGNMENT, stream, "a double free");
    return;
  }
  case 2: /* a pointer inside a live block */
    if (b && b->bytes > 1) {
      uintptr_t inside = b->start + 1 + delta % (b->bytes - 1);
      if (find_live_start(r, inside) < 0)
        expect_misuse(r, (void *)inside, b->bytes, b->alignment, b->stream,
                      "a pointer inside a block");
    }
    return;
  case 3: { /* memory of another resource (made without a device call set to fail) */
    if (r->device_fault)
      return;
    /* The device may be full: the resource under test may hold all of it. */
    gpumem_resource *other;
    gpumem_status status =
        gpumem_resource_from_spec(delta % 2 ? "cuda" : "pool(cuda, initial=1)", &other);
    FUZZ_CHECK(status == GPUMEM_OK || status == GPUMEM_ERR_OUT_OF_MEMORY, "%s",
               gpumem_last_error_message());
    if (status != GPUMEM_OK)
      return;
    void *ptr;
    size_t bytes = delta % 8192 + 1;
    status = gpumem_allocate(other, bytes, streams[stream], &ptr);
    FUZZ_CHECK(status == GPUMEM_OK || status == GPUMEM_ERR_OUT_OF_MEMORY, "%s",
               gpumem_last_error_message());
    if (status == GPUMEM_OK) {
      expect_misuse(r, ptr, bytes, GPUMEM_DEFAULT_ALIGNMENT, stream, "another resource's pointer");
      FUZZ_OK(gpumem_deallocate(other, ptr, bytes, streams[stream]));
    }
    FUZZ_OK(gpumem_resource_release(other));
    return;
  }
  case 4: /* the last release while blocks are live: refused, the resource stays usable */
    if (b) {
      figures before = figures_of(r);
      gpumem_status status = gpumem_resource_release(r->mr);
      TRACE("release with %d live blocks: %s\n", r->live_count, gpumem_status_name(status));
      FUZZ_CHECK(status == GPUMEM_ERR_MISUSE, "%s: release with %d live blocks: %s", r->row->spec,
                 r->live_count, gpumem_status_name(status));
      figures after = figures_of(r);
      FUZZ_CHECK(memcmp(&before, &after, sizeof before) == 0,
                 "%s: a refused release changed the figures", r->row->spec);
    }
    return;
  default: { /* host memory */
    size_t bytes = delta % 4096 + 1;
    void *host = aligned_alloc(GPUMEM_DEFAULT_ALIGNMENT, 4096);
    FUZZ_CHECK(host != NULL, "no host memory");
    expect_misuse(r, host, bytes, GPUMEM_DEFAULT_ALIGNMENT, stream, "a host pointer");
    free(host);
    return;
  }
  }
}

static void op_trim(run *r) {
  figures before = figures_of(r);
  size_t released = 0;
  gpumem_status status = gpumem_resource_trim(r->mr, &released);
  TRACE("trim: %s, %zu bytes released\n", gpumem_status_name(status), released);
  FUZZ_CHECK(status == GPUMEM_OK || status == GPUMEM_ERR_UNSUPPORTED ||
                 (r->device_fault && status != GPUMEM_ERR_MISUSE),
             "%s: trim: %s: %s", r->row->spec, gpumem_status_name(status),
             gpumem_last_error_message());
  figures after = figures_of(r);
  FUZZ_CHECK(before.live_bytes == after.live_bytes && before.live_count == after.live_count,
             "%s: trim changed the live figures", r->row->spec);
  FUZZ_CHECK(status != GPUMEM_OK || after.reserved <= before.reserved,
             "%s: trim released %zu bytes and reserved grew from %llu to %llu", r->row->spec,
             released, (unsigned long long)before.reserved, (unsigned long long)after.reserved);
  read_reports(r, released + 1);
}

/* Synchronizes a stream, or lets the simulation run one stream's work or everyone's. */
static void op_streams(run *r) {
  uint8_t what = next_byte(r);
  gpumem_stream stream = streams[what % stream_count];
  gpumem_status status;
  switch (what / stream_count % 3) {
  case 0:
    status = gpumem_stream_synchronize(stream);
    break;
  case 1:
    status = gpumem_sim_complete(stream);
    break;
  default:
    status = gpumem_sim_complete_all();
    break;
  }
  TRACE("streams %d: %s\n", what, gpumem_status_name(status));
  FUZZ_CHECK(status == GPUMEM_OK || r->device_fault, "%s: %s", gpumem_status_name(status),
             gpumem_last_error_message());
}

/* A live block still holds what its stream wrote: no other block shares its memory (two
 * addresses over one physical page, a piece unmapped under it). Over a statistics adaptor,
 * one verify in two pushes or pops its counters instead. */
static void op_verify(run *r) {
  uint8_t which = next_byte(r);
  if (op_statistics(r, which))
    return;
  if (r->live_count == 0 || r->device_fault)
    return;
  const block *b = &r->live[which % r->live_count];
  uint8_t first = 0, last = 0;
  gpumem_stream stream = streams[b->stream];
  FUZZ_OK(gpumem_memcpy_async(&first, (void *)b->start, 1, stream));
  FUZZ_OK(gpumem_memcpy_async(&last, (void *)(b->start + b->bytes - 1), 1, stream));
  FUZZ_OK(gpumem_stream_synchronize(stream));
  FUZZ_CHECK(first == b->value && last == b->value,
             "%s: block %p+%zu holds %d at its start and %d at its end, not %d", r->row->spec,
             (void *)b->start, b->bytes, first, last, b->value);
}

static void op_any(run *r, uint8_t opcode);

/* An operation during which the Nth next device call of a kind fails. */
static void op_device_fault(run *r) {
  gpumem_sim_call kind = faultable[next_byte(r) % FAULTABLE_COUNT];
  uint64_t nth = next_byte(r) % 4 + 1;
  uint8_t inner = next_byte(r);
  FUZZ_OK(gpumem_sim_fail_call(kind, nth));
  TRACE("device call %d fails at the %llu-th next call during:\n", (int)kind,
        (unsigned long long)nth);
  r->device_fault = true;
  op_any(r, inner);
  r->device_fault = false;
  FUZZ_OK(gpumem_sim_fail_call(kind, 0));
}

static void op_any(run *r, uint8_t opcode) {
  switch (opcode % 13) {
  case 0:
  case 1:
  case 2:
  case 3:
    op_allocate(r);
    break;
  case 4:
  case 5:
  case 6:
    op_free(r);
    break;
  case 7:
    op_misuse(r);
    break;
  case 8:
    op_trim(r);
    break;
  case 9:
    op_streams(r);
    break;
  case 10:
  case 11:
    if (!r->device_fault)
      op_device_fault(r);
    break;
  default:
    if (r->row->tracking && opcode % 2)
      check_tracking_list(r);
    else
      op_verify(r);
    break;
  }
  check_figures(r);
}

static void count_report(const char *text, void *user) {
  run *r = user;
  r->reports++;
  TRACE("report: %s", text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  init_once();
  static run r;
  memset(&r, 0, sizeof r);
  r.data = data;
  r.size = size;
  r.row = &resources[next_byte(&r) % RESOURCE_COUNT];
  gpumem_resource *pool_owner = NULL;
  if (strstr(r.row->spec, "%llu")) {
    void *pool;
    char spec[96];
    FUZZ_OK(gpumem_async_create(0, NULL, &pool_owner));
    FUZZ_OK(gpumem_async_pool_handle(pool_owner, &pool));
    snprintf(spec, sizeof spec, r.row->spec, (unsigned long long)(uintptr_t)pool);
    FUZZ_OK(gpumem_resource_from_spec(spec, &r.mr));
  } else {
    FUZZ_OK(make_resource(r.row->spec, &r.mr)); /* a spec, or a name of forwarding.h */
  }
  if (strstr(r.row->spec, "log("))
    remove_log();
  if (r.row->tracking) {
    gpumem_tracking_options opts = {
        .capture_stacks = r.row->tracking == 2, .report = count_report, .user = &r};
    gpumem_resource *inner = r.mr;
    FUZZ_OK(gpumem_tracking_create(inner, &opts, &r.mr));
    FUZZ_OK(gpumem_resource_release(inner));
  }
  TRACE("resource %s%s\n", r.row->tracking ? "tracking over " : "", r.row->spec);
  for (int ops = 0; ops < max_ops && r.pos < r.size; ops++)
    op_any(&r, next_byte(&r));
  /* Everything freed on its stream; then the resource is empty and goes. */
  while (r.live_count > 0) {
    block *b = &r.live[r.live_count - 1];
    FUZZ_OK(gpumem_deallocate_aligned(r.mr, (void *)b->start, b->bytes, b->alignment,
                                      streams[b->stream]));
    unclaim(&r, r.live_count - 1);
  }
  check_figures(&r);
  gpumem_status status = gpumem_resource_trim(r.mr, NULL);
  FUZZ_CHECK(status == GPUMEM_OK || status == GPUMEM_ERR_UNSUPPORTED, "%s: final trim: %s: %s",
             r.row->spec, gpumem_status_name(status), gpumem_last_error_message());
  FUZZ_OK(gpumem_resource_release(r.mr));
  FUZZ_OK(gpumem_resource_release(pool_owner)); /* its pool goes with it */
  fuzz_check_device_idle();
  return 0;
}
