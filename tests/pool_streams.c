/* pool_streams.c: how much a pool used by several streams holds, and that it stays safe,
 * on the simulated device (its kernels show a hazard; its counts show event records and
 * waits). tests/pool.c checks cross-stream reuse itself; these are the rules that keep
 * multi-stream programs from holding more than single-stream ones:
 *
 * - A side stream that allocates a few small blocks now and then, beside a busy stream
 *   (an inference server copying its inputs on a stream of its own), leaves the pool's peak
 *   where the busy stream alone puts it: a steal takes only the block it carves, so the
 *   side stream never holds the busy stream's free memory.
 * - The rest of a stolen block stays sealed in its set: the owner reuses it at once, a
 *   third stream after a wait; a second steal covered by the same seal waits no more.
 * - Growth in place extends a sealed free tail of the request's set by the shortfall only.
 * - A block freed open beside a sealed block of its set takes it in (open): the set's own
 *   stream reuses them as one, as a single-stream pool would; others after its next seal.
 * - A request that no open or sealed block of its set fits, but their union does, seals
 *   the set (one event record) rather than growing.
 * Every step runs kernels on the blocks and checks the hazard count, and the pool's
 * validator. */
#include "check.h"
#include "core/internal.h"
#include "gpumem/sim.h"

#include <stdio.h>

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

static void use_on(gpumem_stream stream, void *ptr, size_t bytes, int value) {
  CHECK_OK(gpumem_sim_launch(stream, ptr, bytes, value));
}

static void check_valid(gpumem_resource *mr) {
  CHECK_OK(gpumem__validate(mr));
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
}

static uint64_t reserved(gpumem_resource *mr) {
  return check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
}

static uint64_t calls(gpumem_sim_call kind) {
  return gpumem_sim_call_count(kind);
}

/* One step of a busy stream: blocks of several sizes, used, then freed: two seals' batches
 * of frees, which leave them all sealed. */
enum { busy_blocks = 32 };
static const size_t busy_sizes[busy_blocks] = {
    24 * MiB, 6 * MiB,  64 * KiB, 6 * MiB,  96 * KiB,  2 * MiB,  300 * KiB, 24 * MiB,
    12 * MiB, 64 * KiB, 6 * MiB,  40 * KiB, 2 * MiB,   12 * MiB, 500 * KiB, 3 * MiB,
    80 * KiB, 6 * MiB,  24 * MiB, 64 * KiB, 1 * MiB,   12 * MiB, 700 * KiB, 5 * MiB,
    8 * MiB,  48 * KiB, 2 * MiB,  16 * MiB, 128 * KiB, 4 * MiB,  32 * KiB,  10 * MiB};

static void busy_step(gpumem_resource *mr, gpumem_stream s, int step) {
  void *p[busy_blocks];
  size_t bytes[busy_blocks];
  for (int i = 0; i < busy_blocks; i++) {
    /* Sizes vary from step to step, as a batch's lengths do. */
    bytes[i] = busy_sizes[i] / 8 * (size_t)(6 + (step * 5 + i) % 7);
    CHECK_OK(gpumem_allocate(mr, bytes[i], s, &p[i]));
    use_on(s, p[i], bytes[i], step);
  }
  for (int i = 0; i < busy_blocks; i++) /* freed in another order than allocated */
    CHECK_OK(gpumem_deallocate(mr, p[(i * 7) % busy_blocks], bytes[(i * 7) % busy_blocks], s));
}

/* The peak a busy stream reaches alone, and with a side stream taking a few small blocks
 * between its steps. */
static uint64_t side_stream_peak(bool with_side) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
  gpumem_stream busy, side;
  CHECK_OK(gpumem_stream_create(0, &busy));
  CHECK_OK(gpumem_stream_create(0, &side));
  for (int step = 0; step < 40; step++) {
    busy_step(mr, busy, step);
    if (with_side) {
      size_t bytes = (size_t)(40 + step % 5 * 10) * KiB;
      void *a, *b;
      CHECK_OK(gpumem_allocate(mr, bytes, side, &a));
      CHECK_OK(gpumem_allocate(mr, bytes, side, &b));
      use_on(side, a, bytes, step);
      use_on(side, b, bytes, step);
      CHECK_OK(gpumem_deallocate(mr, a, bytes, side));
      CHECK_OK(gpumem_deallocate(mr, b, bytes, side));
    }
    if (step % 8 == 0)
      check_valid(mr);
  }
  check_valid(mr);
  uint64_t peak = check_query(mr, GPUMEM_QUERY_PEAK_RESERVED_BYTES);
  CHECK_OK(gpumem_sim_complete_all());
  CHECK_OK(gpumem_stream_destroy(busy));
  CHECK_OK(gpumem_stream_destroy(side));
  CHECK_OK(gpumem_resource_release(mr));
  return peak;
}

