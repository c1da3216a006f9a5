/* debug.c: the debug levels (see internal.h): the level in force, the report of a failed
 * assertion, and the validation of a chain of resources.
 *
 * The validator is built at every level, so that tests can call it (and prove it catches a
 * corrupted structure) in any build; only the call after every operation depends on the
 * level compiled in. */
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>

#if GPUMEM__DEBUG_LEVEL > 0
atomic_int gpumem__debug_level_value = -1;

int gpumem__debug_level_read(void) {
  const char *text = gpumem__option_string(GPUMEM__OPT_DEBUG);
  int level = 1;
  if (text) {
    char *end;
    long asked = strtol(text, &end, 10);
    level = (*end == '\0' && asked >= 0) ? (int)(asked < 3 ? asked : 3) : 1;
  }
  if (level > GPUMEM__DEBUG_LEVEL)
    level = GPUMEM__DEBUG_LEVEL;
  atomic_store_explicit(&gpumem__debug_level_value, level, memory_order_relaxed);
  return level;
}
#endif

void gpumem__assert_fail(const gpumem_resource *mr, const char *file, int line,
                         const char *condition, const char *message) {
  char spec[512] = "(no resource)";
  if (mr)
    gpumem__describe(mr, spec, sizeof spec);
  fprintf(stderr,
          "gpumem: internal assertion failed at %s:%d in %s: %s (%s). This is a bug in "
          "gpumem; please report it.\n",
          file, line, spec, message, condition);
  fflush(stderr);
  abort();
}

gpumem_status gpumem__validate_one(const gpumem_resource *mr) {
  if (mr->ops->version < 4 || !mr->ops->validate)
    return GPUMEM_OK;
  return gpumem__fail_through(mr, mr->ops->validate(mr));
}

gpumem_status gpumem__validate(const gpumem_resource *mr) {
  gpumem_status status = GPUMEM_OK;
  for (; mr && status == GPUMEM_OK; mr = mr->upstream)
    status = gpumem__validate_one(mr);
  return status;
}

/* GPUMEM_DEBUG_EVERY: validate after every N-th call of each thread (1: every call), for
 * long tests where a walk of every block after every call would cost too much. */
static uint64_t validate_every(void) {
  static atomic_uint_fast64_t every; /* 0 until read */
  uint64_t n = atomic_load_explicit(&every, memory_order_relaxed);
  if (n == 0) {
    n = gpumem__option_size(GPUMEM__OPT_DEBUG_EVERY, 1);
    n = n ? n : 1;
    atomic_store_explicit(&every, n, memory_order_relaxed);
  }
  return n;
}

void gpumem__debug_after(const gpumem_resource *mr, const char *what) {
  static _Thread_local uint64_t calls;
  if (!mr || gpumem__debug_level() < 2 || ++calls % validate_every() != 0)
    return;
  /* A failing call's message is the program's to read: the validation must not replace
   * it, and passes without setting one. */
  if (gpumem__validate(mr) == GPUMEM_OK)
    return;
  fprintf(stderr,
          "gpumem: the structure is corrupt after %s (GPUMEM_DEBUG=2): %s. This is a bug in "
          "gpumem; please report it.\n",
          what, gpumem_last_error_message());
  fflush(stderr);
  abort();
}
