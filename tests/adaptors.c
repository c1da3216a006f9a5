/* adaptors.c: the behaviour of the control adaptors limit, aligned and prefetch on the
 * simulated device.
 *
 * limit: the exact edge (the limit's last byte allowed, one more refused before the
 * upstream sees it), the message, the getters, placement through it (a pool over
 * limit(vmm) grows in place and its trim gives the budget back), and exactness under
 * threads: threads filling the limit in equal blocks end with exactly the limit allocated,
 * threads churning never hold more than the limit, and afterwards the whole limit can be
 * allocated by one thread (no credit stranded in another's slot). aligned: every size around
 * the threshold, placement kept or dropped by the alignment, fixed_size's refusal. prefetch:
 * a prefetch on the allocation's stream over managed memory (also under a pool), none over
 * device memory, and a failed prefetch failing the allocation with nothing leaked. For
 * each: composition both ways, release keeping the upstream alive, bad options leaving
 * everything as it was, and describe building an equal resource. */
#include "check.h"
#include "gpumem/sim.h"

#include <pthread.h>
#include <stdatomic.h>

#define MiB ((size_t)1 << 20)

/* A value no successful call could leave in an out-parameter. */
static gpumem_resource *const untouched = (gpumem_resource *)(uintptr_t)0x5eed;

static uint64_t device_used(void) {
  uint64_t used = 0;
  CHECK_OK(gpumem_sim_device_used(0, &used));
  return used;
}

static size_t allocated(gpumem_resource *limit) {
  size_t bytes = 0;
  CHECK_OK(gpumem_limit_get_allocated_bytes(limit, &bytes));
  return bytes;
}

static gpumem_resource_capabilities capabilities(gpumem_resource *mr) {
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_OK(gpumem_resource_get_capabilities(mr, &caps));
  return caps;
}

/* ---- limit ---- */

