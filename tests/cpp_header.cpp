/* cpp_header.cpp: the C++ layer (include/gpumem.hpp) behaves as its comments say: exceptions
 * of the right types with the library's messages, resource handles that keep resources
 * alive exactly as long as something uses them, and device_buffer, device_uvector and
 * device_scalar as RMM's classes (moves, deep copies on a stream, resizing, element access,
 * host round trips, over-aligned elements, empty vectors), each failing call leaving its
 * object and the resource as they were. Built by the C++ compiler, and by nvcc as a .cu
 * file (cpp_header.cu) where nvcc is found, which also checks cudaStream_t. */
#include "gpumem.hpp"

#include "check.h"
#include "check_throws.hpp"

#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

using gpumem::device_buffer;
using gpumem::device_scalar;
using gpumem::device_uvector;
using gpumem::resource;
using gpumem::stream_view;

/* The text (a std::string, kept alive here) contains `needle`. */
#define CHECK_TEXT_HAS(text, needle)                                                               \
  do {                                                                                             \
    std::string check_text_ = (text);                                                              \
    CHECK_CONTAINS(check_text_.c_str(), needle);                                                   \
  } while (0)

/* ---- compile-time promises ---- */

static_assert(std::is_convertible<gpumem_stream, stream_view>::value, "");
static_assert(std::is_convertible<CUstream, stream_view>::value, "");
#ifdef GPUMEM_TEST_CUDA_RUNTIME
static_assert(std::is_convertible<cudaStream_t, stream_view>::value, "");
#endif
static_assert(!std::is_constructible<stream_view, int>::value, "a size is not a stream");
static_assert(!std::is_constructible<stream_view, std::nullptr_t>::value, "");
static_assert(std::is_base_of<std::bad_alloc, gpumem::out_of_memory>::value, "");
static_assert(std::is_base_of<gpumem::failure, gpumem::out_of_memory>::value, "");
static_assert(std::is_base_of<std::runtime_error, gpumem::error>::value, "");
static_assert(std::is_base_of<gpumem::failure, gpumem::error>::value, "");
static_assert(!std::is_copy_constructible<device_buffer>::value, "copies name their stream");
static_assert(std::is_nothrow_move_constructible<device_buffer>::value, "");
static_assert(std::is_nothrow_move_assignable<device_buffer>::value, "");
static_assert(std::is_nothrow_move_constructible<device_uvector<int>>::value, "");
static_assert(std::is_nothrow_move_assignable<device_scalar<int>>::value, "");
static_assert(std::is_nothrow_copy_constructible<resource>::value, "");
static_assert(std::is_same<device_uvector<float>::iterator, float *>::value, "");
static_assert(std::is_same<device_uvector<float>::const_iterator, const float *>::value, "");

struct alignas(512) wide {
  int value;
  char pad[100];
};
static_assert(device_uvector<wide>::alignment == 512, "");
static_assert(device_uvector<char>::alignment == 256, "");

/* set_element_async and set_value_async refuse temporaries (the copy reads the host value
 * later). */
template <typename V, typename = void> struct takes_temporary : std::false_type {};
template <typename V>
struct takes_temporary<V, decltype(std::declval<V &>().set_element_async(0, 1, stream_view{}))>
    : std::true_type {};
static_assert(!takes_temporary<device_uvector<int>>::value, "");
template <typename V, typename = void> struct scalar_takes_temporary : std::false_type {};
template <typename V>
struct scalar_takes_temporary<V, decltype(std::declval<V &>().set_value_async(1, stream_view{}))>
    : std::true_type {};
static_assert(!scalar_takes_temporary<device_scalar<int>>::value, "");

/* ---- helpers ---- */

static std::vector<unsigned char> pattern(std::size_t size, unsigned seed) {
  std::vector<unsigned char> bytes(size);
  for (std::size_t i = 0; i < size; i++)
    bytes[i] = static_cast<unsigned char>(i * 131 + seed);
  return bytes;
}

static std::vector<unsigned char> host_copy(const device_buffer &buf, stream_view stream) {
  std::vector<unsigned char> bytes(buf.size());
  buf.copy_to_host(bytes.data(), bytes.size(), stream);
  return bytes;
}

