/* validate.c: the validator of debug level 2 (gpumem__validate) finds a corrupted pool and
 * says what is wrong, and passes every suballocator in a sound state.
 *
 * - Sound pools, arenas, binning and fixed_size resources, with live, free and cached
 *   blocks on several streams, after trims, validate.
 * - Each corruption a bug could make is found, with a message naming it: a free block's
 *   size, a free index entry gone, a live block not marked allocated, a broken address
 *   link, unmerged free neighbours, the live, reserved and cache counters, a cached block
 *   out of the live map or a block the map holds as cached in no cache, the set of sizes
 *   served (kept where no release asks for it, or miscounted). Undone, the pool validates
 *   again.
 * - Where assertions are on (built in, and GPUMEM_DEBUG not 0), a free that would take a
 *   counter below zero aborts with the assertion's message and the pool's spec. */
#include "check.h"
#include "suballoc/pool_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static void check_valid(const gpumem_resource *mr) {
  gpumem_status status = gpumem__validate(mr);
  if (status != GPUMEM_OK)
    CHECK_FAIL_("validation failed: %s", gpumem_last_error_message());
}

/* The validator fails on mr, with `needle` in its message. */
static void check_invalid(const gpumem_resource *mr, const char *needle) {
  CHECK_FAILS_WITH(gpumem__validate(mr), GPUMEM_ERR_INTERNAL, needle);
  printf("  found: %s\n", gpumem_last_error_message());
}

/* A free block of the pool's indexes, and the index holding it. */
static gpumem__block *some_free_block(pool_resource *pool, gpumem__free_index **holder) {
  for (size_t s = 0; s < pool->set_count; s++)
    for (size_t r = 0; r < GPUMEM__POOL_REGION_COUNT; r++) {
      gpumem__free_index *indexes[2] = {&pool->sets[s]->open[r], &pool->sets[s]->sealed[r]};
      for (int i = 0; i < 2; i++) {
        gpumem__block *b = gpumem__free_index_find(indexes[i], GPUMEM__BLOCK_UNIT);
        if (b) {
          *holder = indexes[i];
          return b;
        }
      }
    }
  CHECK_FAIL_("the pool has no free block");
  return NULL;
}

static void test_sound(void) {
  const char *specs[] = {"pool(cuda, initial=8MiB)",
                         "pool(vmm)",
                         "pool(vmm(piece=2MiB), release_holes_over=100)",
                         "pool(vmm(piece=2MiB), release_holes_over=100, release_holes_time=100)",
                         "arena(vmm)",
                         "binning(pool(vmm))",
                         "fixed_size(cuda, block=4096, prealloc=16)",
                         "binning(cuda, min=10, max=12)"};
  for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
    gpumem_resource *mr = check_build(specs[k]);
    gpumem_stream streams[2];
    for (int s = 0; s < 2; s++)
      CHECK_OK(gpumem_stream_create(GPUMEM_CURRENT_DEVICE, &streams[s]));
    void *ptrs[64];
    size_t sizes[64];
    check_valid(mr);
    for (int i = 0; i < 64; i++) {
      sizes[i] = strstr(specs[k], "block=") ? 4000 : (size_t)(i % 7 + 1) * 3000 + (i % 3) * MiB;
      CHECK_OK(gpumem_allocate(mr, sizes[i], streams[i % 2], &ptrs[i]));
      if (i % 8 == 0)
        check_valid(mr);
    }
    for (int i = 0; i < 64; i += 2)
      CHECK_OK(gpumem_deallocate(mr, ptrs[i], sizes[i], streams[(i / 2) % 2]));
    check_valid(mr);
    CHECK_OK(gpumem_resource_trim(mr, NULL));
    check_valid(mr);
    for (int i = 1; i < 64; i += 2)
      CHECK_OK(gpumem_deallocate(mr, ptrs[i], sizes[i], streams[0]));
    check_valid(mr);
    CHECK_OK(gpumem_resource_trim(mr, NULL));
    check_valid(mr);
    for (int s = 0; s < 2; s++)
      CHECK_OK(gpumem_stream_destroy(streams[s]));
    CHECK_OK(gpumem_resource_release(mr));
    printf("sound %s validates\n", specs[k]);
  }
}

