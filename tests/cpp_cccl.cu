/* cpp_cccl.cu: gpumem and CCCL's memory resources (include/gpumem_cccl.hpp), against the CCCL
 * that the compiling nvcc ships (CUDA 13.0: CCCL 3.0, whose names predate 3.1's; RMM's newer
 * CCCL is tested by cpp_rmm.cu). Both ways:
 *   - gpumem::cccl_resource is a CCCL resource with device_accessible: allocations through a
 *     CCCL resource ref come from the gpumem resource (its statistics say so), aligned as
 *     asked, on the stream given; gpumem's failures reach the CCCL side as exceptions (out of
 *     memory as a std::bad_alloc), and a bad free never throws and frees nothing;
 *   - gpumem::from_cccl makes a gpumem resource over a CCCL resource: a pool over it takes
 *     its memory from the CCCL resource; what the CCCL resource throws becomes a gpumem
 *     status and message, with nothing changed; gpumem's contract (double free refused) holds
 *     around it; it is destroyed with the gpumem resource.
 * No kernel runs: on the simulated device in CI, on both backends where there is a GPU. */
#include <gpumem_cccl.hpp>

#include "check.h"
#include "check_throws.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

using gpumem::cccl_device_resource_ref;
using gpumem::cccl_resource;
using gpumem::resource;

/* The stream-ordered calls under either version's names. */
static void *ref_allocate(cccl_device_resource_ref ref, gpumem::stream_view stream,
                          std::size_t bytes, std::size_t alignment) {
#if GPUMEM_CCCL_STREAM_FIRST
  return ref.allocate(cuda::stream_ref{stream.value()}, bytes, alignment);
#else
  return ref.allocate_async(bytes, alignment, cuda::stream_ref{stream.value()});
#endif
}
static void ref_deallocate(cccl_device_resource_ref ref, gpumem::stream_view stream, void *ptr,
                           std::size_t bytes, std::size_t alignment) {
#if GPUMEM_CCCL_STREAM_FIRST
  ref.deallocate(cuda::stream_ref{stream.value()}, ptr, bytes, alignment);
#else
  ref.deallocate_async(ptr, bytes, alignment, cuda::stream_ref{stream.value()});
#endif
}
static void *sync_allocate(cccl_resource &r, std::size_t bytes, std::size_t alignment) {
#if GPUMEM_CCCL_STREAM_FIRST
  return r.allocate_sync(bytes, alignment);
#else
  return r.allocate(bytes, alignment);
#endif
}
static void sync_deallocate(cccl_resource &r, void *ptr, std::size_t bytes, std::size_t alignment) {
#if GPUMEM_CCCL_STREAM_FIRST
  r.deallocate_sync(ptr, bytes, alignment);
#else
  r.deallocate(ptr, bytes, alignment);
#endif
}

/* ---- compile-time promises ---- */

/* (The header asserts the stream-ordered concept itself.) */
#if GPUMEM_CCCL_STREAM_FIRST
static_assert(cuda::mr::synchronous_resource_with<cccl_resource, cuda::mr::device_accessible>, "");
#else
static_assert(cuda::mr::resource_with<cccl_resource, cuda::mr::device_accessible>, "");
#endif
static_assert(!cuda::has_property<cccl_resource, cuda::mr::host_accessible>,
              "gpumem's memory is not promised to the host");
static_assert(std::is_constructible<cccl_device_resource_ref, cccl_resource &>::value, "");
static_assert(std::is_nothrow_copy_constructible<cccl_resource>::value, "");

/* ---- a CCCL resource of the test's own, scripted to fail ---- */

/* What the scripted resource does next, shared by its copies; counts its live copies, so
 * that the test sees from_cccl's copy destroyed. */
struct script {
  enum failure { none, bad_alloc, runtime_error, not_an_exception, gpumem_error };
  failure allocate_fails = none;
  bool deallocate_throws = false;
  int allocations = 0;
  int deallocations = 0;
  std::atomic<int> copies{0};
};

class scripted_resource {
public:
  scripted_resource(resource mr, std::shared_ptr<script> s) : inner_(std::move(mr)), s_(s) {
    s_->copies++;
  }
  scripted_resource(const scripted_resource &o) : inner_(o.inner_), s_(o.s_) { s_->copies++; }
  scripted_resource &operator=(const scripted_resource &) = delete;
  ~scripted_resource() { s_->copies--; }

#if GPUMEM_CCCL_STREAM_FIRST
  void *allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t alignment) {
    fail_if_asked();
    s_->allocations++;
    return inner_.allocate(stream, bytes, alignment);
  }
  void deallocate(cuda::stream_ref stream, void *ptr, std::size_t bytes, std::size_t alignment) {
    if (s_->deallocate_throws) {
      s_->deallocate_throws = false;
      throw std::runtime_error("scripted: deallocate refused");
    }
    s_->deallocations++;
    inner_.deallocate(stream, ptr, bytes, alignment);
  }
  void *allocate_sync(std::size_t bytes, std::size_t alignment) {
    return inner_.allocate_sync(bytes, alignment);
  }
  void deallocate_sync(void *ptr, std::size_t bytes, std::size_t alignment) {
    inner_.deallocate_sync(ptr, bytes, alignment);
  }
