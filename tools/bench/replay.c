/* replay.c: replays allocation traces in RMM's log format on one stream.
 *
 * A trace is CSV with the header Thread,Time,Action,Pointer,Size,Stream; Action is
 * "allocate" or "free", Pointer is hex with 0x, Size is decimal bytes. It is parsed once
 * into an operation sequence before any timing: each allocation gets its own slot of the
 * pointer table, and a free refers to the most recent live allocation with its trace
 * pointer (a hash map from trace pointers to slots, used only while building). The stream
 * column is ignored: every event runs on one stream.
 *
 * For each allocator: a cold pass on a fresh allocator (timed), then a warm pass on the same
 * allocator (timed), each ending by freeing what the trace left live. Peak reserved bytes
 * come from the allocator's own peak when it keeps one, else from one more, untimed pass on
 * a fresh allocator that reads its reserved bytes after every allocation. Peak live bytes
 * are the trace's own high-water mark of requested bytes. */
#include "bench/bench.h"

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
  bench_sequence *seq;
  pointer_map map;
  size_t *slot_bytes; /* the size each allocation asked for */
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

static void add_allocation(trace_builder *b, uint64_t trace_ptr, size_t bytes) {
  bench_sequence *seq = b->seq;
  uint32_t slot = (uint32_t)seq->slot_count++;
  pointer_entry *entry = pointer_map_find(&b->map, trace_ptr);
  entry->slot = slot;
  entry->live = true;
  b->slot_bytes[slot] = bytes;
  seq->ops[seq->count++] = (bench_op){.bytes = bytes, .slot = slot, .is_free = 0};
  b->live_bytes += bytes;
  if (b->live_bytes > seq->peak_live_bytes)
    seq->peak_live_bytes = b->live_bytes;
}

/* The free takes the size its allocation asked for: gpumem checks it, and the trace's own
 * figure is the same in RMM's logs. */
static void add_free(trace_builder *b, uint64_t trace_ptr) {
  pointer_entry *entry = pointer_map_find(&b->map, trace_ptr);
  if (!entry->live) {
    b->counts.unknown_frees++;
    return;
  }
  entry->live = false;
  size_t bytes = b->slot_bytes[entry->slot];
  b->seq->ops[b->seq->count++] = (bench_op){.bytes = bytes, .slot = entry->slot, .is_free = 1};
  b->live_bytes -= bytes;
}

static void bad_line(const char *path, size_t line, const char *why) {
  fprintf(stderr, "gpumem-bench: %s:%zu: %s (expected Thread,Time,Action,Pointer,Size,Stream)\n",
          path, line, why);
  exit(EXIT_FAILURE);
}

static void add_line(trace_builder *b, const char *path, size_t number, char *line) {
  char *fields[6], *end;
  if (split_fields(line, fields, 6) < 5)
    bad_line(path, number, "too few fields");
  uint64_t trace_ptr = strtoull(fields[3], &end, 16);
  if (end == fields[3])
    bad_line(path, number, "bad pointer");
  if (strcmp(fields[2], "free") == 0) {
    add_free(b, trace_ptr);
    return;
  }
  if (strcmp(fields[2], "allocate") != 0) {
    b->counts.other_actions++;
    return;
  }
  unsigned long long bytes = strtoull(fields[4], &end, 10);
  if (end == fields[4])
    bad_line(path, number, "bad size");
  add_allocation(b, trace_ptr, (size_t)bytes);
}

