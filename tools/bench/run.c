/* run.c: the loops that drive an allocator through a precomputed operation sequence.
 *
 * The timed loop is kept to what is being measured: it reads one operation, calls the
 * allocator, and checks the status. Everything else (drawing sizes, choosing what to free,
 * mapping trace pointers, counting bytes) happened when the sequence was built. */
#include "bench/bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BENCH_UNLIKELY(x) __builtin_expect(!!(x), 0)

uint64_t bench_now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

void bench_sequence_free(bench_sequence *seq) {
  free(seq->ops);
  free(seq->leftovers);
  *seq = (bench_sequence){0};
}

/* Kept out of line so that the loops stay small. */
__attribute__((noinline)) gpumem_status
bench_note_failure(gpumem_status status, size_t step, const bench_op *op, bench_failure *failure) {
  failure->step = step;
  failure->bytes = op->bytes;
  failure->is_free = op->is_free != 0;
  failure->status = status;
  snprintf(failure->message, sizeof failure->message, "%s", gpumem_last_error_message());
  return status;
}

gpumem_status bench_run_ops(bench_allocator *alloc, gpumem_stream stream, const bench_op *ops,
                            size_t count, void **slots, bench_failure *failure) {
  /* Loaded once: the calls could change any memory, so the compiler would reload them. */
  gpumem_status (*const allocate)(bench_allocator *, size_t, gpumem_stream, void **) =
      alloc->allocate;
  gpumem_status (*const deallocate)(bench_allocator *, void *, size_t, gpumem_stream) =
      alloc->deallocate;
  for (size_t i = 0; i < count; i++) {
    const bench_op *op = &ops[i];
    gpumem_status status = op->is_free ? deallocate(alloc, slots[op->slot], op->bytes, stream)
                                       : allocate(alloc, op->bytes, stream, &slots[op->slot]);
    if (BENCH_UNLIKELY(status != GPUMEM_OK))
      return bench_note_failure(status, i, op, failure);
  }
  return GPUMEM_OK;
}

gpumem_status bench_run_ops_tracking_reserved(bench_allocator *alloc, gpumem_stream stream,
                                              const bench_op *ops, size_t count, void **slots,
                                              uint64_t *peak, bench_failure *failure) {
  for (size_t i = 0; i < count; i++) {
    const bench_op *op = &ops[i];
    if (op->is_free) {
      gpumem_status status = alloc->deallocate(alloc, slots[op->slot], op->bytes, stream);
      if (status != GPUMEM_OK)
        return bench_note_failure(status, i, op, failure);
      continue;
    }
    gpumem_status status = alloc->allocate(alloc, op->bytes, stream, &slots[op->slot]);
    uint64_t reserved = 0;
    if (status == GPUMEM_OK)
      status = alloc->reserved(alloc, &reserved);
    if (status != GPUMEM_OK)
      return bench_note_failure(status, i, op, failure);
    if (reserved > *peak)
      *peak = reserved;
  }
  return GPUMEM_OK;
}

static void synchronize(bench_allocator *alloc, gpumem_stream stream) {
  gpumem_status status = gpumem_stream_synchronize(stream);
  if (status != GPUMEM_OK) {
    char what[512];
    snprintf(what, sizeof what, "synchronizing the stream after a pass of '%s'", alloc->label);
    bench_die(status, what);
  }
}

