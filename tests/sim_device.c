/* sim_device.c: unit test of the simulated device (src/device/sim*.c), through the device
 * table and the gpumem_sim_* controls.
 *
 * The sim is what every other test of gpumem stands on without a GPU, so this test pins
 * down its model: capacity and out of memory, streams whose work runs only when allowed,
 * staged copies, events and waits, hazard detection, driver pool reuse rules, virtual
 * memory, fault injection, bad handles, and many threads at once. Configurations that need
 * their own process (environment, vmm off, abort on hazard, another backend) run in forked
 * children before this process initializes anything. */
#include "check.h"
#include "device/device.h"
#include "gpumem/sim.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define CAPACITY ((uint64_t)4 << 30)
#define GRAIN (2 * MiB)

static const gpumem__device_ops *dev;

static uint64_t used(int device) {
  uint64_t bytes = UINT64_MAX;
  CHECK_OK(gpumem_sim_device_used(device, &bytes));
  return bytes;
}

static uint64_t pending(gpumem_stream stream) {
  uint64_t count = UINT64_MAX;
  CHECK_OK(gpumem_sim_pending(stream, &count));
  return count;
}

static bool all_bytes(const void *p, unsigned char value, size_t bytes) {
  const unsigned char *c = p;
  for (size_t i = 0; i < bytes; i++)
    if (c[i] != value)
      return false;
  return true;
}

static gpumem_stream new_stream(int device) {
  gpumem_stream stream = NULL;
  CHECK_OK(dev->stream_create(device, &stream));
  CHECK(stream != NULL);
  return stream;
}

static void *device_alloc(size_t bytes) {
  void *p = NULL;
  CHECK_OK(dev->mem_alloc(0, bytes, &p));
  CHECK(p != NULL);
  return p;
}

/* ---------------------------------------------------------------------------------------
 * Devices
 * ------------------------------------------------------------------------------------- */

static void *read_current_device(void *arg) {
  int device = -5;
  CHECK_OK(dev->get_device(&device));
  *(int *)arg = device;
  return NULL;
}

static void test_devices(void) {
  int count = 0;
  CHECK_OK(dev->device_count(&count));
  CHECK_EQ(count, 2);
  char name[64];
  CHECK_OK(dev->device_name(1, name, sizeof name));
  CHECK(strcmp(name, "gpumem simulated device 1") == 0);
  CHECK_FAILS_WITH(dev->device_name(2, name, sizeof name), GPUMEM_ERR_INVALID_DEVICE, "device 2");

  int64_t value = -1;
  CHECK_OK(dev->device_attribute(0, GPUMEM__ATTR_VMM_GRANULARITY, &value));
  CHECK_EQ(value, GRAIN);
  CHECK_OK(dev->device_attribute(0, GPUMEM__ATTR_VMM_SUPPORTED, &value));
  CHECK_EQ(value, 1);
  CHECK_OK(dev->device_attribute(1, GPUMEM__ATTR_PAGEABLE_MEMORY_ACCESS, &value));
  CHECK_EQ(value, 1);
  CHECK_OK(dev->device_attribute(0, GPUMEM__ATTR_MEMPOOL_SUPPORTED, &value));
  CHECK_EQ(value, 1);
  CHECK_OK(dev->device_attribute(0, GPUMEM__ATTR_IPC_POSIX_FD_SUPPORTED, &value));
  CHECK_EQ(value, 1);

  size_t free_bytes = 0, total = 0;
  CHECK_OK(dev->mem_info(1, &free_bytes, &total));
  CHECK_U64_EQ(total, CAPACITY);
  CHECK_U64_EQ(free_bytes, CAPACITY);

  /* The current device is per thread. */
  CHECK_OK(dev->set_device(1));
  int device = -1;
  CHECK_OK(dev->get_device(&device));
  CHECK_EQ(device, 1);
  int other = -1;
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, read_current_device, &other) == 0);
  pthread_join(thread, NULL);
  CHECK_EQ(other, 0);
  CHECK_FAILS_WITH(dev->set_device(7), GPUMEM_ERR_INVALID_DEVICE, "device 7");
  CHECK_OK(dev->get_device(&device));
  CHECK_EQ(device, 1);
  CHECK_OK(dev->set_device(0));
}

/* ---------------------------------------------------------------------------------------
 * Memory and capacity
 * ------------------------------------------------------------------------------------- */

