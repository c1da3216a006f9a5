/* debug3_kernels.cu: debug level 3 (GPUMEM_DEBUG=3, a build with GPUMEM_DEBUG_LEVEL=3) on a
 * real GPU, against real kernels: a kernel's write past the end of a block, made after a
 * spin of tens of milliseconds and not waited for, is found by the free (which waits for
 * the stream's work first); a kernel's write into a freed block is found when the block
 * leaves the quarantine; a double free is refused. Each report must name the function that
 * allocated the block.
 *
 * For each resource spec: "cuda", "async", "managed", "pool(vmm)", "arena(vmm)", or those
 * given on the command line. Expects GPUMEM_DEBUG_QUARANTINE_BLOCKS=8 (CTest sets it).
 * Exit status: 0 when every case passes, 77 when there is no GPU or level 3 is not on,
 * 1 otherwise. */
#include <cuda_runtime.h>
#include <gpumem.h>

#include "../capture_stderr.h"
#include "gpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPIN_CYCLES 40000000LL /* ~20 ms at an H100's clock */

static int failures;

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("  FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond);                                   \
      printf(__VA_ARGS__);                                                                         \
      printf("\n");                                                                                \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* Spins, then writes `count` bytes of `value` from data[first]. */
__global__ void late_write(unsigned char *data, size_t first, size_t count, unsigned char value,
                           long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles)
    __nanosleep(1000);
  for (size_t i = threadIdx.x; i < count; i += blockDim.x)
    data[first + i] = value;
}

/* Not static, and the program is linked with -rdynamic: the reports can name it. */
extern "C" __attribute__((noinline, visibility("default"))) void *
debug3_kernels_allocate(gpumem_resource *mr, size_t bytes, gpumem_stream stream) {
  void *ptr = NULL;
  GPUMEM_CHECK(gpumem_allocate(mr, bytes, stream, &ptr));
  return ptr;
}

static void run_spec(const char *spec, cudaStream_t stream) {
  gpumem_resource *mr;
  GPUMEM_CHECK(gpumem_resource_from_spec(spec, &mr));
  gpumem_stream s = (gpumem_stream)stream;
  int before = failures;

  /* A write 8 bytes past the end, 20 ms late: the free must wait for it. */
  unsigned char *p = (unsigned char *)debug3_kernels_allocate(mr, 1000, s);
  late_write<<<1, 32, 0, stream>>>(p, 1000, 8, 0x5A, SPIN_CYCLES);
  CUDA_CHECK(cudaGetLastError());
  capture_begin();
  gpumem_status status = gpumem_deallocate(mr, p, 1000, s);
  const char *report = capture_end();
  EXPECT(status == GPUMEM_ERR_MISUSE, "the free returned %s", gpumem_status_name(status));
  EXPECT(strstr(gpumem_last_error_message(),
                "8 guard bytes after its end changed (at +0 to +7 past it; 0x5a") != NULL,
         "message: %s", gpumem_last_error_message());
  EXPECT(strstr(report, "debug3_kernels_allocate") != NULL, "no allocating function named");

  /* A write into a freed block, found when 8 later frees push it out of the quarantine. */
  p = (unsigned char *)debug3_kernels_allocate(mr, 4096, s);
  GPUMEM_CHECK(gpumem_deallocate(mr, p, 4096, s));
  late_write<<<1, 32, 0, stream>>>(p, 100, 3, 0x11, 0);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(stream));
  capture_begin();
  for (int i = 0; i < 8; i++) {
    void *q = debug3_kernels_allocate(mr, 512, s);
    GPUMEM_CHECK(gpumem_deallocate(mr, q, 512, s));
  }
  report = capture_end();
  EXPECT(strstr(report, "use after free: 3 bytes of the 4096-byte block") != NULL &&
             strstr(report, "at +100 to +102 (0x11 where the poison 0xdd was written)") != NULL,
         "no use-after-free report");
  EXPECT(strstr(report, "debug3_kernels_allocate") != NULL, "no allocating function named");

  /* A double free, refused with the stacks. */
  p = (unsigned char *)debug3_kernels_allocate(mr, 256, s);
  GPUMEM_CHECK(gpumem_deallocate(mr, p, 256, s));
  capture_begin();
  status = gpumem_deallocate(mr, p, 256, s);
  capture_end();
  EXPECT(status == GPUMEM_ERR_MISUSE && strstr(gpumem_last_error_message(), "double free"),
         "the second free returned %s: %s", gpumem_status_name(status),
         gpumem_last_error_message());

  GPUMEM_CHECK(gpumem_resource_release(mr));
  printf("%-24s %s\n", spec, failures == before ? "passed" : "FAILED");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (!gpu_test_start())
    return SKIP_CODE;
  const char *asked = getenv("GPUMEM_DEBUG");
  if (!asked || strcmp(asked, "3") != 0) {
    printf("skipped: needs GPUMEM_DEBUG=3 and GPUMEM_DEBUG_QUARANTINE_BLOCKS=8 in a build with "
           "GPUMEM_DEBUG_LEVEL=3\n");
    return SKIP_CODE;
  }
  /* Asked for (this test is registered only in level-3 builds): it must be in force. */
  if (!strstr(gpumem_settings(), "GPUMEM_DEBUG=3") ||
      !strstr(gpumem_settings(), "GPUMEM_DEBUG_QUARANTINE_BLOCKS=8")) {
    fprintf(stderr, "GPUMEM_DEBUG=3 was asked for but is not in force:\n%s\n", gpumem_settings());
    return 1;
  }
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  static const char *const defaults[] = {"cuda", "async", "managed", "pool(vmm)", "arena(vmm)"};
  if (argc > 1)
    for (int i = 1; i < argc; i++)
      run_spec(argv[i], stream);
  else
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
      run_spec(defaults[i], stream);
  CUDA_CHECK(cudaStreamDestroy(stream));
  printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
