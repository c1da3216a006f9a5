/* host_memory.c: every host allocation gpumem makes may fail, and each failure is handled
 * cleanly.
 *
 * The program is linked with malloc, calloc and realloc wrapped (-Wl,--wrap), so that the
 * test decides which host allocation fails. A workload over each suballocator (pool over
 * vmm with small pieces, pool over cuda, binning, arena, fixed_size) is first run clean to
 * count its host allocations; then, for each of them in turn, exactly that one fails and
 * the workload runs again. Each step that fails must say why, leave the resource as it was
 * (same live count and reserved bytes) and succeed when retried. At the end no device
 * memory is left in use.
 *
 * Apart from the sweep: a pool's trim when no host array can grow still gives back whole
 * chunks and pieces at a chunk's ends (those need no new record), and a cut in the middle
 * of a chunk is left for a later trim, with the pool usable; a large block's place that
 * needs a cut without host memory gives way to the best fit; and a pool's thread fronts
 * without host memory for a map's growth or a return batch still serve and free every
 * block, losing none. Simulated device only. */
#include "check.h"
#include "gpumem/sim.h"
#include "suballoc/pool.h"
#include "suballoc/pool_internal.h"

#include <pthread.h>
#include <string.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t count, size_t size);
void *__real_realloc(void *ptr, size_t size);

/* Host allocations made since the count was last reset, and the one to fail (0: none). One
 * thread at a time runs here. */
static size_t host_allocations, host_allocation_to_fail;
/* Every growth of an existing host array fails (new allocations still succeed). */
static bool arrays_cannot_grow;

static bool host_allocation_fails(void) {
  host_allocations++;
  return host_allocations == host_allocation_to_fail;
}

void *__wrap_malloc(size_t size) {
  return host_allocation_fails() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t count, size_t size) {
  return host_allocation_fails() ? NULL : __real_calloc(count, size);
}

void *__wrap_realloc(void *ptr, size_t size) {
  bool fails = host_allocation_fails() || (arrays_cannot_grow && ptr != NULL);
  return fails ? NULL : __real_realloc(ptr, size);
}

static gpumem_resource *sweep_resource;
/* Whether a failed step must leave the reserved bytes as they were: not where the resource
 * answers with an upstream pool's figure (binning, tracking over a pool), which keeps what it
 * grew by for the request that then failed, as free memory. */
static bool reserved_stays;
static int failures_seen;

static uint64_t query_or_zero(gpumem_query what) {
  uint64_t value = 0;
  if (sweep_resource)
    CHECK_OK(gpumem_resource_query(sweep_resource, what, &value));
  return value;
}

/* Runs `call`; if it fails, checks the failure and that nothing changed, then runs it again
 * with every host allocation succeeding, which must succeed. */
#define STEP(call)                                                                                 \
  do {                                                                                             \
    uint64_t live_before_ = query_or_zero(GPUMEM_QUERY_LIVE_COUNT);                                \
    uint64_t live_bytes_before_ = query_or_zero(GPUMEM_QUERY_LIVE_BYTES);                          \
    uint64_t reserved_before_ = query_or_zero(GPUMEM_QUERY_RESERVED_BYTES);                        \
    gpumem_status step_status_ = (call);                                                           \
    if (step_status_ != GPUMEM_OK) {                                                               \
      failures_seen++;                                                                             \
      size_t to_fail_ = host_allocation_to_fail;                                                   \
      host_allocation_to_fail = 0;                                                                 \
      CHECK(strlen(gpumem_last_error_message()) > 0);                                              \
      CHECK_U64_EQ(query_or_zero(GPUMEM_QUERY_LIVE_COUNT), live_before_);                          \
      CHECK_U64_EQ(query_or_zero(GPUMEM_QUERY_LIVE_BYTES), live_bytes_before_);                    \
      if (reserved_stays)                                                                          \
        CHECK_U64_EQ(query_or_zero(GPUMEM_QUERY_RESERVED_BYTES), reserved_before_);                \
      CHECK_OK(call);                                                                              \
      host_allocation_to_fail = to_fail_;                                                          \
    }                                                                                              \
  } while (0)

