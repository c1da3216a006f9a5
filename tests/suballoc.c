/* suballoc.c: fixed_size, binning and gpumem_reinitialize keep their promises.
 *
 * - fixed_size: every block has the block size; blocks come `prealloc` at a time; a freed
 *   block is handed out again; larger requests are out of memory, over-alignment is
 *   unsupported, a wrong size is misuse.
 * - binning: nothing is taken at creation (bins are made when first used); requests go to
 *   the right bin, large ones to the upstream, and to bins added by the program.
 * - Over vmm, whose mappings come in granules (2 MiB), fixed_size and binning round their
 *   growth to whole granules and reserve no more than that; over cuda, exactly `prealloc`
 *   blocks at a time, whatever the block size.
 * - A bin of a size already present is replaced, but not while it holds live allocations.
 * - A pool over vmm with a maximum never maps more than it (growth in whole granules).
 * - Failed releases (simulated device): replacing a bin whose old resource cannot be
 *   destroyed changes nothing; a binning resource whose release fails keeps the program's
 *   bins; an upstream that cannot be destroyed after the resource above it was is released
 *   again later, not lost with its memory.
 * - A pool's own refusal at creation carries its reason, never an earlier stale message.
 * - reinitialize: the resource each option set builds, per device, all or nothing; a
 *   maximum below what a pool over vmm can keep gives a pool over cuda. */
#include "check.h"
#include "core/internal.h"
#include "gpumem/sim.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_fixed_size(void) {
  gpumem_resource *cuda, *mr;
  CHECK_OK(gpumem_cuda_create(0, &cuda));
  gpumem_fixed_size_options options = {.block_size = 64 << 10, .blocks_to_preallocate = 4};
  CHECK_OK(gpumem_fixed_size_create(cuda, &options, &mr));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 0);
  void *blocks[5];
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpumem_allocate(mr, 1 + i * 1000, NULL, &blocks[i]));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 4 * (64 << 10));
  for (int i = 1; i < 4; i++) /* whole blocks, one after another in the chunk */
    CHECK_EQ((char *)blocks[i] - (char *)blocks[i - 1], 64 << 10);
  CHECK_OK(gpumem_allocate(mr, 64 << 10, NULL, &blocks[4]));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 8 * (64 << 10));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), 1 + 1001 + 2001 + 3001 + (64 << 10));

  /* A freed block comes back. */
  CHECK_OK(gpumem_deallocate(mr, blocks[2], 2001, NULL));
  void *again;
  CHECK_OK(gpumem_allocate(mr, 7, NULL, &again));
  CHECK_PTR_EQ(again, blocks[2]);
  blocks[2] = again;

  void *ptr = (void *)0x3;
  CHECK_FAILS_WITH(gpumem_allocate(mr, (64 << 10) + 1, NULL, &ptr), GPUMEM_ERR_OUT_OF_MEMORY,
                   "larger than the resource's block size");
  CHECK_FAILS_WITH(gpumem_allocate_aligned(mr, 100, 4096, NULL, &ptr), GPUMEM_ERR_UNSUPPORTED,
                   "does not align");
  CHECK_PTR_EQ(ptr, (void *)0x3);
  CHECK_FAILS_WITH(gpumem_deallocate(mr, blocks[0], 2, NULL), GPUMEM_ERR_MISUSE,
                   "allocated with 1 bytes");
  CHECK_OK(gpumem_deallocate(mr, blocks[0], 1, NULL));
  CHECK_OK(gpumem_deallocate(mr, blocks[1], 1001, NULL));
  CHECK_OK(gpumem_deallocate(mr, blocks[2], 7, NULL));
  CHECK_OK(gpumem_deallocate(mr, blocks[3], 3001, NULL));
  CHECK_OK(gpumem_deallocate(mr, blocks[4], 64 << 10, NULL));
  char spec[256];
  CHECK_OK(gpumem_resource_describe(mr, spec, sizeof spec));
  CHECK_CONTAINS(spec, "fixed_size(cuda, block=65536, prealloc=4)");
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_LIVE_COUNT), 0);

  /* A block size that wraps when rounded up to the alignment. */
  gpumem_fixed_size_options huge = {.block_size = SIZE_MAX - 1, .blocks_to_preallocate = 1};
  gpumem_resource *bad = NULL;
  CHECK_FAILS_WITH(gpumem_fixed_size_create(cuda, &huge, &bad), GPUMEM_ERR_INVALID_ARGUMENT,
                   "overflows");
  CHECK_PTR_EQ(bad, NULL);
  CHECK_OK(gpumem_resource_release(cuda));
  printf("fixed_size passed\n");
}

