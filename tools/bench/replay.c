/* replay.c: replays allocation traces in RMM's log format, threads and streams as
 * recorded.
 *
 * A trace is CSV with the header Thread,Time,Action,Pointer,Size,Stream; Action is
 * "allocate", "free" or "allocate failure" (skipped, as RMM's replay does), Pointer is hex
 * with 0x ("(nil)" for none), Size is decimal bytes, Thread a decimal id and Stream a hex
 * handle. Zero bytes are skipped (a log whose process was killed ends in them). It is parsed
 * once into an operation sequence before any timing: each allocation gets its own slot of
 * the pointer table, and a free refers to the most recent live allocation with its trace
 * pointer (a hash map from trace pointers to slots, used only while building). Each distinct
 * thread and stream of the trace gets an index; replay_run.c runs the sequence with a
 * thread per recorded thread and a stream per recorded stream (the first of them the
 * stream every trace of one stream runs on).
 *
 * For each allocator: a cold pass on a fresh allocator (timed), then --repeat warm passes on
 * the same allocator (timed), each ending by freeing what the trace left live. Peak reserved
 * bytes, after the cold pass and after them all, come from the allocator's own peak when it
 * keeps one, else from as many untimed passes on a fresh allocator that read its reserved
 * bytes after every allocation. Peak live bytes are the trace's own high-water mark of
 * requested bytes. */
#include "bench/bench.h"

#include <gpumem/sim.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- trace pointer -> slot, open addressing; built before timing ---- */

typedef struct pointer_entry {
  uint64_t trace_ptr;
  uint32_t slot;
  bool used; /* trace pointer 0x0 is a real key (empty allocations), so no sentinel key */
  bool live;
} pointer_entry;

typedef struct pointer_map {
  pointer_entry *entries;
  size_t mask;    /* capacity - 1, capacity a power of two */
  unsigned shift; /* 64 - log2(capacity): the hash takes the product's top bits */
} pointer_map;

static void out_of_host_memory(void) {
  fprintf(stderr, "gpumem-bench: out of host memory reading a trace\n");
  exit(EXIT_FAILURE);
}

static void pointer_map_init(pointer_map *map, size_t expected) {
  size_t capacity = 64;
  map->shift = 64 - 6;
  while (capacity < expected * 2) {
    capacity *= 2;
    map->shift--;
  }
  map->entries = calloc(capacity, sizeof *map->entries);
  map->mask = capacity - 1;
  if (!map->entries)
    out_of_host_memory();
}

/* The entry for a trace pointer, claimed if it was not there. Device pointers are aligned,
 * so their low bits carry nothing: a multiplicative (Fibonacci) hash mixes every bit into
 * the top of the product, which is what it keeps. */
static pointer_entry *pointer_map_find(pointer_map *map, uint64_t trace_ptr) {
  size_t i = (size_t)((trace_ptr * 0x9E3779B97F4A7C15u) >> map->shift);
  while (map->entries[i].used && map->entries[i].trace_ptr != trace_ptr)
    i = (i + 1) & map->mask;
  map->entries[i].used = true;
  map->entries[i].trace_ptr = trace_ptr;
  return &map->entries[i];
}

/* ---- parsing ---- */

typedef struct trace_counts {
  size_t lines;
  size_t unknown_frees; /* frees of pointers with no live allocation in the trace */
  size_t other_actions; /* e.g. RMM's "allocate failure" lines */
} trace_counts;

typedef struct trace_builder {
  bench_trace *trace;
  bench_sequence *seq;
  pointer_map map;
  pointer_map threads, streams; /* recorded id -> index (in `slot`) */
  size_t *slot_bytes;           /* the size each allocation asked for */
  uint16_t *slot_stream;        /* the stream each allocation was made on */
  uint64_t live_bytes;
  trace_counts counts;
} trace_builder;

static char *read_whole_file(const char *path, size_t *length) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "gpumem-bench: cannot open trace '%s'\n", path);
    exit(EXIT_FAILURE);
  }
  size_t capacity = 1 << 20, used = 0, got;
  char *text = malloc(capacity + 1);
  while (text && (got = fread(text + used, 1, capacity - used, f)) > 0) {
    used += got;
    if (used == capacity && !(text = realloc(text, (capacity *= 2) + 1)))
      break;
  }
  fclose(f);
  if (!text)
    out_of_host_memory();
  text[used] = '\0';
  *length = used;
  return text;
}

