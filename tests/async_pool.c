/* async_pool.c: an async resource over a driver pool of the program's (options.pool, spec
 * "async(pool=HANDLE)"), RMM's cuda_async_view_memory_resource.
 *
 * - gpumem_async_pool_handle gives an async resource's driver pool; a second resource over
 *   that handle allocates from the same pool (the owner's figure grows), counts as reserved
 *   only what it allocated itself, and its release leaves the pool to its owner, whose
 *   release threshold it changes only when given one.
 * - It describes as "async(pool=N)", a spec that builds an equal resource, also inside a
 *   pool and adaptors.
 * - Refused, with nothing made: a handle the driver does not know (simulated device), an
 *   IPC handle type with a pool of the program's, the handle of what is not an async
 *   resource, NULL arguments. A pool destroyed under the resource makes its allocations
 *   fail with GPUMEM_ERR_CUDA (the driver's CUDA_ERROR_INVALID_VALUE), never a crash. */
#include "check.h"

#include <stdio.h>
#include <string.h>

enum { MiB = 1 << 20 };

static gpumem_resource *over_pool(void *pool, uint64_t release_threshold) {
  gpumem_async_options options = {.pool = pool, .release_threshold = release_threshold};
  gpumem_resource *mr = NULL;
  CHECK_OK(gpumem_async_create(0, &options, &mr));
  return mr;
}

static void test_shares_the_pool(void) {
  gpumem_resource *owner, *other;
  CHECK_OK(gpumem_async_create(0, NULL, &owner));
  void *pool = NULL;
  CHECK_OK(gpumem_async_pool_handle(owner, &pool));
  CHECK(pool != NULL);
  other = over_pool(pool, 0);
  void *again = NULL;
  CHECK_OK(gpumem_async_pool_handle(other, &again));
  CHECK_PTR_EQ(again, pool);

  uint64_t before = check_query(owner, GPUMEM_QUERY_RESERVED_BYTES);
  void *ptr;
  CHECK_OK(gpumem_allocate(other, MiB, NULL, &ptr));
  CHECK(check_query(owner, GPUMEM_QUERY_RESERVED_BYTES) >= before + MiB);
  CHECK_U64_EQ(check_query(other, GPUMEM_QUERY_RESERVED_BYTES), MiB);
  CHECK_U64_EQ(check_query(other, GPUMEM_QUERY_LIVE_BYTES), MiB);
  CHECK_U64_EQ(check_query(owner, GPUMEM_QUERY_LIVE_BYTES), 0);
  CHECK_OK(gpumem_deallocate(other, ptr, MiB, NULL));
  CHECK_U64_EQ(check_query(other, GPUMEM_QUERY_RESERVED_BYTES), 0);
  CHECK_OK(gpumem_stream_synchronize(NULL));
  /* The owner's threshold (keep everything) still holds: the freed MiB stays in the pool. */
  CHECK(check_query(owner, GPUMEM_QUERY_RESERVED_BYTES) >= before + MiB);
  CHECK_OK(gpumem_resource_release(other));

  /* The pool outlives the resource over it: the owner still allocates from it. */
  CHECK_OK(gpumem_allocate(owner, 4096, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(owner, ptr, 4096, NULL));

  /* Given a threshold, it sets the pool's: 1 byte keeps nothing at a synchronization. */
  other = over_pool(pool, 1);
  CHECK_OK(gpumem_allocate(other, MiB, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(other, ptr, MiB, NULL));
  CHECK_OK(gpumem_stream_synchronize(NULL));
  if (check_on_sim())
    CHECK(check_query(owner, GPUMEM_QUERY_RESERVED_BYTES) <= 1);
  CHECK_OK(gpumem_resource_release(other));
  CHECK_OK(gpumem_resource_release(owner));
  printf("shares the pool passed\n");
}

static void test_spec(void) {
  gpumem_resource *owner = check_build("async");
  void *pool;
  CHECK_OK(gpumem_async_pool_handle(owner, &pool));
  char spec[256], expected[256], described[512];
  snprintf(expected, sizeof expected, "async(pool=%llu)", (unsigned long long)(uintptr_t)pool);
  gpumem_resource *mr = over_pool(pool, 0);
  CHECK_OK(gpumem_resource_describe(mr, described, sizeof described));
  CHECK(strcmp(described, expected) == 0);
  CHECK_OK(gpumem_resource_release(mr));
  check_describe_round_trip(expected);
  snprintf(spec, sizeof spec, "stats(pool(async(pool=%llu, release_threshold=1GiB), initial=2MiB))",
           (unsigned long long)(uintptr_t)pool);
  check_describe_round_trip(spec);
  mr = check_build(spec);
  void *ptr;
  CHECK_OK(gpumem_allocate(mr, 3 * MiB, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(mr, ptr, 3 * MiB, NULL));
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(owner));
  printf("spec passed\n");
}

static void test_refusals(void) {
  gpumem_resource *owner = check_build("async"), *cuda = check_build("cuda");
  void *pool;
  CHECK_OK(gpumem_async_pool_handle(owner, &pool));
  gpumem_resource *out = (gpumem_resource *)0x1;
  gpumem_async_options options = {.pool = pool, .ipc_handle = GPUMEM_IPC_POSIX_FD};
  CHECK_FAILS_WITH(gpumem_async_create(0, &options, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "IPC handle type for a pool of the program's");
  if (check_on_sim()) {
    int unknown;
    options = (gpumem_async_options){.pool = &unknown};
    CHECK_STATUS(gpumem_async_create(0, &options, &out), GPUMEM_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(gpumem_last_error_message(), "gpumem_async_create on device 0");
    CHECK_CONTAINS(gpumem_last_error_message(), "driver pool");
  }
  CHECK_PTR_EQ(out, (gpumem_resource *)0x1);
  void *handle = (void *)0x1;
  CHECK_FAILS_WITH(gpumem_async_pool_handle(cuda, &handle), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not an async resource");
  CHECK_FAILS_WITH(gpumem_async_pool_handle(NULL, &handle), GPUMEM_ERR_INVALID_ARGUMENT,
                   "mr is NULL");
  CHECK_FAILS_WITH(gpumem_async_pool_handle(owner, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "pool is NULL");
  CHECK_PTR_EQ(handle, (void *)0x1);

  /* The pool's owner goes first: allocations through the rest fail, and say so. */
  gpumem_resource *mr = over_pool(pool, 0);
  CHECK_OK(gpumem_resource_release(owner));
  /* The driver answers CUDA_ERROR_INVALID_VALUE (1), and the simulated device as it does. */
  void *ptr = (void *)0x1;
  CHECK_STATUS(gpumem_allocate(mr, 4096, NULL, &ptr), GPUMEM_ERR_CUDA);
  CHECK_EQ(gpumem_last_cuda_error(), 1);
  CHECK_CONTAINS(gpumem_last_error_message(),
                 check_on_sim() ? "pool_alloc_async" : "cuMemAllocFromPoolAsync");
  CHECK_PTR_EQ(ptr, (void *)0x1);
  CHECK_OK(gpumem_resource_release(mr));
  CHECK_OK(gpumem_resource_release(cuda));
  printf("refusals passed\n");
}

int main(void) {
  check_init_backend();
  test_shares_the_pool();
  test_spec();
  test_refusals();
  return 0;
}
