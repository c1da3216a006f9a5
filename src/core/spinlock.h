/* spinlock.h: the lock of the allocation hot paths.
 *
 * An uncontended pthread mutex lock and unlock cost about as much as a whole pool
 * allocation should; a test-and-test-and-set spinlock costs one atomic exchange and one
 * store. Holders may call the driver (growth, events), so a waiter that spins for long
 * yields the processor instead of burning it. */
#ifndef GPUMEM_SPINLOCK_H
#define GPUMEM_SPINLOCK_H

#include <sched.h>
#include <stdatomic.h>

typedef struct gpumem__spinlock {
  atomic_int locked;
} gpumem__spinlock;

static inline void gpumem__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static inline void gpumem__spin_lock_slow(gpumem__spinlock *lock) {
  for (unsigned spins = 0;; spins++) {
    if (!atomic_load_explicit(&lock->locked, memory_order_relaxed) &&
        !atomic_exchange_explicit(&lock->locked, 1, memory_order_acquire))
      return;
    if (spins < 128)
      gpumem__cpu_relax();
    else
      sched_yield();
  }
}

static inline void gpumem__spin_lock(gpumem__spinlock *lock) {
  if (__builtin_expect(!atomic_exchange_explicit(&lock->locked, 1, memory_order_acquire), 1))
    return;
  gpumem__spin_lock_slow(lock);
}

static inline void gpumem__spin_unlock(gpumem__spinlock *lock) {
  atomic_store_explicit(&lock->locked, 0, memory_order_release);
}

#endif /* GPUMEM_SPINLOCK_H */
