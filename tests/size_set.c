/* size_set.c: the exact set of sizes a pool keeps of the large requests it served
 * (core/size_set.h).
 *
 * - An empty set holds nothing and has no table; the first size makes it.
 * - A size is held exactly: its neighbours one unit (256 bytes) away are not; adding it again
 *   changes nothing. Sizes the set cannot hold (not whole units, a TiB and more, 0) are
 *   neither added nor found.
 * - Sizes that come with sizes held (a loop whose shapes vary) are all found again as the
 *   table doubles, up to the most it holds; past that the set is full: it keeps them and
 *   adds no more.
 * - Once the set holds 2,048 sizes (never before), a window of requests more than half of
 *   which were new sizes (a random workload) closes the set for good: it holds nothing, frees
 *   its table, and adds nothing more; half is not more than half.
 * - Against a plain list over random sizes, the set answers as the list does.
 * - The check of its structure passes every state above, and finds a wrong count, a size out
 *   of its probe run, a closed set that kept its table and a full set short of the most. */
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

/* Each new size comes with two held ones: a third of the requests are new, as in no real
 * trace's window (at most a fifth). */
static void add_with_held(gpumem__size_set *set, size_t size) {
  gpumem__size_set_add(set, size);
  gpumem__size_set_add(set, 1 << 20);
  gpumem__size_set_add(set, 1 << 20);
}

static size_t nth_size(size_t i) {
  return ((size_t)2 << 20) + i * unit;
}

static void test_grows_then_full(void) {
  gpumem__size_set set = {0};
  add_with_held(&set, 1 << 20);
  for (size_t i = 0; set.count < GPUMEM__SIZE_SET_MOST; i++) {
    add_with_held(&set, nth_size(i));
    if (set.count == 2049) /* past half the first table: it doubled */
      CHECK_EQ(set.slots_log2, GPUMEM__SIZE_SET_FIRST_LOG2 + 1);
  }
  CHECK(!set.closed && !set.full);
  CHECK_EQ(set.slots_log2, GPUMEM__SIZE_SET_MOST_LOG2);
  for (size_t i = 0; i + 1 < GPUMEM__SIZE_SET_MOST; i++)
    CHECK(gpumem__size_set_contains(&set, nth_size(i)));
  size_t next = nth_size(GPUMEM__SIZE_SET_MOST - 1); /* a new one past the most */
  add_with_held(&set, next);
  CHECK(set.full && !set.closed && !gpumem__size_set_adds(&set));
  CHECK_EQ(set.count, GPUMEM__SIZE_SET_MOST);
  CHECK(!gpumem__size_set_contains(&set, next));
  CHECK(gpumem__size_set_contains(&set, 1 << 20) && gpumem__size_set_contains(&set, nth_size(0)));
  gpumem__size_set_close(&set);
  CHECK(set.closed && set.slots == NULL && !set.full);
  printf("%zu sizes found as the table doubled, then full: kept, no more added\n",
         (size_t)GPUMEM__SIZE_SET_MOST);
}

/* A set holding GPUMEM__SIZE_SET_JUDGED_FROM sizes, all of them new when added (no window
 * is judged before), its window just begun. */
static gpumem__size_set set_judged_from_now(void) {
  gpumem__size_set set = {0};
  for (size_t i = 0; i < GPUMEM__SIZE_SET_JUDGED_FROM; i++)
    gpumem__size_set_add(&set, nth_size(i));
  CHECK(!set.closed);
  CHECK_EQ(set.count, GPUMEM__SIZE_SET_JUDGED_FROM);
  set.window_requests = set.window_new = 0;
  return set;
}

