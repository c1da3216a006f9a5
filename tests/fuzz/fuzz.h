/* fuzz.h: what gpumem's fuzz targets share: checks that abort with a message (libFuzzer
 * reports an abort as a crash and saves the input), and the simulated device they run on.
 *
 * The targets are libFuzzer's (LLVMFuzzerTestOneInput); replay.c runs them over files
 * without libFuzzer, so that any compiler builds them and CTest replays their corpora. */
#ifndef GPUMEM_TESTS_FUZZ_H
#define GPUMEM_TESTS_FUZZ_H

#include "gpumem.h"
#include "gpumem/sim.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                                      \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: broken promise: ", __FILE__, __LINE__);                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

/* The call succeeds. */
#define FUZZ_OK(call)                                                                              \
  do {                                                                                             \
    gpumem_status fuzz_s_ = (call);                                                                \
    FUZZ_CHECK(fuzz_s_ == GPUMEM_OK, "%s returned %s: %s", #call, gpumem_status_name(fuzz_s_),     \
               gpumem_last_error_message());                                                       \
  } while (0)

/* Selects the simulated device with `config`, before anything else touches a device. */
static inline void fuzz_sim_init(const gpumem_sim_config *config) {
  FUZZ_OK(gpumem_sim_configure(config));
  FUZZ_OK(gpumem_init());
}

/* After an input: all queued work runs, no cross-stream hazard was seen, and the device
 * holds no memory, its own or managed (every resource the input built was released and gave
 * its memory back). A synchronization releases what the device's default pool of managed
 * memory, shared by every input, keeps cached (its release threshold is 0, as CUDA's): an
 * input that freed 4 GiB through it left the next one no managed memory to build
 * `prefetch(pool(managed))` with. */
static inline void fuzz_check_device_idle(void) {
  FUZZ_OK(gpumem_sim_complete_all());
  FUZZ_OK(gpumem_stream_synchronize(NULL));
  FUZZ_CHECK(gpumem_sim_hazard_count() == 0, "%llu cross-stream hazards",
             (unsigned long long)gpumem_sim_hazard_count());
  uint64_t used = 0;
  FUZZ_OK(gpumem_sim_device_used(0, &used));
  FUZZ_CHECK(used == 0, "device 0 still holds %llu bytes after every resource was released",
             (unsigned long long)used);
  FUZZ_OK(gpumem_sim_managed_used(0, &used));
  FUZZ_CHECK(used == 0,
             "device 0 still holds %llu bytes of managed memory after every resource was "
             "released",
             (unsigned long long)used);
}

#endif /* GPUMEM_TESTS_FUZZ_H */