static void test_corruptions(void) {
  gpumem_resource *mr = check_build("pool(cuda, initial=8MiB)");
  pool_resource *pool = (pool_resource *)mr;
  void *ptrs[8];
  for (int i = 0; i < 8; i++)
    CHECK_OK(gpumem_allocate(mr, 100000, NULL, &ptrs[i]));
  /* Freed 1, 3, 5: cached whole (a single-stream pool), between live blocks. */
  for (int i = 1; i < 7; i += 2)
    CHECK_OK(gpumem_deallocate(mr, ptrs[i], 100000, NULL));
  check_valid(mr);

  gpumem__free_index *index;
  gpumem__block *free_block = some_free_block(pool, &index);
  free_block->size += GPUMEM__BLOCK_UNIT;
  check_invalid(mr, "listed with");
  free_block->size -= GPUMEM__BLOCK_UNIT;
  check_valid(mr);

  gpumem__free_index_remove(index, free_block);
  check_invalid(mr, "no block covers the memory");
  gpumem__free_index_insert(index, free_block);
  check_valid(mr);

  gpumem__block *live = gpumem__block_map_take(&pool->live, (uintptr_t)ptrs[0]);
  gpumem__block_map_put(&pool->live, live);
  live->state = GPUMEM__BLOCK_OPEN;
  check_invalid(mr, "is open, not allocated");
  live->state = GPUMEM__BLOCK_ALLOCATED;

  gpumem__block *next = live->next_addr;
  live->next_addr = NULL;
  check_invalid(mr, "inside one chunk are not linked");
  live->next_addr = next;
  next->prev_addr = NULL;
  check_invalid(mr, "address link");
  next->prev_addr = live;
  check_valid(mr);

  atomic_fetch_add(&pool->stats.live_bytes, 1);
  check_invalid(mr, "the live bytes counter says");
  atomic_fetch_sub(&pool->stats.live_bytes, 1);
  atomic_fetch_add(&pool->stats.live_count, 1);
  check_invalid(mr, "the live count says");
  atomic_fetch_sub(&pool->stats.live_count, 1);
  atomic_fetch_add(&pool->stats.reserved, 4096);
  check_invalid(mr, "the reserved counter says");
  atomic_fetch_sub(&pool->stats.reserved, 4096);
  check_valid(mr);

  free_set *set = pool->last_set;
  CHECK(set && set->cached_count == 3);
  set->cached_count = 2;
  check_invalid(mr, "more cached blocks than its count");
  set->cached_count = 3;
  check_valid(mr);
  gpumem__block sentinel_filled = {0};
  set->cached[GPUMEM__POOL_CACHE_CLASSES] = &sentinel_filled;
  check_invalid(mr, "in the list past the last class");
  set->cached[GPUMEM__POOL_CACHE_CLASSES] = NULL;
  check_valid(mr);
  /* A cached block keeps its slot in the live map: one without it is found, and so is a
   * slot whose block is marked cached but is in no cache. */
  gpumem__block *cached = gpumem__block_map_take(&pool->live, (uintptr_t)ptrs[1]);
  CHECK(cached && cached->state == GPUMEM__BLOCK_CACHED);
  check_invalid(mr, "is not in the live map");
  gpumem__block_map_put(&pool->live, cached);
  check_valid(mr);
  live->state = GPUMEM__BLOCK_CACHED;
  check_invalid(mr, "the live map holds 4 cached blocks, the caches 3");
  live->state = GPUMEM__BLOCK_ALLOCATED;
  check_valid(mr);

  /* Two free neighbours of one set left apart: a merge that did not happen. Blocks 1 and 2
   * both freed, 2 into the index right beside 1, which is then filed without merging. */
  gpumem__pool_flush_cache(pool, set);
  check_valid(mr);
  gpumem__block *second = gpumem__block_map_take(&pool->live, (uintptr_t)ptrs[2]);
  gpumem__counters_freed(&pool->stats, 100000);
  gpumem__block *first = second->prev_addr;
  CHECK(first && first->state == GPUMEM__BLOCK_OPEN);
  second->state = GPUMEM__BLOCK_OPEN;
  second->owner = first->owner;
  gpumem__free_index_insert(index_of(set, second), second);
  check_invalid(mr, "were not merged");
  gpumem__free_index_remove(index_of(set, second), second);
  second->state = GPUMEM__BLOCK_ALLOCATED;
  gpumem__block_map_put(&pool->live, second);
  gpumem__counters_allocated(&pool->stats, 100000);
  check_valid(mr);

  /* The hot paths' limits follow the layout: a cache limit left from another one is found. */
  pool->limits.cache_below = GPUMEM__POOL_SMALL_LIMIT;
  check_invalid(mr, "cache under 131072, up to 1024 blocks) are not those of its layout (0, "
                    "1048576, 1024)");
  pool->limits.cache_below = GPUMEM__POOL_CACHE_LIMIT;
  check_valid(mr);
  /* A cache holding more blocks than its layout allows: one stream's 40, where several
   * streams allow 32 (the hot paths' limits following that layout). */
  void *small[40];
  for (int i = 0; i < 40; i++)
    CHECK_OK(gpumem_allocate(mr, 4096, NULL, &small[i]));
  for (int i = 0; i < 40; i++)
    CHECK_OK(gpumem_deallocate(mr, small[i], 4096, NULL));
  check_valid(mr);
  pool->multi_stream = true;
  pool->limits = limits_of(pool->split_regions, true);
  check_invalid(mr, "caches 40 blocks, more than its layout's 32");
  pool->multi_stream = false;
  pool->limits = limits_of(pool->split_regions, false);
  check_valid(mr);

  /* Over cuda no release of holes asks for the sizes served: the set stays closed. */
  pool->served_sizes.closed = false;
  check_invalid(mr, "never asks for them");
  pool->served_sizes.closed = true;
  check_valid(mr);

  for (int i = 0; i < 8; i += 2)
    CHECK_OK(gpumem_deallocate(mr, ptrs[i], 100000, NULL));
  CHECK_OK(gpumem_deallocate(mr, ptrs[7], 100000, NULL));
  check_valid(mr);
  CHECK_OK(gpumem_resource_release(mr));

  /* Over vmm it does: a set whose count is wrong is found. */
  mr = check_build("pool(vmm)");
  pool = (pool_resource *)mr;
  CHECK_OK(gpumem_allocate(mr, 3 * MiB, NULL, &ptrs[0]));
  CHECK(!pool->served_sizes.closed && pool->served_sizes.count == 1);
  check_valid(mr);
  pool->served_sizes.count = 2;
  check_invalid(mr, "the set of sizes counts 2, its table holds 1");
  pool->served_sizes.count = 1;
  check_valid(mr);
  /* The pass's live peak (a dominant request's measure) above the pool's own is found. */
  CHECK_U64_EQ(pool->pass_peak_live, 3 * MiB);
  pool->pass_peak_live = 3 * MiB + 1;
  check_invalid(mr, "the pass's live peak (3145729) is above the pool's (3145728)");
  pool->pass_peak_live = 3 * MiB;
  check_valid(mr);
  CHECK_OK(gpumem_deallocate(mr, ptrs[0], 3 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  /* A large growth step's pieces (64 MiB over 2 MiB pieces: 4 MiB ones up to its end) that
   * end where no large piece can is found. */
  mr = check_build("pool(vmm(piece=2MiB))");
  pool = (pool_resource *)mr;
  CHECK_OK(gpumem_allocate(mr, 64 * MiB, NULL, &ptrs[0]));
  chunk *grown = chunk_at(pool, 0);
  CHECK_U64_EQ(grown->large_until, grown->addr + 64 * MiB);
  check_valid(mr);
  grown->large_until -= 2 * MiB;
  check_invalid(mr, "its large pieces end at");
  grown->large_until += 2 * MiB;
  check_valid(mr);
  CHECK_OK(gpumem_deallocate(mr, ptrs[0], 64 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("corruptions of a pool are found and named\n");
}

/* A free that would take the live count below zero: a child process makes it and must
 * abort with the assertion's report. */
static void test_assertion(void) {
  if (gpumem__debug_level() < 1) {
    printf("assertions off (built in up to level %d, GPUMEM_DEBUG=%s): not checked\n",
           GPUMEM__DEBUG_LEVEL, getenv("GPUMEM_DEBUG") ? getenv("GPUMEM_DEBUG") : "unset");
    return;
  }
  int pipe_fds[2];
  CHECK(pipe(pipe_fds) == 0);
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    dup2(pipe_fds[1], 2);
    gpumem_resource *mr = check_build("pool(cuda, initial=4MiB)");
    void *p;
    CHECK_OK(gpumem_allocate(mr, 1000, NULL, &p));
    atomic_store(&((pool_resource *)mr)->stats.live_count, 0);
    gpumem_deallocate(mr, p, 1000, NULL);
    _exit(0);
  }
  close(pipe_fds[1]);
  char report[2048] = "";
  size_t used = 0;
  ssize_t got;
  while ((got = read(pipe_fds[0], report + used, sizeof report - 1 - used)) > 0)
    used += (size_t)got;
  report[used] = '\0';
  close(pipe_fds[0]);
  int wstatus;
  CHECK(waitpid(child, &wstatus, 0) == child);
  CHECK(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGABRT);
  CHECK_CONTAINS(report, "internal assertion failed");
  CHECK_CONTAINS(report, "pool(cuda");
  printf("a broken invariant aborts with: %s", report);
}

/* ---- thread fronts' own live maps ----
 *
 * A front files what it hands out in its own maps: a thread freeing its own blocks takes no
 * lock on a line that another thread writes; a thread freeing another's finds them in that
 * front's maps, after one search through every front, in the front it found the last one
 * in; a wrong size there changes nothing; the validator walks every front's maps. */

enum { map_threads = 8, map_blocks = 64 };
static void *map_held[map_blocks];
static gpumem_resource *front_pool;
static gpumem_stream front_stream;

static void *own_frees(void *arg) {
  (void)arg;
  void *held[map_blocks];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < map_blocks; i++)
      CHECK_OK(gpumem_allocate(front_pool, 1000 + 64 * (size_t)i, front_stream, &held[i]));
    for (int i = 0; i < map_blocks; i++)
      CHECK_OK(gpumem_deallocate(front_pool, held[i], 1000 + 64 * (size_t)i, front_stream));
  }
  return NULL;
}

static atomic_int map_step; /* 1: allocate_held has its blocks; 2: free_held ended */

/* Stays alive until the blocks are freed, so that free_held's thread is another one. */
static void *allocate_held(void *arg) {
  (void)arg;
  for (int i = 0; i < map_blocks; i++)
    CHECK_OK(gpumem_allocate(front_pool, 1000 + 64 * (size_t)i, front_stream, &map_held[i]));
  atomic_store(&map_step, 1);
  while (atomic_load(&map_step) != 2)
    sched_yield();
  return NULL;
}

static void *free_held(void *arg) {
  (void)arg;
  CHECK_EQ(gpumem_deallocate(front_pool, map_held[0], 999, front_stream), GPUMEM_ERR_MISUSE);
  CHECK_EQ(gpumem_deallocate(front_pool, map_held[0], 1 << 20, front_stream), GPUMEM_ERR_MISUSE);
  CHECK_CONTAINS(gpumem_last_error_message(), "allocated with 1000 bytes");
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_LIVE_COUNT), map_blocks);
  for (int i = 0; i < map_blocks; i++)
    CHECK_OK(gpumem_deallocate(front_pool, map_held[i], 1000 + 64 * (size_t)i, front_stream));
  return NULL;
}

