/* async_managed.c: an async resource over the device's default pool of managed memory
 * (options.managed, spec "async(managed=true)"), RMM's cuda_async_managed_memory_resource.
 *
 * - It hands out managed memory (the pointer is managed, the host reads what a copy wrote,
 *   its capabilities say GPUMEM_MEMORY_MANAGED), stream-ordered, from one pool per device
 *   that every such resource shares (the same handle), counting as reserved only what it
 *   allocated itself. The pool is the driver's: releasing a resource leaves it working for
 *   the next, and it cannot be destroyed. Its release threshold changes only when given.
 * - It describes as "async(managed=true)" (with the options given), a spec that builds an
 *   equal resource, also under a pool and adaptors.
 * - Refused, with nothing made: managed with a pool of the program's or an IPC handle type.
 * - Run with GPUMEM_SIM_MANAGED_POOLS=0 (argument "unsupported"): the simulated driver has
 *   no pools of managed memory, and creation fails with GPUMEM_ERR_UNSUPPORTED and a
 *   message that names the CUDA version needed. A GPU without them skips the test. */
#include "check.h"
#include "device/device.h"

#include <stdio.h>
#include <string.h>

enum { MiB = 1 << 20 };

static gpumem_resource *managed_async(uint64_t release_threshold) {
  gpumem_async_options options = {.managed = 1, .release_threshold = release_threshold};
  gpumem_resource *mr = NULL;
  CHECK_OK(gpumem_async_create(0, &options, &mr));
  return mr;
}

static int is_managed(const void *ptr) {
  int managed = -1;
  CHECK_OK(gpumem__device_get(NULL)->pointer_is_managed(ptr, &managed));
  return managed;
}

static void test_managed_memory(void) {
  gpumem_resource *mr = managed_async(0);
  gpumem_resource_capabilities caps = {.size = sizeof caps};
  CHECK_OK(gpumem_resource_get_capabilities(mr, &caps));
  CHECK_EQ(caps.memory, GPUMEM_MEMORY_MANAGED);
  CHECK_EQ(caps.stream_ordered, 1);
  CHECK_EQ(caps.device, 0);

  gpumem_stream stream;
  CHECK_OK(gpumem_stream_create(0, &stream));
  unsigned char *ptr = NULL;
  CHECK_OK(gpumem_allocate(mr, MiB, stream, (void **)&ptr));
  CHECK_EQ(is_managed(ptr), 1);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), MiB);
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_LIVE_BYTES), MiB);
  CHECK_OK(gpumem_memset_async(ptr, 0x5a, MiB, stream));
  CHECK_OK(gpumem_stream_synchronize(stream));
  /* Managed memory: the host reads it in place. */
  CHECK_EQ(ptr[0], 0x5a);
  CHECK_EQ(ptr[MiB - 1], 0x5a);
  CHECK_OK(gpumem_deallocate(mr, ptr, MiB, stream));
  CHECK_U64_EQ(check_query(mr, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_stream_destroy(stream));
  CHECK_OK(gpumem_resource_release(mr));
  printf("managed memory passed\n");
}