static void test_limit_edge(void) {
  gpumem_resource *mr = check_build("limit(cuda, max=1MiB)");
  size_t limit = 0;
  CHECK_OK(gpumem_limit_get_allocation_limit(mr, &limit));
  CHECK_EQ(limit, MiB);
  CHECK_EQ(allocated(mr), 0);
  void *a, *b, *c = (void *)0x77;
  CHECK_OK(gpumem_allocate(mr, 600000, NULL, &a));
  CHECK_EQ(allocated(mr), 600000);
  uint64_t calls = gpumem_sim_call_count(GPUMEM_SIM_CALL_MEM_ALLOC);
  CHECK_FAILS_WITH(gpumem_allocate(mr, MiB - 600000 + 1, NULL, &c), GPUMEM_ERR_OUT_OF_MEMORY,
                   "past its limit of 1 MiB (1048576 B), with 585.9 KiB (600000 B) allocated");
  CHECK_CONTAINS(gpumem_last_error_message(), "limit(cuda, max=1048576)");
  CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_MEM_ALLOC), calls); /* never reached it */
  CHECK_PTR_EQ(c, (void *)0x77);
  CHECK_OK(gpumem_allocate(mr, MiB - 600000, NULL, &b)); /* the last byte is allowed */
  CHECK_EQ(allocated(mr), MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 2);
  CHECK_STATUS(gpumem_allocate(mr, 1, NULL, &c), GPUMEM_ERR_OUT_OF_MEMORY);
  CHECK_STATUS(gpumem_allocate(mr, (size_t)1 << 50, NULL, &c), GPUMEM_ERR_OUT_OF_MEMORY);
  /* A wrong free is the upstream's misuse, and changes no count. */
  CHECK_STATUS(gpumem_deallocate(mr, a, 4, NULL), GPUMEM_ERR_MISUSE);
  CHECK_EQ(allocated(mr), MiB);
  CHECK_OK(gpumem_deallocate(mr, a, 600000, NULL));
  CHECK_OK(gpumem_deallocate(mr, b, MiB - 600000, NULL));
  CHECK_EQ(allocated(mr), 0);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_allocate(mr, MiB, NULL, &a));
  CHECK_OK(gpumem_deallocate(mr, a, MiB, NULL));
  /* An upstream failure gives the budget back. */
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEM_ALLOC, 1));
  CHECK_STATUS(gpumem_allocate(mr, 1000, NULL, &c), GPUMEM_ERR_OUT_OF_MEMORY);
  CHECK_CONTAINS(gpumem_last_error_message(), "limit(cuda");
  CHECK_EQ(allocated(mr), 0);
  CHECK_OK(gpumem_resource_release(mr));

  /* The getters take only a limit adaptor. */
  gpumem_resource *cuda = check_build("cuda");
  size_t bytes = 7;
  CHECK_FAILS_WITH(gpumem_limit_get_allocated_bytes(cuda, &bytes), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not a limit adaptor");
  CHECK_FAILS_WITH(gpumem_limit_get_allocation_limit(NULL, &bytes), GPUMEM_ERR_INVALID_ARGUMENT,
                   "NULL");
  CHECK_FAILS_WITH(gpumem_limit_get_allocation_limit(cuda, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "NULL");
  CHECK_EQ(bytes, 7);
  CHECK_OK(gpumem_resource_release(cuda));
  printf("limit: exact edge, message, getters\n");
}

/* A pool over limit(vmm) places growth as over vmm: the budget counts mapped bytes, and the
 * pool's trim (unmap_pieces through the limit) gives them back. */
static void test_limit_placement(void) {
  gpumem_resource *vmm = check_build("vmm(piece=2MiB)");
  gpumem_limit_options opts = {.maximum_size = 64 * MiB};
  gpumem_resource *limit, *pool;
  CHECK_OK(gpumem_limit_create(vmm, &opts, &limit));
  gpumem_resource_capabilities up = capabilities(vmm), caps = capabilities(limit);
  CHECK_EQ(caps.places_at_address, 1);
  CHECK_EQ(caps.granularity, up.granularity);
  CHECK_EQ(caps.piece_size, up.piece_size);
  CHECK_OK(gpumem_resource_release(vmm));
  CHECK_OK(gpumem_pool_create(limit, NULL, &pool));
  void *ptrs[4];
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_allocate(pool, 10 * MiB, NULL, &ptrs[i]));
  CHECK_U64_EQ(allocated(limit), check_query(pool, GPUMEM_QUERY_RESERVED_BYTES));
  /* It grew as a pool over vmm alone grows: in place, the same bytes at the same offsets. */
  gpumem_resource *plain = check_build("pool(vmm(piece=2MiB))");
  void *same[4];
  for (int i = 0; i < 4; i++) {
    CHECK_OK(gpumem_allocate(plain, 10 * MiB, NULL, &same[i]));
    CHECK_EQ((char *)same[i] - (char *)same[0], (char *)ptrs[i] - (char *)ptrs[0]);
  }
  CHECK_U64_EQ(check_query(plain, GPUMEM_QUERY_RESERVED_BYTES),
               check_query(pool, GPUMEM_QUERY_RESERVED_BYTES));
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_deallocate(plain, same[i], 10 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(plain));
  void *more = (void *)0x77;
  CHECK_FAILS_WITH(gpumem_allocate(pool, 30 * MiB, NULL, &more), GPUMEM_ERR_OUT_OF_MEMORY, "limit");
  CHECK_PTR_EQ(more, (void *)0x77);
  CHECK_OK(gpumem_deallocate(pool, ptrs[1], 10 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(pool, ptrs[2], 10 * MiB, NULL));
  size_t released = 0;
  CHECK_OK(gpumem_pool_trim(pool, &released));
  CHECK(released > 0);
  CHECK_U64_EQ(allocated(limit), check_query(pool, GPUMEM_QUERY_RESERVED_BYTES));
  CHECK_OK(gpumem_allocate(pool, 30 * MiB, NULL, &more));
  CHECK_OK(gpumem_deallocate(pool, more, 30 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(pool, ptrs[0], 10 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(pool, ptrs[3], 10 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(limit)); /* the pool keeps it */
  CHECK_OK(gpumem_resource_release(pool));
  printf("limit: a pool over limit(vmm) grows in place; trim gives the budget back\n");
}

enum { limit_threads = 4, block = 4096, limit_blocks = 1024 };

typedef struct fill_args {
  gpumem_resource *mr;
  pthread_barrier_t *start;
  void *ptrs[limit_blocks];
  size_t count;
  unsigned seed;
} fill_args;

static atomic_size_t held_bytes; /* bytes the threads hold: never more than the limit */

/* Allocates blocks until the limit refuses one. */
static void *fill(void *arg) {
  fill_args *args = arg;
  pthread_barrier_wait(args->start);
  args->count = 0;
  for (;;) {
    gpumem_status status = gpumem_allocate(args->mr, block, NULL, &args->ptrs[args->count]);
    if (status == GPUMEM_ERR_OUT_OF_MEMORY)
      break;
    CHECK_OK(status);
    args->count++;
  }
  return NULL;
}

/* Frees and allocates blocks of random sizes; counts what it holds in held_bytes, added
 * after an allocation and taken before a free, so that held_bytes never exceeds what is
 * allocated through the limit. */
static void *churn(void *arg) {
  fill_args *args = arg;
  size_t sizes[limit_blocks] = {0};
  pthread_barrier_wait(args->start);
  uint64_t x = 0x9E3779B97F4A7C15ull ^ args->seed;
  for (int step = 0; step < 20000; step++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t slot = (size_t)(x % 64);
    if (args->ptrs[slot]) {
      atomic_fetch_sub(&held_bytes, sizes[slot]);
      CHECK_OK(gpumem_deallocate(args->mr, args->ptrs[slot], sizes[slot], NULL));
      args->ptrs[slot] = NULL;
      continue;
    }
    size_t bytes = 1 + (size_t)((x >> 16) % (3 * block));
    gpumem_status status = gpumem_allocate(args->mr, bytes, NULL, &args->ptrs[slot]);
    if (status == GPUMEM_ERR_OUT_OF_MEMORY) {
      args->ptrs[slot] = NULL;
      continue;
    }
    CHECK_OK(status);
    sizes[slot] = bytes;
    size_t held = atomic_fetch_add(&held_bytes, bytes) + bytes;
    if (held > (size_t)limit_blocks * block)
      CHECK_FAIL_("threads hold %zu bytes through a limit of %zu", held,
                  (size_t)limit_blocks * block);
  }
  for (size_t slot = 0; slot < 64; slot++)
    if (args->ptrs[slot]) {
      atomic_fetch_sub(&held_bytes, sizes[slot]);
      CHECK_OK(gpumem_deallocate(args->mr, args->ptrs[slot], sizes[slot], NULL));
      args->ptrs[slot] = NULL;
    }
  return NULL;
}

static void run_threads(void *(*work)(void *), fill_args *args) {
  pthread_t threads[limit_threads];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, limit_threads);
  for (int i = 0; i < limit_threads; i++) {
    args[i].start = &start;
    CHECK_EQ(pthread_create(&threads[i], NULL, work, &args[i]), 0);
  }
  for (int i = 0; i < limit_threads; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  pthread_barrier_destroy(&start);
}

static void test_limit_threads(const char *spec) {
  gpumem_resource *mr = check_build(spec);
  static fill_args args[limit_threads];
  for (int round = 0; round < 3; round++) {
    memset(args, 0, sizeof args);
    for (int i = 0; i < limit_threads; i++)
      args[i] = (fill_args){.mr = mr, .seed = (unsigned)(round * limit_threads + i + 1)};
    run_threads(fill, args);
    size_t total = 0;
    for (int i = 0; i < limit_threads; i++)
      total += args[i].count;
    CHECK_EQ(total, limit_blocks); /* refused only when the limit was reached */
    CHECK_EQ(allocated(mr), (size_t)limit_blocks * block);
    /* Each thread frees another's blocks: live figures move between slots. */
    for (int i = 0; i < limit_threads; i++)
      for (size_t k = 0; k < args[i].count; k++)
        CHECK_OK(gpumem_deallocate(mr, args[i].ptrs[k], block, NULL));
    CHECK_EQ(allocated(mr), 0);

    memset(args, 0, sizeof args);
    for (int i = 0; i < limit_threads; i++)
      args[i] = (fill_args){.mr = mr, .seed = (unsigned)(round + 100 * i + 7)};
    run_threads(churn, args);
    CHECK_EQ(atomic_load(&held_bytes), 0);
    CHECK_EQ(allocated(mr), 0);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
    /* The credit other threads kept is reclaimed: one thread gets the whole limit. */
    void *all, *more = (void *)0x77;
    CHECK_OK(gpumem_allocate(mr, (size_t)limit_blocks * block, NULL, &all));
    CHECK_STATUS(gpumem_allocate(mr, 1, NULL, &more), GPUMEM_ERR_OUT_OF_MEMORY);
    CHECK_OK(gpumem_deallocate(mr, all, (size_t)limit_blocks * block, NULL));
  }
  CHECK_OK(gpumem_resource_release(mr));
  printf("%s: exact under %d threads (fill, churn, whole limit after)\n", spec, limit_threads);
}

/* ---- aligned ---- */

static void test_aligned(void) {
  static const char *const upstreams[] = {"cuda", "pool(cuda, initial=64MiB)", "arena(vmm)",
                                          "binning(pool(vmm), min=10, max=22)"};
  for (size_t u = 0; u < sizeof upstreams / sizeof upstreams[0]; u++) {
    char spec[160];
    snprintf(spec, sizeof spec, "aligned(%s, alignment=64KiB, threshold=1MiB)", upstreams[u]);
    gpumem_resource *mr = check_build(spec);
    static const size_t sizes[] = {1,   255,     256,       4096,    MiB - 256,  MiB - 1,
                                   MiB, MiB + 1, MiB + 255, 3 * MiB, 5 * MiB + 7};
    void *ptrs[sizeof sizes / sizeof sizes[0]];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      CHECK_OK(gpumem_allocate(mr, sizes[i], NULL, &ptrs[i]));
      size_t expected = sizes[i] >= MiB ? 64 << 10 : 256;
      if ((uintptr_t)ptrs[i] % expected != 0)
        CHECK_FAIL_("%s: %zu bytes at %p, not aligned to %zu", spec, sizes[i], ptrs[i], expected);
    }
    /* A larger alignment asked of the adaptor is kept. */
    void *big;
    CHECK_OK(gpumem_allocate_aligned(mr, 2 * MiB, 4 * MiB, NULL, &big));
    CHECK_EQ((uintptr_t)big % (4 * MiB), 0);
    CHECK_OK(gpumem_deallocate_aligned(mr, big, 2 * MiB, 4 * MiB, NULL));
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      CHECK_OK(gpumem_deallocate(mr, ptrs[i], sizes[i], NULL));
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
    CHECK_OK(gpumem_resource_release(mr));
  }

  /* Placement is claimed only while the alignment is at most the granularity. */
  gpumem_resource *vmm = check_build("vmm");
  size_t granularity = capabilities(vmm).granularity;
  CHECK_OK(gpumem_resource_release(vmm));
  char spec[96];
  snprintf(spec, sizeof spec, "aligned(vmm, alignment=%zu)", granularity);
  gpumem_resource *mr = check_build(spec);
  CHECK_EQ(capabilities(mr).places_at_address, 1);
  CHECK_OK(gpumem_resource_release(mr));
  snprintf(spec, sizeof spec, "pool(aligned(vmm, alignment=%zu))", 2 * granularity);
  mr = check_build(spec);
  gpumem_resource *upstream;
  CHECK_OK(gpumem_resource_upstream(mr, &upstream));
  CHECK_EQ(capabilities(upstream).places_at_address, 0);
  void *ptrs[3];
  for (int i = 0; i < 3; i++) /* growth by plain allocations, each aligned */
    CHECK_OK(gpumem_allocate(mr, 3 * granularity, NULL, &ptrs[i]));
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpumem_deallocate(mr, ptrs[i], 3 * granularity, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  /* fixed_size gives 256-byte alignment only: documented, and said. */
  mr = check_build("aligned(fixed_size(cuda, block=64KiB, prealloc=2), alignment=4KiB)");
  void *ptr = (void *)0x77;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 1000, NULL, &ptr), GPUMEM_ERR_UNSUPPORTED, "does not align");
  CHECK_PTR_EQ(ptr, (void *)0x77);
  CHECK_OK(gpumem_resource_release(mr));
  printf("aligned: every size around the threshold, placement kept or dropped\n");
}

/* ---- prefetch ---- */

static void check_prefetches(const char *spec, bool expected) {
  gpumem_resource *mr = check_build(spec);
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(0, &stream));
  for (int round = 0; round < 3; round++) {
    uint64_t before = gpumem_sim_call_count(GPUMEM_SIM_CALL_PREFETCH), pending = 0;
    CHECK_OK(gpumem_sim_pending(stream, &pending));
    void *ptr;
    CHECK_OK(gpumem_allocate(mr, 100000, stream, &ptr));
    uint64_t after = 0;
    CHECK_OK(gpumem_sim_pending(stream, &after));
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_PREFETCH) - before, expected ? 1 : 0);
    CHECK_U64_EQ(after - pending, expected ? 1 : 0); /* on the allocation's stream */
    CHECK_OK(gpumem_deallocate(mr, ptr, 100000, stream));
  }
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_destroy(stream));
  CHECK_OK(gpumem_resource_release(mr));
}