static void test_binning(void) {
  gpumem_resource *cuda, *mr;
  CHECK_OK(gpumem_cuda_create(0, &cuda));
  gpumem_binning_options options = {.min_exponent = 10, .max_exponent = 16};
  CHECK_OK(gpumem_binning_create(cuda, &options, &mr));
  /* Bins are made when first used: creation takes nothing. */
  CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_RESERVED_BYTES), 0);

  void *small, *medium, *large;
  CHECK_OK(gpumem_allocate(mr, 100, NULL, &small)); /* the 1 KiB bin: one 2 MiB chunk */
  CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_RESERVED_BYTES), 2 << 20);
  CHECK_OK(gpumem_allocate(mr, 50000, NULL, &medium)); /* the 64 KiB bin */
  CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_RESERVED_BYTES), 4 << 20);
  CHECK_OK(gpumem_allocate(mr, 1 << 20, NULL, &large)); /* beyond the bins: the upstream */
  CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_LIVE_COUNT), 3);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 3);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), 100 + 50000 + (1 << 20));
  CHECK_OK(gpumem_deallocate(mr, large, 1 << 20, NULL));
  CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_LIVE_COUNT), 2);

  /* A bin the program adds: requests above 64 KiB up to 2 MiB go to it. */
  gpumem_resource *pool;
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=8MiB)", &pool));
  CHECK_OK(gpumem_binning_add_bin(mr, 2 << 20, pool));
  void *custom;
  CHECK_OK(gpumem_allocate(mr, 1 << 20, NULL, &custom));
  CHECK_U64_EQ(check_query(pool, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_OK(gpumem_deallocate(mr, custom, 1 << 20, NULL));
  CHECK_U64_EQ(check_query(pool, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(pool)); /* the binning resource retained it */

  CHECK_OK(gpumem_deallocate(mr, small, 100, NULL));
  CHECK_OK(gpumem_deallocate(mr, medium, 50000, NULL));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);

  CHECK_FAILS_WITH(gpumem_binning_add_bin(cuda, 1024, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not a binning resource");
  gpumem_resource *bad = NULL;
  gpumem_binning_options reversed = {.min_exponent = 20, .max_exponent = 10};
  CHECK_FAILS_WITH(gpumem_binning_create(cuda, &reversed, &bad), GPUMEM_ERR_INVALID_ARGUMENT,
                   "need 8 <= min <= max");
  CHECK_PTR_EQ(bad, NULL);
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(cuda));
  printf("binning passed\n");
}

/* 129 blocks of 3 KiB, 128 at a time: over cuda two growths of exactly 384 KiB; over vmm
 * one growth rounded up to a whole 2 MiB granule, which holds them all. */
static void test_growth_rounding(void) {
  static const struct {
    const char *spec;
    uint64_t reserved;
  } cases[] = {
      {"fixed_size(cuda, block=3072, prealloc=128)", 2 * 128 * 3072},
      {"fixed_size(vmm, block=3072, prealloc=128)", 2 << 20},
      {"binning(vmm, min=10, max=16)", 2 << 20}, /* the 4 KiB bin: one 2 MiB chunk */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    gpumem_resource *mr;
    CHECK_OK(gpumem_resource_from_spec(cases[c].spec, &mr));
    void *blocks[129];
    for (int i = 0; i < 129; i++)
      CHECK_OK(gpumem_allocate(mr, 3000, NULL, &blocks[i]));
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), cases[c].reserved);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 129);
    for (int i = 0; i < 129; i++)
      CHECK_OK(gpumem_deallocate(mr, blocks[i], 3000, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  }
  printf("growth rounding passed\n");
}

static const gpumem_binning_options without_bins = {.no_exponent_bins = 1};

/* Zeroed options, or none, mean the defaults: bins of 256 B to 1 MiB, as the spec's
 * binning(UPSTREAM); a request above 1 MiB goes to the upstream. */
static void test_binning_defaults(void) {
  gpumem_resource *cuda, *mr;
  CHECK_OK(gpumem_cuda_create(0, &cuda));
  const gpumem_binning_options zeroed = {0};
  const gpumem_binning_options *cases[] = {NULL, &zeroed};
  for (int c = 0; c < 2; c++) {
    CHECK_OK(gpumem_binning_create(cuda, cases[c], &mr));
    char text[1024];
    CHECK_OK(gpumem_resource_describe(mr, text, sizeof text));
    CHECK(strstr(text, "min=8, max=20") != NULL);
    void *tiny, *bin_sized, *beyond;
    CHECK_OK(gpumem_allocate(mr, 200, NULL, &tiny)); /* the 256 B bin: one 2 MiB chunk */
    CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_LIVE_COUNT), 1);
    CHECK_OK(gpumem_allocate(mr, 1 << 20, NULL, &bin_sized)); /* the 1 MiB bin's chunk */
    CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_LIVE_COUNT), 2);
    CHECK_OK(gpumem_allocate(mr, (1 << 20) + 1, NULL, &beyond)); /* straight upstream */
    CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_LIVE_COUNT), 3);
    CHECK_OK(gpumem_deallocate(mr, beyond, (1 << 20) + 1, NULL));
    CHECK_OK(gpumem_deallocate(mr, bin_sized, 1 << 20, NULL));
    CHECK_OK(gpumem_deallocate(mr, tiny, 200, NULL));
    CHECK_OK(gpumem_resource_release(mr));
  }
  /* Without exponent bins every request goes upstream until bins are added. */
  CHECK_OK(gpumem_binning_create(cuda, &without_bins, &mr));
  void *ptr;
  CHECK_OK(gpumem_allocate(mr, 200, NULL, &ptr));
  CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_LIVE_BYTES), 200);
  CHECK_OK(gpumem_deallocate(mr, ptr, 200, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(cuda));
  printf("binning defaults passed\n");
}

