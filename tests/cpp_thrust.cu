/* cpp_thrust.cu: Thrust over gpumem (include/gpumem_thrust.hpp): a device_vector whose
 * memory comes from a gpumem resource, and algorithms whose scratch space does (reduce,
 * sort), checked by the resource's live figures while they run and after. Built with nvcc
 * wherever it is found, which proves the header compiles against the toolkit's Thrust; its
 * kernels need a GPU to run, so without one it exits 77 (skipped). */
#include <cuda_runtime.h>
#include <gpumem_thrust.hpp>

#include <thrust/device_vector.h>
#include <thrust/reduce.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "cuda_expect.cuh"

static_assert(std::is_same<gpumem::thrust_allocator<int>::rebind<char>::other,
                           gpumem::thrust_allocator<char>>::value,
              "");

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no GPU\n");
    return 77;
  }
  try {
    gpumem::resource mr =
        gpumem::resource::statistics(gpumem::resource::from_spec("pool(cuda, initial=64MiB)"));
    gpumem::stream stream;
    const int n = 1 << 20;
    {
      gpumem::thrust_allocator<int> alloc(stream, mr);
      thrust::device_vector<int, gpumem::thrust_allocator<int>> v(n, 0, alloc);
      EXPECT(mr.live_bytes() == n * sizeof(int));
      thrust::sequence(gpumem::exec_policy(stream, mr), v.begin(), v.end(), 0);
      long long sum = thrust::reduce(gpumem::exec_policy(stream, mr), v.begin(), v.end(), 0ll);
      EXPECT(sum == static_cast<long long>(n) * (n - 1) / 2);
      thrust::sort(gpumem::exec_policy(stream, mr), v.begin(), v.end(),
                   [] __device__(int a, int b) { return a > b; });
      EXPECT(v[0] == n - 1 && v[n - 1] == 0);
      gpumem_statistics stats{};
      stats.size = sizeof stats;
      gpumem::check(gpumem_statistics_get(mr.get(), &stats));
      EXPECT(stats.count.total > 1);              /* scratch space came from gpumem */
      EXPECT(mr.live_bytes() == n * sizeof(int)); /* and went back */
      thrust::reduce(gpumem::exec_policy_nosync(stream), v.begin(), v.end(), 0ll);
    }
    stream.synchronize();
    EXPECT(mr.live_count() == 0);
  } catch (const gpumem::failure &f) {
    std::fprintf(stderr, "gpumem: %s: %s\n", f.status_name(), f.message());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
