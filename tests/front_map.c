/* front_map.c: the map of a pool's thread front (suballoc/front_map.h), read without a lock.
 *
 * - Blocks inserted are found at their addresses, absent ones are not, taken ones no more;
 *   the map grows past its room and keeps every block; the check passes each state.
 * - A reader that meets a writer mid-change (the sequence number odd) waits for it: past
 *   its spins it yields, and once the writer ends it finds the block. A reading taken
 *   during a change counts for nothing.
 * - A reader looking up blocks that stay in the map finds each of them every time while a
 *   writer inserts and takes others around them, across growths of the table. */
#include "check.h"
#include "suballoc/front_map.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { stable_blocks = 64, churn_blocks = 4096 };

static gpumem__block *new_block(uintptr_t addr) {
  gpumem__block *block = calloc(1, sizeof *block);
  CHECK(block != NULL);
  block->addr = addr;
  block->size = 256;
  return block;
}

static uintptr_t stable_addr(size_t i) {
  return ((uintptr_t)1 << 32) + i * 4096;
}

static uintptr_t churn_addr(size_t i) {
  return ((uintptr_t)1 << 36) + i * 512;
}

static bool count_block(gpumem__block *block, void *user) {
  (void)block;
  (*(size_t *)user)++;
  return true;
}

static void check_map(const front_map *map, size_t expected) {
  char why[256];
  size_t seen = 0;
  CHECK(gpumem__front_map_check(map, count_block, &seen, why, sizeof why));
  CHECK_EQ(seen, expected);
}

static void test_basics(void) {
  front_map map = {0};
  CHECK(gpumem__front_map_lookup(&map, stable_addr(0)) == NULL); /* not made yet */
  CHECK(gpumem__front_map_init(&map));
  gpumem__block *blocks[stable_blocks * 8];
  size_t n = sizeof blocks / sizeof blocks[0];
  for (size_t i = 0; i < n; i++) {
    blocks[i] = new_block(stable_addr(i));
    CHECK(gpumem__front_map_insert(&map, blocks[i]));
  }
  check_map(&map, n);
  for (size_t i = 0; i < n; i++)
    CHECK(gpumem__front_map_lookup(&map, stable_addr(i)) == blocks[i]);
  CHECK(gpumem__front_map_lookup(&map, stable_addr(n)) == NULL);
  CHECK(gpumem__front_map_lookup(&map, stable_addr(0) + 256) == NULL);
  for (size_t i = 0; i < n; i += 2)
    CHECK(gpumem__front_map_take(&map, stable_addr(i)) == blocks[i]);
  CHECK(gpumem__front_map_take(&map, stable_addr(0)) == NULL);
  check_map(&map, n / 2);
  for (size_t i = 0; i < n; i++)
    CHECK(gpumem__front_map_lookup(&map, stable_addr(i)) == (i % 2 ? blocks[i] : NULL));
  gpumem__front_map_destroy(&map);
  for (size_t i = 0; i < n; i++)
    free(blocks[i]);
  printf("insert, lookup, take, growth: every block where it was put\n");
}

/* ---- a reader that meets a writer ---- */

typedef struct lookup_call {
  front_map *map;
  uintptr_t addr;
  gpumem__block *found;
  atomic_bool started, done;
} lookup_call;

static void *look_up(void *arg) {
  lookup_call *call = arg;
  atomic_store(&call->started, true);
  call->found = gpumem__front_map_lookup(call->map, call->addr);
  atomic_store(&call->done, true);
  return NULL;
}

