/* fault_sweep.c: every failure of every device call a workload makes is handled cleanly.
 *
 * A workload (create a resource from a spec, a stream, allocations of several sizes, a
 * device buffer that is filled, grown, shrunk and read back, then everything freed) is
 * first run clean to count its device calls of each kind. Then, for each kind and each of
 * its calls in turn, the simulated device is told to fail exactly that call, and the
 * workload runs again (a pool is trimmed in it too). Each step that fails must return a failure
 * status with a message, leave the resource as it was (same live count), and succeed when retried
 * (the injected failure happens once). At the end nothing leaks (device and managed memory in use
 * are back where it started) and no cross-stream hazard was seen. The same sweep runs through the
 * faulty adaptor, failing each allocation in turn, also under a pool over a user resource and under
 * the retry adaptor (where a failure for want of memory is retried and absorbed, and any other is
 * not), and over a driver pool of the program's. A spec written "threads:SPEC" has another thread
 * allocate and free once first, so that a pool's calls go through its thread fronts, and
 * another free blocks that the workload's thread allocated, which go back to its front.
 * Simulated device only. */
#include "check.h"
#include "suballoc/pool.h"
#include "forwarding.h"
#include "gpumem/sim.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

static gpumem_resource *sweep_resource; /* the workload's resource, for live-count checks */
static int failures_seen;

static uint64_t live_count_or_zero(void) {
  uint64_t count = 0;
  if (sweep_resource)
    CHECK_OK(gpumem_resource_query(sweep_resource, GPUMEM_QUERY_LIVE_COUNT, &count));
  return count;
}

/* Runs `call`; if it fails, checks the failure and that nothing changed, then runs it again,
 * which must succeed. */
#define STEP(call)                                                                                 \
  do {                                                                                             \
    uint64_t live_before_ = live_count_or_zero();                                                  \
    gpumem_status step_status_ = (call);                                                           \
    if (step_status_ != GPUMEM_OK) {                                                               \
      failures_seen++;                                                                             \
      CHECK(strlen(gpumem_last_error_message()) > 0);                                              \
      CHECK_U64_EQ(live_count_or_zero(), live_before_);                                            \
      CHECK_OK(call);                                                                              \
    }                                                                                              \
  } while (0)

enum { buffer_bytes = 3000 };

typedef struct other_thread {
  gpumem_resource *mr;
  gpumem_stream stream;
} other_thread;

/* Another thread's allocation and free: a pool is then used by two threads, and has its
 * thread fronts (which threads meeting at its lock would make). Its steps are checked as the
 * workload's (the workload waits for it). */
static void *use_from_another_thread(void *arg) {
  other_thread *t = arg;
  void *ptr = NULL;
  STEP(gpumem_allocate(t->mr, 256, t->stream, &ptr));
  STEP(gpumem_deallocate(t->mr, ptr, 256, t->stream));
  return NULL;
}

/* Blocks this thread allocated, freed by another thread on a stream of its own: the pool's
 * fronts send them back to this thread's front in a batch, which its later allocations take
 * after a wait for that stream. */
enum { handed_blocks = 8, handed_bytes = 160 << 10 };

typedef struct handed {
  gpumem_resource *mr;
  gpumem_stream stream;
  void *ptrs[handed_blocks];
} handed;

static void *free_on_own_stream(void *arg) {
  handed *h = arg;
  for (int i = 0; i < handed_blocks; i++)
    STEP(gpumem_deallocate(h->mr, h->ptrs[i], handed_bytes, h->stream));
  return NULL;
}

static void hand_blocks_to_another_thread(gpumem_resource *mr, gpumem_stream stream) {
  handed h = {.mr = mr};
  STEP(gpumem_stream_create(0, &h.stream));
  for (int i = 0; i < handed_blocks; i++)
    STEP(gpumem_allocate(mr, handed_bytes, stream, &h.ptrs[i]));
  pthread_t thread;
  CHECK_EQ(pthread_create(&thread, NULL, free_on_own_stream, &h), 0);
  CHECK_EQ(pthread_join(thread, NULL), 0);
  for (int i = 0; i < handed_blocks; i++)
    STEP(gpumem_allocate(mr, handed_bytes, stream, &h.ptrs[i]));
  for (int i = 0; i < handed_blocks; i++)
    STEP(gpumem_deallocate(mr, h.ptrs[i], handed_bytes, stream));
  STEP(gpumem_stream_synchronize(h.stream));
  STEP(gpumem_stream_destroy(h.stream));
}

