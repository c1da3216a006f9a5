/* conformance.c: the contract every resource keeps, checked the same way for each.
 *
 * Runs over every base resource, suballocator and adaptor (or the specs given as arguments, so
 * that later resources are checked by the same program), on whichever backend GPUMEM_DEVICE
 * names: size 0; sizes from 4 B to 1 GiB, each usable by device copies; the default and
 * larger alignments; out of memory leaving the out-pointer untouched and the resource
 * usable; random allocate/free from several threads on their own streams with no two live
 * blocks overlapping; producer and consumer on two streams; live-memory queries; and the
 * refusal to destroy a resource whose memory is still in use.
 *
 * Resources no spec can build have names of their own in the list: "user:SPEC" is a user
 * resource (gpumem_user_resource_create, public API only) that forwards to a resource built
 * from SPEC, and "pool:user:SPEC" a pool over one. An async resource over the driver pool of
 * another ("async(pool=HANDLE)") runs after the list, with the handle of the moment. */
#include "check.h"
#include "forwarding.h"
#include "gpumem/sim.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

static const char *const default_specs[] = {
    "cuda",
    "managed",
    "managed(prefetch=true)",
    "async",
    "pinned_host",
    "system",
    "faulty(cuda)",
    "faulty(async)",
    "vmm",
    "pool(vmm)",
    "pool(vmm(piece=2MiB), release_holes_over=100)",
    "pool(vmm(piece=2MiB), release_holes_over=100, release_holes_time=100)",
    "pool(cuda, initial=64MiB)",
    "pool(cuda, initial=1)",
    "pool(async)",
    "pool(managed)",
    "pool(pinned_host)",
    "arena(cuda, size=64MiB)",
    "arena(vmm)",
    "fixed_size(cuda, block=256KiB, prealloc=16)",
    "binning(cuda)",
    "binning(pool(vmm), min=10, max=22)",
    "retry(cuda)",
    "retry(async, attempts=2)",
    "pool(retry(vmm))",
    "user:cuda",
    "user:async",
    "pool:user:cuda",
    "retry(pool:user:cuda)",
    "limit(pool(vmm), max=4GiB)",
    "pool(limit(vmm, max=4GiB))",
    "limit(arena(vmm), max=4GiB)",
    "limit(cuda, max=3GiB)",
    "aligned(cuda, alignment=4096, threshold=1MiB)",
    "pool(aligned(vmm, alignment=64KiB))",
    "pool(aligned(vmm, alignment=4MiB))",
    "aligned(pool(vmm), alignment=4MiB)",
    "aligned(arena(vmm), alignment=64KiB)",
    "aligned(binning(pool(vmm), min=10, max=22), alignment=4MiB)",
    "aligned(managed, alignment=64KiB)",
    "prefetch(managed)",
    "prefetch(pool(managed))",
    "prefetch(cuda)",
    "pool(conformance_cuda, initial=1)",
    "limit(conformance_cuda, max=3GiB)",
    "tracking(cuda)",
    "tracking(pool(vmm), stacks=true)",
    "pool(tracking(vmm))",
    "tracking(arena(vmm))",
    "tracking(binning(pool(vmm), min=10, max=22), stacks=true, depth=4)",
    "stats(cuda)",
    "stats(pool(vmm))",
    "pool(stats(vmm))",
    "stats(arena(vmm), flush_bytes=1, flush_count=1)",
    /* Logs write their files in the working directory, removed at the end (main). */
    "log(cuda, file=conformance-log-%p.csv)",
    "log(pool(vmm), file=conformance-log-%p.csv)",
    "pool(log(vmm, file=conformance-log-%p.csv))",
    /* The device's default pool of managed memory (CUDA 13; skipped where there is none). */
    "async(managed=true)",
    "pool(async(managed=true), initial=1)",
};

/* Writes `value` over [ptr, ptr+bytes) on `stream` and reads back `probe` bytes at the
 * start and at the end: the block is real memory of the size asked. */