static void test_prefetch(void) {
  check_prefetches("prefetch(managed)", true);
  check_prefetches("prefetch(pool(managed))", true);
  check_prefetches("prefetch(limit(managed, max=1GiB))", true);
  check_prefetches("prefetch(cuda)", false);
  check_prefetches("prefetch(pool(vmm))", false);
  check_prefetches("prefetch(pinned_host)", false);

  /* A failed prefetch fails the allocation with the driver's status; nothing leaks. */
  static const char *const specs[] = {"prefetch(managed)", "prefetch(pool(managed))"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    gpumem_resource *mr = check_build(specs[i]);
    uint64_t used = device_used();
    void *ptr = (void *)0x77;
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_PREFETCH, 1));
    CHECK_FAILS_WITH(gpumem_allocate(mr, 5000, NULL, &ptr), GPUMEM_ERR_CUDA, "prefetch");
    CHECK(gpumem_last_cuda_error() != 0);
    CHECK_PTR_EQ(ptr, (void *)0x77);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), 0);
    if (i == 0)
      CHECK_U64_EQ(device_used(), used);
    CHECK_OK(gpumem_allocate(mr, 5000, NULL, &ptr));
    CHECK_OK(gpumem_deallocate(mr, ptr, 5000, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  }
  printf("prefetch: managed memory prefetched on its stream, other memory not; a failure "
         "leaks nothing\n");
}