static void test_binning_replace(void) {
  gpumem_resource *cuda, *mr, *first, *second;
  CHECK_OK(gpumem_cuda_create(0, &cuda));
  CHECK_OK(gpumem_binning_create(cuda, &without_bins, &mr));
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=4MiB)", &first));
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=4MiB)", &second));
  CHECK_OK(gpumem_binning_add_bin(mr, 1 << 20, first));
  void *ptr;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &ptr));
  CHECK_U64_EQ(check_query(first, GPUMEM_QUERY_LIVE_COUNT), 1);

  /* The first bin holds a live block, whose free must still find it. */
  CHECK_FAILS_WITH(gpumem_binning_add_bin(mr, 1 << 20, second), GPUMEM_ERR_MISUSE,
                   "1 live allocations");
  CHECK_OK(gpumem_deallocate(mr, ptr, 1000, NULL));
  CHECK_U64_EQ(check_query(first, GPUMEM_QUERY_LIVE_COUNT), 0);

  CHECK_OK(gpumem_binning_add_bin(mr, 1 << 20, second));
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &ptr));
  CHECK_U64_EQ(check_query(second, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_U64_EQ(check_query(first, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_deallocate(mr, ptr, 1000, NULL));
  /* The binning resource let go of the first pool and holds the second. */
  CHECK_OK(gpumem_resource_release(first));
  CHECK_OK(gpumem_resource_release(second));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(cuda));
  printf("binning replace passed\n");
}

/* pool(vmm, max=3MiB): the 2.5 MiB request takes two whole granules (4 MiB), over the
 * maximum, so it fails; a growth cut to the request would map 4 MiB while counting 2.5. */
static void test_vmm_maximum(bool sim) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("pool(vmm, max=3MiB)", &mr));
  void *ptr = NULL;
  CHECK_FAILS_WITH(gpumem_allocate(mr, (5 << 20) / 2, NULL, &ptr), GPUMEM_ERR_OUT_OF_MEMORY,
                   "maximum size");
  CHECK_OK(gpumem_allocate(mr, 256 << 10, NULL, &ptr));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 2 << 20);
  if (sim) {
    uint64_t mapped;
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped, 2 << 20);
  }
  CHECK_OK(gpumem_deallocate(mr, ptr, 256 << 10, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("vmm maximum passed\n");
}

/* A block of 32 pieces or more is made of pieces twice the size, cut at every multiple of
 * that from the range's start, as the capabilities tell the pools above; unmap_pieces takes
 * whole ones only. After 62 MiB over 2 MiB pieces (31 of them), 64 MiB from 62 MiB takes a
 * 2 MiB piece up to 64, fifteen of 4 MiB and one of 2: 17. */
static void test_vmm_large_blocks(bool sim) {
  enum { MiB = 1 << 20 };
  gpumem_resource *vmm;
  CHECK_OK(gpumem_resource_from_spec("vmm(piece=2MiB)", &vmm));
  CHECK_U64_EQ(vmm->caps.large_block_size, 64 * MiB);
  CHECK_U64_EQ(vmm->caps.large_piece_size, 4 * MiB);
  uint64_t creates = sim ? gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) : 0;
  char *small, *large;
  CHECK_OK(gpumem_allocate(vmm, 62 * MiB, NULL, (void **)&small));
  if (sim)
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) - creates, 31);
  CHECK_OK(gpumem_allocate(vmm, 64 * MiB, NULL, (void **)&large));
  CHECK_PTR_EQ(large, small + 62 * MiB);
  if (sim)
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) - creates, 31 + 17);
  int added = 0;
  CHECK_OK(gpumem_stream_synchronize(NULL));
  CHECK_FAILS_WITH(vmm->ops->unmap_pieces(vmm, (uintptr_t)large + 2 * MiB, 2 * MiB, &added),
                   GPUMEM_ERR_INTERNAL, "not a run of whole mapped pieces");
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 126 * MiB);
  CHECK_OK(vmm->ops->unmap_pieces(vmm, (uintptr_t)large + 2 * MiB, 8 * MiB, &added));
  CHECK_EQ(added, 1);
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 118 * MiB);
  /* What is left is two allocations, each freed on its own. */
  CHECK_OK(gpumem_deallocate(vmm, large, 2 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(vmm, large + 10 * MiB, 54 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(vmm, small, 62 * MiB, NULL));
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_OK(gpumem_resource_release(vmm));
  printf("vmm large blocks passed\n");
}

/* While vmm's pieces are held (what a pool's release of holes does around the growth after
 * it), the physical memory of pieces unmapped stays, counted as reserved, and is mapped
 * again for pieces of its size instead of being made anew; the rest goes when the hold
 * ends. Held memory whose map fails goes at once; nothing else changes. */
static void test_vmm_held_pieces(bool sim) {
  enum { MiB = 1 << 20 };
  gpumem_resource *vmm;
  CHECK_OK(gpumem_resource_from_spec("vmm(piece=2MiB)", &vmm));
  char *first, *again;
  CHECK_OK(gpumem_allocate(vmm, 6 * MiB, NULL, (void **)&first));
  uint64_t creates = sim ? gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) : 0;
  uint64_t mapped;
  gpumem__hold_pieces(vmm, true);
  CHECK_OK(gpumem_deallocate(vmm, first, 6 * MiB, NULL));
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 6 * MiB);
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_allocate(vmm, 4 * MiB, NULL, (void **)&again));
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 6 * MiB); /* 4 mapped, 2 held */
  if (sim) {
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) - creates, 0);
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped, 6 * MiB);
  }
  gpumem__hold_pieces(vmm, false);
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 4 * MiB);
  if (sim) {
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped, 4 * MiB);
    CHECK_OK(gpumem_sim_launch(NULL, again, 4 * MiB, 5)); /* mapped again with access */
    CHECK_OK(gpumem_sim_complete(NULL));
    CHECK_EQ(again[4 * MiB - 1], 5);
    gpumem__hold_pieces(vmm, true);
    CHECK_OK(gpumem_deallocate(vmm, again, 4 * MiB, NULL));
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_MAP, 1));
    CHECK_FAILS_WITH(gpumem_allocate(vmm, 2 * MiB, NULL, (void **)&first), GPUMEM_ERR_CUDA,
                     "mapping");
    CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 2 * MiB);
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped, 2 * MiB);
    CHECK_OK(gpumem_allocate(vmm, 2 * MiB, NULL, (void **)&first));
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) - creates, 0);
    gpumem__hold_pieces(vmm, false);
  } else {
    CHECK_OK(gpumem_deallocate(vmm, again, 4 * MiB, NULL));
    CHECK_OK(gpumem_allocate(vmm, 2 * MiB, NULL, (void **)&first));
  }
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 2 * MiB);
  if (sim) {
    /* Held memory of sizes a growth does not map goes before it makes new memory, so that the
     * device never has both: 4 MiB held, 2 MiB wanted, 4 MiB at the peak, not 6. */
    gpumem_resource *big;
    char *four, *two, *six;
    uint64_t others; /* what the first vmm maps */
    CHECK_OK(gpumem_sim_device_used(0, &others));
    CHECK_OK(gpumem_resource_from_spec("vmm(piece=4MiB)", &big));
    CHECK_OK(gpumem_allocate(big, 4 * MiB, NULL, (void **)&four));
    gpumem__hold_pieces(big, true);
    CHECK_OK(gpumem_deallocate(big, four, 4 * MiB, NULL));
    CHECK_OK(gpumem_allocate(big, 2 * MiB, NULL, (void **)&two));
    CHECK_U64_EQ(check_query(big, GPUMEM_QUERY_RESERVED_BYTES), 2 * MiB);
    CHECK_U64_EQ(check_query(big, GPUMEM_QUERY_PEAK_RESERVED_BYTES), 4 * MiB);
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped - others, 2 * MiB);
    gpumem__hold_pieces(big, false);
    CHECK_OK(gpumem_deallocate(big, two, 2 * MiB, NULL));
    /* A run that maps one held piece again and makes another keeps the one it maps: 4 + 2
     * held, 4 + 4 wanted, 8 MiB at the peak, not 10, and one piece made. */
    CHECK_OK(gpumem_allocate(big, 6 * MiB, NULL, (void **)&six));
    gpumem__hold_pieces(big, true);
    CHECK_OK(gpumem_deallocate(big, six, 6 * MiB, NULL));
    uint64_t peak = check_query(big, GPUMEM_QUERY_PEAK_RESERVED_BYTES);
    creates = gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE);
    CHECK_OK(gpumem_allocate(big, 8 * MiB, NULL, (void **)&six));
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) - creates, 1);
    CHECK_U64_EQ(check_query(big, GPUMEM_QUERY_RESERVED_BYTES), 8 * MiB);
    CHECK_U64_EQ(check_query(big, GPUMEM_QUERY_PEAK_RESERVED_BYTES),
                 peak > 8 * MiB ? peak : 8 * MiB);
    gpumem__hold_pieces(big, false);
    CHECK_OK(gpumem_deallocate(big, six, 8 * MiB, NULL));
    /* A device out of memory gets held memory back before a growth fails: 4 MiB held for the
     * run's second piece, its first (2 MiB, after a live block) refused once. */
    CHECK_OK(gpumem_allocate(big, 4 * MiB, NULL, (void **)&four));
    CHECK_OK(gpumem_allocate(big, 2 * MiB, NULL, (void **)&two));
    gpumem__hold_pieces(big, true);
    CHECK_OK(gpumem_deallocate(big, four, 4 * MiB, NULL));
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_CREATE, 1));
    CHECK_OK(gpumem_allocate(big, 6 * MiB, NULL, (void **)&six));
    CHECK_U64_EQ(check_query(big, GPUMEM_QUERY_RESERVED_BYTES), 8 * MiB);
    gpumem__hold_pieces(big, false);
    CHECK_OK(gpumem_deallocate(big, six, 6 * MiB, NULL));
    CHECK_OK(gpumem_deallocate(big, two, 2 * MiB, NULL));
    CHECK_OK(gpumem_resource_release(big));
  }
  /* Held when it is released: what is held goes with it. */
  gpumem__hold_pieces(vmm, true);
  CHECK_OK(gpumem_deallocate(vmm, first, 2 * MiB, NULL));
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 2 * MiB);
  CHECK_OK(gpumem_resource_release(vmm));
  if (sim) {
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped, 0);
  }
  printf("vmm held pieces passed\n");
}

