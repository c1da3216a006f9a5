/* biased_lock.h: the lock of the allocation hot paths: biased to one thread at a time, and
 * a lock whose waiters spin briefly and then sleep for every thread while no bias holds.
 * (Not a spinlock: waiters must not keep spinning, see below.)
 *
 * An uncontended pthread mutex costs about as much as a whole pool allocation should, and
 * even one atomic exchange costs 10 to 20 ns on some server processors, where it waits for
 * every store before it to drain. Most pools are used by one thread at a time, so the lock
 * is biased: the first thread to take it becomes its owner, and takes it afterwards with
 * plain loads and stores. When another thread wants it, that thread revokes the bias: it
 * raises a flag, makes every thread of the process run a memory barrier (membarrier(2),
 * some microseconds) and waits for the owner to be out. Every thread, the former owner too,
 * then takes the shared lock: it spins a little, then sleeps in the kernel (a futex on
 * Linux; elsewhere it yields the processor) until the holder wakes it. Waiters must not
 * keep spinning: holders may call the driver (growth, events), and on a virtual machine
 * busy waiters keep every virtual processor busy, so the host preempts holders too. On the
 * H100 host, 16 threads on one pool(vmm) did 0.1 million operations a second when waiters
 * spun and yielded, and 0.9 when they slept.
 *
 * Threads that take turns (PyTorch's autograd thread and the main one, a turn every
 * thousand operations or so) would otherwise pay the shared lock's atomic instructions on
 * every operation for good: 30 to 40 ns an event on the GPU host's replays of training
 * traces. So a thread that takes the shared lock GPUMEM__BIAS_RUN times in a row, nobody
 * waiting, has the lock biased to it again. A bias whose takes saved less than its
 * revocation's barrier cost doubles the run the next one needs (the lock's `run_needed`),
 * one that saved more halves it, so threads that alternate faster than a barrier pays for
 * stop being biased (docs/gpu-runs.md, fifteenth session, has what it saves).
 * GPUMEM_BIAS_AGAIN=0 turns that off: the first revocation is then for good.
 *
 * Why the barrier makes it safe: the owner enters by storing its flag in `inside` and then
 * loading its flag in `revoked`; the revoker stores that `revoked` flag and then loads the
 * owner's `inside` flag. Without fences both could miss the other's store. The revoker's
 * membarrier runs a full barrier on the owner's processor between the two, so either the
 * owner saw itself revoked (and backs off to the shared lock, which the revoker holds) or
 * the revoker sees the owner inside (and waits). Each thread the lock was ever biased to has
 * both flags to itself (a slot, claimed for good under the shared lock), and its `revoked`
 * flag stays set from its revocation to its next bias: a thread that read an owner word of
 * its own before a revocation and a new bias to another thread writes only its own flag,
 * finds itself revoked and backs off.
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

/* Threads the lock can be biased to over its life (a slot each); others never are. */
#define GPUMEM__BIAS_SLOT_BITS 3
#define GPUMEM__BIAS_SLOTS (1 << GPUMEM__BIAS_SLOT_BITS)
/* Shared takes in a row by one thread, nobody waiting, before it is biased again. */
#define GPUMEM__BIAS_RUN 64
/* What a take through the bias saves over the shared lock, at least (its two atomic
 * instructions cost 20 to 40 ns on the GPU host): a bias whose takes saved less than its
 * revocation's barrier cost doubles the run the next one needs. */
#define GPUMEM__BIAS_SAVES_NS 20

typedef struct gpumem__biased_lock {
  atomic_int locked; /* the shared lock: GPUMEM__UNLOCKED, _LOCKED or _LOCKED_WAITERS */
  /* Sleepers woken GPUMEM__LOCK_STARVED_WAKES times without getting the lock: while there
   * are any, an unlock that wakes one waits for someone to take the lock first. */
  atomic_int starving;
  /* The owner: its thread token shifted up past its slot's number (low bits); 0 while no
   * bias holds. */
  atomic_uintptr_t owner;
  atomic_uchar inside[GPUMEM__BIAS_SLOTS];  /* per slot: its thread is in through the bias */
  atomic_uchar revoked[GPUMEM__BIAS_SLOTS]; /* per slot: set from its revocation to its bias */
  uint64_t biased_takes; /* by the owner, through the bias that holds; read once it is out */
  /* The slot of the owner inside through its bias, plus one; 0 while the holder (if any)
   * took the shared lock. Written only by the thread inside, so that the release needs
   * neither the owner word nor the thread's token. */
  unsigned char entered_slot;
  /* Under the shared lock: */
  uintptr_t slot_tokens[GPUMEM__BIAS_SLOTS]; /* the thread of each slot; 0: free */
  uintptr_t run_token;                       /* the thread that took it last */
  uint32_t run_length;                       /* how many times in a row */
  uint32_t run_needed;                       /* before a new bias; 0: GPUMEM__BIAS_RUN */
  bool biased_before;                        /* a first taker was biased or refused one */
  bool no_new_bias;                          /* gpumem__biased_lock_no_new_bias was called */
} gpumem__biased_lock;

/* The owner word of a thread and its slot. Thread tokens are user addresses, far below
 * 2^61. */
static inline uintptr_t gpumem__bias_word(uintptr_t token, unsigned slot) {
  return token << GPUMEM__BIAS_SLOT_BITS | slot;
}