static void test_capacity(void) {
  void *big = device_alloc(GiB);
  CHECK_EQ((uintptr_t)big % 256, 0);
  CHECK_U64_EQ(used(0), GiB);
  CHECK_U64_EQ(used(1), 0);
  ((unsigned char *)big)[0] = 1; /* untouched pages cost nothing; touched ones work */
  ((unsigned char *)big)[GiB - 1] = 2;
  size_t free_bytes = 0, total = 0;
  CHECK_OK(dev->mem_info(0, &free_bytes, &total));
  CHECK_U64_EQ(free_bytes, CAPACITY - GiB);

  /* Past the capacity: out of memory, the raw CUDA error, and nothing changed. */
  void *untouched = (void *)0x1;
  CHECK_FAILS_WITH(dev->mem_alloc(0, (size_t)CAPACITY, &untouched), GPUMEM_ERR_OUT_OF_MEMORY,
                   "simulated device 0");
  CHECK_CONTAINS(gpumem_last_error_message(), "free");
  CHECK_EQ(gpumem_last_cuda_error(), 2);
  CHECK_PTR_EQ(untouched, (void *)0x1);
  CHECK_U64_EQ(used(0), GiB);

  /* Small blocks are 256-byte aligned too, and rounded to 256 bytes of capacity. */
  void *small = device_alloc(100);
  CHECK_EQ((uintptr_t)small % 256, 0);
  CHECK_U64_EQ(used(0), GiB + 256);
  CHECK_OK(dev->mem_free(0, small));
  CHECK_OK(dev->mem_free(0, big));
  CHECK_U64_EQ(used(0), 0);

  /* Managed memory may exceed the device (oversubscription) up to 4 times its capacity. */
  void *managed = NULL;
  CHECK_OK(dev->managed_alloc(0, (size_t)CAPACITY + GiB, &managed));
  CHECK_U64_EQ(used(0), 0);
  uint64_t managed_bytes = 0;
  CHECK_OK(gpumem_sim_managed_used(0, &managed_bytes));
  CHECK_U64_EQ(managed_bytes, CAPACITY + GiB);
  CHECK_FAILS_WITH(dev->managed_alloc(0, (size_t)CAPACITY * 3, &untouched),
                   GPUMEM_ERR_OUT_OF_MEMORY, "managed");
  CHECK_OK(dev->managed_free(0, managed));
  CHECK_OK(gpumem_sim_managed_used(0, &managed_bytes));
  CHECK_U64_EQ(managed_bytes, 0);
  CHECK_FAILS_WITH(gpumem_sim_managed_used(0, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "gpumem_sim_managed_used: bytes is NULL");
  CHECK_FAILS_WITH(gpumem_sim_managed_used(GPUMEM_MAX_DEVICES, &managed_bytes),
                   GPUMEM_ERR_INVALID_DEVICE, "gpumem_sim_managed_used: device");

  void *pinned = NULL;
  CHECK_OK(dev->host_alloc(0, 3000, GPUMEM_PINNED_PORTABLE, &pinned));
  CHECK_EQ((uintptr_t)pinned % 256, 0);
  CHECK_FAILS_WITH(dev->host_alloc(0, 64, 1u << 20, &untouched), GPUMEM_ERR_INVALID_ARGUMENT,
                   "flags");
  CHECK_OK(dev->host_free(0, pinned));
  CHECK_FAILS_WITH(dev->mem_alloc(0, 0, &untouched), GPUMEM_ERR_INVALID_ARGUMENT, "0 bytes");
  CHECK_PTR_EQ(untouched, (void *)0x1);
}

static void test_foreign_free(void) {
  void *block = device_alloc(4096);
  int on_stack;
  CHECK_FAILS_WITH(dev->mem_free(0, &on_stack), GPUMEM_ERR_CUDA, "not returned by mem_alloc");
  CHECK_EQ(gpumem_last_cuda_error(), 1);
  CHECK_FAILS_WITH(dev->mem_free(0, (char *)block + 256), GPUMEM_ERR_CUDA, "inside");
  CHECK_FAILS_WITH(dev->managed_free(0, block), GPUMEM_ERR_CUDA, "managed_alloc");
  CHECK_FAILS_WITH(dev->host_free(0, block), GPUMEM_ERR_CUDA, "host_alloc");
  CHECK_U64_EQ(used(0), 4096);
  CHECK_OK(dev->mem_free(0, block));
  CHECK_FAILS_WITH(dev->mem_free(0, block), GPUMEM_ERR_CUDA, "already freed");
  CHECK_U64_EQ(used(0), 0);
}

/* ---------------------------------------------------------------------------------------
 * Streams and copies
 * ------------------------------------------------------------------------------------- */

static void test_work_waits_for_completion(void) {
  gpumem_stream s = new_stream(0);
  unsigned char *buf = device_alloc(4096);
  unsigned char host[4096];
  memset(buf, 0x11, 4096);
  memset(host, 0, sizeof host);
  CHECK_OK(dev->memset_async(buf, 0x22, 4096, s));
  CHECK_OK(dev->memcpy_async(host, buf, 4096, s));
  CHECK_U64_EQ(pending(s), 2);
  CHECK_STATUS(dev->stream_query(s), GPUMEM_ERR_NOT_READY);
  CHECK(all_bytes(buf, 0x11, 4096)); /* nothing ran yet */
  CHECK(all_bytes(host, 0, sizeof host));
  CHECK_OK(gpumem_sim_complete(s));
  CHECK(all_bytes(buf, 0x22, 4096));
  CHECK(all_bytes(host, 0x22, sizeof host));
  CHECK_U64_EQ(pending(s), 0);
  CHECK_OK(dev->stream_query(s));

  /* The default stream (NULL, legacy, per-thread) is the current device's. */
  CHECK_OK(dev->memset_async(buf, 0x33, 16, NULL));
  CHECK_U64_EQ(pending((gpumem_stream)0x1), 1);
  CHECK_U64_EQ(pending((gpumem_stream)0x2), 1);
  CHECK_OK(dev->stream_synchronize((gpumem_stream)0x2));
  CHECK(all_bytes(buf, 0x33, 16));

  /* A free synchronizes: queued work touching the block runs before it goes. */
  CHECK_OK(dev->memset_async(host, 0x44, 64, s));
  CHECK_OK(dev->mem_free(0, buf));
  CHECK_U64_EQ(pending(s), 0);
  CHECK(all_bytes(host, 0x44, 64));
  CHECK_OK(dev->stream_destroy(s));
}

static void test_staged_copy(void) {
  gpumem_stream s = new_stream(0);
  unsigned char *buf = device_alloc(1024);
  memset(buf, 0, 1024);
  unsigned char *src = malloc(1024);
  memset(src, 'A', 1024);
  CHECK_OK(dev->memcpy_async(buf, src, 1024, s));
  memset(src, 'B', 1024); /* the driver staged the pageable source before returning */
  free(src);
  CHECK(all_bytes(buf, 0, 1024));
  CHECK_OK(dev->stream_synchronize(s));
  CHECK(all_bytes(buf, 'A', 1024));

  /* Staging first synchronizes with the stream: earlier work writing the source is seen. */
  unsigned char pageable[256];
  memset(pageable, 0, sizeof pageable);
  CHECK_OK(dev->memset_async(pageable, 0x5e, sizeof pageable, s));
  CHECK_OK(dev->memcpy_async(buf, pageable, sizeof pageable, s));
  CHECK_U64_EQ(pending(s), 1);
  CHECK_OK(gpumem_sim_complete(s));
  CHECK(all_bytes(buf, 0x5e, sizeof pageable));

  /* Device to device copies read the source when they run. */
  unsigned char *other = device_alloc(1024);
  memset(other, 'C', 1024);
  CHECK_OK(dev->memcpy_async(buf, other, 1024, s));
  memset(other, 'D', 1024);
  CHECK_OK(gpumem_sim_complete(s));
  CHECK(all_bytes(buf, 'D', 1024));

  /* Ranges that leave the allocation they touch are refused, and nothing is queued. */
  unsigned char local[512];
  CHECK_FAILS_WITH(dev->memcpy_async(buf + 1000, local, 100, s), GPUMEM_ERR_INVALID_ARGUMENT,
                   "runs outside");
  CHECK_FAILS_WITH(dev->memcpy_async(local, other + 1000, 100, s), GPUMEM_ERR_INVALID_ARGUMENT,
                   "source");
  CHECK_FAILS_WITH(dev->memset_async(buf - 16, 0, 32, s), GPUMEM_ERR_INVALID_ARGUMENT,
                   "runs outside");
  CHECK_U64_EQ(pending(s), 0);
  CHECK_OK(dev->memcpy_async(buf, local, 0, s)); /* zero bytes: nothing to do */
  CHECK_U64_EQ(pending(s), 0);
  CHECK_OK(dev->mem_free(0, other));
  CHECK_OK(dev->mem_free(0, buf));
  CHECK_OK(dev->stream_destroy(s));
}

static void test_launch_prefetch_advise(void) {
  gpumem_stream s = new_stream(0);
  unsigned char *block = device_alloc(4096);
  void *managed = NULL, *pinned = NULL;
  CHECK_OK(dev->managed_alloc(0, 8192, &managed));
  CHECK_OK(dev->host_alloc(0, 4096, 0, &pinned));
  unsigned char local[64];

  CHECK_OK(gpumem_sim_launch(s, block + 1024, 1024, 0x5a));
  CHECK_OK(gpumem_sim_launch(s, managed, 8192, 0x6b));
  /* Pinned memory is device-accessible (unified addressing), and so is pageable memory
   * where the device has pageable access (this configuration). */
  CHECK_OK(gpumem_sim_launch(s, pinned, 64, 0x7c));
  CHECK_OK(gpumem_sim_launch(s, local, sizeof local, 0x7d));
  CHECK_FAILS_WITH(gpumem_sim_launch(s, block + 4000, 200, 1), GPUMEM_ERR_INVALID_ARGUMENT,
                   "runs outside");
  CHECK_U64_EQ(pending(s), 4);
  CHECK_OK(gpumem_sim_complete(s));
  CHECK(all_bytes(block + 1024, 0x5a, 1024));
  CHECK(all_bytes(managed, 0x6b, 8192));
  CHECK(all_bytes(pinned, 0x7c, 64));
  CHECK(all_bytes(local, 0x7d, sizeof local));

  CHECK_OK(dev->prefetch(managed, 8192, 0, s));
  CHECK_OK(dev->prefetch(managed, 4096, -1, s)); /* -1: to the host (CU_DEVICE_CPU) */
  CHECK_U64_EQ(pending(s), 2);
  CHECK_FAILS_WITH(dev->prefetch(block, 4096, 0, s), GPUMEM_ERR_INVALID_ARGUMENT, "managed");
  CHECK_OK(dev->advise(managed, 8192, GPUMEM_ADVISE_READ_MOSTLY, 0));
  CHECK_FAILS_WITH(dev->advise(block, 4096, GPUMEM_ADVISE_READ_MOSTLY, 0),
                   GPUMEM_ERR_INVALID_ARGUMENT, "managed memory only");
  CHECK_OK(dev->managed_free(0, managed)); /* runs the prefetches first */
  CHECK_U64_EQ(pending(s), 0);
  CHECK_OK(dev->host_free(0, pinned));
  CHECK_OK(dev->mem_free(0, block));
  CHECK_OK(dev->stream_destroy(s));
}

/* ---------------------------------------------------------------------------------------
 * Events and waits
 * ------------------------------------------------------------------------------------- */

static void test_events(void) {
  gpumem_stream a = new_stream(0), b = new_stream(0);
  unsigned char *first = device_alloc(256), *second = device_alloc(256);
  memset(first, 0, 256);
  memset(second, 0, 256);
  gpumem__event e = NULL;
  CHECK_OK(dev->event_create(0, &e));
  CHECK_OK(dev->event_query(e)); /* never recorded: nothing to wait for */

  CHECK_OK(gpumem_sim_launch(a, first, 256, 1));
  CHECK_OK(dev->event_record(0, e, a));
  CHECK_OK(gpumem_sim_launch(a, second, 256, 2));
  CHECK_OK(dev->stream_wait_event(0, b, e));
  CHECK_STATUS(dev->event_query(e), GPUMEM_ERR_NOT_READY);
  CHECK_U64_EQ(pending(b), 1);

  /* Completing B runs A up to the event, not A's later work. */
  CHECK_OK(gpumem_sim_complete(b));
  CHECK(all_bytes(first, 1, 256));
  CHECK(all_bytes(second, 0, 256));
  CHECK_U64_EQ(pending(a), 1);
  CHECK_OK(dev->event_query(e));
  CHECK_STATUS(dev->stream_query(a), GPUMEM_ERR_NOT_READY);

  /* Event synchronization runs exactly the recorded work. */
  CHECK_OK(dev->event_record(0, e, a));
  CHECK_OK(gpumem_sim_launch(a, first, 256, 3));
  CHECK_OK(dev->event_synchronize(e));
  CHECK(all_bytes(second, 2, 256));
  CHECK(all_bytes(first, 1, 256));
  CHECK_U64_EQ(pending(a), 1);

  /* Recording on a stream of another device is refused, as CUDA does. */
  gpumem_stream other_device = new_stream(1);
  CHECK_FAILS_WITH(dev->event_record(0, e, other_device), GPUMEM_ERR_INVALID_STREAM, "device");

  /* A destroyed stream's work has run, so its events are complete. */
  CHECK_OK(dev->event_record(0, e, a));
  CHECK_OK(dev->stream_destroy(a));
  CHECK(all_bytes(first, 3, 256));
  CHECK_OK(dev->event_query(e));
  CHECK_OK(dev->event_destroy(e));
  CHECK_FAILS_WITH(dev->event_query(e), GPUMEM_ERR_INVALID_ARGUMENT, "not an event");
  CHECK_OK(dev->stream_destroy(b));
  CHECK_OK(dev->stream_destroy(other_device));
  CHECK_OK(dev->mem_free(0, first));
  CHECK_OK(dev->mem_free(0, second));
}

/* ---------------------------------------------------------------------------------------
 * Hazard detection
 * ------------------------------------------------------------------------------------- */

static void test_hazards(void) {
  gpumem_stream a = new_stream(0), b = new_stream(0), c = new_stream(1);
  void *block = device_alloc(64 * KiB), *elsewhere = device_alloc(4096);
  gpumem__event e = NULL, ec = NULL;
  CHECK_OK(dev->event_create(0, &e));
  CHECK_OK(dev->event_create(1, &ec));
  gpumem_sim_reset_hazards();

  /* A's kernel is pending and B was not made to wait: handing the block to B is a race. */
  printf("(three HAZARD lines on stderr are expected next)\n");
  fflush(stdout);
  CHECK_OK(gpumem_sim_launch(a, block, 64 * KiB, 1));
  dev->note_handout((char *)block + 4096, 256, b);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 1);
  gpumem_sim_reset_hazards();
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);

  /* Same stream: stream order protects it. Other memory: nothing shared. */
  dev->note_handout(block, 64 * KiB, a);
  dev->note_handout(elsewhere, 4096, b);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);

  /* An event recorded after the use and waited on by B orders B after it. */
  CHECK_OK(dev->event_record(0, e, a));
  CHECK_OK(dev->stream_wait_event(0, b, e));
  dev->note_handout(block, 64 * KiB, b);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);

  /* Transitively: A -> C (another device) -> B covers A's new use. */
  CHECK_OK(gpumem_sim_launch(a, block, 64, 2));
  CHECK_OK(dev->event_record(0, e, a));
  CHECK_OK(dev->stream_wait_event(0, c, e));
  CHECK_OK(dev->event_record(1, ec, c));
  CHECK_OK(dev->stream_wait_event(1, b, ec));
  dev->note_handout(block, 64, b);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);

  /* Work enqueued after the event is not covered... */
  CHECK_OK(gpumem_sim_launch(a, block, 64, 3));
  dev->note_handout(block, 64, b);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 1);
  /* ...until it completes. */
  CHECK_OK(gpumem_sim_complete(a));
  dev->note_handout(block, 64, b);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 1);

  /* A pending copy reading the block is a use too. */
  unsigned char host[64];
  CHECK_OK(dev->memcpy_async(host, block, 64, a));
  dev->note_handout(block, 64, NULL);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 2);
  CHECK_OK(gpumem_sim_complete_all());
  dev->note_handout(block, 64, NULL);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 2);
  gpumem_sim_reset_hazards();

  CHECK_OK(dev->event_destroy(e));
  CHECK_OK(dev->event_destroy(ec));
  CHECK_OK(dev->stream_destroy(a));
  CHECK_OK(dev->stream_destroy(b));
  CHECK_OK(dev->stream_destroy(c));
  CHECK_OK(dev->mem_free(0, block));
  CHECK_OK(dev->mem_free(0, elsewhere));
}

