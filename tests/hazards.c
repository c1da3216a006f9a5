/* hazards.c: the simulated device catches memory handed to one stream while another
 * stream's work on it is still pending, the silent data race a GPU would never report.
 *
 * A deliberately wrong resource (a cache that hands a freed block to any stream at once)
 * must trip the check; the same cache made to wait properly (an event recorded on the
 * freeing stream and waited on by the allocating one) must not; and the real resources
 * must stay clean under the same producer/consumer pattern. Simulated device only. */
#include "check.h"
#include "forwarding.h"
#include "core/internal.h"
#include "device/device.h"
#include "suballoc/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a one-block cache, correct or not ---- */

typedef struct cache_resource {
  gpumem_resource header;
  bool wait_for_free; /* the correct variant records and waits on an event */
  void *cached;
  size_t cached_bytes;
  gpumem_stream freed_on;
  gpumem__event freed_event;
} cache_resource;

static gpumem_status cache_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                    gpumem_stream stream, void **ptr) {
  cache_resource *self = (cache_resource *)mr;
  if (self->cached && self->cached_bytes == bytes) {
    if (self->wait_for_free && self->freed_on != stream) {
      gpumem_status status = mr->dev->stream_wait_event(0, stream, self->freed_event);
      if (status != GPUMEM_OK)
        return status;
    }
    *ptr = self->cached;
    self->cached = NULL;
    return GPUMEM_OK;
  }
  return mr->dev->mem_alloc(mr->device, bytes, ptr);
}

static gpumem_status cache_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                      size_t alignment, gpumem_stream stream) {
  cache_resource *self = (cache_resource *)mr;
  if (self->cached)
    mr->dev->mem_free(mr->device, self->cached);
  self->cached = ptr;
  self->cached_bytes = bytes;
  self->freed_on = stream;
  return mr->dev->event_record(0, self->freed_event, stream);
}

static gpumem_status cache_destroy(gpumem_resource *mr) {
  cache_resource *self = (cache_resource *)mr;
  if (self->cached)
    mr->dev->mem_free(mr->device, self->cached);
  mr->dev->event_destroy(self->freed_event);
  free(self);
  return GPUMEM_OK;
}

static const gpumem__resource_ops cache_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "test_cache",
    .allocate = cache_allocate,
    .deallocate = cache_deallocate,
    .destroy = cache_destroy,
};

static gpumem_resource *make_cache(bool wait_for_free) {
  const gpumem__device_ops *dev = gpumem__device_get(NULL);
  CHECK(dev != NULL);
  cache_resource *self = calloc(1, sizeof *self);
  CHECK(self != NULL);
  gpumem__resource_init(&self->header, &cache_ops, 0, dev, NULL);
  self->wait_for_free = wait_for_free;
  CHECK_OK(dev->event_create(0, &self->freed_event));
  return &self->header;
}

/* Producer writes a block with a kernel on stream A and frees it there while the kernel is
 * still pending (unless the resource's free synchronizes, as cuMemFree does: then
 * `frees_synchronize`); stream B then allocates a block of the same size and writes it.
 * Returns the hazards this caused. */
static uint64_t producer_then_other_stream(gpumem_resource *mr, bool frees_synchronize) {
  gpumem_stream a, b;
  CHECK_OK(gpumem_stream_create(0, &a));
  CHECK_OK(gpumem_stream_create(0, &b));
  gpumem_sim_reset_hazards();
  enum { bytes = 1 << 16 };
  void *first, *second;
  CHECK_OK(gpumem_allocate(mr, bytes, a, &first));
  CHECK_OK(gpumem_sim_launch(a, first, bytes, 1));
  CHECK_OK(gpumem_deallocate(mr, first, bytes, a));
  uint64_t pending = 0;
  CHECK_OK(gpumem_sim_pending(a, &pending));
  if (!frees_synchronize)
    CHECK(pending >= 1); /* the kernel has not run: the check below is meaningful */
  CHECK_OK(gpumem_allocate(mr, bytes, b, &second));
  CHECK_OK(gpumem_sim_launch(b, second, bytes, 2));
  uint64_t hazards = gpumem_sim_hazard_count();
  CHECK_OK(gpumem_deallocate(mr, second, bytes, b));
  CHECK_OK(gpumem_sim_complete_all());
  CHECK_OK(gpumem_stream_destroy(a));
  CHECK_OK(gpumem_stream_destroy(b));
  gpumem_sim_reset_hazards();
  return hazards;
}

/* ---- a pool whose cross-stream waits are lost ---- */

