/* annotations.c: the NVTX memory annotations (core/annotate.h) tell a tool the right heaps and
 * regions, checked against a stand-in tool that enforces what compute-sanitizer enforces:
 * heaps neither overlap nor nest, a region lies inside a live heap and overlaps no other,
 * only live regions and heaps are unregistered.
 *
 * - With no tool (every heap refused), nothing is annotated and nothing changes.
 * - A pool over cuda, managed, pinned host memory, through pass-through adaptors: each
 *   chunk is a heap, each block the program holds a region of exactly its size, a free
 *   takes the region away, a trim the heap.
 * - An arena and binning: only the chunks taken from the device are heaps (superblocks and
 *   bin chunks are not), the blocks handed out are regions, direct large blocks are not.
 * - A pool over vmm or over a user's resource: no heap (the tools refuse heaps over memory
 *   mappings, and a user's memory may be anything).
 * - A failed free (wrong size) leaves the block's region in place.
 * - Several threads allocating and freeing at once keep the tool's view exact. */
#include "check.h"
#include "core/annotate.h"

#include <pthread.h>

#define MiB ((size_t)1 << 20)
#define MAX_ENTRIES 4096

typedef struct range {
  uintptr_t base;
  size_t bytes;
  uintptr_t heap; /* regions: the heap they were registered in */
} range;

/* The stand-in tool's state. The library calls it under its own lock, but a lock here
 * keeps the stand-in correct whatever the caller does. */
static pthread_mutex_t tool_lock = PTHREAD_MUTEX_INITIALIZER;
static range heaps[MAX_ENTRIES], regions[MAX_ENTRIES];
static size_t heap_count, region_count;
static bool tool_accepts = true;
static size_t heap_registrations, region_registrations, region_unregistrations;

static bool overlaps(const range *r, uintptr_t base, size_t bytes) {
  return base < r->base + r->bytes && r->base < base + bytes;
}

static void *tool_heap_register(void *base, size_t bytes) {
  if (!tool_accepts)
    return NULL;
  pthread_mutex_lock(&tool_lock);
  for (size_t i = 0; i < heap_count; i++)
    if (overlaps(&heaps[i], (uintptr_t)base, bytes))
      CHECK_FAIL_("heap %p+%zu overlaps heap %p+%zu", base, bytes, (void *)heaps[i].base,
                  heaps[i].bytes);
  CHECK(heap_count < MAX_ENTRIES);
  heaps[heap_count++] = (range){(uintptr_t)base, bytes, 0};
  heap_registrations++;
  pthread_mutex_unlock(&tool_lock);
  return base;
}

static void tool_heap_unregister(void *heap) {
  pthread_mutex_lock(&tool_lock);
  size_t i = 0;
  while (i < heap_count && heaps[i].base != (uintptr_t)heap)
    i++;
  if (i == heap_count)
    CHECK_FAIL_("unregistering heap %p, which is not registered", heap);
  heaps[i] = heaps[--heap_count];
  for (size_t r = 0; r < region_count;) /* the heap's regions go with it */
    if (regions[r].heap == (uintptr_t)heap)
      regions[r] = regions[--region_count];
    else
      r++;
  pthread_mutex_unlock(&tool_lock);
}

static void tool_region_register(void *heap, void *ptr, size_t bytes) {
  pthread_mutex_lock(&tool_lock);
  size_t h = 0;
  while (h < heap_count && heaps[h].base != (uintptr_t)heap)
    h++;
  if (h == heap_count)
    CHECK_FAIL_("region %p+%zu in heap %p, which is not registered", ptr, bytes, heap);
  uintptr_t p = (uintptr_t)ptr;
  if (p < heaps[h].base || p + bytes > heaps[h].base + heaps[h].bytes)
    CHECK_FAIL_("region %p+%zu outside its heap %p+%zu", ptr, bytes, heap, heaps[h].bytes);
  for (size_t i = 0; i < region_count; i++)
    if (overlaps(&regions[i], p, bytes))
      CHECK_FAIL_("region %p+%zu overlaps region %p+%zu", ptr, bytes, (void *)regions[i].base,
                  regions[i].bytes);
  CHECK(region_count < MAX_ENTRIES);
  regions[region_count++] = (range){p, bytes, (uintptr_t)heap};
  region_registrations++;
  pthread_mutex_unlock(&tool_lock);
}

