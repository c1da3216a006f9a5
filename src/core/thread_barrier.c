/* thread_barrier.c: the process-wide memory barrier of thread_barrier.h, on membarrier(2). */
#include "core/thread_barrier.h"

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__SANITIZE_THREAD__)
#define GPUMEM__UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GPUMEM__UNDER_TSAN 1
#endif
#endif

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static bool available;

#if defined(__linux__) && defined(__NR_membarrier) && !defined(GPUMEM__UNDER_TSAN)
static long membarrier(int command) {
  return syscall(__NR_membarrier, command, 0, 0);
}

/* The expedited private barrier, registered once per process. */
static void detect(void) {
  long commands = membarrier(MEMBARRIER_CMD_QUERY);
  available = commands > 0 && (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
              membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

bool gpumem__thread_barrier(void) {
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
    return true;
  /* Should a process ever lose its registration (a kernel that does not carry it across
   * fork), register again; else the global barrier, slow but needing none. */
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
      membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
    return true;
  return membarrier(MEMBARRIER_CMD_GLOBAL) == 0;
}
#else
static void detect(void) {
  available = false;
}

bool gpumem__thread_barrier(void) {
  return false;
}
#endif

bool gpumem__thread_barrier_available(void) {
  pthread_once(&detect_once, detect);
  return available;
}