/* The device calls as they are, but for a stream wait that does nothing: a pool given these
 * reuses another stream's freed blocks without waiting, as a pool that forgot the wait
 * would. */
static gpumem__device_ops forgetful_device;

static gpumem_status forget_wait(int device, gpumem_stream stream, gpumem__event event) {
  (void)device, (void)stream, (void)event;
  return GPUMEM_OK;
}

static void make_forgetful(gpumem_resource *mr) {
  forgetful_device = *mr->dev;
  forgetful_device.stream_wait_event = forget_wait;
  mr->dev = &forgetful_device;
}

/* A random multi-stream workload: four streams allocate blocks of a few sizes, write each
 * with a kernel, and free it on its stream while the kernel may still be pending; now and
 * then a stream's work completes. The pool hands one stream's freed blocks to another
 * (after its seals), which is where a missing wait shows. A request a pool at its maximum
 * refuses is skipped. Returns the hazards seen;
 * *waits: the stream waits the resource asked for. */
static uint64_t multi_stream_workload(gpumem_resource *mr, unsigned seed, uint64_t *waits) {
  enum { streams = 4, slots = 96, steps = 3000 };
  static const size_t sizes[] = {4 << 10, 48 << 10, 256 << 10, 3 << 20};
  gpumem_stream stream[streams];
  for (int s = 0; s < streams; s++)
    CHECK_OK(gpumem_stream_create(0, &stream[s]));
  struct {
    void *ptr;
    size_t bytes;
    int stream;
  } live[slots] = {{0}};
  gpumem_sim_reset_hazards();
  uint64_t waits_before = gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT);
  for (int step = 0; step < steps; step++) {
    seed = seed * 1103515245u + 12345u;
    unsigned pick = seed >> 8;
    int slot = (int)(pick % slots);
    if (live[slot].ptr) {
      CHECK_OK(gpumem_deallocate(mr, live[slot].ptr, live[slot].bytes, stream[live[slot].stream]));
      live[slot].ptr = NULL;
    } else {
      int s = (int)((pick / slots) % streams);
      size_t bytes = sizes[(pick / slots / streams) % 4];
      gpumem_status status = gpumem_allocate(mr, bytes, stream[s], &live[slot].ptr);
      if (status == GPUMEM_ERR_OUT_OF_MEMORY) /* a pool at its maximum: it stays usable */
        continue;
      CHECK_OK(status);
      CHECK_OK(gpumem_sim_launch(stream[s], live[slot].ptr, bytes, (unsigned char)step));
      live[slot].bytes = bytes;
      live[slot].stream = s;
    }
    if (pick % 64 == 0)
      CHECK_OK(gpumem_sim_complete(stream[(pick / 64) % streams]));
  }
  uint64_t hazards = gpumem_sim_hazard_count();
  for (int slot = 0; slot < slots; slot++)
    if (live[slot].ptr)
      CHECK_OK(gpumem_deallocate(mr, live[slot].ptr, live[slot].bytes, stream[live[slot].stream]));
  CHECK_OK(gpumem_sim_complete_all());
  for (int s = 0; s < streams; s++)
    CHECK_OK(gpumem_stream_destroy(stream[s]));
  *waits = gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT) +
           gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_QUERY) - waits_before;
  gpumem_sim_reset_hazards();
  return hazards;
}

/* ---- many threads: each on its own stream, handing blocks to one another ----
 *
 * Threads allocate, write and free on streams of their own, with their kernels pending, as
 * the single-threaded workload does; and every few allocations a thread hands its block to
 * the next thread, which writes it on its own stream and frees it there (a producer and a
 * consumer: the block was allocated by another thread, on another stream). Every structure
 * a pool keeps for its threads is then crossed by blocks coming from, and going to, other
 * threads and streams. */

enum { THREADS = 4, THREAD_STEPS = 1500, THREAD_SLOTS = 24, MAILBOX = 64 };

typedef struct mailbox {
  pthread_mutex_t lock;
  void *ptr[MAILBOX];
  size_t bytes[MAILBOX];
  int count;
} mailbox;

typedef struct hazard_thread {
  pthread_t thread;
  gpumem_resource *mr;
  int index;
  unsigned seed;
  gpumem_stream stream;
  mailbox *boxes; /* THREADS of them: the next thread's is where this one hands blocks */
  pthread_barrier_t *barrier;
} hazard_thread;

