/* stream_order.cu: proof on a real GPU, with real kernels, that gpumem's allocation keeps
 * the stream-ordered contract (DESIGN.md, "Stream-ordered semantics"): memory freed on one
 * stream is never handed to work on another stream that could run while the freeing stream
 * still uses it. On the simulated device the same rule is checked by bookkeeping; here the
 * kernels themselves would read wrong data if it were broken.
 *
 * Each kernel that owns a block writes a pattern into it, spins for tens of milliseconds
 * and then checks that the block still holds its pattern, counting wrong elements. A block
 * handed out too early is written by the next owner's kernel during that spin, and the
 * count is no longer zero. Kernels also record when they ran (the GPU's global timer), so
 * two kernels that touched the same bytes at the same time are caught even where the data
 * happens to survive.
 *
 * For each resource spec ("cuda", "async", and any given on the command line, such as
 * "pool(cuda)"), three cases:
 *   same_stream   X on s1, K1 writes/spins/checks X, free X on s1, Y on s1, K2 writes Y.
 *   cross_stream  as above, but Y is allocated on s2 right after X's free on s1, with no
 *                 host synchronization, and K2 on s2 writes/spins/checks Y.
 *   producer      P on s1 written there; s2 waits on an event and checks P after a spin;
 *                 P is freed on s2, and a new block on s1 is overwritten at once.
 * A control case first races two kernels on one cudaMalloc block on purpose: if that race
 * goes unseen (kernels serialized by CUDA_LAUNCH_BLOCKING, MPS limits, ...), the cases
 * could not catch a broken allocator either, and the test fails rather than pass vacuously.
 *
 * Exit status: 0 when every case passes, 77 when there is no GPU, 1 otherwise. */
#include <cuda_runtime.h>
#include <gpumem.h>

#include "gpu_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 4 MiB: big enough that every thread owns many elements, small next to any GPU. */
#define ELEMENTS ((size_t)1 << 20)
#define BYTES (ELEMENTS * sizeof(unsigned))

/* The spin of a kernel that holds its block: 40M SM clock cycles are ~20 ms at an H100's
 * 1.98 GHz boost clock and ~36 ms at 1.1 GHz, long next to the microseconds the host needs
 * to enqueue the next allocation and kernel, and well under 100 ms at any clock an H100 or
 * H200 runs at. */
#define SPIN_CYCLES 40000000LL

#define THREADS 256

/* What one kernel saw: elements that did not hold its pattern, and the global-timer span
 * (ns) from its first block's start to its last block's end. */
struct kernel_report {
  unsigned long long wrong;
  unsigned long long start_ns;
  unsigned long long end_ns;
};

/* Distinct for every (seed, index), so a block holding another kernel's pattern, or its own
 * shifted, never passes. */
__host__ __device__ static inline unsigned pattern(unsigned seed, size_t i) {
  return (seed * 0x9E3779B9u) ^ (unsigned)(i * 2654435761u) ^ (unsigned)(i >> 32);
}

__device__ static inline unsigned long long global_ns(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ static void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles)
    __nanosleep(1000); /* the spin needs no issue slots; other kernels' warps get them */
}

/* Writes `seed`'s pattern into data (unless write is 0), spins, then counts the elements
 * that no longer hold it. The reads are volatile so they come from memory after the spin,
 * never from registers the compiler kept from the writes. */
__global__ void hold_kernel(unsigned *data, size_t n, unsigned seed, int write, long long cycles,
                            kernel_report *report) {
  if (threadIdx.x == 0)
    atomicMin(&report->start_ns, global_ns());
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (write)
    for (size_t i = first; i < n; i += stride)
      data[i] = pattern(seed, i);
  spin(cycles);
  unsigned long long wrong = 0;
  const volatile unsigned *v = data;
  for (size_t i = first; i < n; i += stride)
    wrong += v[i] != pattern(seed, i);
  if (wrong)
    atomicAdd(&report->wrong, wrong);
  __syncthreads(); /* the block's end: after every thread's check */
  if (threadIdx.x == 0)
    atomicMax(&report->end_ns, global_ns());
}