static void workload(const char *spec) {
  bool threads = strncmp(spec, "threads:", 8) == 0;
  spec += threads ? 8 : 0;
  gpumem_resource *mr = NULL;
  STEP(make_resource(spec, &mr)); /* a spec, or a name of forwarding.h */
  sweep_resource = mr;
  gpumem_stream stream = NULL;
  STEP(gpumem_stream_create(0, &stream));
  if (threads) {
    CHECK(gpumem__pool_make_fronts(mr)); /* every threads: spec is a pool */
    pthread_t thread;
    other_thread other = {mr, stream};
    CHECK_EQ(pthread_create(&thread, NULL, use_from_another_thread, &other), 0);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    hand_blocks_to_another_thread(mr, stream);
  }

  static const size_t sizes[] = {1, 256, 5000, 1 << 20, 3 << 20};
  void *ptrs[sizeof sizes / sizeof sizes[0]];
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    STEP(gpumem_allocate(mr, sizes[i], stream, &ptrs[i]));
    STEP(gpumem_memset_async(ptrs[i], (int)i, sizes[i], stream));
  }

  /* A second stream's freed block, larger than any the workload's stream has free: a pool
   * asks that stream's seal event whether its work is done (gpumem__pool_take_idle) before it
   * steals or grows. A failed query is absorbed, and the pool steals or grows instead. */
  if (strncmp(spec, "pool", 4) == 0) {
    gpumem_stream side = NULL;
    void *freed = NULL, *taken = NULL;
    STEP(gpumem_stream_create(0, &side));
    STEP(gpumem_allocate(mr, 8 << 20, side, &freed));
    STEP(gpumem_deallocate(mr, freed, 8 << 20, side));
    STEP(gpumem_allocate(mr, 8 << 20, stream, &taken));
    STEP(gpumem_deallocate(mr, taken, 8 << 20, stream));
    STEP(gpumem_stream_synchronize(side));
    STEP(gpumem_stream_destroy(side));
  }

  unsigned char host[buffer_bytes], back[buffer_bytes];
  for (int i = 0; i < buffer_bytes; i++)
    host[i] = (unsigned char)(i * 7);
  gpumem_buffer *buf = NULL;
  STEP(gpumem_buffer_create_from_host(host, buffer_bytes, stream, mr, &buf));
  STEP(gpumem_buffer_resize(buf, 4 * buffer_bytes, stream));
  STEP(gpumem_buffer_shrink_to_fit(buf, stream));
  STEP(gpumem_buffer_resize(buf, buffer_bytes, stream));
  STEP(gpumem_buffer_shrink_to_fit(buf, stream));
  memset(back, 0, sizeof back);
  STEP(gpumem_buffer_copy_to_host(buf, back, buffer_bytes));
  CHECK(memcmp(back, host, buffer_bytes) == 0);
  STEP(gpumem_buffer_destroy(buf));

  /* By default a pool over vmm also gives holes back for a request of a size it served
   * before, once its live peak spans 32 of vmm's pieces: a hole of 16 units under 52 live,
   * and a second request of 18 units while the first is live, a unit half a piece (16 MiB,
   * or 1 MiB over 2 MiB pieces). First, while the pool holds little free memory that the
   * blocks could take instead of growing. Not under a limit of 1 GiB, which the peak would
   * pass. */
  if (strncmp(spec, "pool(", 5) == 0 && strstr(spec, "vmm") &&
      !strstr(spec, "release_holes_over") && !strstr(spec, "limit(")) {
    size_t unit = strstr(spec, "piece=2MiB") ? 1 << 20 : 16 << 20;
    void *hole = NULL, *pin = NULL, *held = NULL, *served = NULL, *again = NULL;
    STEP(gpumem_allocate(mr, 16 * unit, stream, &hole));
    STEP(gpumem_allocate(mr, 2 << 20, stream, &pin));
    STEP(gpumem_allocate(mr, 50 * unit, stream, &held));
    STEP(gpumem_allocate(mr, 18 * unit, stream, &served));
    STEP(gpumem_deallocate(mr, hole, 16 * unit, stream));
    STEP(gpumem_allocate(mr, 18 * unit, stream, &again));
    STEP(gpumem_deallocate(mr, again, 18 * unit, stream));
    STEP(gpumem_deallocate(mr, served, 18 * unit, stream));
    STEP(gpumem_deallocate(mr, held, 50 * unit, stream));
    STEP(gpumem_deallocate(mr, pin, 2 << 20, stream));
  }

  /* A hole under a live block, then a request it does not fit: a pool that gives back
   * holes before it grows (release_holes_over) waits for the device, unmaps the hole and
   * grows. By default a pool over vmm does so for a request of about half its pass's live
   * peak up to all of it (is_dominant in pool_trim.c): a 64 MiB hole and a 66 MiB request,
   * with a few MiB live besides (over 2 MiB pieces both are large blocks, mostly of 4 MiB
   * pieces: every call of their moves fails once too). */
  size_t hole_bytes = 8 << 20, request_bytes = 12 << 20;
  bool releases = strstr(spec, "release_holes_over") != NULL;
  if (!releases && strncmp(spec, "pool(", 5) == 0 && strstr(spec, "vmm")) {
    releases = true;
    hole_bytes = 64 << 20;
    request_bytes = 66 << 20;
  }
  if (releases) {
    void *hole = NULL, *pin = NULL, *grown = NULL;
    STEP(gpumem_allocate(mr, hole_bytes, stream, &hole));
    STEP(gpumem_allocate(mr, 2 << 20, stream, &pin));
    STEP(gpumem_deallocate(mr, hole, hole_bytes, stream));
    STEP(gpumem_allocate(mr, request_bytes, stream, &grown));
    STEP(gpumem_deallocate(mr, grown, request_bytes, stream));
    STEP(gpumem_deallocate(mr, pin, 2 << 20, stream));
  }

  /* A pool trimmed with the largest block freed and the others live: over vmm with small
   * pieces that unmaps part of a growth step. */
  size_t last = sizeof sizes / sizeof sizes[0] - 1;
  STEP(gpumem_deallocate(mr, ptrs[last], sizes[last], stream));
  if (strncmp(spec, "pool", 4) == 0)
    STEP(gpumem_pool_trim(mr, NULL));
  for (size_t i = 0; i < last; i++)
    STEP(gpumem_deallocate(mr, ptrs[i], sizes[i], stream));
  STEP(gpumem_stream_synchronize(stream));
  STEP(gpumem_stream_destroy(stream));
  sweep_resource = NULL;
  STEP(gpumem_resource_release(mr));
}

