/* thread_barrier.h: what code needs that lets one thread work with plain loads and stores
 * while another reaches in now and then (the biased lock, the limit's credit): a token per
 * thread, and a memory barrier run on every thread of the process (membarrier(2)), which
 * makes the rare side's fence cover the common side's, so the common side needs none.
 *
 * Without membarrier (other systems, old kernels, seccomp) or under ThreadSanitizer, which
 * cannot see that barrier, gpumem__thread_barrier_available() is false and callers must
 * fence on both sides. */
#ifndef GPUMEM_CORE_THREAD_BARRIER_H
#define GPUMEM_CORE_THREAD_BARRIER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#if defined(__has_builtin) && (defined(__x86_64__) || defined(__aarch64__))
#if __has_builtin(__builtin_thread_pointer)
#define GPUMEM__THREAD_POINTER() ((uintptr_t)__builtin_thread_pointer())
#endif
#endif

/* A number no two live threads share: the thread pointer (one register read) where the
 * compiler offers it, else pthread_self. */
static inline uintptr_t gpumem__thread_token(void) {
#ifdef GPUMEM__THREAD_POINTER
  return GPUMEM__THREAD_POINTER();
#else
  return (uintptr_t)pthread_self();
#endif
}

/* Whether gpumem__thread_barrier can be used in this process (registered once). */
bool gpumem__thread_barrier_available(void);

/* A full memory barrier on every running thread of the process; false if none could be
 * had. Call only where gpumem__thread_barrier_available() said yes. */
bool gpumem__thread_barrier(void);

#endif /* GPUMEM_CORE_THREAD_BARRIER_H */