static void check_usable(void *ptr, size_t bytes, int value, gpumem_stream stream) {
  enum { probe_max = 4096 };
  static unsigned char host[probe_max];
  size_t probe = bytes < probe_max ? bytes : probe_max;
  CHECK_OK(gpumem_memset_async(ptr, value, bytes < (64u << 20) ? bytes : probe, stream));
  CHECK_OK(gpumem_memset_async((char *)ptr + bytes - probe, value, probe, stream));
  memset(host, ~value, probe);
  CHECK_OK(gpumem_memcpy_async(host, ptr, probe, stream));
  CHECK_OK(gpumem_stream_synchronize(stream));
  for (size_t i = 0; i < probe; i++)
    CHECK_EQ(host[i], (unsigned char)value);
  memset(host, ~value, probe);
  CHECK_OK(gpumem_memcpy_async(host, (char *)ptr + bytes - probe, probe, stream));
  CHECK_OK(gpumem_stream_synchronize(stream));
  for (size_t i = 0; i < probe; i++)
    CHECK_EQ(host[i], (unsigned char)value);
}

static void case_zero_size(gpumem_resource *mr) {
  void *ptr = (void *)0x1;
  CHECK_OK(gpumem_allocate(mr, 0, NULL, &ptr));
  CHECK_PTR_EQ(ptr, NULL);
  CHECK_OK(gpumem_deallocate(mr, NULL, 0, NULL));
}

/* The largest request a resource serves: fixed_size's block (256 KiB in the list above). */
static size_t largest_request(gpumem_resource *mr) {
  return strcmp(gpumem_resource_name(mr), "fixed_size") == 0 ? (size_t)256 << 10 : SIZE_MAX;
}

static void case_sizes(gpumem_resource *mr, gpumem_stream stream) {
  uint64_t live_before = check_query(mr, GPUMEM_QUERY_LIVE_BYTES);
  for (size_t bytes = 4; bytes <= (1u << 30); bytes *= 4) {
    void *ptr = NULL;
    if (bytes > largest_request(mr)) {
      CHECK_FAILS_WITH(gpumem_allocate(mr, bytes, stream, &ptr), GPUMEM_ERR_OUT_OF_MEMORY,
                       "larger than the resource's block size");
      continue;
    }
    CHECK_OK(gpumem_allocate(mr, bytes, stream, &ptr));
    CHECK(ptr != NULL);
    CHECK_EQ((uintptr_t)ptr % GPUMEM_DEFAULT_ALIGNMENT, 0);
    CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), live_before + bytes);
    check_usable(ptr, bytes, (int)(bytes % 251), stream);
    CHECK_OK(gpumem_deallocate(mr, ptr, bytes, stream));
  }
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), live_before);
}

static void case_alignments(gpumem_resource *mr, gpumem_stream stream) {
  for (size_t alignment = 1; alignment <= (2u << 20); alignment *= 2) {
    size_t bytes = 1000 + alignment / 3 < largest_request(mr) ? 1000 + alignment / 3 : 1000;
    void *ptr = NULL;
    gpumem_status status = gpumem_allocate_aligned(mr, bytes, alignment, stream, &ptr);
    if (status == GPUMEM_ERR_UNSUPPORTED && alignment > GPUMEM_DEFAULT_ALIGNMENT &&
        strcmp(gpumem_resource_name(mr), "fixed_size") == 0) {
      CHECK_CONTAINS(gpumem_last_error_message(), "does not align");
      continue; /* documented: fixed-size blocks are 256-aligned only */
    }
    CHECK_OK(status);
    size_t expected = alignment < GPUMEM_DEFAULT_ALIGNMENT ? GPUMEM_DEFAULT_ALIGNMENT : alignment;
    CHECK_EQ((uintptr_t)ptr % expected, 0);
    check_usable(ptr, bytes, 7, stream);
    CHECK_OK(gpumem_deallocate_aligned(mr, ptr, bytes, alignment, stream));
  }
}

static void case_out_of_memory(gpumem_resource *mr, const char *spec) {
  /* Asking a real GPU for more managed memory than it has can hang it for everyone; the
   * simulated device covers that path. */
  if (!check_on_sim() && strstr(spec, "managed")) {
    printf("  out of memory: not tried with managed memory on a real GPU\n");
    return;
  }
  uint64_t live_before = check_query(mr, GPUMEM_QUERY_LIVE_COUNT);
  void *ptr = (void *)0x1234;
  size_t huge = (size_t)1 << 50; /* 1 PiB */
  CHECK_FAILS_WITH(gpumem_allocate(mr, huge, NULL, &ptr), GPUMEM_ERR_OUT_OF_MEMORY,
                   "out of memory");
  CHECK_CONTAINS(gpumem_last_error_message(), gpumem_resource_name(mr));
  CHECK_CONTAINS(gpumem_last_error_message(), "1 PiB");
  CHECK_PTR_EQ(ptr, (void *)0x1234);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), live_before);
  CHECK_OK(gpumem_allocate(mr, 4096, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(mr, ptr, 4096, NULL));
}

