/* debug3.c: debug level 3 (GPUMEM_DEBUG=3 in a build with GPUMEM_DEBUG_LEVEL=3) finds a
 * program's misuse of its blocks and names the call stacks, on every kind of memory and on
 * both backends.
 *
 * For each resource of a list (device, managed and pinned host memory, suballocators, an
 * aligned adaptor, a resource written with the public API):
 * - a write past the end of a block, and one before its start, made with the device
 *   layer's memset on the block's stream and not waited for: the free waits for it, fails
 *   with GPUMEM_ERR_MISUSE naming the block, the bytes and the allocating function, prints
 *   the allocation's and the free's stacks, and frees the block all the same;
 * - a double free: GPUMEM_ERR_MISUSE with the stacks of the allocation and the first free,
 *   nothing changed;
 * - a write into a freed block: reported with both stacks when the block leaves the
 *   quarantine, pushed out by later frees, and at the release of its resource;
 * - a free with the wrong size, or to another resource: refused, nothing changed;
 * - the live figures of the resource are the program's (no guards, no quarantine), and
 *   alignments asked for or promised by an aligned adaptor are kept.
 * Then: a write past a live block is found at a trim; a fixed_size block that leaves no room
 * for guards is handed out without them and still caught freed twice; out of memory, the
 * quarantine is given back first. On the simulated device, plain host writes into device
 * memory, and a simulated kernel's, are caught too, and each device call level 3 makes
 * fails in turn without losing anything. Under a tool that reads NVTX annotations (a
 * stand-in), a block's region is the whole block, kept while it is quarantined. Clean use
 * prints nothing.
 *
 * The functions that allocate and free are not static, and the program is linked with
 * -rdynamic, so that the reports can name them. The test expects
 * GPUMEM_DEBUG_QUARANTINE_BLOCKS=8 (CTest sets it). */
#include "check.h"
#include "core/annotate.h"
#include "capture_stderr.h"
#include "forwarding.h"

#include <unistd.h>

#define ALLOCATOR_NAME "debug3_allocate_here"
#define FREER_NAME "debug3_free_here"

/* A failed check exits: what it wrote to the captured stderr must still be seen. */
static void restore_at_exit(void) {
  capture_end();
}

/* ---- the program's calls, from functions the reports can name ---- */

__attribute__((noinline)) void *debug3_allocate_here(gpumem_resource *mr, size_t bytes,
                                                     gpumem_stream stream) {
  void *ptr = NULL;
  CHECK_OK(gpumem_allocate(mr, bytes, stream, &ptr));
  CHECK(ptr != NULL);
  return ptr;
}

__attribute__((noinline)) gpumem_status debug3_free_here(gpumem_resource *mr, void *ptr,
                                                         size_t bytes, gpumem_stream stream) {
  gpumem_status status = gpumem_deallocate(mr, ptr, bytes, stream);
  __asm__ volatile("" ::: "memory"); /* not a tail call: this frame stays on the stack */
  return status;
}

static const char *const specs[] = {
    "cuda",
    "managed",
    "pinned_host",
    "pool(vmm)",
    "pool(cuda, initial=1)",
    "arena(vmm)",
    "binning(pool(vmm), min=10, max=22)",
    "aligned(pool(vmm), alignment=64KiB)",
    "user:pool(vmm)",
};

/* The cases stay frames of their own, so that the reports show a static function's frame
 * (as its module and offset). */
#define CASE static __attribute__((noinline)) void

/* Frees 8 other blocks (GPUMEM_DEBUG_QUARANTINE_BLOCKS), so that everything freed before
 * leaves the quarantine. */
static void push_out_quarantine(gpumem_resource *mr, gpumem_stream stream) {
  for (int i = 0; i < 8; i++) {
    void *p = debug3_allocate_here(mr, 512, stream);
    CHECK_OK(debug3_free_here(mr, p, 512, stream));
  }
}

