/* cpp_header.cu: the C++ layer's test (cpp_header.cpp) compiled by nvcc as CUDA host code,
 * with the CUDA runtime's header, so that gpumem.hpp is known to compile where CUDA C++
 * programs include it and cudaStream_t passes for a stream. No kernel runs: it runs on the
 * simulated device like the C++ build. */
#include <cuda_runtime.h>

#define GPUMEM_TEST_CUDA_RUNTIME 1
#include "cpp_header.cpp"