/* ---- several threads, each on its own stream, sharing the resource ---- */

typedef struct live_block {
  uintptr_t start;
  size_t bytes;
} live_block;

enum { threads_count = 4, ops_per_thread = 1500, slots_per_thread = 48 };

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static live_block all_live[threads_count * slots_per_thread];
static size_t all_live_count;

/* Adds a block to the global live set, failing if it overlaps one already live. */
static void claim(void *ptr, size_t bytes) {
  uintptr_t start = (uintptr_t)ptr;
  pthread_mutex_lock(&live_lock);
  for (size_t i = 0; i < all_live_count; i++) {
    const live_block *b = &all_live[i];
    if (start < b->start + b->bytes && b->start < start + bytes)
      CHECK_FAIL_("block %p+%zu overlaps live block %p+%zu", ptr, bytes, (void *)b->start,
                  b->bytes);
  }
  all_live[all_live_count++] = (live_block){start, bytes};
  pthread_mutex_unlock(&live_lock);
}

static void unclaim(void *ptr) {
  pthread_mutex_lock(&live_lock);
  for (size_t i = 0; i < all_live_count; i++) {
    if (all_live[i].start == (uintptr_t)ptr) {
      all_live[i] = all_live[--all_live_count];
      break;
    }
  }
  pthread_mutex_unlock(&live_lock);
}

typedef struct worker_args {
  gpumem_resource *mr;
  unsigned seed;
} worker_args;

static void *random_worker(void *arg) {
  const worker_args *args = arg;
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(gpumem_resource_device(args->mr), &stream));
  void *ptrs[slots_per_thread] = {0};
  size_t sizes[slots_per_thread] = {0};
  uint64_t x = 0x9E3779B97F4A7C15ull ^ args->seed;
  for (int op = 0; op < ops_per_thread; op++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    int slot = (int)(x % slots_per_thread);
    if (ptrs[slot]) {
      unclaim(ptrs[slot]);
      CHECK_OK(gpumem_deallocate(args->mr, ptrs[slot], sizes[slot], stream));
      ptrs[slot] = NULL;
    } else {
      size_t bytes = 1 + (size_t)((x >> 20) % (256u << 10));
      CHECK_OK(gpumem_allocate(args->mr, bytes, stream, &ptrs[slot]));
      claim(ptrs[slot], bytes);
      sizes[slot] = bytes;
      CHECK_OK(gpumem_memset_async(ptrs[slot], slot, bytes < 256 ? bytes : 256, stream));
    }
  }
  for (int slot = 0; slot < slots_per_thread; slot++) {
    if (ptrs[slot]) {
      unclaim(ptrs[slot]);
      CHECK_OK(gpumem_deallocate(args->mr, ptrs[slot], sizes[slot], stream));
    }
  }
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_destroy(stream));
  return NULL;
}

static void case_threads(gpumem_resource *mr) {
  uint64_t live_before = check_query(mr, GPUMEM_QUERY_LIVE_COUNT);
  pthread_t threads[threads_count];
  worker_args args[threads_count];
  for (unsigned i = 0; i < threads_count; i++) {
    args[i] = (worker_args){mr, i + 1};
    CHECK_EQ(pthread_create(&threads[i], NULL, random_worker, &args[i]), 0);
  }
  for (int i = 0; i < threads_count; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  CHECK_EQ(all_live_count, 0);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), live_before);
}

/* Producer on one stream, consumer on another, freed by the consumer; the producer's
 * stream then allocates again. The consumer must read what the producer wrote. */
