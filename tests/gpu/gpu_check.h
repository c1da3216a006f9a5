/* gpu_check.h: what the GPU test programs (the .cu files of tests/gpu) share: their checks
 * of CUDA and gpumem calls, which print the call and its error and end the program with
 * status 1, and the start that skips (exit status 77, which CTest reports as skipped) without a
 * GPU. */
#ifndef GPUMEM_TESTS_GPU_CHECK_H
#define GPUMEM_TESTS_GPU_CHECK_H

#include <cuda_runtime.h>
#include <gpumem.h>

#include <stdio.h>
#include <stdlib.h>

#define SKIP_CODE 77

#define CUDA_CHECK(call)                                                                           \
  do {                                                                                             \
    cudaError_t cuda_e_ = (call);                                                                  \
    if (cuda_e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,                    \
              cudaGetErrorName(cuda_e_), cudaGetErrorString(cuda_e_));                             \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* A launch reports configuration errors only through cudaGetLastError. */
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

#define GPUMEM_CHECK(call)                                                                         \
  do {                                                                                             \
    gpumem_status gpumem_s_ = (call);                                                              \
    if (gpumem_s_ != GPUMEM_OK) {                                                                  \
      fprintf(stderr, "%s:%d: %s failed: %s\n  %s\n", __FILE__, __LINE__, #call,                   \
              gpumem_status_name(gpumem_s_), gpumem_last_error_message());                         \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* Makes device 0 current for the runtime and gpumem alike; false (after saying why) where
 * there is no GPU or no driver, and the caller exits with SKIP_CODE. The runtime and gpumem
 * share device 0's primary context: it is made current first, so gpumem's current device is
 * the one the kernels run on. Kernels need real device memory: the simulated device would
 * hand out host memory, so the backend is CUDA's. */
static inline bool gpu_test_start(void) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    printf("skipped: no GPU (cudaGetDeviceCount: %s, %d devices)\n", cudaGetErrorString(e), count);
    return false;
  }
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(0));
  GPUMEM_CHECK(gpumem_select_backend(GPUMEM_BACKEND_CUDA));
  gpumem_status status = gpumem_init();
  if (status == GPUMEM_ERR_NO_DRIVER || status == GPUMEM_ERR_NO_DEVICE) {
    printf("skipped: %s\n", gpumem_last_error_message());
    return false;
  }
  GPUMEM_CHECK(status);
  return true;
}

#endif /* GPUMEM_TESTS_GPU_CHECK_H */