/* ---------------------------------------------------------------------------------------
 * Driver pools
 * ------------------------------------------------------------------------------------- */

static uint64_t reserved(gpumem__mempool pool) {
  uint64_t bytes = UINT64_MAX;
  CHECK_OK(dev->pool_reserved(pool, &bytes));
  return bytes;
}

static void *pool_alloc(gpumem__mempool pool, size_t bytes, gpumem_stream stream) {
  void *p = NULL;
  CHECK_OK(dev->pool_alloc_async(0, pool, bytes, stream, &p));
  CHECK(p != NULL);
  return p;
}

static void test_pool_reuse(void) {
  gpumem__mempool pool = NULL, untouched = NULL;
  CHECK_FAILS_WITH(dev->pool_create(0, GPUMEM_IPC_FABRIC, &untouched), GPUMEM_ERR_UNSUPPORTED,
                   "fabric");
  CHECK_FAILS_WITH(dev->pool_create(0, (gpumem_ipc_handle)9, &untouched),
                   GPUMEM_ERR_INVALID_ARGUMENT, "IPC");
  CHECK(untouched == NULL);
  CHECK_OK(dev->pool_create(0, GPUMEM_IPC_POSIX_FD, &pool));
  CHECK_OK(dev->pool_set_release_threshold(pool, UINT64_MAX));
  gpumem_stream a = new_stream(0), b = new_stream(0);
  void *wrong = NULL; /* callers name the pool's device; another is caught */
  CHECK_FAILS_WITH(dev->pool_alloc_async(1, pool, MiB, a, &wrong), GPUMEM_ERR_INVALID_DEVICE,
                   "belongs to device 0, not device 1");
  CHECK(wrong == NULL);

  void *p1 = pool_alloc(pool, MiB, a);
  CHECK_U64_EQ(reserved(pool), MiB);
  CHECK_U64_EQ(used(0), MiB);
  CHECK_OK(gpumem_sim_launch(a, p1, MiB, 1));
  CHECK_OK(dev->free_async(p1, a));
  CHECK_U64_EQ(reserved(pool), MiB); /* cached, still held */

  /* A's use is pending: B gets new memory, A gets the block back at once. */
  void *p2 = pool_alloc(pool, MiB, b);
  CHECK(p2 != p1);
  CHECK_U64_EQ(reserved(pool), 2 * MiB);
  void *again = pool_alloc(pool, MiB, a);
  CHECK_PTR_EQ(again, p1);
  CHECK_OK(dev->free_async(p1, a));

  /* Once A's work up to the free completes, B may reuse it. */
  CHECK_OK(gpumem_sim_complete(a));
  void *reused = pool_alloc(pool, MiB, b);
  CHECK_PTR_EQ(reused, p1);
  CHECK_U64_EQ(reserved(pool), 2 * MiB);
  dev->note_handout(reused, MiB, b);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);

  /* Fit: a block serves requests in (size / 2, size]. */
  CHECK_OK(dev->free_async(reused, b));
  void *small = pool_alloc(pool, 256 * KiB, b);
  CHECK(small != p1);
  void *fits = pool_alloc(pool, 768 * KiB, b);
  CHECK_PTR_EQ(fits, p1);
  CHECK_U64_EQ(reserved(pool), 2 * MiB + 256 * KiB);

  /* Misuse: not from a pool, freed twice. */
  int on_stack;
  CHECK_FAILS_WITH(dev->free_async(&on_stack, a), GPUMEM_ERR_CUDA, "pool_alloc_async");
  CHECK_EQ(gpumem_last_cuda_error(), 1);
  CHECK_OK(dev->free_async(small, b));
  CHECK_FAILS_WITH(dev->free_async(small, b), GPUMEM_ERR_CUDA, "already freed");

  /* Trim gives back cached blocks until the pool holds at most `keep`. */
  CHECK_OK(dev->free_async(fits, b));
  CHECK_OK(dev->free_async(p2, b));
  CHECK_U64_EQ(reserved(pool), 2 * MiB + 256 * KiB);
  CHECK_OK(dev->pool_trim(pool, MiB + 256 * KiB));
  CHECK(reserved(pool) <= MiB + 256 * KiB);
  CHECK_OK(dev->pool_trim(pool, 0));
  CHECK_U64_EQ(reserved(pool), 0);
  CHECK_U64_EQ(used(0), 0);

  /* A synchronization gives back cached blocks above the release threshold. */
  void *p3 = pool_alloc(pool, MiB, a);
  CHECK_OK(dev->free_async(p3, a));
  CHECK_OK(dev->stream_synchronize(a));
  CHECK_U64_EQ(reserved(pool), MiB); /* threshold UINT64_MAX keeps it */
  CHECK_OK(dev->pool_set_release_threshold(pool, 0));
  CHECK_OK(dev->stream_synchronize(b));
  CHECK_U64_EQ(reserved(pool), 0);

  CHECK_OK(dev->stream_destroy(a));
  CHECK_OK(dev->stream_destroy(b));
  CHECK_OK(dev->pool_destroy(0, pool));
  CHECK_FAILS_WITH(dev->pool_reserved(pool, &(uint64_t){0}), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not a driver pool");
}