/* The thread token and the slot of an owner word. */
static inline uintptr_t gpumem__bias_token(uintptr_t word) {
  return word >> GPUMEM__BIAS_SLOT_BITS;
}

static inline unsigned gpumem__bias_slot(uintptr_t word) {
  return (unsigned)(word & (GPUMEM__BIAS_SLOTS - 1));
}

/* The calling thread's slot when the lock is biased to it; -1 otherwise. */
static inline int gpumem__biased_lock_my_slot(gpumem__biased_lock *lock) {
  uintptr_t word = atomic_load_explicit(&lock->owner, memory_order_relaxed);
  return gpumem__bias_token(word) == gpumem__thread_token() ? (int)gpumem__bias_slot(word) : -1;
}

/* Whether locks may be biased in this process (membarrier registered, no ThreadSanitizer). */
bool gpumem__biased_lock_can_bias(void);
/* Whether a revoked lock may be biased again: it can bias, and GPUMEM_BIAS_AGAIN is not 0. */
bool gpumem__biased_lock_biases_again(void);
/* From now on the lock is never biased again (a bias that holds now ends when another
 * thread revokes it, or here if it is the caller's and the caller holds the shared lock):
 * for a caller whose hot paths, biased, could not serve what other threads started. Called
 * with the lock held. */
void gpumem__biased_lock_no_new_bias(gpumem__biased_lock *lock);
/* Takes the shared lock (and biases or revokes); the slow path of gpumem__biased_lock_take.
 * True when it revoked a bias whose owner was inside, and so waited for another thread. */
bool gpumem__biased_lock_take_shared(gpumem__biased_lock *lock);
/* Wakes one thread asleep on the shared lock, which was just released; while a sleeper
 * starves, waits (briefly) for another thread to take it. */
void gpumem__biased_lock_wake(gpumem__biased_lock *lock);

static inline void gpumem__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* A spinning waiter's pause at its `spins`th look at a short hold (a few stores): the
 * processor's pause, then, past 64 looks, the processor given up to a holder that may have
 * been preempted. */
static inline void gpumem__spin_pause(unsigned spins) {
  if (spins < 64)
    gpumem__cpu_relax();
  else
    sched_yield();
}

/* Enters through the bias named by `word`, an owner word naming the calling thread read
 * from the lock; false (nothing held, nothing of another thread's touched) when that bias
 * was revoked since. Split from gpumem__biased_lock_try_as_owner for a test of a word read
 * before a revocation and a new bias. */
static inline bool gpumem__biased_lock_enter_as(gpumem__biased_lock *lock, uintptr_t word) {
  unsigned slot = gpumem__bias_slot(word);
  atomic_store_explicit(&lock->inside[slot], 1, memory_order_relaxed);
  /* No processor fence here: the revoker's membarrier is the fence (see above). */
  atomic_signal_fence(memory_order_seq_cst);
  if (__builtin_expect(!atomic_load_explicit(&lock->revoked[slot], memory_order_acquire), 1)) {
    lock->biased_takes++;
    lock->entered_slot = (unsigned char)(slot + 1);
    return true;
  }
  atomic_store_explicit(&lock->inside[slot], 0, memory_order_release);
  return false;
}

/* Takes the lock through its bias when it is biased to this thread; false otherwise
 * (nothing taken then: the caller takes it with gpumem__biased_lock_take_shared). Hot paths
 * use it to keep the call of the shared path out of line. */
static inline bool gpumem__biased_lock_try_as_owner(gpumem__biased_lock *lock) {
  uintptr_t word = atomic_load_explicit(&lock->owner, memory_order_relaxed);
  return gpumem__bias_token(word) == gpumem__thread_token() &&
         gpumem__biased_lock_enter_as(lock, word);
}

static inline void gpumem__biased_lock_take(gpumem__biased_lock *lock) {
  if (!gpumem__biased_lock_try_as_owner(lock))
    gpumem__biased_lock_take_shared(lock);
}

/* Whether the calling thread is in through its bias. */
static inline bool gpumem__biased_lock_inside_as_owner(gpumem__biased_lock *lock) {
  int slot = gpumem__biased_lock_my_slot(lock);
  return slot >= 0 && atomic_load_explicit(&lock->inside[slot], memory_order_relaxed);
}

/* Whether some thread holds the lock (for assertions: a lock that should be held and is
 * not is found; which thread holds it is not checked). */
static inline bool gpumem__biased_lock_held(gpumem__biased_lock *lock) {
  return atomic_load_explicit(&lock->locked, memory_order_relaxed) != GPUMEM__UNLOCKED ||
         gpumem__biased_lock_inside_as_owner(lock);
}

static inline void gpumem__biased_lock_release(gpumem__biased_lock *lock) {
  /* Set, the slot is the calling thread's: only the owner inside sets it, and nobody else
   * enters before its flag is down (the revoker waits for it), after the slot is cleared. */
  unsigned entered = lock->entered_slot;
  if (entered) {
    lock->entered_slot = 0;
    atomic_store_explicit(&lock->inside[entered - 1], 0, memory_order_release);
    return;
  }
  if (atomic_exchange_explicit(&lock->locked, GPUMEM__UNLOCKED, memory_order_release) ==
      GPUMEM__LOCKED_WAITERS)
    gpumem__biased_lock_wake(lock);
}

#endif /* GPUMEM_CORE_BIASED_LOCK_H */