struct gpu {
  int blocks;         /* per kernel: few enough that two kernels run side by side */
  kernel_report *dev; /* reports of the kernels of one case, on the device */
  cudaStream_t s1, s2;
  cudaEvent_t produced;
};

static void reset_reports(gpu *g, int count) {
  kernel_report init[4];
  for (int i = 0; i < count; i++) {
    init[i].wrong = 0;
    init[i].start_ns = ~0ull;
    init[i].end_ns = 0;
  }
  CUDA_CHECK(cudaMemcpy(g->dev, init, count * sizeof init[0], cudaMemcpyHostToDevice));
  /* The streams are non-blocking: they do not wait for the copy above by themselves. */
  CUDA_CHECK(cudaDeviceSynchronize());
}

static void read_reports(gpu *g, kernel_report *out, int count) {
  CUDA_CHECK(cudaStreamSynchronize(g->s1));
  CUDA_CHECK(cudaStreamSynchronize(g->s2));
  CUDA_CHECK(cudaMemcpy(out, g->dev, count * sizeof out[0], cudaMemcpyDeviceToHost));
}

static void launch_hold(gpu *g, cudaStream_t s, void *data, unsigned seed, int write,
                        long long cycles, int report) {
  hold_kernel<<<g->blocks, THREADS, 0, s>>>((unsigned *)data, ELEMENTS, seed, write, cycles,
                                            g->dev + report);
  LAUNCH_CHECK();
}

static int ranges_overlap(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + BYTES && y < x + BYTES;
}

/* The two kernels ran at the same time (their global-timer spans intersect). */
static int ran_together(const kernel_report *a, const kernel_report *b) {
  return a->start_ns < b->end_ns && b->start_ns < a->end_ns;
}

/* Elements of device memory `data` (read after all work is done) that do not hold seed's
 * pattern. */