static bool aligned_to(const void *p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

/* A user resource over a cuda resource that records its own destruction: how a test sees
 * when the last reference went. */
struct watched {
  gpumem_resource *backing = nullptr;
  int destroyed = 0;
};

static gpumem_resource *watched_resource(watched *w) {
  CHECK_OK(gpumem_cuda_create(GPUMEM_CURRENT_DEVICE, &w->backing));
  gpumem_user_resource_ops ops{};
  ops.size = sizeof ops;
  ops.version = GPUMEM_USER_RESOURCE_OPS_VERSION;
  ops.allocate = [](void *state, std::size_t bytes, std::size_t alignment, gpumem_stream s,
                    void **ptr) {
    return gpumem_allocate_aligned(static_cast<watched *>(state)->backing, bytes, alignment, s,
                                   ptr);
  };
  ops.deallocate = [](void *state, void *ptr, std::size_t bytes, std::size_t alignment,
                      gpumem_stream s) {
    return gpumem_deallocate_aligned(static_cast<watched *>(state)->backing, ptr, bytes, alignment,
                                     s);
  };
  ops.destroy = [](void *state) {
    watched *self = static_cast<watched *>(state);
    gpumem_resource_release(self->backing);
    self->destroyed++;
  };
  ops.memory = GPUMEM_MEMORY_DEVICE;
  ops.name = "watched";
  gpumem_resource *mr = nullptr;
  CHECK_OK(gpumem_user_resource_create(GPUMEM_CURRENT_DEVICE, &ops, w, &mr));
  return mr;
}

/* ---- exceptions ---- */

static void test_exceptions() {
  /* A bad spec: gpumem::error with the library's message, caught every documented way. */
  try {
    resource::from_spec("pool(cuda");
    CHECK_FAIL_("a bad spec did not throw");
  } catch (const gpumem::error &e) {
    CHECK_EQ(e.status(), GPUMEM_ERR_INVALID_ARGUMENT);
    CHECK(std::strcmp(e.status_name(), "GPUMEM_ERR_INVALID_ARGUMENT") == 0);
    CHECK_CONTAINS(e.what(), "pool(cuda");
    CHECK(std::strcmp(e.what(), e.message()) == 0);
  }
  CHECK_THROWS(std::runtime_error, resource::from_spec("nonsense_kind"));
  CHECK_THROWS(std::exception, resource::from_spec("nonsense_kind"));
  CHECK_THROWS(gpumem::failure, resource::from_spec("nonsense_kind"));
  CHECK_THROWS(gpumem::error, gpumem::check(GPUMEM_ERR_MISUSE));
  gpumem::check(GPUMEM_OK);

  /* Out of memory from a limit: gpumem::out_of_memory, a std::bad_alloc, a std::exception
   * (one of them: a catch of std::exception must still see it) and a gpumem::failure. */
  resource limited = resource::from_spec("limit(pool(cuda, initial=8MiB), max=1MiB)");
  gpumem::stream s;
  device_buffer small(1000, s, limited);
  try {
    device_buffer big(2 << 20, s, limited);
    CHECK_FAIL_("an allocation past the limit did not throw");
  } catch (const std::bad_alloc &e) {
    CHECK_CONTAINS(e.what(), "limit");
    const gpumem::out_of_memory *oom = dynamic_cast<const gpumem::out_of_memory *>(&e);
    CHECK(oom != nullptr);
    CHECK_EQ(oom->status(), GPUMEM_ERR_OUT_OF_MEMORY);
  }
  CHECK_THROWS(gpumem::out_of_memory, (device_buffer(2 << 20, s, limited)));
  CHECK_THROWS(std::exception, (device_buffer(2 << 20, s, limited)));
  CHECK_THROWS(gpumem::failure, (device_buffer(2 << 20, s, limited)));
  CHECK_THROWS(std::bad_alloc, limited.allocate(2 << 20, s));
  CHECK_THROWS(std::bad_alloc, (device_uvector<double>(1 << 20, s, limited)));
  CHECK_U64_EQ(limited.live_count(), 1); /* nothing kept by the failures */
  CHECK_U64_EQ(limited.live_bytes(), 1000);

  /* Sizes and indexes. */
  CHECK_THROWS(std::length_error, (device_uvector<double>(SIZE_MAX / 4, s, limited)));
  std::vector<unsigned char> host(10);
  CHECK_THROWS(std::out_of_range, small.copy_to_host(host.data(), 10, s, 995));
  CHECK_THROWS(std::out_of_range, small.copy_from_host(host.data(), 1001, s));
  /* An empty handle refuses calls with the library's status. */
  resource empty;
  CHECK(!empty);
  CHECK_THROWS(gpumem::error, empty.allocate(10));
  CHECK_THROWS(gpumem::error, empty.live_bytes());
  CHECK_THROWS(gpumem::error, gpumem::set_current_device_resource(empty));
  CHECK(std::strcmp(empty.name(), "") == 0);
  CHECK_EQ(empty.device(), -1);
}

/* ---- resources ---- */

static void test_resource_queries() {
  gpumem::stream s;
  resource pool = resource::pool(resource::cuda(), 4 << 20);
  CHECK(std::strcmp(pool.name(), "pool") == 0);
  CHECK_TEXT_HAS(pool.spec(), "pool(cuda");
  CHECK_EQ(pool.device(), 0);
  CHECK(std::strcmp(pool.upstream().name(), "cuda") == 0);
  CHECK_THROWS(gpumem::error, pool.upstream().upstream()); /* a base resource has none */
  CHECK_U64_EQ(pool.reserved_bytes(), 4 << 20);
  CHECK(!pool.query(GPUMEM_QUERY_LIMIT_BYTES).has_value());
  /* The pool's last option reaches the pool, and its spec says so. */
  resource releasing = resource::pool(resource::vmm(), 0, 0, 110, 100);
  CHECK_TEXT_HAS(releasing.spec(), "release_holes_over=110, release_holes_time=100");

  void *p = pool.allocate(3000, s);
  CHECK(p != nullptr);
  CHECK_U64_EQ(pool.live_bytes(), 3000);
  CHECK_U64_EQ(pool.live_count(), 1);
  CHECK_U64_EQ(*pool.query(GPUMEM_QUERY_LIVE_BYTES), 3000);
  CHECK_THROWS(gpumem::error, pool.deallocate(p, 2999, s)); /* wrong size: misuse, kept */
  CHECK_U64_EQ(pool.live_count(), 1);
  pool.deallocate(p, 3000, s);
  CHECK_U64_EQ(pool.peak_live_bytes(), 3000);
  CHECK(pool.peak_reserved_bytes() >= pool.reserved_bytes());
  void *q = pool.allocate(5000, s, 4096);
  CHECK(aligned_to(q, 4096));
  pool.deallocate(q, 5000, s, 4096);
  CHECK_U64_EQ(pool.live_count(), 0);
  CHECK_TEXT_HAS(pool.report(1 << 20), "verdict:");
  CHECK_TEXT_HAS(pool.stats_json(), "\"gpumem.stats\"");
  CHECK_EQ(pool.capabilities().memory, GPUMEM_MEMORY_DEVICE);
  CHECK(pool.trim() >= (4u << 20));
  CHECK_U64_EQ(pool.reserved_bytes(), 0);

  resource limited = resource::limit(resource::from_spec("cuda"), 1 << 20);
  CHECK_U64_EQ(*limited.query(GPUMEM_QUERY_LIMIT_BYTES), 1 << 20);
  resource counted = resource::statistics(limited);
  CHECK(std::strcmp(counted.upstream().name(), "limit") == 0);
  CHECK(counted.upstream() == limited);
  CHECK(counted != limited);
  /* A spec for another device (where there is one: the simulated device has two). */
  int devices = 0;
  CHECK_OK(gpumem_device_count(&devices));
  if (devices > 1) {
    resource other = resource::from_spec(std::string("cuda"), 1);
    CHECK_EQ(other.device(), 1);
  }
}

static void test_resource_lifetimes() {
  gpumem::stream s;
  watched w;
  resource r = resource::adopt(watched_resource(&w)); /* takes the creation's reference */
  {
    resource copy = r;
    resource moved = std::move(copy);
    CHECK(!copy);
    CHECK(moved == r);
  }
  CHECK_EQ(w.destroyed, 0);

  /* Self-assignment keeps the reference. */
  resource &alias = r;
  r = alias;
  r = std::move(alias);
  CHECK(r);
  CHECK_EQ(w.destroyed, 0);

  /* A buffer keeps its resource alive past the last handle; so does a moved-from one (it
   * keeps its resource, to allocate again). */
  {
    device_buffer buf(1000, s, r);
    device_uvector<int> vec(10, s, r);
    r = resource();
    CHECK_EQ(w.destroyed, 0);
    CHECK_U64_EQ(buf.memory_resource().live_count(), 2);
    buf.resize(5000, s); /* still allocates from it */
    CHECK_U64_EQ(vec.memory_resource().live_bytes(), 5000 + 10 * sizeof(int));
    device_buffer moved = std::move(buf);
    { device_buffer dropped = std::move(moved); }
    CHECK_U64_EQ(vec.memory_resource().live_count(), 1);
    { device_uvector<int> last = std::move(vec); }
    CHECK_U64_EQ(buf.memory_resource().live_count(), 0);
    CHECK_EQ(w.destroyed, 0);
  }
  CHECK_EQ(w.destroyed, 1); /* gone with the last container, after all its memory */

  /* borrow retains: the C reference can go first. adopt takes over: no extra reference. */
  watched w2;
  gpumem_resource *raw = watched_resource(&w2);
  resource borrowed = resource::borrow(raw);
  CHECK_OK(gpumem_resource_release(raw));
  CHECK_EQ(w2.destroyed, 0);
  CHECK(std::strcmp(borrowed.name(), "watched") == 0);
  borrowed = resource();
  CHECK_EQ(w2.destroyed, 1);

  /* detach hands the reference back to C. */
  watched w3;
  resource owner = resource::adopt(watched_resource(&w3));
  gpumem_resource *detached = owner.detach();
  CHECK(!owner);
  CHECK_EQ(w3.destroyed, 0);
  CHECK_OK(gpumem_resource_release(detached));
  CHECK_EQ(w3.destroyed, 1);

  /* The current-resource table holds its own reference. */
  watched w4;
  gpumem::set_current_device_resource(resource::adopt(watched_resource(&w4)));
  CHECK_EQ(w4.destroyed, 0);
  CHECK(std::strcmp(gpumem::get_current_device_resource().name(), "watched") == 0);
  {
    device_buffer from_current(100, s);
    CHECK(from_current.memory_resource() == gpumem::get_current_device_resource());
    device_uvector<float> v(3, s);
    device_scalar<int> one(1, s);
    CHECK(one.memory_resource() == v.memory_resource());
    CHECK_U64_EQ(v.memory_resource().live_count(), 3);
    gpumem::set_per_device_resource(0, resource()); /* back to the default */
    CHECK(std::strcmp(gpumem::get_current_device_resource().name(), "watched") != 0);
    CHECK_EQ(w4.destroyed, 0); /* the buffers hold it */
    CHECK_EQ(one.value(s), 1);
  }
  gpumem::get_current_device_resource(); /* the table lets go of its retired resources */
  CHECK_EQ(w4.destroyed, 1);
}

/* ---- device_buffer ---- */

static void test_buffer_basics(const resource &mr) {
  gpumem::stream s;
  device_buffer empty(0, s, mr);
  CHECK(empty.data() == nullptr);
  CHECK_EQ(empty.size(), 0);
  CHECK(empty.is_empty());
  std::vector<unsigned char> none;
  empty.copy_to_host(none.data(), 0, s);

  std::vector<unsigned char> bytes = pattern(10000, 3);
  device_buffer buf(bytes.data(), bytes.size(), s, mr);
  CHECK(aligned_to(buf.data(), 256));
  CHECK_EQ(buf.size(), 10000);
  CHECK_EQ(buf.ssize(), 10000);
  CHECK_EQ(buf.capacity(), 10000);
  CHECK(buf.stream() == s.view());
  CHECK(buf.memory_resource() == mr);
  CHECK(host_copy(buf, s) == bytes);

  /* Shrinking keeps the memory, growing past the capacity moves the contents. */
  const void *data = buf.data();
  buf.resize(100, s);
  CHECK_EQ(buf.size(), 100);
  CHECK_EQ(buf.capacity(), 10000);
  CHECK_PTR_EQ(buf.data(), data);
  buf.resize(10000, s);
  CHECK_PTR_EQ(buf.data(), data);
  buf.resize(30000, s);
  CHECK_EQ(buf.capacity(), 30000);
  std::vector<unsigned char> grown = host_copy(buf, s);
  CHECK(std::equal(bytes.begin(), bytes.end(), grown.begin()));
  buf.resize(10000, s);
  buf.reserve(50000, s);
  CHECK_EQ(buf.size(), 10000);
  CHECK_EQ(buf.capacity(), 50000);
  buf.reserve(10, s);
  CHECK_EQ(buf.capacity(), 50000);
  buf.shrink_to_fit(s);
  CHECK_EQ(buf.capacity(), 10000);
  CHECK(host_copy(buf, s) == bytes);
  CHECK_U64_EQ(mr.live_count(), 1); /* buf; empty has 0 bytes: no allocation */

  /* Copies from and to the host at offsets. */
  std::vector<unsigned char> patch = pattern(100, 77);
  buf.copy_from_host(patch.data(), patch.size(), s, 500);
  std::vector<unsigned char> back(100);
  buf.copy_to_host(back.data(), back.size(), s, 500);
  CHECK(back == patch);

  /* The stream: resize on another stream makes it the buffer's. */
  gpumem::stream other;
  buf.resize(20000, other);
  CHECK(buf.stream() == other.view());
  buf.set_stream(s);
  CHECK(buf.stream() == s.view());

  /* Over-aligned buffers. */
  device_buffer wide_buf(1000, s, mr, 4096);
  CHECK(aligned_to(wide_buf.data(), 4096));
  CHECK_EQ(wide_buf.alignment(), 4096);
  wide_buf.resize(100000, s);
  CHECK(aligned_to(wide_buf.data(), 4096));
  device_buffer wide_copy(wide_buf, s);
  CHECK(aligned_to(wide_copy.data(), 4096));
  CHECK_THROWS(gpumem::error, (device_buffer(100, s, mr, 3000))); /* not a power of two */
}

static void test_buffer_moves_and_copies(const resource &mr) {
  gpumem::stream s, other;
  std::vector<unsigned char> bytes = pattern(4096, 9);
  device_buffer a(bytes.data(), bytes.size(), s, mr);
  std::uint64_t live = mr.live_count();

  /* Move construction takes the memory; the source is empty, on the default stream. */
  const void *data = a.data();
  device_buffer b(std::move(a));
  CHECK_PTR_EQ(b.data(), data);
  CHECK_EQ(b.size(), 4096);
  CHECK(b.stream() == s.view());
  CHECK(a.data() == nullptr);
  CHECK_EQ(a.size(), 0);
  CHECK_EQ(a.capacity(), 0);
  CHECK(a.stream().is_default());
  CHECK(a.memory_resource() == mr);
  CHECK_U64_EQ(mr.live_count(), live);
  a.resize(10, s); /* a moved-from buffer is usable */
  CHECK_EQ(a.size(), 10);
  CHECK_U64_EQ(mr.live_count(), live + 1);

  /* Move assignment frees the target's memory and takes the source's. */
  a = std::move(b);
  CHECK_PTR_EQ(a.data(), data);
  CHECK(b.data() == nullptr);
  CHECK_U64_EQ(mr.live_count(), live);
  CHECK(host_copy(a, s) == bytes);

  /* Self move-assignment changes nothing. */
  device_buffer &alias = a;
  a = std::move(alias);
  CHECK_PTR_EQ(a.data(), data);
  CHECK_EQ(a.size(), 4096);
  CHECK(host_copy(a, s) == bytes);

  /* Deep copies on a stream, from the source's resource or another one. */
  device_buffer copy(a, other);
  CHECK(copy.data() != a.data());
  CHECK(copy.stream() == other.view());
  CHECK(copy.memory_resource() == mr);
  CHECK(host_copy(copy, other) == bytes);
  a.resize(100, s); /* size 100, capacity 4096: a copy takes the size */
  device_buffer small_copy(a, s);
  CHECK_EQ(small_copy.size(), 100);
  CHECK_EQ(small_copy.capacity(), 100);
  resource elsewhere = resource::from_spec("cuda");
  device_buffer moved_over(copy, s, elsewhere);
  CHECK(moved_over.memory_resource() == elsewhere);
  CHECK_U64_EQ(elsewhere.live_count(), 1);
  CHECK(host_copy(moved_over, s) == bytes);
  /* A device-to-device copy through the copying constructor. */
  device_buffer from_device(copy.data(), 1000, s, mr);
  CHECK(host_copy(from_device, s) ==
        std::vector<unsigned char>(bytes.begin(), bytes.begin() + 1000));
}

/* Failures in the middle: an injected allocation failure, a copy that fails after the new
 * memory was allocated, each leaves the buffer and the resource as they were. */
static void test_buffer_failures(const resource &base) {
  gpumem::stream s;
  gpumem_faulty_options every_second{};
  every_second.fail_at = 2;
  resource faulty = resource::faulty(base, every_second);
  std::vector<unsigned char> bytes = pattern(5000, 1);
  device_buffer a(bytes.data(), bytes.size(), s, faulty); /* allocation 1 */
  try {
    device_buffer b(a, s); /* allocation 2 fails */
    CHECK_FAIL_("the injected fault did not throw");
  } catch (const gpumem::error &e) {
    CHECK_EQ(e.status(), GPUMEM_ERR_INJECTED_FAULT);
  }
  CHECK_U64_EQ(faulty.live_count(), 1);
  CHECK(host_copy(a, s) == bytes);

  /* Allocation failure in resize, reserve and shrink_to_fit: nothing changes. */
  gpumem_faulty_options always{};
  always.fail_every = 1;
  CHECK_OK(gpumem_faulty_reset(faulty.get(), &always));
  const void *data = a.data();
  a.resize(10, s);
  CHECK_THROWS(gpumem::error, a.resize(20000, s));
  CHECK_THROWS(gpumem::error, a.reserve(20000, s));
  CHECK_THROWS(gpumem::error, a.shrink_to_fit(s));
  CHECK_PTR_EQ(a.data(), data);
  CHECK_EQ(a.size(), 10);
  CHECK_EQ(a.capacity(), 5000);
  a.resize(5000, s);
  CHECK(host_copy(a, s) == bytes);
  CHECK_OK(gpumem_faulty_reset(faulty.get(), &every_second)); /* counts from 0 again */
  device_buffer ok(10, s, faulty);                            /* allocation 1 */

  if (!check_on_sim())
    return;
  /* The copy fails after the new memory was allocated (the simulated device fails it): the
   * new memory is given back and the old kept, on every path that copies. */
  gpumem::stream other;
  device_buffer c(bytes.data(), bytes.size(), s, base);
  const void *c_data = c.data();
  std::uint64_t live = base.live_count(), live_bytes = base.live_bytes();
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEMCPY, 1));
  try {
    c.resize(50000, other);
    CHECK_FAIL_("the failed copy did not throw");
  } catch (const gpumem::error &e) {
    CHECK_EQ(e.status(), GPUMEM_ERR_CUDA);
    CHECK(e.cuda_error() != 0);
  }
  CHECK_PTR_EQ(c.data(), c_data);
  CHECK_EQ(c.size(), 5000);
  CHECK_EQ(c.capacity(), 5000);
  CHECK(c.stream() == s.view()); /* a failed call does not take the stream either */
  CHECK_U64_EQ(base.live_count(), live);
  CHECK_U64_EQ(base.live_bytes(), live_bytes);
  CHECK(host_copy(c, s) == bytes);

  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEMCPY, 1));
  CHECK_THROWS(gpumem::error, (device_buffer(c, s, base)));
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEMCPY, 1));
  CHECK_THROWS(gpumem::error, (device_buffer(bytes.data(), bytes.size(), s, base)));
  CHECK_OK(gpumem_sim_fail_call(GPUMEM_SIM_CALL_MEMCPY, 1));
  device_uvector<int> v(100, s, base);
  CHECK_THROWS(gpumem::error, v.resize(1000, s));
  CHECK_EQ(v.size(), 100);
  CHECK_EQ(v.capacity(), 100);
  CHECK_U64_EQ(base.live_count(), live + 1);
  CHECK_U64_EQ(base.live_bytes(), live_bytes + 400);
}