/* vmm makes physical memory in pieces cut at multiples of the piece size: 5 MiB with 2 MiB
 * pieces are three pieces (6 MiB mapped), one allocation of 5 MiB, freed only whole. */
static void test_vmm_pieces(bool sim) {
  enum { MiB = 1 << 20 };
  gpumem_resource *vmm;
  CHECK_OK(gpumem_resource_from_spec("vmm(piece=2MiB)", &vmm));
  char text[256];
  CHECK_OK(gpumem_resource_describe(vmm, text, sizeof text));
  CHECK(strstr(text, "piece=2097152") != NULL);
  uint64_t creates = sim ? gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) : 0;
  char *ptr;
  CHECK_OK(gpumem_allocate(vmm, 5 * MiB, NULL, (void **)&ptr));
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 6 * MiB);
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_LIVE_BYTES), 5 * MiB);
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_LIVE_COUNT), 1);
  if (sim) {
    CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_CREATE) - creates, 3);
    CHECK_OK(gpumem_sim_launch(NULL, ptr, 5 * MiB, 7)); /* one access setting covers all */
    CHECK_OK(gpumem_sim_complete(NULL));
    CHECK_EQ(ptr[5 * MiB - 1], 7);
  }
  CHECK_FAILS_WITH(gpumem_deallocate(vmm, ptr + 2 * MiB, 3 * MiB, NULL), GPUMEM_ERR_MISUSE,
                   "not a live allocation");
  CHECK_FAILS_WITH(gpumem_deallocate(vmm, ptr, 6 * MiB, NULL), GPUMEM_ERR_MISUSE,
                   "allocated with 5242880 bytes");
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 6 * MiB);
  CHECK_OK(gpumem_deallocate(vmm, ptr, 5 * MiB, NULL));
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_LIVE_COUNT), 0);
  if (sim) { /* a piece that cannot be made: the ones made before it go, nothing is left */
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_CREATE, 3));
    CHECK_STATUS(gpumem_allocate(vmm, 5 * MiB, NULL, (void **)&ptr), GPUMEM_ERR_OUT_OF_MEMORY);
    uint64_t mapped;
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped, 0);
    CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 0);
    CHECK_OK(gpumem_allocate(vmm, 5 * MiB, NULL, (void **)&ptr));
    CHECK_OK(gpumem_deallocate(vmm, ptr, 5 * MiB, NULL));
    /* The undo's unmap fails too: the two pieces made stay mapped, counted and on file, of
     * no allocation; their addresses are not handed out again, a free of them is refused,
     * the first release fails while they cannot be unmapped and the next gives them back. */
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_CREATE, 3));
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_UNMAP, 1));
    CHECK_STATUS(gpumem_allocate(vmm, 5 * MiB, NULL, (void **)&ptr), GPUMEM_ERR_OUT_OF_MEMORY);
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped, 4 * MiB);
    CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 4 * MiB);
    CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_LIVE_COUNT), 0);
    char *after;
    CHECK_OK(gpumem_allocate(vmm, 2 * MiB, NULL, (void **)&after));
    uintptr_t stranded_start = (uintptr_t)after - 4 * MiB; /* the lowest free address after them */
    CHECK_FAILS_WITH(gpumem_deallocate(vmm, (void *)stranded_start, 2 * MiB, NULL),
                     GPUMEM_ERR_MISUSE, "allocated with 0 bytes");
    CHECK_OK(gpumem_deallocate(vmm, after, 2 * MiB, NULL));
    CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_VMM_UNMAP, 1));
    CHECK_FAILS_WITH(gpumem_resource_release(vmm), GPUMEM_ERR_CUDA, "to destroy it");
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK(mapped > 0);
  }
  CHECK_OK(gpumem_resource_release(vmm));
  if (sim) {
    uint64_t mapped;
    CHECK_OK(gpumem_sim_device_used(0, &mapped));
    CHECK_U64_EQ(mapped, 0);
  }

  /* More than the whole reserved range fails at once, before room is made for the records
   * of its pieces (a petabyte in 2 MiB pieces would need gigabytes of them). */
  CHECK_OK(gpumem_resource_from_spec("vmm(reserve=64MiB, piece=2MiB)", &vmm));
  CHECK_FAILS_WITH(gpumem_allocate(vmm, (size_t)1 << 50, NULL, (void **)&ptr),
                   GPUMEM_ERR_OUT_OF_MEMORY, "its reserved address range is full");
  /* The range starts at a multiple of the granularity only: an alignment whose first multiple
   * in it could leave too little room after it fails whatever the range's address, so that
   * a spec that builds in one process builds in every one. The first multiple lies at most
   * the alignment less a granule (2 MiB) into this 64 MiB range: 32 MiB at an alignment of
   * 32 MiB, 62 MiB at 4 MiB and 2 MiB at 64 MiB always fit; 32 MiB at 64 MiB, 4 MiB at 64
   * MiB and 2 MiB at 32 GiB fail, even where the range happens to start at such a multiple;
   * up to the granularity the whole range fits. */
  uint64_t before = check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES);
  const size_t fits[][2] = {{32 * MiB, 32 * MiB}, {62 * MiB, 4 * MiB}, {2 * MiB, 64 * MiB}};
  for (size_t i = 0; i < sizeof fits / sizeof fits[0]; i++) {
    CHECK_OK(gpumem_allocate_aligned(vmm, fits[i][0], fits[i][1], NULL, (void **)&ptr));
    CHECK((uintptr_t)ptr % fits[i][1] == 0);
    CHECK_OK(gpumem_deallocate_aligned(vmm, ptr, fits[i][0], fits[i][1], NULL));
  }
  CHECK_FAILS_WITH(gpumem_allocate_aligned(vmm, 4 * MiB, 64 * MiB, NULL, (void **)&ptr),
                   GPUMEM_ERR_OUT_OF_MEMORY, "cannot promise an alignment of 67108864");
  CHECK_FAILS_WITH(gpumem_allocate_aligned(vmm, 32 * MiB, 64 * MiB, NULL, (void **)&ptr),
                   GPUMEM_ERR_OUT_OF_MEMORY, "cannot promise an alignment of 67108864");
  CHECK_FAILS_WITH(gpumem_allocate_aligned(vmm, 2 * MiB, (size_t)32 << 30, NULL, (void **)&ptr),
                   GPUMEM_ERR_OUT_OF_MEMORY, "cannot promise an alignment of 34359738368");
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), before);
  CHECK_OK(gpumem_allocate_aligned(vmm, 64 * MiB, 2 * MiB, NULL, (void **)&ptr));
  CHECK_OK(gpumem_deallocate_aligned(vmm, ptr, 64 * MiB, 2 * MiB, NULL));
  /* Pieces filed between others keep their order: the middle of three allocations is
   * freed and made again in its place, smaller. */
  char *first, *middle, *last;
  CHECK_OK(gpumem_allocate(vmm, 6 * MiB, NULL, (void **)&first));
  CHECK_OK(gpumem_allocate(vmm, 6 * MiB, NULL, (void **)&middle));
  CHECK_OK(gpumem_allocate(vmm, 6 * MiB, NULL, (void **)&last));
  CHECK_OK(gpumem_deallocate(vmm, middle, 6 * MiB, NULL));
  char *again;
  CHECK_OK(gpumem_allocate(vmm, 4 * MiB, NULL, (void **)&again));
  CHECK_PTR_EQ(again, middle);
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 16 * MiB);
  CHECK_FAILS_WITH(gpumem_deallocate(vmm, again + 2 * MiB, 2 * MiB, NULL), GPUMEM_ERR_MISUSE,
                   "not a live allocation");
  CHECK_FAILS_WITH(gpumem_deallocate(vmm, last, 4 * MiB, NULL), GPUMEM_ERR_MISUSE,
                   "allocated with 6291456 bytes");
  CHECK_OK(gpumem_deallocate(vmm, first, 6 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(vmm, last, 6 * MiB, NULL));
  CHECK_OK(gpumem_deallocate(vmm, again, 4 * MiB, NULL));
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(vmm));

  /* The default piece is 32 MiB. */
  CHECK_OK(gpumem_resource_from_spec("vmm", &vmm));
  CHECK_OK(gpumem_resource_describe(vmm, text, sizeof text));
  CHECK(strstr(text, "piece=33554432") != NULL);
  CHECK_OK(gpumem_resource_release(vmm));
  printf("vmm pieces passed\n");
}

