/* cuda_expect.cuh: what the CUDA C++ test programs (the Thrust, container and RMM tests)
 * share: a check that ends the program with status 1, naming the condition, and the kernels
 * that fill a vector of ints and sum one. */
#ifndef GPUMEM_TESTS_CUDA_EXPECT_CUH
#define GPUMEM_TESTS_CUDA_EXPECT_CUH

#include <cstddef>
#include <cstdio>
#include <cstdlib>

#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

/* v[i] = i + offset. */
__global__ void iota(int *v, size_t n, int offset) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    v[i] = static_cast<int>(i) + offset;
}

/* *total += the sum of v (zero *total first). */
__global__ void sum(const int *v, size_t n, unsigned long long *total) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(total, static_cast<unsigned long long>(v[i]));
}

#endif /* GPUMEM_TESTS_CUDA_EXPECT_CUH */
