/* contract.c: the resource contract's data holds through composition.
 *
 * - Every resource reports what it can do (device, kind of memory, stream order, placement
 *   at chosen addresses) through gpumem_resource_get_capabilities; bad arguments are refused
 *   and an older, smaller struct gets only the fields it knows.
 * - A pass-through adaptor reports its upstream's capabilities, so a pool over any chain of
 *   them over vmm grows in place exactly as pool(vmm): the same reserved bytes, the same
 *   addresses, and a trim that unmaps the same pieces, with the adaptor's own live counts
 *   kept right when a trim cuts an allocation in two.
 * - Placement is read only from an operations table new enough to have it (internal). */
#include "check.h"
#include "core/internal.h"

#include <string.h>

static gpumem_resource_capabilities capabilities_of(const gpumem_resource *mr) {
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_OK(gpumem_resource_get_capabilities(mr, &caps));
  CHECK_EQ(caps.version, GPUMEM_CAPABILITIES_VERSION);
  CHECK_EQ(caps.size, sizeof caps);
  return caps;
}

typedef struct expected_caps {
  const char *spec;
  gpumem_memory_kind memory;
  int stream_ordered;
  int places_at_address;
} expected_caps;

static void test_capabilities(bool vmm_supported) {
  static const expected_caps cases[] = {
      {"cuda", GPUMEM_MEMORY_DEVICE, 0, 0},
      {"async", GPUMEM_MEMORY_DEVICE, 1, 0},
      {"managed", GPUMEM_MEMORY_MANAGED, 0, 0},
      {"pinned_host", GPUMEM_MEMORY_PINNED_HOST, 0, 0},
      {"vmm", GPUMEM_MEMORY_DEVICE, 0, 1},
      {"faulty(vmm)", GPUMEM_MEMORY_DEVICE, 0, 1},
      {"faulty(faulty(vmm))", GPUMEM_MEMORY_DEVICE, 0, 1},
      {"faulty(async)", GPUMEM_MEMORY_DEVICE, 1, 0},
      {"faulty(managed)", GPUMEM_MEMORY_MANAGED, 0, 0},
      {"pool(vmm)", GPUMEM_MEMORY_DEVICE, 1, 0},
      {"pool(managed)", GPUMEM_MEMORY_MANAGED, 1, 0},
      {"pool(pinned_host)", GPUMEM_MEMORY_PINNED_HOST, 1, 0},
      {"faulty(pool(managed))", GPUMEM_MEMORY_MANAGED, 1, 0},
      {"arena(vmm)", GPUMEM_MEMORY_DEVICE, 1, 0},
      {"binning(pool(managed))", GPUMEM_MEMORY_MANAGED, 1, 0},
      {"fixed_size(pinned_host)", GPUMEM_MEMORY_PINNED_HOST, 1, 0},
      {"limit(vmm, max=1GiB)", GPUMEM_MEMORY_DEVICE, 0, 1},
      {"prefetch(limit(vmm, max=1GiB))", GPUMEM_MEMORY_DEVICE, 0, 1},
      {"aligned(vmm, alignment=64KiB)", GPUMEM_MEMORY_DEVICE, 0, 1},
      {"aligned(vmm, alignment=64MiB)", GPUMEM_MEMORY_DEVICE, 0, 0},
      {"retry(vmm)", GPUMEM_MEMORY_DEVICE, 0, 1},
      {"retry(async)", GPUMEM_MEMORY_DEVICE, 1, 0},
      {"prefetch(pool(managed))", GPUMEM_MEMORY_MANAGED, 1, 0},
      {"limit(pinned_host, max=1GiB)", GPUMEM_MEMORY_PINNED_HOST, 0, 0},
      {"tracking(vmm)", GPUMEM_MEMORY_DEVICE, 0, 1},
      {"tracking(pool(managed), stacks=true)", GPUMEM_MEMORY_MANAGED, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (!vmm_supported && strstr(cases[i].spec, "vmm"))
      continue;
    gpumem_resource *mr;
    CHECK_OK(gpumem_resource_from_spec(cases[i].spec, &mr));
    gpumem_resource_capabilities caps = capabilities_of(mr);
    if (caps.memory != cases[i].memory || caps.stream_ordered != cases[i].stream_ordered ||
        caps.places_at_address != cases[i].places_at_address)
      CHECK_FAIL_("%s: memory %d, stream_ordered %d, places_at_address %d; expected %d, %d, %d",
                  cases[i].spec, (int)caps.memory, caps.stream_ordered, caps.places_at_address,
                  (int)cases[i].memory, cases[i].stream_ordered, cases[i].places_at_address);
    CHECK_EQ(caps.device, gpumem_resource_device(mr));
    if (caps.places_at_address) {
      CHECK(caps.granularity > 0 && caps.piece_size % caps.granularity == 0);
    } else {
      CHECK_U64_EQ(caps.granularity, 0);
      CHECK_U64_EQ(caps.piece_size, 0);
    }
    CHECK_OK(gpumem_resource_release(mr));
  }
  printf("capabilities of %zu compositions\n", sizeof cases / sizeof cases[0]);
}

static void test_capabilities_bad_input(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("faulty(cuda)", &mr));
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_FAILS_WITH(gpumem_resource_get_capabilities(NULL, &caps), GPUMEM_ERR_INVALID_ARGUMENT,
                   "resource is NULL");
  CHECK_FAILS_WITH(gpumem_resource_get_capabilities(mr, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "caps is NULL");
  caps.size = 4;
  caps.device = 12345;
  CHECK_FAILS_WITH(gpumem_resource_get_capabilities(mr, &caps), GPUMEM_ERR_INVALID_ARGUMENT,
                   "set it to sizeof");
  CHECK_EQ(caps.device, 12345); /* untouched */
  /* A caller built against a larger, later struct: the fields this library knows are
   * filled, the rest untouched. */
  struct {
    gpumem_resource_capabilities known;
    uint64_t later_field;
  } larger = {.known = {.size = sizeof larger}, .later_field = 77};
  CHECK_OK(gpumem_resource_get_capabilities(mr, &larger.known));
  CHECK_U64_EQ(larger.later_field, 77);
  CHECK_EQ(larger.known.memory, GPUMEM_MEMORY_DEVICE);
  CHECK_OK(gpumem_resource_release(mr));
}

/* Allocations and frees of 3 MiB blocks, the pattern that made a pool over faulty(vmm)
 * hold a thousand times what pool(vmm) held when the pool recognised vmm by its table. */
static uint64_t reserved_after_pairs(const char *spec, uintptr_t *first_address) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec(spec, &mr));
  for (int i = 0; i < 8; i++) {
    void *p;
    CHECK_OK(gpumem_allocate(mr, (size_t)3 << 20, NULL, &p));
    if (i == 0)
      *first_address = (uintptr_t)p;
    CHECK_OK(gpumem_deallocate(mr, p, (size_t)3 << 20, NULL));
  }
  uint64_t reserved = check_query(mr, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK_OK(gpumem_resource_release(mr));
  return reserved;
}

