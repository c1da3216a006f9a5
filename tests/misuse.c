/* misuse.c: the suballocators keep their promises when a program gets something wrong or
 * runs them dry, on a small simulated device (64 MiB), so that running out is quick.
 *
 * - A free with a wrong size is refused (GPUMEM_ERR_MISUSE, a message) and changes nothing,
 *   in the arena and in binning: in particular a small block freed with the size of a
 *   superblock or of a bin's chunk does not give that superblock or chunk back while its
 *   blocks are live (the next large allocation would overlap them).
 * - The arena serves a large request after small ones filled the device and were freed: the
 *   streams' pools give back their free superblocks.
 * - Binning gives its bins' free chunks back to the upstream before it runs out.
 * - gpumem_resource_trim trims pools, arenas, binning and fixed_size resources, and
 *   gpumem_pool_trim takes them too.
 * - A description is whole at every depth the spec grammar accepts; a buffer too small for
 *   it fails clearly and is left untouched; counts out of their parameter's range are bad
 *   values of the spec, with a caret. */
#include "check.h"
#include "gpumem/sim.h"

#include <string.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define DEVICE_MEMORY (64 * MiB)

/* Live and reserved bytes, to show that a refused call changed nothing. */
typedef struct figures {
  uint64_t live_bytes, live_count, reserved;
} figures;

static figures figures_of(gpumem_resource *mr) {
  return (figures){check_query(mr, GPUMEM_QUERY_LIVE_BYTES),
                   check_query(mr, GPUMEM_QUERY_LIVE_COUNT),
                   check_query(mr, GPUMEM_QUERY_RESERVED_BYTES)};
}

static void check_same(figures a, figures b) {
  CHECK_U64_EQ(a.live_bytes, b.live_bytes);
  CHECK_U64_EQ(a.live_count, b.live_count);
  CHECK_U64_EQ(a.reserved, b.reserved);
}

/* `bytes` at q and `size` at p do not overlap. */
static void check_apart(void *p, size_t size, void *q, size_t bytes) {
  uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
  CHECK(a + size <= b || b + bytes <= a);
}

/* Frees `ptr` with each wrong size in `sizes`: each is refused and changes nothing. */
static void check_wrong_sizes(gpumem_resource *mr, void *ptr, const size_t *sizes, int count) {
  for (int i = 0; i < count; i++) {
    figures before = figures_of(mr);
    CHECK_STATUS(gpumem_deallocate(mr, ptr, sizes[i], NULL), GPUMEM_ERR_MISUSE);
    CHECK(strlen(gpumem_last_error_message()) > 0);
    check_same(before, figures_of(mr));
  }
}

