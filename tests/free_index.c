/* free_index.c: the suballocators' index of free blocks (suballoc/block.h) against a plain
 * list of the blocks it holds, in both of its forms.
 *
 * - Flat (up to GPUMEM__FLAT_MAX blocks): a search returns exactly the best fit, the
 *   smallest block that fits and the lowest of equals; NULL only when nothing fits.
 * - Classes (more blocks, or one too large for the flat arrays): a search returns a block
 *   that fits, and NULL only when no block of a larger class than the request's fits.
 * - The index turns to classes past GPUMEM__FLAT_MAX blocks and flat again only at an
 *   insertion once it holds fewer than GPUMEM__FLAT_LOW; counts, bytes and the largest
 *   block stay right through every change of form and size.
 * - Walking the index may remove each block as it goes, in both forms; a walk from a size
 *   on gives exactly the blocks of that size or more.
 * - The branch-free updates a merge makes in the flat arrays (gpumem__flat_remove_if,
 *   gpumem__flat_file_or_resize) do what removal, filing and resizing do when told to, and
 *   change nothing a search or a check sees when not: the spare place stays empty.
 * - All of it holds for both widths of the flat search (AVX2 and SSE2).
 * - The address map (gpumem__block_map) finds every block it holds; it is at most an eighth
 *   full up to GPUMEM__MAP_SPARSE_SLOTS slots and a quarter beyond, and takes its blocks out
 *   again to empty. */
#include "check.h"
#include "suballoc/block.h"

#define MAX_BLOCKS 512
#define UNIT GPUMEM__BLOCK_UNIT

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_random(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Sizes from a small set (so that equal sizes are common) or anywhere up to 64 MiB. */
static size_t random_size(void) {
  if (next_random() % 2)
    return (1 + next_random() % 8) * 16 * UNIT;
  return (1 + next_random() % (64u << 20) / UNIT) * UNIT;
}

typedef struct model {
  gpumem__free_index index;
  gpumem__block blocks[MAX_BLOCKS];
  bool in_index[MAX_BLOCKS];
  size_t count;
} model;

static void check_facts(const model *m) {
  size_t count = 0, bytes = 0, largest = 0;
  for (size_t i = 0; i < MAX_BLOCKS; i++) {
    if (!m->in_index[i])
      continue;
    count++;
    bytes += m->blocks[i].size;
    if (m->blocks[i].size > largest)
      largest = m->blocks[i].size;
  }
  CHECK_U64_EQ(m->index.block_count, count);
  CHECK_U64_EQ(m->index.total_bytes, bytes);
  CHECK_U64_EQ(gpumem__free_index_largest(&m->index), largest);
  if (count > GPUMEM__FLAT_MAX)
    CHECK(!m->index.flat);
}

/* Looks for `size` bytes and checks the answer against the list. */
static void check_find(const model *m, size_t size) {
  const gpumem__block *best = NULL;
  size_t fitting_larger_class = 0;
  for (size_t i = 0; i < MAX_BLOCKS; i++) {
    const gpumem__block *b = &m->blocks[i];
    if (!m->in_index[i] || b->size < size)
      continue;
    if (!best || b->size < best->size || (b->size == best->size && b->addr < best->addr))
      best = b;
    /* A block at least 1/16 larger (and so of a larger class) can always be found. */
    if (b->size - size >= size / 16 + UNIT)
      fitting_larger_class++;
  }
  const gpumem__block *found = gpumem__free_index_find(&m->index, size);
  if (m->index.flat) {
    CHECK_PTR_EQ(found, best);
    return;
  }
  if (found) {
    CHECK(found->size >= size);
    size_t at = (size_t)(found - m->blocks);
    CHECK(at < MAX_BLOCKS && m->in_index[at]);
  } else {
    CHECK_U64_EQ(fitting_larger_class, 0);
  }
}

static void insert(model *m, size_t at, size_t size) {
  m->blocks[at].size = size;
  m->blocks[at].addr = (uintptr_t)(at + 1) << 30;
  gpumem__free_index_insert(&m->index, &m->blocks[at]);
  m->in_index[at] = true;
  m->count++;
}

static void remove_block(model *m, size_t at) {
  gpumem__free_index_remove(&m->index, &m->blocks[at]);
  m->in_index[at] = false;
  m->count--;
}

/* Random insertions, removals and size changes around a target count of blocks, which
 * crosses the limits of the flat form both ways. */
static void test_random(void) {
  static model m;
  memset(&m, 0, sizeof m);
  gpumem__free_index_init(&m.index);
  static const size_t targets[] = {8, 40, 70, 300, 20, 10, 64, 100, 3, 0};
  int forms_seen[2] = {0, 0};
  for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
    for (int step = 0; step < 3000; step++) {
      /* Mostly toward the target, sometimes away from it; a third of the steps resize. */
      bool grow = m.count < targets[t] ? next_random() % 4 != 0 : next_random() % 4 == 0;
      size_t at = next_random() % MAX_BLOCKS;
      if (next_random() % 3 == 0 && m.count > 0) {
        while (!m.in_index[at])
          at = (at + 1) % MAX_BLOCKS;
        size_t old = m.blocks[at].size; /* a split or a merge: the size changes in place */
        m.blocks[at].size = random_size();
        gpumem__free_index_resized(&m.index, &m.blocks[at], old);
      } else if (grow && m.count < MAX_BLOCKS) {
        while (m.in_index[at])
          at = (at + 1) % MAX_BLOCKS;
        insert(&m, at, random_size());
      } else if (m.count > 0) {
        while (!m.in_index[at])
          at = (at + 1) % MAX_BLOCKS;
        remove_block(&m, at);
      }
      forms_seen[m.index.flat]++;
      check_facts(&m);
      check_find(&m, random_size());
    }
  }
  CHECK(forms_seen[0] > 0 && forms_seen[1] > 0);
  printf("random against the list passed (%d steps flat, %d in classes)\n", forms_seen[1],
         forms_seen[0]);
}

