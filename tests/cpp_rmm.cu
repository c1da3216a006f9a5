/* cpp_rmm.cu: gpumem inside RMM and RMM under gpumem (include/gpumem_cccl.hpp), against RMM's
 * own headers and librmm.so from the librmm wheel (scripts/librmm.sh), with the CCCL RMM
 * bundles. What RMM does without touching the CUDA runtime runs on the simulated device in
 * CI; the rest (copies, kernels) is tests/gpu/cpp_rmm.cu's.
 *   - a gpumem resource is an rmm::device_async_resource_ref; rmm::device_buffer and
 *     rmm::device_uvector allocate from it (gpumem's statistics count their bytes), hold it
 *     (their copy keeps the gpumem resource alive), and so does RMM's current resource;
 *   - gpumem's out of memory reaches RMM's callers as a std::bad_alloc, and RMM's
 *     failure_callback_resource_adaptor<std::bad_alloc> can retry it; RMM adaptors compose
 *     over gpumem (a limiting_resource_adaptor);
 *   - RMM resources under gpumem: a gpumem pool over RMM's limiting adaptor (over gpumem),
 *     whose refusals become gpumem's out of memory with RMM's text; and a gpumem pool over
 *     RMM's cuda_memory_resource, which runs where the CUDA runtime has a device and
 *     elsewhere fails as gpumem's out of memory with RMM's CUDA error in the message. */
#include <gpumem_cccl.hpp>

#include "check.h"
#include "check_throws.hpp"

#include <cstring>

#include <cuda_runtime_api.h>
#include <rmm/device_buffer.hpp>
#include <rmm/device_uvector.hpp>
#include <rmm/error.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/failure_callback_resource_adaptor.hpp>
#include <rmm/mr/limiting_resource_adaptor.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/resource_ref.hpp>
#include <rmm/version_config.hpp>

#include <optional>
#include <string>
#include <type_traits>

using gpumem::cccl_resource;
using gpumem::resource;

static_assert(GPUMEM_CCCL_STREAM_FIRST, "RMM 26 builds on CCCL 3.1 or later");
static_assert(std::is_constructible<rmm::device_async_resource_ref, cccl_resource &>::value, "");
static_assert(std::is_same<rmm::device_async_resource_ref, gpumem::cccl_device_resource_ref>::value,
              "gpumem's ref is RMM's");
static_assert(std::is_constructible<cuda::mr::any_resource<cuda::mr::device_accessible>,
                                    cccl_resource>::value,
              "RMM's owning holders take a copy");

/* Whether the CUDA runtime has a device here (not on the CI machine). */
static bool runtime_has_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

static void test_ref_and_containers() {
  printf("rmm::device_buffer and rmm::device_uvector from gpumem\n");
  resource stats = resource::statistics(resource::from_spec("pool(cuda, initial=16MiB)"));
  cccl_resource r{stats};
  rmm::device_async_resource_ref ref{r};
  gpumem::stream s;
  cuda::stream_ref stream{s.value()};

  void *p = ref.allocate(stream, 1000, 512);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 512 == 0);
  CHECK_U64_EQ(stats.live_bytes(), 1000);
  ref.deallocate(stream, p, 1000, 512);
  CHECK_U64_EQ(stats.live_count(), 0);
  {
    rmm::device_buffer buffer(4096, stream, ref);
    CHECK_U64_EQ(buffer.size(), 4096);
    CHECK_U64_EQ(stats.live_bytes(), 4096);
    CHECK(buffer.memory_resource() == ref);
    rmm::device_uvector<int> v(1000, stream, r);
    CHECK_U64_EQ(v.size(), 1000);
    CHECK_U64_EQ(stats.live_bytes(), 4096 + 4000);
    v.resize(10, stream); /* smaller: the memory stays (no copy) */
    CHECK_U64_EQ(v.capacity(), 1000);
    rmm::device_uvector<int> moved(std::move(v));
    CHECK_U64_EQ(moved.size(), 10);
    rmm::device_uvector<double> empty(0, stream, ref);
    CHECK(empty.is_empty());
    CHECK_U64_EQ(stats.live_count(), 2);
  }
  s.synchronize();
  CHECK_U64_EQ(stats.live_count(), 0);

  /* A buffer given the resource itself holds a copy: the gpumem resource lives on after the
   * caller's handles are gone, and the buffer frees into it. */
  resource base = resource::statistics(resource::from_spec("cuda"));
  std::optional<rmm::device_buffer> kept;
  {
    resource own = resource::statistics(base);
    kept.emplace(2048, stream, cccl_resource{own});
    CHECK_U64_EQ(own.live_bytes(), 2048);
  }
  CHECK_U64_EQ(kept->size(), 2048);
  kept.reset();
  s.synchronize();
  CHECK_U64_EQ(base.live_bytes(), 0); /* the buffer freed into `own`, and `own` into `base` */
}