/* Device and managed memory in use: a leak of either shows. */
static uint64_t memory_used(void) {
  uint64_t used = 0, managed = 0;
  CHECK_OK(gpumem_sim_device_used(0, &used));
  CHECK_OK(gpumem_sim_managed_used(0, &managed));
  return used + managed;
}

static void sweep_device_calls(const char *spec) {
  uint64_t before[GPUMEM_SIM_CALL_KIND_COUNT], calls[GPUMEM_SIM_CALL_KIND_COUNT];
  for (int k = 0; k < GPUMEM_SIM_CALL_KIND_COUNT; k++)
    before[k] = gpumem_sim_call_count((gpumem_sim_call)k);
  workload(spec);
  for (int k = 0; k < GPUMEM_SIM_CALL_KIND_COUNT; k++)
    calls[k] = gpumem_sim_call_count((gpumem_sim_call)k) - before[k];

  int runs = 0;
  for (int k = 0; k < GPUMEM_SIM_CALL_KIND_COUNT; k++) {
    for (uint64_t nth = 1; nth <= calls[k]; nth++) {
      uint64_t used_before = memory_used();
      int failures_before = failures_seen;
      CHECK_OK(gpumem_sim_fail_call((gpumem_sim_call)k, nth));
      if (getenv("FAULT_SWEEP_TRACE"))
        fprintf(stderr, "failing call %llu of kind %d\n", (unsigned long long)nth, k);
      uint64_t kind_before = gpumem_sim_call_count((gpumem_sim_call)k);
      uint64_t absorbed_before = gpumem__absorbed_errors();
      workload(spec);
      /* An upstream whose last release failed under a resource that was destroyed (a
       * binning resource's pool) is kept and released again at the next release. */
      CHECK_OK(gpumem_resource_release(NULL));
      /* The planned failure happened (the workload makes the same calls every time): either
       * a call reported it, or the resource absorbed it by another way (an arena falling
       * back to its global pool, a kept upstream released again), which shows as more calls of that
       * kind than a clean run, or as a failure the library counts as absorbed by design (a
       * pool's release of holes before growing, which then grows as it would have). */
      uint64_t kind_calls = gpumem_sim_call_count((gpumem_sim_call)k) - kind_before;
      bool absorbed = kind_calls > calls[k] || gpumem__absorbed_errors() > absorbed_before;
      if (getenv("FAULT_SWEEP_TRACE"))
        fprintf(stderr, "seen %d absorbed %d kind_calls %llu clean %llu\n",
                failures_seen - failures_before, (int)absorbed, (unsigned long long)kind_calls,
                (unsigned long long)calls[k]);
      CHECK(failures_seen == failures_before + 1 || (failures_seen == failures_before && absorbed));
      CHECK_U64_EQ(memory_used(), used_before);
      CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
      runs++;
    }
  }
  printf("%-28s %d device calls failed in turn, each handled\n", spec, runs);
}