static size_t count_lines(const char *text, size_t length) {
  size_t lines = 1;
  for (const char *p = text; (p = memchr(p, '\n', length - (size_t)(p - text))) != NULL; p++)
    lines++;
  return lines;
}

/* Splits one CSV line (NUL-terminated, modified in place) into at most `max` fields. */
static size_t split_fields(char *line, char **fields, size_t max) {
  size_t count = 0;
  for (char *p = line; count < max;) {
    fields[count++] = p;
    p = strchr(p, ',');
    if (!p)
      break;
    *p++ = '\0';
  }
  return count;
}

/* The index of a recorded thread or stream, given in order of first appearance. */
static uint16_t index_of(pointer_map *map, uint64_t id, size_t *count, size_t most,
                         const char *what, const char *path, size_t line) {
  pointer_entry *entry = pointer_map_find(map, id);
  if (!entry->live) {
    if (*count == most) {
      fprintf(stderr, "gpumem-bench: %s:%zu: more than %zu %s\n", path, line, most, what);
      exit(EXIT_FAILURE);
    }
    entry->live = true;
    entry->slot = (uint32_t)(*count)++;
  }
  return (uint16_t)entry->slot;
}

static void add_op(trace_builder *b, bench_op op, uint16_t thread, uint16_t stream) {
  b->trace->op_thread[b->seq->count] = thread;
  b->trace->op_stream[b->seq->count] = stream;
  b->seq->ops[b->seq->count++] = op;
}

static void add_allocation(trace_builder *b, uint64_t trace_ptr, size_t bytes, uint16_t thread,
                           uint16_t stream) {
  bench_sequence *seq = b->seq;
  uint32_t slot = (uint32_t)seq->slot_count++;
  pointer_entry *entry = pointer_map_find(&b->map, trace_ptr);
  entry->slot = slot;
  entry->live = true;
  b->slot_bytes[slot] = bytes;
  b->slot_stream[slot] = stream;
  add_op(b, (bench_op){.bytes = bytes, .slot = slot, .is_free = 0}, thread, stream);
  b->live_bytes += bytes;
  if (b->live_bytes > seq->peak_live_bytes)
    seq->peak_live_bytes = b->live_bytes;
}

/* The free takes the size its allocation asked for: gpumem checks it, and the trace's own
 * figure is the same in RMM's logs. */
static void add_free(trace_builder *b, uint64_t trace_ptr, uint16_t thread, uint16_t stream) {
  pointer_entry *entry = pointer_map_find(&b->map, trace_ptr);
  if (!entry->live) {
    b->counts.unknown_frees++;
    return;
  }
  entry->live = false;
  size_t bytes = b->slot_bytes[entry->slot];
  add_op(b, (bench_op){.bytes = bytes, .slot = entry->slot, .is_free = 1}, thread, stream);
  b->live_bytes -= bytes;
}

static void bad_line(const char *path, size_t line, const char *why) {
  fprintf(stderr, "gpumem-bench: %s:%zu: %s (expected Thread,Time,Action,Pointer,Size,Stream)\n",
          path, line, why);
  exit(EXIT_FAILURE);
}

/* A hexadecimal or decimal field ("(nil)" is a null pointer); false when it is not one. */
static bool read_number(const char *field, int base, uint64_t *value) {
  char *end;
  if (strcmp(field, "(nil)") == 0) {
    *value = 0;
    return true;
  }
  *value = strtoull(field, &end, base);
  return end != field;
}

static void add_line(trace_builder *b, const char *path, size_t number, char *line) {
  char *fields[6];
  size_t count = split_fields(line, fields, 6);
  if (count < 5)
    bad_line(path, number, "too few fields");
  bool allocate = strcmp(fields[2], "allocate") == 0, free = strcmp(fields[2], "free") == 0;
  if (!allocate && !free) {
    b->counts.other_actions++;
    return;
  }
  uint64_t trace_ptr, bytes, thread_id, stream_id = 0;
  if (!read_number(fields[3], 16, &trace_ptr))
    bad_line(path, number, "bad pointer");
  if (!read_number(fields[4], 10, &bytes))
    bad_line(path, number, "bad size");
  if (!read_number(fields[0], 10, &thread_id))
    bad_line(path, number, "bad thread");
  if (count > 5 && !read_number(fields[5], 16, &stream_id))
    bad_line(path, number, "bad stream");
  uint16_t thread = index_of(&b->threads, thread_id, &b->trace->thread_count,
                             BENCH_TRACE_MAX_THREADS, "threads", path, number);
  uint16_t stream = index_of(&b->streams, stream_id, &b->trace->stream_count,
                             BENCH_TRACE_MAX_STREAMS, "streams", path, number);
  if (free)
    add_free(b, trace_ptr, thread, stream);
  else
    add_allocation(b, trace_ptr, (size_t)bytes, thread, stream);
}

