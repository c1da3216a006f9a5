/* replay_run.c: runs a trace's operations as they were recorded: each recorded stream on a
 * stream of its own, and each recorded thread on a thread of its own.
 *
 * A trace of one thread runs on the calling thread; one of one stream, too, through the
 * same loop as the other workloads (bench_run_ops). A trace of several threads runs on as
 * many threads, which take turns in the recorded order: every operation waits for the one
 * before it, so that a block freed on one thread and allocated again on another is freed
 * first, as it was, and the allocator sees the very sequence of the recording (its memory
 * figures are then those of the program that was logged). The time per event then includes
 * handing the turn from thread to thread, as a program whose threads take turns pays it.
 *
 * A turn is handed over through a word per thread: the index of the operation the thread
 * may run. The thread that ran the operation before stores it, and wakes the waiter (a
 * futex) only if it went to sleep. A waiter spins up to SPIN_NS first: on a virtual machine
 * waking a sleeping thread takes tens of microseconds, which on the training traces (a
 * turn every thousand events or so) would count as tens of nanoseconds an event against
 * the allocator, and `--resource harness:none` shows what remains of the harness's own
 * cost. */
#include "bench/bench.h"
#include "core/biased_lock.h" /* gpumem__cpu_relax */

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NO_TURN UINT32_MAX
/* How long a waiter spins before it sleeps: longer than most turns of the traces. */
#define SPIN_NS 2000000
/* Spins between two yields of the processor: a waiter that shares its processor with the
 * thread whose turn it is (the host's choice, or both pinned to one) gives way to it at once
 * rather than at the end of its time slice. Without them a two-thread trace's replay with
 * no allocator at all took 9 to 760 ns an event on the H200 host pinned to two processors
 * (docs/gpu-runs.md, forty-sixth session), 770 to 1,200 pinned to one. */
#define YIELD_EVERY 256

static void synchronize_all(const bench_trace *trace, gpumem_stream *streams) {
  for (size_t i = 0; i < trace->stream_count; i++) {
    gpumem_status status = gpumem_stream_synchronize(streams[i]);
    if (status != GPUMEM_OK)
      bench_die(status, "synchronizing a stream after a replay pass");
  }
}

static gpumem_stream stream_of(const bench_trace *trace, gpumem_stream *streams, size_t op) {
  return trace->op_stream ? streams[trace->op_stream[op]] : streams[0];
}

/* Runs op `i`, and with `peak` reads the reserved bytes after an allocation. */
static inline gpumem_status run_op(bench_allocator *alloc, const bench_trace *trace,
                                   gpumem_stream *streams, void **slots, size_t i, uint64_t *peak,
                                   bench_failure *failure) {
  const bench_op *op = &trace->seq.ops[i];
  gpumem_stream stream = stream_of(trace, streams, i);
  gpumem_status status = op->is_free ? alloc->deallocate(alloc, slots[op->slot], op->bytes, stream)
                                     : alloc->allocate(alloc, op->bytes, stream, &slots[op->slot]);
  uint64_t reserved = 0;
  if (status == GPUMEM_OK && peak && !op->is_free &&
      (status = alloc->reserved(alloc, &reserved)) == GPUMEM_OK && reserved > *peak)
    *peak = reserved;
  return status == GPUMEM_OK ? status : bench_note_failure(status, i, op, failure);
}

/* ---- one thread ---- */

static gpumem_status run_on_this_thread(bench_allocator *alloc, const bench_trace *trace,
                                        gpumem_stream *streams, void **slots, uint64_t *peak,
                                        bench_failure *failure) {
  if (!peak && !trace->op_stream)
    return bench_run_ops(alloc, streams[0], trace->seq.ops, trace->seq.count, slots, failure);
  for (size_t i = 0; i < trace->seq.count; i++) {
    gpumem_status status = run_op(alloc, trace, streams, slots, i, peak, failure);
    if (status != GPUMEM_OK)
      return status;
  }
  return GPUMEM_OK;
}

/* ---- threads taking turns ---- */

typedef struct replay_team {
  bench_allocator *alloc;
  const bench_trace *trace;
  gpumem_stream *streams;
  void **slots;
  uint64_t *peak; /* written by whichever thread has the turn */
  const char *name;
  bench_failure *failure;
  _Atomic uint32_t *turn; /* per thread: the op it may run, or NO_TURN */
  atomic_int *sleeping;   /* per thread: it may be asleep on its turn word */
  pthread_barrier_t start, done;
} replay_team;

typedef struct replay_member {
  replay_team *team;
  uint16_t index;
  /* When it left the start barrier and ended its part: the pass runs from the first start
   * to the last end (the caller's own clock after the barrier could read after the work). */
  uint64_t start_ns, end_ns;
} replay_member;

/* Waits until `turn` is `op`: spins, then sleeps, having said so in `sleeping` (which the
 * hand-over reads after its store, both sequentially consistent: either it sees the flag
 * or the waiter sees the turn before it sleeps, and the futex rechecks the word). */