/* The faulty adaptor fails each allocation of the workload in turn: `format` is the spec
 * with %llu where fail_at's value goes. With `absorbed`, every failure is retried away (the
 * retry adaptor over an out-of-memory fault): the workload sees none and leaks nothing. The
 * sweep starts at allocation `first` (a pool's first is its creation's, which a retried
 * creation meets again) and must see at least `least_runs` failures. */
/* The device synchronizations of one run of the workload over `spec`. */
static uint64_t workload_syncs(const char *spec) {
  uint64_t before = gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE);
  workload(spec);
  return gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE) - before;
}

static void sweep_faulty_allocations(const char *format, bool absorbed, uint64_t first,
                                     int least_runs) {
  char spec[256];
  int runs = 0;
  /* With absorbed failures the workload's own synchronizations are a baseline: a failure
   * retried away adds the retry's wait for the device (fail_at=0 injects none). */
  uint64_t baseline_syncs = 0;
  if (absorbed) {
    snprintf(spec, sizeof spec, format, 0ull);
    baseline_syncs = workload_syncs(spec);
  }
  for (uint64_t nth = first; nth <= 16; nth++) {
    snprintf(spec, sizeof spec, format, (unsigned long long)nth);
    uint64_t used_before = memory_used();
    int failures_before = failures_seen;
    uint64_t syncs = workload_syncs(spec);
    CHECK_U64_EQ(memory_used(), used_before);
    if (absorbed) {
      CHECK_EQ(failures_seen, failures_before);
      if (syncs == baseline_syncs)
        break; /* nth is past the workload's last allocation: nothing was retried */
      CHECK(syncs > baseline_syncs);
      runs++;
      continue;
    }
    if (failures_seen == failures_before)
      break; /* nth is past the workload's last allocation */
    CHECK_EQ(failures_seen, failures_before + 1);
    runs++;
  }
  CHECK(runs >= least_runs);
  printf("%-28s %d allocations failed in turn, each handled\n", format, runs);
}

