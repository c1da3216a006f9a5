/* bad_input.c: every kind of bad input gets a documented status and a message that says
 * what was wrong, and leaves the resource exactly as it was and still usable.
 *
 * Each row below makes one mistake, checks the status and the words of the message, then
 * checks the resource: same live count and bytes as before, and a fresh allocate and free
 * still work. */
#include "check.h"

#include <string.h>

typedef struct snapshot {
  uint64_t live_count, live_bytes;
} snapshot;

static snapshot take_snapshot(gpumem_resource *mr) {
  snapshot s;
  CHECK_OK(gpumem_resource_query(mr, GPUMEM_QUERY_LIVE_COUNT, &s.live_count));
  CHECK_OK(gpumem_resource_query(mr, GPUMEM_QUERY_LIVE_BYTES, &s.live_bytes));
  return s;
}

/* The resource is as the snapshot saw it and still allocates and frees. */
static void check_unchanged(gpumem_resource *mr, snapshot before) {
  snapshot now = take_snapshot(mr);
  CHECK_U64_EQ(now.live_count, before.live_count);
  CHECK_U64_EQ(now.live_bytes, before.live_bytes);
  void *ptr = NULL;
  CHECK_OK(gpumem_allocate(mr, 512, NULL, &ptr));
  CHECK_OK(gpumem_deallocate(mr, ptr, 512, NULL));
}