static void collect_leftovers(trace_builder *b) {
  bench_sequence *seq = b->seq;
  seq->leftovers = malloc((seq->slot_count + 1) * sizeof *seq->leftovers);
  if (!seq->leftovers)
    out_of_host_memory();
  b->trace->leftover_stream = malloc((seq->slot_count + 1) * sizeof *b->trace->leftover_stream);
  if (!b->trace->leftover_stream)
    out_of_host_memory();
  for (size_t i = 0; i <= b->map.mask; i++) {
    const pointer_entry *entry = &b->map.entries[i];
    if (entry->used && entry->live) {
      b->trace->leftover_stream[seq->leftover_count] = b->slot_stream[entry->slot];
      seq->leftovers[seq->leftover_count++] =
          (bench_op){.bytes = b->slot_bytes[entry->slot], .slot = entry->slot, .is_free = 1};
    }
  }
}

/* One thread or one stream needs no index per op. */
static void drop_single_indices(bench_trace *trace) {
  if (trace->thread_count <= 1) {
    free(trace->op_thread);
    trace->op_thread = NULL;
  }
  if (trace->stream_count <= 1) {
    free(trace->op_stream);
    free(trace->leftover_stream);
    trace->op_stream = trace->leftover_stream = NULL;
  }
  if (trace->stream_count == 0)
    trace->stream_count = 1;
  if (trace->thread_count == 0)
    trace->thread_count = 1;
}

/* Removes the zero bytes a killed process leaves in its log (at its end, and where a line
 * was being copied when it died); returns the new length. */
static size_t drop_zero_bytes(char *text, size_t length) {
  char *out = memchr(text, '\0', length);
  if (!out)
    return length;
  for (const char *in = out; in < text + length; in++)
    if (*in)
      *out++ = *in;
  *out = '\0';
  return (size_t)(out - text);
}

static void parse_lines(trace_builder *b, const char *path, char *text) {
  size_t number = 0;
  for (char *line = text; line && *line;) {
    char *next = strchr(line, '\n');
    if (next)
      *next++ = '\0';
    size_t length = strlen(line);
    if (length > 0 && line[length - 1] == '\r')
      line[--length] = '\0';
    number++;
    if (number == 1 && strncmp(line, "Thread,", 7) != 0)
      bad_line(path, number, "no RMM log header");
    if (number > 1 && length > 0)
      add_line(b, path, number, line);
    line = next;
  }
}

static void read_trace(const char *path, bench_trace *trace, trace_counts *counts) {
  size_t length;
  char *text = read_whole_file(path, &length);
  length = drop_zero_bytes(text, length);
  size_t lines = count_lines(text, length);
  *trace = (bench_trace){0};
  trace_builder b = {.trace = trace, .seq = &trace->seq};
  trace->seq.ops = malloc(lines * sizeof *trace->seq.ops);
  trace->op_thread = malloc(lines * sizeof *trace->op_thread);
  trace->op_stream = malloc(lines * sizeof *trace->op_stream);
  b.slot_bytes = malloc(lines * sizeof *b.slot_bytes);
  b.slot_stream = malloc(lines * sizeof *b.slot_stream);
  if (!trace->seq.ops || !trace->op_thread || !trace->op_stream || !b.slot_bytes || !b.slot_stream)
    out_of_host_memory();
  pointer_map_init(&b.map, lines);
  pointer_map_init(&b.threads, BENCH_TRACE_MAX_THREADS);
  pointer_map_init(&b.streams, BENCH_TRACE_MAX_STREAMS);
  parse_lines(&b, path, text);
  collect_leftovers(&b);
  drop_single_indices(trace);
  free(b.map.entries);
  free(b.threads.entries);
  free(b.streams.entries);
  free(b.slot_bytes);
  free(b.slot_stream);
  free(text);
  *counts = b.counts;
}

static void trace_free(bench_trace *trace) {
  bench_sequence_free(&trace->seq);
  free(trace->op_thread);
  free(trace->op_stream);
  free(trace->leftover_stream);
}