/* Checks the index's own structure as the validator does. */
static void check_structure(const model *m) {
  char why[256] = "";
  if (!gpumem__free_index_check(&m->index, NULL, NULL, why, sizeof why))
    CHECK_FAIL_("free index check: %s", why);
}

/* The branch-free updates, told to act and told not to, at random in the flat form: the
 * model follows only the acts. */
static void test_branch_free_updates(void) {
  static model m;
  memset(&m, 0, sizeof m);
  gpumem__free_index_init(&m.index);
  size_t acted[3] = {0, 0, 0}; /* removals, filings, resizes */
  for (int step = 0; step < 20000; step++) {
    size_t at = next_random() % MAX_BLOCKS;
    bool act = next_random() % 2;
    switch (next_random() % 3) {
    case 0: /* removal of a block in the index, or a no-op on any block */
      if (act && m.count == 0)
        act = false;
      while (act && !m.in_index[at])
        at = (at + 1) % MAX_BLOCKS;
      gpumem__flat_remove_if(&m.index, &m.blocks[at], act);
      if (act) {
        m.in_index[at] = false;
        m.count--;
      }
      acted[0] += act;
      break;
    case 1: /* filing a block not in the index, where there is room */
      if (m.count >= GPUMEM__FLAT_MAX)
        break;
      while (m.in_index[at])
        at = (at + 1) % MAX_BLOCKS;
      m.blocks[at].size = random_size();
      m.blocks[at].addr = (uintptr_t)(at + 1) << 30;
      gpumem__flat_file_or_resize(&m.index, &m.blocks[at], true, 0);
      m.in_index[at] = true;
      m.count++;
      acted[1]++;
      break;
    default: /* a merge's new size for a block in the index */
      if (m.count == 0)
        break;
      while (!m.in_index[at])
        at = (at + 1) % MAX_BLOCKS;
      size_t old = m.blocks[at].size;
      m.blocks[at].size = random_size();
      gpumem__flat_file_or_resize(&m.index, &m.blocks[at], false, old);
      acted[2]++;
    }
    CHECK(m.index.flat);
    CHECK(!m.index.flat_blocks[GPUMEM__FLAT_SPARE] && !m.index.flat_units[GPUMEM__FLAT_SPARE]);
    check_facts(&m);
    check_structure(&m);
    check_find(&m, random_size());
  }
  CHECK(acted[0] > 1000 && acted[1] > 1000 && acted[2] > 1000);
  printf("branch-free flat updates against the list passed (%zu removals, %zu filings, %zu "
         "resizes)\n",
         acted[0], acted[1], acted[2]);
}

/* The forms change only at the limits. */
static void test_forms(void) {
  static model m;
  memset(&m, 0, sizeof m);
  gpumem__free_index_init(&m.index);
  for (size_t i = 0; i < GPUMEM__FLAT_MAX; i++)
    insert(&m, i, (i + 1) * UNIT);
  CHECK(m.index.flat);
  insert(&m, GPUMEM__FLAT_MAX, 7 * UNIT);
  CHECK(!m.index.flat);
  check_facts(&m);
  /* Removed down to the low mark, still classes; the next insertion turns it flat. */
  for (size_t i = 0; m.count > GPUMEM__FLAT_LOW - 1; i++)
    remove_block(&m, i);
  CHECK(!m.index.flat);
  insert(&m, 0, 3 * UNIT);
  CHECK(m.index.flat);
  check_facts(&m);
  check_find(&m, 3 * UNIT);
  check_find(&m, 8 * UNIT);

  /* A block too large for the flat arrays (more than 2^32 units) turns the index to
   * classes, and keeps it there; a request that large finds it. */
  size_t huge = ((size_t)1 << 32) * UNIT + UNIT;
  insert(&m, 200, huge);
  CHECK(!m.index.flat);
  CHECK_PTR_EQ(gpumem__free_index_find(&m.index, huge), &m.blocks[200]);
  remove_block(&m, GPUMEM__FLAT_MAX);
  insert(&m, GPUMEM__FLAT_MAX, UNIT);
  CHECK(!m.index.flat);
  check_facts(&m);
  /* A flat block that grows past the arrays' limit moves the index to the classes. */
  memset(&m, 0, sizeof m);
  gpumem__free_index_init(&m.index);
  insert(&m, 200, UNIT);
  insert(&m, 201, UNIT);
  CHECK(m.index.flat);
  m.blocks[201].size = huge;
  gpumem__free_index_resized(&m.index, &m.blocks[201], UNIT);
  CHECK(!m.index.flat);
  check_facts(&m);
  CHECK_PTR_EQ(gpumem__free_index_find(&m.index, huge), &m.blocks[201]);
  printf("forms passed\n");
}