static void workload(const char *spec) {
  enum { MiB = 1 << 20 };
  gpumem_resource *mr = NULL;
  STEP(gpumem_resource_from_spec(spec, &mr));
  sweep_resource = mr;
  gpumem_stream stream = NULL;
  STEP(gpumem_stream_create(0, &stream));
  static const size_t sizes[] = {1, 256, 5000, 1 * MiB, 3 * MiB, 9 * MiB, 700};
  enum { count = sizeof sizes / sizeof sizes[0] };
  void *ptrs[count];
  for (size_t i = 0; i < count; i++)
    STEP(gpumem_allocate(mr, sizes[i], i % 2 ? stream : NULL, &ptrs[i]));
  /* Free the large blocks and trim with the small ones live: over vmm with 2 MiB pieces
   * that unmaps parts of growth steps, cutting chunks in two. */
  STEP(gpumem_deallocate(mr, ptrs[5], sizes[5], stream));
  STEP(gpumem_deallocate(mr, ptrs[4], sizes[4], NULL));
  if (strncmp(spec, "pool", 4) == 0)
    STEP(gpumem_pool_trim(mr, NULL));
  STEP(gpumem_allocate(mr, 5 * MiB, stream, &ptrs[5]));
  STEP(gpumem_deallocate(mr, ptrs[5], 5 * MiB, stream));
  /* A hole under a live block and a request it does not fit: with release_holes_over the
   * pool lists its free blocks, cuts the hole's pieces out and unmaps them, then grows. */
  if (strstr(spec, "release_holes_over")) {
    void *hole, *pin, *grown;
    STEP(gpumem_allocate(mr, 8 * MiB, stream, &hole));
    STEP(gpumem_allocate(mr, 2 * MiB, stream, &pin));
    STEP(gpumem_deallocate(mr, hole, 8 * MiB, stream));
    STEP(gpumem_allocate(mr, 12 * MiB, stream, &grown));
    STEP(gpumem_deallocate(mr, grown, 12 * MiB, stream));
    STEP(gpumem_deallocate(mr, pin, 2 * MiB, stream));
  }
  for (size_t i = 0; i < count; i++)
    if (i != 4 && i != 5)
      STEP(gpumem_deallocate(mr, ptrs[i], sizes[i], i % 2 ? stream : NULL));
  if (strncmp(spec, "pool", 4) == 0)
    STEP(gpumem_pool_trim(mr, NULL));
  STEP(gpumem_stream_synchronize(stream));
  STEP(gpumem_stream_destroy(stream));
  sweep_resource = NULL;
  STEP(gpumem_resource_release(mr));
}

static void sweep(const char *spec) {
  uint64_t used_before;
  CHECK_OK(gpumem_sim_device_used(0, &used_before));
  /* A pool that gives back holes before it grows keeps them given back when the growth
   * then fails, as a trim would have (gpumem.h). */
  reserved_stays = strncmp(spec, "binning", 7) != 0 && strncmp(spec, "tracking", 8) != 0 &&
                   !strstr(spec, "release_holes_over");
  host_allocations = 0;
  host_allocation_to_fail = 0;
  workload(spec);
  size_t clean_run = host_allocations;
  CHECK(clean_run > 0);
  failures_seen = 0;
  for (size_t n = 1; n <= clean_run; n++) {
    host_allocations = 0;
    host_allocation_to_fail = n;
    workload(spec);
    host_allocation_to_fail = 0;
    /* An upstream whose last release failed under a resource that was destroyed (a
     * binning resource's pool) is kept and released again here. */
    CHECK_OK(gpumem_resource_release(NULL));
    uint64_t used;
    CHECK_OK(gpumem_sim_device_used(0, &used));
    CHECK_U64_EQ(used, used_before);
  }
  printf("%s: %zu host allocations, each failed in turn (%d steps failed and were retried)\n", spec,
         clean_run, failures_seen);
}

/* A trim when no host array can grow (the pool's chunk records among them) gives back
 * what needs no record more: whole chunks, and pieces at a chunk's ends. */