#else
  void *allocate_async(std::size_t bytes, std::size_t alignment, cuda::stream_ref stream) {
    fail_if_asked();
    s_->allocations++;
    return inner_.allocate_async(bytes, alignment, stream);
  }
  void deallocate_async(void *ptr, std::size_t bytes, std::size_t alignment,
                        cuda::stream_ref stream) {
    if (s_->deallocate_throws) {
      s_->deallocate_throws = false;
      throw std::runtime_error("scripted: deallocate refused");
    }
    s_->deallocations++;
    inner_.deallocate_async(ptr, bytes, alignment, stream);
  }
  void *allocate(std::size_t bytes, std::size_t alignment) {
    return inner_.allocate(bytes, alignment);
  }
  void deallocate(void *ptr, std::size_t bytes, std::size_t alignment) {
    inner_.deallocate(ptr, bytes, alignment);
  }
#endif
  friend bool operator==(const scripted_resource &a, const scripted_resource &b) {
    return a.s_ == b.s_;
  }
  friend bool operator!=(const scripted_resource &a, const scripted_resource &b) {
    return a.s_ != b.s_;
  }
  friend void get_property(const scripted_resource &, cuda::mr::device_accessible) noexcept {}

private:
  void fail_if_asked() {
    script::failure f = s_->allocate_fails;
    s_->allocate_fails = script::none;
    switch (f) {
    case script::bad_alloc:
      throw std::bad_alloc();
    case script::runtime_error:
      throw std::runtime_error("scripted: the upstream broke");
    case script::not_an_exception:
      throw 42;
    case script::gpumem_error:
      throw gpumem::error(GPUMEM_ERR_INVALID_STREAM, "scripted: a gpumem error");
    case script::none:
      break;
    }
  }

  cccl_resource inner_;
  std::shared_ptr<script> s_;
};

/* ---- gpumem inside CCCL ---- */

static void test_to_cccl() {
  printf("cccl_resource over gpumem\n");
  resource stats = resource::statistics(resource::from_spec("pool(cuda, initial=16MiB)"));
  cccl_resource r{stats};
  cccl_device_resource_ref ref{r};
  gpumem::stream s;

  void *p = ref_allocate(ref, s, 1000, 512);
  CHECK(p != nullptr && reinterpret_cast<std::uintptr_t>(p) % 512 == 0);
  CHECK_U64_EQ(stats.live_bytes(), 1000);
  /* Below gpumem's least alignment: 256 is given, and the free names the same alignment. */
  void *q = ref_allocate(ref, s, 24, 16);
  CHECK(reinterpret_cast<std::uintptr_t>(q) % 256 == 0);
  CHECK_U64_EQ(stats.live_count(), 2);
  ref_deallocate(ref, s, q, 24, 16);
  ref_deallocate(ref, s, p, 1000, 512);
  CHECK_U64_EQ(stats.live_count(), 0);

  /* The synchronous calls, on the default stream. */
  void *t = sync_allocate(r, 4096, 256);
  CHECK_U64_EQ(stats.live_bytes(), 4096);
  sync_deallocate(r, t, 4096, 256);
  CHECK_U64_EQ(stats.live_bytes(), 0);

  /* Copies share the resource and compare equal; another resource does not. */
  cccl_resource copy = r;
  CHECK(copy == r && !(copy != r) && copy.get() == stats);
  cccl_resource other{resource::from_spec("cuda")};
  CHECK(other != r);
  CHECK(cccl_device_resource_ref{copy} == ref);
  CHECK(cccl_device_resource_ref{other} != ref);
  /* Memory from one copy is freed through another. */
  p = ref_allocate(cccl_device_resource_ref{copy}, s, 300, 256);
  ref_deallocate(ref, s, p, 300, 256);
  CHECK_U64_EQ(stats.live_count(), 0);

  /* A copy keeps the gpumem resource alive after every handle of the caller's is gone. */
  std::optional<cccl_resource> keeper{
      cccl_resource{resource::statistics(resource::from_spec("cuda"))}};
  cccl_resource kept_copy = *keeper;
  keeper.reset();
  p = ref_allocate(cccl_device_resource_ref{kept_copy}, s, 128, 256);
  CHECK_U64_EQ(kept_copy.get().live_bytes(), 128);
  ref_deallocate(cccl_device_resource_ref{kept_copy}, s, p, 128, 256);
  CHECK(std::string(kept_copy.get().name()) == "stats");

  /* The default constructor takes the current device's resource. */
  CHECK(cccl_resource{} == cccl_resource{gpumem::get_current_device_resource()});
  s.synchronize();
}