/* Releases whose destroy fails on the simulated device (a pool synchronizes before giving
 * its chunks back; the synchronization is made to fail). */
static void test_failed_releases(void) {
  gpumem_resource *cuda, *mr, *first, *second;
  void *ptr;
  CHECK_OK(gpumem_cuda_create(0, &cuda));

  /* Replacing a bin: the old one cannot be destroyed, so the bin stays as it was. */
  CHECK_OK(gpumem_binning_create(cuda, &without_bins, &mr));
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=4MiB)", &first));
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=4MiB)", &second));
  CHECK_OK(gpumem_binning_add_bin(mr, 1 << 20, first));
  CHECK_OK(gpumem_resource_release(first)); /* the binning resource holds the only handle */
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_SYNCHRONIZE, 1));
  CHECK_FAILS_WITH(gpumem_binning_add_bin(mr, 1 << 20, second), GPUMEM_ERR_CUDA, "not destroyed");
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &ptr));
  CHECK_U64_EQ(check_query(second, GPUMEM_QUERY_LIVE_COUNT), 0); /* it went to `first` */
  CHECK_OK(gpumem_deallocate(mr, ptr, 1000, NULL));
  CHECK_OK(gpumem_binning_add_bin(mr, 1 << 20, second)); /* now `first` can go */
  CHECK_OK(gpumem_resource_release(second));
  CHECK_OK(gpumem_resource_release(mr));

  /* A binning resource whose release fails keeps the program's bin: the bin it made
   * itself (1 KiB) goes first, and its destroy is the one that fails. */
  gpumem_binning_options options = {.min_exponent = 10, .max_exponent = 16};
  CHECK_OK(gpumem_binning_create(cuda, &options, &mr));
  CHECK_OK(gpumem_resource_from_spec("pool(cuda, initial=4MiB)", &first));
  CHECK_OK(gpumem_binning_add_bin(mr, 2 << 20, first));
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(mr, ptr, 1000, NULL));
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_SYNCHRONIZE, 1));
  CHECK_FAILS_WITH(gpumem_resource_release(mr), GPUMEM_ERR_CUDA, "handle is still yours");
  CHECK_OK(gpumem_allocate(mr, 1 << 20, NULL, &ptr));
  CHECK_U64_EQ(check_query(first, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_OK(gpumem_deallocate(mr, ptr, 1 << 20, NULL));
  CHECK_OK(gpumem_resource_release(first));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_LIVE_COUNT), 0);

  /* The last release of a binning resource over a pool: its bin's pool is destroyed (the
   * first synchronization), the upstream pool's destroy fails (the second). The release
   * succeeded, as the binning resource is gone; the upstream pool is destroyed at the next
   * release call, with its memory. */
  CHECK_OK(gpumem_resource_from_spec("binning(pool(cuda, initial=4MiB), min=10, max=16)", &mr));
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(mr, ptr, 1000, NULL));
  uint64_t used;
  CHECK_OK(gpumem_sim_device_used(0, &used));
  CHECK(used > 0);
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_SYNCHRONIZE, 2));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_sim_device_used(0, &used));
  CHECK(used > 0); /* the upstream pool is still there */
  CHECK_OK(gpumem_resource_release(NULL));
  CHECK_OK(gpumem_sim_device_used(0, &used));
  CHECK_U64_EQ(used, 0);
  CHECK_OK(gpumem_resource_release(cuda));
  printf("failed releases passed\n");
}

