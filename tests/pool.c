/* pool.c: the pool (and the arena, pools per stream) against a simple model and their
 * promises.
 *
 * - Randomized runs, on one stream and on three, with and without trims, checked against a
 *   model: no two live blocks overlap, every reserved byte is either in a live block or
 *   free (a live block holds its request rounded to 256, or up to 1/8 more when it came
 *   from the pool's cache), and freeing everything coalesces back to the initial state
 *   (and a trim then gives back everything).
 * - Growth in place over vmm: growth steps merge into one free block, also after trims
 *   that gave back the chunks between and after them.
 * - The cache of freed blocks: a block goes whole to the next request of its class; a
 *   request nothing in the free index fits takes a larger cached block, or has the cache
 *   merged, before the pool grows; a full cache merges and the pool stays whole.
 * - The maximum size is honoured; out of memory leaves the pool usable; near the maximum,
 *   a pool growing in place asks only for what its free last block lacks.
 * - Trim gives whole free chunks back, and over vmm whole free pieces of a chunk whose ends
 *   are in use; a trim whose unmap fails changes nothing.
 * - Over vmm, a large size freed eight times goes back to where its last blocks were freed,
 *   newest first, cut out of the middle of a free range where best fit would take its start.
 * - Over vmm with release_holes_over, holes' pieces go back before the pool grows past the
 *   threshold, as many as the growth takes, after a wait for the device; under it, before
 *   the pace allows the next release, or when the unmap fails, the pool grows as it would
 *   have.
 * - Cross-stream reuse waits properly (the simulated device's hazard check) and costs one
 *   event record for a whole batch of frees, not one per free.
 * - Many threads on one pool, freeing each other's blocks.
 * - Thread fronts: made when threads meet at the pool's lock, never for threads that take
 *   turns (which have the lock biased to each in turn when turns are long, until fronts
 *   come); they give back before the pool grows for a large request and before it fails; a
 *   refill keeps its own front whole and the others a reserve; a stream they serve keeps
 *   a working reserve from other streams' steals.
 * - A pool of device 1 used with the default streams while device 0 is current: they mean
 *   device 1's default stream, so its frees (which record events there) succeed.
 * - More streams than the pool keeps sets for (64): it folds them together (after waiting
 *   for the device), and the arena more streams than it keeps pools for (256): they share.
 * - An arena queried while threads on their own streams make it grow; an arena whose last
 *   release failed half way (a driver free failing) still serves, and releases later. */
#include "check.h"
#include "gpumem/sim.h"
#include "suballoc/pool.h"
#include "suballoc/pool_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t rounded(size_t bytes) {
  return (bytes + 255) & ~(size_t)255;
}

/* ---- the model ---- */

enum { model_slots = 400, model_steps = 20000 };

typedef struct model {
  void *ptr[model_slots];
  size_t bytes[model_slots];
  int stream[model_slots]; /* the stream the block was allocated and is freed on */
  uint64_t live_rounded;
} model;

static int compare_addresses(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

/* The tests' random numbers: xorshift64, as BENCHMARKS.md's workloads draw them. */
static uint64_t next_random(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Live blocks do not overlap, and reserved = free + what live blocks hold: their rounded
 * requests, and at most 1/8 more (blocks handed out whole from the pool's cache). */
static void check_model(gpumem_resource *mr, const model *m) {
  static uintptr_t spans[model_slots][2];
  size_t count = 0;
  for (int i = 0; i < model_slots; i++) {
    if (m->ptr[i]) {
      spans[count][0] = (uintptr_t)m->ptr[i];
      spans[count][1] = (uintptr_t)m->ptr[i] + m->bytes[i];
      count++;
    }
  }
  qsort(spans, count, sizeof spans[0], compare_addresses);
  for (size_t i = 1; i < count; i++)
    if (spans[i][0] < spans[i - 1][1])
      CHECK_FAIL_("live blocks overlap: %#lx-%#lx and %#lx-%#lx", (unsigned long)spans[i - 1][0],
                  (unsigned long)spans[i - 1][1], (unsigned long)spans[i][0],
                  (unsigned long)spans[i][1]);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), count);
  uint64_t held =
      check_query(mr, GPUMEM_QUERY_RESERVED_BYTES) - check_query(mr, GPUMEM_QUERY_FREE_BYTES);
  if (held < m->live_rounded || held > m->live_rounded + m->live_rounded / 8 || held % 256)
    CHECK_FAIL_("live blocks hold %" PRIu64 " bytes for %" PRIu64 " bytes of rounded requests",
                held, m->live_rounded);
}

/* A random run on `stream_count` streams (each block freed on the stream it was allocated
 * on), checked against the model; with `trim_every`, a pool is trimmed that often. At the
 * end, with everything freed, the pool is back in its initial state: one free block per
 * chunk (per region over vmm) where nothing could keep blocks apart, and in any case a
 * trim gives back everything. */
static void test_model(const char *spec, int stream_count, int trim_every) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec(spec, &mr));
  bool is_pool = strncmp(spec, "pool", 4) == 0;
  uint64_t initial_reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  uint64_t initial_blocks = check_query(mr, GPUMEM_QUERY_FREE_BLOCKS);
  gpumem_stream streams[3];
  CHECK(stream_count >= 1 && stream_count <= 3);
  for (int s = 0; s < stream_count; s++)
    CHECK_OK(gpumem_stream_create(0, &streams[s]));
  static model m;
  memset(&m, 0, sizeof m);
  uint64_t trimmed = 0;
  uint64_t x = 12345;
  for (int step = 0; step < model_steps; step++) {
    next_random(&x);
    int slot = (int)(x % model_slots);
    if (m.ptr[slot]) {
      CHECK_OK(gpumem_deallocate(mr, m.ptr[slot], m.bytes[slot], streams[m.stream[slot]]));
      m.live_rounded -= rounded(m.bytes[slot]);
      m.ptr[slot] = NULL;
    } else {
      int s = (int)((x >> 30) % (uint64_t)stream_count);
      gpumem_stream stream = streams[s];
      /* Mostly small, sometimes megabytes, now and then over-aligned. */
      size_t bytes = (x >> 40) % 8 == 0 ? 1 + (x >> 20) % (6u << 20) : 1 + (x >> 20) % 20000;
      size_t alignment = (x >> 50) % 16 == 0 ? (size_t)4096 << ((x >> 54) % 8) : 256;
      CHECK_OK(gpumem_allocate_aligned(mr, bytes, alignment, stream, &m.ptr[slot]));
      CHECK_EQ((uintptr_t)m.ptr[slot] % alignment, 0);
      m.bytes[slot] = bytes;
      m.stream[slot] = s;
      m.live_rounded += rounded(bytes);
    }
    if (trim_every && is_pool && step % trim_every == trim_every - 1) {
      uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
      size_t released;
      CHECK_OK(gpumem_pool_trim(mr, &released));
      CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved - released);
      trimmed += released;
      check_model(mr, &m);
    }
    if (step % 997 == 0)
      check_model(mr, &m);
  }
  check_model(mr, &m);
  for (int slot = 0; slot < model_slots; slot++)
    if (m.ptr[slot])
      CHECK_OK(gpumem_deallocate(mr, m.ptr[slot], m.bytes[slot], streams[m.stream[slot]]));
  /* Everything free again: each chunk is one free block again (over vmm, whose growth steps
   * merged, one per region), nothing live. */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BYTES),
               check_query(mr, GPUMEM_QUERY_RESERVED_BYTES));
  if (!is_pool || stream_count > 1 || trim_every)
    ; /* stream pools keep their superblocks, streams' sets their blocks, trims leave gaps */
  else if (strstr(spec, "vmm")) /* one block per region: small requests and the rest */
    CHECK(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS) <= 2);
  else if (initial_reserved == check_query(mr, GPUMEM_QUERY_RESERVED_BYTES))
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), initial_blocks);
  if (is_pool) {
    CHECK_OK(gpumem_pool_trim(mr, NULL));
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 0);
  }
  for (int s = 0; s < stream_count; s++) {
    CHECK_OK(gpumem_stream_synchronize(streams[s]));
    CHECK_OK(gpumem_stream_destroy(streams[s]));
  }
  CHECK_OK(gpumem_resource_release(mr));
  if (trim_every)
    CHECK(trimmed > 0); /* the trims had free memory to give back while blocks were live */
  printf("%-34s model run on %d stream%s passed", spec, stream_count, stream_count > 1 ? "s" : "");
  if (trim_every)
    printf(" (trims gave back %.1f MiB while blocks were live)", trimmed / 1048576.0);
  printf("\n");
}

/* ---- merges ---- */

/* A freed block merges with its free neighbours in each of the four ways (neither, the one
 * below, the one above, both), also where it has no neighbour below (the region's start)
 * and where the one above is the region's free last block: counted by the free blocks, the
 * largest, and where the next request lands; the pool validated after every free. */
static void test_free_merges_each_way(void) {
  enum { MiB = 1 << 20 };
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec(
      "pool(vmm(reserve=64MiB, piece=2MiB), initial=24MiB, release_holes_over=never)", &mr));
  char *b[5];
  for (int i = 0; i < 5; i++) {
    CHECK_OK(gpumem_allocate(mr, 4 * MiB, NULL, (void **)&b[i]));
    if (i)
      CHECK_PTR_EQ(b[i], b[i - 1] + 4 * MiB);
  }
  /* The free last block: 4 MiB after b[4]. */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 1);
  static const struct {
    int freed;
    uint64_t blocks, largest;
  } steps[] = {
      {1, 2, 4 * MiB},  /* neither neighbour free */
      {0, 2, 8 * MiB},  /* none below (the region's start); the one above */
      {3, 3, 8 * MiB},  /* neither */
      {2, 2, 16 * MiB}, /* both */
      {4, 1, 24 * MiB}, /* both, the one above the region's last block */
  };
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    CHECK_OK(gpumem_deallocate(mr, b[steps[i].freed], 4 * MiB, NULL));
    CHECK_OK(gpumem__validate(mr));
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), steps[i].blocks);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK), steps[i].largest);
  }
  /* One block again, from the start, and the region's last: a request for all of it takes
   * it whole without growing. */
  void *all;
  CHECK_OK(gpumem_allocate(mr, 24 * MiB, NULL, &all));
  CHECK_PTR_EQ(all, b[0]);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 24 * MiB);
  /* The one below only: a block freed after the block below it. */
  CHECK_OK(gpumem_deallocate(mr, all, 24 * MiB, NULL));
  char *low, *high;
  CHECK_OK(gpumem_allocate(mr, 8 * MiB, NULL, (void **)&low));
  CHECK_OK(gpumem_allocate(mr, 8 * MiB, NULL, (void **)&high));
  CHECK_PTR_EQ(high, low + 8 * MiB);
  void *rest;
  CHECK_OK(gpumem_allocate(mr, 8 * MiB, NULL, &rest));
  CHECK_OK(gpumem_deallocate(mr, low, 8 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, high, 8 * MiB, NULL));
  CHECK_OK(gpumem__validate(mr));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK), 16 * MiB);
  CHECK_OK(gpumem_deallocate(mr, rest, 8 * MiB, NULL));
  CHECK_OK(gpumem__validate(mr));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 1);
  CHECK_OK(gpumem_resource_release(mr));
  printf("a freed block merges each way, at the region's ends too\n");
}

/* ---- the cache of freed blocks ---- */

static void test_cache(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
  enum { granule = 2 << 20, fillers = 28 };
  /* Four blocks and 28 fillers of 64 KiB fill the small region's first granule: the free
   * index is empty. The second is in the class of 64 KiB (64 to 68 KiB), the third just
   * below it. */
  const size_t sizes[4] = {64 << 10, 69120, 61952, 64 << 10};
  void *q[4], *filler[fillers];
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_allocate(mr, sizes[i], NULL, &q[i]));
  for (int i = 0; i < fillers; i++)
    CHECK_OK(gpumem_allocate(mr, 64 << 10, NULL, &filler[i]));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), granule);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BYTES), 0);

  /* A freed block goes whole to the next request of its class, a smaller one too; the live
   * block holds all of it (reserved = live blocks + free). */
  void *p;
  CHECK_OK(gpumem_deallocate(mr, q[1], sizes[1], NULL));
  CHECK_OK(gpumem_allocate(mr, 65 << 10, NULL, &p));
  CHECK_PTR_EQ(p, q[1]);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BYTES), 0);
  CHECK_OK(gpumem_deallocate(mr, p, 65 << 10, NULL));
  /* Cached, it keeps its slot in the live map (marked cached): freed again, with its size or
   * another, it is refused as no live allocation, and stays cached for the request below. */
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 65 << 10, NULL), GPUMEM_ERR_MISUSE,
                   "not a live allocation");
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 4096, NULL), GPUMEM_ERR_MISUSE,
                   "not a live allocation");
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 3 + fillers);

  /* A request of a smaller class, with nothing in the free index: it is cut from the larger
   * cached block instead of growing the pool. */
  void *small;
  CHECK_OK(gpumem_allocate(mr, 4096, NULL, &small));
  CHECK_PTR_EQ(small, q[1]);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), granule);

  /* Only smaller blocks cached: they merge (the small one back with the rest of its block,
   * and that with the third) and serve a request none could, without growing. */
  CHECK_OK(gpumem_deallocate(mr, small, 4096, NULL));
  CHECK_OK(gpumem_deallocate(mr, q[2], sizes[2], NULL));
  void *merged;
  CHECK_OK(gpumem_allocate(mr, 96 << 10, NULL, &merged));
  CHECK_PTR_EQ(merged, q[1]);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), granule);
  CHECK_OK(gpumem_deallocate(mr, merged, 96 << 10, NULL));
  CHECK_OK(gpumem_deallocate(mr, q[0], sizes[0], NULL));
  CHECK_OK(gpumem_deallocate(mr, q[3], sizes[3], NULL));
  for (int i = 0; i < fillers; i++)
    CHECK_OK(gpumem_deallocate(mr, filler[i], 64 << 10, NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 1);
  /* Blocks of the large region, from the small region's limit up, are not cached: freed,
   * they merge at once. */
  void *large[2];
  for (int i = 0; i < 2; i++)
    CHECK_OK(gpumem_allocate(mr, 200 << 10, NULL, &large[i]));
  for (int i = 0; i < 2; i++)
    CHECK_OK(gpumem_deallocate(mr, large[i], 200 << 10, NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 2); /* one a region */
  CHECK_OK(gpumem_resource_release(mr));

  /* A request whose class has no cached block takes the first of the next class whole when
   * it is at most 1/8 larger: 67.75 KiB for 62 KiB, not for 60 KiB, which is cut from it
   * instead (the small region's granule full again, so the free index is empty). */
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
  enum { fill_count = 30 };
  const size_t next_class = 69376, below = 61696; /* with the fill: the granule */
  void *a, *b, *fill[fill_count];
  CHECK_OK(gpumem_allocate(mr, next_class, NULL, &a));
  CHECK_OK(gpumem_allocate(mr, below, NULL, &b));
  for (int i = 0; i < fill_count; i++)
    CHECK_OK(gpumem_allocate(mr, 64 << 10, NULL, &fill[i]));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BYTES), 0);
  CHECK_OK(gpumem_deallocate(mr, a, next_class, NULL));
  CHECK_OK(gpumem_allocate(mr, 62 << 10, NULL, &p));
  CHECK_PTR_EQ(p, a);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BYTES), 0);
  CHECK_OK(gpumem_deallocate(mr, p, 62 << 10, NULL));
  CHECK_OK(gpumem_allocate(mr, 60 << 10, NULL, &p));
  CHECK_PTR_EQ(p, a);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BYTES), next_class - (60 << 10));
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_deallocate(mr, p, 60 << 10, NULL));
  CHECK_OK(gpumem_deallocate(mr, b, below, NULL));
  for (int i = 0; i < fill_count; i++)
    CHECK_OK(gpumem_deallocate(mr, fill[i], 64 << 10, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  /* More freed blocks than the cache holds (1,024): it merges when full, and everything
   * freed merges back into the one initial block. */
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=32MiB)", &mr));
  enum { many = 1500 };
  static void *blocks[many];
  for (int i = 0; i < many; i++)
    CHECK_OK(gpumem_allocate(mr, 256 + (size_t)(i % 7) * 4096, NULL, &blocks[i]));
  for (int i = 0; i < many; i++)
    CHECK_OK(gpumem_deallocate(mr, blocks[i], 256 + (size_t)(i % 7) * 4096, NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK), 32 << 20);
  CHECK_OK(gpumem_resource_release(mr));
  printf("cache of freed blocks passed\n");
}

/* ---- growth in place ---- */

/* Cached blocks keep their slots in the live map until they leave the cache. The first free
 * on a second stream merges the caches first (the pool's set for that stream), and their
 * slots go, which moves others back along their probe runs: the block being freed must still
 * leave the map, from wherever its slot moved (removed where it was found, a cached block's
 * slot would go instead, and the freed block stay in the map, open). */
static bool slot_moves_when_cache_merges(const pool_resource *pool, uintptr_t addr) {
  const gpumem__block_map *map = &pool->live;
  size_t slot = gpumem__block_map_slot_of(map, addr);
  for (size_t k = gpumem__block_map_home(map, addr); k != slot; k = (k + 1) & (map->capacity - 1))
    if (map->slots[k].block->state == GPUMEM__BLOCK_CACHED)
      return true;
  return false;
}

static void test_cached_slots_leave_on_a_new_stream(void) {
  enum { cached_count = 1000, large_count = 400 };
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
  pool_resource *pool = (pool_resource *)mr;
  static void *small[cached_count], *large[large_count];
  /* The small blocks' slots first, so that the large ones' probe runs pass over them. */
  for (int i = 0; i < cached_count; i++)
    CHECK_OK(gpumem_allocate(mr, 4096, NULL, &small[i]));
  for (int i = 0; i < large_count; i++)
    CHECK_OK(gpumem_allocate(mr, 1 << 20, NULL, &large[i]));
  for (int i = 0; i < cached_count; i++)
    CHECK_OK(gpumem_deallocate(mr, small[i], 4096, NULL));
  CHECK_OK(gpumem__validate(mr));
  /* A large block whose slot lies past a cached block's in its probe run frees first (at
   * about one in sixteen of them, one of 400 is there but for one layout in millions). */
  int first = -1;
  for (int i = 0; i < large_count && first < 0; i++)
    if (slot_moves_when_cache_merges(pool, (uintptr_t)large[i]))
      first = i;
  CHECK(first >= 0);
  void *swap = large[0];
  large[0] = large[first];
  large[first] = swap;
  gpumem_stream side;
  CHECK_OK(gpumem_stream_create(0, &side));
  for (int i = 0; i < large_count; i++) {
    CHECK_OK(gpumem_deallocate(mr, large[i], 1 << 20, side));
    if (i == 0)
      CHECK_OK(gpumem__validate(mr));
  }
  CHECK_OK(gpumem__validate(mr));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_stream_synchronize(side));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_stream_destroy(side));
  printf("a block freed on a new stream leaves the live map after the cache's blocks\n");
}

static void test_growth_in_place(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 0);
  enum { step = 2 << 20, count = 6 };
  void *blocks[count];
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_allocate(mr, step, NULL, &blocks[i]));
  for (int i = 1; i < count; i++)
    CHECK_PTR_EQ(blocks[i], (char *)blocks[i - 1] + step); /* each growth step follows */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), count * step);
  for (int i = 0; i < count; i += 2)
    CHECK_OK(gpumem_deallocate(mr, blocks[i], step, NULL));
  for (int i = 1; i < count; i += 2)
    CHECK_OK(gpumem_deallocate(mr, blocks[i], step, NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK), count * step);
  /* One block spanning every growth step. */
  void *all;
  CHECK_OK(gpumem_allocate(mr, count * step, NULL, &all));
  CHECK_PTR_EQ(all, blocks[0]);
  CHECK_OK(gpumem_deallocate(mr, all, count * step, NULL));
  size_t released = 0;
  CHECK_OK(gpumem_pool_trim(mr, &released));
  CHECK_EQ(released, count * step);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 0);

  /* Trimmed to nothing, the pool grows again, in place, and trims again. */
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 2; i++)
      CHECK_OK(gpumem_allocate(mr, step, NULL, &blocks[i]));
    CHECK_PTR_EQ(blocks[1], (char *)blocks[0] + step);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 2 * step);
    for (int i = 0; i < 2; i++)
      CHECK_OK(gpumem_deallocate(mr, blocks[i], step, NULL));
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 1);
    CHECK_OK(gpumem_pool_trim(mr, &released));
    CHECK_EQ(released, 2 * step);
  }
  CHECK_OK(gpumem_resource_release(mr));
  printf("growth in place over vmm passed\n");
}

/* Chunks A B C in place; B is trimmed (A and C live), which unlinks A from C, then C: the
 * region's growth continues right after A, linked to it, so the two merge when free. */
static void test_growth_in_place_after_trims(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
  enum { step = 2 << 20 };
  void *a, *b, *c, *grown, *all;
  size_t released;
  CHECK_OK(gpumem_allocate(mr, step, NULL, &a));
  CHECK_OK(gpumem_allocate(mr, step, NULL, &b));
  CHECK_OK(gpumem_allocate(mr, step, NULL, &c));
  CHECK_PTR_EQ(c, (char *)b + step);
  CHECK_OK(gpumem_deallocate(mr, b, step, NULL));
  CHECK_OK(gpumem_pool_trim(mr, &released));
  CHECK_EQ(released, step);
  CHECK_OK(gpumem_deallocate(mr, c, step, NULL));
  CHECK_OK(gpumem_pool_trim(mr, &released));
  CHECK_EQ(released, step);
  CHECK_OK(gpumem_allocate(mr, step, NULL, &grown));
  CHECK_PTR_EQ(grown, (char *)a + step);
  CHECK_OK(gpumem_deallocate(mr, grown, step, NULL));
  CHECK_OK(gpumem_deallocate(mr, a, step, NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 1);
  CHECK_OK(gpumem_allocate(mr, 2 * step, NULL, &all)); /* served without growing */
  CHECK_PTR_EQ(all, a);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 2 * step);
  CHECK_OK(gpumem_deallocate(mr, all, 2 * step, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("growth in place after trims passed\n");
}

/* Over vmm with a 32 MiB range, the large region has its first 16 MiB. After a 4 MiB block
 * and a 10 MiB one, the first freed and trimmed, a 4 MiB request would grow past the
 * region's end: it goes to the lowest room in the region, where the first was; a 2 MiB one
 * would then grow into the 10 MiB block's chunk: it goes after that chunk. With the region
 * full, growth goes on past its end, as before. */
static void test_growth_wraps_to_the_lowest_room(void) {
  enum { MiB = 1 << 20 };
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec(
      "pool(vmm(reserve=32MiB, piece=2MiB), release_holes_over=never)", &mr));
  char *first, *second, *low, *after, *past;
  size_t released = 0;
  CHECK_OK(gpumem_allocate(mr, 4 * MiB, NULL, (void **)&first));
  CHECK_OK(gpumem_allocate(mr, 10 * MiB, NULL, (void **)&second));
  CHECK_PTR_EQ(second, first + 4 * MiB);
  CHECK_OK(gpumem_deallocate(mr, first, 4 * MiB, NULL));
  CHECK_OK(gpumem_pool_trim(mr, &released));
  CHECK_EQ(released, 4 * MiB);
  /* On the simulated device, the first try at the lowest room fails (the device makes no
   * memory once): the growth goes where the upstream puts it, the same room, and serves. */
  uint64_t creates = check_on_sim() ? gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) : 0;
  if (check_on_sim())
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_CREATE, 1));
  CHECK_OK(gpumem_allocate(mr, 4 * MiB, NULL, (void **)&low));
  CHECK_PTR_EQ(low, first);
  if (check_on_sim()) /* the failed piece, then the two made */
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) - creates, 3);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_allocate(mr, 2 * MiB, NULL, (void **)&after));
  CHECK_PTR_EQ(after, second + 10 * MiB);
  CHECK_OK(gpumem_allocate(mr, 2 * MiB, NULL, (void **)&past));
  CHECK_PTR_EQ(past, after + 2 * MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 18 * MiB);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_deallocate(mr, past, 2 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, after, 2 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, low, 4 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, second, 10 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  /* Two pools over one vmm: the room one pool finds lowest, the other took; its growth
   * goes where the upstream puts it, and is served. */
  gpumem_resource *vmm, *other;
  CHECK_OK(gpumem_resource_from_spec("vmm(reserve=32MiB, piece=2MiB)", &vmm));
  gpumem_pool_options options = {.release_holes_over = GPUMEM_POOL_KEEP_HOLES};
  CHECK_OK(gpumem_pool_create(vmm, &options, &mr));
  CHECK_OK(gpumem_pool_create(vmm, &options, &other));
  char *theirs;
  CHECK_OK(gpumem_allocate(mr, 4 * MiB, NULL, (void **)&first));
  CHECK_OK(gpumem_allocate(mr, 10 * MiB, NULL, (void **)&second));
  CHECK_OK(gpumem_deallocate(mr, first, 4 * MiB, NULL));
  CHECK_OK(gpumem_pool_trim(mr, &released));
  CHECK_OK(gpumem_allocate(other, 4 * MiB, NULL, (void **)&theirs));
  CHECK_PTR_EQ(theirs, first);
  CHECK_OK(gpumem_allocate(mr, 4 * MiB, NULL, (void **)&low));
  CHECK_PTR_EQ(low, second + 10 * MiB);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem__validate(other));
  CHECK_OK(gpumem_deallocate(mr, low, 4 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, second, 10 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(other, theirs, 4 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(other));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(vmm));

  /* A growth to the lowest room that fails (the device makes no memory there nor anywhere)
   * leaves the growth point where it was: freed, the 10 MiB block is the free last block
   * again, and 12 MiB extend it by 2 MiB in place rather than taking a whole step. */
  if (check_on_sim()) {
    CHECK_OK(gpumem_resource_from_spec(
        "pool(vmm(reserve=32MiB, piece=2MiB), release_holes_over=never)", &mr));
    CHECK_OK(gpumem_allocate(mr, 4 * MiB, NULL, (void **)&first));
    CHECK_OK(gpumem_allocate(mr, 10 * MiB, NULL, (void **)&second));
    CHECK_OK(gpumem_deallocate(mr, first, 4 * MiB, NULL));
    CHECK_OK(gpumem_pool_trim(mr, &released));
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_CREATE, 1));
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_MAP, 1));
    CHECK_FAILS_WITH(gpumem_allocate(mr, 4 * MiB, NULL, (void **)&low), GPUMEM_ERR_CUDA,
                     "injected failure");
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, second, 10 * MiB, NULL));
    CHECK_OK(gpumem_allocate(mr, 12 * MiB, NULL, (void **)&past));
    CHECK_PTR_EQ(past, second);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 12 * MiB);
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, past, 12 * MiB, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  } else {
    printf("  the failed growth is a simulated-device check: not run on a GPU\n");
  }
  printf("growth that would leave its region or meet a chunk goes to the lowest room, and a "
         "failed one leaves the growth point where it was\n");
}