static void remove_visited(gpumem__block *block, void *user) {
  model *m = user;
  remove_block(m, (size_t)(block - m->blocks));
}

static void count_visited(gpumem__block *block, void *user) {
  (void)block;
  (*(size_t *)user)++;
}

typedef struct least_count {
  size_t least, *visited;
} least_count;

/* Counts a block given to a walk from a size on, which must be of that size or more. */
static void count_large_visited(gpumem__block *block, void *user) {
  least_count *count = user;
  CHECK(block->size >= count->least);
  (*count->visited)++;
}

/* A walk that removes every block it is given empties the index, in both forms; a walk
 * from a size on gives every block of that size or more, and no other. */
static void test_walk(void) {
  static const size_t counts[] = {5, GPUMEM__FLAT_MAX, 200};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    static model m;
    memset(&m, 0, sizeof m);
    gpumem__free_index_init(&m.index);
    for (size_t i = 0; i < counts[c]; i++)
      insert(&m, i, random_size());
    size_t visited = 0;
    gpumem__free_index_each(&m.index, count_visited, &visited);
    CHECK_U64_EQ(visited, counts[c]);
    /* From a size on: exactly the blocks of that size or more, for sizes at a class's
     * start and inside one. */
    static const size_t leasts[] = {2 << 20, (3 << 20) + 5 * UNIT, 32 << 20};
    for (size_t l = 0; l < sizeof leasts / sizeof leasts[0]; l++) {
      size_t large = 0;
      for (size_t i = 0; i < counts[c]; i++)
        large += m.blocks[i].size >= leasts[l];
      visited = 0;
      gpumem__free_index_each_from(&m.index, leasts[l], count_large_visited,
                                   &(least_count){leasts[l], &visited});
      CHECK_U64_EQ(visited, large);
    }
    gpumem__free_index_each(&m.index, remove_visited, &m);
    CHECK_U64_EQ(m.count, 0);
    check_facts(&m);
    CHECK_PTR_EQ(gpumem__free_index_find(&m.index, UNIT), NULL);
  }
  printf("walks passed\n");
}

/* Blocks 256 bytes apart, as a pool's smallest are, past the sparse limit and back. */
static void test_address_map(void) {
  enum { count = 40000 };
  static gpumem__block blocks[count];
  gpumem__block_map map;
  CHECK(gpumem__block_map_init(&map));
  for (size_t i = 0; i < count; i++) {
    blocks[i].addr = 0x7f0000000000ull + i * UNIT;
    CHECK(gpumem__block_map_insert(&map, &blocks[i]));
    size_t sparseness = map.capacity <= GPUMEM__MAP_SPARSE_SLOTS ? 8 : 4;
    CHECK(map.count * sparseness <= map.capacity);
    /* It grew only when it had to (the initial 1,024 slots aside). */
    CHECK(map.capacity <= 1024 || map.count * sparseness > map.capacity / 4);
  }
  CHECK_U64_EQ(map.capacity, (uint64_t)1 << 18); /* 40,000 blocks: a quarter of 2^18 */
  for (size_t i = 0; i < count; i += 7)
    CHECK(gpumem__block_map_take(&map, blocks[i].addr) == &blocks[i]);
  for (size_t i = 0; i < count; i++)
    if (i % 7 != 0)
      CHECK(gpumem__block_map_take(&map, blocks[i].addr) == &blocks[i]);
  CHECK_U64_EQ(map.count, 0);
  CHECK(gpumem__block_map_take(&map, blocks[0].addr) == NULL);
  gpumem__block_map_destroy(&map);
  printf("address map: sparse, then a quarter full past %zu slots, passed\n",
         (size_t)GPUMEM__MAP_SPARSE_SLOTS);
}

int main(void) {
  test_address_map();
  /* Twice where the processor has AVX2: the flat search has a form for it and one for
   * SSE2. */
  for (int narrow = 0; narrow < 2; narrow++) {
    gpumem__flat_scan_narrow = narrow;
    test_forms();
    test_walk();
    test_random();
    test_branch_free_updates();
  }
  return 0;
}