CASE case_overrun(gpumem_resource *mr, gpumem_stream stream) {
  uint64_t count = check_query(mr, GPUMEM_QUERY_LIVE_COUNT);
  uint64_t bytes = check_query(mr, GPUMEM_QUERY_LIVE_BYTES);
  unsigned char *p = debug3_allocate_here(mr, 1000, stream);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), bytes + 1000);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), count + 1);
  CHECK_OK(gpumem_memset_async(p, 1, 1000, stream)); /* the whole block: fine */
  CHECK_OK(gpumem_memset_async(p + 1000, 0x41, 16, stream));
  capture_begin();
  CHECK_FAILS_WITH(debug3_free_here(mr, p, 1000, stream), GPUMEM_ERR_MISUSE,
                   "a write past the end of the 1000-byte block");
  const char *message = gpumem_last_error_message();
  CHECK_CONTAINS(message, "16 guard bytes after its end changed (at +0 to +15 past it; 0x41");
  CHECK_CONTAINS(message, "freed all the same");
  CHECK_CONTAINS(message, "Allocated at " ALLOCATOR_NAME);
  const char *report = capture_end();
  CHECK_CONTAINS(report, "a write past the end of the 1000-byte block");
  CHECK_CONTAINS(report, "allocated at:\n    #0 " ALLOCATOR_NAME "+0x");
  CHECK_CONTAINS(report, "freed at:\n    #0 " FREER_NAME "+0x");
  /* The caller of debug3_free_here is static: shown as its module and offset. */
  CHECK_CONTAINS(report, FREER_NAME "+0x");
  CHECK_CONTAINS(report, "    #1 test_debug3+0x");
  /* Freed all the same: the figures are back where they were. */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), count);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), bytes);

  p = debug3_allocate_here(mr, 300, stream);
  CHECK_OK(gpumem_memset_async(p - 8, 0x42, 8, stream));
  capture_begin();
  CHECK_FAILS_WITH(debug3_free_here(mr, p, 300, stream), GPUMEM_ERR_MISUSE,
                   "a write before the start of the 300-byte block");
  CHECK_CONTAINS(gpumem_last_error_message(),
                 "8 guard bytes before its start changed (at -8 to -1");
  capture_end();
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), count);
}

CASE case_double_free(gpumem_resource *mr, gpumem_stream stream) {
  uint64_t count = check_query(mr, GPUMEM_QUERY_LIVE_COUNT);
  void *p = debug3_allocate_here(mr, 4096, stream);
  capture_begin();
  CHECK_OK(debug3_free_here(mr, p, 4096, stream));
  CHECK_EQ(strlen(capture_end()), 0); /* a clean free says nothing */
  capture_begin();
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 4096, stream), GPUMEM_ERR_MISUSE,
                   "double free of the 4096-byte block");
  const char *message = gpumem_last_error_message();
  CHECK_CONTAINS(message, "nothing changed");
  CHECK_CONTAINS(message, "Allocated at " ALLOCATOR_NAME);
  CHECK_CONTAINS(message, "first freed at " FREER_NAME);
  const char *report = capture_end();
  CHECK_CONTAINS(report, "allocated at:\n    #0 " ALLOCATOR_NAME);
  CHECK_CONTAINS(report, "first freed at:\n    #0 " FREER_NAME);
  CHECK_CONTAINS(report, "freed again at:\n    #0 test_debug3+0x"); /* a static function */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), count);
  /* Still held: a third free is refused the same way, and the block leaves cleanly. */
  capture_begin();
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 4096, stream), GPUMEM_ERR_MISUSE, "double free");
  capture_end();
  capture_begin();
  push_out_quarantine(mr, stream);
  CHECK_EQ(strlen(capture_end()), 0);
}

/* Writes into a block after its free; the report comes when it leaves the quarantine. */
CASE case_use_after_free(gpumem_resource *mr, gpumem_stream stream) {
  unsigned char *p = debug3_allocate_here(mr, 2048, stream);
  CHECK_OK(debug3_free_here(mr, p, 2048, stream));
  CHECK_OK(gpumem_memset_async(p + 16, 7, 4, stream));
  CHECK_OK(gpumem_stream_synchronize(stream));
  capture_begin();
  push_out_quarantine(mr, stream);
  const char *report = capture_end();
  CHECK_CONTAINS(report, "use after free: 4 bytes of the 2048-byte block");
  CHECK_CONTAINS(report, "at +16 to +19 (0x07 where the poison 0xdd was written)");
  CHECK_CONTAINS(report, "found when it left the quarantine");
  CHECK_CONTAINS(report, "allocated at:\n    #0 " ALLOCATOR_NAME);
  CHECK_CONTAINS(report, "first freed at:\n    #0 " FREER_NAME);
}