static void test_arena_wrong_size(void) {
  gpumem_resource *mr = check_build("arena(vmm)");
  void *p, *q, *large, *exact;
  CHECK_OK(gpumem_allocate(mr, 100, NULL, &p)); /* the first block of a superblock */
  figures before = figures_of(mr);
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 4 * MiB, NULL), GPUMEM_ERR_MISUSE,
                   "allocated with 100 bytes");
  check_same(before, figures_of(mr));
  const size_t wrong[] = {4 * MiB, 2 * MiB, 1 * MiB, 200, 8 * MiB};
  check_wrong_sizes(mr, p, wrong, 5);
  CHECK_OK(gpumem_allocate(mr, 4 * MiB, NULL, &q));
  check_apart(p, 100, q, 4 * MiB);

  /* Large blocks (the global pool's), one of exactly a superblock's size. */
  CHECK_OK(gpumem_allocate(mr, 2 * MiB, NULL, &large));
  const size_t wrong_large[] = {100, 4 * MiB, 2 * MiB + 256, 1 * MiB};
  check_wrong_sizes(mr, large, wrong_large, 4);
  const size_t wrong_exact[] = {100, 2 * MiB, 8 * MiB};
  check_wrong_sizes(mr, q, wrong_exact, 3);
  CHECK_OK(gpumem_allocate(mr, 4 * MiB, NULL, &exact));
  CHECK_OK(gpumem_deallocate(mr, exact, 4 * MiB, NULL)); /* the registry says: not a superblock */

  /* Pointers the arena never gave, with small and large sizes. */
  const size_t any[] = {100, 1 * MiB, 4 * MiB};
  check_wrong_sizes(mr, (char *)p + 256, any, 3);
  check_wrong_sizes(mr, (void *)(uintptr_t)0x1000, any, 3);

  /* Freed on another stream than the allocation's: found by its address. */
  gpumem_stream other;
  CHECK_OK(gpumem_stream_create(0, &other));
  void *r;
  CHECK_OK(gpumem_allocate(mr, 3000, other, &r));
  CHECK_OK(gpumem_deallocate(mr, r, 3000, NULL));
  CHECK_OK(gpumem_stream_synchronize(NULL));
  CHECK_OK(gpumem_stream_destroy(other));

  CHECK_OK(gpumem_deallocate(mr, p, 100, NULL));
  CHECK_OK(gpumem_deallocate(mr, q, 4 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, large, 2 * MiB, NULL));
  CHECK_STATUS(gpumem_deallocate(mr, p, 100, NULL), GPUMEM_ERR_MISUSE); /* twice */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(mr));
  printf("arena: wrong sizes refused\n");
}

static void test_binning_wrong_size(const char *spec) {
  gpumem_resource *mr = check_build(spec);
  void *p, *q, *direct;
  CHECK_OK(gpumem_allocate(mr, 29624, NULL, &p)); /* the first block of the 32 KiB bin */
  figures before = figures_of(mr);
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 2 * MiB, NULL), GPUMEM_ERR_MISUSE,
                   "no bin takes that size");
  check_same(before, figures_of(mr));
  const size_t wrong[] = {2 * MiB, 4 * MiB, 32 * KiB, 29624 + 256, 100, 1 * MiB};
  check_wrong_sizes(mr, p, wrong, 6);
  CHECK_OK(gpumem_allocate(mr, 2 * MiB, NULL, &q));
  check_apart(p, 29624, q, 2 * MiB);

  /* A request no bin takes, freed with other sizes. */
  CHECK_OK(gpumem_allocate(mr, 3 * MiB, NULL, &direct));
  CHECK_FAILS_WITH(gpumem_deallocate(mr, direct, 2 * MiB, NULL), GPUMEM_ERR_MISUSE,
                   "allocated with 3145728 bytes");
  const size_t wrong_direct[] = {2 * MiB, 100, 32 * KiB, 4 * MiB};
  check_wrong_sizes(mr, direct, wrong_direct, 4);

  CHECK_OK(gpumem_deallocate(mr, p, 29624, NULL));
  CHECK_OK(gpumem_deallocate(mr, q, 2 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(mr, direct, 3 * MiB, NULL));
  CHECK_STATUS(gpumem_deallocate(mr, direct, 3 * MiB, NULL), GPUMEM_ERR_MISUSE); /* twice */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(mr));
  printf("%s: wrong sizes refused\n", spec);
}

/* Allocates blocks of the sizes in `sizes`, in turn, until the resource runs out; returns
 * how many it gave (their pointers in *ptrs, sizes in *lens). */
static size_t fill(gpumem_resource *mr, const size_t *sizes, int kinds, void ***ptrs,
                   size_t **lens) {
  size_t capacity = 1024, count = 0;
  *ptrs = malloc(capacity * sizeof **ptrs);
  *lens = malloc(capacity * sizeof **lens);
  for (;;) {
    size_t bytes = sizes[count % (size_t)kinds];
    void *ptr;
    gpumem_status status = gpumem_allocate(mr, bytes, NULL, &ptr);
    if (status == GPUMEM_ERR_OUT_OF_MEMORY)
      return count;
    CHECK_OK(status);
    if (count == capacity) {
      capacity *= 2;
      *ptrs = realloc(*ptrs, capacity * sizeof **ptrs);
      *lens = realloc(*lens, capacity * sizeof **lens);
    }
    (*ptrs)[count] = ptr;
    (*lens)[count++] = bytes;
  }
}