static void case_cross_stream(gpumem_resource *mr) {
  int device = gpumem_resource_device(mr);
  gpumem_stream producer, consumer;
  CHECK_OK(gpumem_stream_create(device, &producer));
  CHECK_OK(gpumem_stream_create(device, &consumer));
  enum { most = 1 << 20 };
  static unsigned char host[most];
  size_t bytes = largest_request(mr) < most ? largest_request(mr) : most;
  for (int round = 0; round < 8; round++) {
    void *ptr;
    CHECK_OK(gpumem_allocate(mr, bytes, producer, &ptr));
    CHECK_OK(gpumem_memset_async(ptr, 0x40 + round, bytes, producer));
    /* The consumer waits for the producer through a synchronization of the producer, the
     * only cross-stream ordering the public API offers. */
    CHECK_OK(gpumem_stream_synchronize(producer));
    memset(host, 0, bytes);
    CHECK_OK(gpumem_memcpy_async(host, ptr, bytes, consumer));
    CHECK_OK(gpumem_deallocate(mr, ptr, bytes, consumer));
    void *next;
    CHECK_OK(gpumem_allocate(mr, bytes, producer, &next));
    CHECK_OK(gpumem_memset_async(next, 0x11, bytes, producer));
    CHECK_OK(gpumem_stream_synchronize(consumer));
    for (size_t i = 0; i < bytes; i += 4093)
      CHECK_EQ(host[i], 0x40 + round);
    CHECK_OK(gpumem_deallocate(mr, next, bytes, producer));
  }
  CHECK_OK(gpumem_stream_synchronize(producer));
  CHECK_OK(gpumem_stream_destroy(producer));
  CHECK_OK(gpumem_stream_destroy(consumer));
}

/* The last release of a resource with live memory refuses, keeps the handle valid, and
 * succeeds once the memory is freed. */
static void case_release_with_live_memory(const char *spec) {
  gpumem_resource *mr;
  CHECK_OK(make_resource(spec, &mr));
  void *ptr;
  CHECK_OK(gpumem_allocate(mr, 1000, NULL, &ptr));
  CHECK_FAILS_WITH(gpumem_resource_release(mr), GPUMEM_ERR_MISUSE, "1 live allocation");
  void *other;
  CHECK_OK(gpumem_allocate(mr, 2000, NULL, &other));
  CHECK_OK(gpumem_deallocate(mr, other, 2000, NULL));
  CHECK_OK(gpumem_deallocate(mr, ptr, 1000, NULL));
  CHECK_OK(gpumem_resource_release(mr));
}

static void check_spec(const char *spec) {
  gpumem_resource *mr;
  gpumem_status status = make_resource(spec, &mr);
  if (status == GPUMEM_ERR_UNSUPPORTED) {
    printf("%-28s skipped: %s\n", spec, gpumem_last_error_message());
    return;
  }
  CHECK_OK(status);
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(gpumem_resource_device(mr), &stream));
  case_zero_size(mr);
  case_sizes(mr, stream);
  case_alignments(mr, stream);
  case_out_of_memory(mr, spec);
  case_threads(mr);
  case_cross_stream(mr);
  CHECK_OK(gpumem_stream_destroy(stream));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(mr));
  case_release_with_live_memory(spec);
  CHECK_NO_HAZARD("the cross-stream case checks the data the consumer read");
  printf("%-28s passed\n", spec);
}

int main(int argc, char **argv) {
  check_init_backend();
  check_debug_level_in_force();
  /* A resource the program names for specs composes as any other (default_specs). */
  gpumem_resource *named;
  CHECK_OK(gpumem_cuda_create(0, &named));
  CHECK_OK(gpumem_spec_define("conformance_cuda", named));
  CHECK_OK(gpumem_resource_release(named));
  if (argc > 1) {
    for (int i = 1; i < argc; i++)
      check_spec(argv[i]);
  } else {
    for (size_t i = 0; i < sizeof default_specs / sizeof default_specs[0]; i++)
      check_spec(default_specs[i]);
    /* async over a driver pool of the program's: here another async resource's. */
    gpumem_resource *owner;
    void *pool;
    char spec[96];
    CHECK_OK(gpumem_async_create(0, NULL, &owner));
    CHECK_OK(gpumem_async_pool_handle(owner, &pool));
    snprintf(spec, sizeof spec, "async(pool=%llu)", (unsigned long long)(uintptr_t)pool);
    check_spec(spec);
    snprintf(spec, sizeof spec, "pool(async(pool=%llu), initial=1)",
             (unsigned long long)(uintptr_t)pool);
    check_spec(spec);
    CHECK_OK(gpumem_resource_release(owner));
  }
  char log[64];
  snprintf(log, sizeof log, "conformance-log-%ld.csv", (long)getpid());
  remove(log);
  return 0;
}
