/* bench.h: what the parts of gpumem-bench share.
 *
 * The benchmark measures gpumem's resources and two raw driver references (cuMemAlloc and a
 * driver pool) through one small allocator interface, so that each workload is written once
 * and every figure can be read as a ratio to the references measured in the same run.
 *
 * Every workload is turned into an array of operations before any timing starts (sizes,
 * and the slot of a pointer table each operation fills or empties), so that a timed loop
 * is an array walk that does nothing but allocate and free. */
#ifndef GPUMEM_BENCH_H
#define GPUMEM_BENCH_H

#include "gpumem.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The labels of the references, accepted by --resource and added by --compare. */
#define BENCH_REF_CUMEMALLOC "driver:cuMemAlloc"
#define BENCH_REF_ASYNC "driver:async"
/* No allocator: the harness's own cost (allocators.c). */
#define BENCH_HARNESS_NONE "harness:none"

/* ---------------------------------------------------------------------------------------
 * Allocators: a gpumem resource or a driver reference
 * ------------------------------------------------------------------------------------- */

typedef struct bench_allocator bench_allocator;

struct bench_allocator {
  /* The --resource spec, or one of the BENCH_REF_ labels. */
  const char *label;
  /* As gpumem_allocate: 0 bytes gives NULL. On failure the thread's gpumem error message
   * says why. */
  gpumem_status (*allocate)(bench_allocator *self, size_t bytes, gpumem_stream stream, void **ptr);
  /* As gpumem_deallocate: NULL is a no-op. */
  gpumem_status (*deallocate)(bench_allocator *self, void *ptr, size_t bytes, gpumem_stream stream);
  /* Bytes held from the device now. NULL where the allocator holds exactly what is live
   * (cuMemAlloc): the caller counts live bytes itself. */
  gpumem_status (*reserved)(bench_allocator *self, uint64_t *bytes);
  /* The most bytes held from the device so far; GPUMEM_ERR_UNSUPPORTED where unknown. */
  gpumem_status (*peak_reserved)(bench_allocator *self, uint64_t *bytes);
  /* Destroys the allocator; everything it gave must have been freed and synchronized. */
  gpumem_status (*close)(bench_allocator *self);
  /* The gpumem resource measured; NULL for the references. */
  gpumem_resource *resource;
};

/* A fresh allocator for `label` on `device`: a gpumem resource built from the spec, or a
 * driver reference. On failure the thread's gpumem error message says why. */
gpumem_status bench_allocator_open(const char *label, int device, bench_allocator **out);

/* When `spec` names "user_cuda", defines it for specs (user_resource.c): a resource written
 * with the public API for user-written resources, forwarding to a cuda resource of
 * `device`. */
gpumem_status bench_define_user_resource(const char *spec, int device);

/* As bench_allocator_open and close, exiting the program with a message on failure. */
bench_allocator *bench_open_or_die(const char *label, int device);
void bench_close_or_die(bench_allocator *alloc);

/* ---------------------------------------------------------------------------------------
 * Operation sequences
 * ------------------------------------------------------------------------------------- */

typedef struct bench_op {
  size_t bytes;  /* requested size; a free passes the size its allocation asked for */
  uint32_t slot; /* the pointer-table entry an allocation fills or a free empties */
  uint32_t is_free;
} bench_op;

typedef struct bench_sequence {
  bench_op *ops;
  size_t count;
  size_t slot_count;   /* entries the pointer table needs */
  bench_op *leftovers; /* frees of what is still live after the last op */
  size_t leftover_count;
  uint64_t peak_live_bytes; /* high-water mark of requested bytes along the sequence */
} bench_sequence;

void bench_sequence_free(bench_sequence *seq);

/* A replayed trace: its operations, and the thread and stream each was recorded on, as
 * indices in order of first appearance (NULL where the trace has one thread, or one
 * stream). replay_run.c runs it with a thread per recorded thread and a stream per
 * recorded stream, the threads taking turns in the recorded order. */
typedef struct bench_trace {
  bench_sequence seq;
  uint16_t *op_thread;       /* per op */
  uint16_t *op_stream;       /* per op */
  uint16_t *leftover_stream; /* per leftover: the stream of its allocation */
  size_t thread_count, stream_count;
} bench_trace;

/* The most threads or streams a replayed trace may have. */
#define BENCH_TRACE_MAX_THREADS 4096
#define BENCH_TRACE_MAX_STREAMS 4096

/* Where a run stopped when an operation failed. */
typedef struct bench_failure {
  const char *phase; /* "warm-up pass", "timed pass", "freeing leftovers", ... */
  size_t step;       /* index of the failed operation within its phase */
  size_t bytes;
  bool is_free;
  gpumem_status status;
  char message[8192]; /* gpumem_last_error_message() of the failing thread, with its report */
} bench_failure;

/* Runs `count` ops in order with `slots` as the pointer table. Returns GPUMEM_OK, or the
 * status of the first failed op (described in *failure, whose phase the caller sets;
 * nothing after it runs). */
/* Records in *failure that step `step` (op) failed with `status`, and the thread's message;
 * returns status. */