static void test_closes_on_new_sizes(void) {
  /* Every request a new size: the first new size once the window is full closes the set. */
  gpumem__size_set set = set_judged_from_now();
  size_t next = GPUMEM__SIZE_SET_JUDGED_FROM;
  for (size_t i = 0; i + 1 < GPUMEM__SIZE_SET_WINDOW; i++)
    gpumem__size_set_add(&set, nth_size(next++));
  CHECK(!set.closed);
  gpumem__size_set_add(&set, nth_size(0)); /* the window's last, held: no judgment */
  CHECK(!set.closed);
  gpumem__size_set_add(&set, nth_size(next++));
  CHECK(set.closed && set.slots == NULL && set.count == 0);
  CHECK(!gpumem__size_set_contains(&set, nth_size(0)));
  gpumem__size_set_add(&set, nth_size(0));
  CHECK(set.closed && set.slots == NULL && !gpumem__size_set_contains(&set, nth_size(0)));
  gpumem__size_set_close(&set); /* closing again changes nothing */
  CHECK(set.closed && set.slots == NULL);

  /* Half new (512 of 1,024, the last new): the window passes, and the next begins. */
  set = set_judged_from_now();
  next = GPUMEM__SIZE_SET_JUDGED_FROM;
  for (size_t i = 0; i + 1 < GPUMEM__SIZE_SET_WINDOW / 2; i++) {
    gpumem__size_set_add(&set, nth_size(next++));
    gpumem__size_set_add(&set, nth_size(0));
  }
  gpumem__size_set_add(&set, nth_size(0));
  gpumem__size_set_add(&set, nth_size(next++));
  CHECK(!set.closed);
  CHECK_EQ(set.window_requests, 0);
  CHECK_EQ(set.count, GPUMEM__SIZE_SET_JUDGED_FROM + GPUMEM__SIZE_SET_WINDOW / 2);
  gpumem__size_set_close(&set);

  /* Before it holds that many, a window of new sizes is not judged. */
  set = (gpumem__size_set){0};
  for (size_t i = 0; i + 1 < GPUMEM__SIZE_SET_JUDGED_FROM; i++)
    gpumem__size_set_add(&set, nth_size(i));
  CHECK(!set.closed);
  CHECK_EQ(set.count, GPUMEM__SIZE_SET_JUDGED_FROM - 1);
  gpumem__size_set_close(&set);

  gpumem__size_set never_used = {0}; /* a set closed before its first size */
  gpumem__size_set_close(&never_used);
  gpumem__size_set_add(&never_used, 1 << 20);
  CHECK(never_used.slots == NULL && !gpumem__size_set_contains(&never_used, 1 << 20));
  printf("a window of new sizes closes a set of 2,048; half new does not, nor before 2,048\n");
}

/* Random sizes from a small range (so that many repeat), against a list of those added. */
static void test_random(void) {
  enum { tries = 20000, range = 400 };
  static bool added[range];
  gpumem__size_set set = {0};
  uint64_t x = 0x9E3779B97F4A7C15ull;
  size_t distinct = 0;
  for (int t = 0; t < tries; t++) {
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
  CHECK(!set.closed); /* the first window's new sizes are under half of it */
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
  size_t mask = gpumem__size_set_slots(&set) - 1;
  size_t at = gpumem__size_set_home(units, set.slots_log2), far = at;
  while (set.slots[at] != units)
    at = (at + 1) & mask;
  while (set.slots[far])
    far = (far + 1) & mask;
  set.slots[far] = units;
  set.slots[at] = 0;
  check_unsound(&set, "out of its probe run");
  set.slots[at] = units;
  set.slots[far] = 0;
  check_sound(&set);
  set.full = true;
  check_unsound(&set, "counts 100, its table holds 100 (at most 2048, full)");
  set.full = false;
  set.closed = true;
  check_unsound(&set, "a closed set of sizes keeps its table");
  set.closed = false;
  gpumem__size_set_close(&set);
  check_sound(&set);
  gpumem__size_set tableless = {.full = true};
  check_unsound(&tableless, "a tableless set of sizes is full");
  printf("the check finds a wrong count, a size out of place, a closed set with a table, a "
         "full set short of the most\n");
}

int main(void) {
  test_exact();
  test_check();
  test_grows_then_full();
  test_closes_on_new_sizes();
  test_random();
  return 0;
}