static void trim_without_host_memory(void) {
  enum { MiB = 1 << 20, steps = 16 };
  gpumem_resource *pool;
  void *ptrs[steps];
  CHECK_OK(gpumem_resource_from_spec("pool(vmm(piece=2MiB))", &pool));
  for (int i = 0; i < steps; i++) /* one growth step, so one chunk, each */
    CHECK_OK(gpumem_allocate(pool, 2 * MiB, NULL, &ptrs[i]));
  for (int i = 0; i < steps; i++)
    CHECK_OK(gpumem_deallocate(pool, ptrs[i], 2 * MiB, NULL));
  uint64_t reserved = check_query(pool, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK(reserved >= steps * 2 * MiB);
  size_t released = 0;
  arrays_cannot_grow = true;
  CHECK_OK(gpumem_pool_trim(pool, &released));
  arrays_cannot_grow = false;
  CHECK_U64_EQ(released, reserved);
  CHECK_U64_EQ(check_query(pool, GPUMEM_QUERY_RESERVED_BYTES), 0);

  /* One 6 MiB growth step with its ends live, and as many 2 MiB ones after it as fill the
   * chunk records' room (16): its middle piece needs a record more. */
  void *front, *middle, *back;
  CHECK_OK(gpumem_allocate(pool, 6 * MiB, NULL, &front));
  CHECK_OK(gpumem_deallocate(pool, front, 6 * MiB, NULL));
  CHECK_OK(gpumem_allocate(pool, 2 * MiB, NULL, &front));
  CHECK_OK(gpumem_allocate(pool, 2 * MiB, NULL, &middle));
  CHECK_OK(gpumem_allocate(pool, 2 * MiB, NULL, &back));
  CHECK_PTR_EQ((char *)middle, (char *)front + 2 * MiB);
  CHECK_PTR_EQ((char *)back, (char *)front + 4 * MiB);
  for (int i = 1; i < steps; i++)
    CHECK_OK(gpumem_allocate(pool, 2 * MiB, NULL, &ptrs[i]));
  CHECK_OK(gpumem_deallocate(pool, middle, 2 * MiB, NULL));
  arrays_cannot_grow = true;
  CHECK_OK(gpumem_pool_trim(pool, &released));
  arrays_cannot_grow = false;
  CHECK_U64_EQ(released, 0);
  CHECK_U64_EQ(check_query(pool, GPUMEM_QUERY_RESERVED_BYTES), (steps + 2) * 2 * MiB);
  CHECK_OK(gpumem_allocate(pool, 2 * MiB, NULL, &middle)); /* the pool is usable */
  CHECK_PTR_EQ((char *)middle, (char *)front + 2 * MiB);
  CHECK_OK(gpumem_deallocate(pool, middle, 2 * MiB, NULL));
  CHECK_OK(gpumem_pool_trim(pool, &released)); /* with host memory again, the middle goes */
  CHECK_U64_EQ(released, 2 * MiB);
  CHECK_U64_EQ(check_query(pool, GPUMEM_QUERY_RESERVED_BYTES), (steps + 1) * 2 * MiB);
  CHECK_OK(gpumem_deallocate(pool, front, 2 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(pool, back, 2 * MiB, NULL));
  for (int i = 1; i < steps; i++)
    CHECK_OK(gpumem_deallocate(pool, ptrs[i], 2 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(pool));
  printf("trim without host memory passed\n");
}

/* A request that goes back to a large block's place in the middle of a free range, with no
 * host memory for the struct that the cut needs, takes the best fit instead (the range's
 * start, whole, as any carve without host memory does) and loses nothing; with host memory
 * again, the place serves. The slab's spares are set aside and its page array made full, so
 * that the next struct needs an array that cannot grow. */
static void places_without_host_memory(void) {
  const size_t size = GPUMEM__POOL_PLACES_LEAST;
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm, release_holes_over=10000)", &mr));
  pool_resource *pool = (pool_resource *)mr;
  char *b[4], *pin, *x;
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_allocate(mr, size, NULL, (void **)&b[i]));
  CHECK_OK(gpumem_allocate(mr, 1 << 20, NULL, (void **)&pin));
  /* Eight frees, four of them before the size has places, so that the four blocks are
   * taken again in order; b[1]'s place is the newest. */
  static const int free_order[4] = {3, 0, 2, 1};
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_deallocate(mr, b[free_order[i]], size, NULL));
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_allocate(mr, size, NULL, (void **)&b[i]));
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_deallocate(mr, b[free_order[i]], size, NULL));
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  gpumem__block *spares = pool->slab.spare;
  size_t capacity = pool->slab.page_capacity;
  pool->slab.spare = NULL;
  pool->slab.page_capacity = pool->slab.page_count;
  arrays_cannot_grow = true;
  gpumem_status status = gpumem_allocate(mr, size, NULL, (void **)&x);
  arrays_cannot_grow = false;
  pool->slab.page_capacity = capacity;
  pool->slab.spare = spares;
  CHECK_OK(status);
  CHECK_PTR_EQ(x, b[0]);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  CHECK_OK(gpumem__validate(mr));
  /* It held the whole range, but its free is noted under its request's size: its place,
   * the range's start, is the newest. */
  CHECK_OK(gpumem_deallocate(mr, x, size, NULL));
  CHECK_OK(gpumem_allocate(mr, size, NULL, (void **)&x));
  CHECK_PTR_EQ(x, b[0]);
  CHECK_OK(gpumem_allocate(mr, size, NULL, (void **)&b[0]));
  CHECK_PTR_EQ(b[0], b[1]); /* the newest in use: the next newest, cut out of the range's middle */
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_deallocate(mr, x, size, NULL));
  CHECK_OK(gpumem_deallocate(mr, b[0], size, NULL));
  CHECK_OK(gpumem_deallocate(mr, pin, 1 << 20, NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(mr));
  printf("a large block's place without host memory for the cut: the best fit, nothing lost\n");
}