static void free_all(gpumem_resource *mr, void **ptrs, size_t *lens, size_t count) {
  for (size_t i = 0; i < count; i++)
    CHECK_OK(gpumem_deallocate(mr, ptrs[i], lens[i], NULL));
  free(ptrs);
  free(lens);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), 0);
}

static void test_arena_large_after_small(void) {
  gpumem_resource *mr = check_build("arena(vmm)");
  void *big;
  CHECK_OK(gpumem_allocate(mr, 8 * MiB, NULL, &big));
  CHECK_OK(gpumem_deallocate(mr, big, 8 * MiB, NULL));
  for (int round = 0; round < 3; round++) {
    void **ptrs;
    size_t *lens;
    const size_t small[] = {4 * KiB};
    size_t count = fill(mr, small, 1, &ptrs, &lens);
    CHECK(count * 4 * KiB > DEVICE_MEMORY / 2);
    free_all(mr, ptrs, lens, count);
    CHECK_OK(gpumem_allocate(mr, 8 * MiB, NULL, &big));
    CHECK_OK(gpumem_deallocate(mr, big, 8 * MiB, NULL));
  }
  /* With nothing free anywhere, the failure still says what the arena holds. */
  void **ptrs;
  size_t *lens;
  const size_t small[] = {4 * KiB};
  size_t count = fill(mr, small, 1, &ptrs, &lens);
  figures before = figures_of(mr);
  CHECK_FAILS_WITH(gpumem_allocate(mr, 8 * MiB, NULL, &big), GPUMEM_ERR_OUT_OF_MEMORY,
                   "gave back their free superblocks");
  check_same(before, figures_of(mr));
  free_all(mr, ptrs, lens, count);
  CHECK_OK(gpumem_resource_release(mr));
  printf("arena: large requests after small ones\n");
}

static void test_binning_gives_bins_back(void) {
  gpumem_resource *mr = check_build("binning(pool(vmm))");
  for (int round = 0; round < 3; round++) {
    void **ptrs;
    size_t *lens;
    const size_t sizes[] = {4 * KiB, 64 * KiB, 300, 512 * KiB};
    size_t count = fill(mr, sizes, 4, &ptrs, &lens);
    CHECK(count > 100);
    free_all(mr, ptrs, lens, count);
    void *whole;
    CHECK_OK(gpumem_allocate(mr, DEVICE_MEMORY, NULL, &whole));
    figures before = figures_of(mr);
    void *more = (void *)0x5;
    CHECK_STATUS(gpumem_allocate(mr, 4 * KiB, NULL, &more), GPUMEM_ERR_OUT_OF_MEMORY);
    CHECK_PTR_EQ(more, (void *)0x5);
    check_same(before, figures_of(mr));
    CHECK_OK(gpumem_deallocate(mr, whole, DEVICE_MEMORY, NULL));
  }
  CHECK_OK(gpumem_resource_release(mr));
  printf("binning: bins give their chunks back\n");
}