/* A growth step of 32 pieces or more is cut at twice the piece size up to the last such
 * multiple inside it, and at the piece size past that. With its middle freed between two
 * live 1 MiB blocks, a trim unmaps the whole pieces inside: of 64 MiB over 2 MiB pieces,
 * the fourteen of 4 MiB in [4, 60) MiB (not [2, 62)); of 134 MiB over 4 MiB pieces, those
 * of 8 MiB in [8, 128) and the 4 MiB one after them (the piece [132, 134) is in use). The
 * chunk's remains keep their pieces: freed, they go back whole. */
static void test_trim_large_pieces(void) {
  enum { MiB = 1 << 20 };
  static const struct {
    const char *spec;
    size_t step_mib, released_mib;
  } cases[] = {{"pool(vmm(piece=2MiB))", 64, 56}, {"pool(vmm(piece=4MiB))", 134, 124}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t step = cases[i].step_mib * MiB;
    gpumem_resource *mr;
    CHECK_OK(gpumem_resource_from_spec(cases[i].spec, &mr));
    char *whole, *front, *middle, *back;
    CHECK_OK(gpumem_allocate(mr, step, NULL, (void **)&whole));
    CHECK_OK(gpumem_deallocate(mr, whole, step, NULL));
    CHECK_OK(gpumem_allocate(mr, MiB, NULL, (void **)&front));
    CHECK_OK(gpumem_allocate(mr, step - 2 * MiB, NULL, (void **)&middle));
    CHECK_OK(gpumem_allocate(mr, MiB, NULL, (void **)&back));
    CHECK_PTR_EQ(front, whole);
    CHECK_PTR_EQ(back, whole + step - MiB);
    CHECK_OK(gpumem_deallocate(mr, middle, step - 2 * MiB, NULL));
    size_t released = 0;
    CHECK_OK(gpumem_pool_trim(mr, &released));
    CHECK_EQ(released, cases[i].released_mib * MiB);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), step - released);
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, front, MiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, back, MiB, NULL));
    CHECK_OK(gpumem_pool_trim(mr, &released));
    CHECK_EQ(released, step - cases[i].released_mib * MiB);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 0);
    CHECK_OK(gpumem_resource_release(mr));
  }
  printf("trim of a large growth step's pieces passed\n");
}

/* One 10 MiB growth step over vmm with 2 MiB pieces; its middle 8 MiB freed between two
 * live 1 MiB blocks. A trim unmaps the three whole pieces inside ([2, 8) MiB), leaves the
 * two pieces the live blocks touch, and the live blocks stay usable. */
static void test_trim_pieces(void) {
  bool sim = strcmp(gpumem_backend_name(), "sim") == 0;
  enum { MiB = 1 << 20 };
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm(piece=2MiB))", &mr));
  char *whole, *front, *middle, *back;
  CHECK_OK(gpumem_allocate(mr, 10 * MiB, NULL, (void **)&whole));
  CHECK_OK(gpumem_deallocate(mr, whole, 10 * MiB, NULL));
  CHECK_OK(gpumem_allocate(mr, MiB, NULL, (void **)&front));
  CHECK_OK(gpumem_allocate(mr, 8 * MiB, NULL, (void **)&middle));
  CHECK_OK(gpumem_allocate(mr, MiB, NULL, (void **)&back));
  CHECK_PTR_EQ(front, whole);
  CHECK_PTR_EQ(back, whole + 9 * MiB);
  CHECK_OK(gpumem_deallocate(mr, middle, 8 * MiB, NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 10 * MiB);

  size_t released = 0;
  if (sim) { /* an unmap that fails: nothing changes, and a later trim succeeds */
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_UNMAP, 1));
    CHECK_FAILS_WITH(gpumem_pool_trim(mr, &released), GPUMEM_ERR_CUDA, "unmapping");
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 10 * MiB);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 1);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK), 8 * MiB);
  }
  CHECK_OK(gpumem_pool_trim(mr, &released));
  CHECK_EQ(released, 6 * MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 4 * MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 2); /* [1, 2) and [8, 9) MiB */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK), MiB);
  if (sim) {
    uint64_t mapped;
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped, 4 * MiB);
    CHECK_OK(gpumem_sim_launch(NULL, front, MiB, 1)); /* still mapped and accessible */
    CHECK_OK(gpumem_sim_launch(NULL, back, MiB, 2));
    CHECK_OK(gpumem_sim_complete(NULL));
    CHECK_EQ(front[MiB - 1], 1);
    CHECK_EQ(back[0], 2);
  }
  CHECK_OK(gpumem_stream_synchronize(NULL));
  /* The pool grows in place after its last block, and the remains of the cut chunk and
   * the new one merge when free, then go back whole. */
  char *grown;
  CHECK_OK(gpumem_allocate(mr, 6 * MiB, NULL, (void **)&grown));
  CHECK_PTR_EQ(grown, whole + 10 * MiB);
  CHECK_OK(gpumem_deallocate(mr, grown, 6 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, back, MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, front, MiB, NULL));
  CHECK_OK(gpumem_pool_trim(mr, &released));
  CHECK_EQ(released, 10 * MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 0);
  if (sim) {
    uint64_t mapped;
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped, 0);
  }
  CHECK_OK(gpumem_resource_release(mr));

  /* Released with a cut chunk still held: its two remains go back as two allocations. */
  CHECK_OK(gpumem_resource_from_spec("pool(vmm(piece=2MiB))", &mr));
  CHECK_OK(gpumem_allocate(mr, 10 * MiB, NULL, (void **)&whole));
  CHECK_OK(gpumem_deallocate(mr, whole, 10 * MiB, NULL));
  CHECK_OK(gpumem_allocate(mr, MiB, NULL, (void **)&front));
  CHECK_OK(gpumem_allocate(mr, 8 * MiB, NULL, (void **)&middle));
  CHECK_OK(gpumem_allocate(mr, MiB, NULL, (void **)&back));
  CHECK_OK(gpumem_deallocate(mr, middle, 8 * MiB, NULL));
  CHECK_OK(gpumem_pool_trim(mr, &released));
  CHECK_EQ(released, 6 * MiB);
  gpumem_resource *vmm;
  CHECK_OK(gpumem_resource_upstream(mr, &vmm));
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_LIVE_COUNT), 2);
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_LIVE_BYTES), 4 * MiB);
  CHECK_OK(gpumem_deallocate(mr, back, MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, front, MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  if (sim) {
    uint64_t mapped;
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped, 0);
  }
  printf("trim of free pieces over vmm passed\n");
}

/* ---- maximum size and out of memory ---- */

static void test_maximum(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=4MiB, max=16MiB)", &mr));
  enum { block = 1 << 20 };
  void *blocks[32];
  int count = 0;
  gpumem_status status;
  while ((status = gpumem_allocate(mr, block, NULL, &blocks[count])) == GPUMEM_OK)
    count++;
  CHECK_STATUS(status, GPUMEM_ERR_OUT_OF_MEMORY);
  CHECK_CONTAINS(gpumem_last_error_message(), "maximum size");
  CHECK_CONTAINS(gpumem_last_error_message(), "pool(cuda");
  CHECK_EQ(count, 16);
  CHECK(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES) <= (16u << 20));
  /* Still usable: a freed block is handed out again. */
  CHECK_OK(gpumem_deallocate(mr, blocks[5], block, NULL));
  void *again;
  CHECK_OK(gpumem_allocate(mr, block, NULL, &again));
  CHECK_PTR_EQ(again, blocks[5]);
  blocks[5] = again;
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_deallocate(mr, blocks[i], block, NULL));
  void *ptr = (void *)0x1;
  CHECK_STATUS(gpumem_allocate(mr, 17u << 20, NULL, &ptr), GPUMEM_ERR_OUT_OF_MEMORY);
  CHECK_PTR_EQ(ptr, (void *)0x1);
  CHECK_OK(gpumem_resource_release(mr));

  /* In place, with the region's free last block: 4 MiB need only 2 more, which reach the
   * maximum exactly. */
  CHECK_OK(gpumem_resource_from_spec("pool(vmm, max=6MiB)", &mr));
  void *first, *last, *both;
  CHECK_OK(gpumem_allocate(mr, 2 << 20, NULL, &first));
  CHECK_OK(gpumem_allocate(mr, 2 << 20, NULL, &last));
  CHECK_OK(gpumem_deallocate(mr, last, 2 << 20, NULL));
  CHECK_OK(gpumem_allocate(mr, 4 << 20, NULL, &both));
  CHECK_PTR_EQ(both, last);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 6 << 20);
  CHECK_STATUS(gpumem_allocate(mr, 1, NULL, &ptr), GPUMEM_ERR_OUT_OF_MEMORY);
  CHECK_OK(gpumem_deallocate(mr, both, 4 << 20, NULL));
  CHECK_OK(gpumem_deallocate(mr, first, 2 << 20, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  gpumem_resource *bad = NULL;
  CHECK_FAILS_WITH(gpumem_resource_from_spec("pool(cuda, initial=8MiB, max=4MiB)", &bad),
                   GPUMEM_ERR_INVALID_ARGUMENT, "exceeds the maximum");
  CHECK_PTR_EQ(bad, NULL);
  printf("maximum size passed\n");
}

/* ---- trim ---- */

static void test_trim(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=2MiB)", &mr));
  void *small, *big[4];
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &small));
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_allocate(mr, 3 << 20, NULL, &big[i]));
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK(reserved >= (2u << 20) + 4 * (3u << 20));
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_deallocate(mr, big[i], 3 << 20, NULL));
  size_t released = 0;
  CHECK_OK(gpumem_pool_trim(mr, &released));
  /* The growth chunks went back; the initial chunk holds a live block and stays. */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 2u << 20);
  CHECK_U64_EQ(released, reserved - (2u << 20));
  /* A trim whose second driver free fails gives back the first chunk, says so in *released,
   * and keeps the others; a trim after it gives back the rest. */
  if (check_on_sim()) {
    for (int i = 0; i < 4; i++)
      CHECK_OK(gpumem_allocate(mr, 3 << 20, NULL, &big[i]));
    for (int i = 0; i < 4; i++)
      CHECK_OK(gpumem_deallocate(mr, big[i], 3 << 20, NULL));
    uint64_t before = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEM_FREE, 2));
    CHECK_FAILS_WITH(gpumem_pool_trim(mr, &released), GPUMEM_ERR_CUDA, "injected failure");
    uint64_t after = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
    CHECK(released > 0 && after > (2u << 20));
    CHECK_U64_EQ(released, before - after);
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_pool_trim(mr, &released));
    CHECK_U64_EQ(released, after - (2u << 20));
  }
  CHECK_OK(gpumem_deallocate(mr, small, 1000, NULL));
  CHECK_OK(gpumem_pool_trim(mr, &released));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_FAILS_WITH(gpumem_pool_trim(NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT, "not a pool");
  CHECK_OK(gpumem_resource_release(mr));
  printf("trim passed\n");
}

static void use_on(gpumem_stream stream, void *ptr, size_t bytes, int value);

/* Free holes between live blocks: `count` holes of `hole` bytes, each followed by a live
 * block of `live_bytes`; ptrs[2i] are the freed holes' old pointers, ptrs[2i+1] the live
 * blocks. */
static void punch_holes(gpumem_resource *mr, void **ptrs, int count, size_t hole,
                        size_t live_bytes) {
  for (int i = 0; i < count; i++) {
    CHECK_OK(gpumem_allocate(mr, hole, NULL, &ptrs[2 * i]));
    CHECK_OK(gpumem_allocate(mr, live_bytes, NULL, &ptrs[2 * i + 1]));
  }
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_deallocate(mr, ptrs[2 * i], hole, NULL));
}

/* A request that fits no hole, where the pool cannot grow (its maximum, or the device full),
 * gets the holes' memory: before failing, the pool gives every whole free piece back and
 * grows again. Where that cannot help (nothing free, a request past the maximum or the
 * device's whole memory) it fails as before, giving nothing back; a trim that fails loses
 * nothing. */
static void test_trim_before_failing(void) {
  enum { holes = 6, hole = 8 << 20, live = 2 << 20 };
  void *ptrs[2 * holes], *big = NULL;
  gpumem_resource *mr;
  /* The pool's maximum: 60 MiB of 64 reserved, 48 MiB of it free in 8 MiB holes. */
  CHECK_OK(gpumem_resource_from_spec("pool(vmm(piece=2MiB), max=64MiB)", &mr));
  punch_holes(mr, ptrs, holes, hole, live);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), holes * (hole + live));
  uint64_t waits = gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE);
  uint64_t unmaps = gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_UNMAP);
  CHECK_OK(gpumem_allocate(mr, 2 * hole, NULL, &big));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), holes * live + 2 * hole);
  if (check_on_sim()) {
    /* One wait for the device, the fold's, which the trim after it does not repeat; and
     * one for the default stream before each unmap (vmm's own, a hole each). */
    uint64_t unmapped = gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_UNMAP) - unmaps;
    CHECK_U64_EQ(unmapped, holes);
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE) - waits, 1 + unmapped);
  }
  CHECK(gpumem_last_error_message()[0] == '\0'); /* no stale message behind the success */
  CHECK_OK(gpumem__validate(mr));
  /* Nothing free: it fails as before, giving nothing back. */
  void *none = (void *)0x1;
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  void *fill;
  CHECK_OK(gpumem_allocate(mr, (64 << 20) - reserved, NULL, &fill));
  unmaps = gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_UNMAP);
  CHECK_FAILS_WITH(gpumem_allocate(mr, 2 << 20, NULL, &none), GPUMEM_ERR_OUT_OF_MEMORY,
                   "maximum size");
  CHECK_PTR_EQ(none, (void *)0x1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 64 << 20);
  if (check_on_sim())
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_UNMAP), unmaps);
  CHECK_OK(gpumem_deallocate(mr, fill, (64 << 20) - reserved, NULL));
  /* Larger than the maximum: nothing goes back for it. */
  reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK_FAILS_WITH(gpumem_allocate(mr, 65 << 20, NULL, &none), GPUMEM_ERR_OUT_OF_MEMORY,
                   "maximum size");
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  CHECK_OK(gpumem_deallocate(mr, big, 2 * hole, NULL));
  for (int i = 0; i < holes; i++)
    CHECK_OK(gpumem_deallocate(mr, ptrs[2 * i + 1], live, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  if (!check_on_sim()) {
    printf("a request that fits no hole at the maximum gets the holes' memory (the device "
           "full and failed trims are simulated-device checks)\n");
    return;
  }
  /* The device full: another resource holds all of it but what the pool holds and 1 MiB,
   * less than a piece (so that a growth fails before it maps anything). */
  CHECK_OK(gpumem_resource_from_spec("pool(vmm(piece=2MiB))", &mr));
  punch_holes(mr, ptrs, holes, hole, live);
  gpumem_resource *hog;
  CHECK_OK(gpumem_resource_from_spec("cuda", &hog));
  size_t free_bytes = 0, total_bytes = 0;
  CHECK_OK(gpumem_device_memory_info(0, &free_bytes, &total_bytes));
  /* More than the device has at all: nothing goes back for it. */
  reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK_FAILS_WITH(gpumem_allocate(mr, total_bytes + (2 << 20), NULL, &none),
                   GPUMEM_ERR_OUT_OF_MEMORY, "could not give more memory");
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BYTES), holes * hole);
  void *hogged;
  CHECK_OK(gpumem_allocate(hog, free_bytes - (1 << 20), NULL, &hogged));
  /* A trim whose device wait fails: the allocation fails with it, and nothing changed (the
   * failure path folds the stream's set into the fresh one first: the trim's wait is the
   * fold's). */
  reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_SYNCHRONIZE, 1));
  CHECK_FAILS_WITH(gpumem_allocate(mr, 2 * hole, NULL, &none), GPUMEM_ERR_CUDA,
                   "waiting for the device");
  CHECK_PTR_EQ(none, (void *)0x1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BYTES), holes * hole);
  CHECK_OK(gpumem__validate(mr));
  /* One whose second unmap fails: what went back before it stays given back, the rest stays
   * free in the pool; the next request gets both. */
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_UNMAP, 2));
  CHECK_FAILS_WITH(gpumem_allocate(mr, 2 * hole, NULL, &none), GPUMEM_ERR_CUDA, "injected failure");
  CHECK_PTR_EQ(none, (void *)0x1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved - hole);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BYTES), (holes - 1) * hole);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), holes);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_allocate(mr, 2 * hole, NULL, &big));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), holes * live + 2 * hole);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_deallocate(hog, hogged, free_bytes - (1 << 20), NULL));
  CHECK_OK(gpumem_resource_release(hog));
  CHECK_OK(gpumem_deallocate(mr, big, 2 * hole, NULL));
  for (int i = 0; i < holes; i++)
    CHECK_OK(gpumem_deallocate(mr, ptrs[2 * i + 1], live, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  /* Holes freed on another stream, its work on them pending: the trim waits for the device
   * before it unmaps them, and the request's stream then uses the memory without a hazard. */
  CHECK_OK(gpumem_resource_from_spec("pool(vmm(piece=2MiB), max=64MiB)", &mr));
  gpumem_stream a, b;
  CHECK_OK(gpumem_stream_create(0, &a));
  CHECK_OK(gpumem_stream_create(0, &b));
  for (int i = 0; i < holes; i++) {
    CHECK_OK(gpumem_allocate(mr, hole, b, &ptrs[2 * i]));
    use_on(b, ptrs[2 * i], hole, i);
    CHECK_OK(gpumem_allocate(mr, live, b, &ptrs[2 * i + 1]));
  }
  for (int i = 0; i < holes; i++)
    CHECK_OK(gpumem_deallocate(mr, ptrs[2 * i], hole, b));
  gpumem_sim_reset_hazards();
  CHECK_OK(gpumem_allocate(mr, 2 * hole, a, &big));
  use_on(a, big, 2 * hole, 7);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), holes * live + 2 * hole);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_deallocate(mr, big, 2 * hole, a));
  for (int i = 0; i < holes; i++)
    CHECK_OK(gpumem_deallocate(mr, ptrs[2 * i + 1], live, b));
  CHECK_OK(gpumem_sim_complete_all());
  CHECK_OK(gpumem_stream_destroy(a));
  CHECK_OK(gpumem_stream_destroy(b));
  CHECK_OK(gpumem_resource_release(mr));
  printf("a request that fits no hole, at the maximum or with the device full, gets the "
         "holes' memory (after a wait for the device: no hazard across streams); nothing free "
         "or past the maximum or the device fails as before; a failed trim loses nothing\n");
}

/* ---- cross-stream reuse ---- */

enum { seal_every = 16 }; /* the pool's batch: one event record per this many frees */

/* Work that uses a block on a stream: a kernel the simulated device tracks (so that it sees
 * a hazard), a memset on a GPU. */
static void use_on(gpumem_stream stream, void *ptr, size_t bytes, int value) {
  if (check_on_sim())
    CHECK_OK(gpumem_sim_launch(stream, ptr, bytes, value));
  else
    CHECK_OK(gpumem_memset_async(ptr, value & 0xff, bytes, stream));
}

/* On both backends: stream b reuses the blocks a freed once a's work on them is done, so
 * the pool barely grows. On the simulated device also: while a's work is pending b grows
 * rather than wait for it (streams' work must not run one after another for the pool's
 * sake); at the pool's limit b takes them after waiting for that work (no hazard), with one
 * stream wait per batch, for one event record per batch of frees; and a seal whose event
 * record fails is a failed free. A GPU has no count of event records or waits and cannot
 * fail a record on demand; tests/gpu/stream_order.cu checks the waiting there. */