/* ---- replaying ---- */

/* As many more passes as the timed ones (`passes`) on a fresh allocator, reading its reserved
 * bytes after every allocation: the peak after the first (*cold) and after them all (*all). */
static void replay_tracking_reserved(const bench_context *ctx, const char *label, const char *name,
                                     const bench_trace *trace, void **slots, gpumem_stream *streams,
                                     int passes, uint64_t *cold, uint64_t *all) {
  bench_allocator *alloc = bench_open_or_die(label, ctx->device);
  bench_failure failure = {0};
  uint64_t peak = 0;
  for (int pass = 0; pass < passes; pass++) {
    if (bench_replay_pass(alloc, trace, streams, slots, "pass measuring reserved bytes", &peak,
                          NULL, &failure, name))
      bench_die_failure("replay", label, name, &failure);
    if (pass == 0)
      *cold = peak;
  }
  *all = peak;
  bench_close_or_die(alloc);
}

/* `count` warm passes, with the host read before and after each, as
 * bench_run_passes does for a sequence. */
static void replay_warm_passes(bench_allocator *alloc, const bench_trace *trace,
                               gpumem_stream *streams, void **slots, int count, const char *name,
                               bench_pass_times *times) {
  uint64_t elapsed[BENCH_MAX_REPEAT];
  bench_host_reading host[BENCH_MAX_REPEAT];
  for (int i = 0; i < count; i++) {
    bench_failure failure = {0};
    bench_host_reading before = bench_read_host();
    if (bench_replay_pass(alloc, trace, streams, slots, "warm pass", NULL, &elapsed[i], &failure,
                          name))
      bench_die_failure("replay", alloc->label, name, &failure);
    host[i] = bench_host_across(before);
  }
  *times = bench_pass_times_beside(elapsed, host, count);
}

static const gpumem_sim_call sim_call_kinds[BENCH_SIM_CALL_KINDS] = {
    GPUMEM_SIM_CALL_EVENT_RECORD, GPUMEM_SIM_CALL_EVENT_QUERY, GPUMEM_SIM_CALL_STREAM_WAIT,
    GPUMEM_SIM_CALL_SYNCHRONIZE};

static void count_sim_calls(uint64_t *counts) {
  for (int i = 0; i < BENCH_SIM_CALL_KINDS; i++)
    counts[i] = gpumem_sim_call_count(sim_call_kinds[i]);
}