/* ---- all three ---- */

typedef gpumem_status (*create_fn)(gpumem_resource *upstream, gpumem_resource **out);

static gpumem_status create_limit(gpumem_resource *upstream, gpumem_resource **out) {
  gpumem_limit_options opts = {.maximum_size = 256 * MiB};
  return gpumem_limit_create(upstream, &opts, out);
}

static gpumem_status create_aligned(gpumem_resource *upstream, gpumem_resource **out) {
  gpumem_aligned_options opts = {.alignment = 64 << 10};
  return gpumem_aligned_create(upstream, &opts, out);
}

/* The adaptor over a pool and a pool over the adaptor, each built with its upstream
 * released at once: both work, and releasing the top gives every byte back. */
static void check_composition(const char *name, create_fn create, const char *base) {
  uint64_t used = device_used();
  gpumem_resource *up = check_build(base), *adaptor, *pool, *top;
  CHECK_OK(create(up, &adaptor));
  CHECK_OK(gpumem_resource_release(up));
  gpumem_pool_options small = {.initial_size = 16 * MiB};
  CHECK_OK(gpumem_pool_create(adaptor, &small, &pool));
  CHECK_OK(gpumem_resource_release(adaptor));
  CHECK_OK(create(pool, &top));
  CHECK_OK(gpumem_resource_release(pool));
  void *ptrs[8];
  for (int i = 0; i < 8; i++)
    CHECK_OK(gpumem_allocate(top, (size_t)(i + 1) * 3 * MiB + 17, NULL, &ptrs[i]));
  for (int i = 0; i < 8; i++)
    CHECK_OK(gpumem_deallocate(top, ptrs[i], (size_t)(i + 1) * 3 * MiB + 17, NULL));
  CHECK_OK(gpumem_resource_release(top));
  CHECK_U64_EQ(device_used(), used);
  printf("%s over pool over %s over %s: composed, kept alive, all given back\n", name, name, base);
}