static void test_to_cccl_errors() {
  printf("cccl_resource errors\n");
  gpumem::stream s;
  resource limited = resource::limit(resource::from_spec("cuda"), 1 << 20);
  cccl_resource r{limited};
  cccl_device_resource_ref ref{r};

  /* Out of memory: a std::bad_alloc (gpumem::out_of_memory) to CCCL's callers, gpumem's
   * message, nothing changed. */
  CHECK_THROWS_TEXT(gpumem::out_of_memory, (void)ref_allocate(ref, s, 2 << 20, 256), "limit");
  CHECK_U64_EQ(limited.live_bytes(), 0);
  void *p = ref_allocate(ref, s, 512 << 10, 256); /* the resource still works */
  ref_deallocate(ref, s, p, 512 << 10, 256);

  /* A bad alignment: gpumem::error with its status. */
  bool caught = false;
  try {
    (void)ref_allocate(ref, s, 100, 3);
  } catch (const gpumem::error &e) {
    caught = true;
    CHECK(e.status() == GPUMEM_ERR_INVALID_ARGUMENT);
  }
  CHECK(caught);
  /* The synchronous allocation fails the same way. */
  CHECK_THROWS(std::bad_alloc, sync_allocate(r, 2 << 20, 256));

  /* A free with the wrong size throws nothing, frees nothing, and says why. */
  p = ref_allocate(ref, s, 1000, 256);
  gpumem_set_error_message("");
  ref_deallocate(ref, s, p, 999, 256);
  CHECK_U64_EQ(limited.live_count(), 1);
  CHECK(gpumem_last_error_message()[0] != '\0');
  ref_deallocate(ref, s, p, 1000, 256);
  CHECK_U64_EQ(limited.live_count(), 0);

  /* An empty handle is refused at construction. */
  CHECK_THROWS(gpumem::error, cccl_resource{resource{}});
  s.synchronize();
}

/* ---- CCCL under gpumem ---- */

static void test_from_cccl() {
  printf("from_cccl: a pool over a CCCL resource\n");
  gpumem::stream s;
  resource base = resource::statistics(resource::from_spec("cuda"));
  auto sc = std::make_shared<script>();
  {
    gpumem::cccl_options opts;
    opts.name = "scripted";
    resource up = gpumem::from_cccl(scripted_resource{base, sc}, opts);
    CHECK(std::string(up.name()) == "scripted");
    CHECK_EQ(sc->copies.load(), 1); /* from_cccl holds one copy, the temporary is gone */
    resource pool = resource::pool(up, 1 << 20);
    CHECK_EQ(sc->allocations, 1); /* the pool's initial memory came through the CCCL call */
    CHECK(base.live_bytes() >= (1u << 20));

    void *p = pool.allocate(1000, s);
    CHECK_EQ(sc->allocations, 1); /* from the pool's reserve */
    void *big = pool.allocate(8 << 20, s);
    CHECK(sc->allocations >= 2); /* the pool grew through the CCCL resource */
    CHECK(base.live_bytes() >= (9u << 20));
    pool.deallocate(big, 8 << 20, s);
    pool.deallocate(p, 1000, s);
    s.synchronize();
    CHECK_U64_EQ(pool.live_count(), 0);

    /* The CCCL resource's exceptions become statuses, with their text, and change nothing. */
    std::uint64_t held = base.live_bytes(), chunks = up.live_count(); /* the pool's */
    struct expected {
      script::failure f;
      gpumem_status status;
      const char *text;
    } cases[] = {{script::bad_alloc, GPUMEM_ERR_OUT_OF_MEMORY, "std::bad_alloc"},
                 {script::runtime_error, GPUMEM_ERR_CALLBACK, "the upstream broke"},
                 {script::not_an_exception, GPUMEM_ERR_CALLBACK, "other than a std::exception"},
                 {script::gpumem_error, GPUMEM_ERR_INVALID_STREAM, "a gpumem error"}};
    for (const expected &c : cases) {
      sc->allocate_fails = c.f;
      void *none = nullptr;
      CHECK_STATUS(gpumem_allocate(up.get(), 4096, s.value(), &none), c.status);
      CHECK_CONTAINS(gpumem_last_error_message(), c.text);
      CHECK(none == nullptr);
      CHECK_U64_EQ(up.live_count(), chunks);
      CHECK_U64_EQ(base.live_bytes(), held);
    }
    /* Through the pool: a growth the CCCL resource refuses, with free memory in the pool,
     * gives that memory back through it and grows again; one refused while the pool holds
     * nothing free fails as out of memory. */
    int grown_before = sc->allocations, freed_before = sc->deallocations;
    sc->allocate_fails = script::bad_alloc;
    void *grown = pool.allocate(64 << 20, s);
    CHECK_EQ(sc->allocations, grown_before + 1); /* the growth after the refused one */
    CHECK(sc->deallocations > freed_before);     /* the free chunks went back first */
    CHECK(base.live_bytes() < held + (64u << 20));
    pool.deallocate(grown, 64 << 20, s);
    pool.trim();
    held = base.live_bytes();
    chunks = up.live_count(); /* none: the trim gave every chunk back */
    sc->allocate_fails = script::bad_alloc;
    CHECK_THROWS(gpumem::out_of_memory, pool.allocate(64 << 20, s));
    CHECK_U64_EQ(pool.live_count(), 0);
    CHECK_U64_EQ(base.live_bytes(), held);

    /* gpumem's contract around it: a double free is refused without reaching it, a free
     * it throws on leaves the allocation live (and freeable again). */
    void *d = up.allocate(4096, s);
    int before = sc->deallocations;
    up.deallocate(d, 4096, s);
    CHECK_EQ(sc->deallocations, before + 1);
    CHECK_STATUS(gpumem_deallocate(up.get(), d, 4096, s.value()), GPUMEM_ERR_MISUSE);
    CHECK_EQ(sc->deallocations, before + 1);
    CHECK_U64_EQ(up.live_count(), chunks);
    d = up.allocate(4096, s);
    sc->deallocate_throws = true;
    CHECK_STATUS(gpumem_deallocate(up.get(), d, 4096, s.value()), GPUMEM_ERR_CALLBACK);
    CHECK_CONTAINS(gpumem_last_error_message(), "deallocate refused");
    CHECK_U64_EQ(up.live_count(), chunks + 1);
    up.deallocate(d, 4096, s);
    CHECK_U64_EQ(up.live_count(), chunks);
    s.synchronize();
  }
  /* The last release destroyed from_cccl's copy; the pool gave its memory back. */
  CHECK_EQ(sc->copies.load(), 0);
  CHECK_U64_EQ(base.live_bytes(), 0);
}