static void test_pool_events_and_destroy(void) {
  gpumem__mempool pool = NULL;
  CHECK_OK(dev->pool_create(0, GPUMEM_IPC_NONE, &pool));
  CHECK_OK(dev->pool_set_release_threshold(pool, UINT64_MAX));
  gpumem_stream a = new_stream(0), b = new_stream(0);
  gpumem__event e = NULL;
  CHECK_OK(dev->event_create(0, &e));

  /* B waited for an event recorded after A's free: the driver follows that dependency. */
  void *p = pool_alloc(pool, 4096, a);
  CHECK_OK(gpumem_sim_launch(a, p, 4096, 1));
  CHECK_OK(dev->free_async(p, a));
  CHECK_OK(dev->event_record(0, e, a));
  CHECK_OK(dev->stream_wait_event(0, b, e));
  void *q = pool_alloc(pool, 4096, b);
  CHECK_PTR_EQ(q, p);
  dev->note_handout(q, 4096, b);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);

  /* Out of device memory: the pool says so, naming the device. */
  void *untouched = (void *)0x1;
  CHECK_FAILS_WITH(dev->pool_alloc_async(0, pool, (size_t)CAPACITY, b, &untouched),
                   GPUMEM_ERR_OUT_OF_MEMORY, "simulated device 0");
  CHECK_PTR_EQ(untouched, (void *)0x1);

  /* Destroy frees everything, live blocks included, after the pending work. */
  CHECK_OK(gpumem_sim_launch(b, q, 4096, 2));
  CHECK_U64_EQ(used(0), 4096);
  CHECK_OK(dev->pool_destroy(0, pool));
  CHECK_U64_EQ(used(0), 0);
  CHECK_U64_EQ(pending(a), 0);
  CHECK_U64_EQ(pending(b), 0);
  CHECK_OK(dev->event_destroy(e));
  CHECK_OK(dev->stream_destroy(a));
  CHECK_OK(dev->stream_destroy(b));
}