static void test_reader_waits_for_writer(void) {
  front_map map = {0};
  CHECK(gpumem__front_map_init(&map));
  gpumem__block *block = new_block(stable_addr(1));
  CHECK(gpumem__front_map_insert(&map, block));
  /* A change in progress: the reader spins, then yields, until it ends. */
  gpumem__front_map_write_begin(&map);
  lookup_call call = {.map = &map, .addr = stable_addr(1)};
  pthread_t reader;
  CHECK_EQ(pthread_create(&reader, NULL, look_up, &call), 0);
  while (!atomic_load(&call.started))
    sched_yield();
  usleep(20 * 1000); /* far past its spins */
  CHECK(!atomic_load(&call.done));
  gpumem__front_map_write_end(&map);
  CHECK_EQ(pthread_join(reader, NULL), 0);
  CHECK(call.found == block);
  /* A reading taken during a change counts for nothing; the change moves the number on by
   * two. */
  gpumem__block *found = block;
  unsigned before = atomic_load(&map.seq);
  CHECK(gpumem__front_map_read(&map, stable_addr(1), &found) && found == block);
  gpumem__front_map_write_begin(&map);
  CHECK(!gpumem__front_map_read(&map, stable_addr(1), &found));
  gpumem__front_map_write_end(&map);
  CHECK_EQ(atomic_load(&map.seq), before + 2);
  gpumem__front_map_destroy(&map);
  free(block);
  printf("a reader meeting a writer mid-change waits for it, then finds the block\n");
}

/* ---- a reader beside a writer that keeps changing the map ---- */

typedef struct churn {
  front_map *map;
  gpumem__block **stable;
  atomic_bool stop;
  _Atomic uint64_t lookups;
  uint64_t wrong;
} churn;

static void *read_stable(void *arg) {
  churn *c = arg;
  while (!atomic_load_explicit(&c->stop, memory_order_relaxed)) {
    for (size_t i = 0; i < stable_blocks; i++) {
      if (gpumem__front_map_lookup(c->map, stable_addr(i)) != c->stable[i])
        c->wrong++;
      atomic_fetch_add_explicit(&c->lookups, 1, memory_order_relaxed);
    }
  }
  return NULL;
}

static void test_reader_beside_writer(void) {
  front_map map = {0};
  CHECK(gpumem__front_map_init(&map));
  gpumem__block *stable[stable_blocks];
  for (size_t i = 0; i < stable_blocks; i++) {
    stable[i] = new_block(stable_addr(i));
    CHECK(gpumem__front_map_insert(&map, stable[i]));
  }
  gpumem__block **churned = calloc(churn_blocks, sizeof *churned);
  CHECK(churned != NULL);
  for (size_t i = 0; i < churn_blocks; i++)
    churned[i] = new_block(churn_addr(i));
  churn c = {.map = &map, .stable = stable};
  pthread_t reader;
  CHECK_EQ(pthread_create(&reader, NULL, read_stable, &c), 0);
  /* Rounds of inserting every churned block (growing the table in the first) and taking
   * them again, the writer's sequence odd throughout each change; at least 20, and on until
   * the reader has looked up its blocks a thousand times over. */
  while (atomic_load(&c.lookups) == 0)
    sched_yield();
  for (int round = 0; round < 20 || atomic_load(&c.lookups) < 1000 * stable_blocks; round++) {
    for (size_t i = 0; i < churn_blocks; i++)
      CHECK(gpumem__front_map_insert(&map, churned[i]));
    for (size_t i = 0; i < churn_blocks; i++)
      CHECK(gpumem__front_map_take(&map, churn_addr(i)) == churned[i]);
  }
  atomic_store(&c.stop, true);
  CHECK_EQ(pthread_join(reader, NULL), 0);
  CHECK_U64_EQ(c.wrong, 0);
  CHECK(atomic_load(&c.lookups) >= 1000 * stable_blocks);
  check_map(&map, stable_blocks);
  gpumem__front_map_destroy(&map);
  for (size_t i = 0; i < churn_blocks; i++)
    free(churned[i]);
  free(churned);
  for (size_t i = 0; i < stable_blocks; i++)
    free(stable[i]);
  printf("a reader beside a writer found its %d blocks every time (%llu lookups)\n", stable_blocks,
         (unsigned long long)atomic_load(&c.lookups));
}

int main(void) {
  test_basics();
  test_reader_waits_for_writer();
  test_reader_beside_writer();
  return 0;
}
