/* size_set.c: the exact set of sizes a pool keeps of the large requests it served
 * (core/size_set.h).
 *
 * - An empty set holds nothing and has no table; the first size makes it.
 * - A size is held exactly: its neighbours one unit (256 bytes) away are not; adding it again
 *   changes nothing. Sizes the set cannot hold (not whole units, a TiB and more, 0) are
 *   neither added nor found.
 * - Every size added is found again, across probe runs that meet, up to the most it holds;
 *   a size it holds can still be added then (a loop's sizes keep coming) without closing it.
 * - A new size past the most closes the set for good: it holds nothing, frees its table, and
 *   adds nothing more.
 * - Against a plain list over random sizes, the set answers as the list does.
 * - The check of its structure passes every state above, and finds a wrong count, a size out
 *   of its probe run, and a closed set that kept its table. */
#include "check.h"
#include "core/size_set.h"

enum { unit = 256 };

static void test_exact(void) {
  gpumem__size_set set = {0};
  CHECK(!gpumem__size_set_contains(&set, 1 << 20));
  CHECK(set.slots == NULL);
  gpumem__size_set_add(&set, 1 << 20);
  CHECK(set.slots != NULL);
  CHECK_EQ(set.count, 1);
  CHECK(gpumem__size_set_contains(&set, 1 << 20));
  CHECK(!gpumem__size_set_contains(&set, (1 << 20) + unit));
  CHECK(!gpumem__size_set_contains(&set, (1 << 20) - unit));
  gpumem__size_set_add(&set, 1 << 20);
  CHECK_EQ(set.count, 1);
  static const size_t unheld[] = {0, (1 << 20) + 1, (size_t)1 << 40, ((size_t)1 << 40) + unit};
  for (size_t i = 0; i < sizeof unheld / sizeof unheld[0]; i++) {
    gpumem__size_set_add(&set, unheld[i]);
    CHECK(!gpumem__size_set_contains(&set, unheld[i]));
  }
  CHECK(!gpumem__size_set_contains(&set, ((size_t)1 << 40) - unit));
  gpumem__size_set_add(&set, ((size_t)1 << 40) - unit); /* the largest it holds */
  CHECK(gpumem__size_set_contains(&set, ((size_t)1 << 40) - unit));
  CHECK_EQ(set.count, 2);
  gpumem__size_set_close(&set);
  CHECK(set.closed && set.slots == NULL && set.count == 0);
  printf("sizes held exactly, the ones it cannot hold refused\n");
}

static void test_most_then_closed(void) {
  gpumem__size_set set = {0};
  /* Filled to the most, half its slots: many probe runs meet, and every size is found. */
  for (size_t i = 0; i < GPUMEM__SIZE_SET_MOST; i++)
    gpumem__size_set_add(&set, ((size_t)1 << 20) + i * unit * GPUMEM__SIZE_SET_SLOTS);
  CHECK_EQ(set.count, GPUMEM__SIZE_SET_MOST);
  for (size_t i = 0; i < GPUMEM__SIZE_SET_MOST; i++)
    CHECK(gpumem__size_set_contains(&set, ((size_t)1 << 20) + i * unit * GPUMEM__SIZE_SET_SLOTS));
  gpumem__size_set_add(&set, 1 << 20); /* held already: the set stays open */
  CHECK(!set.closed);
  CHECK_EQ(set.count, GPUMEM__SIZE_SET_MOST);
  gpumem__size_set_add(&set, (1 << 20) + unit); /* a new one past the most */
  CHECK(set.closed && set.slots == NULL && set.count == 0);
  CHECK(!gpumem__size_set_contains(&set, 1 << 20));
  gpumem__size_set_add(&set, 1 << 20);
  CHECK(set.closed && set.slots == NULL && !gpumem__size_set_contains(&set, 1 << 20));
  gpumem__size_set_close(&set); /* closing again changes nothing */
  CHECK(set.closed && set.slots == NULL);

  gpumem__size_set never_used = {0}; /* a set closed before its first size */
  gpumem__size_set_close(&never_used);
  gpumem__size_set_add(&never_used, 1 << 20);
  CHECK(never_used.slots == NULL && !gpumem__size_set_contains(&never_used, 1 << 20));
  printf("%zu sizes found across meeting probe runs, then closed at a new one\n",
         (size_t)GPUMEM__SIZE_SET_MOST);
}

/* Random sizes from a small range (so that many repeat), against a list of those added. */
static void test_random(void) {
  enum { tries = 20000, range = 3000 };
  static bool added[range];
  gpumem__size_set set = {0};
  uint64_t x = 0x9E3779B97F4A7C15ull;
  size_t distinct = 0;
  for (int t = 0; t < tries && distinct < GPUMEM__SIZE_SET_MOST; t++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t k = x % range, size = ((size_t)1 << 20) + k * unit;
    if (x >> 63) {
      distinct += !added[k];
      added[k] = true;
      gpumem__size_set_add(&set, size);
      CHECK_EQ(set.count, distinct);
    }
    CHECK(gpumem__size_set_contains(&set, size) == added[k]);
  }
  gpumem__size_set_close(&set);
  printf("random sizes: %zu distinct, answered as a list does\n", distinct);
}

static void check_sound(const gpumem__size_set *set) {
  char why[256] = "";
  if (!gpumem__size_set_check(set, why, sizeof why))
    CHECK_FAIL_("a sound set of sizes failed its check: %s", why);
}

static void check_unsound(const gpumem__size_set *set, const char *needle) {
  char why[256] = "";
  CHECK(!gpumem__size_set_check(set, why, sizeof why));
  CHECK_CONTAINS(why, needle);
}

static void test_check(void) {
  gpumem__size_set set = {0};
  check_sound(&set);
  for (size_t i = 0; i < 100; i++)
    gpumem__size_set_add(&set, ((size_t)1 << 20) + i * unit);
  check_sound(&set);
  set.count++;
  check_unsound(&set, "counts 101, its table holds 100");
  set.count--;
  /* A size moved to an empty slot elsewhere: the probe from its home stops at the slot it
   * left, empty now (every slot from its home to there was full when it went in). */
  uint32_t units = (uint32_t)(((size_t)1 << 20) >> GPUMEM__SIZE_SET_UNIT_SHIFT);
  size_t at = gpumem__size_set_home(units), far = at;
  while (set.slots[at] != units)
    at = (at + 1) % GPUMEM__SIZE_SET_SLOTS;
  while (set.slots[far])
    far = (far + 1) % GPUMEM__SIZE_SET_SLOTS;
  set.slots[far] = units;
  set.slots[at] = 0;
  check_unsound(&set, "out of its probe run");
  set.slots[at] = units;
  set.slots[far] = 0;
  check_sound(&set);
  set.closed = true;
  check_unsound(&set, "a closed set of sizes keeps its table");
  set.closed = false;
  gpumem__size_set_close(&set);
  check_sound(&set);
  printf("the check finds a wrong count, a size out of place, a closed set with a table\n");
}

int main(void) {
  test_exact();
  test_check();
  test_most_then_closed();
  test_random();
  return 0;
}