static void test_trim(void) {
  gpumem_resource *cuda = check_build("cuda");
  size_t released = 7;
  CHECK_FAILS_WITH(gpumem_resource_trim(cuda, &released), GPUMEM_ERR_UNSUPPORTED,
                   "keeps no free memory");
  CHECK_FAILS_WITH(gpumem_pool_trim(cuda, &released), GPUMEM_ERR_INVALID_ARGUMENT, "not a pool");
  CHECK_EQ(released, 7);
  CHECK_STATUS(gpumem_resource_trim(NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT);
  CHECK_OK(gpumem_resource_release(cuda));

  /* Arena: the superblocks go back to the global pool, then to vmm. */
  gpumem_resource *arena = check_build("arena(vmm)");
  void *small, *large;
  CHECK_OK(gpumem_allocate(arena, 1000, NULL, &small));
  CHECK_OK(gpumem_allocate(arena, 6 * MiB, NULL, &large));
  CHECK_OK(gpumem_deallocate(arena, small, 1000, NULL));
  CHECK_OK(gpumem_deallocate(arena, large, 6 * MiB, NULL));
  uint64_t reserved = check_query(arena, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK(reserved >= 10 * MiB);
  CHECK_OK(gpumem_resource_trim(arena, &released));
  CHECK_U64_EQ(released, reserved);
  CHECK_U64_EQ(check_query(arena, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_OK(gpumem_allocate(arena, 1000, NULL, &small)); /* and it grows again */
  CHECK_OK(gpumem_pool_trim(arena, &released));         /* the pool's name takes it too */
  CHECK_U64_EQ(released, 0);
  CHECK_OK(gpumem_deallocate(arena, small, 1000, NULL));
  CHECK_OK(gpumem_resource_release(arena));

  /* Binning: its bins' chunks go back to the upstream pool, which keeps them until trimmed. */
  gpumem_resource *pool = check_build("pool(vmm)");
  gpumem_resource *binning;
  CHECK_OK(gpumem_binning_create(pool, NULL, &binning));
  void *blocks[3];
  const size_t sizes[3] = {300, 5000, 3 * MiB};
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpumem_allocate(binning, sizes[i], NULL, &blocks[i]));
  CHECK_OK(gpumem_deallocate(binning, blocks[0], sizes[0], NULL));
  CHECK_OK(gpumem_resource_trim(binning, &released));
  CHECK_U64_EQ(released, 2 * MiB); /* the 512 B bin's chunk; the 8 KiB bin's is in use */
  CHECK_U64_EQ(check_query(pool, GPUMEM_QUERY_LIVE_BYTES), 2 * MiB + 3 * MiB);
  CHECK_OK(gpumem_deallocate(binning, blocks[1], sizes[1], NULL));
  CHECK_OK(gpumem_deallocate(binning, blocks[2], sizes[2], NULL));
  CHECK_OK(gpumem_resource_trim(binning, &released));
  CHECK_U64_EQ(released, 2 * MiB);
  CHECK_U64_EQ(check_query(pool, GPUMEM_QUERY_LIVE_BYTES), 0);
  CHECK_OK(gpumem_resource_trim(pool, &released));
  CHECK_U64_EQ(check_query(pool, GPUMEM_QUERY_RESERVED_BYTES), 0);

  /* fixed_size */
  gpumem_resource *fixed;
  gpumem_fixed_size_options options = {.block_size = 64 * KiB, .blocks_to_preallocate = 4};
  CHECK_OK(gpumem_fixed_size_create(pool, &options, &fixed));
  CHECK_OK(gpumem_allocate(fixed, 100, NULL, &blocks[0]));
  CHECK_OK(gpumem_deallocate(fixed, blocks[0], 100, NULL));
  CHECK_OK(gpumem_resource_trim(fixed, &released));
  CHECK_U64_EQ(released, 256 * KiB);
  CHECK_OK(gpumem_resource_release(fixed));
  CHECK_OK(gpumem_resource_release(binning));
  CHECK_OK(gpumem_resource_release(pool));
  printf("trim: pool, arena, binning, fixed_size\n");
}

/* Describes mr whole and checks that the spec builds a resource that describes the same. */
static void check_describes_whole(gpumem_resource *mr, size_t at_least) {
  char spec[8192];
  CHECK_OK(gpumem_resource_describe(mr, spec, sizeof spec));
  size_t length = strlen(spec);
  if (length < at_least)
    CHECK_FAIL_("spec of %zu characters, expected at least %zu: %s", length, at_least, spec);
  gpumem_resource *again;
  CHECK_OK(gpumem_resource_from_spec(spec, &again));
  char twice[8192];
  CHECK_OK(gpumem_resource_describe(again, twice, sizeof twice));
  CHECK(strcmp(spec, twice) == 0);
  CHECK_OK(gpumem_resource_release(again));

  /* Exactly enough, and one byte short: a clear failure, the buffer untouched. */
  char *exact = malloc(length + 1);
  CHECK_OK(gpumem_resource_describe(mr, exact, length + 1));
  CHECK(strcmp(exact, spec) == 0);
  memset(exact, 'x', length + 1);
  CHECK_FAILS_WITH(gpumem_resource_describe(mr, exact, length), GPUMEM_ERR_INVALID_ARGUMENT,
                   "needs a buffer of");
  char needed[64];
  snprintf(needed, sizeof needed, "%zu bytes", length + 1);
  CHECK_CONTAINS(gpumem_last_error_message(), needed);
  for (size_t i = 0; i <= length; i++)
    CHECK(exact[i] == 'x');
  free(exact);
}

/* Appends `open` `count` times, then `inner`, then `close` `count` times, to spec. */
static void nest(char *spec, const char *open, const char *inner, const char *close, int count) {
  for (int i = 0; i < count; i++)
    strcat(spec, open);
  strcat(spec, inner);
  for (int i = 0; i < count; i++)
    strcat(spec, close);
}

static void test_describe_whole(void) {
  /* 12 faults around cuda, then the deepest chain a spec may have (16), of several kinds. */
  char spec[4096] = "";
  nest(spec, "faulty(", "cuda", ", fail_every=1000)", 12);
  gpumem_resource *mr = check_build(spec);
  check_describes_whole(mr, 513);
  CHECK_OK(gpumem_resource_release(mr));

  snprintf(spec, sizeof spec, "binning(arena(");
  nest(spec, "faulty(", "pool(vmm(reserve=256MiB, piece=2MiB), max=48MiB)",
       ", fail_at=18446744073709551615)", 12);
  strcat(spec, ", size=4MiB, max=32MiB, superblock=1MiB), min=10, max=18)");
  mr = check_build(spec);
  check_describes_whole(mr, 900);
  void *ptr;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(mr, ptr, 1000, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("describe: whole at every depth\n");
}

static void check_bad_count(const char *spec, const char *expected, size_t caret) {
  gpumem_resource *mr = (gpumem_resource *)0x9;
  CHECK_FAILS_WITH(gpumem_resource_from_spec(spec, &mr), GPUMEM_ERR_INVALID_ARGUMENT, expected);
  CHECK_PTR_EQ(mr, (void *)0x9);
  char line[256];
  snprintf(line, sizeof line, "\n  %s\n  %*s^", spec, (int)caret, "");
  CHECK_CONTAINS(gpumem_last_error_message(), line);
}

static void test_counts_in_range(void) {
  check_bad_count("binning(cuda, min=4294967304)", "bad value for 'min' of 'binning'", 18);
  check_bad_count("binning(cuda, min=8, max=4294967316)", "expected a count from 8 to 40", 25);
  check_bad_count("binning(cuda, max=41)", "bad value for 'max' of 'binning'", 18);
  check_bad_count("binning(cuda, min=7)", "bad value for 'min'", 18);
  gpumem_resource *mr = check_build("binning(cuda, min=8, max=40)");
  CHECK_OK(gpumem_resource_release(mr));
  printf("spec: counts out of range refused\n");
}

int main(void) {
  gpumem_sim_config config = {.memory = DEVICE_MEMORY};
  CHECK_OK(gpumem_sim_configure(&config));
  check_init_backend();
  test_arena_wrong_size();
  test_binning_wrong_size("binning(pool(vmm))");
  test_binning_wrong_size("binning(cuda)");
  test_arena_large_after_small();
  test_binning_gives_bins_back();
  test_trim();
  test_describe_whole();
  test_counts_in_range();
  printf("misuse tests passed\n");
  return 0;
}