static void replay_one(const bench_context *ctx, const char *label, const char *name,
                       const bench_trace *trace, void **slots, gpumem_stream *streams) {
  bench_allocator *alloc = bench_open_or_die(label, ctx->device);
  bench_failure failure = {0};
  uint64_t cold_ns = 0, peak_reserved = 0;
  bench_pass_times warm;
  if (bench_replay_pass(alloc, trace, streams, slots, "cold pass", NULL, &cold_ns, &failure, name))
    bench_die_failure("replay", label, name, &failure);
  bool peak_known = alloc->peak_reserved(alloc, &peak_reserved) == GPUMEM_OK;
  bool alloc_has_reserved = alloc->reserved != NULL;
  /* On the simulated device, the calls that order streams: a seal's event record costs a
   * GPU about 300 ns (docs/gpu-runs.md, forty-fourth session), which a replay's time shows
   * only there. The synchronizations at each pass's end (one a stream) are not the
   * allocator's. */
  bool on_sim = strcmp(ctx->backend, "sim") == 0;
  uint64_t calls_before[BENCH_SIM_CALL_KINDS] = {0}, calls_after[BENCH_SIM_CALL_KINDS] = {0};
  if (on_sim)
    count_sim_calls(calls_before);
  replay_warm_passes(alloc, trace, streams, slots, ctx->repeat, name, &warm);
  if (on_sim)
    count_sim_calls(calls_after);
  /* After the last pass, which freed what the trace left live: peaks and held memory. */
  uint64_t peak_reserved_warm = peak_reserved;
  if (peak_known && alloc->peak_reserved(alloc, &peak_reserved_warm) != GPUMEM_OK)
    bench_die(GPUMEM_ERR_INTERNAL, "reading the peak reserved bytes after the warm passes");
  char *stats = ctx->stats ? bench_stats_json(alloc) : NULL;
  bench_close_or_die(alloc);
  const bench_sequence *seq = &trace->seq;
  /* An allocator with no reserved figure holds exactly what is live: its peak is the
   * trace's own, with no pass to count it. */
  if (!peak_known && alloc_has_reserved)
    replay_tracking_reserved(ctx, label, name, trace, slots, streams, 1 + ctx->repeat,
                             &peak_reserved, &peak_reserved_warm);
  else if (!peak_known)
    peak_reserved = peak_reserved_warm = seq->peak_live_bytes;
  bench_result result = {.kind = BENCH_REPLAY,
                         .resource = label,
                         .workload = name,
                         .threads = (int)trace->thread_count,
                         .streams = (int)trace->stream_count,
                         .ops = seq->count,
                         .ns = (double)cold_ns / (double)seq->count,
                         .ns_warm = warm.median_ns / (double)seq->count,
                         .repeats = ctx->repeat,
                         .ns_min = warm.min_ns / (double)seq->count,
                         .ns_max = warm.max_ns / (double)seq->count,
                         .clock_ghz = warm.clock_ghz,
                         .adds_per_cycle = warm.adds_per_cycle,
                         .cycles = warm.median_cycles / (double)seq->count,
                         .peak_live_bytes = seq->peak_live_bytes,
                         .peak_reserved_bytes = peak_reserved,
                         .peak_reserved_bytes_warm = peak_reserved_warm,
                         .peak_reserved_from = peak_known ? "query" : "replay",
                         .has_sim_calls = on_sim};
  double warm_events = (double)seq->count * (double)ctx->repeat;
  uint64_t passes_own = trace->stream_count * (uint64_t)ctx->repeat;
  for (int i = 0; on_sim && i < BENCH_SIM_CALL_KINDS; i++) {
    uint64_t calls = calls_after[i] - calls_before[i];
    if (sim_call_kinds[i] == GPUMEM_SIM_CALL_SYNCHRONIZE)
      calls = calls > passes_own ? calls - passes_own : 0;
    result.sim_calls[i] = (double)calls / warm_events;
  }
  bench_report(ctx, &result);
  if (stats)
    bench_report_stats(label, name, stats);
  free(stats);
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static void warn_about_skipped(const char *path, const trace_counts *counts) {
  if (counts->unknown_frees > 0)
    fprintf(stderr, "gpumem-bench: %s: skipped %zu frees of pointers the trace never allocated\n",
            path, counts->unknown_frees);
  if (counts->other_actions > 0)
    fprintf(stderr,
            "gpumem-bench: %s: skipped %zu lines that are neither allocate nor free (as "
            "RMM's replay skips failed allocations)\n",
            path, counts->other_actions);
}

/* The trace's streams: the one every trace's first stream is, and as many more as it has. */
static gpumem_stream *open_streams(const bench_context *ctx, gpumem_stream first, size_t count) {
  gpumem_stream *streams = calloc(count, sizeof *streams);
  if (!streams)
    out_of_host_memory();
  streams[0] = first;
  for (size_t i = 1; i < count; i++) {
    gpumem_status status = gpumem_stream_create(ctx->device, &streams[i]);
    if (status != GPUMEM_OK)
      bench_die(status, "creating the streams of a trace");
  }
  return streams;
}

static void replay_trace(const bench_context *ctx, const char *path, gpumem_stream stream) {
  bench_trace trace;
  trace_counts counts;
  read_trace(path, &trace, &counts);
  warn_about_skipped(path, &counts);
  if (trace.seq.count == 0) {
    fprintf(stderr, "gpumem-bench: %s: no events to replay\n", path);
    exit(EXIT_FAILURE);
  }
  void **slots = calloc(trace.seq.slot_count + 1, sizeof *slots);
  if (!slots)
    out_of_host_memory();
  gpumem_stream *streams = open_streams(ctx, stream, trace.stream_count);
  for (size_t i = 0; i < ctx->label_count; i++)
    replay_one(ctx, ctx->labels[i], base_name(path), &trace, slots, streams);
  for (size_t i = 1; i < trace.stream_count; i++)
    gpumem_stream_destroy(streams[i]);
  free(streams);
  free(slots);
  trace_free(&trace);
}

void bench_replay(const bench_context *ctx, char **traces, size_t trace_count) {
  gpumem_stream stream;
  gpumem_status status = gpumem_stream_create(ctx->device, &stream);
  if (status != GPUMEM_OK)
    bench_die(status, "creating a stream");
  for (size_t i = 0; i < trace_count; i++)
    replay_trace(ctx, traces[i], stream);
  gpumem_stream_destroy(stream);
}
