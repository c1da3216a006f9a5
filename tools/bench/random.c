/* random.c: the random allocate/free workloads of BENCHMARKS.md, on one thread and on many.
 *
 * The generator and the rules are BENCHMARKS.md's, read as follows (the order of the draws
 * decides the sequence, so it is spelled out):
 *
 *   x = seed of the workload (xorshift64 state)
 *   next():  x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x
 *   urand(): (next() >> 11) * 2^-53, in [0, 1)
 *   for each of n steps:
 *     live == 0                          -> allocate (no draw)
 *     live < cap and urand() < 0.5       -> allocate (one draw; none when live == cap)
 *     otherwise                          -> free the live slot at next() % live, and move
 *                                           the last live slot into its place (swap-remove)
 *     an allocation then draws its size: (size_t)exp(log(lo) + (log(hi) - log(lo)) * urand())
 *
 * A free passes the size its allocation asked for. The whole sequence is built before any
 * timing; the timed loop only replays it (see run.c). */
#include "bench/bench.h"
#include "suballoc/pool.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct random_workload {
  const char *name;
  size_t steps;
  size_t cap;
  size_t lo, hi; /* bytes */
  uint64_t seed;
} random_workload;

static const random_workload random_workloads[] = {
    {"small", 200000, 1000, 8, 4096, 42},
    {"mixed", 200000, 1000, 256, (size_t)4 << 20, 43},
    {"large", 20000, 64, (size_t)1 << 20, (size_t)256 << 20, 44},
};

#define RANDOM_WORKLOAD_COUNT (sizeof random_workloads / sizeof random_workloads[0])

/* The per-thread sequence of the threads benchmark: its seed is 100 + the thread's index. */
static const random_workload thread_workload = {"threads", 100000, 500, 8, 65536, 100};

/* ---- the generator ---- */