static void rows_for_allocation(gpumem_resource *mr) {
  snapshot before = take_snapshot(mr);
  void *ptr = (void *)0x77;

  CHECK_FAILS_WITH(gpumem_allocate(NULL, 16, NULL, &ptr), GPUMEM_ERR_INVALID_ARGUMENT,
                   "resource is NULL");
  CHECK_FAILS_WITH(gpumem_allocate(mr, 16, NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "out-pointer is NULL");
  CHECK_FAILS_WITH(gpumem_allocate_aligned(mr, 16, 3, NULL, &ptr), GPUMEM_ERR_INVALID_ARGUMENT,
                   "alignment 3 is not a power of two");
  CHECK_FAILS_WITH(gpumem_allocate_aligned(mr, 16, 0, NULL, &ptr), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not a power of two");
  CHECK_FAILS_WITH(gpumem_allocate(mr, SIZE_MAX, NULL, &ptr), GPUMEM_ERR_INVALID_ARGUMENT,
                   "overflows");
  CHECK_FAILS_WITH(gpumem_allocate_aligned(mr, SIZE_MAX - 4096, 1 << 20, NULL, &ptr),
                   GPUMEM_ERR_INVALID_ARGUMENT, "overflows");
  CHECK_PTR_EQ(ptr, (void *)0x77);
  check_unchanged(mr, before);
}

static void rows_for_deallocation(gpumem_resource *mr) {
  void *ptr;
  CHECK_OK(gpumem_allocate(mr, 4096, NULL, &ptr));
  snapshot before = take_snapshot(mr);
  int host_variable = 0;

  CHECK_FAILS_WITH(gpumem_deallocate(NULL, ptr, 4096, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "resource is NULL");
  CHECK_FAILS_WITH(gpumem_deallocate(mr, &host_variable, 4, NULL), GPUMEM_ERR_MISUSE,
                   "not a live allocation");
  CHECK_FAILS_WITH(gpumem_deallocate(mr, (char *)ptr + 256, 256, NULL), GPUMEM_ERR_MISUSE,
                   "not a live allocation");
  CHECK_FAILS_WITH(gpumem_deallocate(mr, ptr, 4000, NULL), GPUMEM_ERR_MISUSE,
                   "allocated with 4096 bytes");
  CHECK_FAILS_WITH(gpumem_deallocate(mr, ptr, 0, NULL), GPUMEM_ERR_MISUSE, "size 0");
  CHECK_FAILS_WITH(gpumem_deallocate_aligned(mr, ptr, 4096, 100, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not a power of two");
  CHECK_OK(gpumem_deallocate(mr, NULL, 0, NULL));
  check_unchanged(mr, before);

  CHECK_OK(gpumem_deallocate(mr, ptr, 4096, NULL));
  snapshot after_free = take_snapshot(mr);
  CHECK_FAILS_WITH(gpumem_deallocate(mr, ptr, 4096, NULL), GPUMEM_ERR_MISUSE, "already freed");
  check_unchanged(mr, after_free);
}

/* A block from one resource freed to another of the same kind is foreign to it. */
static void row_foreign_resource(const char *spec) {
  gpumem_resource *a, *b;
  CHECK_OK(gpumem_resource_from_spec(spec, &a));
  CHECK_OK(gpumem_resource_from_spec(spec, &b));
  void *ptr;
  CHECK_OK(gpumem_allocate(a, 1024, NULL, &ptr));
  snapshot before = take_snapshot(b);
  CHECK_FAILS_WITH(gpumem_deallocate(b, ptr, 1024, NULL), GPUMEM_ERR_MISUSE,
                   "not a live allocation of this resource");
  check_unchanged(b, before);
  CHECK_OK(gpumem_deallocate(a, ptr, 1024, NULL));
  CHECK_OK(gpumem_resource_release(a));
  CHECK_OK(gpumem_resource_release(b));
}

static void row_release_with_live_memory(const char *spec) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec(spec, &mr));
  void *ptrs[3];
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpumem_allocate(mr, 1024, NULL, &ptrs[i]));
  snapshot before = take_snapshot(mr);
  CHECK_FAILS_WITH(gpumem_resource_release(mr), GPUMEM_ERR_MISUSE, "3 live allocations");
  CHECK_CONTAINS(gpumem_last_error_message(), "not destroyed");
  check_unchanged(mr, before);
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpumem_deallocate(mr, ptrs[i], 1024, NULL));
  CHECK_OK(gpumem_resource_release(mr));
}

static void rows_for_devices(void) {
  int count = 0;
  CHECK_OK(gpumem_device_count(&count));
  gpumem_resource *mr = (gpumem_resource *)0x1;
  CHECK_FAILS_WITH(gpumem_cuda_create(count, &mr), GPUMEM_ERR_INVALID_DEVICE, "does not exist");
  CHECK_FAILS_WITH(gpumem_cuda_create(-7, &mr), GPUMEM_ERR_INVALID_DEVICE, "device -7");
  CHECK_FAILS_WITH(gpumem_managed_create(99, NULL, &mr), GPUMEM_ERR_INVALID_DEVICE, "device 99");
  CHECK_FAILS_WITH(gpumem_async_create(99, NULL, &mr), GPUMEM_ERR_INVALID_DEVICE, "device 99");
  CHECK_FAILS_WITH(gpumem_pinned_host_create(99, NULL, &mr), GPUMEM_ERR_INVALID_DEVICE,
                   "device 99");
  CHECK_FAILS_WITH(gpumem_system_create(99, &mr), GPUMEM_ERR_INVALID_DEVICE, "device 99");
  CHECK_FAILS_WITH(gpumem_resource_from_spec_for_device("cuda", 99, &mr), GPUMEM_ERR_INVALID_DEVICE,
                   "device 99");
  CHECK_FAILS_WITH(gpumem_get_per_device_resource(99, &mr), GPUMEM_ERR_INVALID_DEVICE, "device 99");
  CHECK_FAILS_WITH(gpumem_set_per_device_resource(99, NULL), GPUMEM_ERR_INVALID_DEVICE,
                   "device 99");
  CHECK_FAILS_WITH(gpumem_set_device(99), GPUMEM_ERR_INVALID_DEVICE, "device 99");
  size_t free_bytes, total_bytes;
  CHECK_FAILS_WITH(gpumem_device_memory_info(99, &free_bytes, &total_bytes),
                   GPUMEM_ERR_INVALID_DEVICE, "device 99");
  gpumem_stream stream;
  CHECK_FAILS_WITH(gpumem_stream_create(99, &stream), GPUMEM_ERR_INVALID_DEVICE, "device 99");
  char name[64];
  CHECK_FAILS_WITH(gpumem_device_name(99, name, sizeof name), GPUMEM_ERR_INVALID_DEVICE,
                   "device 99");
  CHECK_PTR_EQ(mr, (gpumem_resource *)0x1);
}

/* A stream of device 1 with memory of device 0. Needs two devices (the simulated device has
 * two by default). */
static void row_stream_of_another_device(const char *spec) {
  int count = 0;
  CHECK_OK(gpumem_device_count(&count));
  if (count < 2) {
    printf("  stream of another device: skipped, one device only\n");
    return;
  }
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec_for_device(spec, 0, &mr));
  gpumem_stream other;
  CHECK_OK(gpumem_stream_create(1, &other));
  snapshot before = take_snapshot(mr);
  void *ptr = (void *)0x99;
  CHECK_FAILS_WITH(gpumem_allocate(mr, 100, other, &ptr), GPUMEM_ERR_INVALID_STREAM,
                   "belongs to device 1");
  CHECK_PTR_EQ(ptr, (void *)0x99);
  check_unchanged(mr, before);
  CHECK_OK(gpumem_stream_destroy(other));
  CHECK_OK(gpumem_resource_release(mr));
}

