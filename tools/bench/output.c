/* output.c: how gpumem-bench reports: one JSON object per line on stdout, an optional table
 * for people, and error messages on stderr.
 *
 * Results are compared only within a group (the same benchmark, workload or trace, and
 * thread count). A speedup over a reference is the reference's time per operation over
 * this allocator's (equally, this one's Mops over the reference's): above 1 is faster. The
 * references run first in each group, so each JSON line already carries its speedups. */
#include "bench/bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bench_result *results;
static size_t result_count, result_capacity;

static const char *const reference_labels[] = {BENCH_REF_CUMEMALLOC, BENCH_REF_ASYNC};
static const char *const reference_keys[] = {"cuMemAlloc", "async"};
/* The names the benchmark definitions give the references, carried by their lines. */
static const char *const reference_names[] = {"cuda", "async"};
#define REFERENCE_COUNT 2

static const char *kind_name(bench_kind kind) {
  return kind == BENCH_RANDOM ? "random" : kind == BENCH_THREADS ? "threads" : "replay";
}

static bool same_group(const bench_result *a, const bench_result *b) {
  return a->kind == b->kind && a->threads == b->threads && strcmp(a->workload, b->workload) == 0 &&
         (a->mode == b->mode || (a->mode && b->mode && strcmp(a->mode, b->mode) == 0));
}

/* The reference's result in r's group, or NULL when it has not run (or r is it). */
static const bench_result *reference_for(const bench_result *r, const char *label) {
  if (strcmp(r->resource, label) == 0)
    return NULL;
  for (size_t i = 0; i < result_count; i++)
    if (same_group(&results[i], r) && strcmp(results[i].resource, label) == 0)
      return &results[i];
  return NULL;
}

static double speedup(double reference_ns, double ns) {
  return ns > 0 ? reference_ns / ns : 0;
}

static double over_live(const bench_result *r, uint64_t reserved) {
  return r->peak_live_bytes ? (double)reserved / (double)r->peak_live_bytes : 0;
}

static double reserved_over_live(const bench_result *r) {
  return over_live(r, r->peak_reserved_bytes);
}

/* ---- JSON ---- */

static void put_json_string(const char *text) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    if (*p == '"' || *p == '\\')
      printf("\\%c", *p);
    else if (*p < 0x20)
      printf("\\u%04x", *p);
    else
      putchar(*p);
  }
  putchar('"');
}

char *bench_stats_json(const bench_allocator *alloc) {
  if (!alloc->resource)
    return NULL;
  size_t needed = 0;
  char *json = NULL;
  gpumem_status status = gpumem_resource_stats_json(alloc->resource, NULL, 0, &needed);
  while (status == GPUMEM_ERR_INVALID_ARGUMENT && needed > 0) {
    free(json);
    size_t size = needed + 1024;
    if (!(json = malloc(size)))
      bench_die(GPUMEM_ERR_OUT_OF_MEMORY, "reading a resource's stats");
    status = gpumem_resource_stats_json(alloc->resource, json, size, &needed);
  }
  if (status != GPUMEM_OK)
    bench_die(status, "reading a resource's stats");
  return json;
}

void bench_report_stats(const char *label, const char *trace, const char *json) {
  printf("{\"bench\":\"replay_stats\",\"resource\":");
  put_json_string(label);
  printf(",\"trace\":");
  put_json_string(trace);
  printf(",\"stats\":%s}\n", json);
}

static void put_common_fields(const bench_context *ctx, const bench_result *r) {
  printf("{\"bench\":\"%s\",\"resource\":", kind_name(r->kind));
  put_json_string(r->resource);
  printf(",\"device\":");
  put_json_string(ctx->backend);
  printf(",\"gpu\":");
  if (ctx->gpu)
    put_json_string(ctx->gpu);
  else
    printf("null");
  for (int i = 0; i < REFERENCE_COUNT; i++)
    if (strcmp(r->resource, reference_labels[i]) == 0)
      printf(",\"reference\":\"%s\"", reference_names[i]);
}

