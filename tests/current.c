/* current.c: the current resource of each device: the default (a cuda resource, or the
 * spec in GPUMEM_RESOURCE), get and set per device and per thread (each thread's current
 * device picks its resource), retention by the setter, replacement of a resource whose
 * allocations are still live (it stays usable until they are freed, then is destroyed),
 * and concurrent use.
 *
 * Modes (argv[1]): none - the general checks; "env SPEC NAME" - GPUMEM_RESOURCE is set and
 * every device's default resource must be called NAME; "env-bad" - GPUMEM_RESOURCE is a bad
 * spec and getting the resource must say so. */
#include "check.h"

#include <pthread.h>
#include <string.h>

static int device_count(void) {
  int count = 0;
  CHECK_OK(gpumem_device_count(&count));
  return count;
}

static void test_default_and_set(void) {
  gpumem_resource *current;
  CHECK_OK(gpumem_get_current_device_resource(&current));
  CHECK(strcmp(gpumem_resource_name(current), "cuda") == 0);
  gpumem_resource *again;
  CHECK_OK(gpumem_get_current_device_resource(&again));
  CHECK_PTR_EQ(again, current);

  gpumem_resource *mine;
  CHECK_OK(gpumem_resource_from_spec("faulty(cuda)", &mine));
  CHECK_OK(gpumem_set_current_device_resource(mine));
  /* The setter retained it: the caller's reference can go. */
  CHECK_OK(gpumem_resource_release(mine));
  CHECK_OK(gpumem_get_current_device_resource(&current));
  CHECK_PTR_EQ(current, mine);
  void *ptr;
  CHECK_OK(gpumem_allocate(current, 1000, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(current, ptr, 1000, NULL));

  /* NULL restores the default. */
  CHECK_OK(gpumem_set_per_device_resource(0, NULL));
  CHECK_OK(gpumem_get_per_device_resource(0, &current));
  CHECK(strcmp(gpumem_resource_name(current), "cuda") == 0);
}

/* A pool made current, used, and replaced while one of its blocks is live: the block stays
 * valid and is freed through the old pool, which the next replacement destroys (its memory
 * goes back to the cuda resource beneath). */
static void test_replace_with_live_allocations(void) {
  gpumem_resource *cuda, *pool, *current;
  CHECK_OK(gpumem_cuda_create(0, &cuda));
  CHECK_OK(gpumem_pool_create(cuda, NULL, &pool));
  CHECK_OK(gpumem_set_per_device_resource(0, pool));
  CHECK_OK(gpumem_resource_release(pool)); /* the slot holds the only reference */
  CHECK_OK(gpumem_get_per_device_resource(0, &current));
  void *ptr;
  CHECK_OK(gpumem_allocate(current, 1000, NULL, &ptr));

  CHECK_OK(gpumem_set_per_device_resource(0, NULL));
  CHECK_U64_EQ(check_query(current, GPUMEM_QUERY_LIVE_COUNT), 1);
  CHECK_OK(gpumem_memset_async(ptr, 0, 1000, NULL));
  CHECK_OK(gpumem_stream_synchronize(NULL));
  CHECK_OK(gpumem_deallocate(current, ptr, 1000, NULL));
  /* the retired pool still holds its memory */
  CHECK(check_query(cuda, GPUMEM_QUERY_LIVE_COUNT) > 0);

  CHECK_OK(gpumem_set_per_device_resource(0, NULL));
  CHECK_U64_EQ(check_query(cuda, GPUMEM_QUERY_LIVE_COUNT), 0);
  CHECK_OK(gpumem_resource_release(cuda));
}

static void test_per_device(void) {
  if (device_count() < 2) {
    printf("per-device checks skipped: one device\n");
    return;
  }
  gpumem_resource *on1;
  CHECK_OK(gpumem_resource_from_spec_for_device("async", 1, &on1));
  CHECK_EQ(gpumem_resource_device(on1), 1);
  CHECK_FAILS_WITH(gpumem_set_per_device_resource(0, on1), GPUMEM_ERR_INVALID_ARGUMENT,
                   "is for device 1");
  CHECK_OK(gpumem_set_per_device_resource(1, on1));
  CHECK_OK(gpumem_resource_release(on1));
  gpumem_resource *got0, *got1;
  CHECK_OK(gpumem_get_per_device_resource(0, &got0));
  CHECK_OK(gpumem_get_per_device_resource(1, &got1));
  CHECK_PTR_EQ(got1, on1);
  CHECK(got0 != got1);
  CHECK(strcmp(gpumem_resource_name(got0), "cuda") == 0);
}

typedef struct thread_view {
  int device;
  gpumem_resource *seen;
} thread_view;

/* Each thread makes its own device current and sees that device's resource. */
static void *look_from_device(void *arg) {
  thread_view *view = arg;
  CHECK_OK(gpumem_set_device(view->device));
  int current = -1;
  CHECK_OK(gpumem_get_device(&current));
  CHECK_EQ(current, view->device);
  CHECK_OK(gpumem_get_current_device_resource(&view->seen));
  return NULL;
}

static void test_per_thread(void) {
  if (device_count() < 2) {
    printf("per-thread checks skipped: one device\n");
    return;
  }
  thread_view views[2] = {{.device = 0}, {.device = 1}};
  pthread_t threads[2];
  for (int i = 0; i < 2; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, look_from_device, &views[i]), 0);
  for (int i = 0; i < 2; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  gpumem_resource *expected0, *expected1;
  CHECK_OK(gpumem_get_per_device_resource(0, &expected0));
  CHECK_OK(gpumem_get_per_device_resource(1, &expected1));
  CHECK_PTR_EQ(views[0].seen, expected0);
  CHECK_PTR_EQ(views[1].seen, expected1);
  CHECK_EQ(gpumem_resource_device(views[1].seen), 1);
}

/* Many threads set and get at once: every get sees one of the resources set. */
enum { racers = 8, rounds = 2000 };
static gpumem_resource *candidates[2];

static void *race(void *arg) {
  int index = (int)(intptr_t)arg;
  for (int i = 0; i < rounds; i++) {
    if (index % 2 == 0)
      CHECK_OK(gpumem_set_per_device_resource(0, candidates[(i + index) % 2]));
    gpumem_resource *got;
    CHECK_OK(gpumem_get_per_device_resource(0, &got));
    CHECK(got == candidates[0] || got == candidates[1]);
  }
  return NULL;
}

static void test_concurrent_set_get(void) {
  CHECK_OK(gpumem_resource_from_spec("cuda", &candidates[0]));
  CHECK_OK(gpumem_resource_from_spec("faulty(cuda)", &candidates[1]));
  CHECK_OK(gpumem_set_per_device_resource(0, candidates[0]));
  pthread_t threads[racers];
  for (int i = 0; i < racers; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, race, (void *)(intptr_t)i), 0);
  for (int i = 0; i < racers; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  CHECK_OK(gpumem_set_per_device_resource(0, NULL));
  CHECK_OK(gpumem_resource_release(candidates[0]));
  CHECK_OK(gpumem_resource_release(candidates[1]));
}

static void test_environment(const char *expected_name) {
  for (int device = 0; device < device_count(); device++) {
    gpumem_resource *mr;
    CHECK_OK(gpumem_get_per_device_resource(device, &mr));
    CHECK(strcmp(gpumem_resource_name(mr), expected_name) == 0);
    CHECK_EQ(gpumem_resource_device(mr), device);
    void *ptr;
    CHECK_OK(gpumem_allocate(mr, 4096, NULL, &ptr));
    CHECK_OK(gpumem_deallocate(mr, ptr, 4096, NULL));
  }
}

int main(int argc, char **argv) {
  check_init_backend();
  if (argc >= 3 && strcmp(argv[1], "env") == 0) {
    test_environment(argv[2]);
    printf("GPUMEM_RESOURCE default passed\n");
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "env-bad") == 0) {
    gpumem_resource *mr = (gpumem_resource *)0x5;
    CHECK_FAILS_WITH(gpumem_get_current_device_resource(&mr), GPUMEM_ERR_INVALID_ARGUMENT,
                     "GPUMEM_RESOURCE");
    CHECK_CONTAINS(gpumem_last_error_message(), "^");
    CHECK_PTR_EQ(mr, (gpumem_resource *)0x5);
    printf("bad GPUMEM_RESOURCE reported: %s\n", gpumem_last_error_message());
    return 0;
  }
  test_default_and_set();
  test_replace_with_live_allocations();
  test_per_device();
  test_per_thread();
  test_concurrent_set_get();
  printf("current resource checks passed\n");
  return 0;
}