CASE case_wrong_free(gpumem_resource *mr, gpumem_resource *other, gpumem_stream stream) {
  uint64_t count = check_query(mr, GPUMEM_QUERY_LIVE_COUNT);
  void *p = debug3_allocate_here(mr, 1500, stream);
  capture_begin();
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 1499, stream), GPUMEM_ERR_MISUSE,
                   "freed with size 1499 and alignment 256; it was allocated with size 1500");
  CHECK_FAILS_WITH(gpumem_deallocate_aligned(mr, p, 1500, 4096, stream), GPUMEM_ERR_MISUSE,
                   "alignment 4096");
  CHECK_FAILS_WITH(gpumem_deallocate(other, p, 1500, stream), GPUMEM_ERR_MISUSE,
                   "is freed to cuda");
  CHECK_CONTAINS(gpumem_last_error_message(), "Allocated at " ALLOCATOR_NAME);
  capture_end();
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), count + 1);
  CHECK_OK(debug3_free_here(mr, p, 1500, stream));
}

CASE case_alignment(gpumem_resource *mr, const char *spec, gpumem_stream stream) {
  size_t promised = strstr(spec, "alignment=64KiB") ? (size_t)64 << 10 : 256;
  void *p = debug3_allocate_here(mr, 100, stream);
  CHECK_EQ((uintptr_t)p % promised, 0);
  CHECK_OK(debug3_free_here(mr, p, 100, stream));
  CHECK_OK(gpumem_allocate_aligned(mr, 5000, 8192, stream, &p));
  CHECK_EQ((uintptr_t)p % 8192, 0);
  CHECK_OK(gpumem_deallocate_aligned(mr, p, 5000, 8192, stream));
}

/* A write into a freed block found when its resource is released. */
CASE case_release(const char *spec) {
  gpumem_resource *mr;
  CHECK_OK(make_resource(spec, &mr));
  unsigned char *p = debug3_allocate_here(mr, 700, NULL);
  CHECK_OK(debug3_free_here(mr, p, 700, NULL));
  CHECK_OK(gpumem_memset_async(p + 699, 9, 1, NULL));
  CHECK_OK(gpumem_stream_synchronize(NULL));
  capture_begin();
  CHECK_OK(gpumem_resource_release(mr));
  const char *report = capture_end();
  CHECK_CONTAINS(report, "use after free: 1 byte of the 700-byte block");
  CHECK_CONTAINS(report, "at +699 to +699");
  CHECK_CONTAINS(report, "found at the release of its resource");
}

static void check_spec(const char *spec, gpumem_resource *other) {
  gpumem_resource *mr;
  CHECK_OK(make_resource(spec, &mr));
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(gpumem_resource_device(mr), &stream));
  case_overrun(mr, stream);
  case_double_free(mr, stream);
  case_use_after_free(mr, stream);
  case_wrong_free(mr, other, stream);
  case_alignment(mr, spec, stream);
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_destroy(stream));
  capture_begin();
  CHECK_OK(gpumem_resource_release(mr)); /* its quarantine is given back, cleanly */
  CHECK_EQ(strlen(capture_end()), 0);
  case_release(spec);
  printf("%-36s passed\n", spec);
}

/* A write past a live block is found at a trim of its pool, and again at its free. */
CASE case_trim(void) {
  gpumem_resource *mr = check_build("pool(vmm)");
  unsigned char *p = debug3_allocate_here(mr, 5000, NULL);
  CHECK_OK(gpumem_memset_async(p + 5000, 3, 2, NULL));
  capture_begin();
  CHECK_OK(gpumem_resource_trim(mr, NULL));
  const char *report = capture_end();
  CHECK_CONTAINS(report, "a write past the end of the 5000-byte block");
  CHECK_CONTAINS(report, "which is live (found at a trim)");
  CHECK_CONTAINS(report, "allocated at:\n    #0 " ALLOCATOR_NAME);
  capture_begin();
  CHECK_FAILS_WITH(debug3_free_here(mr, p, 5000, NULL), GPUMEM_ERR_MISUSE, "past the end");
  capture_end();
  CHECK_OK(gpumem_resource_release(mr));
  printf("%-36s passed\n", "trim");
}

/* fixed_size's blocks leave no room for guards at its block size: such a block goes
 * without, and is still held after its free. */