/* Writes and frees, on this thread's stream, whatever other threads handed it. */
static void drain_mailbox(hazard_thread *t) {
  mailbox *box = &t->boxes[t->index];
  pthread_mutex_lock(&box->lock);
  for (; box->count > 0; box->count--) {
    void *ptr = box->ptr[box->count - 1];
    size_t bytes = box->bytes[box->count - 1];
    CHECK_OK(gpumem_sim_launch(t->stream, ptr, bytes, 7));
    CHECK_OK(gpumem_deallocate(t->mr, ptr, bytes, t->stream));
  }
  pthread_mutex_unlock(&box->lock);
}

/* Hands a block to the next thread once this stream's work on it is done (the program's
 * part of a handoff); false when that thread's mailbox is full. */
static bool hand_over(hazard_thread *t, void *ptr, size_t bytes) {
  mailbox *box = &t->boxes[(t->index + 1) % THREADS];
  CHECK_OK(gpumem_stream_synchronize(t->stream));
  pthread_mutex_lock(&box->lock);
  bool room = box->count < MAILBOX;
  if (room) {
    box->ptr[box->count] = ptr;
    box->bytes[box->count++] = bytes;
  }
  pthread_mutex_unlock(&box->lock);
  return room;
}

static void *hazard_thread_main(void *arg) {
  hazard_thread *t = arg;
  static const size_t sizes[] = {512, 4 << 10, 48 << 10, 256 << 10};
  struct {
    void *ptr;
    size_t bytes;
  } live[THREAD_SLOTS] = {{0}};
  CHECK_OK(gpumem_set_device(0));
  unsigned seed = t->seed;
  for (int step = 0; step < THREAD_STEPS; step++) {
    seed = seed * 1103515245u + 12345u;
    unsigned pick = seed >> 8;
    int slot = (int)(pick % THREAD_SLOTS);
    if (live[slot].ptr) {
      CHECK_OK(gpumem_deallocate(t->mr, live[slot].ptr, live[slot].bytes, t->stream));
      live[slot].ptr = NULL;
    } else {
      size_t bytes = sizes[(pick / THREAD_SLOTS) % 4];
      void *ptr;
      CHECK_OK(gpumem_allocate(t->mr, bytes, t->stream, &ptr));
      CHECK_OK(gpumem_sim_launch(t->stream, ptr, bytes, (unsigned char)step));
      if (pick % 5 != 0 || !hand_over(t, ptr, bytes)) {
        live[slot].ptr = ptr;
        live[slot].bytes = bytes;
      }
    }
    if (pick % 8 == 0)
      drain_mailbox(t);
    if (pick % 64 == 1)
      CHECK_OK(gpumem_sim_complete(t->stream));
  }
  for (int slot = 0; slot < THREAD_SLOTS; slot++)
    if (live[slot].ptr)
      CHECK_OK(gpumem_deallocate(t->mr, live[slot].ptr, live[slot].bytes, t->stream));
  pthread_barrier_wait(t->barrier); /* nothing is handed over after this */
  drain_mailbox(t);
  return NULL;
}

/* Runs the threads on `mr`; returns the hazards seen, *waits: the stream waits asked for, and
 * the events of other streams' seals asked whether their work is done (a pool takes an idle
 * stream's sealed blocks with no wait: gpumem__pool_take_idle). */
static uint64_t multi_thread_workload(gpumem_resource *mr, unsigned seed, uint64_t *waits) {
  hazard_thread threads[THREADS];
  mailbox boxes[THREADS];
  pthread_barrier_t barrier;
  CHECK(pthread_barrier_init(&barrier, NULL, THREADS) == 0);
  gpumem_sim_reset_hazards();
  uint64_t waits_before = gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT) +
                          gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_QUERY);
  for (int i = 0; i < THREADS; i++) {
    CHECK(pthread_mutex_init(&boxes[i].lock, NULL) == 0);
    boxes[i].count = 0;
    threads[i] = (hazard_thread){.mr = mr,
                                 .index = i,
                                 .seed = seed * 7919u + (unsigned)i,
                                 .boxes = boxes,
                                 .barrier = &barrier};
    CHECK_OK(gpumem_stream_create(0, &threads[i].stream));
  }
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&threads[i].thread, NULL, hazard_thread_main, &threads[i]) == 0);
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_join(threads[i].thread, NULL) == 0);
  uint64_t hazards = gpumem_sim_hazard_count();
  CHECK_OK(gpumem_sim_complete_all());
  for (int i = 0; i < THREADS; i++) {
    CHECK_EQ(boxes[i].count, 0);
    CHECK_OK(gpumem_stream_destroy(threads[i].stream));
    pthread_mutex_destroy(&boxes[i].lock);
  }
  pthread_barrier_destroy(&barrier);
  *waits = gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT) +
           gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_QUERY) - waits_before;
  gpumem_sim_reset_hazards();
  return hazards;
}