static void test_cross_stream(void) {
  bool sim = check_on_sim();
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=1)", &mr));
  gpumem_stream a, b;
  CHECK_OK(gpumem_stream_create(0, &a));
  CHECK_OK(gpumem_stream_create(0, &b));
  /* Both streams use the pool: its frees get sealed from now on. */
  void *first;
  CHECK_OK(gpumem_allocate(mr, 256, a, &first));
  CHECK_OK(gpumem_deallocate(mr, first, 256, b));

  /* Past the cache's limit: a cached block is its stream's alone (test_stream_caches). */
  enum { count = 100, bytes = 1100000 };
  void *blocks[count];
  for (int i = 0; i < count; i++) {
    CHECK_OK(gpumem_allocate(mr, bytes, a, &blocks[i]));
    use_on(a, blocks[i], bytes, i);
  }
  uint64_t records = gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD);
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_deallocate(mr, blocks[i], bytes, a));
  uint64_t recorded = gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD) - records;
  if (sim)
    CHECK(recorded >= 1 && recorded <= count / seal_every + 1);

  gpumem_sim_reset_hazards();
  uint64_t waits = gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT);
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  if (sim) {
    /* Stream a's kernels are pending: b grows for one block rather than wait on them. */
    void *grown;
    CHECK_OK(gpumem_allocate(mr, bytes, b, &grown));
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT), waits);
    CHECK(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES) > reserved);
    CHECK_OK(gpumem_deallocate(mr, grown, bytes, b));
  }
  CHECK_OK(gpumem_stream_synchronize(a)); /* a's work done: b takes its blocks, no wait */
  reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  for (int i = 0; i < count; i++) {
    CHECK_OK(gpumem_allocate(mr, bytes, b, &blocks[i]));
    use_on(b, blocks[i], bytes, i);
  }
  if (sim) {
    CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT), waits); /* idle: no wait */
  }
  /* At most the last unsealed batch had to come from new memory. */
  CHECK(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES) - reserved <=
        (uint64_t)seal_every * 2 * bytes);
  if (!sim) {
    for (int i = 0; i < count; i++)
      CHECK_OK(gpumem_deallocate(mr, blocks[i], bytes, b));
    CHECK_OK(gpumem_stream_synchronize(a));
    CHECK_OK(gpumem_stream_synchronize(b));
    CHECK_OK(gpumem_stream_destroy(a));
    CHECK_OK(gpumem_stream_destroy(b));
    CHECK_OK(gpumem_resource_release(mr));
    printf("cross-stream reuse: b reused a's blocks (event records, waits and hazards are "
           "simulated-device checks, not made on a GPU)\n");
    return;
  }

  /* A seal whose event record fails is a failed free: nothing changes, and it can be
   * freed again. */
  uint64_t live = check_query(mr, GPUMEM_QUERY_LIVE_COUNT);
  int freed = 0;
  for (; freed < count; freed++) {
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_EVENT_RECORD, 1));
    gpumem_status status = gpumem_deallocate(mr, blocks[freed], bytes, b);
    if (status != GPUMEM_OK) {
      CHECK_STATUS(status, GPUMEM_ERR_CUDA);
      CHECK_CONTAINS(gpumem_last_error_message(), "event");
      CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), live - (uint64_t)freed);
      CHECK_OK(gpumem_deallocate(mr, blocks[freed], bytes, b));
      freed++;
      break;
    }
  }
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_EVENT_RECORD, 0));
  CHECK(freed <= seal_every);
  for (int i = freed; i < count; i++)
    CHECK_OK(gpumem_deallocate(mr, blocks[i], bytes, b));
  CHECK_OK(gpumem_sim_complete_all());
  CHECK_OK(gpumem_stream_destroy(a));
  CHECK_OK(gpumem_stream_destroy(b));
  CHECK_OK(gpumem_resource_release(mr));
  printf("cross-stream reuse: no hazard, %llu event records for %d frees\n",
         (unsigned long long)recorded, count);
}

/* At its limit a pool takes another stream's sealed blocks with that stream's work still
 * pending, after making the taking stream wait for it: no hazard, one wait. */
static void test_cross_stream_at_limit(void) {
  if (!check_on_sim()) {
    printf("cross-stream reuse at the limit: a simulated-device check (waits and hazards)\n");
    return;
  }
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=8MiB, max=8MiB)", &mr));
  gpumem_stream a, b;
  CHECK_OK(gpumem_stream_create(0, &a));
  CHECK_OK(gpumem_stream_create(0, &b));
  enum { piece = 4 << 20 };
  void *x[2], *taken;
  CHECK_OK(gpumem_allocate(mr, 256, b, &taken)); /* b uses the pool: frees get sealed */
  CHECK_OK(gpumem_deallocate(mr, taken, 256, b));
  for (int i = 0; i < 2; i++) {
    CHECK_OK(gpumem_allocate(mr, piece - (i ? 4096 : 0), a, &x[i]));
    use_on(a, x[i], piece - (i ? 4096 : 0), i);
  }
  for (int i = 0; i < 2; i++)
    CHECK_OK(gpumem_deallocate(mr, x[i], piece - (i ? 4096 : 0), a)); /* sealed, pending */
  gpumem_sim_reset_hazards();
  uint64_t waits = gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT);
  CHECK_OK(gpumem_allocate(mr, piece, b, &taken));
  use_on(b, taken, piece, 9);
  CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT), waits + 1);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  CHECK_OK(gpumem_deallocate(mr, taken, piece, b));
  CHECK_OK(gpumem_sim_complete_all());
  CHECK_OK(gpumem_stream_destroy(a));
  CHECK_OK(gpumem_stream_destroy(b));
  CHECK_OK(gpumem_resource_release(mr));
  printf("cross-stream reuse at the limit: one wait, no hazard\n");
}

/* ---- many threads, freeing each other's blocks ---- */

enum { thread_count = 16, thread_steps = 4000, mailbox_size = 64 };

typedef struct mailbox {
  pthread_mutex_t lock;
  void *ptr[mailbox_size];
  size_t bytes[mailbox_size];
  int count;
} mailbox;

static mailbox mailboxes[thread_count];
static gpumem_resource *shared_pool;

static void *thread_worker(void *arg) {
  int me = (int)(intptr_t)arg;
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(0, &stream));
  uint64_t x = 0x1234567ull * (uint64_t)(me + 1);
  for (int step = 0; step < thread_steps; step++) {
    next_random(&x);
    mailbox *box = &mailboxes[x % thread_count];
    pthread_mutex_lock(&box->lock);
    if (box->count == mailbox_size || (box->count > 0 && (x >> 32) % 2)) {
      /* Free a block some thread allocated, on this thread's stream. */
      box->count--;
      CHECK_OK(
          gpumem_deallocate(shared_pool, box->ptr[box->count], box->bytes[box->count], stream));
    } else {
      /* Up to past what fronts serve (256 KiB): their blocks of 128 KiB and more come from
       * the large region of a pool over vmm. */
      size_t bytes = 1 + (x >> 40) % 300000;
      CHECK_OK(gpumem_allocate(shared_pool, bytes, stream, &box->ptr[box->count]));
      box->bytes[box->count++] = bytes;
    }
    pthread_mutex_unlock(&box->lock);
  }
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_destroy(stream));
  return NULL;
}

/* A pool(vmm) that two streams have used, so that its frees get sealed: the busy stream's
 * first free from now on seals, then every GPUMEM__POOL_SEAL_EVERY-th. */
static void two_stream_pool_of(const char *spec, gpumem_resource **mr, gpumem_stream *busy,
                               gpumem_stream *side) {
  CHECK_OK(gpumem_resource_from_spec(spec, mr));
  CHECK_OK(gpumem_stream_create(0, busy));
  if (!*side) /* a special handle given stays */
    CHECK_OK(gpumem_stream_create(0, side));
  void *first;
  CHECK_OK(gpumem_allocate(*mr, 256, *busy, &first));
  CHECK_OK(gpumem_deallocate(*mr, first, 256, *side));
}

static void two_stream_pool(gpumem_resource **mr, gpumem_stream *busy, gpumem_stream *side) {
  two_stream_pool_of("pool(vmm)", mr, busy, side);
}

static void two_stream_pool_release(gpumem_resource *mr, gpumem_stream busy, gpumem_stream side) {
  CHECK_OK(gpumem_stream_synchronize(busy));
  CHECK_OK(gpumem_stream_synchronize(side));
  CHECK_OK(gpumem_stream_destroy(busy));
  CHECK_OK(gpumem_stream_destroy(side));
  CHECK_OK(gpumem_resource_release(mr));
}

/* A side stream that takes a few small blocks of a busy stream's sealed free memory leaves
 * its large free memory where it was: the busy stream reuses it without growing (a steal
 * moves the request's region only; taking both held the busy stream's large memory open in
 * the side stream's set, and on a real trace grew the pool fourfold). */
static void test_side_stream_leaves_large_memory(void) {
  gpumem_resource *mr;
  gpumem_stream busy, side = NULL;
  two_stream_pool(&mr, &busy, &side);
  enum { count = 16, large = 4 << 20, small = 64 << 10 };
  void *big[count], *little[count], *extra;
  CHECK_OK(gpumem_allocate(mr, small, busy, &extra));
  for (int i = 0; i < count; i++) {
    CHECK_OK(gpumem_allocate(mr, large, busy, &big[i]));
    CHECK_OK(gpumem_allocate(mr, small, busy, &little[i]));
  }
  /* The busy stream's first free after the second stream came seals, then every 16th:
   * 1 + 2 * 16 frees leave every block sealed (an open one would unseal its neighbours). */
  CHECK_OK(gpumem_deallocate(mr, extra, small, busy));
  for (int i = 0; i < count; i++) {
    CHECK_OK(gpumem_deallocate(mr, little[i], small, busy));
    CHECK_OK(gpumem_deallocate(mr, big[i], large, busy));
  }
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  void *taken;
  CHECK_OK(gpumem_allocate(mr, small, side, &taken)); /* a steal of the busy stream's */
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_allocate(mr, large, busy, &big[i]));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_deallocate(mr, big[i], large, busy));
  CHECK_OK(gpumem_deallocate(mr, taken, small, side));
  two_stream_pool_release(mr, busy, side);
  printf("a side stream's small steal leaves the busy stream's large memory: no growth\n");
}

/* A stream's open free unseals its sealed neighbours and merges with them: the stream's own
 * free memory is not cut into open and sealed pieces that a larger request cannot use (the
 * pool grew for it before). The merged memory is open: while the stream has work pending,
 * another stream takes it only after the next seal. */
static void test_open_free_merges_sealed_neighbours(void) {
  gpumem_resource *mr;
  gpumem_stream busy, side = NULL;
  two_stream_pool(&mr, &busy, &side);
  enum { piece = 512 << 10 }; /* under GPUMEM__POOL_OPEN_BYTES_MAX: its frees stay open */
  void *x[3];
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpumem_allocate(mr, piece, busy, &x[i]));
  CHECK_PTR_EQ((char *)x[1], (char *)x[0] + piece);   /* growth in place: one range */
  CHECK_OK(gpumem_deallocate(mr, x[0], piece, busy)); /* the first free after: a seal */
  CHECK_OK(gpumem_deallocate(mr, x[1], piece, busy)); /* open, next to the sealed x[0] */
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  void *both;
  CHECK_OK(gpumem_allocate(mr, 2 * piece, busy, &both));
  CHECK_PTR_EQ(both, x[0]);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  /* Freed again after work that uses it, it is open, with less than
   * GPUMEM__POOL_UNSEALED_MAX unsealed: while that work is pending the other stream does not
   * get it before the busy stream's next seal (a GPU may finish the work at once: only the
   * simulated device keeps it pending). */
  use_on(busy, both, 2 * piece, 1);
  CHECK_OK(gpumem_deallocate(mr, both, 2 * piece, busy));
  void *elsewhere;
  CHECK_OK(gpumem_allocate(mr, piece, side, &elsewhere));
  if (check_on_sim())
    CHECK((char *)elsewhere < (char *)x[0] || (char *)elsewhere >= (char *)x[0] + 2 * piece);
  CHECK_OK(gpumem_deallocate(mr, elsewhere, piece, side));
  CHECK_OK(gpumem_deallocate(mr, x[2], piece, busy));
  if (check_on_sim())
    CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  two_stream_pool_release(mr, busy, side);
  printf("an open free merges with its sealed neighbours: no growth\n");
}

/* A stream whose sealed blocks' work is done gives them to another stream that finds nothing
 * in its own, with no wait: they merge there with that stream's own, as in a one-stream pool.
 * Frees of large blocks seal at once (GPUMEM__POOL_OPEN_BYTES_MAX), so they are the other
 * streams' soon. Before, a side stream that freed a few large blocks now and then kept them
 * until its sixteenth free, and one that stole a busy stream's memory held it: on real traces
 * of a prefetcher and of two requests served at once, 1.133 and 1.292 to 1.461 times their
 * live peak against 1.007 and 1.069 to 1.049 with one stream (docs/gpu-runs.md, forty-second
 * session). While the work is pending, the other stream grows rather than wait for it. */
static void test_idle_stream_gives_its_blocks(void) {
  bool sim = check_on_sim();
  gpumem_resource *mr;
  gpumem_stream busy, side = NULL;
  /* Holes kept: a release for the dominant requests below would unmap the side's blocks. */
  two_stream_pool_of("pool(vmm, release_holes_over=never)", &mr, &busy, &side);
  enum { piece = 4 << 20 };
  void *x[3], *pin;
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpumem_allocate(mr, piece, side, &x[i]));
  CHECK_OK(gpumem_allocate(mr, piece, busy, &pin)); /* keeps the side's blocks off the end */
  use_on(side, x[0], 3 * piece, 7);
  CHECK_OK(gpumem_deallocate(mr, x[1], piece, side)); /* the first free after: a seal */
  CHECK_OK(gpumem_deallocate(mr, x[0], piece, side)); /* past the open bytes' limit: a seal */
  CHECK_OK(gpumem_stream_synchronize(side));

  /* Done: the busy stream takes both blocks as one, with no growth and no wait. */
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  uint64_t waits = gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT);
  void *taken;
  CHECK_OK(gpumem_allocate(mr, 2 * piece, busy, &taken));
  CHECK_PTR_EQ(taken, x[0]);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  if (sim) {
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT), waits);
    CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  }

  /* Pending: the busy stream's work on the block is not done, so the side stream grows
   * rather than wait for it (a GPU may finish the work at once: only the simulated device
   * keeps it pending). */
  use_on(busy, taken, 2 * piece, 8);
  CHECK_OK(gpumem_deallocate(mr, taken, 2 * piece, busy)); /* a seal */
  void *grown;
  CHECK_OK(gpumem_allocate(mr, 2 * piece, side, &grown));
  if (sim) {
    CHECK(grown != x[0]);
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT), waits);
    CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  }
  CHECK_OK(gpumem_deallocate(mr, grown, 2 * piece, side));
  CHECK_OK(gpumem_stream_synchronize(busy));

  /* A failed query is absorbed: the side stream grows instead, and takes the block at its
   * next miss. */
  if (sim) {
    uint64_t absorbed = gpumem__absorbed_errors();
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_EVENT_QUERY, 1));
    CHECK_OK(gpumem_allocate(mr, 4 * piece, side, &grown));
    CHECK(gpumem__absorbed_errors() > absorbed);
    CHECK_OK(gpumem_allocate(mr, 2 * piece, side, &taken));
    CHECK_PTR_EQ(taken, x[0]);
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT), waits);
    CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
    CHECK_OK(gpumem_deallocate(mr, taken, 2 * piece, side));
    CHECK_OK(gpumem_deallocate(mr, grown, 4 * piece, side));
  }
  CHECK_OK(gpumem_deallocate(mr, x[2], piece, side));
  CHECK_OK(gpumem_deallocate(mr, pin, piece, busy));
  two_stream_pool_release(mr, busy, side);
  printf("an idle stream gives its sealed blocks to another stream: no growth, no wait\n");
}

/* When a second stream first comes, the pool waits for the device once, where the first
 * stream has freed memory: what it freed so far, open (fewer frees than a seal takes) and
 * never to be sealed if that stream frees no more, becomes free for every stream. Before,
 * on a real trace of two requests served at once, 52 MB sat open in the first stream's set
 * and the pool grew for the second. A third stream costs no wait; a failed wait leaves the
 * sets as they were, and the second stream grows instead. */
static void test_second_stream_takes_first_streams_frees(void) {
  bool sim = check_on_sim();
  enum { piece = 1 << 20 };
  if (sim) { /* nothing freed yet: nothing to fold, and no wait */
    gpumem_resource *mr;
    gpumem_stream first, second;
    void *held, *other;
    CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
    CHECK_OK(gpumem_stream_create(0, &first));
    CHECK_OK(gpumem_stream_create(0, &second));
    CHECK_OK(gpumem_allocate(mr, 4 * piece, first, &held));
    use_on(first, held, 4 * piece, 1);
    uint64_t syncs = gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE), pending = 0;
    CHECK_OK(gpumem_allocate(mr, piece, second, &other));
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE), syncs);
    CHECK_OK(gpumem_sim_pending(first, &pending));
    CHECK(pending > 0);
    CHECK_OK(gpumem_deallocate(mr, other, piece, second));
    CHECK_OK(gpumem_deallocate(mr, held, 4 * piece, first));
    two_stream_pool_release(mr, first, second);
  }
  for (int failing = 0; failing < (sim ? 2 : 1); failing++) {
    gpumem_resource *mr;
    gpumem_stream first, second, third;
    CHECK_OK(gpumem_resource_from_spec("pool(vmm, release_holes_over=never)", &mr));
    CHECK_OK(gpumem_stream_create(0, &first));
    CHECK_OK(gpumem_stream_create(0, &second));
    CHECK_OK(gpumem_stream_create(0, &third));
    void *freed, *pin, *taken, *little;
    CHECK_OK(gpumem_allocate(mr, piece, first, &freed));
    CHECK_OK(gpumem_allocate(mr, piece, first, &pin));
    use_on(first, freed, piece, 3);
    CHECK_OK(gpumem_deallocate(mr, freed, piece, first));
    uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
    uint64_t syncs = sim ? gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE) : 0;
    uint64_t absorbed = gpumem__absorbed_errors();
    if (failing)
      CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_SYNCHRONIZE, 1));
    CHECK_OK(gpumem_allocate(mr, piece, second, &taken));
    if (!failing) {
      CHECK_PTR_EQ(taken, freed);
      CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
    } else {
      CHECK(taken != freed);
      CHECK(gpumem__absorbed_errors() > absorbed);
    }
    if (sim) {
      CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE), syncs + 1);
      CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
    }
    CHECK_OK(gpumem_allocate(mr, 256, third, &little));
    if (sim)
      CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE), syncs + 1);
    CHECK_OK(gpumem_deallocate(mr, little, 256, third));
    CHECK_OK(gpumem_deallocate(mr, taken, piece, second));
    CHECK_OK(gpumem_deallocate(mr, pin, piece, first));
    if (failing) { /* the first stream's open block is its own still */
      CHECK_OK(gpumem_allocate(mr, piece, first, &freed));
      CHECK_OK(gpumem_deallocate(mr, freed, piece, first));
    }
    CHECK_OK(gpumem_stream_synchronize(first));
    CHECK_OK(gpumem_stream_synchronize(second));
    CHECK_OK(gpumem_stream_destroy(third));
    two_stream_pool_release(mr, first, second);
  }
  printf("a second stream takes the first stream's open frees after one wait for the device\n");
}

/* A stream that takes another stream's sealed blocks seals them at once in its own set:
 * once its work is done they go back to the other stream with no wait. Left open until the
 * taking stream's next seal (sixteen frees away), they were neither stream's to take, and
 * the other stream grew the pool. The pool is at its maximum: before growth no stream
 * waits for another, so only a pool that cannot grow steals pending blocks. */
static void test_stolen_blocks_are_sealed(void) {
  bool sim = check_on_sim();
  gpumem_resource *mr;
  gpumem_stream busy, side = NULL;
  /* The small region's granule (two_stream_pool_of) and the four pieces below. */
  two_stream_pool_of("pool(vmm, max=18MiB, release_holes_over=never)", &mr, &busy, &side);
  enum { piece = 4 << 20 };
  void *a, *b, *pins[2], *taken, *again;
  CHECK_OK(gpumem_allocate(mr, piece, busy, &a));
  CHECK_OK(gpumem_allocate(mr, piece, busy, &pins[0]));
  CHECK_OK(gpumem_allocate(mr, piece, busy, &b));
  CHECK_OK(gpumem_allocate(mr, piece, busy, &pins[1])); /* keeps b off the region's end */
  use_on(busy, a, piece, 5);
  CHECK_OK(gpumem_deallocate(mr, a, piece, busy)); /* the first free after: a seal */
  CHECK_OK(gpumem_deallocate(mr, b, piece, busy)); /* past the open bytes' limit: a seal */
  /* The busy stream's work is pending (on the simulated device) and the pool cannot grow:
   * the side stream steals, after a wait, both blocks of the region, and takes a. */
  CHECK_OK(gpumem_allocate(mr, piece, side, &taken));
  CHECK_PTR_EQ(taken, a);
  CHECK_OK(gpumem_stream_synchronize(side));
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  uint64_t waits = sim ? gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT) : 0;
  uint64_t syncs = sim ? gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE) : 0;
  CHECK_OK(gpumem_allocate(mr, piece, busy, &again)); /* b, from the idle side stream */
  CHECK_PTR_EQ(again, b);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  if (sim) { /* neither a stream's wait nor the device's (the fold before a failure) */
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT), waits);
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE), syncs);
    CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  }
  CHECK_OK(gpumem_deallocate(mr, again, piece, busy));
  CHECK_OK(gpumem_deallocate(mr, taken, piece, side));
  for (int i = 0; i < 2; i++)
    CHECK_OK(gpumem_deallocate(mr, pins[i], piece, busy));
  two_stream_pool_release(mr, busy, side);
  printf("blocks a stream steals are sealed in its set: they go back with no wait\n");
}

static bool has_set(const pool_resource *pool, gpumem_stream stream) {
  for (size_t i = 1; i < pool->set_count; i++)
    if (pool->sets[i]->stream == stream)
      return true;
  return false;
}

/* A stream set that an idle take emptied goes, so that the sets of streams a program has
 * finished with do not pile up; the stream's next call makes it a new one. */
static void test_idle_take_drops_emptied_set(void) {
  gpumem_resource *mr;
  gpumem_stream first, second;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm, release_holes_over=never)", &mr));
  CHECK_OK(gpumem_stream_create(0, &first));
  CHECK_OK(gpumem_stream_create(0, &second));
  pool_resource *pool = (pool_resource *)mr;
  enum { piece = 4 << 20 };
  void *little, *x, *taken;
  CHECK_OK(gpumem_allocate(mr, 256, first, &little));
  CHECK_OK(gpumem_allocate(mr, piece, second, &x)); /* the second stream: a set of its own */
  use_on(second, x, piece, 9);
  CHECK_OK(gpumem_deallocate(mr, x, piece, second)); /* its only free block, sealed */
  CHECK_OK(gpumem_stream_synchronize(second));
  CHECK(has_set(pool, second));
  CHECK_OK(gpumem_allocate(mr, piece, first, &taken));
  CHECK_PTR_EQ(taken, x);
  CHECK(!has_set(pool, second));
  if (check_on_sim())
    CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  CHECK_OK(gpumem_deallocate(mr, taken, piece, first));
  CHECK_OK(gpumem_deallocate(mr, little, 256, first));
  two_stream_pool_release(mr, first, second);
  printf("a stream set emptied by an idle take goes\n");
}

/* The pattern of tests/gpu/concurrency.cu on the simulated device: four streams each
 * allocate a block, run work on it and free it, six rounds over; once warm, no stream waits
 * for another, so their work overlaps on a GPU. Blocks of 8 MiB, whose frees seal at once,
 * made each stream take the last one's block after waiting for its work, 23 waits in 24
 * allocations (the forty-second session's pool); a tried change that let the whole initial
 * memory travel between streams did the same at 1 MiB, and on the H200 the rounds of
 * pool(cuda, initial=256MiB) ran one after another (docs/gpu-runs.md, forty-third
 * session). */
static void streams_rounds(const char *spec, size_t bytes) {
  enum { streams = 4, rounds = 6 };
  gpumem_resource *mr;
  gpumem_stream stream[streams];
  CHECK_OK(gpumem_resource_from_spec(spec, &mr));
  for (int s = 0; s < streams; s++)
    CHECK_OK(gpumem_stream_create(0, &stream[s]));
  uint64_t waits = 0, syncs = 0;
  for (int pass = 0; pass < 2; pass++) { /* a warm-up, then the rounds counted */
    for (int s = 0; s < streams; s++)
      CHECK_OK(gpumem_stream_synchronize(stream[s]));
    waits = gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT);
    uint64_t syncs_before = gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE);
    for (int round = 0; round < rounds; round++) {
      for (int s = 0; s < streams; s++) {
        void *block;
        CHECK_OK(gpumem_allocate(mr, bytes, stream[s], &block));
        use_on(stream[s], block, bytes, round);
        CHECK_OK(gpumem_deallocate(mr, block, bytes, stream[s]));
      }
    }
    syncs += gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE) - syncs_before;
  }
  CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT) - waits, 0);
  /* In both passes, one wait for the device: the second stream's first call. Holes given
   * back before growth waited for the device too, at nearly every allocation of the first
   * rounds of 1 MiB over pool(vmm), and every stream's work waited with it. */
  CHECK_U64_EQ(syncs, 1);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  for (int s = 0; s < streams; s++) {
    CHECK_OK(gpumem_stream_synchronize(stream[s]));
    CHECK_OK(gpumem_stream_destroy(stream[s]));
  }
  CHECK_OK(gpumem_resource_release(mr));
}