static void put_operation_fields(const bench_result *r) {
  printf(",\"workload\":");
  put_json_string(r->workload);
  if (r->mode) {
    printf(",\"mode\":");
    put_json_string(r->mode);
  }
  printf(",\"threads\":%d,\"ops\":%llu,\"ns_per_op\":%.1f,\"mops\":%.3f", r->threads,
         (unsigned long long)r->ops, r->ns, r->ns > 0 ? 1000.0 / r->ns : 0);
  if (r->repeats > 1)
    printf(",\"repeats\":%d,\"ns_per_op_min\":%.1f,\"ns_per_op_max\":%.1f", r->repeats, r->ns_min,
           r->ns_max);
  if (r->clock_ghz > 0)
    printf(",\"host_clock_ghz\":%.2f,\"cycles_per_op\":%.0f", r->clock_ghz, r->cycles);
  if (r->adds_per_cycle > 0)
    printf(",\"host_adds_per_cycle\":%.2f", r->adds_per_cycle);
  if (r->slowest_thread_clock_ghz > 0)
    printf(",\"slowest_thread_clock_ghz\":%.2f", r->slowest_thread_clock_ghz);
}

static void put_replay_fields(const bench_result *r) {
  printf(",\"trace\":");
  put_json_string(r->workload);
  printf(",\"events\":%llu,\"threads\":%d,\"streams\":%d,\"ns_per_event\":%.1f,"
         "\"ns_per_event_warm\":%.1f",
         (unsigned long long)r->ops, r->threads, r->streams, r->ns, r->ns_warm);
  if (r->repeats > 1)
    printf(",\"repeats\":%d,\"ns_per_event_warm_min\":%.1f,\"ns_per_event_warm_max\":%.1f",
           r->repeats, r->ns_min, r->ns_max);
  printf(",\"peak_live_bytes\":%llu,\"peak_reserved_bytes\":%llu,\"reserved_over_live\":%.4f",
         (unsigned long long)r->peak_live_bytes, (unsigned long long)r->peak_reserved_bytes,
         reserved_over_live(r));
  printf(",\"peak_reserved_bytes_warm\":%llu,\"reserved_over_live_warm\":%.4f",
         (unsigned long long)r->peak_reserved_bytes_warm,
         over_live(r, r->peak_reserved_bytes_warm));
  printf(",\"peak_reserved_from\":\"%s\"", r->peak_reserved_from);
  if (r->has_sim_calls)
    printf(",\"sim_calls_per_event_warm\":{\"event_record\":%.4f,\"event_query\":%.4f,"
           "\"stream_wait\":%.4f,\"synchronize\":%.4f}",
           r->sim_calls[0], r->sim_calls[1], r->sim_calls[2], r->sim_calls[3]);
  if (r->clock_ghz > 0)
    printf(",\"host_clock_ghz\":%.2f,\"cycles_per_event_warm\":%.0f", r->clock_ghz, r->cycles);
  if (r->adds_per_cycle > 0)
    printf(",\"host_adds_per_cycle\":%.2f", r->adds_per_cycle);
}

static void put_speedup_fields(const bench_result *r) {
  for (int i = 0; i < REFERENCE_COUNT; i++) {
    const bench_result *ref = reference_for(r, reference_labels[i]);
    if (!ref)
      continue;
    printf(",\"speedup_vs_%s\":%.2f", reference_keys[i], speedup(ref->ns, r->ns));
    if (r->kind == BENCH_REPLAY)
      printf(",\"speedup_vs_%s_warm\":%.2f", reference_keys[i], speedup(ref->ns_warm, r->ns_warm));
  }
}

static void keep_result(const bench_result *r) {
  if (result_count == result_capacity) {
    result_capacity = result_capacity ? result_capacity * 2 : 32;
    results = realloc(results, result_capacity * sizeof *results);
    if (!results) {
      fprintf(stderr, "gpumem-bench: out of host memory\n");
      exit(EXIT_FAILURE);
    }
  }
  results[result_count++] = *r;
}

void bench_report(const bench_context *ctx, const bench_result *result) {
  keep_result(result);
  const bench_result *r = &results[result_count - 1];
  put_common_fields(ctx, r);
  if (r->kind == BENCH_REPLAY)
    put_replay_fields(r);
  else
    put_operation_fields(r);
  put_speedup_fields(r);
  printf("}\n");
  fflush(stdout); /* a line per result as it comes, also through a pipe */
}

/* ---- the table ---- */

static bool reference_present[REFERENCE_COUNT];
static int resource_width;

static void measure_columns(void) {
  resource_width = (int)strlen("resource");
  for (size_t i = 0; i < result_count; i++) {
    int length = (int)strlen(results[i].resource);
    if (length > resource_width)
      resource_width = length;
    for (int k = 0; k < REFERENCE_COUNT; k++)
      if (strcmp(results[i].resource, reference_labels[k]) == 0)
        reference_present[k] = true;
  }
}