static void test_side_stream(void) {
  uint64_t alone = side_stream_peak(false), beside = side_stream_peak(true);
  /* The side stream's own blocks may take a granule or two of the small region. (With a
   * steal that moved all of a set's sealed blocks, and open blocks kept apart from sealed
   * ones of their set, the busy stream alone 230 MiB, with the side stream 324.) */
  CHECK(beside <= alone + 8 * MiB);
  printf("side stream: peak reserved %llu MiB with it, %llu MiB without\n",
         (unsigned long long)(beside / MiB), (unsigned long long)(alone / MiB));
}

/* Makes stream `b` the pool's second: every set is sealed from then on, `a`'s at its next
 * free. The block is in the small region, apart from the large blocks the tests use. */
static void second_stream(gpumem_resource *mr, gpumem_stream b) {
  void *p;
  CHECK_OK(gpumem_allocate(mr, 4 * KiB, b, &p));
  CHECK_OK(gpumem_deallocate(mr, p, 4 * KiB, b));
}

static void test_steal_keeps_the_rest(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
  gpumem_stream a, b, c;
  CHECK_OK(gpumem_stream_create(0, &a));
  CHECK_OK(gpumem_stream_create(0, &b));
  CHECK_OK(gpumem_stream_create(0, &c));
  void *big;
  CHECK_OK(gpumem_allocate(mr, 32 * MiB, a, &big));
  use_on(a, big, 32 * MiB, 1);
  second_stream(mr, b);
  CHECK_OK(gpumem_deallocate(mr, big, 32 * MiB, a)); /* sealed: a's first free since */
  uint64_t before = reserved(mr), waits = calls(GPUMEM_SIM_CALL_STREAM_WAIT);

  /* b takes 4 MiB after one wait, then 4 MiB more without another (the same seal). */
  void *b1, *b2;
  CHECK_OK(gpumem_allocate(mr, 4 * MiB, b, &b1));
  use_on(b, b1, 4 * MiB, 2);
  CHECK_OK(gpumem_allocate(mr, 4 * MiB, b, &b2));
  use_on(b, b2, 4 * MiB, 3);
  CHECK_U64_EQ(calls(GPUMEM_SIM_CALL_STREAM_WAIT) - waits, 1);
  check_valid(mr);

  /* The other 24 MiB stayed a's: a takes them with no wait and no growth. */
  void *a1;
  CHECK_OK(gpumem_allocate(mr, 24 * MiB, a, &a1));
  use_on(a, a1, 24 * MiB, 4);
  CHECK_U64_EQ(reserved(mr), before);
  CHECK_U64_EQ(calls(GPUMEM_SIM_CALL_STREAM_WAIT) - waits, 1);
  check_valid(mr);

  /* What a frees next (sealed at a's next seal) goes to a third stream after a wait. */
  CHECK_OK(gpumem_deallocate(mr, a1, 24 * MiB, a));
  for (int i = 0; i < 16; i++) { /* a seal's batch of frees on a */
    void *p;
    CHECK_OK(gpumem_allocate(mr, 4 * KiB, a, &p));
    use_on(a, p, 4 * KiB, 5);
    CHECK_OK(gpumem_deallocate(mr, p, 4 * KiB, a));
  }
  before = reserved(mr);
  waits = calls(GPUMEM_SIM_CALL_STREAM_WAIT);
  void *c1;
  CHECK_OK(gpumem_allocate(mr, 24 * MiB, c, &c1));
  use_on(c, c1, 24 * MiB, 6);
  CHECK_U64_EQ(reserved(mr), before);
  CHECK_U64_EQ(calls(GPUMEM_SIM_CALL_STREAM_WAIT) - waits, 1);
  check_valid(mr);

  CHECK_OK(gpumem_deallocate(mr, b1, 4 * MiB, b));
  CHECK_OK(gpumem_deallocate(mr, b2, 4 * MiB, b));
  CHECK_OK(gpumem_deallocate(mr, c1, 24 * MiB, c));
  check_valid(mr);
  CHECK_OK(gpumem_sim_complete_all());
  CHECK_OK(gpumem_stream_destroy(a));
  CHECK_OK(gpumem_stream_destroy(b));
  CHECK_OK(gpumem_stream_destroy(c));
  CHECK_OK(gpumem_resource_release(mr));
  printf("steal: the rest of a stolen block stays with its stream, one wait per seal\n");
}