static void test_streams_do_not_wait_once_warm(void) {
  if (!check_on_sim()) {
    printf("streams' rounds without waits: a simulated-device count (tests/gpu/concurrency.cu "
           "times them on a GPU)\n");
    return;
  }
  /* A pool that starts at its maximum cannot grow for the second stream: before, the first
   * took the fresh memory whole and every other stream waited for its work to take it. */
  const char *const specs[] = {"pool(vmm)", "pool(cuda, initial=256MiB)",
                               "pool(cuda, initial=256MiB, max=256MiB)"};
  for (size_t i = 0; i < 3; i++) {
    streams_rounds(specs[i], 1 << 20);
    streams_rounds(specs[i], 8 << 20);
  }
  printf("four streams' rounds of 1 and 8 MiB, once warm, make no stream wait for another\n");
}

/* The per-thread default stream's handle names each thread's own stream, so a seal recorded
 * through it covers one thread's stream only: its set's blocks go to other streams only after
 * a wait, as before, never for an idle event alone. */
static void test_per_thread_stream_keeps_its_blocks(void) {
  if (!check_on_sim()) { /* a GPU counts no queries */
    printf("a per-thread default stream's set: not checked on a GPU (a count of queries)\n");
    return;
  }
  gpumem_resource *mr;
  gpumem_stream stream, per_thread = (gpumem_stream)(uintptr_t)2;
  two_stream_pool_of("pool(vmm, release_holes_over=never)", &mr, &stream, &per_thread);
  enum { piece = 4 << 20 };
  void *freed, *pin, *taken;
  CHECK_OK(gpumem_allocate(mr, 2 * piece, per_thread, &freed));
  CHECK_OK(gpumem_allocate(mr, piece, per_thread, &pin));
  CHECK_OK(gpumem_deallocate(mr, freed, 2 * piece, per_thread)); /* the first free after: a seal */
  uint64_t queries = gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_QUERY);
  CHECK_OK(gpumem_allocate(mr, 2 * piece, stream, &taken));
  CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_QUERY), queries);
  CHECK_OK(gpumem_deallocate(mr, taken, 2 * piece, stream));
  CHECK_OK(gpumem_deallocate(mr, pin, piece, per_thread));
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_synchronize(per_thread));
  CHECK_OK(gpumem_stream_destroy(stream));
  CHECK_OK(gpumem_resource_release(mr));
  printf("a per-thread default stream's set is never asked whether it is idle\n");
}

/* A free that unseals GPUMEM__POOL_UNSEALED_MAX or more seals the stream at once: a stream
 * that then goes idle does not keep that memory from the others (a second stream took the
 * whole 64 MiB before the first grew the pool instead). */
static void test_large_unseal_seals_at_once(void) {
  gpumem_resource *mr;
  gpumem_stream busy, side = NULL;
  two_stream_pool(&mr, &busy, &side);
  enum { mib = 1 << 20 };
  void *large, *beside, *pin;
  CHECK_OK(gpumem_allocate(mr, 64 * mib, busy, &large));
  CHECK_OK(gpumem_allocate(mr, 2 * mib, busy, &beside));
  CHECK_OK(gpumem_allocate(mr, 2 * mib, busy, &pin));     /* keeps `beside` off the region's end */
  CHECK_OK(gpumem_deallocate(mr, large, 64 * mib, busy)); /* the first free after: a seal */
  CHECK_OK(gpumem_deallocate(mr, beside, 2 * mib, busy)); /* unseals 64 MiB: seals again */
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  void *taken; /* the busy stream is idle from here on */
  CHECK_OK(gpumem_allocate(mr, 64 * mib, side, &taken));
  CHECK_PTR_EQ(taken, large);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  CHECK_OK(gpumem_deallocate(mr, taken, 64 * mib, side));
  CHECK_OK(gpumem_deallocate(mr, pin, 2 * mib, busy));
  two_stream_pool_release(mr, busy, side);
  printf("a large unseal seals at once: an idle stream keeps nothing from the others\n");
}

/* Frees of large blocks seal at once only where another stream has asked for large blocks:
 * beside a stream of small requests each would record an event for nothing (a real serving
 * trace recorded one at one call in five). A stream that then asks for a large block while
 * the other has gone idle with its large frees open takes them after one wait for the
 * device, not by growing (a failed wait: it grows, and takes them at its next miss), and from
 * then on the other's large frees seal at once. */
static void test_large_frees_seal_for_large_askers(void) {
  bool sim = check_on_sim();
  gpumem_resource *mr;
  gpumem_stream busy, side = NULL;
  two_stream_pool_of("pool(vmm, release_holes_over=never)", &mr, &busy, &side);
  enum { mib = 1 << 20, count = 4 };
  void *small, *large[count], *pin, *taken, *grown;
  CHECK_OK(gpumem_allocate(mr, 4096, side, &small)); /* the side stream asks for small ones */
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_allocate(mr, 8 * mib, busy, &large[i]));
  CHECK_OK(gpumem_allocate(mr, 2 * mib, busy, &pin)); /* keeps them off the region's end */
  use_on(busy, large[0], 8 * mib, 5);
  uint64_t records = sim ? gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD) : 0;
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_deallocate(mr, large[i], 8 * mib, busy));
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  if (sim) {
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD), records);

    /* The wait fails: the side stream grows, and the busy stream's blocks stay its own. */
    uint64_t absorbed = gpumem__absorbed_errors();
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_SYNCHRONIZE, 1));
    CHECK_OK(gpumem_allocate(mr, 8 * mib, side, &grown));
    CHECK(gpumem__absorbed_errors() > absorbed);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved + 8 * mib);
    reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  }

  /* The busy stream is idle from here on, its work pending: one wait, and no growth. */
  uint64_t syncs = sim ? gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE) : 0;
  CHECK_OK(gpumem_allocate(mr, 16 * mib, side, &taken));
  CHECK((uintptr_t)taken >= (uintptr_t)large[0] &&
        (uintptr_t)taken + 16 * mib <= (uintptr_t)large[0] + count * 8 * mib);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  if (sim) {
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE), syncs + 1);
    CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
    CHECK_OK(gpumem_deallocate(mr, grown, 8 * mib, side));
  }
  use_on(side, taken, 16 * mib, 6);
  CHECK_OK(gpumem_deallocate(mr, taken, 16 * mib, side));

  /* The side stream asks for large blocks now: the busy stream's large frees seal at once. */
  CHECK_OK(gpumem_allocate(mr, 8 * mib, busy, &large[0]));
  if (sim)
    records = gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD);
  CHECK_OK(gpumem_deallocate(mr, large[0], 8 * mib, busy));
  if (sim) {
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD), records + 1);
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE), syncs + 1);
  }
  CHECK_OK(gpumem_deallocate(mr, pin, 2 * mib, busy));
  CHECK_OK(gpumem_deallocate(mr, small, 4096, side));
  two_stream_pool_release(mr, busy, side);
  printf("large frees seal at once only for streams that ask for large blocks; an idle "
         "stream's open ones go after one wait\n");
}

/* Each stream keeps a cache of its small frees once several streams use a pool: the stream
 * reuses them at once, through its seals (without it every small free went through the free
 * index, and the two-stream traces took up to three times as long an event on the H200);
 * another stream never takes one before the freeing stream's work on it is done. A full
 * cache merges into the set's open blocks and is sealed at once, and an idle stream's
 * merged blocks serve another stream without growth or a wait. */
static void test_stream_caches(void) {
  bool sim = check_on_sim();
  gpumem_resource *mr;
  gpumem_stream busy, side = NULL;
  two_stream_pool(&mr, &busy, &side);
  enum { small = 4096, medium = 256 << 10, kept = GPUMEM__POOL_SHARED_CACHE_MAX };
  void *x, *y, *medium_blocks[seal_every], *blocks[kept + 1];
  CHECK_OK(gpumem_allocate(mr, small, busy, &x));
  use_on(busy, x, small, 1);
  CHECK_OK(gpumem_deallocate(mr, x, small, busy));
  /* A seal of the busy stream's set (its sixteenth free past the cache) leaves the cache. */
  for (int i = 0; i < seal_every; i++)
    CHECK_OK(gpumem_allocate(mr, medium, busy, &medium_blocks[i]));
  uint64_t records = sim ? gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD) : 0;
  for (int i = 0; i < seal_every; i++)
    CHECK_OK(gpumem_deallocate(mr, medium_blocks[i], medium, busy));
  if (sim)
    CHECK(gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD) > records);
  /* The side stream gets another block, the busy stream its own back. */
  CHECK_OK(gpumem_allocate(mr, small, side, &y));
  CHECK(y != x);
  void *again;
  CHECK_OK(gpumem_allocate(mr, small, busy, &again));
  CHECK_PTR_EQ(again, x);
  CHECK_OK(gpumem_deallocate(mr, again, small, busy));
  CHECK_OK(gpumem_deallocate(mr, y, small, side));

  /* A full cache merges into the open blocks and is sealed at once. When that seal's record
   * fails, the free still succeeds and loses nothing: the merged blocks stay open, the
   * stream's own, until its next seal. */
  if (sim) {
    for (int i = 0; i <= kept; i++) {
      CHECK_OK(gpumem_allocate(mr, small, busy, &blocks[i]));
      use_on(busy, blocks[i], small, i);
    }
    uint64_t absorbed = gpumem__absorbed_errors();
    uint64_t live = check_query(mr, GPUMEM_QUERY_LIVE_COUNT);
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_EVENT_RECORD, 1));
    for (int i = 0; i <= kept; i++)
      CHECK_OK(gpumem_deallocate(mr, blocks[i], small, busy));
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_EVENT_RECORD, 0));
    CHECK(gpumem__absorbed_errors() > absorbed);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), live - (uint64_t)(kept + 1));
    CHECK_OK(gpumem__validate(mr));
    /* The next free past the cache seals them (the one after a full cache). */
    records = gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD);
    CHECK_OK(gpumem_allocate(mr, medium, busy, &medium_blocks[0]));
    CHECK_OK(gpumem_deallocate(mr, medium_blocks[0], medium, busy));
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD), records + 1);
  }
  for (int i = 0; i <= kept; i++) {
    CHECK_OK(gpumem_allocate(mr, small, busy, &blocks[i]));
    use_on(busy, blocks[i], small, i);
  }
  if (sim)
    records = gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD);
  for (int i = 0; i <= kept; i++)
    CHECK_OK(gpumem_deallocate(mr, blocks[i], small, busy));
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  uint64_t waits = sim ? gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT) : 0;
  if (sim)
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD), records + 1);
  /* Once the busy stream's work is done the side stream takes them: no growth, no wait. */
  CHECK_OK(gpumem_stream_synchronize(busy));
  for (int i = 0; i < kept; i++) {
    CHECK_OK(gpumem_allocate(mr, small, side, &blocks[i]));
    use_on(side, blocks[i], small, i);
  }
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  if (sim) {
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT), waits);
    CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  }
  for (int i = 0; i < kept; i++)
    CHECK_OK(gpumem_deallocate(mr, blocks[i], small, side));
  CHECK_OK(gpumem__validate(mr));
  two_stream_pool_release(mr, busy, side);
  printf("each stream keeps a cache of its small frees, its own through seals; a full one is "
         "sealed and serves another stream once idle\n");
}

/* Growth in place extends the region's last block where it is free in the stream's set,
 * sealed as well as open: only the shortfall is mapped (a full step beside the sealed block
 * made a real serving trace grow by 84 MiB where 46 MiB were missing). */
static void test_growth_extends_sealed_tail(void) {
  gpumem_resource *mr;
  gpumem_stream busy, side = NULL;
  two_stream_pool(&mr, &busy, &side);
  enum { piece = 4 << 20 };
  void *tail;
  CHECK_OK(gpumem_allocate(mr, piece, busy, &tail));
  CHECK_OK(gpumem_deallocate(mr, tail, piece, busy)); /* the first free after: a seal */
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  void *grown;
  CHECK_OK(gpumem_allocate(mr, piece + (2 << 20), busy, &grown));
  CHECK_PTR_EQ(grown, tail);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved + (2 << 20));
  CHECK_OK(gpumem_deallocate(mr, grown, piece + (2 << 20), busy));
  two_stream_pool_release(mr, busy, side);
  printf("growth extends a sealed last block by the shortfall only\n");
}

/* The large region's last block, free, is used only when no other free block fits: growth
 * extends it by the shortfall alone, so it is kept for the request nothing else fits. */
static void test_last_block_kept_for_growth(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
  enum { mib = 1 << 20 };
  size_t sizes[4] = {2 * mib, 8 * mib, 2 * mib, 4 * mib}; /* pin, hole, pin, last */
  void *x[4];
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_allocate(mr, sizes[i], NULL, &x[i]));
  CHECK_PTR_EQ((char *)x[3], (char *)x[0] + 12 * mib); /* one range, grown in place */
  CHECK_OK(gpumem_deallocate(mr, x[1], sizes[1], NULL));
  CHECK_OK(gpumem_deallocate(mr, x[3], sizes[3], NULL));
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  void *in_hole, *at_end;
  CHECK_OK(gpumem_allocate(mr, 3 * mib, NULL, &in_hole)); /* the last block fits it best */
  CHECK_PTR_EQ(in_hole, x[1]);
  CHECK_OK(gpumem_allocate(mr, 6 * mib, NULL, &at_end)); /* fits nowhere: the end grows */
  CHECK_PTR_EQ(at_end, x[3]);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved + 2 * mib);
  CHECK_OK(gpumem_deallocate(mr, in_hole, 3 * mib, NULL));
  CHECK_OK(gpumem_deallocate(mr, at_end, 6 * mib, NULL));
  CHECK_OK(gpumem_deallocate(mr, x[0], sizes[0], NULL));
  CHECK_OK(gpumem_deallocate(mr, x[2], sizes[2], NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("the large region's last block is kept for what fits nowhere else\n");
}

/* A large request takes the whole free block when it would leave a sliver (under 1/64 of
 * it): a 20 MiB request in a hole of 20.25 MiB, then a 256 KiB one that would have filled
 * the sliver and pinned the hole at 20 MiB, go where they do, and once the 20 MiB block is
 * freed a request of 20.125 MiB fits the hole again with no growth. The region's last block
 * keeps its rest for the next request: one that grows the end leaves 128 KiB there, which
 * a 128 KiB request then takes, again with no growth. Where the pool's sizes do not recur
 * (`random`: its set of served sizes closed, as a random workload closes it), the 20 MiB
 * request leaves the sliver, and the 256 KiB one takes it. */
static void test_large_request_takes_the_sliver(bool random) {
  enum { MiB = 1 << 20, KiB = 1 << 10 };
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
  if (random)
    gpumem__size_set_close(&((pool_resource *)mr)->served_sizes);
  size_t sizes[4] = {2 * MiB, 20 * MiB + 256 * KiB, 2 * MiB, 4 * MiB}; /* pin, hole, pin, pin */
  char *x[4], *whole, *beside, *again;
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_allocate(mr, sizes[i], NULL, (void **)&x[i]));
  CHECK_PTR_EQ(x[3], x[0] + 24 * MiB + 256 * KiB); /* one range, grown in place */
  CHECK_OK(gpumem_deallocate(mr, x[1], sizes[1], NULL));
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK_OK(gpumem_allocate(mr, 20 * MiB, NULL, (void **)&whole));
  CHECK_PTR_EQ(whole, x[1]);
  CHECK_OK(gpumem_allocate(mr, 256 * KiB, NULL, (void **)&beside));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES),
               sizes[0] + sizes[2] + sizes[3] + 20 * MiB + 256 * KiB); /* as requested */
  if (random) {
    CHECK_PTR_EQ(beside, x[1] + 20 * MiB); /* the sliver stayed free */
    CHECK_OK(gpumem_deallocate(mr, beside, 256 * KiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, whole, 20 * MiB, NULL));
  } else {
    CHECK(beside != x[1] + 20 * MiB); /* the sliver went with the 20 MiB block */
    CHECK_OK(gpumem_deallocate(mr, whole, 20 * MiB, NULL));
    CHECK_OK(gpumem_allocate(mr, 20 * MiB + 128 * KiB, NULL, (void **)&again));
    CHECK_PTR_EQ(again, x[1]);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
    CHECK_OK(gpumem__validate(mr));
    /* The end has 1.5 MiB free (growth maps whole 2 MiB granules, the 256 KiB block took the
     * rest): 19.375 MiB grows it by 18 MiB and leaves 128 KiB there. */
    char *end, *rest;
    const size_t end_size = 20 * MiB - 640 * KiB;
    CHECK_OK(gpumem_allocate(mr, end_size, NULL, (void **)&end));
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved + 18 * MiB);
    CHECK_OK(gpumem_allocate(mr, 128 * KiB, NULL, (void **)&rest));
    CHECK_PTR_EQ(rest, end + end_size);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved + 18 * MiB);
    CHECK_OK(gpumem_deallocate(mr, rest, 128 * KiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, end, end_size, NULL));
    CHECK_OK(gpumem_deallocate(mr, again, 20 * MiB + 128 * KiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, beside, 256 * KiB, NULL));
  }
  for (int i = 0; i < 4; i++)
    if (i != 1)
      CHECK_OK(gpumem_deallocate(mr, x[i], sizes[i], NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_resource_release(mr));
  printf(random ? "where sizes do not recur, a large request leaves its sliver\n"
                : "a large request takes a sliver along; the region's last block keeps its rest\n");
}

/* ---- the places of a loop's large blocks ---- */

/* Four 256 MiB blocks in a row and a pin after them, freed so that they make one free range.
 * While the size has been freed fewer than eight times, a request of it takes the best fit,
 * the range's start; from then on, where one of its last four blocks was freed, newest
 * first, cut out of the middle of the range if need be, and a place in use is passed over.
 * Over a pool whose releases of holes start only past 100 times its live peak, so that none
 * moves anything; a pool that keeps every hole (`keeps_holes`) keeps no places: best fit. */
static void test_large_blocks_keep_their_places(bool keeps_holes) {
  enum { MiB = 1 << 20 };
  const size_t size = GPUMEM__POOL_PLACES_LEAST;
  static const int free_order[4] = {3, 0, 2, 1};
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec(keeps_holes ? "pool(vmm, release_holes_over=never)"
                                                 : "pool(vmm, release_holes_over=10000)",
                                     &mr));
  char *b[4], *pin, *x;
  for (int i = 0; i < 4; i++) {
    CHECK_OK(gpumem_allocate(mr, size, NULL, (void **)&b[i]));
    if (i > 0)
      CHECK_PTR_EQ(b[i], b[i - 1] + size);
  }
  CHECK_OK(gpumem_allocate(mr, 2 * MiB, NULL, (void **)&pin));
  for (int i = 0; i < 4; i++) /* four frees */
    CHECK_OK(gpumem_deallocate(mr, b[free_order[i]], size, NULL));
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  for (int i = 0; i < 4; i++) { /* four more, each block the best fit: the range's start */
    CHECK_OK(gpumem_allocate(mr, size, NULL, (void **)&x));
    CHECK_PTR_EQ(x, b[0]);
    CHECK_OK(gpumem_deallocate(mr, x, size, NULL));
  }
  for (int i = 0; i < 4; i++) { /* b[0]'s place first (freed last), then b[1]'s, ... */
    CHECK_OK(gpumem_allocate(mr, size, NULL, (void **)&x));
    CHECK_PTR_EQ(x, b[i]);
  }
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_deallocate(mr, b[free_order[i]], size, NULL));
  for (int i = 3; i >= 0; i--) { /* newest first: b[1]'s place, b[2]'s, b[0]'s, b[3]'s */
    CHECK_OK(gpumem_allocate(mr, size, NULL, (void **)&x));
    CHECK_PTR_EQ(x, keeps_holes ? b[3 - i] : b[free_order[i]]);
  }
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  CHECK_OK(gpumem__validate(mr));
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_deallocate(mr, b[i], size, NULL));
  CHECK_OK(gpumem_deallocate(mr, pin, 2 * MiB, NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_resource_release(mr));
  printf(keeps_holes ? "with every hole kept, a loop's large blocks take the best fit\n"
                     : "a loop's large blocks go back to their places\n");
}

/* ---- holes given back before growth (release_holes_over) ---- */

/* A pool over vmm with 2 MiB pieces that gives back holes past `percent` of its live peak
 * (0: the option left out, its default; GPUMEM_POOL_KEEP_HOLES: never). */
static gpumem_resource *holes_pool_empty(unsigned percent) {
  char spec[96];
  if (percent == 0)
    snprintf(spec, sizeof spec, "pool(vmm(piece=2MiB))");
  else if (percent == GPUMEM_POOL_KEEP_HOLES)
    snprintf(spec, sizeof spec, "pool(vmm(piece=2MiB), release_holes_over=never)");
  else
    snprintf(spec, sizeof spec, "pool(vmm(piece=2MiB), release_holes_over=%u)", percent);
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec(spec, &mr));
  return mr;
}

/* holes_pool_empty(percent) with blocks of `sizes` (MiB) allocated in turn on `stream`, so
 * that they lie in that order. */
static gpumem_resource *holes_pool(unsigned percent, const size_t *sizes, int count,
                                   gpumem_stream stream, char **blocks) {
  gpumem_resource *mr = holes_pool_empty(percent);
  for (int i = 0; i < count; i++) {
    CHECK_OK(gpumem_allocate(mr, sizes[i] << 20, stream, (void **)&blocks[i]));
    if (i > 0)
      CHECK_PTR_EQ(blocks[i], blocks[i - 1] + (sizes[i - 1] << 20));
  }
  return mr;
}

/* A pool of holes_pool(percent, sizes, count), some of its blocks freed, and a request of
 * request_mib MiB after which it holds reserved_mib MiB. */
typedef struct holes_case {
  unsigned percent;
  const size_t *sizes;
  int count;
  size_t request_mib, reserved_mib;
} holes_case;

/* Asks `mr`'s release of holes directly, as a growth of its newest set's stream for `size`
 * bytes in the large region would. */
static uint64_t release_holes_for(gpumem_resource *mr, size_t size) {
  pool_resource *pool = (pool_resource *)mr;
  return gpumem__pool_release_holes(pool, pool->sets[pool->set_count - 1],
                                    GPUMEM__POOL_REGION_LARGE, size);
}

static void check_mapped(uint64_t bytes) {
  uint64_t mapped;
  if (!check_on_sim())
    return;
  CHECK_OK(gpumem_sim_device_used(0, &mapped));
  CHECK_U64_EQ(mapped, bytes);
}

/* An 8 MiB hole before a 2 MiB block, and a 12 MiB request: past 110% of the live peak
 * (10 MiB) the hole's pieces go back before the pool grows, so it holds 14 MiB rather than
 * 22, and the growth maps their physical memory again (four pieces of 2 MiB) and makes
 * only two new ones; at 300% it grows as before. Two holes of 4 MiB and a 6 MiB request:
 * the lowest hole whole, then only the piece of the next one that the growth still lacks. */
