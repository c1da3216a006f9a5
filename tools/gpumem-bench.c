/* gpumem-bench: measures gpumem's resources against the CUDA driver's own allocators, in one
 * process and one run, on the workloads of BENCHMARKS.md.
 *
 * Usage:
 *   gpumem-bench random  [--workload small,mixed,large] [options]
 *   gpumem-bench threads [--threads 1,4,16] [--mode own,shared,producer] [options]
 *   gpumem-bench replay  [options] TRACE.csv...
 *
 * Options:
 *   --resource SPEC  a resource to measure, built by gpumem_resource_from_spec; repeatable;
 *                    default "cuda". "driver:cuMemAlloc" and "driver:async" name the
 *                    references.
 *   --compare        also measure the references: driver:cuMemAlloc (cuMemAlloc/cuMemFree)
 *                    and driver:async (a driver pool with release threshold UINT64_MAX,
 *                    stream-ordered allocation), both called through gpumem's device layer
 *                    with no gpumem bookkeeping.
 *   --table          after the JSON lines, print a table for people.
 *   --device N       run on device N (default 0).
 *   --repeat N       random: N timed passes after the warm-up; threads: N runs of all the
 *                    threads, each with its warm-up; replay: N warm passes after the cold
 *                    one (default 1). The figure is their median, beside the fastest and
 *                    slowest: one pass lasts milliseconds, and a host that other work
 *                    shares can slow any one of them.
 *   --stats          replay: after each resource's replay, a line with its stats as JSON
 *                    ({"bench":"replay_stats",...,"stats":{...}}; docs/reports.md);
 *                    threads: after each run, peak reserved bytes, each thread's own pass
 *                    time (fastest, slowest), and for a pool with thread fronts how often
 *                    and how long its threads took its lock, its refills, growths and
 *                    trims, and what the fronts hold ({"bench":"threads_stats",...}).
 *
 * random runs each workload (all three by default) single-threaded on one stream: a warm-up
 * pass, then a timed pass over the same precomputed sequence. threads runs each thread
 * count (1, 4 and 16 by default) on one shared allocator, in each --mode listed: own (the
 * default), every thread on its own stream with its own sequence; shared, the same
 * sequences with every thread on one stream; producer, one thread allocating and the others
 * freeing what it hands them (a queue each), each on its own stream, allocations and frees
 * each counted as an operation. replay replays RMM-format traces (gpumem's event logs among them),
 * each traced thread on a thread and each traced stream on a stream of its own, the
 * threads taking turns in the traced order: a cold pass on a fresh allocator, then a warm
 * pass on the same one.
 *
 * Output: one JSON object per line on stdout. Every line has bench, resource, device
 * ("cuda" or "sim") and gpu (the GPU's name, null on the simulated device); random and
 * threads lines add workload (threads lines their mode too), threads, ops, ns_per_op and
 * mops; replay lines add trace,
 * events, threads, streams, ns_per_event, ns_per_event_warm, peak_live_bytes,
 * peak_reserved_bytes, reserved_over_live and peak_reserved_from (on the simulated device also
 * sim_calls_per_event_warm: the warm passes' event records and queries, stream waits and
 * synchronizations, per event). With --repeat above 1, repeats
 * and the fastest and slowest pass (ns_per_op_min and _max, ns_per_event_warm_min and _max). Where
 * a reference ran, speedup_vs_cuMemAlloc and speedup_vs_async give its time per operation over this
 * allocator's. The first line on stderr says which backend runs the benchmark; GPUMEM_DEVICE=sim
 * selects gpumem's simulated device (no GPU needed, and its times say nothing about a GPU's).
 * Errors go to stderr with gpumem's message, and the exit status is then 1. */
