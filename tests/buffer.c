/* buffer.c: gpumem_buffer behaves as RMM's device_buffer: size and capacity, contents kept
 * across resize, reserve, shrink_to_fit and copy, stream-ordered operations, and a retained
 * resource that the buffer keeps alive and gives all its memory back to. */
#include "check.h"

#include <string.h>

enum { base_size = 100000 };

static unsigned char pattern_byte(size_t i) {
  return (unsigned char)(i * 131 + 7);
}

static void fill_pattern(unsigned char *host, size_t size) {
  for (size_t i = 0; i < size; i++)
    host[i] = pattern_byte(i);
}

/* The buffer's first `size` bytes hold the pattern. */
static void check_pattern(const gpumem_buffer *buf, size_t size) {
  static unsigned char host[4 * base_size];
  CHECK(size <= sizeof host);
  memset(host, 0, size);
  CHECK_OK(gpumem_buffer_copy_to_host(buf, host, size));
  for (size_t i = 0; i < size; i++)
    if (host[i] != pattern_byte(i))
      CHECK_FAIL_("byte %zu is %d, expected %d", i, host[i], pattern_byte(i));
}

static void test_create_and_sizes(gpumem_resource *mr, gpumem_stream stream) {
  gpumem_buffer *empty;
  CHECK_OK(gpumem_buffer_create(0, stream, mr, &empty));
  CHECK_PTR_EQ(gpumem_buffer_data(empty), NULL);
  CHECK_EQ(gpumem_buffer_size(empty), 0);
  CHECK_EQ(gpumem_buffer_capacity(empty), 0);
  gpumem_buffer_destroy(empty);

  gpumem_buffer *buf;
  CHECK_OK(gpumem_buffer_create(base_size, stream, mr, &buf));
  CHECK(gpumem_buffer_data(buf) != NULL);
  CHECK_EQ(gpumem_buffer_size(buf), base_size);
  CHECK_EQ(gpumem_buffer_capacity(buf), base_size);
  CHECK_PTR_EQ(gpumem_buffer_stream(buf), stream);
  CHECK_PTR_EQ(gpumem_buffer_resource(buf), mr);
  CHECK_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);
  gpumem_buffer_destroy(buf);
  CHECK_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
}

static void test_resize_reserve_shrink(gpumem_resource *mr, gpumem_stream stream) {
  static unsigned char host[base_size];
  fill_pattern(host, base_size);
  gpumem_buffer *buf;
  CHECK_OK(gpumem_buffer_create_from_host(host, base_size, stream, mr, &buf));
  check_pattern(buf, base_size);

  /* Shrinking keeps the memory; growing within the capacity keeps it too. */
  void *data = gpumem_buffer_data(buf);
  CHECK_OK(gpumem_buffer_resize(buf, 1000, stream));
  CHECK_EQ(gpumem_buffer_size(buf), 1000);
  CHECK_EQ(gpumem_buffer_capacity(buf), base_size);
  CHECK_PTR_EQ(gpumem_buffer_data(buf), data);
  CHECK_OK(gpumem_buffer_resize(buf, base_size, stream));
  CHECK_PTR_EQ(gpumem_buffer_data(buf), data);
  check_pattern(buf, base_size);

  /* Growing past the capacity reallocates and keeps the contents. */
  CHECK_OK(gpumem_buffer_resize(buf, 3 * base_size, stream));
  CHECK_EQ(gpumem_buffer_size(buf), 3 * base_size);
  CHECK_EQ(gpumem_buffer_capacity(buf), 3 * base_size);
  check_pattern(buf, base_size);
  CHECK_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 1);

  /* Reserve grows the capacity only. */
  CHECK_OK(gpumem_buffer_resize(buf, base_size, stream));
  CHECK_OK(gpumem_buffer_reserve(buf, 4 * base_size, stream));
  CHECK_EQ(gpumem_buffer_size(buf), base_size);
  CHECK_EQ(gpumem_buffer_capacity(buf), 4 * base_size);
  check_pattern(buf, base_size);
  CHECK_OK(gpumem_buffer_reserve(buf, 10, stream));
  CHECK_EQ(gpumem_buffer_capacity(buf), 4 * base_size);

  /* Shrink to fit makes capacity equal size, contents kept. */
  CHECK_OK(gpumem_buffer_shrink_to_fit(buf, stream));
  CHECK_EQ(gpumem_buffer_capacity(buf), base_size);
  check_pattern(buf, base_size);
  CHECK_OK(gpumem_buffer_resize(buf, 0, stream));
  CHECK_OK(gpumem_buffer_shrink_to_fit(buf, stream));
  CHECK_EQ(gpumem_buffer_capacity(buf), 0);
  CHECK_PTR_EQ(gpumem_buffer_data(buf), NULL);
  CHECK_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
  gpumem_buffer_destroy(buf);
}