static void test_release_holes(void) {
  enum { MiB = 1 << 20 };
  static const size_t hole_then_pin[] = {8, 2};
  char *x[4], *grown;
  gpumem_resource *mr = holes_pool(110, hole_then_pin, 2, NULL, x);
  CHECK_OK(gpumem_deallocate(mr, x[0], 8 * MiB, NULL));
  uint64_t creates = check_on_sim() ? gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) : 0;
  CHECK_OK(gpumem_allocate(mr, 12 * MiB, NULL, (void **)&grown));
  if (check_on_sim())
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) - creates, 2);
  CHECK_PTR_EQ(grown, x[1] + 2 * MiB); /* grown in place after the pinning block */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 14 * MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 0);
  check_mapped(14 * MiB);
  if (check_on_sim()) { /* what stays mapped is usable */
    CHECK_OK(gpumem_sim_launch(NULL, x[1], 2 * MiB, 1));
    CHECK_OK(gpumem_sim_launch(NULL, grown, 12 * MiB, 2));
    CHECK_OK(gpumem_sim_complete(NULL));
    CHECK_EQ(grown[12 * MiB - 1], 2);
  }
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_deallocate(mr, grown, 12 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, x[1], 2 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  check_mapped(0);

  /* Over 4 MiB pieces, two holes of a piece each between pins, and a 6 MiB request: both
   * go back (the second whole, for the 2 MiB the first lacks), and the growth after the
   * last pin takes a 2 MiB piece (to the grid) and a 4 MiB one: one held piece is mapped
   * again, the other freed before the 2 MiB piece is made, so that the device never holds
   * more than the pool counts (vmm's peak was 16 MiB, the pool's 14, before). */
  static const size_t holes_of_a_piece[] = {4, 4, 4, 2};
  char *y[4];
  gpumem_resource *four;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm(piece=4MiB), release_holes_over=110)", &four));
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_allocate(four, holes_of_a_piece[i] * MiB, NULL, (void **)&y[i]));
  CHECK_OK(gpumem_deallocate(four, y[0], 4 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(four, y[2], 4 * MiB, NULL));
  CHECK_OK(gpumem_allocate(four, 6 * MiB, NULL, (void **)&grown));
  CHECK_PTR_EQ(grown, y[3] + 2 * MiB);
  CHECK_U64_EQ(check_query(four, GPUMEM_QUERY_RESERVED_BYTES), 12 * MiB);
  CHECK_U64_EQ(check_query(four, GPUMEM_QUERY_PEAK_RESERVED_BYTES), 14 * MiB);
  CHECK_U64_EQ(check_query(four->upstream, GPUMEM_QUERY_PEAK_RESERVED_BYTES), 14 * MiB);
  check_mapped(12 * MiB);
  CHECK_OK(gpumem__validate(four));
  CHECK_OK(gpumem_deallocate(four, grown, 6 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(four, y[1], 4 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(four, y[3], 2 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(four));

  mr = holes_pool(300, hole_then_pin, 2, NULL, x); /* under the threshold: nothing moves */
  CHECK_OK(gpumem_deallocate(mr, x[0], 8 * MiB, NULL));
  CHECK(release_holes_for(mr, 12 * MiB) == 0); /* nothing charged */
  CHECK_OK(gpumem_allocate(mr, 12 * MiB, NULL, (void **)&grown));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 22 * MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK), 8 * MiB);
  CHECK_OK(gpumem_deallocate(mr, grown, 12 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, x[1], 2 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  static const size_t two_holes[] = {4, 2, 4, 2};
  mr = holes_pool(110, two_holes, 4, NULL, x);
  CHECK_OK(gpumem_deallocate(mr, x[0], 4 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, x[2], 4 * MiB, NULL));
  CHECK_OK(gpumem_allocate(mr, 6 * MiB, NULL, (void **)&grown));
  CHECK_PTR_EQ(grown, x[3] + 2 * MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 12 * MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BLOCKS), 1); /* the second hole's top */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK), 2 * MiB);
  char *top;
  CHECK_OK(gpumem_allocate(mr, 2 * MiB, NULL, (void **)&top));
  CHECK_PTR_EQ(top, x[2] + 2 * MiB);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_deallocate(mr, top, 2 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, grown, 6 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, x[1], 2 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, x[3], 2 * MiB, NULL));
  size_t released = 0;
  CHECK_OK(gpumem_pool_trim(mr, &released));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_OK(gpumem_resource_release(mr));
  check_mapped(0);

  /* The budget of time: spent (here for hours of refill to come), the pool grows as it would
   * without the option. */
  mr = holes_pool(110, hole_then_pin, 2, NULL, x);
  CHECK_OK(gpumem_deallocate(mr, x[0], 8 * MiB, NULL));
  ((pool_resource *)mr)->holes_budget_ns = -GPUMEM__POOL_HOLES_BURST_NS * 1000000;
  /* Past the threshold it gives nothing back but says when it looked, so that the growth
   * is charged to the budget too. */
  CHECK(release_holes_for(mr, 12 * MiB) != 0);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 10 * MiB);
  CHECK_OK(gpumem_allocate(mr, 12 * MiB, NULL, (void **)&grown));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 22 * MiB);
  CHECK_OK(gpumem_deallocate(mr, grown, 12 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, x[1], 2 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  /* A new pool's budget is full; refilled for however long, it holds no more; a release
   * and its growth are charged to it. */
  mr = holes_pool(110, hole_then_pin, 2, NULL, x);
  CHECK_OK(gpumem_deallocate(mr, x[0], 8 * MiB, NULL));
  CHECK(((pool_resource *)mr)->holes_budget_ns == GPUMEM__POOL_HOLES_BURST_NS);
  ((pool_resource *)mr)->holes_budget_at_ns = 0;
  CHECK_OK(gpumem_allocate(mr, 12 * MiB, NULL, (void **)&grown));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 14 * MiB);
  CHECK(((pool_resource *)mr)->holes_budget_ns < GPUMEM__POOL_HOLES_BURST_NS);
  CHECK_OK(gpumem_deallocate(mr, grown, 12 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, x[1], 2 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  /* The default releases at 110%, but only for a request of about half the live peak so
   * far up to all of it, or of a size served before. After an 8 MiB hole before a 2 MiB block (a
   * live peak of 10 MiB), a 9 MiB request would hold 20 MiB: the hole goes back (12); a 12
   * MiB one is past the peak, and after a 4 MiB hole before 2 and 14 MiB (a peak of 20), a
   * 6 MiB one under half of it: both grow, where 110% for every request gives the holes
   * back. With a 6 MiB block live after the 14 (a peak of 26), a 6 MiB request is one
   * served before, but the live peak spans fewer than GPUMEM__POOL_RECURRING_PIECES pieces:
   * it grows (32). After an 8 MiB hole before 2, 48 and 10 MiB (a peak of 68, 34 pieces), a
   * 10 MiB request gives back the hole (70, not 78); a 12 MiB one is new and grows (80).
   * Never keeps them. The gate opens from GPUMEM__POOL_DOMINANT_PERCENT (40) of the peak:
   * after a 6 MiB hole before 2 and 12 MiB (a peak of 20), a 9 MiB request gives the hole
   * back (24, not 30), an 8 MiB one, 40%, too (22), a 7 MiB one, 35%, grows (28). Under half
   * of the peak, only while the program holds at most GPUMEM__POOL_DOMINANT_LIVE_PERCENT (75)
   * of it: after the 4 MiB hole before 2 and 14 (16 MiB live, 80% of 20), a 9 MiB request
   * grows (30), a 10 MiB one, half, gives the hole back (26). */
  static const size_t small_hole_then_pins[] = {4, 2, 14};
  static const size_t hole_then_pins[] = {6, 2, 12};
  static const size_t small_hole_then_served[] = {4, 2, 14, 6};
  static const size_t hole_then_served[] = {8, 2, 48, 10};
  static const holes_case defaults[] = {
      {0, hole_then_pin, 2, 9, 12},          {GPUMEM_POOL_KEEP_HOLES, hole_then_pin, 2, 9, 20},
      {0, hole_then_pin, 2, 12, 22},         {110, hole_then_pin, 2, 12, 14},
      {0, small_hole_then_pins, 3, 6, 26},   {110, small_hole_then_pins, 3, 6, 22},
      {0, small_hole_then_served, 4, 6, 32}, {110, small_hole_then_served, 4, 6, 28},
      {0, hole_then_served, 4, 10, 70},      {GPUMEM_POOL_KEEP_HOLES, hole_then_served, 4, 10, 78},
      {0, hole_then_served, 4, 12, 80},      {110, hole_then_served, 4, 12, 72},
      {0, hole_then_pins, 3, 9, 24},         {0, hole_then_pins, 3, 8, 22},
      {0, hole_then_pins, 3, 7, 28},         {0, small_hole_then_pins, 3, 9, 30},
      {0, small_hole_then_pins, 3, 10, 26},
  };
  for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
    mr = holes_pool(defaults[i].percent, defaults[i].sizes, defaults[i].count, NULL, x);
    pool_resource *pool = (pool_resource *)mr;
    CHECK_U64_EQ(pool->options.release_holes_over, defaults[i].percent == GPUMEM_POOL_KEEP_HOLES ? 0
                                                   : defaults[i].percent
                                                       ? defaults[i].percent
                                                       : GPUMEM_POOL_RELEASE_HOLES_DEFAULT);
    CHECK(pool->holes_gated == (defaults[i].percent == 0));
    CHECK(pool->served_sizes.closed == (defaults[i].percent != 0)); /* only the gate asks */
    size_t request = defaults[i].request_mib * MiB;
    CHECK_OK(gpumem_deallocate(mr, x[0], defaults[i].sizes[0] * MiB, NULL));
    CHECK_OK(gpumem_allocate(mr, request, NULL, (void **)&grown));
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), defaults[i].reserved_mib * MiB);
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, grown, request, NULL));
    for (int k = 1; k < defaults[i].count; k++)
      CHECK_OK(gpumem_deallocate(mr, x[k], defaults[i].sizes[k] * MiB, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  }

  /* A dominant request is one of the current pass: after blocks of 12 and 8 MiB above a
   * kept one of 2 MiB (a peak of 22) are freed, the live bytes (2) are under an eighth of
   * the peak, so the next request starts a pass. In it, blocks of 6, 2 and 10 MiB (a pass
   * peak of 20), the 6 freed, and a 10 MiB request: half the pass's peak, though not of 22,
   * so the hole's three pieces go back (24 MiB, not 30). With 6 MiB kept (a peak of 26),
   * the live bytes stay over an eighth: the peak stands, the request is 38% of it, and it
   * grows (34). */
  for (size_t kept_mib = 2; kept_mib <= 6; kept_mib += 4) {
    static const size_t pass_sizes[] = {6, 2, 10};
    char *kept, *first[2], *pass[3];
    CHECK_OK(gpumem_resource_from_spec("pool(vmm(piece=2MiB))", &mr));
    CHECK_OK(gpumem_allocate(mr, kept_mib * MiB, NULL, (void **)&kept));
    CHECK_OK(gpumem_allocate(mr, 12 * MiB, NULL, (void **)&first[0]));
    CHECK_OK(gpumem_allocate(mr, 8 * MiB, NULL, (void **)&first[1]));
    CHECK_OK(gpumem_deallocate(mr, first[0], 12 * MiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, first[1], 8 * MiB, NULL));
    for (int i = 0; i < 3; i++) {
      CHECK_OK(gpumem_allocate(mr, pass_sizes[i] * MiB, NULL, (void **)&pass[i]));
      CHECK_PTR_EQ(pass[i], i ? pass[i - 1] + pass_sizes[i - 1] * MiB : kept + kept_mib * MiB);
    }
    CHECK_OK(gpumem_deallocate(mr, pass[0], 6 * MiB, NULL));
    CHECK_OK(gpumem_allocate(mr, 10 * MiB, NULL, (void **)&grown));
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), (kept_mib == 2 ? 24 : 34) * MiB);
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, grown, 10 * MiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, pass[1], 2 * MiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, pass[2], 10 * MiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, kept, kept_mib * MiB, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  }

  /* A program that draws most of its sizes anew is no loop: past 2,048 sizes, after a
   * window of new ones, the set closes, and a size served before no longer opens the gate.
   * Sizes of 1 MiB and more served in the hole (which they fit: nothing grows) close it; the
   * 10 MiB request grows. A loop whose shapes vary asks for new sizes beside sizes it had:
   * with each new size beside two of the 2 MiB blocks, 4,000 new sizes (past the 2,048 that
   * closed the set before) leave it open, and the 10 MiB request gives back the hole. */
  for (int varying = 0; varying < 2; varying++) {
    mr = holes_pool(0, hole_then_served, 4, NULL, x);
    pool_resource *pool = (pool_resource *)mr;
    CHECK_OK(gpumem_deallocate(mr, x[0], 8 * MiB, NULL));
    for (size_t k = 1; varying ? k <= 4000 : !pool->served_sizes.closed; k++) {
      void *ptr, *again;
      CHECK(varying || k <= GPUMEM__SIZE_SET_JUDGED_FROM + GPUMEM__SIZE_SET_WINDOW);
      CHECK_OK(gpumem_allocate(mr, MiB + k * GPUMEM__BLOCK_UNIT, NULL, &ptr));
      CHECK_PTR_EQ(ptr, x[0]);
      CHECK_OK(gpumem_deallocate(mr, ptr, MiB + k * GPUMEM__BLOCK_UNIT, NULL));
      for (int twice = 0; varying && twice < 2; twice++) {
        CHECK_OK(gpumem_allocate(mr, 2 * MiB, NULL, &again));
        CHECK_OK(gpumem_deallocate(mr, again, 2 * MiB, NULL));
      }
    }
    CHECK(pool->served_sizes.closed == !varying);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 68 * MiB);
    CHECK_OK(gpumem_allocate(mr, 10 * MiB, NULL, (void **)&grown));
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), (varying ? 70 : 78) * MiB);
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, grown, 10 * MiB, NULL));
    for (int k = 1; k < 4; k++)
      CHECK_OK(gpumem_deallocate(mr, x[k], hole_then_served[k] * MiB, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  }
  /* Not over vmm, nothing to give back: the pool keeps no sizes. */
  CHECK_OK(gpumem_resource_from_spec("pool(cuda)", &mr));
  CHECK(((pool_resource *)mr)->holes_gated && ((pool_resource *)mr)->served_sizes.closed);
  CHECK_OK(gpumem_resource_release(mr));

  /* release_holes_time: the budget's share of the time. Spent, as above, at 100% (no
   * budget) the pool still gives the hole back. With 12 ms to refill a budget 10 ms short,
   * the default 25% (a third of the time between: 4 ms) starts no release; 50% (all 12)
   * does. At 1%, a pool idle since the host started (since_ms -1) has its burst back. */
  static const struct {
    const char *spec;
    unsigned share;
    int64_t budget_ms, since_ms;
    size_t reserved_mib; /* after the release, before the growth */
  } shares[] = {
      {"pool(vmm(piece=2MiB), release_holes_over=110, release_holes_time=100)", 100,
       -GPUMEM__POOL_HOLES_BURST_NS / 1000 * 1000, 0, 2},
      {"pool(vmm(piece=2MiB), release_holes_over=110)", 25, -10, 12, 10},
      {"pool(vmm(piece=2MiB), release_holes_over=110, release_holes_time=50)", 50, -10, 12, 2},
      {"pool(vmm(piece=2MiB), release_holes_over=110, release_holes_time=1)", 1, -19, -1, 2},
  };
  for (size_t i = 0; i < sizeof shares / sizeof shares[0]; i++) {
    CHECK_OK(gpumem_resource_from_spec(shares[i].spec, &mr));
    pool_resource *shared = (pool_resource *)mr;
    CHECK_U64_EQ(shared->options.release_holes_time, shares[i].share);
    for (int k = 0; k < 2; k++)
      CHECK_OK(gpumem_allocate(mr, hole_then_pin[k] * MiB, NULL, (void **)&x[k]));
    CHECK_OK(gpumem_deallocate(mr, x[0], 8 * MiB, NULL));
    shared->holes_budget_ns = shares[i].budget_ms * 1000 * 1000;
    shared->holes_budget_at_ns =
        shares[i].since_ms < 0 ? 0 : gpumem__now_ns() - (uint64_t)shares[i].since_ms * 1000 * 1000;
    CHECK(release_holes_for(mr, 12 * MiB) != 0);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), shares[i].reserved_mib * MiB);
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, x[1], 2 * MiB, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  }

  /* A percentage under 100 is refused, in a spec and in the options. */
  CHECK_FAILS_WITH(gpumem_resource_from_spec("pool(vmm, release_holes_over=99)", &mr),
                   GPUMEM_ERR_INVALID_ARGUMENT, "release_holes_over is 99");
  gpumem_resource *vmm;
  CHECK_OK(gpumem_resource_from_spec("vmm", &vmm));
  gpumem_pool_options options = {.release_holes_over = 10001};
  CHECK_FAILS_WITH(gpumem_pool_create(vmm, &options, &mr), GPUMEM_ERR_INVALID_ARGUMENT,
                   "from 100 to 10000");
  /* So is a share of time over 100%; nothing is built either way. */
  options = (gpumem_pool_options){.release_holes_time = 101};
  mr = NULL;
  CHECK_FAILS_WITH(gpumem_pool_create(vmm, &options, &mr), GPUMEM_ERR_INVALID_ARGUMENT,
                   "release_holes_time is 101");
  CHECK(mr == NULL);
  CHECK_FAILS_WITH(gpumem_resource_from_spec("pool(vmm, release_holes_time=101)", &mr),
                   GPUMEM_ERR_INVALID_ARGUMENT, "from 1 to 100");
  CHECK_OK(gpumem_resource_release(vmm));
  printf("holes given back before growth past release_holes_over\n");
}

/* The default's release for a growth that fragmentation alone makes after the program let
 * go of part of its pass (GPUMEM__POOL_DESCENT_LIVE_PERCENT, 75%). Eight blocks of 10 MiB (a
 * live peak of 80, 40 pieces of 2 MiB), the first, third, fifth and last freed: 40 MiB live,
 * 40 free, and a 12 MiB request, neither dominant nor served before, that no hole fits: the
 * region's end grows by 2 MiB, past the live peak, with 20 times the growth free, and the
 * first hole's piece goes back first: the pool holds 80. Not so with 72 MiB live (blocks of
 * 4, six of 12 and 4, the first and last freed, a 6 MiB request); with too little free (30
 * MiB for an 8 MiB growth: the second, fourth and last freed, an 18 MiB request); where the
 * pool held more than 110% of the pass's peak before (a 100 MiB block freed first, the same
 * blocks carved from it, a 32 MiB request growing the 30 MiB left at the end); under a live
 * peak of fewer than 32 pieces (blocks of 7 MiB, an 8 MiB request); past an explicit
 * release_holes_over=110, the threshold the program chose; and for a request under 1 MiB
 * (64 KiB, the small region's first growth of 2 MiB). */
static void test_release_holes_after_descent(void) {
  enum { KiB = 1 << 10, MiB = 1 << 20 };
  static const size_t tens[] = {10, 10, 10, 10, 10, 10, 10, 10};
  static const size_t sevens[] = {7, 7, 7, 7, 7, 7, 7, 7};
  static const size_t mostly_held[] = {4, 12, 12, 12, 12, 12, 12, 4};
  static const struct {
    unsigned percent;
    size_t first_mib; /* a block freed before the others come (0: none) */
    const size_t *sizes;
    unsigned freed; /* bit k: block k freed before the request, and the last one */
    size_t request_kib, reserved_mib;
  } cases[] = {
      {0, 0, tens, 0x15, 12 << 10, 80},       /* let go of most of the pass: the hole goes */
      {0, 0, mostly_held, 0x01, 6 << 10, 82}, /* 72 of 80 MiB live */
      {0, 0, tens, 0x0a, 18 << 10, 88},       /* 30 MiB free for an 8 MiB growth */
      {0, 100, tens, 0x15, 32 << 10, 102},    /* 100 MiB held before the pass */
      {0, 0, sevens, 0x15, 8 << 10, 58},      /* a live peak of 56 MiB */
      {110, 0, tens, 0x15, 12 << 10, 82},
      {0, 0, tens, 0x15, 64, 82}, /* the small region's first growth */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *first = NULL, *x[8], *grown;
    gpumem_resource *mr = holes_pool_empty(cases[i].percent);
    pool_resource *pool = (pool_resource *)mr;
    if (cases[i].first_mib) {
      CHECK_OK(gpumem_allocate(mr, cases[i].first_mib * MiB, NULL, (void **)&first));
      CHECK_OK(gpumem_deallocate(mr, first, cases[i].first_mib * MiB, NULL));
    }
    for (int k = 0; k < 8; k++) {
      CHECK_OK(gpumem_allocate(mr, cases[i].sizes[k] * MiB, NULL, (void **)&x[k]));
      CHECK_PTR_EQ(x[k], k ? x[k - 1] + cases[i].sizes[k - 1] * MiB : (first ? first : x[0]));
    }
    unsigned freed = cases[i].freed | 0x80;
    for (int k = 0; k < 8; k++)
      if (freed & (1u << k))
        CHECK_OK(gpumem_deallocate(mr, x[k], cases[i].sizes[k] * MiB, NULL));
    size_t peak = 0;
    for (int k = 0; k < 8; k++)
      peak += cases[i].sizes[k] * MiB;
    CHECK_U64_EQ(pool->pass_peak_live, peak);
    size_t request = cases[i].request_kib * KiB;
    CHECK_OK(gpumem_allocate(mr, request, NULL, (void **)&grown));
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), cases[i].reserved_mib * MiB);
    check_mapped(cases[i].reserved_mib * MiB);
    if (request >= MiB)
      CHECK_PTR_EQ(grown, x[7]); /* the region's end, grown in place */
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, grown, request, NULL));
    for (int k = 0; k < 8; k++)
      if (!(freed & (1u << k)))
        CHECK_OK(gpumem_deallocate(mr, x[k], cases[i].sizes[k] * MiB, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  }
  printf("holes given back for a growth fragmentation makes after the program let go\n");
}

/* The default's release for a growth that fragmentation alone makes while the program
 * climbs (GPUMEM__POOL_CLIMB_HOLES_PERCENT, 108%). Blocks of 8, 2, 30 and 30 MiB (a live peak
 * of 70), the first and last freed, and a 36 MiB request, dominant: the last block, the
 * region's end, grows by 6 MiB to 76, past 108% of the peak but within 110%, with 38 MiB
 * free, over four times the growth, in the pass that holds the peak: three of the hole's
 * pieces go back first, and the pool holds 70. Past an explicit release_holes_over=110,
 * which the program chose, the pool grows to 76, as it does with too little free: blocks of
 * 8, 2, 20, 26 and 14 MiB, the first and last freed, and a 20 MiB request (a size served
 * before) hold 22 MiB free for a 6 MiB growth. And in a later pass under the program's
 * highest: blocks of 36 and 34 MiB (the peak of 70, and a 36 MiB size served), freed, then
 * 8, 2 and 30 MiB carved from them (a pass's peak of 40) and the 8 freed, the 36 MiB request
 * grows by 6 MiB too, and the pool keeps the hole. */
static void test_release_holes_while_climbing(void) {
  enum { MiB = 1 << 20 };
  static const size_t climbing[] = {8, 2, 30, 30};
  static const size_t little_free[] = {8, 2, 20, 26, 14};
  static const holes_case cases[] = {
      {0, climbing, 4, 36, 70},
      {110, climbing, 4, 36, 76},
      {0, little_free, 5, 20, 76},
  };
  char *x[5], *grown;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int last = cases[i].count - 1;
    gpumem_resource *mr = holes_pool(cases[i].percent, cases[i].sizes, cases[i].count, NULL, x);
    CHECK_OK(gpumem_deallocate(mr, x[last], cases[i].sizes[last] * MiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, x[0], cases[i].sizes[0] * MiB, NULL));
    size_t request = cases[i].request_mib * MiB;
    CHECK_OK(gpumem_allocate(mr, request, NULL, (void **)&grown));
    CHECK_PTR_EQ(grown, x[last]); /* the region's end, grown in place */
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), cases[i].reserved_mib * MiB);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK),
                 (cases[i].reserved_mib == 70 ? 2 : 8) * MiB);
    check_mapped(cases[i].reserved_mib * MiB);
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, grown, request, NULL));
    for (int k = 1; k < last; k++)
      CHECK_OK(gpumem_deallocate(mr, x[k], cases[i].sizes[k] * MiB, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  }

  static const size_t first_pass[] = {36, 34}, later_pass[] = {8, 2, 30};
  gpumem_resource *mr = holes_pool(0, first_pass, 2, NULL, x);
  CHECK_OK(gpumem_deallocate(mr, x[0], 36 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, x[1], 34 * MiB, NULL));
  char *y[3];
  for (int k = 0; k < 3; k++) {
    CHECK_OK(gpumem_allocate(mr, later_pass[k] * MiB, NULL, (void **)&y[k]));
    CHECK_PTR_EQ(y[k], k ? y[k - 1] + later_pass[k - 1] * MiB : x[0]);
  }
  CHECK_OK(gpumem_deallocate(mr, y[0], 8 * MiB, NULL));
  CHECK_OK(gpumem_allocate(mr, 36 * MiB, NULL, (void **)&grown));
  CHECK_PTR_EQ(grown, y[2] + 30 * MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 76 * MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK), 8 * MiB);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_deallocate(mr, grown, 36 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, y[1], 2 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, y[2], 30 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("holes given back for a growth fragmentation makes while the program climbs\n");
}

