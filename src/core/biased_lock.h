/* biased_lock.h: the lock of the allocation hot paths: biased to the first thread that
 * takes it, and for every thread once that bias is revoked, a lock whose waiters spin
 * briefly and then sleep. (Not a spinlock: waiters must not keep spinning, see below.)
 *
 * An uncontended pthread mutex costs about as much as a whole pool allocation should, and
 * even one atomic exchange costs 10 to 20 ns on some server processors, where it waits for
 * every store before it to drain. Most pools are used by one thread at a time, so the lock
 * is biased: the first thread to take it becomes its owner, and takes it afterwards with
 * plain loads and stores. The first time another thread wants it, that thread revokes the
 * bias for good: it raises a flag, makes every thread of the process run a memory barrier
 * (membarrier(2), some microseconds, once per lock) and waits for the owner to be out. From
 * then on every thread, the owner too, takes the shared lock: it spins a little, then
 * sleeps in the kernel (a futex on Linux; elsewhere it yields the processor) until the
 * holder wakes it. Waiters must not keep spinning: holders may call the driver (growth,
 * events), and on a virtual machine busy waiters keep every virtual processor busy, so the
 * host preempts holders too. On the H100 host, 16 threads on one pool(vmm) did 0.1 million
 * operations a second when waiters spun and yielded, and 0.9 when they slept.
 *
 * Why the barrier makes it safe: the owner enters by storing `owner_inside` and then loading
 * `revoked`; the revoker stores `revoked` and then loads `owner_inside`. Without fences both
 * could miss the other's store. The revoker's membarrier runs a full barrier on the owner's
 * processor between the two, so either the owner saw `revoked` (and backs off to the shared
 * lock, which the revoker holds) or the revoker sees `owner_inside` (and waits).
 *
 * Locks are never biased without membarrier (other systems, old kernels, seccomp) or under
 * ThreadSanitizer, which cannot see that barrier. A zeroed lock is unlocked and unbiased. */
#ifndef GPUMEM_CORE_BIASED_LOCK_H
#define GPUMEM_CORE_BIASED_LOCK_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/thread_barrier.h"

/* States of the shared lock. */
enum { GPUMEM__UNLOCKED = 0, GPUMEM__LOCKED = 1, GPUMEM__LOCKED_WAITERS = 2 };

typedef struct gpumem__biased_lock {
  atomic_int locked;       /* the shared lock: GPUMEM__UNLOCKED, _LOCKED or _LOCKED_WAITERS */
  atomic_int owner_inside; /* the owner holds the lock through its bias */
  atomic_int revoked;      /* the bias is gone: everyone takes the shared lock */
  atomic_uintptr_t owner;  /* the thread the lock is biased to; 0 before its first taker */
} gpumem__biased_lock;

/* Whether locks may be biased in this process (membarrier registered, no ThreadSanitizer). */
bool gpumem__biased_lock_can_bias(void);
/* Takes the shared lock (and biases or revokes); the slow path of gpumem__biased_lock_take. */
void gpumem__biased_lock_take_shared(gpumem__biased_lock *lock);
/* Wakes one thread asleep on the shared lock, which was just released. */
void gpumem__biased_lock_wake(gpumem__biased_lock *lock);

static inline void gpumem__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Takes the lock through its bias when this thread owns it and it is not revoked; false
 * otherwise (nothing taken then: the caller takes it with
 * gpumem__biased_lock_take_shared). Hot paths use it to keep the call of the shared path
 * out of line. */
static inline bool gpumem__biased_lock_try_as_owner(gpumem__biased_lock *lock) {
  if (atomic_load_explicit(&lock->owner, memory_order_relaxed) != gpumem__thread_token())
    return false;
  atomic_store_explicit(&lock->owner_inside, 1, memory_order_relaxed);
  /* No processor fence here: the revoker's membarrier is the fence (see above). */
  atomic_signal_fence(memory_order_seq_cst);
  if (__builtin_expect(!atomic_load_explicit(&lock->revoked, memory_order_acquire), 1))
    return true;
  atomic_store_explicit(&lock->owner_inside, 0, memory_order_release);
  return false;
}

static inline void gpumem__biased_lock_take(gpumem__biased_lock *lock) {
  if (!gpumem__biased_lock_try_as_owner(lock))
    gpumem__biased_lock_take_shared(lock);
}

/* Whether some thread holds the lock (for assertions: a lock that should be held and is
 * not is found; which thread holds it is not checked). */
static inline bool gpumem__biased_lock_held(gpumem__biased_lock *lock) {
  return atomic_load_explicit(&lock->locked, memory_order_relaxed) != GPUMEM__UNLOCKED ||
         (atomic_load_explicit(&lock->owner_inside, memory_order_relaxed) &&
          atomic_load_explicit(&lock->owner, memory_order_relaxed) == gpumem__thread_token());
}

static inline void gpumem__biased_lock_release(gpumem__biased_lock *lock) {
  /* Only the owner ever sets owner_inside, so the flag is this thread's when the lock is
   * biased to it. */
  if (atomic_load_explicit(&lock->owner_inside, memory_order_relaxed) &&
      atomic_load_explicit(&lock->owner, memory_order_relaxed) == gpumem__thread_token()) {
    atomic_store_explicit(&lock->owner_inside, 0, memory_order_release);
    return;
  }
  if (atomic_exchange_explicit(&lock->locked, GPUMEM__UNLOCKED, memory_order_release) ==
      GPUMEM__LOCKED_WAITERS)
    gpumem__biased_lock_wake(lock);
}

#endif /* GPUMEM_CORE_BIASED_LOCK_H */