static void test_current_resource() {
  printf("gpumem as RMM's current device resource\n");
  resource stats = resource::statistics(resource::from_spec("pool(cuda, initial=16MiB)"));
  gpumem::stream s;
  cuda::stream_ref stream{s.value()};
  cccl_resource same{stats};
  auto previous = rmm::mr::set_current_device_resource(cccl_resource{stats});
  {
    CHECK(rmm::mr::get_current_device_resource_ref() == rmm::device_async_resource_ref{same});
    rmm::device_buffer buffer(3000, stream); /* RMM's default resource: gpumem */
    rmm::device_uvector<float> v(250, stream);
    CHECK_U64_EQ(stats.live_bytes(), 3000 + 1000);
  }
  s.synchronize();
  CHECK_U64_EQ(stats.live_count(), 0);
  rmm::mr::set_current_device_resource(std::move(previous));
  CHECK(rmm::mr::get_current_device_resource_ref() != rmm::device_async_resource_ref{same});
}

static void test_errors_to_rmm() {
  printf("gpumem's failures on RMM's side\n");
  resource limited = resource::limit(resource::from_spec("cuda"), 1 << 20);
  cccl_resource r{limited};
  gpumem::stream s;
  cuda::stream_ref stream{s.value()};

  CHECK_THROWS_TEXT(std::bad_alloc, rmm::device_buffer(2 << 20, stream, r), "limit");
  CHECK_THROWS_TEXT(std::bad_alloc, rmm::device_uvector<int>(1 << 20, stream, r), "limit");
  CHECK_U64_EQ(limited.live_count(), 0);
  rmm::device_buffer fits(512 << 10, stream, r); /* nothing was lost */
  CHECK_U64_EQ(limited.live_bytes(), 512 << 10);

  /* RMM's retry adaptor catches gpumem's out of memory when told to catch a std::bad_alloc:
   * the callback frees the buffer above, and the retry succeeds. */
  struct retry_state {
    rmm::device_buffer *holder;
    int calls;
  } state{&fits, 0};
  rmm::mr::failure_callback_resource_adaptor<std::bad_alloc> retrying{
      r,
      [](std::size_t, void *arg) {
        auto *st = static_cast<retry_state *>(arg);
        st->calls++;
        if (st->holder->is_empty())
          return false;
        *st->holder = rmm::device_buffer{}; /* gives its 512 KiB back */
        return true;
      },
      &state};
  {
    rmm::device_buffer big(768 << 10, stream, retrying);
    CHECK_EQ(state.calls, 1);
    CHECK_U64_EQ(limited.live_bytes(), 768 << 10);
  }
  CHECK_THROWS_TEXT(std::bad_alloc, rmm::device_buffer(2 << 20, stream, retrying), "limit");
  CHECK_EQ(state.calls, 2); /* asked once more, and said no */

  /* An RMM adaptor over gpumem: its own limit throws RMM's out_of_memory, gpumem gives the
   * rest. */
  rmm::mr::limiting_resource_adaptor rmm_limit{r, 64 << 10};
  CHECK_THROWS_TEXT(rmm::out_of_memory, rmm::device_buffer(128 << 10, stream, rmm_limit), "");
  {
    rmm::device_buffer small(16 << 10, stream, rmm_limit);
    CHECK_U64_EQ(limited.live_bytes(), 16 << 10);
    CHECK_U64_EQ(rmm_limit.get_allocated_bytes(), 16 << 10);
  }
  s.synchronize();
  CHECK_U64_EQ(limited.live_count(), 0);
}