/* ---------------------------------------------------------------------------------------
 * Virtual memory
 * ------------------------------------------------------------------------------------- */

static void test_vmm(void) {
  void *va = NULL, *untouched = (void *)0x1;
  CHECK_FAILS_WITH(dev->vmm_reserve(0, GRAIN + 4096, 0, &untouched), GPUMEM_ERR_INVALID_ARGUMENT,
                   "granularity");
  CHECK_FAILS_WITH(dev->vmm_reserve(0, GRAIN, 3 * MiB, &untouched), GPUMEM_ERR_INVALID_ARGUMENT,
                   "power of two");
  CHECK_OK(dev->vmm_reserve(0, 4 * GRAIN, 8 * MiB, &va));
  CHECK_EQ((uintptr_t)va % (8 * MiB), 0);
  CHECK_U64_EQ(used(0), 0); /* address space is not memory */

  gpumem__vmm_handle h1 = 0, h2 = 0;
  CHECK_FAILS_WITH(dev->vmm_create(0, MiB, &h1), GPUMEM_ERR_INVALID_ARGUMENT, "granularity");
  CHECK_OK(dev->vmm_create(0, GRAIN, &h1));
  CHECK_OK(dev->vmm_create(0, GRAIN, &h2));
  CHECK_U64_EQ(used(0), 2 * GRAIN);

  char *base = va;
  CHECK_FAILS_WITH(dev->vmm_map(base + 4096, GRAIN, h1), GPUMEM_ERR_INVALID_ARGUMENT,
                   "granularity");
  CHECK_FAILS_WITH(dev->vmm_map(base + 4 * GRAIN, GRAIN, h1), GPUMEM_ERR_INVALID_ARGUMENT,
                   "vmm_reserve");
  CHECK_FAILS_WITH(dev->vmm_map(base, 2 * GRAIN, h1), GPUMEM_ERR_INVALID_ARGUMENT,
                   "physical allocation");
  CHECK_OK(dev->vmm_map(base, GRAIN, h1));
  CHECK_FAILS_WITH(dev->vmm_map(base, GRAIN, h2), GPUMEM_ERR_INVALID_ARGUMENT, "already mapped");
  CHECK_OK(dev->vmm_map(base + GRAIN, GRAIN, h2));

  /* Mapped but not yet accessible: no device work may touch it. */
  gpumem_stream s = new_stream(0);
  CHECK_FAILS_WITH(dev->memset_async(base, 1, 64, s), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not mapped and made accessible");
  CHECK_FAILS_WITH(dev->vmm_set_access(base, GRAIN / 2, 0), GPUMEM_ERR_INVALID_ARGUMENT,
                   "granularity");
  CHECK_OK(dev->vmm_set_access(base, 2 * GRAIN, 0));

  /* Adjacent mappings form one range a kernel may span. */
  CHECK_OK(gpumem_sim_launch(s, base + GRAIN - 128, 256, 7));
  CHECK_FAILS_WITH(gpumem_sim_launch(s, base + 2 * GRAIN - 128, 256, 7),
                   GPUMEM_ERR_INVALID_ARGUMENT, "not mapped");
  CHECK_OK(gpumem_sim_complete(s));
  CHECK(all_bytes(base + GRAIN - 128, 7, 256));

  /* Misuse: release while mapped, unmap half a mapping. */
  CHECK_FAILS_WITH(dev->vmm_release(va, 4 * GRAIN), GPUMEM_ERR_INVALID_ARGUMENT, "still mapped");
  CHECK_FAILS_WITH(dev->vmm_unmap(base + GRAIN, GRAIN * 2), GPUMEM_ERR_INVALID_ARGUMENT,
                   "no mapping");

  /* Destroying a mapped allocation gives its memory back only when it is unmapped. */
  CHECK_OK(dev->vmm_destroy(h1));
  CHECK_FAILS_WITH(dev->vmm_destroy(h1), GPUMEM_ERR_INVALID_ARGUMENT, "destroyed");
  CHECK_U64_EQ(used(0), 2 * GRAIN);
  CHECK_OK(gpumem_sim_launch(s, base, 64, 9));
  CHECK_OK(dev->vmm_unmap(base, GRAIN)); /* runs the pending kernel first */
  CHECK_U64_EQ(pending(s), 0);
  CHECK_U64_EQ(used(0), GRAIN);
  CHECK_FAILS_WITH(gpumem_sim_launch(s, base, 64, 1), GPUMEM_ERR_INVALID_ARGUMENT, "not mapped");

  /* Remapped memory starts inaccessible and does not show old contents. */
  CHECK_OK(dev->vmm_unmap(base + GRAIN, GRAIN));
  CHECK_OK(dev->vmm_map(base, GRAIN, h2));
  CHECK_OK(dev->vmm_set_access(base, GRAIN, 0));
  CHECK(all_bytes(base, 0, 4096));
  CHECK_OK(dev->vmm_unmap(base, GRAIN));
  CHECK_OK(dev->vmm_destroy(h2));
  CHECK_U64_EQ(used(0), 0);
  CHECK_FAILS_WITH(dev->vmm_release(va, GRAIN), GPUMEM_ERR_INVALID_ARGUMENT, "whole");
  CHECK_OK(dev->vmm_release(va, 4 * GRAIN));
  CHECK_FAILS_WITH(dev->vmm_release(va, 4 * GRAIN), GPUMEM_ERR_INVALID_ARGUMENT, "vmm_reserve");

  /* Physical memory counts against the capacity. */
  gpumem__vmm_handle untouched_handle = 12345;
  CHECK_FAILS_WITH(dev->vmm_create(0, (size_t)CAPACITY + GRAIN, &untouched_handle),
                   GPUMEM_ERR_OUT_OF_MEMORY, "out of memory");
  CHECK_U64_EQ(untouched_handle, 12345);
  CHECK_OK(dev->stream_destroy(s));
}

/* ---------------------------------------------------------------------------------------
 * Fault injection
 * ------------------------------------------------------------------------------------- */

static void test_fault_injection(void) {
  uint64_t allocs = gpumem_sim_call_count(GPUMEM_SIM_CALL_MEM_ALLOC);
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEM_ALLOC, 2));
  void *first = device_alloc(4096);
  void *untouched = (void *)0x1;
  CHECK_FAILS_WITH(dev->mem_alloc(0, 4096, &untouched), GPUMEM_ERR_OUT_OF_MEMORY, "injected");
  CHECK_CONTAINS(gpumem_last_error_message(), "mem_alloc call #");
  CHECK_EQ(gpumem_last_cuda_error(), 2);
  CHECK_PTR_EQ(untouched, (void *)0x1);
  CHECK_U64_EQ(used(0), 4096);
  void *third = device_alloc(4096); /* once only */
  CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_MEM_ALLOC), allocs + 3);

  /* Other calls fail as driver errors, and change nothing. */
  gpumem_stream s = new_stream(0);
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_SYNCHRONIZE, 1));
  CHECK_OK(dev->memset_async(first, 1, 4096, s));
  CHECK_FAILS_WITH(dev->stream_synchronize(s), GPUMEM_ERR_CUDA, "synchronize");
  CHECK_EQ(gpumem_last_cuda_error(), 999);
  CHECK_U64_EQ(pending(s), 1);
  CHECK_OK(dev->stream_synchronize(s));
  CHECK_U64_EQ(pending(s), 0);

  gpumem_stream untouched_stream = (gpumem_stream)0x1;
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_STREAM_CREATE, 1));
  CHECK_FAILS_WITH(dev->stream_create(0, &untouched_stream), GPUMEM_ERR_CUDA, "stream_create");
  CHECK_PTR_EQ(untouched_stream, (gpumem_stream)0x1);

  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEMCPY, 1));
  unsigned char host[16] = {0};
  CHECK_FAILS_WITH(dev->memcpy_async(first, host, 16, s), GPUMEM_ERR_CUDA, "memcpy_async");
  CHECK_U64_EQ(pending(s), 0);

  /* An event whose record failed is still unrecorded. */
  gpumem__event e = NULL;
  CHECK_OK(dev->event_create(0, &e));
  CHECK_OK(gpumem_sim_launch(s, first, 64, 2));
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_EVENT_RECORD, 1));
  CHECK_FAILS_WITH(dev->event_record(0, e, s), GPUMEM_ERR_CUDA, "event_record");
  CHECK_OK(dev->event_query(e));

  gpumem__mempool pool = NULL;
  CHECK_OK(dev->pool_create(0, GPUMEM_IPC_NONE, &pool));
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_POOL_ALLOC, 1));
  CHECK_FAILS_WITH(dev->pool_alloc_async(0, pool, 4096, s, &untouched), GPUMEM_ERR_OUT_OF_MEMORY,
                   "pool_alloc_async");
  CHECK_U64_EQ(reserved(pool), 0);

  /* Cancelling, and kinds counted separately. */
  uint64_t maps = gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_MAP);
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEM_FREE, 1));
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEM_FREE, 0));
  CHECK_OK(dev->mem_free(0, third));
  CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_VMM_MAP), maps);
  CHECK_FAILS_WITH(gpumem_sim_fail_call(GPUMEM_SIM_CALL_KIND_COUNT, 1), GPUMEM_ERR_INVALID_ARGUMENT,
                   "call kind");

  CHECK_OK(dev->pool_destroy(0, pool));
  CHECK_OK(dev->event_destroy(e));
  CHECK_OK(dev->stream_destroy(s));
  CHECK_OK(dev->mem_free(0, first));
  CHECK_U64_EQ(used(0), 0);
}

