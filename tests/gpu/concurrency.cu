/* concurrency.cu: proof on a real GPU that gpumem's suballocators do not serialize streams.
 *
 * Several streams each allocate a block, run a kernel that spins for a fixed time using it,
 * and free the block on the same stream, several rounds in a row, with no host
 * synchronization. If the allocator made streams wait for each other (an event wait on
 * every reuse, or a device-wide synchronization inside allocate or free), the kernels would
 * run one after another and the whole run would take streams x rounds spins; when it keeps
 * each stream's memory to that stream, the streams overlap and it takes about rounds spins.
 * (A single pool that hands one stream's freed blocks to another without waiting would be
 * fast too, and wrong: stream_order.cu checks that.)
 *
 * For each resource spec given on the command line: the elapsed time over the serialized
 * time must be below 0.6. "cuda" (cuMemFree synchronizes the device) is shown for
 * comparison and not judged. Exit status: 0 pass, 77 no GPU, 1 fail. */
#include <cuda_runtime.h>
#include <gpumem.h>

#include "gpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STREAMS 4
#define ROUNDS 6
#define BYTES ((size_t)1 << 20)
/* Blocks of 1 MiB and of 8 MiB: past 2 MiB a free seals at once, and a pool that took
 * another stream's sealed block with a wait, before growing, chained the streams' work
 * one after another (tests/pool.c, test_streams_do_not_wait_once_warm). */
#define SIZES 2
static const size_t block_bytes[SIZES] = {BYTES, 8 * BYTES};
/* About 10 ms at an H100's boost clock, long next to the microseconds of host work per
 * launch, short enough that the whole test takes well under a second. */
#define SPIN_CYCLES 20000000LL

/* One thread writes the block's first word, spins, and writes it again: the kernel uses the
 * memory it was given for its whole run. */
__global__ void hold_block(unsigned *block, unsigned value) {
  block[0] = value;
  long long start = clock64();
  while (clock64() - start < SPIN_CYCLES) {
  }
  block[0] = value + 1;
}

/* Milliseconds for ROUNDS rounds of allocate/spin/free on every stream. */
static float timed_rounds(gpumem_resource *mr, cudaStream_t *streams, size_t bytes) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaEventRecord(start, 0));
  /* The legacy stream's event orders nothing with non-blocking streams: make each wait. */
  for (int s = 0; s < STREAMS; s++)
    CUDA_CHECK(cudaStreamWaitEvent(streams[s], start, 0));
  for (int round = 0; round < ROUNDS; round++) {
    for (int s = 0; s < STREAMS; s++) {
      void *block;
      GPUMEM_CHECK(gpumem_allocate(mr, bytes, (gpumem_stream)streams[s], &block));
      hold_block<<<1, 1, 0, streams[s]>>>((unsigned *)block, (unsigned)round);
      CUDA_CHECK(cudaGetLastError());
      GPUMEM_CHECK(gpumem_deallocate(mr, block, bytes, (gpumem_stream)streams[s]));
    }
  }
  cudaEvent_t done[STREAMS];
  for (int s = 0; s < STREAMS; s++) {
    CUDA_CHECK(cudaEventCreate(&done[s]));
    CUDA_CHECK(cudaEventRecord(done[s], streams[s]));
    CUDA_CHECK(cudaStreamWaitEvent(0, done[s], 0));
  }
  CUDA_CHECK(cudaEventRecord(stop, 0));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  for (int s = 0; s < STREAMS; s++)
    CUDA_CHECK(cudaEventDestroy(done[s]));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms;
}

/* The time of one spin, measured: the serialized figure is STREAMS * ROUNDS of these. */
static float one_spin(cudaStream_t stream) {
  unsigned *scratch;
  CUDA_CHECK(cudaMalloc(&scratch, BYTES));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  hold_block<<<1, 1, 0, stream>>>(scratch, 0); /* warm-up: module load */
  CUDA_CHECK(cudaEventRecord(start, stream));
  hold_block<<<1, 1, 0, stream>>>(scratch, 0);
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaFree(scratch));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("skipped: no GPU\n");
    return SKIP_CODE;
  }
  CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t streams[STREAMS];
  for (int s = 0; s < STREAMS; s++)
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
  float spin = one_spin(streams[0]);
  float serialized = spin * STREAMS * ROUNDS;
  printf("one spin %.1f ms; %d streams x %d rounds serialized: %.1f ms\n", spin, STREAMS, ROUNDS,
         serialized);
  int failures = 0;
  for (int i = 1; i < argc; i++) {
    for (int k = 0; k < SIZES; k++) {
      gpumem_resource *mr;
      GPUMEM_CHECK(gpumem_resource_from_spec(argv[i], &mr));
      timed_rounds(mr, streams, block_bytes[k]); /* warm-up: the first round grows the pool */
      float ms = timed_rounds(mr, streams, block_bytes[k]);
      float ratio = ms / serialized;
      bool judged = strcmp(argv[i], "cuda") != 0;
      bool pass = !judged || ratio < 0.6f;
      failures += !pass;
      printf("%-32s %2zu MiB %7.1f ms  elapsed/serialized %.2f  %s\n", argv[i],
             block_bytes[k] >> 20, ms, ratio,
             !judged ? "(shown for comparison)"
             : pass  ? "streams overlap: pass"
                     : "SERIALIZED: fail");
      CUDA_CHECK(cudaDeviceSynchronize());
      GPUMEM_CHECK(gpumem_resource_release(mr));
    }
  }
  for (int s = 0; s < STREAMS; s++)
    CUDA_CHECK(cudaStreamDestroy(streams[s]));
  return failures ? 1 : 0;
}