static uint64_t xorshift_next(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

static double xorshift_urand(uint64_t *x) {
  return (double)(xorshift_next(x) >> 11) * 0x1.0p-53;
}

static size_t log_uniform_size(uint64_t *x, size_t lo, size_t hi) {
  double log_lo = log((double)lo), log_hi = log((double)hi);
  return (size_t)exp(log_lo + (log_hi - log_lo) * xorshift_urand(x));
}

/* ---- building a sequence ---- */

/* The live set while a sequence is built: live[] holds table slots in the workload's order
 * (the order swap-remove acts on); spare[] is a stack of unused table slots. */
typedef struct live_set {
  uint32_t *live;
  size_t live_count;
  uint32_t *spare;
  size_t spare_count;
  size_t *slot_bytes;
  uint64_t live_bytes;
} live_set;

static bool live_set_init(live_set *set, size_t cap) {
  set->live = malloc(cap * sizeof *set->live);
  set->spare = malloc(cap * sizeof *set->spare);
  set->slot_bytes = malloc(cap * sizeof *set->slot_bytes);
  set->live_count = 0;
  set->live_bytes = 0;
  set->spare_count = cap;
  for (size_t i = 0; i < cap; i++)
    set->spare[i] = (uint32_t)(cap - 1 - i);
  return set->live && set->spare && set->slot_bytes;
}

static void live_set_fini(live_set *set) {
  free(set->live);
  free(set->spare);
  free(set->slot_bytes);
}

static bench_op live_set_add(live_set *set, size_t bytes) {
  uint32_t slot = set->spare[--set->spare_count];
  set->live[set->live_count++] = slot;
  set->slot_bytes[slot] = bytes;
  set->live_bytes += bytes;
  return (bench_op){.bytes = bytes, .slot = slot, .is_free = 0};
}

static bench_op live_set_remove_at(live_set *set, size_t index) {
  uint32_t slot = set->live[index];
  set->live[index] = set->live[--set->live_count];
  set->spare[set->spare_count++] = slot;
  set->live_bytes -= set->slot_bytes[slot];
  return (bench_op){.bytes = set->slot_bytes[slot], .slot = slot, .is_free = 1};
}

static bench_op next_op(const random_workload *w, uint64_t *x, live_set *set) {
  bool allocate = set->live_count == 0 || (set->live_count < w->cap && xorshift_urand(x) < 0.5);
  if (allocate)
    return live_set_add(set, log_uniform_size(x, w->lo, w->hi));
  return live_set_remove_at(set, xorshift_next(x) % set->live_count);
}

static void out_of_host_memory(void) {
  fprintf(stderr, "gpumem-bench: out of host memory building a workload\n");
  exit(EXIT_FAILURE);
}

static void build_random_sequence(const random_workload *w, uint64_t seed, bench_sequence *seq) {
  live_set set;
  *seq = (bench_sequence){.count = w->steps, .slot_count = w->cap};
  seq->ops = malloc(w->steps * sizeof *seq->ops);
  seq->leftovers = malloc(w->cap * sizeof *seq->leftovers);
  if (!live_set_init(&set, w->cap) || !seq->ops || !seq->leftovers)
    out_of_host_memory();
  uint64_t x = seed;
  for (size_t i = 0; i < w->steps; i++) {
    seq->ops[i] = next_op(w, &x, &set);
    if (set.live_bytes > seq->peak_live_bytes)
      seq->peak_live_bytes = set.live_bytes;
  }
  while (set.live_count > 0)
    seq->leftovers[seq->leftover_count++] = live_set_remove_at(&set, set.live_count - 1);
  live_set_fini(&set);
}

static void **new_slot_table(size_t count) {
  void **slots = calloc(count, sizeof *slots);
  if (!slots)
    out_of_host_memory();
  return slots;
}

static gpumem_stream new_stream(int device) {
  gpumem_stream stream;
  gpumem_status status = gpumem_stream_create(device, &stream);
  if (status != GPUMEM_OK)
    bench_die(status, "creating a stream");
  return stream;
}

/* ---- random: one thread, one stream ---- */

static void run_random_workload(const bench_context *ctx, const random_workload *w,
                                gpumem_stream stream) {
  bench_sequence seq;
  build_random_sequence(w, w->seed, &seq);
  void **slots = new_slot_table(seq.slot_count);
  for (size_t i = 0; i < ctx->label_count; i++) {
    bench_allocator *alloc = bench_open_or_die(ctx->labels[i], ctx->device);
    bench_failure failure;
    uint64_t warm_up_ns;
    bench_pass_times times;
    if (bench_run_pass(alloc, stream, &seq, slots, "warm-up pass", &warm_up_ns, &failure) ||
        bench_run_passes(alloc, stream, &seq, slots, "timed pass", ctx->repeat, &times, &failure))
      bench_die_failure("random", alloc->label, w->name, &failure);
    bench_close_or_die(alloc);
    double ops = (double)seq.count;
    bench_result result = {.kind = BENCH_RANDOM,
                           .resource = ctx->labels[i],
                           .workload = w->name,
                           .threads = 1,
                           .ops = seq.count,
                           .ns = times.median_ns / ops,
                           .repeats = ctx->repeat,
                           .ns_min = times.min_ns / ops,
                           .ns_max = times.max_ns / ops,
                           .clock_ghz = times.clock_ghz,
                           .cycles = times.median_cycles / ops,
                           .adds_per_cycle = times.adds_per_cycle};
    bench_report(ctx, &result);
  }
  free(slots);
  bench_sequence_free(&seq);
}

static const random_workload *find_workload(const char *name, size_t length) {
  for (size_t i = 0; i < RANDOM_WORKLOAD_COUNT; i++)
    if (strlen(random_workloads[i].name) == length &&
        strncmp(random_workloads[i].name, name, length) == 0)
      return &random_workloads[i];
  fprintf(stderr, "gpumem-bench: unknown workload '%.*s' (small, mixed or large)\n", (int)length,
          name);
  exit(EXIT_FAILURE);
}

void bench_random(const bench_context *ctx, const char *workloads) {
  const random_workload *chosen[RANDOM_WORKLOAD_COUNT * 4];
  size_t count = 0;
  if (!workloads) {
    for (; count < RANDOM_WORKLOAD_COUNT; count++)
      chosen[count] = &random_workloads[count];
  }
  for (const char *p = workloads; p && *p;) {
    size_t length = strcspn(p, ",");
    if (count == sizeof chosen / sizeof chosen[0]) {
      fprintf(stderr, "gpumem-bench: at most %zu workloads\n", count);
      exit(EXIT_FAILURE);
    }
    chosen[count++] = find_workload(p, length);
    p += length + (p[length] == ',');
  }
  gpumem_stream stream = new_stream(ctx->device);
  for (size_t i = 0; i < count; i++)
    run_random_workload(ctx, chosen[i], stream);
  gpumem_stream_destroy(stream);
}

/* ---- threads: many threads on one shared allocator ----
 *
 * Three modes: "own", each thread on its own stream with its own sequence (the default);
 * "shared", the same sequences with every thread on one stream; and "producer", one thread
 * allocating and the others freeing what it hands them, each on its own stream (handoff.c).
 * Every mode does the same number of operations: the threads workload's steps per thread. */

static const char *const thread_mode_names[] = {"own", "shared", "producer"};
typedef enum thread_mode { MODE_OWN, MODE_SHARED, MODE_PRODUCER, MODE_COUNT } thread_mode;

typedef struct thread_run {
  pthread_t thread;
  int device;
  int repeat;
  int index;
  thread_mode mode;
  bench_allocator *alloc;
  pthread_barrier_t *barrier;
  bench_sequence seq; /* own and shared */
  void **slots;
  bench_handoff *handoff; /* producer: shared by every thread of the run */
  size_t *sizes;          /* producer: the sizes thread 0 allocates */
  size_t size_count;
  gpumem_stream stream;
  /* Per repetition: the timed pass's start and end, and the host's clock for this thread,
   * before and after it. */
  uint64_t start_ns[BENCH_MAX_REPEAT], end_ns[BENCH_MAX_REPEAT];
  double clock_ghz[BENCH_MAX_REPEAT];
  gpumem_status status;
  bench_failure failure;
  /* For --stats (NULL without): a pool's front statistics over the timed passes alone
   * (warm-ups grow the pool); the one thread that a barrier names reads them before and
   * after each. Shared by every thread of the run. */
  struct timed_front_stats *timed;
} thread_run;

typedef struct timed_front_stats {
  gpumem__pool_front_stats before, sum;
} timed_front_stats;

/* Adds to t->timed what the fronts did since the last call (`end`), or notes where they
 * stand (!end); by one thread while the others wait at a barrier. */
static void note_timed_front_stats(const thread_run *t, bool end) {
  gpumem__pool_front_stats now;
  if (!t->alloc->resource || !gpumem__pool_front_stats_of(t->alloc->resource, &now))
    return;
  if (!end) {
    t->timed->before = now;
    return;
  }
  gpumem__pool_front_stats *sum = &t->timed->sum;
  const gpumem__pool_front_stats *before = &t->timed->before;
  sum->pool_locks += now.pool_locks - before->pool_locks;
  sum->refills += now.refills - before->refills;
  sum->grows += now.grows - before->grows;
  sum->give_backs += now.give_backs - before->give_backs;
  sum->trims += now.trims - before->trims;
  sum->lock_wait_ns += now.lock_wait_ns - before->lock_wait_ns;
  sum->lock_hold_ns += now.lock_hold_ns - before->lock_hold_ns;
}

/* The thread's part of a pass: its sequence, or its side of the handoff. Timed passes leave
 * the sequence's leftovers to run_untimed_end. */
static gpumem_status run_part(thread_run *t, bool timed) {
  if (t->mode == MODE_PRODUCER) {
    /* A thread that failed before plays on (see thread_main), keeping its first failure. */
    bench_failure scratch, *failure = t->status == GPUMEM_OK ? &t->failure : &scratch;
    gpumem_status status = t->index == 0 ? bench_handoff_produce(t->handoff, t->alloc, t->stream,
                                                                 t->sizes, t->size_count, failure)
                                         : bench_handoff_consume(t->handoff, t->index - 1, t->alloc,
                                                                 t->stream, failure);
    if (!timed && status == GPUMEM_OK)
      status = gpumem_stream_synchronize(t->stream);
    return status;
  }
  if (timed)
    return bench_run_ops(t->alloc, t->stream, t->seq.ops, t->seq.count, t->slots, &t->failure);
  uint64_t unused_ns;
  return bench_run_pass(t->alloc, t->stream, &t->seq, t->slots, "warm-up pass", &unused_ns,
                        &t->failure);
}

/* Keeps the thread's first failure, naming its phase. A failed synchronization (not an
 * operation) has no step: it is reported as the pass's failure all the same. */
static void note_status(thread_run *t, gpumem_status status, const char *phase) {
  if (status == GPUMEM_OK || t->status != GPUMEM_OK)
    return;
  t->status = status;
  t->failure.phase = phase;
  if (t->failure.status != status) /* not noted by an operation: a synchronization */
    bench_note_failure(status, 0, &(bench_op){0}, &t->failure);
}

/* What a timed pass leaves: the sequence's live allocations (own and shared), and a wait for
 * the stream. */
static gpumem_status run_untimed_end(thread_run *t) {
  if (t->mode != MODE_PRODUCER)
    return bench_finish_pass(t->alloc, t->stream, &t->seq, t->slots, &t->failure);
  return gpumem_stream_synchronize(t->stream);
}

/* Each repetition: warm-up, then the barrier, then the timed pass, then the barrier again.
 * The threads live through every repetition, as a program's workers do: a pool's lock is
 * biased to the thread that uses it (see core/biased_lock.h), and a new thread taking a
 * stream's pool over from one that ended would revoke that bias for good. A thread whose
 * pass failed still waits at every barrier, so that the others are not left waiting
 * forever; in the producer mode a failed thread still plays its part (the producer sends
 * the end of the pass, a consumer drains its queue), so that none waits on it. */
static void *thread_main(void *arg) {
  thread_run *t = arg;
  gpumem_status status = gpumem_set_device(t->device);
  if (status != GPUMEM_OK)
    bench_die(status, "setting the device of a worker thread");
  t->status = GPUMEM_OK;
  for (int r = 0; r < t->repeat; r++) {
    bool plays = t->status == GPUMEM_OK || t->mode == MODE_PRODUCER;
    if (plays)
      note_status(t, run_part(t, false), "warm-up pass");
    double clock_before = bench_host_clock_ghz();
    /* With --stats, one more barrier: the counts are read while no thread runs. */
    if (t->timed && pthread_barrier_wait(t->barrier) == PTHREAD_BARRIER_SERIAL_THREAD)
      note_timed_front_stats(t, false);
    pthread_barrier_wait(t->barrier);
    if (plays) {
      t->start_ns[r] = bench_now_ns();
      gpumem_status passed = run_part(t, true);
      t->end_ns[r] = bench_now_ns();
      note_status(t, passed, "timed pass");
    }
    /* The clock again once every thread's timed pass is over, so as not to slow another. */
    if (pthread_barrier_wait(t->barrier) == PTHREAD_BARRIER_SERIAL_THREAD && t->timed)
      note_timed_front_stats(t, true);
    t->clock_ghz[r] = (clock_before + bench_host_clock_ghz()) / 2;
    if (t->status == GPUMEM_OK)
      note_status(t, run_untimed_end(t), "freeing what the pass left live");
  }
  return NULL;
}

/* The producer's sizes: the threads workload's size rule, a draw each, seeded as thread 0's
 * sequence; as many allocations as make the run's operations (allocations and frees). */
static size_t *producer_sizes(int count, size_t *size_count) {
  *size_count = (size_t)count * thread_workload.steps / 2;
  size_t *sizes = malloc(*size_count * sizeof *sizes);
  if (!sizes)
    out_of_host_memory();
  uint64_t x = thread_workload.seed;
  for (size_t i = 0; i < *size_count; i++)
    sizes[i] = log_uniform_size(&x, thread_workload.lo, thread_workload.hi);
  return sizes;
}

static void prepare_threads(thread_run *runs, int count, int device, pthread_barrier_t *barrier,
                            thread_mode mode) {
  bench_handoff *handoff = NULL;
  size_t size_count = 0, *sizes = NULL;
  if (mode == MODE_PRODUCER) {
    if (!(handoff = bench_handoff_new(count - 1)))
      out_of_host_memory();
    sizes = producer_sizes(count, &size_count);
  }
  for (int i = 0; i < count; i++) {
    thread_run *t = &runs[i];
    t->device = device;
    t->barrier = barrier;
    t->index = i;
    t->mode = mode;
    t->handoff = handoff;
    if (i == 0) {
      t->sizes = sizes;
      t->size_count = size_count;
    }
    if (mode != MODE_PRODUCER) {
      build_random_sequence(&thread_workload, thread_workload.seed + (uint64_t)i, &t->seq);
      t->slots = new_slot_table(t->seq.slot_count);
    }
    t->stream = mode == MODE_SHARED && i > 0 ? runs[0].stream : new_stream(device);
  }
}

static void release_threads(thread_run *runs, int count) {
  for (int i = 0; i < count; i++) {
    if (runs[i].mode != MODE_SHARED || i == 0)
      gpumem_stream_destroy(runs[i].stream);
    free(runs[i].slots);
    if (runs[i].mode != MODE_PRODUCER)
      bench_sequence_free(&runs[i].seq);
  }
  bench_handoff_free(runs[0].handoff);
  free(runs[0].sizes);
}

/* Starts the threads on one allocator for `repeat` repetitions and stores, for each, the
 * time from the first thread's start after the barrier to the last thread's end, and the
 * host's clock of that last thread (all of them wait for it); with `timed` (--stats), the
 * fronts' counts over the timed passes. Exits on any failure. */
static void run_threads(thread_run *runs, int count, bench_allocator *alloc, int repeat,
                        timed_front_stats *timed, uint64_t *elapsed, double *slowest_clock_ghz) {
  if (timed)
    *timed = (timed_front_stats){0};
  for (int i = 0; i < count; i++) {
    runs[i].alloc = alloc;
    runs[i].repeat = repeat;
    runs[i].timed = timed;
    if (pthread_create(&runs[i].thread, NULL, thread_main, &runs[i]) != 0) {
      fprintf(stderr, "gpumem-bench: cannot start thread %d of %d\n", i + 1, count);
      exit(EXIT_FAILURE);
    }
  }
  for (int i = 0; i < count; i++)
    pthread_join(runs[i].thread, NULL);
  for (int i = 0; i < count; i++) {
    if (runs[i].status != GPUMEM_OK) {
      char workload[64];
      snprintf(workload, sizeof workload, "threads (thread %d of %d)", i + 1, count);
      bench_die_failure("threads", alloc->label, workload, &runs[i].failure);
    }
  }
  for (int r = 0; r < repeat; r++) {
    uint64_t first_start = UINT64_MAX, last_end = 0;
    for (int i = 0; i < count; i++) {
      if (runs[i].start_ns[r] < first_start)
        first_start = runs[i].start_ns[r];
      if (runs[i].end_ns[r] > last_end) {
        last_end = runs[i].end_ns[r];
        slowest_clock_ghz[r] = runs[i].clock_ghz[r];
      }
    }
    elapsed[r] = last_end - first_start;
  }
}

/* Thread i's own timed pass, the median over the repetitions, in ms. */
static double thread_pass_ms(const thread_run *runs, int i, int repeat) {
  uint64_t own[BENCH_MAX_REPEAT];
  for (int r = 0; r < repeat; r++)
    own[r] = runs[i].end_ns[r] - runs[i].start_ns[r];
  return bench_pass_times_of(own, repeat).median_ns / 1e6;
}

/* The fastest thread's own pass and the slowest's, in ms (the run's figure spans from the
 * first start to the last end, so a gap between them says that threads waited for each
 * other, started apart or ran on unequal processors). */
static void thread_pass_spread(const thread_run *runs, int count, int repeat, double *fastest_ms,
                               double *slowest_ms) {
  *fastest_ms = 1e300;
  *slowest_ms = 0;
  for (int i = 0; i < count; i++) {
    double ms = thread_pass_ms(runs, i, repeat);
    *fastest_ms = ms < *fastest_ms ? ms : *fastest_ms;
    *slowest_ms = ms > *slowest_ms ? ms : *slowest_ms;
  }
}

/* --stats: the allocator's peak reserved bytes and the spread of the threads' own pass
 * times, and for a pool with thread fronts, how many of the fronts' operations (warm-up
 * passes included) took the pool's lock, how long they waited for it and held it, and how
 * many locks they took on lines that other threads write too. */
static void print_thread_stats(bench_allocator *alloc, const char *mode, const thread_run *runs,
                               int count, int repeat) {
  uint64_t peak = 0;
  if (!alloc->peak_reserved || alloc->peak_reserved(alloc, &peak) != GPUMEM_OK)
    peak = 0;
  double fastest_ms, slowest_ms;
  thread_pass_spread(runs, count, repeat, &fastest_ms, &slowest_ms);
  printf("{\"bench\":\"threads_stats\",\"resource\":\"%s\",\"mode\":\"%s\",\"threads\":%d,"
         "\"peak_reserved_bytes\":%llu,\"thread_pass_ms\":[%.2f,%.2f]",
         alloc->label, mode, count, (unsigned long long)peak, fastest_ms, slowest_ms);
  gpumem__pool_front_stats s;
  if (alloc->resource && gpumem__pool_front_stats_of(alloc->resource, &s))
    printf(",\"front_ops\":%llu,\"pool_locks\":%llu,\"pool_lock_share\":%.5f,"
           "\"shared_locks_per_op\":%.3f,\"refills\":%llu,\"grows\":%llu,\"give_backs\":%llu,"
           "\"flushes\":%llu,\"trims\":%llu,\"returns_sent\":%llu,\"returns_taken\":%llu,"
           "\"held_bytes\":%llu,\"lock_wait_ms\":%.1f,\"lock_hold_ms\":%.1f",
           (unsigned long long)s.ops, (unsigned long long)s.pool_locks,
           s.ops ? (double)s.pool_locks / (double)s.ops : 0.0,
           s.ops ? (double)s.shared_locks / (double)s.ops : 0.0, (unsigned long long)s.refills,
           (unsigned long long)s.grows, (unsigned long long)s.give_backs,
           (unsigned long long)s.flushes, (unsigned long long)s.trims,
           (unsigned long long)s.returns_sent, (unsigned long long)s.returns_taken,
           (unsigned long long)s.held_bytes, (double)s.lock_wait_ns / 1e6,
           (double)s.lock_hold_ns / 1e6);
  const gpumem__pool_front_stats *timed = &runs[0].timed->sum;
  if (timed->refills || timed->give_backs)
    printf(",\"timed\":{\"pool_locks\":%llu,\"refills\":%llu,\"grows\":%llu,\"give_backs\":%llu,"
           "\"trims\":%llu,\"lock_wait_ms\":%.1f,\"lock_hold_ms\":%.1f}",
           (unsigned long long)timed->pool_locks, (unsigned long long)timed->refills,
           (unsigned long long)timed->grows, (unsigned long long)timed->give_backs,
           (unsigned long long)timed->trims, (double)timed->lock_wait_ns / 1e6,
           (double)timed->lock_hold_ns / 1e6);
  /* Every thread's, in thread order: on the GPU host, a thread runs the same work a third
   * faster or slower from one second to the next, whatever its processor (docs/gpu-runs.md,
   * eighteenth session). */
  printf(",\"each_thread_ms\":[");
  for (int i = 0; i < count; i++)
    printf("%s%.2f", i ? "," : "", thread_pass_ms(runs, i, repeat));
  printf("]}\n");
  fflush(stdout);
}

static void run_thread_count(const bench_context *ctx, int count, thread_mode mode) {
  thread_run *runs = calloc((size_t)count, sizeof *runs);
  pthread_barrier_t barrier;
  if (!runs || pthread_barrier_init(&barrier, NULL, (unsigned)count) != 0)
    out_of_host_memory();
  prepare_threads(runs, count, ctx->device, &barrier, mode);
  for (size_t i = 0; i < ctx->label_count; i++) {
    bench_allocator *alloc = bench_open_or_die(ctx->labels[i], ctx->device);
    /* Several repetitions, each with its own warm-up: a timed pass lasts milliseconds, so
     * threads that the host schedules late can skew any one of them. */
    uint64_t elapsed[BENCH_MAX_REPEAT];
    double slowest_clock_ghz[BENCH_MAX_REPEAT];
    timed_front_stats timed;
    run_threads(runs, count, alloc, ctx->repeat, ctx->stats ? &timed : NULL, elapsed,
                slowest_clock_ghz);
    if (ctx->stats)
      print_thread_stats(alloc, thread_mode_names[mode], runs, count, ctx->repeat);
    bench_close_or_die(alloc);
    bench_pass_times times = bench_pass_times_of(elapsed, ctx->repeat);
    double ops = (double)count * (double)thread_workload.steps;
    bench_result result = {.kind = BENCH_THREADS,
                           .resource = ctx->labels[i],
                           .workload = thread_workload.name,
                           .mode = thread_mode_names[mode],
                           .threads = count,
                           .ops = (uint64_t)ops,
                           .ns = times.median_ns / ops,
                           .repeats = ctx->repeat,
                           .ns_min = times.min_ns / ops,
                           .ns_max = times.max_ns / ops,
                           .slowest_thread_clock_ghz =
                               bench_median_of(slowest_clock_ghz, ctx->repeat)};
    bench_report(ctx, &result);
  }
  release_threads(runs, count);
  pthread_barrier_destroy(&barrier);
  free(runs);
}

static int parse_thread_count(const char *text, size_t length) {
  char *end;
  long value = strtol(text, &end, 10);
  if ((size_t)(end - text) != length || value < 1 || value > 4096) {
    fprintf(stderr, "gpumem-bench: bad thread count '%.*s' (1 to 4096)\n", (int)length, text);
    exit(EXIT_FAILURE);
  }
  return (int)value;
}

/* The modes listed in `text` (comma-separated names), as a set of bits by thread_mode. */
static unsigned parse_modes(const char *text) {
  unsigned modes = 0;
  for (const char *p = text; *p;) {
    size_t length = strcspn(p, ",");
    int m = 0;
    while (m < MODE_COUNT && (strlen(thread_mode_names[m]) != length ||
                              strncmp(p, thread_mode_names[m], length) != 0))
      m++;
    if (m == MODE_COUNT) {
      fprintf(stderr, "gpumem-bench: unknown threads mode '%.*s' (own, shared or producer)\n",
              (int)length, p);
      exit(EXIT_FAILURE);
    }
    modes |= 1u << m;
    p += length + (p[length] == ',');
  }
  return modes;
}

void bench_threads(const bench_context *ctx, const char *thread_counts, const char *modes) {
  unsigned mode_set = parse_modes(modes ? modes : "own");
  int counts[64];
  size_t count = 0;
  /* The whole list is read first, so that a typo stops the program before anything runs. */
  for (const char *p = thread_counts ? thread_counts : "1,4,16"; *p;) {
    size_t length = strcspn(p, ",");
    if (count == sizeof counts / sizeof counts[0]) {
      fprintf(stderr, "gpumem-bench: at most 64 thread counts\n");
      exit(EXIT_FAILURE);
    }
    counts[count++] = parse_thread_count(p, length);
    p += length + (p[length] == ',');
  }
  for (int m = 0; m < MODE_COUNT; m++)
    for (size_t i = 0; i < count && (mode_set & (1u << m)); i++)
      run_thread_count(ctx, counts[i], (thread_mode)m);
}