static void test_round_trip() {
  printf("gpumem over CCCL over gpumem, from several threads\n");
  /* A CCCL ref over gpumem, a gpumem pool over that ref, and CCCL over the pool: allocations
   * at the top come from the bottom resource; the ref does not own, so `bottom` outlives. */
  resource stats = resource::statistics(resource::from_spec("cuda"));
  cccl_resource bottom{stats};
  {
    cccl_resource top{resource::pool(gpumem::from_cccl(cccl_device_resource_ref{bottom}))};
    cccl_device_resource_ref ref{top};
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 4; t++)
      threads.emplace_back([&, t] {
        try {
          gpumem::stream s;
          std::vector<std::pair<void *, std::size_t>> held;
          for (int i = 0; i < 500; i++) {
            std::size_t bytes = 256u * (1 + (i * 7 + t) % 64);
            held.emplace_back(ref_allocate(ref, s, bytes, 256), bytes);
            if (i % 3 == 2) {
              for (auto &h : held)
                ref_deallocate(ref, s, h.first, h.second, 256);
              held.clear();
            }
          }
          for (auto &h : held)
            ref_deallocate(ref, s, h.first, h.second, 256);
          s.synchronize();
        } catch (...) {
          failures++;
        }
      });
    for (auto &th : threads)
      th.join();
    CHECK_EQ(failures.load(), 0);
    CHECK_U64_EQ(top.get().live_count(), 0);
    CHECK(stats.live_bytes() > 0); /* the pool holds what it took from the bottom */
  }
  CHECK_U64_EQ(stats.live_bytes(), 0);
}

int main() {
  check_init_backend();
  printf("CCCL %d.%d.%d (%s names)\n", CCCL_MAJOR_VERSION, CCCL_MINOR_VERSION, CCCL_PATCH_VERSION,
         GPUMEM_CCCL_STREAM_FIRST ? "3.1" : "3.0");
  try {
    test_to_cccl();
    test_to_cccl_errors();
    test_from_cccl();
    test_round_trip();
  } catch (const gpumem::failure &f) {
    CHECK_FAIL_("gpumem threw %s: %s", f.status_name(), f.message());
  } catch (const std::exception &e) {
    CHECK_FAIL_("threw: %s", e.what());
  }
  CHECK_NO_HAZARD("stream order on a GPU: gpu tests");
  printf("ok\n");
  return 0;
}