/* A tracking adaptor with no host memory for a stack or to record a block (then it gives the
 * block back) fails the allocation with nothing kept: out of memory, verdict host_failure. */
static void tracking_without_host_memory(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("tracking(cuda, stacks=true)", &mr));
  uint64_t used_before;
  CHECK_OK(gpumem_sim_device_used(0, &used_before));
  int failed = 0;
  for (size_t n = 1;; n++) {
    host_allocations = 0;
    host_allocation_to_fail = n;
    void *ptr = NULL;
    gpumem_status status = gpumem_allocate(mr, 1000, NULL, &ptr);
    bool reached = host_allocations >= n;
    host_allocation_to_fail = 0;
    if (status == GPUMEM_OK) {
      CHECK_OK(gpumem_deallocate(mr, ptr, 1000, NULL));
      if (!reached)
        break; /* past the allocation's last host allocation */
      continue;
    }
    CHECK_STATUS(status, GPUMEM_ERR_OUT_OF_MEMORY);
    CHECK_CONTAINS(gpumem_last_error_message(), "\nverdict: ");
    if (strstr(gpumem_last_error_message(), "tracking: out of host memory")) { /* not the sim's */
      failed++;
      CHECK_CONTAINS(gpumem_last_error_message(), "\nverdict: host_failure: ");
    }
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
    uint64_t used;
    CHECK_OK(gpumem_sim_device_used(0, &used));
    CHECK_U64_EQ(used, used_before);
  }
  CHECK(failed >= 2); /* the stack, and the table */
  CHECK_OK(gpumem_resource_release(mr));
  printf("tracking without host memory passed (%d allocations failed)\n", failed);
}