/* The multi-threaded workload on the pools (among them what gpumem_reinitialize builds) and
 * the arena: no hazard, and other streams' blocks are reused (waits); the same pool with
 * its waits lost must be caught. */
static void check_multi_thread(void) {
  char default_spec[128];
  gpumem_reinitialize_options options = {.pool_allocator = 1};
  CHECK_OK(gpumem_reinitialize_spec(&options, 0, default_spec, sizeof default_spec));
  const char *const specs[] = {
      default_spec,
      "pool(vmm)",
      "pool(cuda)",
      "arena(vmm)",
      "pool(limit(vmm, max=1GiB))",
      "pool(vmm(piece=2MiB), release_holes_over=100)",
      "pool(vmm(piece=2MiB), release_holes_over=100, release_holes_time=100)"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    /* Threads' fronts keep what their stream freed, and how the threads interleave is the
     * host's choice, so one workload may reuse no other stream's block: at least two run,
     * and more until one did (a busy host ran them one after the other). */
    uint64_t all_waits = 0;
    unsigned seed = 1;
    for (; seed <= 2 || (all_waits == 0 && seed <= 32); seed++) {
      gpumem_resource *mr;
      CHECK_OK(gpumem_resource_from_spec(specs[i], &mr));
      /* A pool makes its fronts once its threads meet at its lock, which they may or may
       * not: every other workload has them from the start. */
      if (seed % 2)
        gpumem__pool_make_fronts(mr);
      uint64_t waits = 0;
      CHECK_EQ(multi_thread_workload(mr, seed, &waits), 0);
      all_waits += waits;
      CHECK_OK(gpumem_resource_release(mr));
    }
    CHECK(all_waits > 0);
    printf("%s: no hazard in %u workloads of %d threads handing blocks across streams\n", specs[i],
           seed - 1, THREADS);
  }
  gpumem_resource *mr;
  /* A pool waits for another stream's work only when it cannot grow: at its limit. */
  CHECK_OK(gpumem_resource_from_spec("pool(vmm, max=80MiB)", &mr));
  make_forgetful(mr);
  uint64_t waits = 0, hazards = 0;
  /* Fronts keep most blocks on their stream: a lost wait may take many workloads to show. */
  for (unsigned seed = 1; seed <= 256 && hazards == 0; seed++)
    hazards += multi_thread_workload(mr, seed, &waits);
  CHECK(hazards > 0);
  CHECK_OK(gpumem_resource_release(mr));
  printf("pool(vmm, max=80MiB) with its waits lost, %d threads: %llu hazards detected\n", THREADS,
         (unsigned long long)hazards);
}