static void test_growth_after_sealed_tail(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
  gpumem_stream a, b;
  CHECK_OK(gpumem_stream_create(0, &a));
  CHECK_OK(gpumem_stream_create(0, &b));
  void *p;
  CHECK_OK(gpumem_allocate(mr, 8 * MiB, a, &p));
  use_on(a, p, 8 * MiB, 1);
  second_stream(mr, b);
  CHECK_OK(gpumem_deallocate(mr, p, 8 * MiB, a)); /* the large region's tail, sealed */
  uint64_t before = reserved(mr);
  CHECK_OK(gpumem_allocate(mr, 12 * MiB, a, &p));
  use_on(a, p, 12 * MiB, 2);
  CHECK_U64_EQ(reserved(mr), before + 4 * MiB); /* the shortfall, not 12 MiB */
  check_valid(mr);
  CHECK_OK(gpumem_deallocate(mr, p, 12 * MiB, a));
  check_valid(mr);
  CHECK_OK(gpumem_sim_complete_all());
  CHECK_OK(gpumem_stream_destroy(a));
  CHECK_OK(gpumem_stream_destroy(b));
  CHECK_OK(gpumem_resource_release(mr));
  printf("growth: a sealed free tail grows by the shortfall\n");
}

/* A block freed open beside a sealed block of its set joins it, open: its own stream reuses
 * the two as one at once, with no event record; another stream only after the set's next
 * seal, and a wait. */
static void test_open_joins_sealed(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm)", &mr));
  gpumem_stream a, b;
  CHECK_OK(gpumem_stream_create(0, &a));
  CHECK_OK(gpumem_stream_create(0, &b));
  void *x, *y, *z;
  CHECK_OK(gpumem_allocate(mr, 4 * MiB, a, &x));
  CHECK_OK(gpumem_allocate(mr, 4 * MiB, a, &y));
  CHECK_OK(gpumem_allocate(mr, 4 * MiB, a, &z)); /* keeps the two from being the tail */
  use_on(a, x, 4 * MiB, 1);
  use_on(a, y, 4 * MiB, 1);
  use_on(a, z, 4 * MiB, 1);
  second_stream(mr, b);
  CHECK_OK(gpumem_deallocate(mr, x, 4 * MiB, a)); /* sealed: a's first free since */
  CHECK_OK(gpumem_deallocate(mr, y, 4 * MiB, a)); /* open, and x with it */
  uint64_t before = reserved(mr), records = calls(GPUMEM_SIM_CALL_EVENT_RECORD),
           waits = calls(GPUMEM_SIM_CALL_STREAM_WAIT);
  check_valid(mr);

  /* b cannot take the 8 MiB (open in a's set): it grows. */
  void *p, *q;
  CHECK_OK(gpumem_allocate(mr, 8 * MiB, b, &q));
  use_on(b, q, 8 * MiB, 2);
  CHECK(q != x);
  CHECK_U64_EQ(reserved(mr), before + 8 * MiB);
  CHECK_OK(gpumem_deallocate(mr, q, 8 * MiB, b));
  /* a takes them as one block, with no growth and no event record. */
  before = reserved(mr);
  CHECK_OK(gpumem_allocate(mr, 8 * MiB, a, &p));
  use_on(a, p, 8 * MiB, 3);
  CHECK(p == x);
  CHECK_U64_EQ(reserved(mr), before);
  CHECK_U64_EQ(calls(GPUMEM_SIM_CALL_EVENT_RECORD), records);
  check_valid(mr);

  /* Freed and sealed again (a batch of frees on a), a third stream takes them after a
   * wait (b's 8 MiB is open in b's set). */
  CHECK_OK(gpumem_deallocate(mr, p, 8 * MiB, a));
  for (int i = 0; i < 16; i++) {
    void *small;
    CHECK_OK(gpumem_allocate(mr, 4 * KiB, a, &small));
    CHECK_OK(gpumem_deallocate(mr, small, 4 * KiB, a));
  }
  CHECK(calls(GPUMEM_SIM_CALL_EVENT_RECORD) > records);
  gpumem_stream c;
  CHECK_OK(gpumem_stream_create(0, &c));
  before = reserved(mr);
  CHECK_OK(gpumem_allocate(mr, 8 * MiB, c, &q));
  use_on(c, q, 8 * MiB, 4);
  CHECK(q == x);
  CHECK_U64_EQ(reserved(mr), before);
  CHECK(calls(GPUMEM_SIM_CALL_STREAM_WAIT) > waits);
  check_valid(mr);
  CHECK_OK(gpumem_deallocate(mr, q, 8 * MiB, c));
  CHECK_OK(gpumem_stream_destroy(c));
  CHECK_OK(gpumem_deallocate(mr, z, 4 * MiB, a));
  check_valid(mr);
  CHECK_OK(gpumem_sim_complete_all());
  CHECK_OK(gpumem_stream_destroy(a));
  CHECK_OK(gpumem_stream_destroy(b));
  CHECK_OK(gpumem_resource_release(mr));
  printf("merging: an open block takes its sealed neighbours in, for its own stream\n");
}

int main(void) {
  check_init_backend();
  test_side_stream();
  test_steal_keeps_the_rest();
  test_growth_after_sealed_tail();
  test_open_joins_sealed();
  printf("pool streams passed\n");
  return 0;
}
