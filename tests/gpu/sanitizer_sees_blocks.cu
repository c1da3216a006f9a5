/* sanitizer_sees_blocks.cu: kernels that misuse gpumem's blocks, for compute-sanitizer to
 * catch (tests/gpu/sanitizer_sees_blocks.sh runs it under the tool and checks the reports).
 *
 * Usage: test_gpu_sanitizer_sees_blocks SPEC CASE, where CASE is
 *   clean       many blocks of many sizes, each written whole by a kernel on a stream and
 *               freed on that stream while the kernel may still run: no report expected.
 *   past_end    a kernel writes the first byte after a 1000-byte block (inside the pool's
 *               chunk, inside the block's rounding): an out-of-bounds report expected.
 *   after_free  a kernel writes into a block already freed: a report expected.
 * Without the tool every case runs silently (the faults land in memory the pool owns), so
 * the program's own exit status says only whether gpumem's calls succeeded. */
#include <cuda_runtime.h>
#include <gpumem.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__global__ void fill(unsigned char *p, size_t bytes, unsigned char value) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = value;
}

__global__ void poke(unsigned char *p, size_t offset) {
  p[offset] = 1;
}

#define CHECK_GPUMEM(call)                                                                         \
  do {                                                                                             \
    gpumem_status s_ = (call);                                                                     \
    if (s_ != GPUMEM_OK) {                                                                         \
      fprintf(stderr, "%s: %s: %s\n", #call, gpumem_status_name(s_), gpumem_last_error_message()); \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static void finish(void) {
  cudaError_t e = cudaDeviceSynchronize();
  printf("kernels: %s\n", cudaGetErrorString(e));
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s SPEC clean|past_end|after_free\n", argv[0]);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    return 77;
  cudaFree(0);
  gpumem_resource *mr;
  CHECK_GPUMEM(gpumem_resource_from_spec(argv[1], &mr));
  const char *which = argv[2];
  if (strcmp(which, "clean") == 0) {
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    gpumem_stream s = (gpumem_stream)stream;
    enum { SLOTS = 64, ROUNDS = 2000 };
    void *held[SLOTS] = {0};
    size_t sizes[SLOTS] = {0};
    unsigned seed = 1;
    for (int i = 0; i < ROUNDS; i++) {
      int slot = (int)(rand_r(&seed) % SLOTS);
      if (held[slot]) { /* freed with the kernel below perhaps still running */
        CHECK_GPUMEM(gpumem_deallocate(mr, held[slot], sizes[slot], s));
        held[slot] = NULL;
      } else {
        sizes[slot] = 1 + rand_r(&seed) % (i % 7 == 0 ? 8u << 20 : 64u << 10);
        CHECK_GPUMEM(gpumem_allocate(mr, sizes[slot], s, &held[slot]));
        fill<<<64, 256, 0, stream>>>((unsigned char *)held[slot], sizes[slot], (unsigned char)i);
      }
    }
    for (int slot = 0; slot < SLOTS; slot++)
      if (held[slot])
        CHECK_GPUMEM(gpumem_deallocate(mr, held[slot], sizes[slot], s));
    finish();
    cudaStreamDestroy(stream);
  } else if (strcmp(which, "past_end") == 0) {
    void *a, *b;
    CHECK_GPUMEM(gpumem_allocate(mr, 1000, NULL, &a));
    CHECK_GPUMEM(gpumem_allocate(mr, 1000, NULL, &b));
    printf("block %p of 1000 bytes; writing at +1000\n", a);
    poke<<<1, 1>>>((unsigned char *)a, 1000);
    finish();
    return 0; /* the context is broken after a report: nothing more is asked of it */
  } else if (strcmp(which, "after_free") == 0) {
    void *a, *keep;
    CHECK_GPUMEM(gpumem_allocate(mr, 4096, NULL, &keep)); /* keeps the chunk in the pool */
    CHECK_GPUMEM(gpumem_allocate(mr, 4096, NULL, &a));
    CHECK_GPUMEM(gpumem_deallocate(mr, a, 4096, NULL));
    printf("block %p freed; writing at +16\n", a);
    poke<<<1, 1>>>((unsigned char *)a, 16);
    finish();
    return 0;
  } else {
    fprintf(stderr, "unknown case %s\n", which);
    return 2;
  }
  gpumem_resource_release(mr);
  return 0;
}