static void test_rmm_under_gpumem() {
  printf("RMM resources under gpumem\n");
  gpumem::stream s;
  resource bottom = resource::statistics(resource::from_spec("cuda"));
  {
    /* gpumem pool -> RMM limiting adaptor -> gpumem: the pool's memory comes through RMM. */
    rmm::mr::limiting_resource_adaptor rmm_limit{cccl_resource{bottom}, 8 << 20};
    gpumem::cccl_options opts;
    opts.name = "rmm-limit";
    resource pool = resource::pool(gpumem::from_cccl(rmm_limit, opts), 2 << 20);
    CHECK_U64_EQ(rmm_limit.get_allocated_bytes(), 2 << 20);
    CHECK_U64_EQ(bottom.live_bytes(), 2 << 20);
    void *p = pool.allocate(1 << 20, s);
    CHECK_U64_EQ(rmm_limit.get_allocated_bytes(), 2 << 20); /* from the pool's reserve */
    /* Past RMM's limit: RMM says no, gpumem says where (the upstream's name), and its
     * verdict quotes RMM's own words. */
    CHECK_THROWS_TEXT(gpumem::out_of_memory, (void)pool.allocate(16 << 20, s), "rmm-limit");
    try {
      (void)pool.allocate(16 << 20, s);
      CHECK_FAIL_("an allocation past RMM's limit succeeded");
    } catch (const gpumem::out_of_memory &e) {
      const char *verdict = strstr(e.what(), "\nverdict: ");
      CHECK(verdict != nullptr);
      CHECK_CONTAINS(verdict, "rmm-limit said it has no memory for");
      CHECK_CONTAINS(verdict, "Exceeded memory limit");
    }
    CHECK_U64_EQ(pool.live_bytes(), 1 << 20);
    pool.deallocate(p, 1 << 20, s);
    s.synchronize();
  }
  CHECK_U64_EQ(bottom.live_bytes(), 0);

  /* gpumem pool -> RMM's cuda_memory_resource (cudaMalloc). */
  gpumem::cccl_options opts;
  opts.name = "rmm-cuda";
  opts.synchronous = true;
  resource rmm_cuda = gpumem::from_cccl(rmm::mr::cuda_memory_resource{}, opts);
  if (runtime_has_device()) {
    resource pool = resource::pool(rmm_cuda, 4 << 20);
    CHECK_U64_EQ(rmm_cuda.live_bytes(), 4 << 20);
    void *p = pool.allocate(100 << 10, s);
    pool.deallocate(p, 100 << 10, s);
    s.synchronize();
    CHECK_U64_EQ(pool.live_count(), 0);
  } else {
    /* No device for the CUDA runtime: RMM throws, gpumem reports it as out of memory with
     * RMM's text, and creates nothing. */
    printf("  the CUDA runtime has no device: RMM's failure path\n");
    bool caught = false;
    try {
      (void)resource::pool(rmm_cuda, 4 << 20);
    } catch (const gpumem::out_of_memory &e) {
      caught = true;
      CHECK_CONTAINS(e.message(), "rmm-cuda");
      CHECK_CONTAINS(e.message(), "CUDA error");
    }
    CHECK(caught);
    void *none = nullptr;
    CHECK_STATUS(gpumem_allocate(rmm_cuda.get(), 4096, s.value(), &none), GPUMEM_ERR_OUT_OF_MEMORY);
    CHECK(none == nullptr);
    CHECK_U64_EQ(rmm_cuda.live_count(), 0);
  }
}

int main() {
  check_init_backend();
  printf("RMM %d.%d, CCCL %d.%d.%d\n", RMM_VERSION_MAJOR, RMM_VERSION_MINOR, CCCL_MAJOR_VERSION,
         CCCL_MINOR_VERSION, CCCL_PATCH_VERSION);
  try {
    test_ref_and_containers();
    test_current_resource();
    test_errors_to_rmm();
    test_rmm_under_gpumem();
  } catch (const gpumem::failure &f) {
    CHECK_FAIL_("gpumem threw %s: %s", f.status_name(), f.message());
  } catch (const std::exception &e) {
    CHECK_FAIL_("threw: %s", e.what());
  }
  CHECK_NO_HAZARD("stream order on a GPU: tests/gpu/cpp_rmm.cu");
  printf("ok\n");
  return 0;
}
