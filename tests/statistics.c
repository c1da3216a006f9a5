/* statistics.c: the statistics adaptor (stats) on the simulated device.
 *
 * One thread: current, peak and total bytes and counts after every step of fixed sequences
 * and of a long random one checked against a model of the counter stack (fresh counters at
 * a push, a pop folding them into those below, values below zero where pushed counters see
 * frees of older memory), refused and failed calls counting nothing, adaptors nested, the
 * live-figure queries answering for the whole stack, placement (a pool over stats(vmm))
 * counted, and every bad input refused with its message and nothing changed. Threads: the
 * current values and totals exact after threads that free each other's blocks, while
 * another pushes, reads and pops all along, and past the last per-thread slot; the peak
 * exact where the design says so (threads taking turns, flush_bytes=1) and within its
 * stated bound where it does not. */
#include "adaptors/stats.h"
#include "check.h"
#include "gpumem/sim.h"

#include <pthread.h>
#include <stdatomic.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* A value no successful call could leave in an out-parameter. */
static gpumem_resource *const untouched = (gpumem_resource *)(uintptr_t)0x5eed;

static gpumem_statistics get(gpumem_resource *mr) {
  gpumem_statistics s = {.size = sizeof s};
  CHECK_OK(gpumem_statistics_get(mr, &s));
  CHECK_EQ(s.version, GPUMEM_STATISTICS_VERSION);
  CHECK_EQ(s.size, sizeof s);
  return s;
}

static gpumem_statistics push(gpumem_resource *mr) {
  gpumem_statistics s = {.size = sizeof s};
  CHECK_OK(gpumem_statistics_push(mr, &s));
  return s;
}

static gpumem_statistics pop(gpumem_resource *mr) {
  gpumem_statistics s = {.size = sizeof s};
  CHECK_OK(gpumem_statistics_pop(mr, &s));
  return s;
}

/* The figures are {current, peak, total} of bytes, then of allocations. */
#define CHECK_FIGURES(s, cb, pb, tb, cc, pc, tc)                                                   \
  check_figures(__LINE__, (s), (cb), (pb), (tb), (cc), (pc), (tc))

static void check_figures(int line, gpumem_statistics s, int64_t cb, int64_t pb, int64_t tb,
                          int64_t cc, int64_t pc, int64_t tc) {
  if (s.bytes.current != cb || s.bytes.peak != pb || s.bytes.total != tb || s.count.current != cc ||
      s.count.peak != pc || s.count.total != tc)
    CHECK_FAIL_("line %d: bytes {%lld, %lld, %lld} count {%lld, %lld, %lld}, expected bytes "
                "{%lld, %lld, %lld} count {%lld, %lld, %lld}",
                line, (long long)s.bytes.current, (long long)s.bytes.peak, (long long)s.bytes.total,
                (long long)s.count.current, (long long)s.count.peak, (long long)s.count.total,
                (long long)cb, (long long)pb, (long long)tb, (long long)cc, (long long)pc,
                (long long)tc);
}

static void *allocate(gpumem_resource *mr, size_t bytes) {
  void *ptr = NULL;
  CHECK_OK(gpumem_allocate(mr, bytes, NULL, &ptr));
  return ptr;
}

/* ---- one thread ---- */