static void collect_leftovers(trace_builder *b) {
  bench_sequence *seq = b->seq;
  seq->leftovers = malloc((seq->slot_count + 1) * sizeof *seq->leftovers);
  if (!seq->leftovers)
    out_of_host_memory();
  for (size_t i = 0; i <= b->map.mask; i++) {
    const pointer_entry *entry = &b->map.entries[i];
    if (entry->used && entry->live)
      seq->leftovers[seq->leftover_count++] =
          (bench_op){.bytes = b->slot_bytes[entry->slot], .slot = entry->slot, .is_free = 1};
  }
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

static void read_trace(const char *path, bench_sequence *seq, trace_counts *counts) {
  size_t length;
  char *text = read_whole_file(path, &length);
  size_t lines = count_lines(text, length);
  trace_builder b = {.seq = seq};
  *seq = (bench_sequence){0};
  seq->ops = malloc(lines * sizeof *seq->ops);
  b.slot_bytes = malloc(lines * sizeof *b.slot_bytes);
  if (!seq->ops || !b.slot_bytes)
    out_of_host_memory();
  pointer_map_init(&b.map, lines);
  parse_lines(&b, path, text);
  collect_leftovers(&b);
  free(b.map.entries);
  free(b.slot_bytes);
  free(text);
  *counts = b.counts;
}

/* ---- replaying ---- */

/* One more pass on a fresh allocator, reading its reserved bytes after every allocation. */
static uint64_t replay_tracking_reserved(const bench_context *ctx, const char *label,
                                         const char *trace, const bench_sequence *seq, void **slots,
                                         gpumem_stream stream) {
  bench_allocator *alloc = bench_open_or_die(label, ctx->device);
  bench_failure failure = {.phase = "pass measuring reserved bytes"};
  uint64_t peak = 0;
  if (bench_run_ops_tracking_reserved(alloc, stream, seq->ops, seq->count, slots, &peak,
                                      &failure) ||
      bench_finish_pass(alloc, stream, seq, slots, &failure))
    bench_die_failure("replay", label, trace, &failure);
  bench_close_or_die(alloc);
  return peak;
}

static void replay_one(const bench_context *ctx, const char *label, const char *trace,
                       const bench_sequence *seq, void **slots, gpumem_stream stream) {
  bench_allocator *alloc = bench_open_or_die(label, ctx->device);
  bench_failure failure;
  uint64_t cold_ns, peak_reserved = 0;
  bench_pass_times warm;
  if (bench_run_pass(alloc, stream, seq, slots, "cold pass", &cold_ns, &failure))
    bench_die_failure("replay", label, trace, &failure);
  bool peak_known = alloc->peak_reserved(alloc, &peak_reserved) == GPUMEM_OK;
  bool alloc_has_reserved = alloc->reserved != NULL;
  if (bench_run_passes(alloc, stream, seq, slots, "warm pass", ctx->repeat, &warm, &failure))
    bench_die_failure("replay", label, trace, &failure);
  /* After the last pass, which freed what the trace left live: peaks and held memory. */
  char *stats = ctx->stats ? bench_stats_json(alloc) : NULL;
  bench_close_or_die(alloc);
  /* An allocator with no reserved figure holds exactly what is live: its peak is the
   * trace's own, with no pass to count it. */
  if (!peak_known)
    peak_reserved = alloc_has_reserved
                        ? replay_tracking_reserved(ctx, label, trace, seq, slots, stream)
                        : seq->peak_live_bytes;
  bench_result result = {.kind = BENCH_REPLAY,
                         .resource = label,
                         .workload = trace,
                         .threads = 1,
                         .ops = seq->count,
                         .ns = (double)cold_ns / (double)seq->count,
                         .ns_warm = warm.median_ns / (double)seq->count,
                         .repeats = ctx->repeat,
                         .ns_min = warm.min_ns / (double)seq->count,
                         .ns_max = warm.max_ns / (double)seq->count,
                         .clock_ghz = warm.clock_ghz,
                         .cycles = warm.median_cycles / (double)seq->count,
                         .peak_live_bytes = seq->peak_live_bytes,
                         .peak_reserved_bytes = peak_reserved,
                         .peak_reserved_from = peak_known ? "query" : "replay"};
  bench_report(ctx, &result);
  if (stats)
    bench_report_stats(label, trace, stats);
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
    fprintf(stderr, "gpumem-bench: %s: skipped %zu lines that are neither allocate nor free\n",
            path, counts->other_actions);
}

static void replay_trace(const bench_context *ctx, const char *path, gpumem_stream stream) {
  bench_sequence seq;
  trace_counts counts;
  read_trace(path, &seq, &counts);
  warn_about_skipped(path, &counts);
  if (seq.count == 0) {
    fprintf(stderr, "gpumem-bench: %s: no events to replay\n", path);
    exit(EXIT_FAILURE);
  }
  void **slots = calloc(seq.slot_count + 1, sizeof *slots);
  if (!slots)
    out_of_host_memory();
  for (size_t i = 0; i < ctx->label_count; i++)
    replay_one(ctx, ctx->labels[i], base_name(path), &seq, slots, stream);
  free(slots);
  bench_sequence_free(&seq);
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