/* A push with no host memory for the statistics adaptor's stack fails and changes nothing. */
static void push_without_host_memory(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("stats(cuda)", &mr));
  void *ptr;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &ptr));
  for (int i = 0; i < 8; i++) /* the stack's first room */
    CHECK_OK(gpumem_statistics_push(mr, NULL));
  gpumem_statistics before = {.size = sizeof before}, after = {.size = sizeof after};
  CHECK_OK(gpumem_statistics_get(mr, &before));
  host_allocations = 0;
  host_allocation_to_fail = 1;
  CHECK_FAILS_WITH(gpumem_statistics_push(mr, NULL), GPUMEM_ERR_OUT_OF_MEMORY, "9 pushed");
  host_allocation_to_fail = 0;
  CHECK_OK(gpumem_statistics_get(mr, &after));
  CHECK(memcmp(&before, &after, sizeof before) == 0); /* padding included: gpumem zeroes it */
  for (int i = 0; i < 8; i++)
    CHECK_OK(gpumem_statistics_pop(mr, NULL));
  CHECK_STATUS(gpumem_statistics_pop(mr, NULL), GPUMEM_ERR_MISUSE); /* eight were pushed */
  CHECK_OK(gpumem_statistics_get(mr, &after));
  CHECK_EQ(after.bytes.current, 1000);
  CHECK_EQ(after.count.total, 1);
  CHECK_OK(gpumem_deallocate(mr, ptr, 1000, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("statistics push without host memory passed\n");
}

/* ---- thread fronts: maps and return batches without host memory ----
 *
 * A thread allocates blocks through its front (whose maps grow as it carves more); this
 * thread frees them, so they go into a return batch for that front. One host allocation of
 * each phase fails in turn (one thread runs at a time, so the count holds): a refill whose
 * map cannot grow gives the block back and hands out what it filed, or leaves the request
 * to the pool's locked path; a free with no host memory for a batch keeps the block in the
 * freeing thread's front. Every step succeeds, nothing stays live, the pool validates, and
 * a trim gives everything back. */

/* Enough 256-byte blocks that each of a front's 8 maps grows past its first table. */
enum { front_blocks = 4096, front_block_bytes = 256 };
static gpumem_resource *front_pool;
static gpumem_stream front_stream;
static void *front_ptrs[front_blocks];
static size_t front_fail_at; /* 0: none; else the host allocation of a phase that fails */

static void *allocate_through_front(void *arg) {
  (void)arg;
  host_allocations = 0;
  host_allocation_to_fail = front_fail_at;
  for (int i = 0; i < front_blocks; i++)
    CHECK_OK(gpumem_allocate(front_pool, front_block_bytes, front_stream, &front_ptrs[i]));
  host_allocation_to_fail = 0;
  return NULL;
}

/* Runs one round on a fresh pool, failing host allocation `n` of the allocating thread's
 * phase when `in_allocations`, else of the freeing one's. Returns whether the phase made n.
 * A trim then gives everything back. */
static bool fronts_round(size_t n, bool in_allocations) {
  CHECK_OK(gpumem_resource_from_spec("pool(vmm(piece=2MiB))", &front_pool));
  CHECK(gpumem__pool_make_fronts(front_pool)); /* as threads meeting at its lock would */
  void *ptr;
  CHECK_OK(gpumem_allocate(front_pool, 256, front_stream, &ptr)); /* biased to this thread */
  CHECK_OK(gpumem_deallocate(front_pool, ptr, 256, front_stream));
  front_fail_at = in_allocations ? n : 0;
  pthread_t thread;
  CHECK_EQ(pthread_create(&thread, NULL, allocate_through_front, NULL), 0);
  CHECK_EQ(pthread_join(thread, NULL), 0);
  bool reached = in_allocations && host_allocations >= n;
  host_allocations = 0;
  host_allocation_to_fail = in_allocations ? 0 : n;
  for (int i = 0; i < front_blocks; i++)
    CHECK_OK(gpumem_deallocate(front_pool, front_ptrs[i], front_block_bytes, front_stream));
  reached |= !in_allocations && host_allocations >= n;
  host_allocation_to_fail = 0;
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem__validate(front_pool));
  size_t released = 0;
  CHECK_OK(gpumem_resource_trim(front_pool, &released));
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_OK(gpumem_resource_release(front_pool));
  return reached;
}

static void fronts_without_host_memory(void) {
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  size_t failed = 0;
  for (int phase = 0; phase < 2; phase++)
    for (size_t n = 1; fronts_round(n, phase == 0); n++)
      failed++;
  CHECK(failed >= 10); /* the maps and their growth in the allocations; a batch in the frees */
  CHECK_OK(gpumem_stream_destroy(front_stream));
  printf("thread fronts without host memory passed (%zu host allocations failed in turn)\n",
         failed);
}

int main(void) {
  check_init_backend();
  fronts_without_host_memory();
  trim_without_host_memory();
  places_without_host_memory();
  tracking_without_host_memory();
  push_without_host_memory();
  static const char *const specs[] = {
      "pool(vmm(piece=2MiB), initial=2MiB)",
      "pool(vmm(piece=2MiB), initial=2MiB, release_holes_over=100)",
      "pool(cuda, initial=4MiB)",
      "binning(pool(cuda, initial=1), min=8, max=12)",
      "arena(vmm, size=16MiB)",
      "fixed_size(cuda, block=16MiB, prealloc=2)",
      "tracking(pool(vmm(piece=2MiB), initial=2MiB), stacks=true)",
      "pool(tracking(vmm(piece=2MiB), stacks=true), initial=2MiB)",
      "stats(pool(vmm(piece=2MiB), initial=2MiB))",
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    sweep(specs[i]);
  return 0;
}