/* A loop whose step frees a 4 MiB block and asks 6 and 8 MiB: each step gives back the hole
 * the last one left and grows after its blocks, 4 MiB higher. In a 128 MiB range it climbs
 * to the large region's end in a dozen steps and then starts again from the lowest room:
 * for a hundred steps it holds what it held in the first (16 MiB), and never leaves its
 * region (before, growth went on into the small region's half, and the pool held 20). */
static void test_climbing_loop_stays_in_its_range(void) {
  enum { MiB = 1 << 20, steps = 100 };
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm(reserve=128MiB, piece=2MiB), "
                                     "release_holes_over=110, release_holes_time=100)",
                                     &mr));
  char *pin, *held = NULL, *climbed = NULL;
  CHECK_OK(gpumem_allocate(mr, 2 * MiB, NULL, (void **)&pin));
  for (int i = 0; i < steps; i++) {
    char *a, *b;
    CHECK_OK(gpumem_allocate(mr, 6 * MiB, NULL, (void **)&a));
    if (held)
      CHECK_OK(gpumem_deallocate(mr, held, 4 * MiB, NULL));
    CHECK_OK(gpumem_allocate(mr, 8 * MiB, NULL, (void **)&b));
    CHECK_OK(gpumem_deallocate(mr, a, 6 * MiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, b, 8 * MiB, NULL));
    CHECK_OK(gpumem_allocate(mr, 4 * MiB, NULL, (void **)&held));
    CHECK(b + 8 * MiB <= pin + 64 * MiB);
    if (b > climbed)
      climbed = b;
  }
  CHECK(climbed >= pin + 48 * MiB); /* it did climb to the end */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_PEAK_RESERVED_BYTES), 16 * MiB);
  CHECK_OK(gpumem__validate(mr));
  CHECK_OK(gpumem_deallocate(mr, held, 4 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, pin, 2 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  check_mapped(0);
  printf("a loop that gives back and grows every step stays in its range\n");
}

/* With several streams, holes go back before growth only where no other stream's work may
 * still use them: the fresh set's, and the growing stream's own after a wait for that
 * stream, with other streams' sealed blocks whose work is done (the idle take moves them
 * to it first). A wait for the whole device there made every stream's work wait for one
 * stream's growth (streams_rounds: four streams of 1 MiB blocks over pool(vmm) waited for
 * the device at nearly every allocation of their first rounds). */
static void test_release_holes_of_several_streams(void) {
  if (!check_on_sim()) {
    printf("holes of several streams: a simulated-device check (pending work, no wait)\n");
    return;
  }
  enum { MiB = 1 << 20 };
  static const size_t sizes[] = {8, 2, 8, 2}; /* the user's hole, a pin, the other's, a pin */
  gpumem_stream user, other;
  CHECK_OK(gpumem_stream_create(GPUMEM_CURRENT_DEVICE, &user));
  CHECK_OK(gpumem_stream_create(GPUMEM_CURRENT_DEVICE, &other));
  gpumem_sim_reset_hazards();
  char *x[4], *small, *grown[4];
  gpumem_resource *mr = holes_pool(110, sizes, 4, user, x);
  CHECK_OK(gpumem_allocate(mr, 256, other, (void **)&small)); /* a second stream: the fold */
  CHECK_OK(gpumem_deallocate(mr, small, 256, other));
  CHECK_OK(gpumem_sim_launch(user, x[0], 8 * MiB, 1));
  CHECK_OK(gpumem_deallocate(mr, x[0], 8 * MiB, user)); /* past 2 MiB: sealed, pending */

  /* The user's hole has pending work: the other stream grows past it, with no wait and no
   * unmap, and the user's work stays pending. */
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  uint64_t syncs = gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE);
  uint64_t unmaps = gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_UNMAP);
  CHECK_OK(gpumem_allocate(mr, 12 * MiB, other, (void **)&grown[0]));
  uint64_t pending = 0;
  CHECK_OK(gpumem_sim_pending(user, &pending));
  CHECK(pending > 0);
  CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE), syncs);
  CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_UNMAP), unmaps);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved + 12 * MiB);

  /* The user's work done, the other stream takes its sealed hole and gives it back for
   * its growth. */
  CHECK_OK(gpumem_stream_synchronize(user));
  reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK_OK(gpumem_allocate(mr, 12 * MiB, other, (void **)&grown[1]));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved - 8 * MiB + 12 * MiB);
  CHECK_NO_HAZARD("");
  CHECK_OK(gpumem__validate(mr));

  /* The other stream's own hole, its work pending, goes after a wait for that stream; a
   * failed wait keeps it, and the growth is served all the same. */
  CHECK_OK(gpumem_sim_launch(other, x[2], 8 * MiB, 2));
  CHECK_OK(gpumem_deallocate(mr, x[2], 8 * MiB, other));
  reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  uint64_t absorbed = gpumem__absorbed_errors();
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_SYNCHRONIZE, 1));
  CHECK_OK(gpumem_allocate(mr, 12 * MiB, other, (void **)&grown[2]));
  CHECK(gpumem__absorbed_errors() > absorbed);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved + 12 * MiB);
  reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK_OK(gpumem_allocate(mr, 12 * MiB, other, (void **)&grown[3]));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved - 8 * MiB + 12 * MiB);
  CHECK_NO_HAZARD("");
  CHECK_OK(gpumem__validate(mr));
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_deallocate(mr, grown[i], 12 * MiB, other));
  CHECK_OK(gpumem_deallocate(mr, x[1], 2 * MiB, user));
  CHECK_OK(gpumem_deallocate(mr, x[3], 2 * MiB, user));
  CHECK_OK(gpumem_stream_synchronize(other));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_stream_destroy(user));
  CHECK_OK(gpumem_stream_destroy(other));
  printf("holes of several streams go back without waiting for other streams' work\n");
}

/* The hole's last user is a kernel still pending on the pool's one stream: the pool waits
 * for the device before it unmaps (no hazard, nothing pending after; with several streams,
 * test_release_holes_of_several_streams). An unmap that fails leaves the hole mapped, and
 * the pool grows as it would have. */
static void test_release_holes_waits_and_fails_safe(void) {
  enum { MiB = 1 << 20 };
  static const size_t hole_then_pin[] = {8, 2};
  char *x[2], *grown;
  if (check_on_sim()) {
    gpumem_stream user;
    CHECK_OK(gpumem_stream_create(GPUMEM_CURRENT_DEVICE, &user));
    gpumem_sim_reset_hazards();
    gpumem_resource *mr = holes_pool(110, hole_then_pin, 2, user, x);
    CHECK_OK(gpumem_sim_launch(user, x[0], 8 * MiB, 3));
    CHECK_OK(gpumem_deallocate(mr, x[0], 8 * MiB, user));
    uint64_t syncs = gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE);
    CHECK_OK(gpumem_allocate(mr, 12 * MiB, user, (void **)&grown));
    CHECK(gpumem_sim_call_count(GPUMEM_SIM_CALL_SYNCHRONIZE) > syncs);
    uint64_t pending = 1;
    CHECK_OK(gpumem_sim_pending(user, &pending));
    CHECK_U64_EQ(pending, 0);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 14 * MiB);
    CHECK_NO_HAZARD("");
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, grown, 12 * MiB, user));
    CHECK_OK(gpumem_deallocate(mr, x[1], 2 * MiB, user));
    CHECK_OK(gpumem_resource_release(mr));
    CHECK_OK(gpumem_stream_destroy(user));

    mr = holes_pool(110, hole_then_pin, 2, NULL, x);
    CHECK_OK(gpumem_deallocate(mr, x[0], 8 * MiB, NULL));
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_UNMAP, 1));
    CHECK_OK(gpumem_allocate(mr, 12 * MiB, NULL, (void **)&grown));
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 22 * MiB);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LARGEST_FREE_BLOCK), 8 * MiB);
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, grown, 12 * MiB, NULL));
    CHECK_OK(gpumem_deallocate(mr, x[1], 2 * MiB, NULL));
    CHECK_OK(gpumem_resource_release(mr));
    check_mapped(0);
    /* A request no range could hold gives nothing back for its growth, also one whose
     * percentage of the live peak would wrap (just past 2^64 / 110). */
    CHECK_OK(gpumem_resource_from_spec("pool(vmm(piece=2MiB), release_holes_over=110)", &mr));
    char *hole, *pin, *never;
    CHECK_OK(gpumem_allocate(mr, 8 * MiB, NULL, (void **)&hole));
    CHECK_OK(gpumem_allocate(mr, 2 * MiB, NULL, (void **)&pin));
    CHECK_OK(gpumem_deallocate(mr, hole, 8 * MiB, NULL));
    const size_t huge[] = {(size_t)64 << 30, (SIZE_MAX / 110 / (2 * MiB) + 1) * (2 * MiB)};
    for (size_t i = 0; i < 2; i++) {
      uint64_t unmaps = gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_UNMAP);
      CHECK(gpumem_allocate(mr, huge[i], NULL, (void **)&never) != GPUMEM_OK);
      CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_UNMAP), unmaps);
      CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 10 * MiB);
    }
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, pin, 2 * MiB, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  } else {
    printf("  the wait and the failed unmap are simulated-device checks: not run on a GPU\n");
  }
  printf("holes given back wait for the device, and a failed unmap loses nothing\n");
}

static void test_threads(const char *spec) {
  CHECK_OK(gpumem_resource_from_spec(spec, &shared_pool));
  pthread_t threads[thread_count];
  for (int i = 0; i < thread_count; i++) {
    pthread_mutex_init(&mailboxes[i].lock, NULL);
    mailboxes[i].count = 0;
  }
  for (int i = 0; i < thread_count; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, thread_worker, (void *)(intptr_t)i), 0);
  for (int i = 0; i < thread_count; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  for (int i = 0; i < thread_count; i++)
    for (int j = 0; j < mailboxes[i].count; j++)
      CHECK_OK(gpumem_deallocate(shared_pool, mailboxes[i].ptr[j], mailboxes[i].bytes[j], NULL));
  CHECK_U64_EQ(check_query(shared_pool, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_U64_EQ(check_query(shared_pool, GPUMEM_QUERY_FREE_BYTES),
               check_query(shared_pool, GPUMEM_QUERY_RESERVED_BYTES));
  CHECK_NO_HAZARD("no work uses these blocks; tests/gpu/concurrency.cu runs threads with kernels");
  CHECK_OK(gpumem__validate(shared_pool));
  CHECK_OK(gpumem_resource_release(shared_pool));
  printf("%-34s %d threads freeing each other's blocks passed\n", spec, thread_count);
}

/* ---- thread fronts: exact counters, and memory given back before growth or failure ----
 *
 * Once threads meet at a pool's lock, each thread keeps blocks of its own (pool_front.c);
 * these tests make the fronts at once (gpumem__pool_make_fronts). A pool over a limit of
 * one granule, full of one thread's freed blocks, must still serve a request for the whole
 * granule from another thread, on the same stream or another: the fronts give their blocks
 * back before the pool grows (for requests larger than fronts serve) or fails. */

enum { front_blocks = 64, front_block_bytes = 16 << 10 };
static gpumem_resource *front_pool;
static gpumem_stream front_stream;

/* Makes front_pool from `spec`, with its fronts, biased to this thread by a call on
 * `stream`. */
static void open_front_pool(const char *spec, gpumem_stream stream) {
  CHECK_OK(gpumem_resource_from_spec(spec, &front_pool));
  CHECK(gpumem__pool_make_fronts(front_pool)); /* as threads meeting at its lock would */
  void *ptr;
  CHECK_OK(gpumem_allocate(front_pool, 256, stream, &ptr)); /* biased to this thread */
  CHECK_OK(gpumem_deallocate(front_pool, ptr, 256, stream));
}

/* Ends a test of front_pool whose threads freed everything: nothing live, its structure
 * whole; then front_stream and the pool go. */
static void close_emptied_front_pool(void) {
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_LIVE_BYTES), 0);
  CHECK_OK(gpumem__validate(front_pool));
  CHECK_OK(gpumem_stream_destroy(front_stream));
  CHECK_OK(gpumem_resource_release(front_pool));
}

/* Runs fn(arg) on a thread of its own, to its end. */
static void on_another_thread(void *(*fn)(void *), void *arg) {
  pthread_t thread;
  CHECK_EQ(pthread_create(&thread, NULL, fn, arg), 0);
  CHECK_EQ(pthread_join(thread, NULL), 0);
}

static void *fill_front(void *arg) {
  (void)arg;
  void *held[front_blocks];
  for (int i = 0; i < front_blocks; i++)
    CHECK_OK(gpumem_allocate(front_pool, front_block_bytes, front_stream, &held[i]));
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_LIVE_COUNT), front_blocks);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_LIVE_BYTES),
               (uint64_t)front_blocks * front_block_bytes);
  CHECK_EQ(gpumem_deallocate(front_pool, held[0], front_block_bytes + 1, front_stream),
           GPUMEM_ERR_MISUSE); /* a wrong size changes nothing */
  CHECK_CONTAINS(gpumem_last_error_message(), "with 16385 bytes, but it was allocated with 16384");
  for (int i = 0; i < front_blocks; i++)
    CHECK_OK(gpumem_deallocate(front_pool, held[i], front_block_bytes, front_stream));
  CHECK_EQ(gpumem_deallocate(front_pool, held[0], front_block_bytes, front_stream),
           GPUMEM_ERR_MISUSE); /* freed twice: the front's block is free in its list */
  CHECK_CONTAINS(gpumem_last_error_message(), "already freed");
  return NULL;
}

/* A thread fills its front; then this thread (the pool's first, so now a second one) asks
 * for the whole granule on `stream`. */
static void test_front_gives_back(const char *spec, bool same_stream) {
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  open_front_pool(spec, front_stream);
  uint64_t reserved = check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES);
  on_another_thread(fill_front, NULL);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  gpumem_stream stream = front_stream;
  if (!same_stream)
    CHECK_OK(gpumem_stream_create(0, &stream));
  void *ptr;
  CHECK_OK(gpumem_allocate(front_pool, reserved, stream, &ptr));
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  CHECK_OK(gpumem_deallocate(front_pool, ptr, reserved, stream));
  CHECK_OK(gpumem_stream_synchronize(stream));
  if (!same_stream)
    CHECK_OK(gpumem_stream_destroy(stream));
  CHECK_OK(gpumem_stream_destroy(front_stream));
  CHECK_OK(gpumem_resource_release(front_pool));
  printf("%-34s a thread's front gives back before growth (%s stream)\n", spec,
         same_stream ? "same" : "another");
}

/* A front's refill cuts its batch as one run from one free block when one holds it all, so
 * that the pool's lock is held for one search (pool_front.c, take_batch): a thread's first
 * 64 blocks of 1 KiB (one refill's) are neighbours, where blocks taken one by one would fill
 * the exact holes first. Where no free block holds the run, the refill takes what fits block
 * by block; and a cached block of the class goes first. */
enum { run_blocks = 64, run_block_bytes = 1 << 10, run_holes = 8 };
static void *run_ptrs[run_blocks];
static int run_wanted, run_served;

static void *allocate_run(void *arg) {
  (void)arg;
  for (run_served = 0; run_served < run_wanted; run_served++)
    if (gpumem_allocate(front_pool, run_block_bytes, front_stream, &run_ptrs[run_served]) !=
        GPUMEM_OK)
      break;
  return NULL;
}

static void *free_run(void *arg) {
  (void)arg;
  for (int i = 0; i < run_served; i++)
    CHECK_OK(gpumem_deallocate(front_pool, run_ptrs[i], run_block_bytes, front_stream));
  return NULL;
}

static int by_address(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
  return (x > y) - (x < y);
}

/* Holes of 1 KiB between live blocks of front_stream's set, in its free index (a free-memory
 * query merges the cache into it); then the run. */
static void check_run_beside_holes(void) {
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &front_pool));
  gpumem_stream other;
  void *ptr, *holes[run_holes], *between[run_holes];
  CHECK_OK(gpumem_stream_create(0, &other));
  CHECK_OK(gpumem_allocate(front_pool, 256, other, &ptr));
  CHECK_OK(gpumem_deallocate(front_pool, ptr, 256, other));
  for (int i = 0; i < run_holes; i++) {
    CHECK_OK(gpumem_allocate(front_pool, run_block_bytes, front_stream, &holes[i]));
    CHECK_OK(gpumem_allocate(front_pool, run_block_bytes, front_stream, &between[i]));
  }
  for (int i = 0; i < run_holes; i++)
    CHECK_OK(gpumem_deallocate(front_pool, holes[i], run_block_bytes, front_stream));
  CHECK(check_query(front_pool, GPUMEM_QUERY_FREE_BLOCKS) > run_holes);
  CHECK(gpumem__pool_make_fronts(front_pool));
  run_wanted = run_blocks;
  on_another_thread(allocate_run, NULL);
  CHECK_EQ(run_served, run_blocks);
  void *sorted[run_blocks];
  memcpy(sorted, run_ptrs, sizeof sorted);
  qsort(sorted, run_blocks, sizeof sorted[0], by_address);
  for (int i = 1; i < run_blocks; i++)
    CHECK((uintptr_t)sorted[i] == (uintptr_t)sorted[i - 1] + run_block_bytes);
  for (int i = 0; i < run_holes; i++)
    CHECK((uintptr_t)holes[i] + run_block_bytes <= (uintptr_t)sorted[0] ||
          (uintptr_t)holes[i] > (uintptr_t)sorted[run_blocks - 1]);
  on_another_thread(free_run, NULL);
  for (int i = 0; i < run_holes; i++)
    CHECK_OK(gpumem_deallocate(front_pool, between[i], run_block_bytes, front_stream));
  CHECK_OK(gpumem_stream_synchronize(other));
  CHECK_OK(gpumem_stream_destroy(other));
  CHECK_OK(gpumem_resource_release(front_pool));
}

static void test_front_refill_takes_a_run(void) {
  const char *spec = "pool(cuda, initial=4MiB, max=4MiB)";
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  check_run_beside_holes();

  /* 2 KiB free in a pool at its maximum: two blocks, then the locked path's failure. */
  open_front_pool(spec, front_stream);
  uint64_t reserved = check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES);
  void *most;
  CHECK_OK(gpumem_allocate(front_pool, reserved - 2 * run_block_bytes, front_stream, &most));
  run_wanted = 3;
  on_another_thread(allocate_run, NULL);
  CHECK_EQ(run_served, 2);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_LIVE_COUNT), 3);
  on_another_thread(free_run, NULL);
  CHECK_OK(gpumem_deallocate(front_pool, most, reserved - 2 * run_block_bytes, front_stream));
  CHECK_OK(gpumem_resource_release(front_pool));

  /* A block of the class freed into the cache (allocated before the fronts came, so the
   * pool's own path frees it) is the refill's first. */
  CHECK_OK(gpumem_resource_from_spec(spec, &front_pool));
  void *cached;
  CHECK_OK(gpumem_allocate(front_pool, run_block_bytes, front_stream, &cached));
  CHECK(gpumem__pool_make_fronts(front_pool));
  CHECK_OK(gpumem_deallocate(front_pool, cached, run_block_bytes, front_stream));
  run_wanted = 1;
  on_another_thread(allocate_run, NULL);
  CHECK_EQ(run_served, 1);
  CHECK(run_ptrs[0] == cached);
  on_another_thread(free_run, NULL);
  CHECK_OK(gpumem_resource_release(front_pool));
  CHECK_OK(gpumem_stream_destroy(front_stream));
  printf("pool(vmm), %s with fronts: a refill's batch is one run where one fits, else what "
         "fits, the cached block first\n",
         spec);
}

/* Between passes (the program holds at most a quarter of its pass's live peak), a small
 * request that the small region cannot serve takes a hole of a granule or more in the large
 * region rather than growing the small region by a granule
 * (GPUMEM__POOL_BETWEEN_PASSES_PERCENT), and takes the cache's limit of it (size_in_region).
 * The small region's granule full (32 blocks of 64 KiB), three large blocks, some of them
 * freed, and a 64 KiB request: with 18 of 82 MiB live it goes to the hole; with 42 of 82,
 * with the region's last block as its only hole of a granule, or asked by another thread,
 * whose front's refill takes a batch of its size, the small region grows. */
static gpumem_resource *small_pool;
static char *small_by_thread;

static void *allocate_small(void *arg) {
  (void)arg;
  CHECK_OK(gpumem_allocate(small_pool, 64 << 10, NULL, (void **)&small_by_thread));
  return NULL;
}

static void test_small_request_between_passes(void) {
  enum { KiB = 1 << 10, MiB = 1 << 20, fillers = 32 };
  static const struct {
    size_t mib[3];
    unsigned freed; /* bit k: block k freed before the request (the last: the region's end) */
    bool by_front;
    int to; /* the freed block the request goes to; -1: none, the small region grows */
  } cases[] = {
      {{64, 16, 0}, 0x1, false, 0},  /* 18 of 82 MiB live: the hole */
      {{40, 40, 0}, 0x1, false, -1}, /* 42 of 82 */
      {{16, 64, 0}, 0x2, false, -1}, /* 18 of 82, the only hole the region's last block */
      {{1, 15, 64}, 0x5, false, -1}, /* 17 of 82, the other hole under a granule */
      {{64, 16, 0}, 0x1, true, -1},  /* 18 of 82, asked by another thread's front */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gpumem_resource *mr;
    CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
    char *filler[fillers], *large[3], *small;
    for (int k = 0; k < fillers; k++)
      CHECK_OK(gpumem_allocate(mr, 64 * KiB, NULL, (void **)&filler[k]));
    uint64_t reserved = 2 * MiB;
    for (int k = 0; k < 3; k++) {
      large[k] = NULL;
      if (cases[i].mib[k])
        CHECK_OK(gpumem_allocate(mr, cases[i].mib[k] * MiB, NULL, (void **)&large[k]));
      reserved += cases[i].mib[k] * MiB;
    }
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
    CHECK_U64_EQ(((pool_resource *)mr)->pass_peak_live, reserved);
    for (int k = 0; k < 3; k++)
      if (cases[i].freed & (1u << k))
        CHECK_OK(gpumem_deallocate(mr, large[k], cases[i].mib[k] * MiB, NULL));
    if (cases[i].by_front) {
      CHECK(gpumem__pool_make_fronts(mr)); /* as threads meeting at its lock would */
      small_pool = mr;
      on_another_thread(allocate_small, NULL);
      small = small_by_thread;
    } else {
      CHECK_OK(gpumem_allocate(mr, 64 * KiB, NULL, (void **)&small));
    }
    int to = cases[i].to;
    if (to >= 0) {
      /* It takes the cache's limit of the hole (128 KiB), so that, freed, it merges back at
       * once: the hole serves its old size again without growth. */
      size_t hole = cases[i].mib[to] * MiB;
      CHECK_PTR_EQ(small, large[to]);
      char *rest, *again;
      CHECK_OK(gpumem_allocate(mr, hole - 128 * KiB, NULL, (void **)&rest));
      CHECK_PTR_EQ(rest, large[to] + 128 * KiB);
      CHECK_OK(gpumem_deallocate(mr, rest, hole - 128 * KiB, NULL));
      CHECK_OK(gpumem_deallocate(mr, small, 64 * KiB, NULL));
      CHECK_OK(gpumem_allocate(mr, hole, NULL, (void **)&again));
      CHECK_PTR_EQ(again, large[to]);
      CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
      CHECK_OK(gpumem_deallocate(mr, again, hole, NULL));
      CHECK_OK(gpumem_allocate(mr, 64 * KiB, NULL, (void **)&small));
      CHECK_PTR_EQ(small, large[to]);
    } else {
      for (int k = 0; k < 3; k++)
        if (cases[i].freed & (1u << k))
          CHECK(small < large[k] || small >= large[k] + cases[i].mib[k] * MiB);
      reserved += 2 * MiB;
    }
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), reserved);
    check_mapped(reserved);
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_deallocate(mr, small, 64 * KiB, NULL));
    for (int k = 0; k < 3; k++)
      if (large[k] && !(cases[i].freed & (1u << k)))
        CHECK_OK(gpumem_deallocate(mr, large[k], cases[i].mib[k] * MiB, NULL));
    for (int k = 0; k < fillers; k++)
      CHECK_OK(gpumem_deallocate(mr, filler[k], 64 * KiB, NULL));
    CHECK_OK(gpumem__validate(mr));
    CHECK_OK(gpumem_resource_release(mr));
  }
  printf("between passes a small request takes a large hole rather than grow its region\n");
}