static void describe_current(int device, char *spec, size_t size) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_get_per_device_resource(device, &mr));
  CHECK_OK(gpumem_resource_describe(mr, spec, size));
}

static void test_reinitialize(bool vmm_supported) {
  char spec[256];
  gpumem_reinitialize_options options = {0};
  CHECK_OK(gpumem_reinitialize(&options));
  describe_current(0, spec, sizeof spec);
  CHECK(strcmp(spec, "cuda") == 0);

  options.pool_allocator = 1;
  CHECK_OK(gpumem_reinitialize(&options));
  describe_current(0, spec, sizeof spec);
  CHECK_CONTAINS(spec, vmm_supported ? "pool(vmm(" : "pool(cuda,");

  options.managed_memory = 1;
  CHECK_OK(gpumem_reinitialize(&options));
  describe_current(0, spec, sizeof spec);
  CHECK_CONTAINS(spec, "pool(managed(");

  options.pool_allocator = 0;
  CHECK_OK(gpumem_reinitialize(&options));
  describe_current(0, spec, sizeof spec);
  CHECK_CONTAINS(spec, "managed(");

  int count = 0;
  CHECK_OK(gpumem_device_count(&count));
  if (count >= 2) {
    int both[] = {0, 1};
    gpumem_reinitialize_options pools = {
        .pool_allocator = 1, .devices = both, .device_count = 2, .maximum_pool_size = 1 << 30};
    CHECK_OK(gpumem_reinitialize(&pools));
    for (int device = 0; device < 2; device++) {
      describe_current(device, spec, sizeof spec);
      CHECK_CONTAINS(spec, "max=1073741824");
      gpumem_resource *mr;
      CHECK_OK(gpumem_get_per_device_resource(device, &mr));
      CHECK_EQ(gpumem_resource_device(mr), device);
    }
    /* All or nothing: device 99 does not exist, so device 0 keeps its pool. */
    int bad[] = {0, 99};
    gpumem_reinitialize_options broken = {.devices = bad, .device_count = 2};
    CHECK_FAILS_WITH(gpumem_reinitialize(&broken), GPUMEM_ERR_INVALID_DEVICE, "device 99");
    describe_current(0, spec, sizeof spec);
    CHECK_CONTAINS(spec, "max=1073741824");
  }
  gpumem_reinitialize_options inverted = {
      .pool_allocator = 1, .initial_pool_size = 2 << 20, .maximum_pool_size = 1 << 20};
  CHECK_FAILS_WITH(gpumem_reinitialize(&inverted), GPUMEM_ERR_INVALID_ARGUMENT,
                   "Initial pool size exceeds the maximum pool size (2097152 > 1048576 bytes)");
  CHECK_FAILS_WITH(gpumem_reinitialize(NULL), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");

  /* A maximum below a vmm granule (2 MiB), or one that cannot hold the initial size in
   * whole granules, is kept by a pool over cuda; one that can stays over vmm. */
  gpumem_reinitialize_options small = {
      .pool_allocator = 1, .initial_pool_size = 2048, .maximum_pool_size = 8192};
  CHECK_OK(gpumem_reinitialize(&small));
  describe_current(0, spec, sizeof spec);
  CHECK_CONTAINS(spec, "pool(cuda, initial=2048, max=8192)");
  small.initial_pool_size = 0;
  CHECK_OK(gpumem_reinitialize(&small));
  describe_current(0, spec, sizeof spec);
  CHECK_CONTAINS(spec, "pool(cuda, initial=8192, max=8192)"); /* the default, at most the max */
  small.initial_pool_size = 3 << 20;
  small.maximum_pool_size = 3 << 20;
  CHECK_OK(gpumem_reinitialize(&small));
  describe_current(0, spec, sizeof spec);
  CHECK_CONTAINS(spec, "pool(cuda, initial=3145728");
  small.initial_pool_size = 0;
  CHECK_OK(gpumem_reinitialize(&small));
  describe_current(0, spec, sizeof spec);
  CHECK_CONTAINS(spec, vmm_supported ? "pool(vmm(" : "pool(cuda,");
  gpumem_resource *current;
  CHECK_OK(gpumem_get_per_device_resource(0, &current));
  void *ptr;
  CHECK_OK(gpumem_allocate(current, 1 << 20, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(current, ptr, 1 << 20, NULL));
  printf("reinitialize passed (%s)\n", vmm_supported ? "vmm" : "no vmm");
}

/* On a simulated device without virtual memory management the pool goes over cuda. Run in a
 * child: the simulated device is configured before first use. */
static void test_reinitialize_without_vmm(void) {
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    gpumem_sim_config config = {.no_vmm = 1};
    if (gpumem_sim_configure(&config) != GPUMEM_OK)
      _exit(3);
    test_reinitialize(false);
    /* The vmm upstream itself says why it cannot be made. */
    gpumem_resource *vmm = (gpumem_resource *)0x1;
    CHECK_FAILS_WITH(gpumem_vmm_create(0, NULL, &vmm), GPUMEM_ERR_UNSUPPORTED,
                     "does not support virtual memory management");
    CHECK_PTR_EQ(vmm, (gpumem_resource *)0x1);
    printf("vmm on a device without virtual memory management: unsupported\n");
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A pool's own refusal (at its maximum: over vmm no granule fits under 8 KiB) says so and
 * nothing else: not the message of an earlier failure of another resource. */
static void test_no_stale_message(void) {
  gpumem_resource *cuda, *vmm, *pool = NULL;
  void *ptr = (void *)0x1;
  CHECK_OK(gpumem_cuda_create(0, &cuda));
  CHECK_FAILS_WITH(gpumem_allocate(cuda, (size_t)1 << 60, NULL, &ptr), GPUMEM_ERR_OUT_OF_MEMORY,
                   "allocating 1 EiB (1152921504606846976 B) from cuda");
  CHECK_OK(gpumem_vmm_create(0, NULL, &vmm));
  gpumem_pool_options options = {.initial_size = 2048, .maximum_size = 8192};
  CHECK_FAILS_WITH(gpumem_pool_create(vmm, &options, &pool), GPUMEM_ERR_OUT_OF_MEMORY,
                   "gpumem_pool_create: taking the initial 2048 bytes: the pool has reached its "
                   "maximum size");
  CHECK(strstr(gpumem_last_error_message(), "cuda") == NULL);
  CHECK(strstr(gpumem_last_error_message(), "EiB") == NULL);
  CHECK_PTR_EQ(pool, NULL);
  /* An upstream's refusal still follows the pool's reason. */
  options = (gpumem_pool_options){.initial_size = (size_t)1 << 50};
  CHECK_FAILS_WITH(gpumem_pool_create(cuda, &options, &pool), GPUMEM_ERR_OUT_OF_MEMORY,
                   "taking the initial 1125899906842624 bytes: its upstream could not give "
                   "more memory: out of memory: allocating 1 PiB");
  CHECK_OK(gpumem_resource_release(vmm));
  CHECK_OK(gpumem_resource_release(cuda));
  printf("no stale message passed\n");
}

int main(void) {
  bool sim = getenv("GPUMEM_DEVICE") && strcmp(getenv("GPUMEM_DEVICE"), "sim") == 0;
  if (sim)
    test_reinitialize_without_vmm(); /* before this process starts its own backend */
  check_init_backend();
  test_fixed_size();
  test_binning();
  test_growth_rounding();
  test_binning_defaults();
  test_binning_replace();
  test_vmm_maximum(sim);
  test_vmm_pieces(sim);
  test_vmm_large_blocks(sim);
  test_vmm_held_pieces(sim);
  if (sim)
    test_failed_releases();
  test_no_stale_message();
  test_reinitialize(true);
  return 0;
}