static gpumem_status create_prefetch(gpumem_resource *upstream, gpumem_resource **out) {
  return gpumem_prefetch_create(upstream, out);
}

/* Bad options fail with a message naming them and leave the upstream as it was: still
 * usable, and released by its one reference. */
static void test_bad_input(void) {
  uint64_t used = device_used();
  gpumem_resource *up = check_build("pool(cuda, initial=4MiB)"), *out = untouched;
  gpumem_limit_options zero = {0};
  CHECK_FAILS_WITH(gpumem_limit_create(up, &zero, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "maximum_size");
  CHECK_CONTAINS(gpumem_last_error_message(), "missing or zero");
  CHECK_FAILS_WITH(gpumem_limit_create(up, NULL, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "missing or zero");
  gpumem_limit_options huge = {.maximum_size = SIZE_MAX};
  CHECK_FAILS_WITH(gpumem_limit_create(up, &huge, &out), GPUMEM_ERR_INVALID_ARGUMENT, "limit");
  gpumem_limit_options fine = {.maximum_size = MiB};
  CHECK_FAILS_WITH(gpumem_limit_create(NULL, &fine, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "upstream resource is NULL");
  CHECK_FAILS_WITH(gpumem_limit_create(up, &fine, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "out is NULL");
  gpumem_aligned_options three = {.alignment = 3};
  CHECK_FAILS_WITH(gpumem_aligned_create(up, &three, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "alignment 3 is not a power of two");
  gpumem_aligned_options odd = {.alignment = (64 << 10) + 256};
  CHECK_FAILS_WITH(gpumem_aligned_create(up, &odd, &out), GPUMEM_ERR_INVALID_ARGUMENT, "alignment");
  CHECK_FAILS_WITH(gpumem_aligned_create(NULL, NULL, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "upstream resource is NULL");
  CHECK_FAILS_WITH(gpumem_aligned_create(up, NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "out is NULL");
  CHECK_FAILS_WITH(gpumem_prefetch_create(NULL, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "upstream resource is NULL");
  CHECK_FAILS_WITH(gpumem_prefetch_create(up, NULL), GPUMEM_ERR_INVALID_ARGUMENT, "out is NULL");
  CHECK_PTR_EQ(out, untouched);

  /* The same values in specs: tests/spec.c. */
  void *ptr;
  CHECK_OK(gpumem_allocate(up, 1000, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(up, ptr, 1000, NULL));
  CHECK_OK(gpumem_resource_release(up)); /* no reference was left behind */
  CHECK_U64_EQ(device_used(), used);
  printf("bad options: refused with their names, nothing changed\n");
}

static void test_round_trip(void) {
  static const char *const specs[] = {
      "limit(cuda, max=1GiB)",
      "limit(pool(vmm), max=80GiB)",
      "pool(limit(vmm, max=64GiB))",
      "aligned(pool(vmm), alignment=4096, threshold=1MiB)",
      "aligned(cuda)",
      "prefetch(managed(prefetch=false))",
      "prefetch(aligned(limit(pool(managed), max=2GiB), alignment=64KiB))",
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    check_describe_round_trip(specs[i]);
  printf("describe builds an equal resource\n");
}

int main(void) {
  check_init_backend();
  if (!check_on_sim()) {
    printf("skipped: these checks count the simulated device's calls\n");
    return CHECK_SKIP_CODE;
  }
  test_limit_edge();
  test_limit_placement();
  test_limit_threads("limit(cuda, max=4MiB)");
  test_limit_threads("limit(pool(cuda, initial=16MiB), max=4MiB)");
  test_limit_threads("limit(arena(vmm), max=4MiB)");
  test_aligned();
  test_prefetch();
  check_composition("limit", create_limit, "vmm");
  check_composition("limit", create_limit, "cuda");
  check_composition("aligned", create_aligned, "vmm");
  check_composition("aligned", create_aligned, "cuda");
  check_composition("prefetch", create_prefetch, "managed");
  check_composition("prefetch", create_prefetch, "vmm");
  test_bad_input();
  test_round_trip();
  printf("adaptors: all checks passed\n");
  return 0;
}