/* ---------------------------------------------------------------------------------------
 * Bad stream handles
 * ------------------------------------------------------------------------------------- */

static void test_stream_handles(void) {
  gpumem_stream bogus = (gpumem_stream)(uintptr_t)0x1234;
  unsigned char *buf = device_alloc(256);
  CHECK_FAILS_WITH(dev->memset_async(buf, 0, 256, bogus), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not a stream");
  CHECK_FAILS_WITH(dev->stream_synchronize(bogus), GPUMEM_ERR_INVALID_ARGUMENT, "not a stream");
  CHECK_FAILS_WITH(gpumem_sim_complete(bogus), GPUMEM_ERR_INVALID_ARGUMENT, "not a stream");
  int device = 99;
  CHECK_FAILS_WITH(dev->stream_device(bogus, &device), GPUMEM_ERR_INVALID_ARGUMENT, "not a stream");
  CHECK_EQ(device, 99);
  CHECK_OK(dev->stream_device(NULL, &device));
  CHECK_EQ(device, GPUMEM_CURRENT_DEVICE);
  CHECK_OK(dev->stream_device((gpumem_stream)0x2, &device));
  CHECK_EQ(device, GPUMEM_CURRENT_DEVICE);
  CHECK_FAILS_WITH(dev->stream_destroy(NULL), GPUMEM_ERR_INVALID_ARGUMENT, "default stream");

  gpumem_stream s = new_stream(1);
  CHECK_OK(dev->stream_device(s, &device));
  CHECK_EQ(device, 1);
  CHECK_OK(dev->memset_async(buf, 0x77, 256, s));
  CHECK_OK(dev->stream_destroy(s)); /* runs the stream's work first */
  CHECK(all_bytes(buf, 0x77, 256));
  CHECK_FAILS_WITH(dev->stream_query(s), GPUMEM_ERR_INVALID_ARGUMENT, "destroyed");
  CHECK_FAILS_WITH(dev->stream_destroy(s), GPUMEM_ERR_INVALID_ARGUMENT, "not a stream");
  CHECK_OK(dev->mem_free(0, buf));
}

/* ---------------------------------------------------------------------------------------
 * Many threads
 * ------------------------------------------------------------------------------------- */

#define THREADS 8
#define ROUNDS 300

typedef struct worker {
  int index;
  gpumem__mempool pool;
  gpumem_stream shared;
  int failures;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  gpumem_stream s = NULL;
  CHECK_OK(dev->stream_create(w->index % 2, &s));
  gpumem__event e = NULL;
  CHECK_OK(dev->event_create(w->index % 2, &e));
  unsigned char host[2048];
  for (int round = 0; round < ROUNDS; round++) {
    size_t bytes = 256 + (size_t)((round * 37 + w->index * 101) % 1792);
    unsigned char value = (unsigned char)(w->index * 16 + round % 16);
    void *p = NULL;
    bool from_pool = round % 3 == 0 && w->index % 2 == 0;
    if (from_pool)
      CHECK_OK(dev->pool_alloc_async(0, w->pool, bytes, s, &p));
    else
      CHECK_OK(dev->mem_alloc(w->index % 2, bytes, &p));
    dev->note_handout(p, bytes, s);
    CHECK_OK(dev->memset_async(p, value, bytes, s));
    CHECK_OK(dev->event_record(w->index % 2, e, s));
    CHECK_OK(
        dev->stream_wait_event(w->index % 2, w->shared, e)); /* other threads' streams wait too */
    CHECK_OK(dev->memcpy_async(host, p, bytes, s));
    CHECK_OK(dev->stream_synchronize(s));
    if (!all_bytes(host, value, bytes))
      w->failures++;
    if (from_pool)
      CHECK_OK(dev->free_async(p, s));
    else
      CHECK_OK(dev->mem_free(w->index % 2, p));
    if (round % 50 == 0)
      CHECK_OK(gpumem_sim_complete_all());
  }
  CHECK_OK(dev->event_destroy(e));
  CHECK_OK(dev->stream_destroy(s));
  return NULL;
}

static void test_threads(void) {
  gpumem__mempool pool = NULL;
  CHECK_OK(dev->pool_create(0, GPUMEM_IPC_NONE, &pool));
  gpumem_stream shared = new_stream(1);
  worker workers[THREADS];
  pthread_t threads[THREADS];
  gpumem_sim_reset_hazards();
  for (int i = 0; i < THREADS; i++) {
    workers[i] = (worker){.index = i, .pool = pool, .shared = shared};
    CHECK(pthread_create(&threads[i], NULL, work, &workers[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(threads[i], NULL);
    CHECK_EQ(workers[i].failures, 0);
  }
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  CHECK_OK(dev->stream_destroy(shared));
  CHECK_OK(dev->pool_destroy(0, pool));
  CHECK_U64_EQ(used(0), 0);
  CHECK_U64_EQ(used(1), 0);
}

/* ---------------------------------------------------------------------------------------
 * Configurations of their own, each in a forked child
 * ------------------------------------------------------------------------------------- */

/* The environment's settings, read when gpumem_sim_configure gets NULL. */
static int child_environment(void) {
  setenv("GPUMEM_SIM_DEVICES", "3", 1);
  setenv("GPUMEM_SIM_MEMORY", "512MiB", 1);
  setenv("GPUMEM_SIM_VMM", "off", 1);
  setenv("GPUMEM_SIM_PAGEABLE", "0", 1);
  CHECK_OK(gpumem_sim_configure(NULL));
  dev = gpumem__device_get(NULL);
  CHECK(dev == &gpumem__sim_device_ops);
  int count = 0;
  CHECK_OK(dev->device_count(&count));
  CHECK_EQ(count, 3);
  size_t free_bytes = 0, total = 0;
  CHECK_OK(dev->mem_info(2, &free_bytes, &total));
  CHECK_U64_EQ(total, 512 * MiB);
  int64_t value = -1;
  CHECK_OK(dev->device_attribute(0, GPUMEM__ATTR_VMM_SUPPORTED, &value));
  CHECK_EQ(value, 0);
  CHECK_OK(dev->device_attribute(0, GPUMEM__ATTR_PAGEABLE_MEMORY_ACCESS, &value));
  CHECK_EQ(value, 0);
  void *va = (void *)0x1;
  CHECK_FAILS_WITH(dev->vmm_reserve(0, GRAIN, 0, &va), GPUMEM_ERR_UNSUPPORTED,
                   "virtual memory management is off");
  CHECK_FAILS_WITH(dev->vmm_create(0, GRAIN, &(gpumem__vmm_handle){0}), GPUMEM_ERR_UNSUPPORTED,
                   "off");
  CHECK_PTR_EQ(va, (void *)0x1);
  unsigned char local[16];
  CHECK_FAILS_WITH(dev->memset_async(local, 0, sizeof local, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "pageable");
  CHECK_FAILS_WITH(gpumem_sim_launch(NULL, local, sizeof local, 0), GPUMEM_ERR_INVALID_ARGUMENT,
                   "pageable");
  uint64_t queued = 99;
  CHECK_OK(gpumem_sim_pending(NULL, &queued));
  CHECK_U64_EQ(queued, 0);
  return 0;
}

static int child_bad_environment(void) {
  setenv("GPUMEM_SIM_HAZARD", "sometimes", 1);
  CHECK_OK(gpumem_sim_configure(NULL));
  CHECK_FAILS_WITH(gpumem_init(), GPUMEM_ERR_INVALID_ARGUMENT, "GPUMEM_SIM_HAZARD=sometimes");
  return 0;
}

/* GPUMEM_SIM_VMM_CALL_US: each vmm call that makes, maps, sets access to, unmaps or
 * destroys memory takes at least that long; more than a second is refused, as is a word
 * other than h200. */
static int child_vmm_call_too_long(void) {
  setenv("GPUMEM_SIM_VMM_CALL_US", "1000001", 1);
  CHECK_OK(gpumem_sim_configure(NULL));
  CHECK_FAILS_WITH(gpumem_init(), GPUMEM_ERR_INVALID_ARGUMENT,
                   "GPUMEM_SIM_VMM_CALL_US=1000001; expected microseconds a call, at most "
                   "1000000 (a second), or 'h200'");
  return 0;
}

static int child_vmm_call_not_a_profile(void) {
  setenv("GPUMEM_SIM_VMM_CALL_US", "h100", 1);
  CHECK_OK(gpumem_sim_configure(NULL));
  CHECK_FAILS_WITH(gpumem_init(), GPUMEM_ERR_INVALID_ARGUMENT,
                   "GPUMEM_SIM_VMM_CALL_US=h100; expected microseconds a call");
  return 0;
}

static uint64_t us_since(uint64_t start_ns) {
  return (gpumem__now_ns() - start_ns) / 1000;
}

/* `h200`: each kind of call costs what an H200 charged (17, 2, 34, 24 and 25 µs to make,
 * map, set access, unmap and destroy), setting access and unmapping for each mapping in the
 * range: a run of three pieces takes three times a piece's. */
static int child_vmm_call_h200(void) {
  setenv("GPUMEM_SIM_VMM_CALL_US", "h200", 1);
  CHECK_OK(gpumem_sim_configure(NULL));
  CHECK_OK(gpumem_init());
  dev = gpumem__device_get(NULL);
  void *va = NULL;
  gpumem__vmm_handle handles[3] = {0};
  CHECK_OK(dev->vmm_reserve(0, 3 * GRAIN, 0, &va));
  uint64_t start = gpumem__now_ns();
  CHECK_OK(dev->vmm_create(0, GRAIN, &handles[0]));
  CHECK(us_since(start) >= 17);
  CHECK_OK(dev->vmm_create(0, GRAIN, &handles[1]));
  CHECK_OK(dev->vmm_create(0, GRAIN, &handles[2]));
  start = gpumem__now_ns();
  for (int i = 0; i < 3; i++)
    CHECK_OK(dev->vmm_map((char *)va + i * GRAIN, GRAIN, handles[i]));
  CHECK(us_since(start) >= 3 * 2);
  start = gpumem__now_ns();
  CHECK_OK(dev->vmm_set_access(va, 3 * GRAIN, 0));
  CHECK(us_since(start) >= 3 * 34);
  start = gpumem__now_ns();
  CHECK_OK(dev->vmm_unmap(va, 3 * GRAIN));
  CHECK(us_since(start) >= 3 * 24);
  start = gpumem__now_ns();
  CHECK_OK(dev->vmm_destroy(handles[0]));
  CHECK(us_since(start) >= 25);
  CHECK_OK(dev->vmm_destroy(handles[1]));
  CHECK_OK(dev->vmm_destroy(handles[2]));
  CHECK_OK(dev->vmm_release(va, 3 * GRAIN));
  return 0;
}

static int child_vmm_call_time(void) {
  setenv("GPUMEM_SIM_VMM_CALL_US", "3000", 1);
  CHECK_OK(gpumem_sim_configure(NULL));
  CHECK_OK(gpumem_init());
  dev = gpumem__device_get(NULL);
  void *va = NULL;
  gpumem__vmm_handle handle = 0;
  CHECK_OK(dev->vmm_reserve(0, GRAIN, 0, &va));
  uint64_t start = gpumem__now_ns();
  CHECK_OK(dev->vmm_create(0, GRAIN, &handle));
  CHECK_OK(dev->vmm_map(va, GRAIN, handle));
  CHECK_OK(dev->vmm_set_access(va, GRAIN, 0));
  CHECK_OK(dev->vmm_unmap(va, GRAIN));
  CHECK_OK(dev->vmm_destroy(handle));
  CHECK(gpumem__now_ns() - start >= 5 * 3000 * 1000ull);
  CHECK_OK(dev->vmm_release(va, GRAIN));
  return 0;
}

/* Config fields win over the environment; a hazard aborts when asked to. */
static int child_abort_on_hazard(void) {
  setenv("GPUMEM_SIM_DEVICES", "5", 1);
  gpumem_sim_config config = {.devices = 1, .memory = 64 * MiB, .no_vmm = 1, .abort_on_hazard = 1};
  CHECK_OK(gpumem_sim_configure(&config));
  dev = gpumem__device_get(NULL);
  int count = 0;
  CHECK_OK(dev->device_count(&count));
  CHECK_EQ(count, 1);
  void *va = NULL;
  CHECK_STATUS(dev->vmm_reserve(0, GRAIN, 0, &va), GPUMEM_ERR_UNSUPPORTED);
  gpumem_stream a = new_stream(0), b = new_stream(0);
  void *block = device_alloc(4096);
  CHECK_OK(gpumem_sim_launch(a, block, 4096, 1));
  dev->note_handout(block, 4096, b); /* aborts */
  return 3;
}

/* The gpumem_sim_* controls answer "unsupported" when another backend is in use. */
static int child_other_backend(void) {
  CHECK_OK(gpumem_select_backend(GPUMEM_BACKEND_CUDA));
  CHECK_FAILS_WITH(gpumem_sim_complete_all(), GPUMEM_ERR_UNSUPPORTED, "not the backend");
  CHECK_STATUS(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEM_ALLOC, 1), GPUMEM_ERR_UNSUPPORTED);
  CHECK_STATUS(gpumem_sim_launch(NULL, NULL, 0, 0), GPUMEM_ERR_UNSUPPORTED);
  CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);
  CHECK_U64_EQ(gpumem_sim_call_count(GPUMEM_SIM_CALL_MEM_ALLOC), 0);
  return 0;
}

/* Runs `body` in a child process and returns its wait status. */
static int in_child(int (*body)(void)) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0)
    _exit(body());
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  return status;
}

static void test_children(void) {
  int status = in_child(child_environment);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  status = in_child(child_bad_environment);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  status = in_child(child_vmm_call_too_long);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  status = in_child(child_vmm_call_time);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  status = in_child(child_vmm_call_not_a_profile);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  status = in_child(child_vmm_call_h200);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  printf("(a HAZARD line and an abort message on stderr are expected next)\n");
  status = in_child(child_abort_on_hazard);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  status = in_child(child_other_backend);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
  /* Before anything initializes gpumem in this process, so each child configures afresh. */
  test_children();

  gpumem_sim_config config = {.devices = 2, .memory = CAPACITY};
  CHECK_OK(gpumem_sim_configure(&config));
  check_init_backend();
  CHECK_STATUS(gpumem_sim_configure(&config), GPUMEM_ERR_MISUSE);
  dev = gpumem__device_get(NULL);
  CHECK(dev == &gpumem__sim_device_ops);

  test_devices();
  test_capacity();
  test_foreign_free();
  test_work_waits_for_completion();
  test_staged_copy();
  test_launch_prefetch_advise();
  test_events();
  test_hazards();
  test_pool_reuse();
  test_pool_events_and_destroy();
  test_vmm();
  test_fault_injection();
  test_stream_handles();
  test_threads();
  printf("sim_device: all checks passed\n");
  return 0;
}