#include "bench/bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: gpumem-bench random  [--workload small,mixed,large] [options]\n"
    "       gpumem-bench threads [--threads 1,4,16] [--mode own,shared,producer] [options]\n"
    "       gpumem-bench replay  [options] TRACE.csv...\n"
    "\n"
    "Measures gpumem's resources and, with --compare, the CUDA driver's own allocators in\n"
    "the same process and run, on the workloads of BENCHMARKS.md:\n"
    "  random   allocate/free at random on one thread and one stream; workloads small\n"
    "           (8 B-4 KiB), mixed (256 B-4 MiB), large (1-256 MiB); all three by default\n"
    "  threads  N threads, each on its own stream, on one shared allocator; N is a list\n"
    "           (default 1,4,16); the figure is aggregate millions of operations per second;\n"
    "           --mode: own (each thread its own stream; the default), shared (one stream\n"
    "           for all), producer (one thread allocates, the others free on their streams)\n"
    "  replay   traces in RMM's log format (Thread,Time,Action,Pointer,Size,Stream), threads\n"
    "           and streams as traced: a cold pass on a fresh allocator, then a warm pass\n"
    "\n"
    "options:\n"
    "  --resource SPEC  a resource to measure, built by gpumem_resource_from_spec, e.g.\n"
    "                   \"cuda\", \"async\", \"managed(prefetch=true)\"; repeatable; default\n"
    "                   \"cuda\". driver:cuMemAlloc and driver:async name the references;\n"
    "                   harness:none no allocator at all (the benchmark's own cost).\n"
    "  --compare        also measure the references: driver:cuMemAlloc (cuMemAlloc and\n"
    "                   cuMemFree) and driver:async (a driver pool, release threshold\n"
    "                   UINT64_MAX, stream-ordered), called with no gpumem bookkeeping\n"
    "  --table          after the JSON lines, print a table for people\n"
    "  --device N       run on device N (default 0)\n"
    "  --repeat N       random: N timed passes; threads: N runs of all threads; replay: N\n"
    "                   warm passes (default 1); the figure is their median, with the\n"
    "                   fastest and slowest beside it\n"
    "  --stats          replay: after each resource's replay, its stats as a JSON line\n"
    "                   (bench replay_stats: the resource's tree with every figure);\n"
    "                   threads: peak reserved bytes, the fastest and slowest thread's\n"
    "                   pass and every thread's, and for a pool with thread fronts its\n"
    "                   lock share, the time its threads waited for its lock and held\n"
    "                   it, refills, growths, trims and the bytes fronts hold\n"
    "                   (threads_stats)\n"
    "  -h, --help       print this help\n"
    "\n"
    "Output: one JSON object per line on stdout (bench, resource, device, gpu, and the\n"
    "figures: ns_per_op and mops, or ns_per_event, ns_per_event_warm and peak reserved over\n"
    "peak live bytes). speedup_vs_cuMemAlloc and speedup_vs_async are the reference's time\n"
    "per operation over this one's. Errors go to stderr; the exit status is then 1.\n"
    "\n"
    "Environment: GPUMEM_DEVICE=sim runs on gpumem's simulated device, without a GPU (its\n"
    "times measure gpumem's host-side work and the simulation, not a GPU).\n";

typedef struct bench_args {
  const char *command;
  const char *resources[64];
  size_t resource_count;
  bool compare, table, stats;
  int device;
  int repeat;
  const char *workloads;     /* random */
  const char *thread_counts; /* threads */
  const char *modes;         /* threads */
  char **traces;             /* replay */
  size_t trace_count;
} bench_args;

static _Noreturn void usage_error(const char *format, const char *detail) {
  fprintf(stderr, "gpumem-bench: ");
  fprintf(stderr, format, detail);
  fprintf(stderr, "\n(gpumem-bench --help tells how to use it)\n");
  exit(EXIT_FAILURE);
}

/* The value of option `name` at argv[*i], as "--name VALUE" or "--name=VALUE"; NULL when
 * argv[*i] is another option. Advances *i past a separate value. */
static const char *option_value(int argc, char **argv, int *i, const char *name) {
  size_t length = strlen(name);
  if (strncmp(argv[*i], name, length) != 0)
    return NULL;
  if (argv[*i][length] == '=')
    return argv[*i] + length + 1;
  if (argv[*i][length] != '\0')
    return NULL;
  if (*i + 1 >= argc)
    usage_error("%s needs a value", name);
  return argv[++*i];
}

/* A whole number from `low` to `high`; anything else is a usage error, `complaint` its
 * format (with %s for the text). */
static int parse_number(const char *text, long low, long high, const char *complaint) {
  char *end;
  long value = strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < low || value > high)
    usage_error(complaint, text);
  return (int)value;
}

static void add_resource(bench_args *args, const char *spec) {
  if (args->resource_count == sizeof args->resources / sizeof args->resources[0])
    usage_error("too many --resource options (%s)", "64 at most");
  args->resources[args->resource_count++] = spec;
}