/* ---- device_uvector ---- */

static void test_uvector(const resource &mr) {
  gpumem::stream s;
  /* Zero elements. */
  device_uvector<int> none(0, s, mr);
  CHECK_EQ(none.size(), 0);
  CHECK(none.is_empty());
  CHECK(none.begin() == none.end());
  CHECK(none.to_host(s).empty());
  CHECK_THROWS(std::out_of_range, none.element(0, s));
  CHECK_THROWS(std::out_of_range, none.front_element(s));
  CHECK_THROWS(std::out_of_range, none.back_element(s));
  CHECK_THROWS(std::out_of_range, none.set_element_to_zero_async(0, s));
  none.resize(3, s);
  CHECK_EQ(none.size(), 3);
  none.set_element_to_zero_async(2, s);
  CHECK_EQ(none.element(2, s), 0);

  /* Round trips and element access. */
  std::vector<int> host(1000);
  for (int i = 0; i < 1000; i++)
    host[i] = i * 7 - 3;
  device_uvector<int> v = gpumem::to_device(host, s, mr);
  CHECK_EQ(v.size(), 1000);
  CHECK_EQ(v.ssize(), 1000);
  CHECK(v.end() - v.begin() == 1000);
  CHECK(v.cbegin() == v.data());
  CHECK(v.to_host(s) == host);
  CHECK_EQ(v.element(10, s), 67);
  CHECK_EQ(v.front_element(s), -3);
  CHECK_EQ(v.back_element(s), 999 * 7 - 3);
  const int value = 12345; /* lives until the stream has run (element waits for it) */
  v.set_element_async(500, value, s);
  CHECK_EQ(v.element(500, s), 12345);
  v.set_element(501, 54321, s);
  CHECK_EQ(v.element(501, s), 54321);
  v.set_element_to_zero_async(999, s);
  CHECK_EQ(v.back_element(s), 0);
  CHECK_THROWS(std::out_of_range, v.element(1000, s));
  CHECK_THROWS(std::out_of_range, v.set_element(1000, 1, s));
  CHECK_THROWS(std::out_of_range, v.element_ptr(1000));
  CHECK(v.element_ptr(999) == v.data() + 999);
  host[500] = 12345, host[501] = 54321, host[999] = 0;
  CHECK(v.to_host(s) == host);
  int patch[3] = {1, 2, 3};
  v.copy_from_host(patch, 3, s, 997);
  CHECK_EQ(v.back_element(s), 3);
  CHECK_THROWS(std::out_of_range, v.copy_from_host(patch, 3, s, 998));
  CHECK_THROWS(std::out_of_range, v.copy_from_host(patch, SIZE_MAX, s, 2)); /* no wrap */
  host[997] = 1, host[998] = 2, host[999] = 3;

  /* Resizing keeps the first elements; capacity counts elements. */
  v.resize(2000, s);
  CHECK_EQ(v.capacity(), 2000);
  std::vector<int> grown = v.to_host(s);
  CHECK(std::equal(host.begin(), host.end(), grown.begin()));
  v.resize(10, s);
  CHECK_EQ(v.capacity(), 2000);
  v.reserve(3000, s);
  CHECK_EQ(v.capacity(), 3000);
  v.shrink_to_fit(s);
  CHECK_EQ(v.capacity(), 10);
  CHECK(v.to_host(s) == std::vector<int>(host.begin(), host.begin() + 10));

  /* Moves and deep copies. */
  gpumem::stream other;
  device_uvector<int> copy(v, other);
  CHECK(copy.data() != v.data());
  CHECK(copy.stream() == other.view());
  CHECK(copy.to_host(other) == v.to_host(s));
  const int *data = v.data();
  device_uvector<int> moved(std::move(v));
  CHECK(moved.data() == data);
  CHECK(v.is_empty());
  v = std::move(moved);
  CHECK(v.data() == data);
  device_uvector<int> &alias = v;
  v = std::move(alias);
  CHECK(v.data() == data);
  CHECK_EQ(v.size(), 10);

  /* release() hands the memory over. */
  std::uint64_t live = mr.live_count();
  device_buffer buf = v.release();
  CHECK(v.is_empty());
  CHECK(buf.data() == data);
  CHECK_EQ(buf.size(), 10 * sizeof(int));
  CHECK_U64_EQ(mr.live_count(), live);
}