static void wait_for_turn(_Atomic uint32_t *turn, atomic_int *sleeping, uint32_t op) {
  uint64_t start = bench_now_ns();
  for (unsigned spin = 1; atomic_load_explicit(turn, memory_order_acquire) != op; spin++) {
    gpumem__cpu_relax();
    if (spin % YIELD_EVERY == 0) {
      if (bench_now_ns() - start > SPIN_NS)
        break;
      sched_yield();
    }
  }
  for (uint32_t seen; (seen = atomic_load(turn)) != op;) {
    atomic_store(sleeping, 1);
    if ((seen = atomic_load(turn)) != op)
      syscall(SYS_futex, turn, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
    atomic_store(sleeping, 0);
  }
}

static void hand_turn(replay_team *team, uint16_t thread, uint32_t op) {
  atomic_store(&team->turn[thread], op);
  if (atomic_load(&team->sleeping[thread]))
    syscall(SYS_futex, &team->turn[thread], FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *replay_member_run(void *arg) {
  replay_member *member = arg;
  replay_team *team = member->team;
  const bench_trace *trace = team->trace;
  size_t count = trace->seq.count;
  pthread_barrier_wait(&team->start);
  member->start_ns = bench_now_ns();
  for (size_t i = 0; i < count; i++) {
    if (trace->op_thread[i] != member->index)
      continue;
    if (i == 0 || trace->op_thread[i - 1] != member->index) /* else its turn goes on */
      wait_for_turn(&team->turn[member->index], &team->sleeping[member->index], (uint32_t)i);
    gpumem_status status =
        run_op(team->alloc, trace, team->streams, team->slots, i, team->peak, team->failure);
    if (status != GPUMEM_OK) /* the others wait for turns that never come: end it here */
      bench_die_failure("replay", team->alloc->label, team->name, team->failure);
    if (i + 1 < count && trace->op_thread[i + 1] != member->index)
      hand_turn(team, trace->op_thread[i + 1], (uint32_t)(i + 1));
  }
  member->end_ns = bench_now_ns();
  pthread_barrier_wait(&team->done);
  return NULL;
}

static gpumem_status run_on_threads(replay_team *team, uint64_t *elapsed_ns) {
  size_t threads = team->trace->thread_count;
  pthread_t *ids = calloc(threads, sizeof *ids);
  replay_member *members = calloc(threads, sizeof *members);
  team->turn = calloc(threads, sizeof *team->turn);
  team->sleeping = calloc(threads, sizeof *team->sleeping);
  if (!ids || !members || !team->turn || !team->sleeping ||
      pthread_barrier_init(&team->start, NULL, (unsigned)threads + 1) != 0 ||
      pthread_barrier_init(&team->done, NULL, (unsigned)threads + 1) != 0) {
    fprintf(stderr, "gpumem-bench: cannot start the replay's threads\n");
    exit(EXIT_FAILURE);
  }
  for (size_t t = 0; t < threads; t++) {
    atomic_init(&team->turn[t], NO_TURN);
    atomic_init(&team->sleeping[t], 0);
  }
  atomic_store(&team->turn[team->trace->op_thread[0]], 0);
  for (size_t t = 0; t < threads; t++) {
    members[t] = (replay_member){.team = team, .index = (uint16_t)t};
    if (pthread_create(&ids[t], NULL, replay_member_run, &members[t]) != 0) {
      fprintf(stderr, "gpumem-bench: cannot start %zu replay threads\n", threads);
      exit(EXIT_FAILURE);
    }
  }
  pthread_barrier_wait(&team->start);
  pthread_barrier_wait(&team->done);
  uint64_t first_start = UINT64_MAX, last_end = 0;
  for (size_t t = 0; t < threads; t++) {
    pthread_join(ids[t], NULL);
    first_start = members[t].start_ns < first_start ? members[t].start_ns : first_start;
    last_end = members[t].end_ns > last_end ? members[t].end_ns : last_end;
  }
  *elapsed_ns = last_end - first_start;
  pthread_barrier_destroy(&team->start);
  pthread_barrier_destroy(&team->done);
  free(team->turn);
  free(team->sleeping);
  free(members);
  free(ids);
  return GPUMEM_OK;
}

/* ---- a pass ---- */

static gpumem_status free_leftovers(bench_allocator *alloc, const bench_trace *trace,
                                    gpumem_stream *streams, void **slots, bench_failure *failure) {
  failure->phase = "freeing what the pass left live";
  const bench_sequence *seq = &trace->seq;
  for (size_t i = 0; i < seq->leftover_count; i++) {
    const bench_op *op = &seq->leftovers[i];
    gpumem_stream stream = trace->leftover_stream ? streams[trace->leftover_stream[i]] : streams[0];
    gpumem_status status = alloc->deallocate(alloc, slots[op->slot], op->bytes, stream);
    if (status != GPUMEM_OK)
      return bench_note_failure(status, i, op, failure);
  }
  synchronize_all(trace, streams);
  return GPUMEM_OK;
}

gpumem_status bench_replay_pass(bench_allocator *alloc, const bench_trace *trace,
                                gpumem_stream *streams, void **slots, const char *phase,
                                uint64_t *peak, uint64_t *elapsed_ns, bench_failure *failure,
                                const char *name) {
  failure->phase = phase;
  gpumem_status status = GPUMEM_OK;
  uint64_t elapsed = 0;
  if (trace->thread_count > 1) {
    replay_team team = {.alloc = alloc,
                        .trace = trace,
                        .streams = streams,
                        .slots = slots,
                        .peak = peak,
                        .name = name,
                        .failure = failure};
    status = run_on_threads(&team, &elapsed);
  } else {
    uint64_t start = bench_now_ns();
    status = run_on_this_thread(alloc, trace, streams, slots, peak, failure);
    elapsed = bench_now_ns() - start;
  }
  if (status == GPUMEM_OK)
    status = free_leftovers(alloc, trace, streams, slots, failure);
  if (status == GPUMEM_OK && elapsed_ns)
    *elapsed_ns = elapsed;
  return status;
}