gpumem_status bench_note_failure(gpumem_status status, size_t step, const bench_op *op,
                                 bench_failure *failure);

gpumem_status bench_run_ops(bench_allocator *alloc, gpumem_stream stream, const bench_op *ops,
                            size_t count, void **slots, bench_failure *failure);

/* As bench_run_ops, untimed: reads the allocator's reserved bytes (it must have the
 * `reserved` hook) after every allocation and raises *peak to the highest. */
gpumem_status bench_run_ops_tracking_reserved(bench_allocator *alloc, gpumem_stream stream,
                                              const bench_op *ops, size_t count, void **slots,
                                              uint64_t *peak, bench_failure *failure);

/* Frees what the sequence leaves live, then synchronizes the stream (untimed). A failed
 * synchronization exits the program (bench_die). */
gpumem_status bench_finish_pass(bench_allocator *alloc, gpumem_stream stream,
                                const bench_sequence *seq, void **slots, bench_failure *failure);

/* Runs the whole sequence, then frees its leftovers and synchronizes the stream. Only the
 * sequence itself is timed: *elapsed_ns receives its duration. `phase` names the pass in
 * a failure report. A failed synchronization exits the program (bench_die). */
gpumem_status bench_run_pass(bench_allocator *alloc, gpumem_stream stream,
                             const bench_sequence *seq, void **slots, const char *phase,
                             uint64_t *elapsed_ns, bench_failure *failure);

/* The durations of repeated passes: their median, fastest and slowest, in nanoseconds. Where
 * the host's clock was measured beside each pass (bench_run_passes), its median in GHz, the
 * median of each pass's duration in cycles of that clock and the median of the processor's
 * independent adds a cycle (bench_host_adds_per_cycle); 0 where it was not. */
typedef struct bench_pass_times {
  double median_ns, min_ns, max_ns;
  double clock_ghz, median_cycles, adds_per_cycle;
} bench_pass_times;

#define BENCH_MAX_REPEAT 1000

/* The median, fastest and slowest of `count` durations (1 to BENCH_MAX_REPEAT). */
bench_pass_times bench_pass_times_of(const uint64_t *elapsed, int count);

/* The clock this thread runs at now, in GHz: the rate of a chain of dependent 64-bit
 * multiplies, taken as 3 cycles each (their latency on x86 cores of the last decade; other
 * processors may differ, so compare figures within one kind). On a shared host it falls
 * when the processor is clocked down or given to another guest. */
double bench_host_clock_ghz(void);

/* How much of its core this thread has now: eight independent chains of adds and xors, in
 * operations per cycle of `clock_ghz`. About 3.7 on a core of its own (x86 cores of the last
 * decade have four such ports); 2.0 to 2.6 on the GPU host while another tenant runs on the
 * core's other hyperthread, which takes a third to a half more cycles of the random
 * workloads (docs/gpu-runs.md, twenty-sixth session, run 6). 0 where clock_ghz is. */
double bench_host_adds_per_cycle(double clock_ghz);

/* The host beside a pass: its clock in GHz and its core's adds a cycle, each the mean of a
 * reading before the pass and one after. */
typedef struct bench_host_reading {
  double clock_ghz, adds_per_cycle;
} bench_host_reading;

/* A reading of the host now, before a pass. */
bench_host_reading bench_read_host(void);
/* The host across a pass that began at `before`: the mean of it and a reading now. */
bench_host_reading bench_host_across(bench_host_reading before);
/* bench_pass_times_of, with the medians of the host's readings across the passes and of
 * each pass's cycles of its clock. */
bench_pass_times bench_pass_times_beside(const uint64_t *elapsed, const bench_host_reading *host,
                                         int count);

/* The median of `count` values (at least 1), which it sorts. */
double bench_median_of(double *values, int count);

/* `count` passes (1 to BENCH_MAX_REPEAT) of bench_run_pass, one after another, with the
 * host's clock measured before and after each (a fraction of a millisecond). */
gpumem_status bench_run_passes(bench_allocator *alloc, gpumem_stream stream,
                               const bench_sequence *seq, void **slots, const char *phase,
                               int count, bench_pass_times *times, bench_failure *failure);

/* Runs the trace's ops (timed: *elapsed_ns), then frees what it leaves live and waits for
 * every stream (untimed). `streams` has trace->stream_count streams. With `peak`, reads
 * the allocator's reserved bytes after each allocation (alloc->reserved) and raises *peak
 * to the highest. A failure is reported as bench_run_ops does, or ends the program when it
 * happens on a replay thread (bench_die_failure with `label` and `name`). */
gpumem_status bench_replay_pass(bench_allocator *alloc, const bench_trace *trace,
                                gpumem_stream *streams, void **slots, const char *phase,
                                uint64_t *peak, uint64_t *elapsed_ns, bench_failure *failure,
                                const char *name);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* ---------------------------------------------------------------------------------------
 * The run: options, results, errors
 * ------------------------------------------------------------------------------------- */

/* The simulated device's calls a replay counts (bench_result.sim_calls), in this order. */
#define BENCH_SIM_CALL_KINDS 4

