/* biased_lock.c: the slow paths of the biased lock (see biased_lock.h): the shared lock (a
 * short spin, then a futex sleep), the first bias, the revocation, and whether this
 * process can bias at all. */
#include "core/biased_lock.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

bool gpumem__biased_lock_can_bias(void) {
  return gpumem__thread_barrier_available();
}

/* Sleeps while the shared lock reads GPUMEM__LOCKED_WAITERS (returns at once if it has
 * changed already, or spuriously); elsewhere than Linux, gives the processor up once. */
static void sleep_on(gpumem__biased_lock *lock) {
#if defined(__linux__) && defined(SYS_futex)
  syscall(SYS_futex, &lock->locked, FUTEX_WAIT_PRIVATE, GPUMEM__LOCKED_WAITERS, NULL, NULL, 0);
#else
  sched_yield();
#endif
}

void gpumem__biased_lock_wake(gpumem__biased_lock *lock) {
#if defined(__linux__) && defined(SYS_futex)
  syscall(SYS_futex, &lock->locked, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#else
  (void)lock;
#endif
}

/* A thousand pauses for a holder that is about to leave, then sleep. A sleeper marks the
 * lock GPUMEM__LOCKED_WAITERS, so that the unlock wakes one; a woken thread takes the lock
 * in that state too, since others may still sleep (one wake too many costs a system call,
 * one too few a thread that never wakes). Spinners take a free lock even while others
 * sleep: queueing every newcomer behind the sleepers made each handover wait for a wake-up,
 * and four threads on one pool ran a third slower. */
static void take_shared(gpumem__biased_lock *lock) {
  for (unsigned spins = 0; spins < 1024; spins++) {
    int state = atomic_load_explicit(&lock->locked, memory_order_relaxed);
    if (state == GPUMEM__UNLOCKED &&
        atomic_compare_exchange_weak_explicit(&lock->locked, &state, GPUMEM__LOCKED,
                                              memory_order_acquire, memory_order_relaxed))
      return;
    gpumem__cpu_relax();
  }
  while (atomic_exchange_explicit(&lock->locked, GPUMEM__LOCKED_WAITERS, memory_order_acquire) !=
         GPUMEM__UNLOCKED)
    sleep_on(lock);
}

void gpumem__biased_lock_take_shared(gpumem__biased_lock *lock) {
  take_shared(lock);
  if (atomic_load_explicit(&lock->revoked, memory_order_relaxed))
    return;
  uintptr_t self = gpumem__thread_token();
  uintptr_t owner = atomic_load_explicit(&lock->owner, memory_order_relaxed);
  if (owner == 0) {
    /* The first taker: nobody else is inside (they would hold the shared lock), and from
     * now on this thread enters without it. */
    if (gpumem__biased_lock_can_bias())
      atomic_store_explicit(&lock->owner, self, memory_order_relaxed);
    else
      atomic_store_explicit(&lock->revoked, 1, memory_order_relaxed);
    return;
  }
  if (owner == self)
    return; /* not reached: the owner takes the shared lock only once revoked */
  atomic_store_explicit(&lock->revoked, 1, memory_order_relaxed);
  /* If no barrier can be had at all there is no safe way on: the process stops rather than
   * corrupt a pool. */
  if (!gpumem__thread_barrier())
    __builtin_trap();
  for (unsigned spins = 0; atomic_load_explicit(&lock->owner_inside, memory_order_acquire);
       spins++) {
    if (spins < 128)
      gpumem__cpu_relax();
    else
      sched_yield();
  }
  /* The bias is gone for good: the former owner, no longer recognised, now leaves the line
   * alone as every other thread does. Had it kept storing owner_inside on each call before
   * seeing the revocation, it would write the line that all of them read on each call: on
   * the GPU host, 8 threads on their own streams through one pool's fronts did 55 million
   * operations a second where the bias owner was one of them, 150 to 200 without. */
  atomic_store_explicit(&lock->owner, 0, memory_order_relaxed);
}