static void test_counting(void) {
  gpumem_resource *mr = check_build("stats(cuda)");
  CHECK_FIGURES(get(mr), 0, 0, 0, 0, 0, 0);
  void *ptrs[20];
  for (int i = 0; i < 10; i++)
    ptrs[i] = allocate(mr, 1000);
  CHECK_FIGURES(get(mr), 10000, 10000, 10000, 10, 10, 10);
  for (int i = 0; i < 10; i += 2)
    CHECK_OK(gpumem_deallocate(mr, ptrs[i], 1000, NULL));
  CHECK_FIGURES(get(mr), 5000, 10000, 10000, 5, 10, 10);
  for (int i = 10; i < 20; i++)
    ptrs[i] = allocate(mr, 1000);
  CHECK_FIGURES(get(mr), 15000, 15000, 20000, 15, 15, 20);
  /* Size 0 never reaches a resource; a refused free and a failed allocation change nothing. */
  void *none = (void *)0x77;
  CHECK_OK(gpumem_allocate(mr, 0, NULL, &none));
  CHECK_STATUS(gpumem_deallocate(mr, ptrs[1], 999, NULL), GPUMEM_ERR_MISUSE);
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEM_ALLOC, 1));
  void *failed = (void *)0x77;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 5000, NULL, &failed), GPUMEM_ERR_OUT_OF_MEMORY,
                   "stats(cuda");
  CHECK_PTR_EQ(failed, (void *)0x77);
  CHECK_FIGURES(get(mr), 15000, 15000, 20000, 15, 15, 20);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), 15000);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 15);
  CHECK_FAILS_WITH(gpumem_resource_release(mr), GPUMEM_ERR_MISUSE, "15 live allocations");
  for (int i = 1; i < 20; i++)
    if (i >= 10 || i % 2)
      CHECK_OK(gpumem_deallocate(mr, ptrs[i], 1000, NULL));
  CHECK_FIGURES(get(mr), 0, 15000, 20000, 0, 15, 20);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_PEAK_LIVE_BYTES), 15000);
  CHECK_OK(gpumem_resource_release(mr));
  printf("counting: current, peak and total; refused and failed calls count nothing\n");
}