static void test_uvector_wide(const resource &mr) {
  gpumem::stream s;
  std::vector<wide> host(7);
  for (int i = 0; i < 7; i++) {
    host[i].value = 100 + i;
    std::memset(host[i].pad, i, sizeof host[i].pad);
  }
  device_uvector<wide> v = gpumem::to_device(host, s, mr);
  CHECK(aligned_to(v.data(), 512));
  CHECK_EQ(sizeof(wide), 512);
  std::vector<wide> back = v.to_host(s);
  CHECK(std::memcmp(back.data(), host.data(), 7 * sizeof(wide)) == 0);
  CHECK_EQ(v.element(3, s).value, 103);
  for (int round = 0; round < 8; round++) { /* every reallocation keeps the alignment */
    v.resize(7 + round * 3, s);
    CHECK(aligned_to(v.data(), 512));
    device_uvector<wide> copy(v, s);
    CHECK(aligned_to(copy.data(), 512));
    CHECK_EQ(copy.element(6, s).value, 106);
  }
  v.shrink_to_fit(s);
  CHECK(aligned_to(v.data(), 512));
  device_scalar<wide> one(host[2], s, mr);
  CHECK(aligned_to(one.data(), 512));
  CHECK_EQ(one.value(s).value, 102);
}

/* ---- device_scalar ---- */

