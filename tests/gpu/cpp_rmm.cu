/* cpp_rmm.cu (GPU): RMM's containers on gpumem memory and gpumem's pool on RMM's, with real
 * kernels and copies (include/gpumem_cccl.hpp; tests/cpp_rmm.cu runs what needs no GPU):
 *   - an rmm::device_uvector allocated through gpumem (the statistics adaptor counts its
 *     bytes) is written by a kernel, read back by RMM's element() and by a copy to the host,
 *     survives growth past its capacity (RMM's copy into new gpumem memory), and an
 *     rmm::device_buffer round-trips host data and deep-copies on another stream;
 *   - rmm::device_scalar holds a kernel's sum; with gpumem as RMM's current resource, Thrust
 *     under rmm::exec_policy takes its scratch memory from gpumem;
 *   - gpumem's pool over RMM's cuda_memory_resource (cudaMalloc) and over RMM's
 *     cuda_async_memory_resource: gpumem's own device_uvector and RMM's device_uvector (RMM
 *     over gpumem over RMM) are written by kernels and read back.
 * A wrong pointer, a missing copy or stream order broken would show as wrong data here.
 *
 * Arguments: gpumem resource specs (each used in turn). Exit status: 0 when every check
 * passes, 77 without a GPU, 1 otherwise. */
#include <cuda_runtime.h>
#include <gpumem_cccl.hpp>

#include "gpu_check.h"

#include <rmm/device_buffer.hpp>
#include <rmm/device_scalar.hpp>
#include <rmm/device_uvector.hpp>
#include <rmm/exec_policy.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/resource_ref.hpp>

#include <thrust/reduce.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../cuda_expect.cuh"

static std::vector<int> to_host(const int *device, size_t n, cudaStream_t s) {
  std::vector<int> host(n);
  CUDA_CHECK(cudaMemcpyAsync(host.data(), device, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return host;
}

static bool is_iota(const std::vector<int> &v, size_t n, int offset) {
  for (size_t i = 0; i < n; i++)
    if (v[i] != static_cast<int>(i) + offset)
      return false;
  return true;
}

static std::uint64_t total_allocations(const gpumem::resource &stats) {
  gpumem_statistics st{};
  st.size = sizeof st;
  gpumem::check(gpumem_statistics_get(stats.get(), &st));
  return static_cast<std::uint64_t>(st.count.total);
}

/* RMM's containers over gpumem. */
static void rmm_over_gpumem(const char *spec) {
  std::printf("rmm containers over %s\n", spec);
  gpumem::resource stats = gpumem::resource::statistics(gpumem::resource::from_spec(spec));
  gpumem::cccl_resource r{stats};
  rmm::device_async_resource_ref ref{r};
  cudaStream_t s1, s2;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  const size_t n = 1 << 20;
  {
    rmm::device_uvector<int> v(n, s1, ref);
    EXPECT(stats.live_bytes() == n * sizeof(int));
    iota<<<256, 256, 0, s1>>>(v.data(), v.size(), 3);
    LAUNCH_CHECK();
    EXPECT(v.element(n - 1, s1) == static_cast<int>(n - 1 + 3));
    EXPECT(is_iota(to_host(v.data(), n, s1), n, 3));

    /* Growth: RMM copies into new memory from gpumem and frees the old into it. */
    v.resize(2 * n, s1);
    EXPECT(stats.live_bytes() == 2 * n * sizeof(int));
    EXPECT(is_iota(to_host(v.data(), n, s1), n, 3));

    const unsigned long long zero = 0;
    rmm::device_scalar<unsigned long long> total(zero, s1, r);
    sum<<<256, 256, 0, s1>>>(v.data(), n, total.data());
    LAUNCH_CHECK();
    EXPECT(total.value(s1) == static_cast<unsigned long long>(n) * (n - 1) / 2 + 3ull * n);

    /* Host data in, a deep copy on s2 after s1's work (an event), and back out. */
    std::vector<int> host(n);
    for (size_t i = 0; i < n; i++)
      host[i] = static_cast<int>(i * 7);
    rmm::device_buffer b(host.data(), n * sizeof(int), s1, ref);
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, s1));
    CUDA_CHECK(cudaStreamWaitEvent(s2, done, 0));
    rmm::device_buffer copy(b, s2, r);
    std::vector<int> back = to_host(static_cast<const int *>(copy.data()), n, s2);
    EXPECT(back == host);
    CUDA_CHECK(cudaEventDestroy(done));
    EXPECT(stats.live_count() == 4); /* v, total, b, copy */
  }
  CUDA_CHECK(cudaStreamSynchronize(s1));
  CUDA_CHECK(cudaStreamSynchronize(s2));
  EXPECT(stats.live_count() == 0);

  /* gpumem as RMM's current resource: containers without a resource, and Thrust's scratch
   * memory under rmm::exec_policy, come from gpumem. */
  auto previous = rmm::mr::set_current_device_resource(r);
  {
    rmm::device_uvector<int> w(n, s1);
    EXPECT(stats.live_bytes() == n * sizeof(int));
    iota<<<256, 256, 0, s1>>>(w.data(), w.size(), 0);
    LAUNCH_CHECK();
    std::uint64_t before = total_allocations(stats);
    long long s = thrust::reduce(rmm::exec_policy(s1), w.begin(), w.end(), 0ll);
    EXPECT(s == static_cast<long long>(n) * (n - 1) / 2);
    EXPECT(total_allocations(stats) > before);     /* reduce's scratch space came from gpumem */
    EXPECT(stats.live_bytes() == n * sizeof(int)); /* and went back */
  }
  rmm::mr::set_current_device_resource(std::move(previous));
  CUDA_CHECK(cudaStreamSynchronize(s1));
  EXPECT(stats.live_count() == 0);
  CUDA_CHECK(cudaStreamDestroy(s1));
  CUDA_CHECK(cudaStreamDestroy(s2));
}