static void rows_for_null_out_pointers(gpumem_resource *mr) {
  CHECK_FAILS_WITH(gpumem_cuda_create(0, NULL), GPUMEM_ERR_INVALID_ARGUMENT, "out is NULL");
  CHECK_FAILS_WITH(gpumem_managed_create(0, NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "out is NULL");
  CHECK_FAILS_WITH(gpumem_async_create(0, NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT, "out is NULL");
  CHECK_FAILS_WITH(gpumem_pinned_host_create(0, NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "out is NULL");
  CHECK_FAILS_WITH(gpumem_system_create(0, NULL), GPUMEM_ERR_INVALID_ARGUMENT, "out is NULL");
  CHECK_FAILS_WITH(gpumem_faulty_create(mr, NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "out is NULL");
  gpumem_resource *out = NULL;
  CHECK_FAILS_WITH(gpumem_faulty_create(NULL, NULL, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "upstream resource is NULL");
  CHECK_FAILS_WITH(gpumem_resource_from_spec("cuda", NULL), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS_WITH(gpumem_resource_from_spec(NULL, &out), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS_WITH(gpumem_resource_query(mr, GPUMEM_QUERY_LIVE_BYTES, NULL),
                   GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  uint64_t value;
  CHECK_FAILS_WITH(gpumem_resource_query(NULL, GPUMEM_QUERY_LIVE_BYTES, &value),
                   GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS_WITH(gpumem_resource_upstream(mr, NULL), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS_WITH(gpumem_resource_upstream(mr, &out), GPUMEM_ERR_UNSUPPORTED, "no upstream");
  CHECK_FAILS_WITH(gpumem_resource_describe(mr, NULL, 10), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS_WITH(gpumem_get_current_device_resource(NULL), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS_WITH(gpumem_set_current_device_resource(NULL), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS_WITH(gpumem_device_count(NULL), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS_WITH(gpumem_stream_create(0, NULL), GPUMEM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS_WITH(gpumem_buffer_create(10, NULL, mr, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "out is NULL");
  CHECK_PTR_EQ(out, NULL);
  CHECK_OK(gpumem_resource_release(NULL));
}

static void rows_for_options(gpumem_resource *mr) {
  gpumem_resource *out = NULL;
  gpumem_managed_options managed = {.advice = 1u << 20};
  CHECK_FAILS_WITH(gpumem_managed_create(0, &managed, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "unknown advice");
  managed.advice = GPUMEM_ADVISE_PREFERRED_LOCATION_DEVICE | GPUMEM_ADVISE_PREFERRED_LOCATION_HOST;
  CHECK_FAILS_WITH(gpumem_managed_create(0, &managed, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not both");
  gpumem_async_options async = {.ipc_handle = (gpumem_ipc_handle)9};
  CHECK_FAILS_WITH(gpumem_async_create(0, &async, &out), GPUMEM_ERR_INVALID_ARGUMENT, "IPC handle");
  gpumem_pinned_host_options pinned = {.flags = 1u << 9};
  CHECK_FAILS_WITH(gpumem_pinned_host_create(0, &pinned, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "unknown flags");
  gpumem_faulty_options faulty = {.status = GPUMEM_ERR_MISUSE};
  CHECK_FAILS_WITH(gpumem_faulty_create(mr, &faulty, &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "GPUMEM_ERR_MISUSE");
  CHECK_FAILS_WITH(gpumem_faulty_reset(mr, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "not a faulty resource");
  CHECK_FAILS_WITH(gpumem_resource_from_spec("pool(", &out), GPUMEM_ERR_INVALID_ARGUMENT,
                   "invalid resource spec");
  CHECK_PTR_EQ(out, NULL);
}

static void rows_for_buffers(gpumem_resource *mr) {
  gpumem_buffer *buf;
  unsigned char data[300];
  for (size_t i = 0; i < sizeof data; i++)
    data[i] = (unsigned char)i;
  CHECK_OK(gpumem_buffer_create_from_host(data, sizeof data, NULL, mr, &buf));
  unsigned char back[400];
  CHECK_FAILS_WITH(gpumem_buffer_copy_to_host(buf, back, 400), GPUMEM_ERR_INVALID_ARGUMENT,
                   "400 bytes asked of a buffer of 300");
  CHECK_FAILS_WITH(gpumem_buffer_copy_from_host(buf, 250, data, 100), GPUMEM_ERR_INVALID_ARGUMENT,
                   "outside the buffer");
  CHECK_FAILS_WITH(gpumem_buffer_copy_from_host(buf, SIZE_MAX, data, 2),
                   GPUMEM_ERR_INVALID_ARGUMENT, "outside the buffer");
  CHECK_FAILS_WITH(gpumem_buffer_resize(NULL, 10, NULL), GPUMEM_ERR_INVALID_ARGUMENT,
                   "buffer is NULL");
  CHECK_FAILS_WITH(gpumem_buffer_create_from_host(NULL, 10, NULL, mr, &buf),
                   GPUMEM_ERR_INVALID_ARGUMENT, "src is NULL");
  CHECK_FAILS_WITH(gpumem_buffer_create_from_host(&buf, 1, NULL, mr, NULL),
                   GPUMEM_ERR_INVALID_ARGUMENT, "out is NULL");
  /* Growing past what the resource can give fails and leaves the buffer as it was. */
  if (check_on_sim()) {
    CHECK_STATUS(gpumem_buffer_resize(buf, (size_t)1 << 50, NULL), GPUMEM_ERR_OUT_OF_MEMORY);
    CHECK_EQ(gpumem_buffer_size(buf), 300);
  }
  CHECK_OK(gpumem_buffer_copy_to_host(buf, back, 300));
  CHECK(memcmp(back, data, 300) == 0);
  gpumem_buffer_destroy(buf);
  gpumem_buffer_destroy(NULL);
}

static void rows_for_backend(void) {
  /* The backend is in use: choosing the other one now is refused. */
  gpumem_backend other = check_on_sim() ? GPUMEM_BACKEND_CUDA : GPUMEM_BACKEND_SIM;
  CHECK_FAILS_WITH(gpumem_select_backend(other), GPUMEM_ERR_MISUSE, "already in use");
  CHECK_FAILS_WITH(gpumem_select_backend((gpumem_backend)42), GPUMEM_ERR_INVALID_ARGUMENT,
                   "unknown backend");
  CHECK_OK(gpumem_select_backend(check_on_sim() ? GPUMEM_BACKEND_SIM : GPUMEM_BACKEND_CUDA));
  CHECK(strcmp(gpumem_status_name((gpumem_status)999), "GPUMEM_STATUS_UNKNOWN") == 0);
  CHECK(strcmp(gpumem_status_name(GPUMEM_ERR_OUT_OF_MEMORY), "GPUMEM_ERR_OUT_OF_MEMORY") == 0);
  CHECK(strcmp(gpumem_status_string(GPUMEM_OK), "success") == 0);
}

int main(void) {
  check_init_backend();
  static const char *const specs[] = {"cuda",
                                      "managed",
                                      "async",
                                      "pinned_host",
                                      "faulty(cuda)",
                                      "limit(cuda, max=1GiB)",
                                      "aligned(cuda, alignment=4096)",
                                      "prefetch(managed)",
                                      "tracking(cuda)",
                                      "stats(cuda)"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    gpumem_resource *mr;
    CHECK_OK(gpumem_resource_from_spec(specs[i], &mr));
    rows_for_allocation(mr);
    rows_for_deallocation(mr);
    row_foreign_resource(specs[i]);
    row_release_with_live_memory(specs[i]);
    row_stream_of_another_device(specs[i]);
    CHECK_OK(gpumem_resource_release(mr));
    printf("%-16s bad input rows passed\n", specs[i]);
  }
  gpumem_resource *mr;
  CHECK_OK(gpumem_cuda_create(0, &mr));
  rows_for_devices();
  rows_for_null_out_pointers(mr);
  rows_for_options(mr);
  rows_for_buffers(mr);
  rows_for_backend();
  CHECK_OK(gpumem_resource_release(mr));
  printf("device, option, buffer and backend rows passed\n");
  return 0;
}