static void test_scalar(const resource &mr) {
  gpumem::stream s;
  device_scalar<double> d(2.5, s, mr);
  CHECK(d.value(s) == 2.5);
  CHECK_EQ(d.size(), 1);
  double v = -1.25;
  d.set_value_async(v, s);
  CHECK(d.value(s) == -1.25);
  d.set_value_to_zero_async(s);
  CHECK(d.value(s) == 0.0);

  device_scalar<std::int64_t> i(s, mr); /* uninitialized */
  std::int64_t big = INT64_C(1) << 40;
  i.set_value_async(big, s);
  s.synchronize(); /* the copy below reads it on another stream */
  gpumem::stream other;
  device_scalar<std::int64_t> copy(i, other);
  CHECK(copy.data() != i.data());
  CHECK(copy.stream() == other.view());
  CHECK_EQ(copy.value(other), big);
  device_scalar<std::int64_t> moved(std::move(copy));
  CHECK_EQ(moved.value(other), big);
  CHECK_THROWS(std::out_of_range, copy.value(other));
  copy = std::move(moved);
  CHECK_EQ(copy.value(other), big);
  device_scalar<std::int64_t> &alias = copy;
  copy = std::move(alias);
  CHECK_EQ(copy.value(other), big);

  /* From the current device's resource. */
  device_scalar<int> current(7, s);
  CHECK(current.memory_resource() == gpumem::get_current_device_resource());
  CHECK_EQ(current.value(s), 7);
}