/* One argument at argv[*i]; returns false when it is not an option this command takes. */
static bool parse_option(bench_args *args, int argc, char **argv, int *i) {
  const char *value;
  bool random = strcmp(args->command, "random") == 0;
  bool threads = strcmp(args->command, "threads") == 0;
  if ((value = option_value(argc, argv, i, "--resource")))
    add_resource(args, value);
  else if ((value = option_value(argc, argv, i, "--device")))
    args->device = parse_number(value, 0, 1023, "bad device index '%s'");
  else if (random && (value = option_value(argc, argv, i, "--workload")))
    args->workloads = value;
  else if (threads && (value = option_value(argc, argv, i, "--threads")))
    args->thread_counts = value;
  else if (threads && (value = option_value(argc, argv, i, "--mode")))
    args->modes = value;
  else if ((value = option_value(argc, argv, i, "--repeat")))
    args->repeat = parse_number(value, 1, BENCH_MAX_REPEAT, "bad repeat count '%s' (1 to 1000)");
  else if (strcmp(argv[*i], "--compare") == 0)
    args->compare = true;
  else if (strcmp(argv[*i], "--table") == 0)
    args->table = true;
  else if ((strcmp(args->command, "replay") == 0 || threads) && strcmp(argv[*i], "--stats") == 0)
    args->stats = true;
  else
    return false;
  return true;
}

static void parse_args(bench_args *args, int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    fputs(usage_text, argc < 2 ? stderr : stdout);
    exit(argc < 2 ? EXIT_FAILURE : EXIT_SUCCESS);
  }
  args->command = argv[1];
  if (strcmp(args->command, "random") != 0 && strcmp(args->command, "threads") != 0 &&
      strcmp(args->command, "replay") != 0)
    usage_error("unknown command '%s' (random, threads or replay)", args->command);
  args->traces = calloc((size_t)argc, sizeof *args->traces);
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(usage_text, stdout);
      exit(EXIT_SUCCESS);
    }
    if (parse_option(args, argc, argv, &i))
      continue;
    if (argv[i][0] == '-' || strcmp(args->command, "replay") != 0)
      usage_error("unexpected argument '%s'", argv[i]);
    args->traces[args->trace_count++] = argv[i];
  }
  if (strcmp(args->command, "replay") == 0 && args->trace_count == 0)
    usage_error("%s needs at least one trace file", "replay");
}

static bool is_reference(const char *label) {
  return strcmp(label, BENCH_REF_CUMEMALLOC) == 0 || strcmp(label, BENCH_REF_ASYNC) == 0;
}

static bool listed(const char *const *labels, size_t count, const char *label) {
  for (size_t i = 0; i < count; i++)
    if (strcmp(labels[i], label) == 0)
      return true;
  return false;
}

/* References first, so that every later line of a group can carry its speedups; each
 * label once. */
static void choose_labels(const bench_args *args, bench_context *ctx) {
  static const char *labels[66];
  static const char *const references[] = {BENCH_REF_CUMEMALLOC, BENCH_REF_ASYNC};
  size_t count = 0;
  for (int r = 0; r < 2; r++)
    if (args->compare || listed(args->resources, args->resource_count, references[r]))
      labels[count++] = references[r];
  if (args->resource_count == 0)
    labels[count++] = "cuda";
  for (size_t i = 0; i < args->resource_count; i++)
    if (!is_reference(args->resources[i]) && !listed(labels, count, args->resources[i]))
      labels[count++] = args->resources[i];
  ctx->labels = labels;
  ctx->label_count = count;
}

/* Initializes the device and says on stderr which backend runs the benchmark. */
static void start_device(bench_context *ctx) {
  static char gpu_name[256];
  gpumem_status status = gpumem_init();
  if (status != GPUMEM_OK)
    bench_die(status, "initializing the device (GPUMEM_DEVICE=sim runs without a GPU)");
  if ((status = gpumem_set_device(ctx->device)) != GPUMEM_OK)
    bench_die(status, "selecting the device");
  ctx->backend = gpumem_backend_name();
  if (strcmp(ctx->backend, "sim") == 0) {
    fprintf(stderr, "running on the simulated device\n");
    return;
  }
  if ((status = gpumem_device_name(ctx->device, gpu_name, sizeof gpu_name)) != GPUMEM_OK)
    bench_die(status, "reading the device's name");
  ctx->gpu = gpu_name;
  fprintf(stderr, "running on GPU %s\n", gpu_name);
}

int main(int argc, char **argv) {
  bench_args args = {0};
  bench_context ctx = {0};
  parse_args(&args, argc, argv);
  ctx.device = args.device;
  ctx.repeat = args.repeat > 0 ? args.repeat : 1;
  ctx.stats = args.stats;
  choose_labels(&args, &ctx);
  start_device(&ctx);
  if (strcmp(args.command, "random") == 0)
    bench_random(&ctx, args.workloads);
  else if (strcmp(args.command, "threads") == 0)
    bench_threads(&ctx, args.thread_counts, args.modes);
  else
    bench_replay(&ctx, args.traces, args.trace_count);
  if (args.table)
    bench_print_table();
  free(args.traces);
  return EXIT_SUCCESS;
}