static void test_copy_and_partial_writes(gpumem_resource *mr, gpumem_stream stream) {
  static unsigned char host[base_size];
  fill_pattern(host, base_size);
  gpumem_buffer *original;
  CHECK_OK(gpumem_buffer_create_from_host(host, base_size, stream, mr, &original));
  gpumem_buffer *copy;
  CHECK_OK(gpumem_buffer_copy(original, stream, NULL, &copy));
  CHECK(gpumem_buffer_data(copy) != gpumem_buffer_data(original));
  CHECK_PTR_EQ(gpumem_buffer_resource(copy), mr);
  CHECK_EQ(gpumem_buffer_size(copy), base_size);
  check_pattern(copy, base_size);

  /* Writing into the copy leaves the original alone. */
  unsigned char zeros[64] = {0};
  CHECK_OK(gpumem_buffer_copy_from_host(copy, 5000, zeros, sizeof zeros));
  check_pattern(original, base_size);
  unsigned char back[5100];
  CHECK_OK(gpumem_buffer_copy_to_host(copy, back, sizeof back));
  for (size_t i = 0; i < sizeof back; i++)
    CHECK_EQ(back[i], (i >= 5000 && i < 5064) ? 0 : pattern_byte(i));
  gpumem_buffer_destroy(copy);
  gpumem_buffer_destroy(original);
}

static void test_streams(gpumem_resource *mr, gpumem_stream stream) {
  gpumem_stream other;
  CHECK_OK(gpumem_stream_create(gpumem_resource_device(mr), &other));
  static unsigned char host[base_size];
  fill_pattern(host, base_size);
  gpumem_buffer *buf;
  CHECK_OK(gpumem_buffer_create_from_host(host, base_size, stream, mr, &buf));
  /* Moving to another stream: the caller orders the two, here by synchronizing. */
  CHECK_OK(gpumem_stream_synchronize(stream));
  CHECK_OK(gpumem_buffer_set_stream(buf, other));
  CHECK_PTR_EQ(gpumem_buffer_stream(buf), other);
  CHECK_OK(gpumem_buffer_resize(buf, 2 * base_size, other));
  CHECK_PTR_EQ(gpumem_buffer_stream(buf), other);
  check_pattern(buf, base_size);
  gpumem_buffer_destroy(buf);
  CHECK_OK(gpumem_stream_synchronize(other));
  CHECK_OK(gpumem_stream_destroy(other));
}

/* The buffer holds its own reference to the resource. */
static void test_resource_lifetime(void) {
  gpumem_resource *mr;
  CHECK_OK(gpumem_resource_from_spec("cuda", &mr));
  static unsigned char host[base_size];
  fill_pattern(host, base_size);
  gpumem_buffer *buf;
  CHECK_OK(gpumem_buffer_create_from_host(host, base_size, NULL, mr, &buf));
  /* Not the last reference: the buffer's keeps the resource, and the buffer, working. */
  CHECK_OK(gpumem_resource_release(mr));
  check_pattern(buf, base_size);
  CHECK_OK(gpumem_buffer_resize(buf, 2 * base_size, NULL));
  check_pattern(buf, base_size);
  gpumem_buffer_destroy(buf);

  /* Without a resource the buffer uses the current device's. */
  gpumem_resource *current;
  CHECK_OK(gpumem_get_current_device_resource(&current));
  CHECK_OK(gpumem_buffer_create(64, NULL, NULL, &buf));
  CHECK_PTR_EQ(gpumem_buffer_resource(buf), current);
  gpumem_buffer_destroy(buf);
}

/* Prefetching moves managed memory and is "nothing to move" for any other. */
static void test_prefetch(void) {
  gpumem_resource *managed, *device;
  CHECK_OK(gpumem_resource_from_spec("managed", &managed));
  CHECK_OK(gpumem_resource_from_spec("cuda", &device));
  void *m, *d;
  CHECK_OK(gpumem_allocate(managed, 1 << 20, NULL, &m));
  CHECK_OK(gpumem_allocate(device, 1 << 20, NULL, &d));
  CHECK_OK(gpumem_prefetch(m, 1 << 20, GPUMEM_CURRENT_DEVICE, NULL));
  CHECK_STATUS(gpumem_prefetch(d, 1 << 20, GPUMEM_CURRENT_DEVICE, NULL), GPUMEM_ERR_UNSUPPORTED);
  CHECK_FAILS_WITH(gpumem_prefetch(m, 1 << 20, 99, NULL), GPUMEM_ERR_INVALID_DEVICE, "device 99");
  CHECK_OK(gpumem_prefetch(NULL, 0, 0, NULL));
  CHECK_OK(gpumem_stream_synchronize(NULL));
  CHECK_OK(gpumem_deallocate(managed, m, 1 << 20, NULL));
  CHECK_OK(gpumem_deallocate(device, d, 1 << 20, NULL));
  CHECK_OK(gpumem_resource_release(managed));
  CHECK_OK(gpumem_resource_release(device));
  printf("prefetch passed\n");
}

int main(void) {
  check_init_backend();
  static const char *const specs[] = {"cuda", "async", "managed", "pinned_host"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    gpumem_resource *mr;
    CHECK_OK(gpumem_resource_from_spec(specs[i], &mr));
    gpumem_stream stream;
    CHECK_OK(gpumem_stream_create(gpumem_resource_device(mr), &stream));
    test_create_and_sizes(mr, stream);
    test_resize_reserve_shrink(mr, stream);
    test_copy_and_partial_writes(mr, stream);
    test_streams(mr, stream);
    CHECK_OK(gpumem_stream_synchronize(stream));
    CHECK_OK(gpumem_stream_destroy(stream));
    CHECK_EQ(check_query(mr, GPUMEM_QUERY_LIVE_COUNT), 0);
    CHECK_OK(gpumem_resource_release(mr));
    printf("%-12s buffer semantics passed\n", specs[i]);
  }
  test_resource_lifetime();
  printf("buffer resource lifetime passed\n");
  test_prefetch();
  return 0;
}