static void tool_region_unregister(void *ptr) {
  pthread_mutex_lock(&tool_lock);
  size_t i = 0;
  while (i < region_count && regions[i].base != (uintptr_t)ptr)
    i++;
  if (i == region_count)
    CHECK_FAIL_("unregistering region %p, which is not registered", ptr);
  regions[i] = regions[--region_count];
  region_unregistrations++;
  pthread_mutex_unlock(&tool_lock);
}

static const gpumem__annotation_api tool = {tool_heap_register, tool_heap_unregister,
                                            tool_region_register, tool_region_unregister};

static void reset_tool(bool accepts) {
  gpumem__annotate_use_api(&tool);
  heap_count = region_count = 0;
  heap_registrations = region_registrations = region_unregistrations = 0;
  tool_accepts = accepts;
}

/* The size of the region registered at ptr; 0 when there is none. */
static size_t region_at(const void *ptr) {
  for (size_t i = 0; i < region_count; i++)
    if (regions[i].base == (uintptr_t)ptr)
      return regions[i].bytes;
  return 0;
}

static gpumem_resource *make(const char *spec) {
  gpumem_resource *mr = NULL;
  CHECK_OK(gpumem_resource_from_spec(spec, &mr));
  return mr;
}

static void test_no_tool(void) {
  reset_tool(false);
  gpumem_resource *mr = make("pool(cuda, initial=4MiB)");
  void *p;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &p));
  CHECK(!gpumem__annotating());
  CHECK_EQ(region_count, 0);
  CHECK_OK(gpumem_deallocate(mr, p, 1000, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_EQ(heap_count, 0);
}

/* A pool over `upstream_spec`: its chunks are heaps and its blocks regions of their sizes. */
static void check_pool_annotated(const char *spec) {
  printf("  %s\n", spec);
  reset_tool(true);
  gpumem_resource *mr = make(spec);
  void *a, *b, *big;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &a));
  CHECK_OK(gpumem_allocate(mr, 3000, NULL, &b));
  CHECK(gpumem__annotating());
  CHECK_EQ(heap_count, 1);
  CHECK_EQ(region_at(a), 1000);
  CHECK_EQ(region_at(b), 3000);
  /* growth: a second chunk, a second heap */
  CHECK_OK(gpumem_allocate(mr, 9 * MiB, NULL, &big));
  CHECK_EQ(heap_count, 2);
  CHECK_EQ(region_at(big), 9 * MiB);
  CHECK_OK(gpumem_deallocate(mr, a, 1000, NULL));
  CHECK_EQ(region_at(a), 0);
  CHECK_EQ(region_at(b), 3000);
  CHECK_OK(gpumem_deallocate(mr, big, 9 * MiB, NULL));
  size_t released = 0;
  CHECK_OK(gpumem_resource_trim(mr, &released));
  CHECK_EQ(heap_count, 1); /* the grown chunk went back, and its heap with it */
  CHECK_OK(gpumem_deallocate(mr, b, 3000, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_EQ(heap_count, 0);
  CHECK_EQ(region_count, 0);
}

static void test_pools(void) {
  check_pool_annotated("pool(cuda, initial=4MiB)");
  check_pool_annotated("pool(managed, initial=4MiB)");
  check_pool_annotated("pool(pinned_host, initial=4MiB)");
  check_pool_annotated("pool(limit(faulty(cuda), max=1GiB), initial=4MiB)");
}

static void test_arena_and_binning(void) {
  printf("  arena(cuda)\n");
  reset_tool(true);
  gpumem_resource *mr = make("arena(cuda)");
  void *p[64];
  for (int i = 0; i < 64; i++) {
    CHECK_OK(gpumem_allocate(mr, 256 + 512 * (size_t)i, NULL, &p[i]));
    CHECK_EQ(region_at(p[i]), 256 + 512 * (size_t)i);
  }
  size_t heaps_seen = heap_count;
  CHECK(heaps_seen >= 1);
  for (int i = 0; i < 64; i++)
    CHECK_OK(gpumem_deallocate(mr, p[i], 256 + 512 * (size_t)i, NULL));
  CHECK_EQ(region_count, 0);
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_EQ(heap_count, 0);

  printf("  binning(pool(cuda)) and binning(cuda)\n");
  reset_tool(true);
  mr = make("binning(pool(cuda, initial=8MiB))");
  void *small, *large;
  CHECK_OK(gpumem_allocate(mr, 700, NULL, &small));
  CHECK_OK(gpumem_allocate(mr, 3 * MiB, NULL, &large));
  CHECK_EQ(heap_count, 1); /* the pool's chunk; the bin's chunk inside it is no heap */
  CHECK_EQ(region_at(small), 700);
  CHECK_EQ(region_at(large), 3 * MiB);
  CHECK_OK(gpumem_deallocate(mr, small, 700, NULL));
  CHECK_OK(gpumem_deallocate(mr, large, 3 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  reset_tool(true);
  mr = make("binning(cuda)");
  CHECK_OK(gpumem_allocate(mr, 700, NULL, &small));
  CHECK_OK(gpumem_allocate(mr, 3 * MiB, NULL, &large));
  CHECK_EQ(region_at(small), 700);
  CHECK_EQ(region_at(large), 0); /* straight from the device: the tool knows it already */
  CHECK_OK(gpumem_deallocate(mr, small, 700, NULL));
  CHECK_OK(gpumem_deallocate(mr, large, 3 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_EQ(heap_count, 0);
}

static gpumem_status user_allocate(void *state, size_t bytes, size_t alignment,
                                   gpumem_stream stream, void **ptr) {
  (void)alignment;
  return gpumem_allocate((gpumem_resource *)state, bytes, stream, ptr);
}

static gpumem_status user_deallocate(void *state, void *ptr, size_t bytes, size_t alignment,
                                     gpumem_stream stream) {
  (void)alignment;
  return gpumem_deallocate((gpumem_resource *)state, ptr, bytes, stream);
}

static void test_not_annotatable(void) {
  printf("  pool(vmm)\n");
  reset_tool(true);
  gpumem_resource *mr = make("pool(vmm)");
  void *p;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &p));
  CHECK_EQ(heap_registrations, 0);
  CHECK_OK(gpumem_deallocate(mr, p, 1000, NULL));
  CHECK_OK(gpumem_resource_release(mr));

  /* A pool over a user's resource that takes its memory from a cuda pool: the inner pool's
   * chunk is the heap, and the inner front end's block (the outer pool's chunk) the region;
   * the outer pool's blocks add nothing (the tools accept no nested heap). */
  printf("  pool(user resource over pool(cuda))\n");
  reset_tool(true);
  gpumem_resource *inner = make("pool(cuda, initial=8MiB)");
  gpumem_user_resource_ops ops = {
      .size = sizeof ops,
      .version = GPUMEM_USER_RESOURCE_OPS_VERSION,
      .allocate = user_allocate,
      .deallocate = user_deallocate,
  };
  gpumem_resource *user = NULL;
  CHECK_OK(gpumem_user_resource_create(GPUMEM_CURRENT_DEVICE, &ops, inner, &user));
  gpumem_resource *outer = NULL;
  CHECK_OK(gpumem_pool_create(user, &(gpumem_pool_options){.initial_size = 4 * MiB}, &outer));
  CHECK_OK(gpumem_allocate(outer, 1000, NULL, &p));
  CHECK_EQ(heap_count, 1);
  CHECK_EQ(region_count, 1); /* the outer pool's chunk, registered by the inner call */
  CHECK_EQ(region_at(p), 4 * MiB);
  CHECK_OK(gpumem_deallocate(outer, p, 1000, NULL));
  CHECK_OK(gpumem_resource_release(outer));
  CHECK_OK(gpumem_resource_release(user));
  CHECK_EQ(region_count, 0);
  CHECK_OK(gpumem_resource_release(inner));
  CHECK_EQ(heap_count, 0);
}

static void test_failed_free_keeps_region(void) {
  reset_tool(true);
  gpumem_resource *mr = make("pool(cuda, initial=4MiB)");
  void *p;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &p));
  size_t unregistered = region_unregistrations;
  CHECK_STATUS(gpumem_deallocate(mr, p, 5000, NULL), GPUMEM_ERR_MISUSE);
  CHECK_EQ(region_at(p), 1000);
  CHECK(region_unregistrations == unregistered + 1); /* taken away, then given back */
  CHECK_STATUS(gpumem_deallocate(mr, (char *)p + 256, 1000, NULL), GPUMEM_ERR_MISUSE);
  CHECK_EQ(region_at(p), 1000);
  CHECK_OK(gpumem_deallocate(mr, p, 1000, NULL));
  CHECK_EQ(region_at(p), 0);
  CHECK_STATUS(gpumem_deallocate(mr, p, 1000, NULL), GPUMEM_ERR_MISUSE); /* double free */
  CHECK_OK(gpumem_resource_release(mr));
}

#define THREADS 8
#define ROUNDS 2000

static void *churn(void *arg) {
  gpumem_resource *mr = arg;
  void *held[16] = {0};
  size_t sizes[16] = {0};
  unsigned seed = (unsigned)(uintptr_t)pthread_self();
  for (int i = 0; i < ROUNDS; i++) {
    int slot = (int)(rand_r(&seed) % 16);
    if (held[slot]) {
      CHECK_OK(gpumem_deallocate(mr, held[slot], sizes[slot], NULL));
      held[slot] = NULL;
    } else {
      sizes[slot] = 1 + rand_r(&seed) % (64 * 1024);
      CHECK_OK(gpumem_allocate(mr, sizes[slot], NULL, &held[slot]));
    }
  }
  for (int s = 0; s < 16; s++)
    if (held[s])
      CHECK_OK(gpumem_deallocate(mr, held[s], sizes[s], NULL));
  return NULL;
}

static void test_threads(void) {
  const char *specs[] = {"pool(cuda, initial=16MiB)", "arena(cuda)"};
  for (size_t s = 0; s < sizeof specs / sizeof *specs; s++) {
    printf("  8 threads over %s\n", specs[s]);
    reset_tool(true);
    gpumem_resource *mr = make(specs[s]);
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++)
      CHECK_EQ(pthread_create(&threads[t], NULL, churn, mr), 0);
    for (int t = 0; t < THREADS; t++)
      CHECK_EQ(pthread_join(threads[t], NULL), 0);
    CHECK_EQ(region_count, 0);
    CHECK(region_registrations >= THREADS * ROUNDS / 4);
    CHECK_OK(gpumem_resource_release(mr));
    CHECK_EQ(heap_count, 0);
  }
}

int main(void) {
  check_init_backend();
  printf("no tool\n");
  test_no_tool();
  printf("pools\n");
  test_pools();
  printf("arena and binning\n");
  test_arena_and_binning();
  printf("resources that are not annotated\n");
  test_not_annotatable();
  printf("a failed free\n");
  test_failed_free_keeps_region();
  printf("threads\n");
  test_threads();
  gpumem__annotate_use_api(NULL);
  printf("annotations: all passed\n");
  return 0;
}