/* A front keeps at most 16 MiB free, a batch (512 KiB) and a block (under 320 KiB): a thread
 * that frees 40 blocks of each of 24 classes from 16 KiB to 246 KiB (126 MiB) keeps no more,
 * and the rest is the pool's again. */
enum { hold_classes = 24, hold_each = 40 };
static void *hold_ptrs[hold_classes * hold_each];

static size_t hold_size(int i) {
  return (size_t)(16 + 10 * (i / hold_each)) << 10;
}

static void *allocate_then_free_many(void *arg) {
  (void)arg;
  for (int i = 0; i < hold_classes * hold_each; i++)
    CHECK_OK(gpumem_allocate(front_pool, hold_size(i), front_stream, &hold_ptrs[i]));
  for (int i = 0; i < hold_classes * hold_each; i++)
    CHECK_OK(gpumem_deallocate(front_pool, hold_ptrs[i], hold_size(i), front_stream));
  return NULL;
}

static void test_front_holds_at_most(void) {
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  open_front_pool("pool(vmm)", front_stream);
  on_another_thread(allocate_then_free_many, NULL);
  gpumem__pool_front_stats stats;
  CHECK(gpumem__pool_front_stats_of(front_pool, &stats));
  CHECK(stats.held_bytes > 0);
  CHECK(stats.held_bytes <= (16u << 20) + (512u << 10) + (320u << 10));
  CHECK(stats.give_backs > 0);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(front_pool));
  CHECK_OK(gpumem_stream_destroy(front_stream));
  printf("pool(vmm) with fronts: a thread that frees 126 MiB keeps %.1f MiB in its front\n",
         (double)stats.held_bytes / (1 << 20));
}

/* A thread's refill that finds nothing leaves the thread's own front's other blocks alone
 * (taking them back would make it refill each of those classes at once, under the pool's
 * lock): the pool grows instead, as it may for what the front holds (bounded). But it never
 * fails while they could serve: the fold before a failure takes them back too. The thread
 * fills its front with 16 KiB blocks, frees them, then asks for up to 64 blocks of 100 KiB
 * (a front carves 111.75 KiB, the top of their class). */
enum { spared_request = 100 << 10 };
typedef struct spared_run {
  int served;       /* requests of 100 KiB served */
  uint64_t flushes; /* fronts the pool emptied meanwhile */
} spared_run;

static void *refill_spares_own_front(void *arg) {
  spared_run *run = arg;
  void *held[front_blocks];
  for (int i = 0; i < front_blocks; i++)
    CHECK_OK(gpumem_allocate(front_pool, front_block_bytes, front_stream, &held[i]));
  for (int i = 0; i < front_blocks; i++)
    CHECK_OK(gpumem_deallocate(front_pool, held[i], front_block_bytes, front_stream));
  gpumem__pool_front_stats before, after;
  CHECK(gpumem__pool_front_stats_of(front_pool, &before));
  run->served = 0;
  while (run->served < front_blocks &&
         gpumem_allocate(front_pool, spared_request, front_stream, &held[run->served]) == GPUMEM_OK)
    run->served++;
  CHECK(gpumem__pool_front_stats_of(front_pool, &after));
  run->flushes = after.flushes - before.flushes;
  for (int i = 0; i < run->served; i++)
    CHECK_OK(gpumem_deallocate(front_pool, held[i], spared_request, front_stream));
  return NULL;
}

static spared_run run_refill_spares(const char *spec) {
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  open_front_pool(spec, front_stream);
  spared_run run;
  on_another_thread(refill_spares_own_front, &run);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_stream_destroy(front_stream));
  CHECK_OK(gpumem_resource_release(front_pool));
  return run;
}

static void test_front_refill_spares_its_own(void) {
  spared_run grows = run_refill_spares("pool(vmm)");
  CHECK_EQ(grows.served, front_blocks);
  CHECK_U64_EQ(grows.flushes, 0);
  /* 2 MiB hold 18 blocks of 111.75 KiB; the front keeps about 1 MiB of 16 KiB blocks (two
   * batches of 25), beside which 9 would fit: the fold before the failure gave them back
   * (16 or 17 served, as the pieces fall: where locks cannot be biased, under
   * ThreadSanitizer, this thread's first call has a front too). */
  spared_run bounded = run_refill_spares("pool(limit(vmm, max=2MiB))");
  CHECK(bounded.served >= 14);
  printf("pool(limit(vmm, max=2MiB)) with fronts: %d requests of 100 KiB served\n", bounded.served);
  CHECK(bounded.flushes >= 1);
  printf("pool(vmm) with fronts: a refill keeps its own front's blocks while the pool may grow, "
         "and takes them back before failing\n");
}

/* A stream that thread fronts serve keeps a working reserve of sealed free memory from the
 * other streams' idle takes; what it holds beyond that, they may take. A thread on stream
 * A, its front bound to A by two small blocks it keeps, frees `blocks` blocks of 1 MiB there
 * and cycles one more until a free seals them all (simulated device: the event's record is
 * counted); then this thread asks for blocks of 1 MiB on stream B, which has none. */
enum { reserve_block = 1 << 20, reserve_most = 24 };
static gpumem_stream reserve_stream;
static int reserve_blocks;
static void *reserve_small[4]; /* two a phase */
static int reserve_phase;
static uintptr_t reserve_low, reserve_high; /* where A's freed blocks lay */

static void *free_on_reserve_stream(void *arg) {
  (void)arg;
  void *held[reserve_most];
  for (int i = 0; i < reserve_blocks; i++)
    CHECK_OK(gpumem_allocate(front_pool, reserve_block, reserve_stream, &held[i]));
  reserve_low = UINTPTR_MAX;
  reserve_high = 0;
  for (int i = 0; i < reserve_blocks; i++) {
    uintptr_t at = (uintptr_t)held[i];
    reserve_low = at < reserve_low ? at : reserve_low;
    reserve_high = at + reserve_block > reserve_high ? at + reserve_block : reserve_high;
  }
  /* After them (growth for a large block empties the stream's fronts): the second small
   * block comes through the front, which binds it to A. */
  for (int i = 2 * reserve_phase; i < 2 * reserve_phase + 2; i++)
    CHECK_OK(gpumem_allocate(front_pool, 256, reserve_stream, &reserve_small[i]));
  uint64_t records = gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD);
  for (int i = 0; i < reserve_blocks; i++)
    CHECK_OK(gpumem_deallocate(front_pool, held[i], reserve_block, reserve_stream));
  for (int cycles = 0; cycles < 32; cycles++) {
    CHECK_OK(gpumem_allocate(front_pool, reserve_block, reserve_stream, &held[0]));
    records = gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD);
    CHECK_OK(gpumem_deallocate(front_pool, held[0], reserve_block, reserve_stream));
    if (gpumem_sim_call_count(GPUMEM_SIM_CALL_EVENT_RECORD) != records)
      return NULL; /* this free sealed A's free memory, all of it */
  }
  CHECK(!"a free on the reserve stream sealed it");
  return NULL;
}

/* Whether a block of 1 MiB on `stream`, a new one, came from A's after a thread freed
 * `blocks` on A (its work done: no wait either way). */
static bool takes_beside(gpumem_stream stream, int blocks) {
  reserve_blocks = blocks;
  on_another_thread(free_on_reserve_stream, NULL);
  uint64_t waits = gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT);
  void *ptr;
  CHECK_OK(gpumem_allocate(front_pool, reserve_block, stream, &ptr));
  CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_STREAM_WAIT), waits);
  bool took = (uintptr_t)ptr >= reserve_low && (uintptr_t)ptr < reserve_high;
  CHECK_OK(gpumem_deallocate(front_pool, ptr, reserve_block, stream));
  return took;
}

static void test_front_working_reserve(void) {
  gpumem_stream first, second;
  CHECK_OK(gpumem_stream_create(0, &first));
  CHECK_OK(gpumem_stream_create(0, &second));
  CHECK_OK(gpumem_stream_create(0, &reserve_stream));
  open_front_pool("pool(vmm)", first);
  reserve_phase = 0;
  CHECK(!takes_beside(first, 3)); /* 3 MiB sealed on A: its thread's reserve */
  reserve_phase = 1;
  CHECK(takes_beside(second, 20)); /* 20 MiB: the surplus goes to another stream */
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_deallocate(front_pool, reserve_small[i], 256, reserve_stream));
  CHECK_OK(gpumem_stream_synchronize(first));
  CHECK_OK(gpumem_stream_destroy(first));
  CHECK_OK(gpumem_stream_destroy(second));
  CHECK_OK(gpumem_stream_destroy(reserve_stream));
  CHECK_OK(gpumem_resource_release(front_pool));
  printf("pool(vmm) with fronts: a front's stream keeps its working reserve from other "
         "streams, not its surplus\n");
}

/* Before the pool grows for a front's refill, the other fronts of its stream keep a reserve
 * (GPUMEM__POOL_FRONT_RESERVE, 4 MiB) and give the rest, the fullest first. A thread fills
 * its front with blocks of 8 to 64 KiB on the stream; then this thread asks for blocks of
 * 200 KiB there (a class above all of them) until the pool grows. */
enum { reserve_sizes = 12, reserve_each = 24 };
static void *fill_front_many_classes(void *arg) {
  (void)arg;
  static void *held[reserve_sizes][reserve_each];
  for (int k = 0; k < reserve_sizes; k++)
    for (int i = 0; i < reserve_each; i++)
      CHECK_OK(gpumem_allocate(front_pool, (size_t)(8 + 5 * k) << 10, front_stream, &held[k][i]));
  for (int k = 0; k < reserve_sizes; k++)
    for (int i = 0; i < reserve_each; i++)
      CHECK_OK(gpumem_deallocate(front_pool, held[k][i], (size_t)(8 + 5 * k) << 10, front_stream));
  return NULL;
}

static void test_front_keeps_reserve(void) {
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  open_front_pool("pool(vmm)", front_stream);
  on_another_thread(fill_front_many_classes, NULL);
  void *ptr[64];
  gpumem__pool_front_stats before, after;
  CHECK(gpumem__pool_front_stats_of(front_pool, &before));
  uint64_t reserved = check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES);
  int count = 0;
  do
    CHECK_OK(gpumem_allocate(front_pool, 200 << 10, front_stream, &ptr[count++]));
  while (count < 64 && check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES) == reserved);
  CHECK(gpumem__pool_front_stats_of(front_pool, &after));
  CHECK(before.held_bytes > GPUMEM__POOL_FRONT_RESERVE);
  CHECK(after.trims > before.trims); /* the thread's front gave what it held past its reserve */
  CHECK_U64_EQ(after.flushes, before.flushes); /* and kept that */
  CHECK(after.held_bytes >= GPUMEM__POOL_FRONT_RESERVE / 2);
  for (int i = 0; i < count; i++)
    CHECK_OK(gpumem_deallocate(front_pool, ptr[i], 200 << 10, front_stream));
  CHECK_OK(gpumem_stream_destroy(front_stream));
  CHECK_OK(gpumem_resource_release(front_pool));
  printf("pool(vmm) with fronts: before growing, another thread's front gives all but its "
         "reserve (%.2f of %.2f MiB kept)\n",
         (double)after.held_bytes / (1 << 20), (double)before.held_bytes / (1 << 20));
}

/* Fronts come when threads meet at the pool's lock, not when they take turns: two threads
 * that alternate (each waits for its turn, never for the lock) leave the pool without
 * fronts; four that run at once give it fronts. */
enum { turn_rounds = 2000, meet_threads = 4 };
static gpumem_resource *turn_pool;
static atomic_int turn;
static atomic_int meeting_done;

static void small_round(gpumem_stream stream) {
  void *held[8];
  for (int i = 0; i < 8; i++)
    CHECK_OK(gpumem_allocate(turn_pool, 512 + 256 * (size_t)i, stream, &held[i]));
  for (int i = 0; i < 8; i++)
    CHECK_OK(gpumem_deallocate(turn_pool, held[i], 512 + 256 * (size_t)i, stream));
}

static void *take_turns(void *arg) {
  int me = (int)(intptr_t)arg;
  for (int round = 0; round < turn_rounds; round++) {
    while (atomic_load(&turn) != me)
      sched_yield();
    small_round(NULL);
    atomic_store(&turn, 1 - me);
  }
  return NULL;
}

static void *meet(void *arg) {
  (void)arg;
  gpumem__pool_front_stats stats;
  while (!atomic_load(&meeting_done) && !gpumem__pool_front_stats_of(turn_pool, &stats))
    small_round(NULL);
  return NULL;
}

static void test_fronts_when_threads_meet(void) {
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &turn_pool));
  pthread_t threads[meet_threads];
  atomic_store(&turn, 0);
  for (int i = 0; i < 2; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, take_turns, (void *)(intptr_t)i), 0);
  for (int i = 0; i < 2; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  gpumem__pool_front_stats stats;
  CHECK(!gpumem__pool_front_stats_of(turn_pool, &stats)); /* 64,000 calls in turns */
  atomic_store(&meeting_done, 0);
  for (int i = 0; i < meet_threads; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, meet, NULL), 0);
  for (int waited_ms = 0; !gpumem__pool_front_stats_of(turn_pool, &stats) && waited_ms < 60000;
       waited_ms++)
    usleep(1000);
  atomic_store(&meeting_done, 1);
  for (int i = 0; i < meet_threads; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  CHECK(gpumem__pool_front_stats_of(turn_pool, &stats));
  CHECK_U64_EQ(check_query(turn_pool, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(turn_pool));
  printf("pool(vmm): threads that take turns get no fronts; threads that meet at its lock do\n");
}

/* Threads that take long turns have the pool's lock biased to each in turn (a turn of
 * 16,000 calls saves more than the revocation's barrier costs), still without fronts; once
 * the pool has fronts, a thread alone never has it biased again. */
enum { long_turns = 10, long_turn_rounds = 1000 };
static atomic_int biased_turns;

static bool pool_biased_to_me(gpumem_resource *mr) {
  return gpumem__biased_lock_my_slot(&((pool_resource *)mr)->lock) >= 0;
}

static void *take_long_turns(void *arg) {
  int me = (int)(intptr_t)arg;
  for (int k = 0; k < long_turns; k++) {
    while (atomic_load(&turn) != 2 * k + me)
      usleep(20);
    for (int round = 0; round < long_turn_rounds; round++)
      small_round(NULL);
    atomic_fetch_add(&biased_turns, pool_biased_to_me(turn_pool));
    atomic_store(&turn, 2 * k + me + 1);
  }
  return NULL;
}

static void *run_alone(void *arg) {
  (void)arg;
  for (int round = 0; round < long_turn_rounds; round++) {
    void *large; /* past what fronts serve: through the pool's lock */
    CHECK_OK(gpumem_allocate(turn_pool, 2 << 20, NULL, &large));
    small_round(NULL);
    CHECK_OK(gpumem_deallocate(turn_pool, large, 2 << 20, NULL));
  }
  atomic_store(&biased_turns, pool_biased_to_me(turn_pool));
  return NULL;
}

static void test_long_turns_bias_again(void) {
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &turn_pool));
  pthread_t threads[2];
  atomic_store(&turn, 0);
  atomic_store(&biased_turns, 0);
  for (int i = 0; i < 2; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, take_long_turns, (void *)(intptr_t)i), 0);
  for (int i = 0; i < 2; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  int biased = atomic_load(&biased_turns);
  if (gpumem__biased_lock_biases_again())
    CHECK(biased >= 1);
  else
    CHECK_EQ(biased, 0);
  gpumem__pool_front_stats stats;
  CHECK(!gpumem__pool_front_stats_of(turn_pool, &stats));
  CHECK_OK(gpumem__validate(turn_pool));
  /* With fronts, a thread alone keeps the shared lock. */
  CHECK(gpumem__pool_make_fronts(turn_pool));
  CHECK_EQ(pthread_create(&threads[0], NULL, run_alone, NULL), 0);
  CHECK_EQ(pthread_join(threads[0], NULL), 0);
  CHECK_EQ(atomic_load(&biased_turns), 0);
  CHECK_U64_EQ(check_query(turn_pool, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem__validate(turn_pool));
  CHECK_OK(gpumem_resource_release(turn_pool));
  printf("pool(vmm): %d of %d long turns ended with the lock biased to their thread; none "
         "once it has fronts\n",
         biased, 2 * long_turns);
}

/* More threads at once than the fronts have slots: the threads past the slots allocate and
 * free through the pool's lock, and free the fronts' blocks of the others there too; a
 * slotted thread frees their blocks, which no front holds, through the lock. Every thread
 * frees its neighbour's block with a wrong size (refused, still live), then rightly, then
 * again (refused): the same answers on either way. Nothing is lost. */
enum { crowd_threads = GPUMEM__THREAD_SLOTS + 6, crowd_blocks = 8 };
static pthread_barrier_t crowd_met;
static void *crowd_ptrs[crowd_threads][crowd_blocks];

static void *crowd_member(void *arg) {
  int me = (int)(intptr_t)arg, next = (me + 1) % crowd_threads;
  for (int i = 0; i < crowd_blocks; i++)
    CHECK_OK(gpumem_allocate(front_pool, front_block_bytes, front_stream, &crowd_ptrs[me][i]));
  pthread_barrier_wait(&crowd_met); /* every thread holds a slot or has none, at once */
  for (int i = 0; i < crowd_blocks; i++) {
    void *ptr = crowd_ptrs[next][i];
    CHECK_EQ(gpumem_deallocate(front_pool, ptr, front_block_bytes - 256, front_stream),
             GPUMEM_ERR_MISUSE);
    CHECK_CONTAINS(gpumem_last_error_message(), "but it was allocated with 16384");
    CHECK_OK(gpumem_deallocate(front_pool, ptr, front_block_bytes, front_stream));
    CHECK_EQ(gpumem_deallocate(front_pool, ptr, front_block_bytes, front_stream),
             GPUMEM_ERR_MISUSE);
  }
  return NULL;
}

static void test_fronts_crowd(void) {
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  open_front_pool("pool(vmm)", front_stream);
  CHECK_EQ(pthread_barrier_init(&crowd_met, NULL, crowd_threads), 0);
  pthread_t threads[crowd_threads];
  for (int i = 0; i < crowd_threads; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, crowd_member, (void *)(intptr_t)i), 0);
  for (int i = 0; i < crowd_threads; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  pthread_barrier_destroy(&crowd_met);
  close_emptied_front_pool();
  printf("pool(vmm) with fronts: %d threads at once (%d slots) free each other's blocks\n",
         crowd_threads, GPUMEM__THREAD_SLOTS);
}

/* Two threads free the same blocks at once (a double free raced): the blocks' front's thread
 * and another, each freeing them all, in order, meeting at each block (race_meet). Of the two
 * frees of each block exactly one succeeds; the other is a misuse. The other thread's first
 * free of each of the front's maps comes while the front's thread claims the map's blocks
 * with plain stores (share_claims): so each round has a fresh pool. Few enough blocks that
 * no list gives a batch back meanwhile: a raced free of a block already back in the pool reads
 * a struct the pool may be rewriting (try_claim checks its address), which ThreadSanitizer
 * reports. After the race, the front's thread gets its blocks back once each. */
enum { race_rounds = 128, race_blocks = 32 };
static pthread_barrier_t race_start, race_end;
static void *race_ptrs[race_blocks];
static gpumem_status race_status[2][race_blocks];
static atomic_int race_arrived; /* the two threads meet at each block */

/* Waits until both threads have come to block i, so that they free it at the same moment. */
static void race_meet(int i) {
  atomic_fetch_add(&race_arrived, 1);
  for (unsigned spins = 0; atomic_load(&race_arrived) < 2 * (i + 1); spins++)
    if (spins > 1000)
      sched_yield();
}

static void *race_free(void *arg) {
  int me = (int)(intptr_t)arg;
  if (me == 0)
    for (int i = 0; i < race_blocks; i++)
      CHECK_OK(gpumem_allocate(front_pool, front_block_bytes, front_stream, &race_ptrs[i]));
  pthread_barrier_wait(&race_start);
  for (int i = 0; i < race_blocks; i++) {
    race_meet(i);
    race_status[me][i] =
        gpumem_deallocate(front_pool, race_ptrs[i], front_block_bytes, front_stream);
  }
  pthread_barrier_wait(&race_end);
  if (me == 0) { /* every block once from the front's lists, the same blocks again */
    gpumem__pool_front_stats stats;
    CHECK(gpumem__pool_front_stats_of(front_pool, &stats));
    CHECK_U64_EQ(stats.give_backs, 0);
    void *again[race_blocks];
    for (int i = 0; i < race_blocks; i++)
      CHECK_OK(gpumem_allocate(front_pool, front_block_bytes, front_stream, &again[i]));
    for (int i = 0; i < race_blocks; i++)
      for (int j = 0; j < i; j++)
        CHECK(again[i] != again[j]);
    for (int i = 0; i < race_blocks; i++)
      CHECK_OK(gpumem_deallocate(front_pool, again[i], front_block_bytes, front_stream));
  }
  return NULL;
}

static void test_fronts_double_free_race(void) {
  int lost = 0; /* frees the other thread won */
  for (int round = 0; round < race_rounds; round++) {
    CHECK_OK(gpumem_stream_create(0, &front_stream));
    open_front_pool("pool(vmm)", front_stream);
    CHECK_EQ(pthread_barrier_init(&race_start, NULL, 2), 0);
    CHECK_EQ(pthread_barrier_init(&race_end, NULL, 2), 0);
    atomic_store(&race_arrived, 0);
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
      CHECK_EQ(pthread_create(&threads[i], NULL, race_free, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 2; i++)
      CHECK_EQ(pthread_join(threads[i], NULL), 0);
    pthread_barrier_destroy(&race_start);
    pthread_barrier_destroy(&race_end);
    for (int i = 0; i < race_blocks; i++) {
      CHECK((race_status[0][i] == GPUMEM_OK) != (race_status[1][i] == GPUMEM_OK));
      CHECK(race_status[0][i] == GPUMEM_OK || race_status[0][i] == GPUMEM_ERR_MISUSE);
      CHECK(race_status[1][i] == GPUMEM_OK || race_status[1][i] == GPUMEM_ERR_MISUSE);
      lost += race_status[1][i] == GPUMEM_OK;
    }
    close_emptied_front_pool();
  }
  printf("pool(vmm) with fronts: %d rounds of %d blocks freed by two threads at once, each "
         "once (%d by the other thread)\n",
         race_rounds, race_blocks, lost);
}

/* A thread's free that reads its own front's map while a writer changes it (the seqlock odd:
 * here every map of the front, held mid-change by this thread) reads it again until the
 * writer is done, then frees the block as usual. */
static pool_front *spoiled_front;
static atomic_int spoiled_step; /* 1: the block is allocated; 2: the maps are mid-change */
static atomic_bool spoiled_freed;

static void *free_under_writer(void *arg) {
  (void)arg;
  void *ptr;
  CHECK_OK(gpumem_allocate(front_pool, front_block_bytes, front_stream, &ptr));
  pool_fronts *fronts = fronts_of((pool_resource *)front_pool);
  spoiled_front = &fronts->fronts[gpumem__thread_slot(&fronts->slots)];
  atomic_store(&spoiled_step, 1);
  while (atomic_load(&spoiled_step) != 2)
    sched_yield();
  CHECK_OK(gpumem_deallocate(front_pool, ptr, front_block_bytes, front_stream));
  atomic_store(&spoiled_freed, true);
  return NULL;
}

static void test_front_free_waits_for_map_writer(void) {
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  open_front_pool("pool(vmm)", front_stream);
  atomic_store(&spoiled_step, 0);
  atomic_store(&spoiled_freed, false);
  pthread_t thread;
  CHECK_EQ(pthread_create(&thread, NULL, free_under_writer, NULL), 0);
  while (atomic_load(&spoiled_step) != 1)
    sched_yield();
  for (int k = 0; k < GPUMEM__POOL_LIVE_SHARDS; k++) {
    gpumem__pool_spin(&spoiled_front->shards[k].lock, true);
    gpumem__front_map_write_begin(&spoiled_front->shards[k].map);
  }
  atomic_store(&spoiled_step, 2);
  usleep(20000); /* the free reads the map meanwhile and waits */
  CHECK(!atomic_load(&spoiled_freed));
  for (int k = 0; k < GPUMEM__POOL_LIVE_SHARDS; k++) {
    gpumem__front_map_write_end(&spoiled_front->shards[k].map);
    gpumem__pool_spin(&spoiled_front->shards[k].lock, false);
  }
  CHECK_EQ(pthread_join(thread, NULL), 0);
  CHECK(atomic_load(&spoiled_freed));
  close_emptied_front_pool();
  printf("pool(vmm) with fronts: a free that meets its map mid-change waits for the writer\n");
}

/* Free-memory queries and trims take the fronts' blocks back first. */
static void test_front_queries_and_trim(void) {
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  open_front_pool("pool(vmm)", front_stream);
  on_another_thread(fill_front, NULL);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_FREE_BYTES),
               check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES));
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_FREE_BLOCKS), 1);
  on_another_thread(fill_front, NULL);
  size_t released = 0;
  CHECK_OK(gpumem_resource_trim(front_pool, &released));
  CHECK(released > 0);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_OK(gpumem_stream_destroy(front_stream));
  CHECK_OK(gpumem_resource_release(front_pool));
  printf("pool(vmm) with fronts: free-memory queries and trim take their blocks back\n");
}