static void test_stack(void) {
  gpumem_resource *mr = check_build("stats(pool(cuda, initial=1MiB))");
  void *old[3];
  for (int i = 0; i < 3; i++)
    old[i] = allocate(mr, 100);
  CHECK_FIGURES(push(mr), 300, 300, 300, 3, 3, 3); /* the counters before the push */
  CHECK_FIGURES(get(mr), 0, 0, 0, 0, 0, 0);
  void *fifty = allocate(mr, 50);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), 350); /* the whole stack */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_PEAK_LIVE_BYTES), 350);
  CHECK_FIGURES(push(mr), 50, 50, 50, 1, 1, 1);
  CHECK_OK(gpumem_deallocate(mr, old[0], 100, NULL)); /* allocated before both pushes */
  CHECK_FIGURES(get(mr), -100, 0, 0, -1, 0, 0);
  void *seventy = allocate(mr, 70);
  CHECK_OK(gpumem_deallocate(mr, seventy, 70, NULL));
  CHECK_FIGURES(get(mr), -100, 0, 70, -1, 0, 1); /* the peak of pushed counters starts at 0 */
  /* The popped counters; those below take them as if never pushed. */
  CHECK_FIGURES(pop(mr), -100, 0, 70, -1, 0, 1);
  CHECK_FIGURES(get(mr), -50, 50, 120, 0, 1, 2);
  CHECK_FIGURES(pop(mr), -50, 50, 120, 0, 1, 2);
  CHECK_FIGURES(get(mr), 250, 350, 420, 3, 4, 5);
  gpumem_statistics kept = {.size = sizeof kept, .version = 99};
  CHECK_FAILS_WITH(gpumem_statistics_pop(mr, &kept), GPUMEM_ERR_MISUSE,
                   "cannot pop the last counter pair");
  CHECK_EQ(kept.version, 99); /* untouched */
  CHECK_FIGURES(get(mr), 250, 350, 420, 3, 4, 5);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), 250);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 3);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_PEAK_LIVE_BYTES), 350);

  /* Deep stacks grow; NULL results are allowed; the whole stack folds as it was used. */
  void *eights[100];
  for (int i = 0; i < 100; i++) {
    CHECK_OK(gpumem_statistics_push(mr, NULL));
    eights[i] = allocate(mr, 8);
  }
  for (int i = 0; i < 100; i++)
    CHECK_OK(gpumem_deallocate(mr, eights[i], 8, NULL));
  CHECK_FIGURES(get(mr), 8 - 800, 8, 8, 1 - 100, 1, 1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), 250);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_PEAK_LIVE_BYTES), 250 + 800);
  for (int i = 0; i < 100; i++)
    CHECK_OK(gpumem_statistics_pop(mr, NULL));
  CHECK_FIGURES(get(mr), 250, 1050, 1220, 3, 103, 105);
  CHECK_OK(gpumem_deallocate(mr, old[1], 100, NULL));
  CHECK_OK(gpumem_deallocate(mr, old[2], 100, NULL));
  CHECK_OK(gpumem_deallocate(mr, fifty, 50, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("stack: push starts fresh counters, pop folds them back\n");
}

/* An adaptor over an adaptor counts what reaches it; frees made through the inner one of
 * memory the outer one gave take the inner one below zero. */
static void test_nested(void) {
  gpumem_resource *outer = check_build("stats(cuda)"), *inner;
  CHECK_OK(gpumem_statistics_create(outer, NULL, &inner));
  void *a = allocate(outer, 1000), *b = allocate(outer, 2000);
  void *c = allocate(inner, 300), *d = allocate(inner, 400);
  CHECK_FIGURES(get(outer), 3700, 3700, 3700, 4, 4, 4);
  CHECK_FIGURES(get(inner), 700, 700, 700, 2, 2, 2);
  CHECK_OK(gpumem_deallocate(inner, a, 1000, NULL));
  CHECK_OK(gpumem_deallocate(inner, b, 2000, NULL));
  CHECK_FIGURES(get(outer), 700, 3700, 3700, 2, 4, 4);
  CHECK_FIGURES(get(inner), -2300, 700, 700, 0, 2, 2);
  CHECK_U64_EQ(check_query(inner, GPUMEM_QUERY_LIVE_BYTES), 0); /* below zero reads as 0 */
  CHECK_OK(gpumem_deallocate(outer, c, 300, NULL));
  CHECK_OK(gpumem_deallocate(outer, d, 400, NULL));
  CHECK_FIGURES(get(outer), 0, 3700, 3700, 0, 4, 4);
  CHECK_OK(gpumem_resource_release(inner));
  CHECK_OK(gpumem_resource_release(outer));
  printf("nested adaptors: each counts what reaches it\n");
}

/* ---- a long random sequence against a model of the counter stack ---- */

typedef struct model_frame {
  gpumem_statistics_counter bytes, count;
} model_frame;

static void model_add(gpumem_statistics_counter *c, int64_t value) {
  c->current += value;
  if (value > 0) {
    c->total += value;
    c->peak = c->current > c->peak ? c->current : c->peak;
  }
}

static gpumem_statistics_counter model_fold(gpumem_statistics_counter parent,
                                            gpumem_statistics_counter child) {
  int64_t lifted = parent.current + child.peak;
  return (gpumem_statistics_counter){parent.current + child.current,
                                     parent.peak > lifted ? parent.peak : lifted,
                                     parent.total + child.total};
}

static void check_model(gpumem_statistics s, const model_frame *m, int step) {
  if (memcmp(&s.bytes, &m->bytes, sizeof s.bytes) != 0 ||
      memcmp(&s.count, &m->count, sizeof s.count) != 0)
    CHECK_FAIL_("step %d: bytes {%lld, %lld, %lld} count {%lld, %lld, %lld}, the model bytes "
                "{%lld, %lld, %lld} count {%lld, %lld, %lld}",
                step, (long long)s.bytes.current, (long long)s.bytes.peak, (long long)s.bytes.total,
                (long long)s.count.current, (long long)s.count.peak, (long long)s.count.total,
                (long long)m->bytes.current, (long long)m->bytes.peak, (long long)m->bytes.total,
                (long long)m->count.current, (long long)m->count.peak, (long long)m->count.total);
}

static void *touch_and_free(void *arg) {
  void *ptr = allocate(arg, 12345);
  CHECK_OK(gpumem_deallocate(arg, ptr, 12345, NULL));
  return NULL;
}

/* `shared`: another thread allocates and frees through the adaptor first, so that the
 * sequence runs with thresholds and reads stop the threads; that thread leaves nothing
 * unadded behind, so the figures stay exact. */
static void run_model(const char *spec, bool shared) {
  gpumem_resource *mr = check_build(spec);
  if (shared) {
    pthread_t other;
    CHECK_EQ(pthread_create(&other, NULL, touch_and_free, mr), 0);
    CHECK_EQ(pthread_join(other, NULL), 0);
  }
  enum { steps = 6000, most_live = 200, most_depth = 24 };
  static void *ptrs[most_live];
  static size_t sizes[most_live];
  static model_frame frames[most_depth + 1];
  memset(frames, 0, sizeof frames);
  frames[0].bytes.total = frames[0].bytes.peak = shared ? 12345 : 0;
  frames[0].count.total = frames[0].count.peak = shared ? 1 : 0;
  int live = 0, depth = 0;
  uint64_t x = 0x2545F4914F6CDD1Dull;
  for (int step = 0; step < steps; step++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    unsigned what = (unsigned)(x % 100);
    model_frame *top = &frames[depth];
    if (what < 4 && depth < most_depth) {
      check_model(push(mr), top, step);
      frames[++depth] = (model_frame){{0, 0, 0}, {0, 0, 0}};
    } else if (what < 8 && depth > 0) {
      check_model(pop(mr), top, step);
      model_frame *parent = &frames[--depth];
      parent->bytes = model_fold(parent->bytes, top->bytes);
      parent->count = model_fold(parent->count, top->count);
    } else if (what < 55 && live < most_live) {
      size_t bytes = 1 + (size_t)(x >> 20) % (3 * MiB);
      ptrs[live] = allocate(mr, bytes);
      sizes[live++] = bytes;
      model_add(&top->bytes, (int64_t)bytes);
      model_add(&top->count, 1);
    } else if (live > 0) {
      int i = (int)((x >> 40) % (uint64_t)live);
      CHECK_OK(gpumem_deallocate(mr, ptrs[i], sizes[i], NULL));
      model_add(&top->bytes, -(int64_t)sizes[i]);
      model_add(&top->count, -1);
      ptrs[i] = ptrs[--live];
      sizes[i] = sizes[live];
    }
    check_model(get(mr), &frames[depth], step);
  }
  while (live > 0) {
    live--;
    CHECK_OK(gpumem_deallocate(mr, ptrs[live], sizes[live], NULL));
  }
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_resource_release(mr));
  printf("%s%s: %d random steps as the model says\n", spec, shared ? " (after another thread)" : "",
         steps);
}