/* ---- streams ---- */

static void test_streams() {
  CHECK(stream_view{}.is_default());
  CHECK(gpumem::default_stream().is_default());
  CHECK(gpumem::per_thread_default_stream().is_per_thread_default());
  CHECK(!gpumem::per_thread_default_stream().is_default());
  gpumem::stream a;
  CHECK(a.value() != nullptr);
  CHECK(!a.view().is_default());
  CUstream as_driver = a.value();
  stream_view from_driver = as_driver;
  CHECK(from_driver == a.view());
#ifdef GPUMEM_TEST_CUDA_RUNTIME
  cudaStream_t as_runtime = a.value();
  stream_view from_runtime = as_runtime;
  CHECK(from_runtime == a.view());
  device_uvector<int> v(5, as_runtime);
  CHECK(v.stream() == from_runtime);
#endif
  gpumem::stream b(std::move(a));
  CHECK(a.value() == nullptr);
  CHECK(b.view() == from_driver);
  a = std::move(b);
  CHECK(a.view() == from_driver);
  a.synchronize();
  device_buffer on_default(10, gpumem::default_stream());
  CHECK(on_default.stream().is_default());
}

int main() {
  check_init_backend();
  test_exceptions();
  test_streams();
  test_resource_queries();
  test_resource_lifetimes();
  const char *specs[] = {"cuda", "pool(cuda, initial=64MiB)", "pool(vmm)", "binning(pool(vmm))"};
  for (const char *spec : specs) {
    printf("resource %s\n", spec);
    resource mr = resource::from_spec(spec);
    test_buffer_basics(mr);
    test_buffer_moves_and_copies(mr);
    test_buffer_failures(mr);
    test_uvector(mr);
    test_uvector_wide(mr);
    test_scalar(mr);
    CHECK_U64_EQ(mr.live_count(), 0); /* every container gave its memory back */
  }
  CHECK_NO_HAZARD("stream order on a GPU: gpu tests");
  printf("ok\n");
  return 0;
}