static void put_speedup_cells(const bench_result *r) {
  for (int k = 0; k < REFERENCE_COUNT; k++) {
    if (!reference_present[k])
      continue;
    const bench_result *ref = reference_for(r, reference_labels[k]);
    char cell[64] = "-";
    if (ref && r->kind == BENCH_REPLAY)
      snprintf(cell, sizeof cell, "%.2fx / %.2fx", speedup(ref->ns, r->ns),
               speedup(ref->ns_warm, r->ns_warm));
    else if (ref)
      snprintf(cell, sizeof cell, "%.2fx", speedup(ref->ns, r->ns));
    printf("  %*s", r->kind == BENCH_REPLAY ? 19 : 13, cell);
  }
}

static void put_speedup_headings(bool replay) {
  for (int k = 0; k < REFERENCE_COUNT; k++) {
    if (!reference_present[k])
      continue;
    char heading[64];
    snprintf(heading, sizeof heading, "vs %s%s", reference_keys[k], replay ? " cold/warm" : "");
    printf("  %*s", replay ? 19 : 13, heading);
  }
}

static void print_operation_table(void) {
  printf("\n%-8s %-8s %-8s %7s  %-*s %11s %9s", "bench", "workload", "mode", "threads",
         resource_width, "resource", "ns/op", "Mops");
  put_speedup_headings(false);
  printf("\n");
  for (size_t i = 0; i < result_count; i++) {
    const bench_result *r = &results[i];
    if (r->kind == BENCH_REPLAY)
      continue;
    printf("%-8s %-8s %-8s %7d  %-*s %11.1f %9.3f", kind_name(r->kind), r->workload,
           r->mode ? r->mode : "-", r->threads, resource_width, r->resource, r->ns,
           r->ns > 0 ? 1000.0 / r->ns : 0);
    put_speedup_cells(r);
    if (r->repeats > 1) /* the median's spread */
      printf("  (%d passes: %.1f to %.1f)", r->repeats, r->ns_min, r->ns_max);
    if (r->clock_ghz > 0)
      printf("  %.0f cycles/op at %.2f GHz", r->cycles, r->clock_ghz);
    if (r->adds_per_cycle > 0)
      printf(", %.2f adds/cycle", r->adds_per_cycle);
    if (r->slowest_thread_clock_ghz > 0)
      printf("  slowest thread at %.2f GHz", r->slowest_thread_clock_ghz);
    printf("\n");
  }
}

static void print_replay_table(void) {
  printf("\n%-28s %-*s %11s %11s", "trace", resource_width, "resource", "ns/event", "warm ns/ev");
  put_speedup_headings(true);
  printf("  %13s %11s\n", "reserved/live", "after warm");
  for (size_t i = 0; i < result_count; i++) {
    const bench_result *r = &results[i];
    if (r->kind != BENCH_REPLAY)
      continue;
    printf("%-28s %-*s %11.1f %11.1f", r->workload, resource_width, r->resource, r->ns, r->ns_warm);
    put_speedup_cells(r);
    printf("  %13.3f %11.3f", reserved_over_live(r), over_live(r, r->peak_reserved_bytes_warm));
    if (r->repeats > 1) /* the warm median's spread */
      printf("  (%d warm passes: %.1f to %.1f)", r->repeats, r->ns_min, r->ns_max);
    if (r->clock_ghz > 0)
      printf("  %.0f cycles/event warm at %.2f GHz", r->cycles, r->clock_ghz);
    if (r->adds_per_cycle > 0)
      printf(", %.2f adds/cycle", r->adds_per_cycle);
    printf("\n");
  }
}

void bench_print_table(void) {
  bool any_operations = false, any_replays = false;
  for (size_t i = 0; i < result_count; i++) {
    any_replays |= results[i].kind == BENCH_REPLAY;
    any_operations |= results[i].kind != BENCH_REPLAY;
  }
  measure_columns();
  if (any_operations)
    print_operation_table();
  if (any_replays)
    print_replay_table();
  printf("\nspeedup = the reference's time per operation over this one's (above 1: faster)\n");
}

/* ---- errors ---- */

void bench_die(gpumem_status status, const char *what) {
  fprintf(stderr, "gpumem-bench: %s: %s: %s\n", what, gpumem_status_name(status),
          gpumem_last_error_message());
  exit(EXIT_FAILURE);
}

void bench_die_failure(const char *bench, const char *resource, const char *workload,
                       const bench_failure *failure) {
  fprintf(stderr,
          "gpumem-bench: %s %s on '%s': %s of %zu bytes failed at step %zu of the %s: %s: %s\n",
          bench, workload, resource, failure->is_free ? "free" : "allocation", failure->bytes,
          failure->step, failure->phase, gpumem_status_name(failure->status), failure->message);
  exit(EXIT_FAILURE);
}