gpumem_status bench_finish_pass(bench_allocator *alloc, gpumem_stream stream,
                                const bench_sequence *seq, void **slots, bench_failure *failure) {
  failure->phase = "freeing what the pass left live";
  gpumem_status status =
      bench_run_ops(alloc, stream, seq->leftovers, seq->leftover_count, slots, failure);
  if (status == GPUMEM_OK)
    synchronize(alloc, stream);
  return status;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median_of(double *values, int count) {
  qsort(values, (size_t)count, sizeof *values, compare_double);
  return (values[(count - 1) / 2] + values[count / 2]) / 2;
}

static uint64_t multiplies_ns(uint64_t multiplies) {
  /* Multiplies only: an add after each multiply costs a cycle of its own on some processors
   * (AMD's) and none on others (the Xeon of the GPU host). Odd by odd stays odd, so the
   * value never sticks at zero. */
  uint64_t value = 3, start = bench_now_ns();
  for (uint64_t i = 0; i < multiplies; i++) {
    value *= 0x9E3779B97F4A7C15u;
    /* Keeps each multiply in the loop, waiting for the one before. */
    __asm__ volatile("" : "+r"(value));
  }
  return bench_now_ns() - start;
}

static uint64_t adds_ns(uint64_t rounds) {
  uint64_t a0 = 1, a1 = 2, a2 = 3, a3 = 4, a4 = 5, a5 = 6, a6 = 7, a7 = 8;
  uint64_t start = bench_now_ns();
  for (uint64_t i = 0; i < rounds; i++) {
    /* Eight operations a round, each waiting only for the one before it in its pair and for
     * its own last round: the ports' throughput bounds the loop, not their latency. */
    a0 += i;
    a1 ^= a0;
    a2 += i;
    a3 ^= a2;
    a4 += i;
    a5 ^= a4;
    a6 += i;
    a7 ^= a6;
    __asm__ volatile(""
                     : "+r"(a0), "+r"(a1), "+r"(a2), "+r"(a3), "+r"(a4), "+r"(a5), "+r"(a6),
                       "+r"(a7));
  }
  return bench_now_ns() - start;
}

/* The shortest of three timings of `loop` over `work`: a try the thread was preempted in
 * reads long, which made the clock read low and the adds a cycle high (118 under ctest -j8
 * on the CI-like host). */
static uint64_t shortest_ns(uint64_t (*loop)(uint64_t), uint64_t work) {
  uint64_t shortest = UINT64_MAX;
  for (int t = 0; t < 3; t++) {
    uint64_t elapsed = loop(work);
    shortest = elapsed < shortest ? elapsed : shortest;
  }
  return shortest;
}

double bench_host_clock_ghz(void) {
  enum { MULTIPLIES = 1 << 17 };
  uint64_t elapsed = shortest_ns(multiplies_ns, MULTIPLIES);
  return elapsed ? 3.0 * MULTIPLIES / (double)elapsed : 0;
}

double bench_host_adds_per_cycle(double clock_ghz) {
  enum { ROUNDS = 1 << 15 };
  uint64_t elapsed = shortest_ns(adds_ns, ROUNDS);
  return elapsed && clock_ghz > 0 ? 8.0 * ROUNDS / (double)elapsed / clock_ghz : 0;
}

bench_pass_times bench_pass_times_of(const uint64_t *elapsed, int count) {
  double ns[BENCH_MAX_REPEAT];
  for (int i = 0; i < count; i++)
    ns[i] = (double)elapsed[i];
  double median = bench_median_of(ns, count); /* sorts ns */
  return (bench_pass_times){.median_ns = median, .min_ns = ns[0], .max_ns = ns[count - 1]};
}

bench_host_reading bench_read_host(void) {
  double clock_ghz = bench_host_clock_ghz();
  return (bench_host_reading){clock_ghz, bench_host_adds_per_cycle(clock_ghz)};
}

bench_host_reading bench_host_across(bench_host_reading before) {
  bench_host_reading after = bench_read_host();
  return (bench_host_reading){(before.clock_ghz + after.clock_ghz) / 2,
                              (before.adds_per_cycle + after.adds_per_cycle) / 2};
}

bench_pass_times bench_pass_times_beside(const uint64_t *elapsed, const bench_host_reading *host,
                                         int count) {
  double clock_ghz[BENCH_MAX_REPEAT], cycles[BENCH_MAX_REPEAT], adds[BENCH_MAX_REPEAT];
  for (int i = 0; i < count; i++) {
    clock_ghz[i] = host[i].clock_ghz;
    adds[i] = host[i].adds_per_cycle;
    cycles[i] = (double)elapsed[i] * host[i].clock_ghz;
  }
  bench_pass_times times = bench_pass_times_of(elapsed, count);
  times.clock_ghz = bench_median_of(clock_ghz, count);
  times.median_cycles = bench_median_of(cycles, count);
  times.adds_per_cycle = bench_median_of(adds, count);
  return times;
}

gpumem_status bench_run_passes(bench_allocator *alloc, gpumem_stream stream,
                               const bench_sequence *seq, void **slots, const char *phase,
                               int count, bench_pass_times *times, bench_failure *failure) {
  uint64_t elapsed[BENCH_MAX_REPEAT];
  bench_host_reading host[BENCH_MAX_REPEAT];
  gpumem_status status = GPUMEM_OK;
  for (int i = 0; i < count && status == GPUMEM_OK; i++) {
    bench_host_reading before = bench_read_host();
    status = bench_run_pass(alloc, stream, seq, slots, phase, &elapsed[i], failure);
    /* The pass ends with the stream's synchronization; the host is read after it. */
    host[i] = bench_host_across(before);
  }
  if (status != GPUMEM_OK)
    return status;
  *times = bench_pass_times_beside(elapsed, host, count);
  return GPUMEM_OK;
}

gpumem_status bench_run_pass(bench_allocator *alloc, gpumem_stream stream,
                             const bench_sequence *seq, void **slots, const char *phase,
                             uint64_t *elapsed_ns, bench_failure *failure) {
  failure->phase = phase;
  uint64_t start = bench_now_ns();
  gpumem_status status = bench_run_ops(alloc, stream, seq->ops, seq->count, slots, failure);
  uint64_t end = bench_now_ns();
  if (status == GPUMEM_OK)
    status = bench_finish_pass(alloc, stream, seq, slots, failure);
  if (status == GPUMEM_OK)
    *elapsed_ns = end - start;
  return status;
}