typedef struct bench_context {
  int device;
  const char **labels; /* allocators to measure, references first */
  size_t label_count;
  const char *backend; /* gpumem_backend_name(): "cuda" or "sim" */
  const char *gpu;     /* the device's name on a GPU, NULL on the simulated device */
  int repeat;          /* timed passes (random), timed runs of all threads (threads) or warm passes
                        * (replay): the median counts */
  bool stats;          /* replay: print each resource's JSON stats after its replay */
} bench_context;

typedef enum bench_kind { BENCH_RANDOM, BENCH_THREADS, BENCH_REPLAY } bench_kind;

typedef struct bench_result {
  bench_kind kind;
  const char *resource;
  const char *workload; /* random and threads: the workload's name; replay: the trace's */
  const char *mode;     /* threads: "own", "shared" or "producer"; NULL otherwise */
  int threads;
  uint64_t ops;   /* operations (random, threads) or events (replay) */
  double ns;      /* per operation; replay: per event of the cold pass */
  double ns_warm; /* replay: per event of the warm pass */
  /* With repeated passes: how many, and the fastest and slowest (of the timed passes for
   * random and threads, the warm ones for replay); ns and ns_warm are then the median. */
  int repeats;
  double ns_min, ns_max;
  /* random and replay: the host's clock beside the timed (replay: warm) passes, in GHz, and
   * the median pass's cycles of it per operation (event); 0 where not measured. A figure
   * that moves between hosts with the same cycles is the host's. */
  double clock_ghz, cycles;
  /* random and replay: the processor's independent adds a cycle beside the same passes, the
   * median (bench_host_adds_per_cycle); 0 where not measured. */
  double adds_per_cycle;
  /* threads: the host's clock of the thread that finished last in each run (the one all
   * wait for), the median over the runs; 0 where not measured. */
  double slowest_thread_clock_ghz;
  int streams; /* replay: the streams it runs on */
  uint64_t peak_live_bytes;
  uint64_t peak_reserved_bytes; /* replay: after the cold pass */
  /* replay: after the cold and the warm passes; above peak_reserved_bytes where a loop of
   * the workload keeps growing the allocator (a varying-shape trace run again places its
   * blocks differently) */
  uint64_t peak_reserved_bytes_warm;
  const char *peak_reserved_from; /* "query" or "replay" */
  /* replay on the simulated device: the device calls of the warm passes that order streams
   * (event records, event queries, stream waits, synchronizations), per event; a figure the
   * simulation counts and a GPU does not, where these calls cost hundreds of nanoseconds */
  bool has_sim_calls;
  double sim_calls[BENCH_SIM_CALL_KINDS];
} bench_result;

/* Prints the result as one JSON line on stdout (with its speedups over references already
 * reported in the same group) and keeps it for bench_print_table. */
void bench_report(const bench_context *ctx, const bench_result *result);

/* The stats of the allocator's resource as JSON (gpumem_resource_stats_json; free() it), or
 * NULL for a reference. Exits the program on failure. */
char *bench_stats_json(const bench_allocator *alloc);

/* Prints the stats of the resource `label` that replayed `trace` as one JSON line on stdout:
 * {"bench":"replay_stats","resource":...,"trace":...,"stats":{...}}. */
void bench_report_stats(const char *label, const char *trace, const char *json);

/* Prints every reported result as a human-readable table on stdout. */
void bench_print_table(void);

/* Prints "gpumem-bench: <what>: <status name>: <message>" to stderr and exits with 1. */
_Noreturn void bench_die(gpumem_status status, const char *what);

/* Reports a failed operation (resource, step, size, message) and exits with 1. */
_Noreturn void bench_die_failure(const char *bench, const char *resource, const char *workload,
                                 const bench_failure *failure);

/* The producer/consumer pass of the threads benchmark (handoff.c): the producer allocates
 * `sizes` on its stream and deals each allocation to a consumer's queue (frees them itself
 * when there are no consumers); each consumer frees what it gets on its own stream until
 * the producer's end. Allocations and frees are each an operation. Failures are noted in
 * *failure; every thread plays its part to the end all the same. */
typedef struct bench_handoff bench_handoff;
bench_handoff *bench_handoff_new(int consumers); /* NULL: out of host memory */
void bench_handoff_free(bench_handoff *h);
gpumem_status bench_handoff_produce(bench_handoff *h, bench_allocator *alloc, gpumem_stream stream,
                                    const size_t *sizes, size_t count, bench_failure *failure);
gpumem_status bench_handoff_consume(bench_handoff *h, int consumer, bench_allocator *alloc,
                                    gpumem_stream stream, bench_failure *failure);

/* The workloads. Each measures every allocator of ctx; they exit on failure. */
void bench_random(const bench_context *ctx, const char *workloads);
/* thread_counts: a list such as "1,4,16"; modes: a list of "own", "shared" and "producer"
 * (NULL: own). */
void bench_threads(const bench_context *ctx, const char *thread_counts, const char *modes);
void bench_replay(const bench_context *ctx, char **traces, size_t trace_count);

#endif /* GPUMEM_BENCH_H */
