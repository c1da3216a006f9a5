/* cpp_containers.cu: the C++ layer (include/gpumem.hpp) with real kernels: a kernel fills a
 * device_uvector, another sums it into a device_scalar; the contents survive growth past the
 * capacity and a deep copy onto a second stream (made to wait for the first by an event);
 * over-aligned elements written by a kernel come back whole; element and set_element_async
 * round trips frame a kernel on the same stream. On the simulated device the same classes
 * are tested without kernels (tests/cpp_header.cpp); here the kernels would read or write
 * wrong data if the containers' memory, copies or stream order were wrong.
 *
 * Arguments: resource specs (each used in turn). Exit status: 0 when every check passes,
 * 77 when there is no GPU, 1 otherwise. */
#include <cuda_runtime.h>
#include <gpumem.hpp>

#include "gpu_check.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../cuda_expect.cuh"

struct alignas(512) wide {
  long long value;
  int pad[64];
};

/* Counts elements that are not i + offset. */
__global__ void count_wrong(const int *v, size_t n, int offset, unsigned long long *wrong) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (v[i] != static_cast<int>(i) + offset)
      atomicAdd(wrong, 1ull);
}

__global__ void fill_wide(wide *w, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    w[i].value = static_cast<long long>(i) * 3;
    for (int k = 0; k < 64; k++)
      w[i].pad[k] = k;
  }
}

static void run(const char *spec) {
  std::printf("resource %s\n", spec);
  gpumem::resource mr = gpumem::resource::from_spec(spec);
  cudaStream_t s1, s2;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  const size_t n = 1 << 20;
  {
    gpumem::device_uvector<int> v(n, s1, mr);
    iota<<<256, 256, 0, s1>>>(v.data(), v.size(), 0);
    CUDA_CHECK(cudaGetLastError());
    EXPECT(v.element(n - 1, s1) == static_cast<int>(n - 1));
    gpumem::device_scalar<unsigned long long> total(0ull, s1, mr);
    sum<<<256, 256, 0, s1>>>(v.data(), v.size(), total.data());
    EXPECT(total.value(s1) == static_cast<unsigned long long>(n) * (n - 1) / 2);

    /* Growth past the capacity keeps the first n elements. */
    v.resize(2 * n, s1);
    gpumem::device_scalar<unsigned long long> wrong(0ull, s1, mr);
    count_wrong<<<256, 256, 0, s1>>>(v.data(), n, 0, wrong.data());
    EXPECT(wrong.value(s1) == 0);
    iota<<<256, 256, 0, s1>>>(v.data(), v.size(), 7);

    /* A deep copy on s2, made to wait for s1's kernel by an event, checked on s2. */
    cudaEvent_t written;
    CUDA_CHECK(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(written, s1));
    CUDA_CHECK(cudaStreamWaitEvent(s2, written, 0));
    gpumem::device_uvector<int> copy(v, s2);
    wrong.set_value_to_zero_async(s2);
    count_wrong<<<256, 256, 0, s2>>>(copy.data(), copy.size(), 7, wrong.data());
    EXPECT(wrong.value(s2) == 0);
    std::vector<int> host = copy.to_host(s2);
    EXPECT(host.size() == 2 * n && host[12345] == 12345 + 7 &&
           host[2 * n - 1] == static_cast<int>(2 * n - 1 + 7));
    CUDA_CHECK(cudaEventDestroy(written));

    /* set_element_async and element around a kernel on the same stream. */
    int marker = -5;
    v.set_element_async(3, marker, s1);
    gpumem::device_scalar<unsigned long long> total2(0ull, s1, mr);
    sum<<<1, 32, 0, s1>>>(v.data(), 4, total2.data());
    EXPECT(total2.value(s1) == static_cast<unsigned long long>(7 + 8 + 9 - 5));
  }
  {
    gpumem::device_uvector<wide> w(1000, s1, mr);
    EXPECT(reinterpret_cast<uintptr_t>(w.data()) % 512 == 0);
    fill_wide<<<8, 128, 0, s1>>>(w.data(), w.size());
    std::vector<wide> host = w.to_host(s1);
    for (size_t i = 0; i < host.size(); i++)
      EXPECT(host[i].value == static_cast<long long>(i) * 3 && host[i].pad[63] == 63);
  }
  CUDA_CHECK(cudaStreamSynchronize(s1));
  CUDA_CHECK(cudaStreamSynchronize(s2));
  EXPECT(mr.live_count() == 0);
  CUDA_CHECK(cudaStreamDestroy(s1));
  CUDA_CHECK(cudaStreamDestroy(s2));
}

int main(int argc, char **argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no GPU\n");
    return SKIP_CODE;
  }
  CUDA_CHECK(cudaSetDevice(0));
  try {
    for (int i = 1; i < argc; i++)
      run(argv[i]);
    if (argc < 2)
      run("pool(vmm)");
  } catch (const gpumem::failure &f) {
    std::fprintf(stderr, "gpumem: %s: %s\n", f.status_name(), f.message());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