static void test_pool_over_pass_through(void) {
  uintptr_t plain_at, wrapped_at;
  uint64_t plain = reserved_after_pairs("pool(vmm)", &plain_at);
  CHECK_U64_EQ(plain, 4 << 20);
  static const char *const wrapped[] = {"pool(faulty(vmm))", "pool(faulty(faulty(vmm)))",
                                        "pool(limit(vmm, max=64GiB))",
                                        "pool(retry(prefetch(aligned(vmm))))"};
  for (size_t i = 0; i < sizeof wrapped / sizeof wrapped[0]; i++) {
    CHECK_U64_EQ(reserved_after_pairs(wrapped[i], &wrapped_at), plain);
    CHECK(wrapped_at != 0);
  }
  printf("pool over pass-through adaptors over vmm: %llu bytes reserved, as pool(vmm)\n",
         (unsigned long long)plain);
}

/* A trim through an adaptor unmaps pieces in the middle of a growth step; the adaptor's own
 * live counts follow (one allocation becomes two), so it can be released once the pool is. */
static void test_trim_through_adaptor(void) {
  gpumem_resource *vmm, *faulty, *pool;
  gpumem_vmm_options vmm_options = {.piece_size = 2 << 20};
  CHECK_OK(gpumem_vmm_create(0, &vmm_options, &vmm));
  CHECK_OK(gpumem_faulty_create(vmm, NULL, &faulty));
  CHECK_OK(gpumem_pool_create(faulty, NULL, &pool));
  void *blocks[3];
  size_t size = (size_t)4 << 20;
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpumem_allocate(pool, size, NULL, &blocks[i]));
  uint64_t vmm_before = check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES);
  CHECK_OK(gpumem_deallocate(pool, blocks[1], size, NULL)); /* the middle one */
  size_t released = 0;
  CHECK_OK(gpumem_pool_trim(pool, &released));
  CHECK_U64_EQ(released, size);
  CHECK_U64_EQ(check_query(vmm, GPUMEM_QUERY_RESERVED_BYTES), vmm_before - size);
  /* faulty counts what passed through it: the pool's growth, less what the trim unmapped. */
  CHECK_U64_EQ(check_query(faulty, GPUMEM_QUERY_LIVE_BYTES),
               check_query(vmm, GPUMEM_QUERY_LIVE_BYTES));
  CHECK_U64_EQ(check_query(faulty, GPUMEM_QUERY_LIVE_COUNT),
               check_query(vmm, GPUMEM_QUERY_LIVE_COUNT));
  CHECK_OK(gpumem_deallocate(pool, blocks[0], size, NULL));
  CHECK_OK(gpumem_deallocate(pool, blocks[2], size, NULL));
  CHECK_OK(gpumem_resource_release(pool));
  CHECK_U64_EQ(check_query(faulty, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_U64_EQ(check_query(faulty, GPUMEM_QUERY_LIVE_BYTES), 0);
  CHECK_OK(gpumem_resource_release(faulty));
  CHECK_OK(gpumem_resource_release(vmm));
}

/* Pass-through adaptors trim what is under them, and their descriptions nest whole. */
static void test_adaptors_trim_and_describe(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec(
      "retry(prefetch(aligned(limit(pool(cuda, initial=1), max=1GiB))))", &mr));
  void *p;
  CHECK_OK(gpumem_allocate(mr, (size_t)8 << 20, NULL, &p));
  CHECK_OK(gpumem_deallocate(mr, p, (size_t)8 << 20, NULL));
  size_t released = 0;
  CHECK_OK(gpumem_resource_trim(mr, &released));
  CHECK(released >= ((size_t)8 << 20));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_OK(gpumem_resource_release(mr));
  /* Nothing under them to trim: the base resource's kind is named. */
  CHECK_OK(gpumem_resource_from_spec("limit(cuda, max=1GiB)", &mr));
  CHECK_FAILS_WITH(gpumem_resource_trim(mr, &released), GPUMEM_ERR_UNSUPPORTED, "'cuda'");
  CHECK_OK(gpumem_resource_release(mr));
  /* Fifteen adaptors deep: the description parses back to the same description. */
  char spec[2048] = "cuda";
  static const char *const layers[] = {"limit(%s, max=1GiB)", "aligned(%s, alignment=4096)",
                                       "prefetch(%s)", "retry(%s, attempts=2)",
                                       "faulty(%s, fail_every=1000)"};
  for (int i = 0; i < 15; i++) {
    char inner[2048];
    snprintf(inner, sizeof inner, "%s", spec);
    snprintf(spec, sizeof spec, layers[i % 5], inner);
  }
  CHECK_OK(gpumem_resource_from_spec(spec, &mr));
  char described[4096], again[4096];
  CHECK_OK(gpumem_resource_describe(mr, described, sizeof described));
  CHECK(strlen(described) > 400);
  gpumem_resource *rebuilt;
  CHECK_OK(gpumem_resource_from_spec(described, &rebuilt));
  CHECK_OK(gpumem_resource_describe(rebuilt, again, sizeof again));
  CHECK(strcmp(described, again) == 0);
  CHECK_OK(gpumem_resource_release(rebuilt));
  CHECK_OK(gpumem_resource_release(mr));
}

/* A table of version 1 has no placement operations: its capability is not read. */
static gpumem_status never_places(gpumem_resource *self, uintptr_t addr, size_t bytes, void **ptr) {
  CHECK_FAIL_("a version 1 table's placement was called");
  return GPUMEM_ERR_INTERNAL;
}

static void test_old_table(void) {
  static const gpumem__resource_ops old_ops = {
      .version = 1, .kind = "old", .allocate_at = never_places};
  gpumem_resource old = {.ops = &old_ops};
  old.caps.places_at_address = true;
  CHECK(!gpumem__places_at_address(&old));
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_OK(gpumem_resource_get_capabilities(&old, &caps));
  CHECK_EQ(caps.places_at_address, 0);
}

int main(void) {
  check_init_backend();
  gpumem_resource *probe;
  bool vmm_supported = gpumem_resource_from_spec("vmm", &probe) == GPUMEM_OK;
  if (vmm_supported)
    CHECK_OK(gpumem_resource_release(probe));
  test_capabilities(vmm_supported);
  test_capabilities_bad_input();
  test_old_table();
  test_adaptors_trim_and_describe();
  if (vmm_supported) {
    test_pool_over_pass_through();
    test_trim_through_adaptor();
  }
  return 0;
}