int main(void) {
  check_init_backend();
  if (strcmp(gpumem_backend_name(), "sim") != 0) {
    printf("skipped: hazard detection is a feature of the simulated device\n");
    return CHECK_SKIP_CODE;
  }
  /* With the check off (the hazards_off variant) the device hears of no hand-out, as a GPU
   * does not, so the same mistake goes uncounted. */
  const char *check = getenv("GPUMEM_SIM_HAZARD");
  bool checking = !check || strcmp(check, "off") != 0;
  CHECK(checking == (gpumem__device_get(NULL)->note_handout != NULL));
  gpumem_resource *wrong = make_cache(false);
  CHECK_EQ(producer_then_other_stream(wrong, false), checking ? 1 : 0);
  CHECK_OK(gpumem_resource_release(wrong));
  if (!checking) {
    CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
    printf("GPUMEM_SIM_HAZARD=off: the cache's early reuse goes unheard\n");
    return 0;
  }
  printf("a cache that reuses across streams too early: hazard detected\n");

  gpumem_resource *right = make_cache(true);
  CHECK_EQ(producer_then_other_stream(right, false), 0);
  CHECK_OK(gpumem_resource_release(right));
  printf("the same cache waiting on an event: no hazard\n");

  static const char *const specs[] = {"cuda",
                                      "async",
                                      "managed",
                                      "faulty(async)",
                                      "pool(vmm)",
                                      "pool(cuda, initial=1)",
                                      "arena(vmm)",
                                      "limit(pool(vmm), max=1GiB)",
                                      "pool(limit(vmm, max=1GiB))",
                                      "aligned(pool(vmm), alignment=64KiB)",
                                      "prefetch(pool(managed))",
                                      "tracking(pool(vmm), stacks=true)",
                                      "stats(pool(vmm))",
                                      "log(pool(vmm), file=hazards-log-%p.csv)",
                                      "async(managed=true)",
                                      "pool(async(managed=true), initial=1)"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    gpumem_resource *mr;
    CHECK_OK(gpumem_resource_from_spec(specs[i], &mr));
    for (int round = 0; round < 20; round++)
      CHECK_EQ(producer_then_other_stream(mr, strncmp(specs[i], "cuda", 4) == 0 ||
                                                  strncmp(specs[i], "managed", 7) == 0),
               0);
    CHECK_OK(gpumem_resource_release(mr));
    printf("%-14s no hazard in 20 producer/other-stream rounds\n", specs[i]);
  }
  /* The same over another async resource's driver pool, which no spec can name ahead of
   * the run (its handle is made now). */
  gpumem_resource *pool_owner;
  void *driver_pool;
  CHECK_OK(gpumem_async_create(0, NULL, &pool_owner));
  CHECK_OK(gpumem_async_pool_handle(pool_owner, &driver_pool));
  static const char *const over_pool[] = {"async(pool=%llu)", "pool(async(pool=%llu), initial=1)"};
  for (size_t i = 0; i < sizeof over_pool / sizeof over_pool[0]; i++) {
    char spec[96];
    snprintf(spec, sizeof spec, over_pool[i], (unsigned long long)(uintptr_t)driver_pool);
    gpumem_resource *mr;
    CHECK_OK(gpumem_resource_from_spec(spec, &mr));
    for (int round = 0; round < 20; round++)
      CHECK_EQ(producer_then_other_stream(mr, false), 0);
    CHECK_OK(gpumem_resource_release(mr));
    printf("%s: no hazard in 20 producer/other-stream rounds\n", over_pool[i]);
  }
  CHECK_OK(gpumem_resource_release(pool_owner));

  /* Multi-stream workloads: the pools (and what is built on them) wait before reusing
   * another stream's blocks, and do reuse them (the waits show it); the same pools with
   * their waits lost must be caught. */
  static const char *const pools[] = {"pool(cuda)",
                                      "pool(vmm)",
                                      "pool(vmm, max=80MiB)",
                                      "pool(vmm(piece=2MiB), release_holes_over=100)",
                                      ("pool(vmm(piece=2MiB), release_holes_over=100, "
                                       "release_holes_time=100)"),
                                      "binning(pool(vmm))",
                                      "arena(vmm)",
                                      "fixed_size(cuda, block=4MiB, prealloc=4)",
                                      "limit(pool(vmm), max=1GiB)",
                                      "pool(limit(vmm, max=1GiB))",
                                      "limit(arena(vmm), max=1GiB)",
                                      "pool(aligned(vmm, alignment=4MiB))",
                                      "aligned(pool(vmm), alignment=64KiB)",
                                      "prefetch(pool(managed))",
                                      "retry(pool(vmm))",
                                      "pool(retry(vmm))",
                                      "pool:user:cuda",
                                      "tracking(arena(vmm))",
                                      "pool(tracking(vmm))",
                                      "stats(arena(vmm))",
                                      "pool(stats(vmm))",
                                      "log(pool(vmm), file=hazards-log-%p.csv)",
                                      "pool(log(vmm, file=hazards-log-%p.csv))"};
  for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) {
    for (unsigned seed = 1; seed <= 3; seed++) {
      gpumem_resource *mr;
      CHECK_OK(make_resource(pools[i], &mr)); /* a spec, or a name of forwarding.h */
      uint64_t waits = 0;
      CHECK_EQ(multi_stream_workload(mr, seed, &waits), 0);
      CHECK(waits > 0);
      CHECK_OK(gpumem_resource_release(mr));
    }
    printf("%s: no hazard in 3 random four-stream workloads\n", pools[i]);
  }
  static const char *const forgetful[] = {"pool(cuda, max=80MiB)", "pool(vmm, max=80MiB)"};
  for (size_t i = 0; i < sizeof forgetful / sizeof forgetful[0]; i++) {
    gpumem_resource *mr;
    CHECK_OK(gpumem_resource_from_spec(forgetful[i], &mr));
    make_forgetful(mr);
    uint64_t waits = 0;
    uint64_t hazards = multi_stream_workload(mr, 1, &waits);
    CHECK(hazards > 0);
    CHECK_OK(gpumem_resource_release(mr));
    printf("%s with its waits lost: %llu hazards detected\n", forgetful[i],
           (unsigned long long)hazards);
  }
  check_multi_thread();
  char log[64];
  snprintf(log, sizeof log, "hazards-log-%ld.csv", (long)getpid());
  remove(log);
  return 0;
}
