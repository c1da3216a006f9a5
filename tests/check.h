/* check.h: the assertions of gpumem's tests. Each prints where it failed and both sides,
 * then ends the test program with status 1 (CTest runs each program as its own process).
 * A test that cannot run where it is (no GPU) exits with CHECK_SKIP_CODE, which CTest
 * reports as skipped. */
#ifndef GPUMEM_TESTS_CHECK_H
#define GPUMEM_TESTS_CHECK_H

#include "gpumem.h"
#include "gpumem/sim.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_SKIP_CODE 77

#define CHECK_FAIL_(...)                                                                           \
  do {                                                                                             \
    fprintf(stderr, "%s:%d: check failed: ", __FILE__, __LINE__);                                  \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n  last gpumem error: %s\n", gpumem_last_error_message());                   \
    exit(1);                                                                                       \
  } while (0)

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      CHECK_FAIL_("%s", #cond);                                                                    \
  } while (0)

/* Compares two integers of any integer type as 64-bit values. */
#define CHECK_EQ(a, b)                                                                             \
  do {                                                                                             \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                                \
    if (check_a_ != check_b_)                                                                      \
      CHECK_FAIL_("%s == %s (%lld vs %lld)", #a, #b, check_a_, check_b_);                          \
  } while (0)

#define CHECK_U64_EQ(a, b)                                                                         \
  do {                                                                                             \
    uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);                                   \
    if (check_a_ != check_b_)                                                                      \
      CHECK_FAIL_("%s == %s (%" PRIu64 " vs %" PRIu64 ")", #a, #b, check_a_, check_b_);            \
  } while (0)

#define CHECK_PTR_EQ(a, b)                                                                         \
  do {                                                                                             \
    const void *check_a_ = (const void *)(a), *check_b_ = (const void *)(b);                       \
    if (check_a_ != check_b_)                                                                      \
      CHECK_FAIL_("%s == %s (%p vs %p)", #a, #b, check_a_, check_b_);                              \
  } while (0)

/* The call returns `expected` (a gpumem_status). */
#define CHECK_STATUS(call, expected)                                                               \
  do {                                                                                             \
    gpumem_status check_s_ = (call), check_e_ = (expected);                                        \
    if (check_s_ != check_e_)                                                                      \
      CHECK_FAIL_("%s returned %s, expected %s", #call, gpumem_status_name(check_s_),              \
                  gpumem_status_name(check_e_));                                                   \
  } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, GPUMEM_OK)

/* The string contains `needle`. */
#define CHECK_CONTAINS(haystack, needle)                                                           \
  do {                                                                                             \
    const char *check_h_ = (haystack), *check_n_ = (needle);                                       \
    if (check_h_ == NULL || strstr(check_h_, check_n_) == NULL)                                    \
      CHECK_FAIL_("%s contains \"%s\" (it is \"%s\")", #haystack, check_n_,                        \
                  check_h_ ? check_h_ : "(null)");                                                 \
  } while (0)

/* The call fails with `expected` and the thread's message contains `needle`. */
#define CHECK_FAILS_WITH(call, expected, needle)                                                   \
  do {                                                                                             \
    CHECK_STATUS(call, expected);                                                                  \
    CHECK_CONTAINS(gpumem_last_error_message(), needle);                                           \
  } while (0)

/* Initializes the backend chosen by GPUMEM_DEVICE; where it is cuda and no GPU can be used,
 * ends the program as skipped. Prints which backend runs the test. */
static inline void check_init_backend(void) {
  /* Unbuffered, so that a crash still shows how far the test got. */
  setvbuf(stdout, NULL, _IONBF, 0);
  gpumem_status status = gpumem_init();
  if (status == GPUMEM_ERR_NO_DRIVER || status == GPUMEM_ERR_NO_DEVICE) {
    printf("skipped: %s\n", gpumem_last_error_message());
    exit(CHECK_SKIP_CODE);
  }
  CHECK_OK(status);
  printf("backend: %s\n", gpumem_backend_name());
}

/* A debug level asked for in GPUMEM_DEBUG that the build has is in force (so that a variant
 * run at level 2 or 3 cannot pass as a plain run if the variable stops being read). */
static inline void check_debug_level_in_force(void) {
#ifdef GPUMEM__DEBUG_LEVEL
  const char *asked = getenv("GPUMEM_DEBUG");
  if (asked && asked[0] >= '1' && asked[0] <= '3' && !asked[1] &&
      asked[0] - '0' <= GPUMEM__DEBUG_LEVEL) {
    char expected[32];
    snprintf(expected, sizeof expected, "GPUMEM_DEBUG=%s", asked);
    CHECK_CONTAINS(gpumem_settings(), expected);
  }
#endif
}

/* True when the tests run on the simulated device. */
static inline bool check_on_sim(void) {
  return strcmp(gpumem_backend_name(), "sim") == 0;
}

/* No cross-stream hazard so far: no memory handed to a stream while another stream's work
 * on it was pending and unwaited. Only the simulated device sees one; on a GPU
 * gpumem_sim_hazard_count() is always 0, so a check there would pass whatever happened.
 * There the test says instead that it did not check, and `on_gpu` what stands in for it. */
#define CHECK_NO_HAZARD(on_gpu)                                                                    \
  do {                                                                                             \
    if (check_on_sim())                                                                            \
      CHECK_U64_EQ(gpumem_sim_hazard_count(), 0);                                                  \
    else                                                                                           \
      printf("  cross-stream hazards not checked on a GPU (a simulated-device check): %s\n",       \
             on_gpu);                                                                              \
  } while (0)

/* A fact the resource must answer (gpumem_resource_query), failing the test otherwise. */
static inline uint64_t check_query(gpumem_resource *mr, gpumem_query what) {
  uint64_t value = 0;
  CHECK_OK(gpumem_resource_query(mr, what, &value));
  return value;
}

/* The resource a spec builds, failing the test if it does not build. */
static inline gpumem_resource *check_build(const char *spec) {
  gpumem_resource *mr = NULL;
  gpumem_status status = gpumem_resource_from_spec(spec, &mr);
  if (status != GPUMEM_OK)
    CHECK_FAIL_("building \"%s\" returned %s", spec, gpumem_status_name(status));
  CHECK(mr != NULL);
  return mr;
}

/* The spec's resource describes as a spec that builds a resource describing the same way. */
static inline void check_describe_round_trip(const char *spec) {
  char first[1024], second[1024];
  gpumem_resource *mr = check_build(spec);
  CHECK_OK(gpumem_resource_describe(mr, first, sizeof first));
  CHECK_OK(gpumem_resource_release(mr));
  mr = check_build(first);
  CHECK_OK(gpumem_resource_describe(mr, second, sizeof second));
  CHECK_OK(gpumem_resource_release(mr));
  if (strcmp(first, second) != 0)
    CHECK_FAIL_("\"%s\" describes as \"%s\", which builds \"%s\"", spec, first, second);
}

#endif /* GPUMEM_TESTS_CHECK_H */