static size_t wrong_on_host(const void *data, unsigned seed) {
  unsigned *host = (unsigned *)malloc(BYTES);
  if (!host) {
    fprintf(stderr, "out of host memory\n");
    exit(1);
  }
  CUDA_CHECK(cudaMemcpy(host, data, BYTES, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < ELEMENTS; i++)
    wrong += host[i] != pattern(seed, i);
  free(host);
  return wrong;
}

/* One line per case; returns 1 for a failure. */
static int report_case(const char *spec, const char *name, int failed, const char *detail) {
  printf("%-24s %-13s %s  %s\n", spec, name, failed ? "FAILED" : "ok", detail);
  fflush(stdout);
  return failed;
}

/* The race the cases guard against, made on purpose with plain cudaMalloc memory: K2 on s2
 * writes the block K1 on s1 still checks. It must be seen, or the cases prove nothing. */
static int control(gpu *g) {
  void *x = NULL;
  CUDA_CHECK(cudaMalloc(&x, BYTES));
  reset_reports(g, 2);
  launch_hold(g, g->s1, x, 1, 1, SPIN_CYCLES, 0);
  launch_hold(g, g->s2, x, 2, 1, SPIN_CYCLES / 4, 1);
  kernel_report r[2];
  read_reports(g, r, 2);
  CUDA_CHECK(cudaFree(x));
  char detail[200];
  snprintf(detail, sizeof detail,
           "deliberate race: K1 wrong=%llu K2 wrong=%llu ran_together=%s (must be seen)",
           r[0].wrong, r[1].wrong, ran_together(&r[0], &r[1]) ? "yes" : "no");
  /* Usually K1 sees K2's pattern; if K2 wrote first somewhere, K1 overwrote it there and K2
   * sees K1's. Either way the race shows in the data. */
  int seen = r[0].wrong + r[1].wrong > 0 && ran_together(&r[0], &r[1]);
  if (!seen)
    fprintf(stderr, "control: two kernels on two streams did not run at the same time on "
                    "this GPU (CUDA_LAUNCH_BLOCKING? MPS?), so no case below could catch a "
                    "race\n");
  return report_case("(cudaMalloc)", "control", !seen, detail);
}

/* (a) One stream orders everything: K2 runs after K1 whether or not Y reuses X. */
static int same_stream(gpu *g, gpumem_resource *mr, const char *spec) {
  reset_reports(g, 2);
  void *x = NULL, *y = NULL;
  GPUMEM_CHECK(gpumem_allocate(mr, BYTES, (gpumem_stream)g->s1, &x));
  launch_hold(g, g->s1, x, 11, 1, SPIN_CYCLES, 0);
  GPUMEM_CHECK(gpumem_deallocate(mr, x, BYTES, (gpumem_stream)g->s1));
  GPUMEM_CHECK(gpumem_allocate(mr, BYTES, (gpumem_stream)g->s1, &y));
  launch_hold(g, g->s1, y, 12, 1, 0, 1);
  kernel_report r[2];
  read_reports(g, r, 2);
  size_t final_wrong = wrong_on_host(y, 12);
  GPUMEM_CHECK(gpumem_deallocate(mr, y, BYTES, (gpumem_stream)g->s1));
  CUDA_CHECK(cudaStreamSynchronize(g->s1));
  int failed = r[0].wrong || r[1].wrong || final_wrong ||
               (ranges_overlap(x, y) && ran_together(&r[0], &r[1]));
  char detail[200];
  snprintf(detail, sizeof detail, "reuse(Y==X)=%s K1 wrong=%llu K2 wrong=%llu Y after=%zu",
           x == y ? "yes" : "no", r[0].wrong, r[1].wrong, final_wrong);
  return report_case(spec, "same_stream", failed, detail);
}

/* (b) X freed on s1 while K1 still checks it; Y taken on s2 at once. If the allocator gave
 * X's bytes to s2 without making s2 wait for s1, K2 overwrites them during K1's spin. */
static int cross_stream(gpu *g, gpumem_resource *mr, const char *spec) {
  reset_reports(g, 2);
  void *x = NULL, *y = NULL;
  GPUMEM_CHECK(gpumem_allocate(mr, BYTES, (gpumem_stream)g->s1, &x));
  launch_hold(g, g->s1, x, 21, 1, SPIN_CYCLES, 0);
  GPUMEM_CHECK(gpumem_deallocate(mr, x, BYTES, (gpumem_stream)g->s1));
  GPUMEM_CHECK(gpumem_allocate(mr, BYTES, (gpumem_stream)g->s2, &y));
  launch_hold(g, g->s2, y, 22, 1, SPIN_CYCLES / 4, 1);
  kernel_report r[2];
  read_reports(g, r, 2);
  size_t final_wrong = wrong_on_host(y, 22);
  GPUMEM_CHECK(gpumem_deallocate(mr, y, BYTES, (gpumem_stream)g->s2));
  CUDA_CHECK(cudaStreamSynchronize(g->s2));
  int overlap = ranges_overlap(x, y);
  int together = ran_together(&r[0], &r[1]);
  int failed = r[0].wrong || r[1].wrong || final_wrong || (overlap && together);
  /* "cuda" (cuMemFree) typically reuses X: correct, because its free waits for the work. */
  char detail[200];
  snprintf(detail, sizeof detail,
           "reuse(Y==X)=%s overlap=%s ran_together=%s K1 wrong=%llu K2 wrong=%llu Y after=%zu",
           x == y ? "yes" : "no", overlap ? "yes" : "no", together ? "yes" : "no", r[0].wrong,
           r[1].wrong, final_wrong);
  return report_case(spec, "cross_stream", failed, detail);
}

/* (c) Producer on s1, consumer on s2 through an event; the consumer frees. A block taken on
 * s1 next must wait for the consumer: written at once, it would change what the consumer
 * still checks. */
static int producer_consumer(gpu *g, gpumem_resource *mr, const char *spec) {
  reset_reports(g, 3);
  void *p = NULL, *q = NULL;
  GPUMEM_CHECK(gpumem_allocate(mr, BYTES, (gpumem_stream)g->s1, &p));
  launch_hold(g, g->s1, p, 31, 1, 0, 0); /* producer */
  CUDA_CHECK(cudaEventRecord(g->produced, g->s1));
  CUDA_CHECK(cudaStreamWaitEvent(g->s2, g->produced, 0));
  launch_hold(g, g->s2, p, 31, 0, SPIN_CYCLES, 1); /* consumer: spin, then check */
  GPUMEM_CHECK(gpumem_deallocate(mr, p, BYTES, (gpumem_stream)g->s2));
  GPUMEM_CHECK(gpumem_allocate(mr, BYTES, (gpumem_stream)g->s1, &q));
  launch_hold(g, g->s1, q, 32, 1, 0, 2); /* the next owner overwrites at once */
  kernel_report r[3];
  read_reports(g, r, 3);
  size_t final_wrong = wrong_on_host(q, 32);
  GPUMEM_CHECK(gpumem_deallocate(mr, q, BYTES, (gpumem_stream)g->s1));
  CUDA_CHECK(cudaStreamSynchronize(g->s1));
  int overlap = ranges_overlap(p, q);
  int together = ran_together(&r[1], &r[2]);
  int failed = r[0].wrong || r[1].wrong || r[2].wrong || final_wrong || (overlap && together);
  char detail[200];
  snprintf(detail, sizeof detail,
           "reuse(Q==P)=%s overlap=%s ran_together=%s consumer wrong=%llu Q wrong=%llu "
           "Q after=%zu",
           p == q ? "yes" : "no", overlap ? "yes" : "no", together ? "yes" : "no", r[1].wrong,
           r[2].wrong, final_wrong);
  return report_case(spec, "producer", failed, detail);
}

static int run_spec(gpu *g, const char *spec) {
  gpumem_resource *mr = NULL;
  GPUMEM_CHECK(gpumem_resource_from_spec(spec, &mr));
  int failures =
      same_stream(g, mr, spec) + cross_stream(g, mr, spec) + producer_consumer(g, mr, spec);
  GPUMEM_CHECK(gpumem_resource_release(mr));
  return failures;
}

int main(int argc, char **argv) {
  if (!gpu_test_start())
    return SKIP_CODE;

  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  gpu g;
  /* A quarter of the SMs per kernel: two or three kernels of a case fit side by side, so
   * nothing but stream order can keep them apart. */
  g.blocks = prop.multiProcessorCount / 4 > 0 ? prop.multiProcessorCount / 4 : 1;
  CUDA_CHECK(cudaMalloc(&g.dev, 4 * sizeof(kernel_report)));
  CUDA_CHECK(cudaStreamCreateWithFlags(&g.s1, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&g.s2, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&g.produced, cudaEventDisableTiming));
  printf("backend: %s, device 0: %s, %d SMs, %d blocks of %d threads per kernel\n",
         gpumem_backend_name(), prop.name, prop.multiProcessorCount, g.blocks, THREADS);

  int failures = control(&g);
  static const char *const defaults[] = {"cuda", "async"};
  for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
    failures += run_spec(&g, defaults[i]);
  for (int i = 1; i < argc; i++)
    failures += run_spec(&g, argv[i]);

  CUDA_CHECK(cudaEventDestroy(g.produced));
  CUDA_CHECK(cudaStreamDestroy(g.s1));
  CUDA_CHECK(cudaStreamDestroy(g.s2));
  CUDA_CHECK(cudaFree(g.dev));
  printf("stream_order: %d case(s) failed\n", failures);
  return failures ? 1 : 0;
}