/* A trim that gives back a region's last chunk, unlinked from the chunk below (an earlier
 * trim gave back the chunk between), moves the region's growth point to the highest block
 * left, which here is a block a thread's front handed out: the fronts' maps hold it, not the
 * pool's live map. The large region: a 2 MiB chunk of a locked-path block and, carved whole
 * from the chunk's free rest, a front's block of 223.75 KiB (the top of a 200 KiB request's
 * class), live through both trims; above it two chunks of 2 MiB, the lower given back by a
 * first trim, then the upper by a second. Growth then continues right after the front's
 * block. */
enum { highest_request = 200 << 10, highest_front_block = 895 << 8 };
static void *highest_front_ptr;

static void *allocate_highest_front_block(void *arg) {
  (void)arg;
  CHECK_OK(gpumem_allocate(front_pool, highest_request, front_stream, &highest_front_ptr));
  return NULL;
}

static void *free_highest_front_block(void *arg) {
  (void)arg;
  CHECK_OK(gpumem_deallocate(front_pool, highest_front_ptr, highest_request, front_stream));
  return NULL;
}

static void test_front_block_highest_after_trims(void) {
  enum { step = 2 << 20 };
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  open_front_pool("pool(vmm, release_holes_over=never)", front_stream);
  region *large = &((pool_resource *)front_pool)->regions[GPUMEM__POOL_REGION_LARGE];
  char *below, *middle, *top, *grown;
  CHECK_OK(gpumem_allocate(front_pool, step - highest_front_block, front_stream, (void **)&below));
  on_another_thread(allocate_highest_front_block, NULL);
  CHECK_PTR_EQ(highest_front_ptr, below + step - highest_front_block); /* the chunk's rest */
  CHECK_OK(gpumem_allocate(front_pool, step, front_stream, (void **)&middle));
  CHECK_OK(gpumem_allocate(front_pool, step, front_stream, (void **)&top));
  CHECK_PTR_EQ(middle, below + step);
  CHECK_PTR_EQ(top, middle + step);
  CHECK_OK(gpumem_deallocate(front_pool, middle, step, front_stream));
  CHECK_OK(gpumem_resource_trim(front_pool, NULL));
  CHECK_OK(gpumem__validate(front_pool));
  CHECK_OK(gpumem_deallocate(front_pool, top, step, front_stream));
  CHECK_OK(gpumem_resource_trim(front_pool, NULL));
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES), step);
  CHECK_OK(gpumem__validate(front_pool));
  CHECK(large->tail != NULL);
  CHECK_PTR_EQ(large->tail->addr, highest_front_ptr);
  CHECK_OK(gpumem_allocate(front_pool, step, front_stream, (void **)&grown));
  CHECK_PTR_EQ(grown, below + step); /* in place, right after the front's block */
  CHECK_OK(gpumem_deallocate(front_pool, grown, step, front_stream));
  CHECK_OK(gpumem_deallocate(front_pool, below, step - highest_front_block, front_stream));
  on_another_thread(free_highest_front_block, NULL);
  close_emptied_front_pool();
  printf("pool(vmm) with fronts: a trim's growth point is a front's block when it is highest\n");
}

/* A thread that allocates what another frees on a stream of its own (a producer and its
 * consumer) gets the blocks back in batches, not through the pool: its stream waits for the
 * consumer's frees (no hazard), and the pool does not grow after the first rounds (the
 * round's blocks, 1.2 MiB, and the consumer's batch on its way fit in two granules). The
 * consumer's stream, when it allocates in turn, takes back what it sent before the pool
 * grows. */
enum { return_rounds = 24 };
static gpumem_stream consumer_stream;
static void *return_ptrs[front_blocks];
static pthread_barrier_t handed_over, consumed;

/* The consumer: each round, writes and frees on its stream what the producer handed it;
 * at the end, once the producer has stopped, it allocates as much on its stream. */
static void *write_and_free(void *arg) {
  (void)arg;
  for (int round = 0; round < return_rounds; round++) {
    pthread_barrier_wait(&handed_over);
    for (int i = 0; i < front_blocks; i++) {
      use_on(consumer_stream, return_ptrs[i], front_block_bytes, 7);
      CHECK_OK(gpumem_deallocate(front_pool, return_ptrs[i], front_block_bytes, consumer_stream));
    }
    /* Freed twice, the producer's block waiting in a return batch or back in its lists. */
    CHECK_EQ(gpumem_deallocate(front_pool, return_ptrs[round % front_blocks], front_block_bytes,
                               consumer_stream),
             GPUMEM_ERR_MISUSE);
    pthread_barrier_wait(&consumed);
  }
  pthread_barrier_wait(&handed_over); /* the producer's checks are done */
  for (int i = 0; i < front_blocks; i++)
    CHECK_OK(gpumem_allocate(front_pool, front_block_bytes, consumer_stream, &return_ptrs[i]));
  for (int i = 0; i < front_blocks; i++)
    CHECK_OK(gpumem_deallocate(front_pool, return_ptrs[i], front_block_bytes, consumer_stream));
  return NULL;
}

static void test_front_returns(void) {
  if (check_on_sim())
    gpumem_sim_reset_hazards();
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  CHECK_OK(gpumem_stream_create(0, &consumer_stream));
  open_front_pool("pool(vmm)", front_stream);
  CHECK_EQ(pthread_barrier_init(&handed_over, NULL, 2), 0);
  CHECK_EQ(pthread_barrier_init(&consumed, NULL, 2), 0);
  pthread_t consumer;
  CHECK_EQ(pthread_create(&consumer, NULL, write_and_free, NULL), 0);
  uint64_t reserved = 0;
  for (int round = 0; round < return_rounds; round++) {
    for (int i = 0; i < front_blocks; i++) {
      CHECK_OK(gpumem_allocate(front_pool, front_block_bytes, front_stream, &return_ptrs[i]));
      use_on(front_stream, return_ptrs[i], front_block_bytes, 1);
    }
    CHECK_OK(gpumem_stream_synchronize(front_stream)); /* the program's part of the handoff */
    pthread_barrier_wait(&handed_over);
    pthread_barrier_wait(&consumed);
    if (round == return_rounds / 4) /* the live blocks and a batch on its way: two granules */
      reserved = check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES);
  }
  uint64_t producer_reserved = check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK_U64_EQ(producer_reserved, reserved);
  CHECK(reserved <= 2 * ((uint64_t)2 << 20));
  gpumem__pool_front_stats stats;
  CHECK(gpumem__pool_front_stats_of(front_pool, &stats));
  CHECK(stats.returns_sent >= return_rounds - 2);
  CHECK(stats.returns_taken >= return_rounds - 4);
  CHECK(stats.refills < (uint64_t)return_rounds); /* the returns serve the producer */
  CHECK_OK(gpumem__validate(front_pool));
  pthread_barrier_wait(&handed_over);
  CHECK_EQ(pthread_join(consumer, NULL), 0);
  pthread_barrier_destroy(&handed_over);
  pthread_barrier_destroy(&consumed);
  CHECK_U64_EQ(check_query(front_pool, GPUMEM_QUERY_RESERVED_BYTES), reserved);
  CHECK_OK(gpumem__validate(front_pool));
  if (check_on_sim())
    CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  CHECK_OK(gpumem_stream_synchronize(consumer_stream));
  CHECK_OK(gpumem_stream_destroy(consumer_stream));
  CHECK_OK(gpumem_stream_destroy(front_stream));
  CHECK_OK(gpumem_resource_release(front_pool));
  printf("pool(vmm) with fronts: a consumer's frees go back to their producer (%llu batches)\n",
         (unsigned long long)stats.returns_sent);
}

/* ---- fronts read and drained while their threads run ----
 *
 * Threads turn blocks over through their fronts while this thread reaches into every front
 * again and again: validating the pool (every front's lists, maps and counters checked),
 * reading the fronts' statistics, and trimming (every front flushed into the pool). One
 * that went in while a thread was changing its front would find a list or a count half
 * changed, which the validator reports, and the sanitizers' builds see as a race. This
 * thread takes the pool's lock again the moment it lets go: before the lock let starving
 * sleepers in (core/biased_lock.c), the threads slept on it for good on the GPU host. */

enum { reach_threads = 4, reach_steps = 30000, reach_live = 32 };
static atomic_int reach_running;

static void *reach_worker(void *arg) {
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(0, &stream));
  void *ptrs[reach_live] = {0};
  size_t sizes[reach_live] = {0};
  uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)((intptr_t)arg + 1);
  for (int step = 0; step < reach_steps; step++) {
    next_random(&x);
    int i = (int)(x % reach_live);
    if (ptrs[i]) {
      CHECK_OK(gpumem_deallocate(front_pool, ptrs[i], sizes[i], stream));
      ptrs[i] = NULL;
    } else {
      sizes[i] = 1 + (x >> 40) % (64 << 10);
      CHECK_OK(gpumem_allocate(front_pool, sizes[i], stream, &ptrs[i]));
    }
  }
  for (int i = 0; i < reach_live; i++)
    if (ptrs[i])
      CHECK_OK(gpumem_deallocate(front_pool, ptrs[i], sizes[i], stream));
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_destroy(stream));
  atomic_fetch_sub(&reach_running, 1);
  return NULL;
}

static void test_fronts_reached_into(void) {
  CHECK_OK(gpumem_stream_create(0, &front_stream));
  open_front_pool("pool(vmm)", front_stream);
  atomic_store(&reach_running, reach_threads);
  pthread_t threads[reach_threads];
  for (int i = 0; i < reach_threads; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, reach_worker, (void *)(intptr_t)i), 0);
  gpumem__pool_front_stats stats;
  int rounds = 0;
  while (atomic_load(&reach_running) > 0) {
    CHECK_OK(gpumem__validate(front_pool));
    CHECK(gpumem__pool_front_stats_of(front_pool, &stats));
    if (++rounds % 8 == 0)
      CHECK_OK(gpumem_resource_trim(front_pool, NULL));
  }
  for (int i = 0; i < reach_threads; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  CHECK(gpumem__pool_front_stats_of(front_pool, &stats));
  CHECK(stats.ops >= (uint64_t)reach_threads * reach_steps);
  close_emptied_front_pool();
  printf("pool(vmm) with fronts: validated, read and trimmed %d times while %d threads ran\n",
         rounds, reach_threads);
}

/* ---- arena: queries while growing, and a release that fails half way ---- */

enum { arena_workers = 4, arena_rounds = 300 };
static gpumem_resource *growing_arena;
static atomic_int workers_running;

static void *arena_worker(void *arg) {
  (void)arg;
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(0, &stream));
  void *held[32];
  for (int round = 0; round < arena_rounds; round++) {
    size_t bytes = (size_t)(round % 7 + 1) * 3000;
    for (int i = 0; i < 32; i++)
      CHECK_OK(gpumem_allocate(growing_arena, bytes, stream, &held[i]));
    for (int i = 0; i < 32; i++)
      CHECK_OK(gpumem_deallocate(growing_arena, held[i], bytes, stream));
  }
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_destroy(stream));
  atomic_fetch_sub(&workers_running, 1);
  return NULL;
}

static void test_arena_query_while_growing(void) {
  CHECK_OK(gpumem_resource_from_spec("arena(cuda, size=1, superblock=1MiB)", &growing_arena));
  atomic_store(&workers_running, arena_workers);
  pthread_t threads[arena_workers];
  for (int i = 0; i < arena_workers; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, arena_worker, NULL), 0);
  uint64_t queries = 0;
  while (atomic_load(&workers_running) > 0) {
    /* Each figure is read alone, and a live count sums pieces read one after another while
     * superblocks move between them, so it may be off by the few moved meanwhile; but it
     * never wraps below zero into nonsense. */
    uint64_t live = check_query(growing_arena, GPUMEM_QUERY_LIVE_COUNT);
    CHECK(live <= (uint64_t)arena_workers * 32 + 64);
    check_query(growing_arena, GPUMEM_QUERY_FREE_BLOCKS);
    check_query(growing_arena, GPUMEM_QUERY_LARGEST_FREE_BLOCK);
    CHECK(check_query(growing_arena, GPUMEM_QUERY_RESERVED_BYTES) <= (uint64_t)1 << 30);
    queries++;
  }
  for (int i = 0; i < arena_workers; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  CHECK_U64_EQ(check_query(growing_arena, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(growing_arena));
  printf("arena queried %llu times while %d streams grew it passed\n", (unsigned long long)queries,
         arena_workers);
}

/* The driver's free fails on the nth chunk the arena gives back at its last release: the
 * release reports it, the arena (what is left of it) still serves both streams, and the
 * next release frees everything. */
static void test_arena_failed_release(void) {
  if (!check_on_sim()) {
    printf("arena used again after a failed release: not checked on a GPU (the simulated "
           "device fails a driver free on demand)\n");
    return;
  }
  uint64_t used_before = 0, used = 0;
  CHECK_OK(gpumem_sim_device_used(0, &used_before));
  for (uint64_t nth = 1; nth <= 3; nth++) {
    gpumem_resource *arena;
    CHECK_OK(gpumem_resource_from_spec("arena(cuda, size=1, superblock=1MiB)", &arena));
    gpumem_stream streams[2];
    for (int s = 0; s < 2; s++)
      CHECK_OK(gpumem_stream_create(0, &streams[s]));
    for (int round = 0; round < 2; round++) {
      void *ptrs[2][3];
      static const size_t sizes[3] = {1000, 200000, 3 << 20};
      for (int s = 0; s < 2; s++)
        for (int i = 0; i < 3; i++) {
          CHECK_OK(gpumem_allocate(arena, sizes[i], streams[s], &ptrs[s][i]));
          CHECK_OK(gpumem_memset_async(ptrs[s][i], s, sizes[i], streams[s]));
        }
      for (int s = 0; s < 2; s++)
        for (int i = 0; i < 3; i++)
          CHECK_OK(gpumem_deallocate(arena, ptrs[s][i], sizes[i], streams[s]));
      if (round == 0) {
        CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEM_FREE, nth));
        CHECK_FAILS_WITH(gpumem_resource_release(arena), GPUMEM_ERR_CUDA, "release it again");
        CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEM_FREE, 0));
      }
    }
    for (int s = 0; s < 2; s++) {
      CHECK_OK(gpumem_stream_synchronize(streams[s]));
      CHECK_OK(gpumem_stream_destroy(streams[s]));
    }
    CHECK_OK(gpumem_resource_release(arena));
    CHECK_OK(gpumem_sim_device_used(0, &used));
    CHECK_U64_EQ(used, used_before);
  }
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  printf("arena used again after a failed release passed\n");
}

/* ---- default streams of another device ---- */

static void test_default_streams_of_another_device(void) {
  int count = 0;
  CHECK_OK(gpumem_device_count(&count));
  if (count < 2) {
    printf("pool of device 1 on the default streams: not checked, %d device(s)\n", count);
    return;
  }
  CHECK_OK(gpumem_set_device(0));
  gpumem_resource *cuda, *pool;
  CHECK_OK(gpumem_cuda_create(1, &cuda));
  gpumem_pool_options options = {.initial_size = 2 << 20};
  CHECK_OK(gpumem_pool_create(cuda, &options, &pool));
  /* NULL, then the per-thread default stream (2): two streams, so frees record events. */
  gpumem_stream per_thread = (gpumem_stream)(uintptr_t)2;
  void *a, *b;
  CHECK_OK(gpumem_allocate(pool, 100, NULL, &a));
  CHECK_OK(gpumem_allocate(pool, 100, per_thread, &b));
  for (int round = 0; round < 40; round++) { /* past a seal of both streams' frees */
    CHECK_OK(gpumem_deallocate(pool, a, 100, NULL));
    CHECK_OK(gpumem_deallocate(pool, b, 100, per_thread));
    CHECK_OK(gpumem_allocate(pool, 100, per_thread, &a)); /* may take NULL's block */
    CHECK_OK(gpumem_allocate(pool, 100, NULL, &b));
    void *swap = a;
    a = b;
    b = swap;
  }
  CHECK_OK(gpumem_deallocate(pool, a, 100, NULL));
  CHECK_OK(gpumem_deallocate(pool, b, 100, per_thread));
  CHECK_U64_EQ(check_query(pool, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_set_device(1));
  CHECK_OK(gpumem_stream_synchronize(NULL));
  CHECK_OK(gpumem_set_device(0));
  CHECK_NO_HAZARD("no work uses these blocks");
  CHECK_OK(gpumem_resource_release(pool));
  CHECK_OK(gpumem_resource_release(cuda));
  printf("pool of device 1 on the default streams with device 0 current passed\n");
}

/* ---- many streams ---- */

static void test_many_streams(const char *spec, int stream_count) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec(spec, &mr));
  gpumem_stream *streams = calloc((size_t)stream_count, sizeof *streams);
  void **held = calloc((size_t)stream_count, sizeof *held);
  CHECK(streams && held);
  for (int round = 0; round < 3; round++) {
    for (int s = 0; s < stream_count; s++) {
      if (round == 0)
        CHECK_OK(gpumem_stream_create(0, &streams[s]));
      size_t bytes = 1000 + (size_t)s * 64;
      CHECK_OK(gpumem_allocate(mr, bytes, streams[s], &held[s]));
      CHECK_OK(gpumem_memset_async(held[s], s & 0xff, bytes, streams[s]));
    }
    /* Each freed on the next stream: a free names the stream after whose work so far the
     * block may be reused, so the work that used it on its own stream is waited for first
     * (a pool gives an idle stream's free blocks to any other stream). */
    for (int s = 0; s < stream_count; s++) {
      CHECK_OK(gpumem_stream_synchronize(streams[s]));
      CHECK_OK(
          gpumem_deallocate(mr, held[s], 1000 + (size_t)s * 64, streams[(s + 1) % stream_count]));
    }
  }
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_FREE_BYTES),
               check_query(mr, GPUMEM_QUERY_RESERVED_BYTES));
  CHECK_NO_HAZARD("tests/gpu/stream_order.cu checks reuse across streams with kernels");
  for (int s = 0; s < stream_count; s++) {
    CHECK_OK(gpumem_stream_synchronize(streams[s]));
    CHECK_OK(gpumem_stream_destroy(streams[s]));
  }
  free(streams);
  free(held);
  CHECK_OK(gpumem_resource_release(mr));
  printf("%-34s %d streams passed\n", spec, stream_count);
}

int main(void) {
  check_init_backend();
  static const struct {
    const char *spec;
    int streams, trim_every;
  } model_runs[] = {
      {"pool(cuda, initial=32MiB)", 1, 0},
      {"pool(cuda, initial=1)", 1, 0},
      {"pool(vmm)", 1, 0},
      {"pool(async)", 1, 0},
      {"arena(cuda, size=32MiB)", 1, 0},
      {"arena(vmm, superblock=1MiB)", 1, 0},
      {"pool(cuda, initial=32MiB)", 3, 0},
      {"pool(vmm)", 3, 0},
      {"arena(vmm, superblock=1MiB)", 3, 0},
      {"pool(vmm(piece=2MiB))", 1, 1999},
      {"pool(vmm(piece=2MiB))", 3, 2999},
      {"pool(cuda, initial=1)", 3, 2999},
  };
  for (size_t i = 0; i < sizeof model_runs / sizeof model_runs[0]; i++)
    test_model(model_runs[i].spec, model_runs[i].streams, model_runs[i].trim_every);
  test_cache();
  test_cached_slots_leave_on_a_new_stream();
  test_growth_in_place();
  test_growth_in_place_after_trims();
  test_growth_wraps_to_the_lowest_room();
  test_maximum();
  test_trim();
  test_trim_pieces();
  test_trim_large_pieces();
  test_trim_before_failing();
  test_cross_stream();
  test_cross_stream_at_limit();
  test_side_stream_leaves_large_memory();
  test_open_free_merges_sealed_neighbours();
  test_idle_stream_gives_its_blocks();
  test_second_stream_takes_first_streams_frees();
  test_stolen_blocks_are_sealed();
  test_idle_take_drops_emptied_set();
  test_streams_do_not_wait_once_warm();
  test_per_thread_stream_keeps_its_blocks();
  test_free_merges_each_way();
  test_large_unseal_seals_at_once();
  test_large_frees_seal_for_large_askers();
  test_stream_caches();
  test_growth_extends_sealed_tail();
  test_last_block_kept_for_growth();
  test_large_request_takes_the_sliver(false);
  test_large_request_takes_the_sliver(true);
  test_large_blocks_keep_their_places(false);
  test_large_blocks_keep_their_places(true);
  test_release_holes();
  test_release_holes_while_climbing();
  test_release_holes_after_descent();
  test_small_request_between_passes();
  test_release_holes_waits_and_fails_safe();
  test_release_holes_of_several_streams();
  test_climbing_loop_stays_in_its_range();
  test_threads("pool(cuda, initial=64MiB)");
  test_threads("pool(vmm)");
  test_threads("arena(cuda, size=64MiB)");
  test_threads("arena(vmm)");
  test_threads("limit(pool(vmm), max=4GiB)");
  test_threads("limit(arena(vmm), max=4GiB)");
  test_threads("pool(limit(vmm, max=4GiB))");
  test_front_gives_back("pool(limit(vmm, max=2MiB))", true);
  test_front_gives_back("pool(limit(vmm, max=2MiB))", false);
  test_fronts_when_threads_meet();
  test_long_turns_bias_again();
  test_front_refill_spares_its_own();
  test_front_refill_takes_a_run();
  test_front_holds_at_most();
  test_front_keeps_reserve();
  if (check_on_sim()) /* it counts the device's calls */
    test_front_working_reserve();
  else
    printf("pool(vmm) with fronts: the working reserve's check counts the simulated device's "
           "calls: not run on a GPU\n");
  test_front_queries_and_trim();
  test_front_block_highest_after_trims();
  test_front_returns();
  test_fronts_reached_into();
  test_fronts_crowd();
  test_fronts_double_free_race();
  test_front_free_waits_for_map_writer();
  test_many_streams("pool(cuda, initial=16MiB)", 100);
  test_many_streams("arena(cuda, size=16MiB, superblock=1MiB)", 300);
  test_default_streams_of_another_device();
  test_arena_query_while_growing();
  test_arena_failed_release();
  return 0;
}