int main(int argc, char **argv) {
  check_init_backend();
  if (strcmp(gpumem_backend_name(), "sim") != 0) {
    printf("skipped: fault injection needs the simulated device\n");
    return CHECK_SKIP_CODE;
  }
  static const char *const specs[] = {"cuda",
                                      "managed(prefetch=true)",
                                      "async(initial=1MiB)",
                                      "pinned_host",
                                      "faulty(cuda)",
                                      "pool(cuda, initial=1)",
                                      "pool(vmm)",
                                      "pool(faulty(async))",
                                      "arena(cuda, size=1, superblock=1MiB)",
                                      "arena(vmm)",
                                      "pool(vmm(piece=2MiB))",
                                      "pool(vmm(piece=2MiB), release_holes_over=100)",
                                      ("pool(vmm(piece=2MiB), release_holes_over=100, "
                                       "release_holes_time=100)"),
                                      "fixed_size(vmm, block=4MiB, prealloc=2)",
                                      "binning(pool(cuda, initial=1), min=10, max=16)",
                                      "retry(cuda)",
                                      "pool(retry(vmm))",
                                      "user:cuda",
                                      "pool:user:cuda",
                                      "retry(pool:user:cuda)",
                                      "limit(pool(vmm), max=1GiB)",
                                      "pool(limit(vmm(piece=2MiB), max=1GiB))",
                                      "limit(arena(vmm), max=1GiB)",
                                      "aligned(cuda, alignment=4096, threshold=1MiB)",
                                      "pool(aligned(vmm, alignment=4MiB))",
                                      "prefetch(managed)",
                                      "prefetch(pool(managed, initial=1))",
                                      "tracking(pool(vmm), stacks=true)",
                                      "pool(tracking(vmm(piece=2MiB)))",
                                      "tracking(arena(vmm))",
                                      "stats(pool(vmm))",
                                      "pool(stats(vmm(piece=2MiB)))",
                                      "stats(arena(vmm))",
                                      "log(pool(vmm), file=fault-sweep-log-%p.csv)",
                                      "pool(log(vmm(piece=2MiB), file=fault-sweep-log-%p.csv))",
                                      "threads:pool(vmm)",
                                      "threads:pool(cuda, initial=1)",
                                      "threads:pool(limit(vmm(piece=2MiB), max=1GiB))",
                                      "threads:pool(vmm(piece=2MiB), release_holes_over=100)",
                                      "async(managed=true, initial=1MiB)",
                                      "pool(async(managed=true), initial=1)"};
  if (argc > 1) { /* the specs given, for looking at one resource */
    for (int i = 1; i < argc; i++)
      sweep_device_calls(argv[i]);
    return 0;
  }
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    sweep_device_calls(specs[i]);
  /* async over a driver pool of the program's (another async resource's, keeping nothing). */
  gpumem_async_options keep_nothing = {.release_threshold = 1};
  gpumem_resource *owner;
  void *pool;
  char spec[96];
  CHECK_OK(gpumem_async_create(0, &keep_nothing, &owner));
  CHECK_OK(gpumem_async_pool_handle(owner, &pool));
  snprintf(spec, sizeof spec, "async(pool=%llu)", (unsigned long long)(uintptr_t)pool);
  sweep_device_calls(spec);
  snprintf(spec, sizeof spec, "pool(async(pool=%llu), initial=1)",
           (unsigned long long)(uintptr_t)pool);
  sweep_device_calls(spec);
  CHECK_OK(gpumem_resource_release(owner));
  sweep_faulty_allocations("faulty(cuda, fail_at=%llu)", false, 1, 8);
  sweep_faulty_allocations("faulty(async, fail_at=%llu)", false, 1, 8);
  sweep_faulty_allocations("faulty(pool(cuda, initial=1), fail_at=%llu)", false, 1, 8);
  sweep_faulty_allocations("user:faulty(cuda, fail_at=%llu)", false, 1, 8);
  sweep_faulty_allocations("pool:user:faulty(cuda, fail_at=%llu)", false, 2, 1);
  sweep_faulty_allocations("pool(retry(faulty(cuda, fail_at=%llu)), initial=1)", false, 2, 1);
  sweep_faulty_allocations("retry(faulty(cuda, fail_at=%llu, status=out_of_memory))", true, 1, 8);
  sweep_faulty_allocations("limit(faulty(pool(vmm), fail_at=%llu), max=1GiB)", false, 1, 8);
  sweep_faulty_allocations("faulty(limit(pool(vmm), max=1GiB), fail_at=%llu)", false, 1, 8);
  sweep_faulty_allocations("prefetch(faulty(managed, fail_at=%llu))", false, 1, 8);
  sweep_faulty_allocations("tracking(faulty(pool(vmm), fail_at=%llu))", false, 1, 8);
  sweep_faulty_allocations("stats(faulty(pool(vmm), fail_at=%llu))", false, 1, 8);
  /* The log's file is named by the process (%p): the debug-level run of this test runs
   * beside this one in the same folder, and a file both write to may be cut under either. */
  sweep_faulty_allocations("log(faulty(cuda, fail_at=%llu), file=fault-sweep-log-%%p.csv)", false,
                           1, 8);
  char log[64];
  snprintf(log, sizeof log, "fault-sweep-log-%ld.csv", (long)getpid());
  remove(log);
  return 0;
}