CASE case_no_room(void) {
  gpumem_resource *mr = check_build("fixed_size(cuda, block=64KiB, prealloc=4)");
  void *p = debug3_allocate_here(mr, 64 << 10, NULL);
  void *q = debug3_allocate_here(mr, 100, NULL);
  CHECK_OK(debug3_free_here(mr, p, 64 << 10, NULL));
  capture_begin();
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 64 << 10, NULL), GPUMEM_ERR_MISUSE,
                   "double free of the 65536-byte block");
  CHECK_CONTAINS(gpumem_last_error_message(), "(without guards)");
  capture_end();
  CHECK_OK(debug3_free_here(mr, q, 100, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("%-36s passed\n", "no room for guards");
}

/* On the simulated device, device memory is host memory: a plain write past a block, and a
 * simulated kernel's, are caught as the device's would be. */
CASE case_host_writes(void) {
  gpumem_resource *mr = check_build("pool(cuda, initial=1)");
  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(GPUMEM_CURRENT_DEVICE, &stream));
  unsigned char *p = debug3_allocate_here(mr, 64, stream);
  CHECK_OK(gpumem_stream_synchronize(stream)); /* the guards are written */
  memset(p, 0, 65);
  capture_begin();
  CHECK_FAILS_WITH(debug3_free_here(mr, p, 64, stream), GPUMEM_ERR_MISUSE,
                   "1 guard byte after its end changed (at +0 to +0 past it; 0x00");
  capture_end();
  p = debug3_allocate_here(mr, 64, stream);
  CHECK_OK(gpumem_sim_launch(stream, p, 80, 5)); /* pending until the free waits for it */
  capture_begin();
  CHECK_FAILS_WITH(debug3_free_here(mr, p, 64, stream), GPUMEM_ERR_MISUSE,
                   "16 guard bytes after its end changed");
  capture_end();
  p = debug3_allocate_here(mr, 64, stream);
  CHECK_OK(debug3_free_here(mr, p, 64, stream));
  p[10] = 1;
  capture_begin();
  push_out_quarantine(mr, stream);
  CHECK_CONTAINS(capture_end(), "use after free: 1 byte of the 64-byte block");
  CHECK_OK(gpumem_stream_destroy(stream));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_NO_HAZARD("");
  printf("%-36s passed\n", "host writes (simulated device)");
}

/* Out of memory: the quarantine of the device is given back and the request tried again;
 * at the very limit, the block comes without guards. */
CASE case_out_of_memory(void) {
  gpumem_resource *mr = check_build("limit(cuda, max=1MiB)");
  void *p = debug3_allocate_here(mr, 600 << 10, NULL);
  CHECK_OK(debug3_free_here(mr, p, 600 << 10, NULL)); /* held: the limit still counts it */
  capture_begin();
  void *q = debug3_allocate_here(mr, 600 << 10, NULL);
  CHECK_EQ(strlen(capture_end()), 0);             /* given back, checked, clean */
  CHECK_EQ(gpumem_last_error_message()[0], '\0'); /* the absorbed failure left no message */
  CHECK_OK(debug3_free_here(mr, q, 600 << 10, NULL));
  void *whole = debug3_allocate_here(mr, 1 << 20, NULL);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), 1 << 20);
  CHECK_FAILS_WITH(gpumem_allocate(mr, 1, NULL, &p), GPUMEM_ERR_OUT_OF_MEMORY, "limit");
  CHECK_CONTAINS(gpumem_last_error_message(), "allocating 1 B"); /* the request as asked */
  CHECK_CONTAINS(gpumem_last_error_message(), "\nverdict: ");    /* with the front end's report */
  CHECK_OK(debug3_free_here(mr, whole, 1 << 20, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("%-36s passed\n", "out of memory");
}

/* A device call of level 3's failing: the call fails, and nothing is lost. */
CASE case_device_failures(void) {
  gpumem_resource *mr = check_build("cuda");
  uint64_t used = 0, used_now = 0;
  CHECK_OK(gpumem_sim_device_used(0, &used));
  void *p = (void *)0x1;
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEMSET, 1)); /* filling a guard */
  CHECK_FAILS_WITH(gpumem_allocate(mr, 1000, NULL, &p), GPUMEM_ERR_CUDA, "filling the guards");
  CHECK_PTR_EQ(p, (void *)0x1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_sim_device_used(0, &used_now));
  CHECK_U64_EQ(used_now, used);

  p = debug3_allocate_here(mr, 1000, NULL);
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEMCPY, 1)); /* reading the guards back */
  CHECK_STATUS(gpumem_deallocate(mr, p, 1000, NULL), GPUMEM_ERR_CUDA);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEMSET, 1)); /* the poison */
  CHECK_STATUS(gpumem_deallocate(mr, p, 1000, NULL), GPUMEM_ERR_CUDA);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_OK(debug3_free_here(mr, p, 1000, NULL)); /* still live: freed now, not twice */
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);

  /* Too large for the quarantine (256 MiB by default): freed at once, or not at all. */
  size_t large = (size_t)300 << 20;
  p = debug3_allocate_here(mr, large, NULL);
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEM_FREE, 1));
  CHECK_STATUS(gpumem_deallocate(mr, p, large, NULL), GPUMEM_ERR_CUDA);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_OK(debug3_free_here(mr, p, large, NULL));

  CHECK_OK(gpumem_resource_release(mr));

  /* A held block its resource refuses to take back stays held: the release refuses. */
  mr = check_build("cuda");
  p = debug3_allocate_here(mr, 1000, NULL);
  CHECK_OK(debug3_free_here(mr, p, 1000, NULL));
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEM_FREE, 1));
  capture_begin();
  CHECK_FAILS_WITH(gpumem_resource_release(mr), GPUMEM_ERR_CUDA,
                   "1 freed block held by the quarantine of GPUMEM_DEBUG=3 could not be given "
                   "back");
  CHECK_CONTAINS(capture_end(), "it is held again");
  capture_begin();
  CHECK_FAILS_WITH(gpumem_deallocate(mr, p, 1000, NULL), GPUMEM_ERR_MISUSE, "double free");
  capture_end();
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_sim_device_used(0, &used_now));
  CHECK_U64_EQ(used_now, used);
  printf("%-36s passed\n", "device failures (simulated device)");
}