/* Runs `count` threads of `fn` at once (so that each has its own front). */
static void run_threads(void *(*fn)(void *), int count) {
  pthread_t threads[map_threads];
  for (int i = 0; i < count; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, fn, NULL), 0);
  for (int i = 0; i < count; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
}

/* The live block at `ptr` in some front's maps (no thread uses the pool meanwhile). */
static gpumem__block *front_live_block(gpumem_resource *mr, void *ptr) {
  pool_fronts *fronts = atomic_load(&((pool_resource *)mr)->fronts);
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++)
    for (size_t k = 0; k < GPUMEM__POOL_LIVE_SHARDS; k++) {
      gpumem__block *block =
          gpumem__front_map_lookup(&fronts->fronts[i].shards[k].map, (uintptr_t)ptr);
      if (block)
        return block;
    }
  return NULL;
}

static uint64_t shared_locks(void) {
  gpumem__pool_front_stats stats;
  CHECK(gpumem__pool_front_stats_of(front_pool, &stats));
  return stats.shared_locks;
}

static void test_front_live_maps(void) {
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &front_pool));
  CHECK(gpumem__pool_make_fronts(front_pool)); /* as threads meeting at its lock would */
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  void *ptr;
  CHECK_OK(gpumem_allocate(front_pool, 256, front_stream, &ptr)); /* biased to this thread */
  CHECK_OK(gpumem_deallocate(front_pool, ptr, 256, front_stream));
  run_threads(own_frees, 2); /* blocks before the fronts came are the locked path's */
  uint64_t first = shared_locks();
  run_threads(own_frees, map_threads); /* threads with fronts and maps, then ended */
  CHECK_U64_EQ(shared_locks(), first);
  pthread_t allocator;
  atomic_store(&map_step, 0);
  CHECK_EQ(pthread_create(&allocator, NULL, allocate_held, NULL), 0);
  while (atomic_load(&map_step) != 1)
    sched_yield();
  check_valid(front_pool); /* live blocks in a front's maps */
  gpumem__block *block = front_live_block(front_pool, map_held[0]);
  CHECK(block != NULL);
  size_t requested = block->requested;
  block->requested = 0;
  check_invalid(front_pool, "requested with 0"); /* as if a free claimed it, in no batch */
  block->requested = requested;
  uint64_t before = shared_locks();
  run_threads(free_held, 1);
  atomic_store(&map_step, 2);
  CHECK_EQ(pthread_join(allocator, NULL), 0);
  uint64_t taken = shared_locks() - before;
  /* One search through every front, then one lock a free (two for the wrong size's); a
   * search at every free would take map_threads times more. */
  CHECK(taken >= map_blocks && taken <= map_blocks + 2 * map_threads + 4);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_LIVE_COUNT), 0);
  check_valid(front_pool);
  CHECK_OK(gpumem_stream_synchronize(front_stream));
  CHECK_OK(gpumem_stream_destroy(front_stream));
  CHECK_OK(gpumem_resource_release(front_pool));
  printf("pool(vmm) fronts: own frees shared no lock, %llu locks for %d others' frees\n",
         (unsigned long long)taken, map_blocks);
}

int main(void) {
  check_init_backend();
  test_sound();
  test_corruptions();
  test_assertion();
  test_front_live_maps();
  printf("validate passed\n");
  return 0;
}