static void test_one_pool_per_device(void) {
  gpumem_resource *first = managed_async(0), *second = managed_async(0);
  void *pool = NULL, *again = NULL;
  CHECK_OK(gpumem_async_pool_handle(first, &pool));
  CHECK_OK(gpumem_async_pool_handle(second, &again));
  CHECK(pool != NULL);
  CHECK_PTR_EQ(again, pool);
  void *ptr;
  CHECK_OK(gpumem_allocate(first, 4096, NULL, &ptr));
  CHECK_U64_EQ(check_query(second, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_OK(gpumem_deallocate(first, ptr, 4096, NULL));
  CHECK_OK(gpumem_resource_release(first));

  /* The pool is the driver's: it outlives the resource, and nobody may destroy it. */
  CHECK_OK(gpumem_allocate(second, 4096, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(second, ptr, 4096, NULL));
  const gpumem__device_ops *dev = gpumem__device_get(NULL);
  CHECK_STATUS(dev->pool_destroy(0, (gpumem__mempool)pool), GPUMEM_ERR_CUDA);
  CHECK_OK(gpumem_allocate(second, 4096, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(second, ptr, 4096, NULL));
  CHECK_OK(gpumem_resource_release(second));

  /* Given a threshold, it sets the pool's: UINT64_MAX keeps freed memory at a
   * synchronization, and the default pool's own (0) gives it back. */
  uint64_t reserved = 0;
  gpumem_resource *keeping = managed_async(UINT64_MAX);
  CHECK_OK(gpumem_allocate(keeping, MiB, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(keeping, ptr, MiB, NULL));
  CHECK_OK(gpumem_stream_synchronize(NULL));
  CHECK_OK(dev->pool_reserved((gpumem__mempool)pool, &reserved));
  CHECK(reserved >= MiB);
  CHECK_OK(dev->pool_set_release_threshold((gpumem__mempool)pool, 0));
  CHECK_OK(gpumem_stream_synchronize(NULL));
  if (check_on_sim()) {
    CHECK_OK(dev->pool_reserved((gpumem__mempool)pool, &reserved));
    CHECK_U64_EQ(reserved, 0);
  }
  CHECK_OK(gpumem_resource_release(keeping));
  printf("one pool per device passed\n");
}

static void test_spec(void) {
  char described[256];
  gpumem_resource *mr = check_build("async(managed=true)");
  CHECK_OK(gpumem_resource_describe(mr, described, sizeof described));
  CHECK(strcmp(described, "async(managed=true)") == 0);
  CHECK_OK(gpumem_resource_release(mr));
  mr = check_build("async(managed=false)");
  CHECK_OK(gpumem_resource_describe(mr, described, sizeof described));
  CHECK(strncmp(described, "async(release_threshold=", 24) == 0);
  CHECK_OK(gpumem_resource_release(mr));
  check_describe_round_trip("async(managed=true)");
  check_describe_round_trip("async(managed=true, release_threshold=1GiB, initial=2MiB)");
  check_describe_round_trip("stats(pool(async(managed=true), initial=2MiB))");
  check_describe_round_trip("prefetch(async(managed=true))");
  mr = check_build("prefetch(pool(async(managed=true), initial=1))");
  void *ptr;
  CHECK_OK(gpumem_allocate(mr, 3 * MiB, NULL, &ptr));
  CHECK_EQ(is_managed(ptr), 1);
  CHECK_OK(gpumem_deallocate(mr, ptr, 3 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  printf("spec passed\n");
}

static void test_refusals(void) {
  gpumem_resource *owner = check_build("async");
  void *pool;
  CHECK_OK(gpumem_async_pool_handle(owner, &pool));
  gpumem_resource *out = (gpumem_resource *)0x1;
  gpumem_async_options options = {.managed = 1, .pool = pool};
  CHECK_FAILS_WITH(gpumem_async_create(0, &options, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "takes no pool of the program's");
  options = (gpumem_async_options){.managed = 1, .ipc_handle = GPUMEM_IPC_POSIX_FD};
  CHECK_FAILS_WITH(gpumem_async_create(0, &options, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "takes no IPC handle type");
  CHECK_PTR_EQ(out, (gpumem_resource *)0x1);
  gpumem_resource *spec_out = NULL;
  CHECK_STATUS(gpumem_resource_from_spec("async(managed=true, ipc=posix_fd)", &spec_out),
               GPUMEM_ERR_INVALID_ARGUMENT);
  CHECK(spec_out == NULL);
  CHECK_OK(gpumem_resource_release(owner));
  printf("refusals passed\n");
}

/* Where the driver has no pools of managed memory. */
static void test_unsupported(void) {
  gpumem_async_options options = {.managed = 1};
  gpumem_resource *out = (gpumem_resource *)0x1;
  CHECK_FAILS_WITH(gpumem_async_create(0, &options, &out), GPUMEM_ERR_UNSUPPORTED, "CUDA 13.0");
  CHECK_CONTAINS(gpumem_last_error_message(), "pools of managed memory");
  CHECK_PTR_EQ(out, (gpumem_resource *)0x1);
  /* Everything else still works. */
  gpumem_resource *mr = check_build("async");
  CHECK_OK(gpumem_resource_release(mr));
  printf("unsupported passed\n");
}

int main(int argc, char **argv) {
  check_init_backend();
  if (argc > 1 && strcmp(argv[1], "unsupported") == 0) {
    if (!check_on_sim())
      return CHECK_SKIP_CODE;
    test_unsupported();
    return 0;
  }
  gpumem_async_options options = {.managed = 1};
  gpumem_resource *probe = NULL;
  if (gpumem_async_create(0, &options, &probe) == GPUMEM_ERR_UNSUPPORTED && !check_on_sim()) {
    printf("skipped: %s\n", gpumem_last_error_message());
    return CHECK_SKIP_CODE;
  }
  CHECK(probe != NULL);
  CHECK_OK(gpumem_resource_release(probe));
  test_managed_memory();
  test_one_pool_per_device();
  test_spec();
  test_refusals();
  return 0;
}