/* ---- placement ---- */

static void test_placement(void) {
  gpumem_resource *pool = check_build("pool(stats(vmm(piece=2MiB)))"), *stats;
  CHECK_OK(gpumem_resource_upstream(pool, &stats));
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_OK(gpumem_resource_get_capabilities(stats, &caps));
  CHECK_EQ(caps.places_at_address, 1);
  void *ptrs[4];
  for (int i = 0; i < 4; i++)
    ptrs[i] = allocate(pool, 10 * MiB);
  gpumem_statistics s = get(stats);
  CHECK_U64_EQ(s.bytes.current, check_query(pool, GPUMEM_QUERY_RESERVED_BYTES));
  CHECK(s.count.current >= 1);
  CHECK_OK(gpumem_deallocate(pool, ptrs[1], 10 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(pool, ptrs[2], 10 * MiB, NULL));
  size_t released = 0;
  CHECK_OK(gpumem_pool_trim(pool, &released));
  CHECK(released > 0);
  gpumem_statistics after = get(stats);
  CHECK_U64_EQ(after.bytes.current, check_query(pool, GPUMEM_QUERY_RESERVED_BYTES));
  CHECK_EQ(after.bytes.peak, s.bytes.current);
  CHECK_EQ(after.bytes.total, s.bytes.total); /* unmapping allocates nothing */
  CHECK_OK(gpumem_deallocate(pool, ptrs[0], 10 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(pool, ptrs[3], 10 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(pool));
  printf("placement: a pool over stats(vmm) grows in place, counted; its trim too\n");
}

/* ---- bad input ---- */

static void test_bad_input(void) {
  gpumem_resource *cuda = check_build("cuda"), *out = untouched;
  gpumem_statistics_options huge = {.flush_bytes = SIZE_MAX};
  CHECK_FAILS_WITH(gpumem_statistics_create(cuda, &huge, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "flush_bytes is past INT64_MAX");
  gpumem_statistics_options many = {.flush_count = UINT64_MAX};
  CHECK_FAILS_WITH(gpumem_statistics_create(cuda, &many, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "flush_count is past INT64_MAX");
  CHECK_FAILS_WITH(gpumem_statistics_create(NULL, NULL, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "upstream resource is NULL");
  CHECK_FAILS_WITH(gpumem_statistics_create(cuda, NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "out is NULL");
  CHECK_PTR_EQ(out, untouched);

  /* A resource that keeps no statistics says so, for each call, and is left as it was. */
  gpumem_statistics s = {.size = sizeof s, .version = 99};
  CHECK_FAILS_WITH(gpumem_statistics_get(cuda, &s), GPUMEM_ERR_UNSUPPORTED,
                   "cuda keeps no statistics");
  CHECK_FAILS_WITH(gpumem_statistics_push(cuda, &s), GPUMEM_ERR_UNSUPPORTED, "stats(...)");
  CHECK_FAILS_WITH(gpumem_statistics_pop(cuda, NULL), GPUMEM_ERR_UNSUPPORTED,
                   "keeps no statistics");
  gpumem_resource *pool = check_build("pool(stats(cuda), initial=1MiB)");
  CHECK_FAILS_WITH(gpumem_statistics_get(pool, &s), GPUMEM_ERR_UNSUPPORTED, "pool(stats(cuda");
  CHECK_OK(gpumem_resource_release(pool));
  CHECK_EQ(s.version, 99);

  gpumem_resource *mr = check_build("stats(cuda)");
  void *ptr = allocate(mr, 4096);
  CHECK_FAILS_WITH(gpumem_statistics_get(NULL, &s), GPUMEM_ERR_INVALID_ARGUMENT,
                   "the resource is NULL");
  CHECK_FAILS_WITH(gpumem_statistics_get(mr, NULL), GPUMEM_ERR_INVALID_ARGUMENT, "stats is NULL");
  CHECK_FAILS_WITH(gpumem_statistics_push(NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  gpumem_statistics small = {.size = sizeof(size_t), .version = 99};
  CHECK_FAILS_WITH(gpumem_statistics_get(mr, &small), GPUMEM_ERR_INVALID_ARGUMENT,
                   "smaller than any version");
  CHECK_FAILS_WITH(gpumem_statistics_push(mr, &small), GPUMEM_ERR_INVALID_ARGUMENT,
                   "sizeof(gpumem_statistics)");
  CHECK_FAILS_WITH(gpumem_statistics_pop(mr, NULL), GPUMEM_ERR_MISUSE, "no counters were pushed");
  CHECK_EQ(small.version, 99);
  CHECK_FIGURES(get(mr), 4096, 4096, 4096, 1, 1, 1); /* no push happened */
  /* A caller built against a later, larger struct gets the fields this version knows. */
  struct {
    gpumem_statistics known;
    int64_t later[2];
  } larger = {.known.size = sizeof larger, .later = {-7, -7}};
  CHECK_OK(gpumem_statistics_get(mr, &larger.known));
  CHECK_EQ(larger.known.size, sizeof larger);
  CHECK_EQ(larger.known.bytes.current, 4096);
  CHECK_EQ(larger.later[0], -7);
  CHECK_EQ(larger.later[1], -7);
  CHECK_OK(gpumem_deallocate(mr, ptr, 4096, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(cuda));
  printf("bad input: refused with a message, nothing changed\n");
}

static void test_round_trip(void) {
  static const char *const specs[] = {"stats(pool(vmm))",
                                      "stats(cuda, flush_bytes=4KiB, flush_count=8)",
                                      "pool(stats(vmm))", "stats(stats(arena(vmm)))"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    check_describe_round_trip(specs[i]);
  gpumem_resource *mr = check_build("stats(cuda)");
  char text[256];
  CHECK_OK(gpumem_resource_describe(mr, text, sizeof text));
  CHECK(strcmp(text, "stats(cuda, flush_bytes=1048576, flush_count=64)") == 0);
  CHECK_OK(gpumem_resource_release(mr));
  printf("describe builds an equal resource\n");
}

/* ---- threads ---- */

enum { workers = 4, blocks = 300, rounds = 12 };

typedef struct worker {
  gpumem_resource *mr;
  pthread_barrier_t *barrier;
  int index;
  void *ptrs[blocks];
  size_t sizes[blocks];
} worker;

static worker team[workers];
static atomic_llong round_bytes[rounds];
static atomic_int workers_done;

/* Each round every worker allocates its blocks, then frees the next worker's. */
static void *work(void *arg) {
  worker *w = arg;
  uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(w->index + 1);
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < blocks; k++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      w->sizes[k] = 1 + (size_t)(x % (64 * KiB));
      w->ptrs[k] = allocate(w->mr, w->sizes[k]);
      atomic_fetch_add(&round_bytes[r], (long long)w->sizes[k]);
    }
    pthread_barrier_wait(w->barrier);
    const worker *next = &team[(w->index + 1) % workers];
    for (int k = 0; k < blocks; k++)
      CHECK_OK(gpumem_deallocate(w->mr, next->ptrs[k], next->sizes[k], NULL));
    pthread_barrier_wait(w->barrier);
  }
  atomic_fetch_add(&workers_done, 1);
  return NULL;
}

/* Workers free each other's blocks while this thread pushes, reads and pops: afterwards the
 * current values are 0 and the totals exact, and the peaks within the stated bound of the
 * true ones (all blocks of a round live at once), or exact with flush_bytes=1 and
 * flush_count=1 but for the allocations in flight. */
static void test_threads(const char *spec, int64_t flush_bytes, int64_t flush_count) {
  gpumem_resource *mr = check_build(spec);
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, workers);
  pthread_t threads[workers];
  atomic_store(&workers_done, 0);
  for (int r = 0; r < rounds; r++)
    atomic_store(&round_bytes[r], 0);
  for (int i = 0; i < workers; i++) {
    team[i] = (worker){.mr = mr, .barrier = &barrier, .index = i};
    CHECK_EQ(pthread_create(&threads[i], NULL, work, &team[i]), 0);
  }
  int pushes = 0;
  while (atomic_load(&workers_done) < workers) {
    gpumem_statistics before = push(mr), now = get(mr);
    CHECK(before.bytes.peak >= before.bytes.current && now.count.peak >= now.count.current);
    CHECK(before.count.total >= before.count.current && now.bytes.total >= 0);
    pop(mr);
    pushes++;
  }
  for (int i = 0; i < workers; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  pthread_barrier_destroy(&barrier);
  gpumem_statistics s = get(mr);
  int64_t total = 0, peak = 0;
  for (int r = 0; r < rounds; r++) {
    total += atomic_load(&round_bytes[r]);
    peak = atomic_load(&round_bytes[r]) > peak ? atomic_load(&round_bytes[r]) : peak;
  }
  CHECK_EQ(s.bytes.current, 0);
  CHECK_EQ(s.count.current, 0);
  CHECK_EQ(s.bytes.total, total);
  CHECK_EQ(s.count.total, (int64_t)workers * blocks * rounds);
  int64_t off_bytes = (workers - 1) * (flush_bytes + (int64_t)(64 * KiB));
  int64_t off_count = (workers - 1) * (flush_count + 1);
  if (llabs(s.bytes.peak - peak) > off_bytes ||
      llabs(s.count.peak - (int64_t)workers * blocks) > off_count)
    CHECK_FAIL_("%s: peaks %lld bytes and %lld allocations, the true ones %lld and %d (allowed "
                "off by %lld and %lld)",
                spec, (long long)s.bytes.peak, (long long)s.count.peak, (long long)peak,
                workers * blocks, (long long)off_bytes, (long long)off_count);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_resource_release(mr));
  printf("%s: %d threads freeing each other's blocks, %d pushes and pops beside: exact current "
         "and totals; peaks %lld of %lld bytes, %lld of %d allocations\n",
         spec, workers, pushes, (long long)s.bytes.peak, (long long)peak, (long long)s.count.peak,
         workers * blocks);
}

typedef struct call {
  gpumem_resource *mr;
  size_t bytes;
  bool keep;
} call;

/* Allocates in a thread of its own, and frees unless asked to keep the block. */
static void *allocate_in_thread(void *arg) {
  call *c = arg;
  void *ptr = allocate(c->mr, c->bytes);
  if (!c->keep)
    CHECK_OK(gpumem_deallocate(c->mr, ptr, c->bytes, NULL));
  return ptr;
}

static void *in_thread(gpumem_resource *mr, size_t bytes, bool keep) {
  pthread_t thread;
  call c = {mr, bytes, keep};
  void *ptr;
  CHECK_EQ(pthread_create(&thread, NULL, allocate_in_thread, &c), 0);
  CHECK_EQ(pthread_join(thread, &ptr), 0);
  return ptr;
}

/* Threads taking turns: the peak stays exact, since the first thread's changes went to the
 * shared sums when the second came. A thread that ends with changes not yet added (100 KiB
 * kept) makes the other's sums miss them: the peak may then be short by less than
 * flush_bytes, and is exact again with flush_bytes=1. */
static void test_peak_bound(void) {
  gpumem_resource *mr = check_build("stats(cuda)");
  void *x = allocate(mr, 2 * MiB);
  in_thread(mr, 100 * KiB, false);
  CHECK_FIGURES(get(mr), 2 * MiB, 2 * MiB + 100 * KiB, 2 * MiB + 100 * KiB, 1, 2, 2);
  void *z = allocate(mr, 300 * KiB);
  CHECK_OK(gpumem_deallocate(mr, z, 300 * KiB, NULL));
  CHECK_FIGURES(get(mr), 2 * MiB, 2 * MiB + 300 * KiB, 2 * MiB + 400 * KiB, 1, 2, 3);
  CHECK_OK(gpumem_deallocate(mr, x, 2 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  static const char *const specs[] = {"stats(cuda)", "stats(cuda, flush_bytes=1, flush_count=1)"};
  for (int exact = 0; exact < 2; exact++) {
    mr = check_build(specs[exact]);
    x = allocate(mr, 2 * MiB);
    void *y = in_thread(mr, 100 * KiB, true);
    z = allocate(mr, 300 * KiB);
    CHECK_OK(gpumem_deallocate(mr, z, 300 * KiB, NULL));
    gpumem_statistics s = get(mr);
    int64_t truth = 2 * MiB + 400 * KiB;
    CHECK_EQ(s.bytes.current, 2 * MiB + 100 * KiB);
    if (exact) {
      CHECK_EQ(s.bytes.peak, truth);
      CHECK_EQ(s.count.peak, 3);
    } else {
      CHECK(s.bytes.peak <= truth && s.bytes.peak > truth - (int64_t)MiB);
      CHECK(s.count.peak <= 3 && s.count.peak > 3 - 64);
    }
    printf("%s: a block another thread kept, not yet added: peak %lld of %lld bytes\n",
           specs[exact], (long long)s.bytes.peak, (long long)truth);
    CHECK_OK(gpumem_deallocate(mr, y, 100 * KiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, x, 2 * MiB, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  }
}

enum { crowd = GPUMEM__THREAD_SLOTS + 6 };

static pthread_barrier_t crowd_barrier;

static void *crowd_member(void *arg) {
  void *ptr = allocate(arg, 1000);
  pthread_barrier_wait(&crowd_barrier);
  CHECK_OK(gpumem_deallocate(arg, ptr, 1000, NULL));
  return NULL;
}

/* More threads at once than the adaptor has slots: the rest count under its lock. */
static void test_crowd(void) {
  gpumem_resource *mr = check_build("stats(pool(cuda, initial=1MiB))");
  pthread_barrier_init(&crowd_barrier, NULL, crowd);
  pthread_t threads[crowd];
  for (int i = 0; i < crowd; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, crowd_member, mr), 0);
  for (int i = 0; i < crowd; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  pthread_barrier_destroy(&crowd_barrier);
  gpumem_statistics s = get(mr);
  CHECK_EQ(s.bytes.current, 0);
  CHECK_EQ(s.bytes.total, 1000 * crowd);
  CHECK_EQ(s.count.total, crowd);
  CHECK(s.count.peak >= 1 && s.count.peak <= crowd);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_resource_release(mr));
  printf("%d threads at once (%d slots): exact current and totals\n", crowd, GPUMEM__THREAD_SLOTS);
}

/* ---- the validator ---- */

/* The level-2 validator finds a corrupted counter stack and a slot open before its thread
 * joined, naming each; undone, the resource validates again. */
static void test_validator(void) {
  gpumem_resource *mr = check_build("stats(pool(cuda, initial=4MiB))");
  stats_resource *self = (stats_resource *)mr;
  void *p;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &p));
  gpumem_statistics before = {.size = sizeof before};
  CHECK_OK(gpumem_statistics_push(mr, &before));
  CHECK_OK(gpumem__validate(mr));
  int64_t peak = self->saved[0].bytes.peak;
  self->saved[0].bytes.peak = self->saved[0].bytes.current - 1;
  CHECK_FAILS_WITH(gpumem__validate(mr), GPUMEM_ERR_INTERNAL, "stats: saved counters");
  self->saved[0].bytes.peak = peak;
  CHECK_OK(gpumem__validate(mr));
  int unjoined = 0;
  while (self->joined >> unjoined & 1)
    unjoined++;
  atomic_store(&self->slots[unjoined].gate.closed, 0);
  CHECK_FAILS_WITH(gpumem__validate(mr), GPUMEM_ERR_INTERNAL, "stats: a slot is blocked");
  atomic_store(&self->slots[unjoined].gate.closed, 1);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_statistics_pop(mr, &before));
  CHECK_OK(gpumem_deallocate(mr, p, 1000, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("the validator finds a corrupted stack and slot\n");
}

int main(void) {
  check_init_backend();
  if (!check_on_sim()) {
    printf("skipped: these checks fail the simulated device's calls\n");
    return CHECK_SKIP_CODE;
  }
  test_counting();
  test_stack();
  test_nested();
  run_model("stats(pool(vmm))", false);
  run_model("stats(pool(vmm))", true);
  run_model("stats(arena(vmm), flush_bytes=1, flush_count=1)", true);
  test_placement();
  test_bad_input();
  test_round_trip();
  test_threads("stats(pool(cuda, initial=64MiB))", (int64_t)MiB, 64);
  test_threads("stats(arena(vmm))", (int64_t)MiB, 64);
  test_threads("stats(arena(vmm), flush_bytes=1, flush_count=1)", 1, 1);
  test_peak_bound();
  test_crowd();
  test_validator();
  printf("statistics: all checks passed\n");
  return 0;
}