/* A stand-in for a tool that reads NVTX annotations: the regions registered now. */
static struct {
  uintptr_t base[64];
  size_t bytes[64];
  int count;
} regions;

static void *stand_in_heap(void *base, size_t bytes) {
  return base;
}
static void stand_in_heap_gone(void *heap) {}
static void stand_in_region(void *heap, void *ptr, size_t bytes) {
  CHECK(regions.count < 64);
  regions.base[regions.count] = (uintptr_t)ptr;
  regions.bytes[regions.count++] = bytes;
}
static void stand_in_region_gone(void *ptr) {
  for (int i = 0; i < regions.count; i++)
    if (regions.base[i] == (uintptr_t)ptr) {
      regions.base[i] = regions.base[--regions.count];
      regions.bytes[i] = regions.bytes[regions.count];
      return;
    }
  CHECK_FAIL_("region %p unregistered, but not registered", ptr);
}

/* The region of a tool holding [p, p+bytes); -1 when none does. */
static int region_holding(const void *p, size_t bytes) {
  for (int i = 0; i < regions.count; i++)
    if (regions.base[i] <= (uintptr_t)p &&
        (uintptr_t)p + bytes <= regions.base[i] + regions.bytes[i])
      return i;
  return -1;
}

/* Under a tool, a block's region is the whole block with its guards (level 3 reads and
 * writes them itself), kept while the block is quarantined, gone when it is given back. */
CASE case_annotations(void) {
  static const gpumem__annotation_api stand_in = {stand_in_heap, stand_in_heap_gone,
                                                  stand_in_region, stand_in_region_gone};
  gpumem__annotate_use_api(&stand_in);
  gpumem_resource *mr = check_build("pool(cuda, initial=1)");
  unsigned char *p = debug3_allocate_here(mr, 1000, NULL);
  CHECK(gpumem__annotating());
  int r = region_holding(p - 256, 1000 + 512);
  CHECK(r >= 0);
  CHECK_EQ(regions.count, 1);
  CHECK_OK(debug3_free_here(mr, p, 1000, NULL));
  CHECK(region_holding(p, 1000) >= 0); /* held in the quarantine */
  push_out_quarantine(mr, NULL);
  CHECK_EQ(region_holding(p, 1000), -1);
  CHECK_EQ(regions.count, 8); /* the 8 blocks that pushed it out are held */
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_EQ(regions.count, 0);
  gpumem__annotate_use_api(NULL);
  printf("%-36s passed\n", "annotations for a tool");
}

int main(void) {
  check_init_backend();
  atexit(restore_at_exit);
  const char *asked = getenv("GPUMEM_DEBUG");
  if (GPUMEM__DEBUG_LEVEL < 3 || !asked || strcmp(asked, "3") != 0) {
    printf("skipped: needs GPUMEM_DEBUG=3 in a build with GPUMEM_DEBUG_LEVEL=3\n");
    return CHECK_SKIP_CODE;
  }
  CHECK_CONTAINS(gpumem_settings(), "GPUMEM_DEBUG=3"); /* asked for and built in: in force */
  CHECK_CONTAINS(gpumem_settings(), "GPUMEM_DEBUG_QUARANTINE_BLOCKS=8");
  gpumem_resource *other = check_build("cuda");
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++)
    check_spec(specs[i], other);
  CHECK_OK(gpumem_resource_release(other));
  case_trim();
  case_no_room();
  case_out_of_memory();
  case_annotations();
  if (check_on_sim()) {
    case_host_writes();
    case_device_failures();
  }
  return 0;
}