/* gpumem's pool over an RMM resource, and RMM's container over that pool. */
template <typename R> static void gpumem_over_rmm(R upstream, const char *name) {
  std::printf("gpumem pool over %s\n", name);
  gpumem::cccl_options opts;
  opts.name = name;
  gpumem::resource rmm_side = gpumem::from_cccl(std::move(upstream), opts);
  gpumem::resource pool = gpumem::resource::pool(rmm_side, 64 << 20);
  EXPECT(rmm_side.live_bytes() >= (64u << 20)); /* the pool's memory came through RMM */
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t n = 1 << 20;
  {
    gpumem::device_uvector<int> g(n, s, pool);
    iota<<<256, 256, 0, s>>>(g.data(), g.size(), 11);
    LAUNCH_CHECK();
    EXPECT(is_iota(g.to_host(s), n, 11));

    /* RMM over gpumem over RMM; a growth past the pool's reserve goes to RMM again. */
    rmm::device_uvector<int> v(32 << 20, s, gpumem::cccl_resource{pool});
    EXPECT(rmm_side.live_bytes() > (64u << 20));
    iota<<<256, 256, 0, s>>>(v.data(), v.size(), -5);
    LAUNCH_CHECK();
    EXPECT(v.element(12345, s) == 12345 - 5);
    EXPECT(is_iota(to_host(v.data(), v.size(), s), v.size(), -5));
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  EXPECT(pool.live_count() == 0);
  pool.trim();
  CUDA_CHECK(cudaStreamDestroy(s));
}

int main(int argc, char **argv) {
  if (!gpu_test_start())
    return SKIP_CODE;
  try {
    for (int i = 1; i < argc; i++)
      rmm_over_gpumem(argv[i]);
    if (argc < 2)
      rmm_over_gpumem("pool(vmm)");
    gpumem_over_rmm(rmm::mr::cuda_memory_resource{}, "rmm-cuda");
    gpumem_over_rmm(rmm::mr::cuda_async_memory_resource{}, "rmm-cuda-async");
  } catch (const gpumem::failure &f) {
    std::fprintf(stderr, "gpumem: %s: %s\n", f.status_name(), f.message());
    return 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "exception: %s\n", e.what());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
