/* biased_lock.c: the slow paths of the biased lock (see biased_lock.h): the shared lock (a
 * short spin, then a futex sleep), the biases, the revocations, and whether this process
 * can bias at all. */
#include "core/biased_lock.h"
#include "core/internal.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

bool gpumem__biased_lock_can_bias(void) {
  return gpumem__thread_barrier_available();
}

static pthread_once_t bias_again_once = PTHREAD_ONCE_INIT;
static bool bias_again;

static void read_bias_again(void) {
  bias_again = gpumem__option_size(GPUMEM__OPT_BIAS_AGAIN, 1) != 0;
}

bool gpumem__biased_lock_biases_again(void) {
  pthread_once(&bias_again_once, read_bias_again);
  return bias_again && gpumem__biased_lock_can_bias();
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

/* A sleeper woken this many times without the lock starves; an unlock that wakes one then
 * waits at most this many pauses (a few hundred microseconds, longer than a wake-up takes)
 * for another thread to take the lock. */
#define GPUMEM__LOCK_STARVED_WAKES 4
#define GPUMEM__LOCK_LET_IN_PAUSES 8192

void gpumem__biased_lock_wake(gpumem__biased_lock *lock) {
#if defined(__linux__) && defined(SYS_futex)
  syscall(SYS_futex, &lock->locked, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#endif
  /* Spinners take a free lock before the sleepers (take_shared), so a thread that takes it
   * again the moment it lets go, round after round, could keep them asleep for good (a
   * loop of validations against four threads did, on the GPU host). */
  if (atomic_load_explicit(&lock->starving, memory_order_relaxed) > 0)
    for (unsigned i = 0;
         i < GPUMEM__LOCK_LET_IN_PAUSES &&
         atomic_load_explicit(&lock->locked, memory_order_relaxed) == GPUMEM__UNLOCKED;
         i++)
      gpumem__cpu_relax();
}

/* A thousand pauses for a holder that is about to leave, then sleep. A sleeper marks the
 * lock GPUMEM__LOCKED_WAITERS, so that the unlock wakes one; a woken thread takes the lock
 * in that state too, since others may still sleep (one wake too many costs a system call,
 * one too few a thread that never wakes). Spinners take a free lock even while others
 * sleep: queueing every newcomer behind the sleepers made each handover wait for a wake-up,
 * and four threads on one pool ran a third slower. A sleeper woken again and again without
 * the lock counts itself starving until it has it, so that unlocks let someone in first. */
static void take_shared(gpumem__biased_lock *lock) {
  for (unsigned spins = 0; spins < 1024; spins++) {
    int state = atomic_load_explicit(&lock->locked, memory_order_relaxed);
    if (state == GPUMEM__UNLOCKED &&
        atomic_compare_exchange_weak_explicit(&lock->locked, &state, GPUMEM__LOCKED,
                                              memory_order_acquire, memory_order_relaxed))
      return;
    gpumem__cpu_relax();
  }
  unsigned wakes = 0;
  while (atomic_exchange_explicit(&lock->locked, GPUMEM__LOCKED_WAITERS, memory_order_acquire) !=
         GPUMEM__UNLOCKED) {
    sleep_on(lock);
    if (++wakes == GPUMEM__LOCK_STARVED_WAKES)
      atomic_fetch_add_explicit(&lock->starving, 1, memory_order_relaxed);
  }
  if (wakes >= GPUMEM__LOCK_STARVED_WAKES)
    atomic_fetch_sub_explicit(&lock->starving, 1, memory_order_relaxed);
}

/* Biases the lock to the calling thread, which holds the shared lock while no bias holds,
 * if it has or can claim a slot. */
static void bias_to(gpumem__biased_lock *lock, uintptr_t self) {
  unsigned slot = GPUMEM__BIAS_SLOTS;
  for (unsigned i = 0; i < GPUMEM__BIAS_SLOTS && slot == GPUMEM__BIAS_SLOTS; i++)
    if (lock->slot_tokens[i] == self)
      slot = i;
  for (unsigned i = 0; i < GPUMEM__BIAS_SLOTS && slot == GPUMEM__BIAS_SLOTS; i++)
    if (lock->slot_tokens[i] == 0)
      lock->slot_tokens[slot = i] = self;
  if (slot == GPUMEM__BIAS_SLOTS)
    return; /* every slot is another thread's: this one stays on the shared lock */
  lock->biased_takes = 0;
  atomic_store_explicit(&lock->revoked[slot], 0, memory_order_relaxed);
  atomic_store_explicit(&lock->owner, gpumem__bias_word(self, slot), memory_order_release);
}

/* The run of shared takes the next bias needs. */
static uint32_t run_needed(const gpumem__biased_lock *lock) {
  return lock->run_needed ? lock->run_needed : GPUMEM__BIAS_RUN;
}

/* Takes the bias away from `word`'s thread, with the shared lock held: see biased_lock.h.
 * True when the owner was inside, and this thread waited for it. */
static bool revoke_bias(gpumem__biased_lock *lock, uintptr_t word) {
  unsigned slot = gpumem__bias_slot(word);
  atomic_store_explicit(&lock->revoked[slot], 1, memory_order_relaxed);
  /* If no barrier can be had at all there is no safe way on: the process stops rather than
   * corrupt a pool. */
  uint64_t start = gpumem__now_ns();
  if (!gpumem__thread_barrier())
    __builtin_trap();
  uint64_t barrier_ns = gpumem__now_ns() - start;
  bool waited = atomic_load_explicit(&lock->inside[slot], memory_order_acquire);
  for (unsigned spins = 0; atomic_load_explicit(&lock->inside[slot], memory_order_acquire);
       spins++) {
    if (spins < 128)
      gpumem__cpu_relax();
    else
      sched_yield();
  }
  /* The former owner, no longer recognised, now leaves its flag alone as every other thread
   * does. Had it kept storing its flag on each call before seeing the revocation, it would
   * write a line that all of them read on each call: on the GPU host, 8 threads on their own
   * streams through one pool's fronts did 55 million operations a second where the bias
   * owner was one of them, 150 to 200 without. */
  atomic_store_explicit(&lock->owner, 0, memory_order_relaxed);
  /* A bias that did not pay for its revocation's barrier (waiting for the owner to leave
   * costs no more than the shared lock would have): the next one waits for a run twice as
   * long; one that paid halves the run, down to GPUMEM__BIAS_RUN, so that threads whose
   * turns are now long, now short settle where most biases pay. The owner is out: its count
   * is final. */
  uint32_t needed = run_needed(lock);
  if (lock->biased_takes * GPUMEM__BIAS_SAVES_NS >= barrier_ns)
    lock->run_needed = needed / 2 > GPUMEM__BIAS_RUN ? needed / 2 : GPUMEM__BIAS_RUN;
  else if (needed < UINT32_MAX / 2)
    lock->run_needed = needed * 2;
  lock->run_token = 0;
  return waited;
}

void gpumem__biased_lock_no_new_bias(gpumem__biased_lock *lock) {
  lock->no_new_bias = true;
  /* A bias this very take earned, which the caller holds the shared lock under: only the
   * caller could enter through it, so it ends without a barrier. */
  int slot = gpumem__biased_lock_my_slot(lock);
  if (slot >= 0 && !atomic_load_explicit(&lock->inside[slot], memory_order_relaxed)) {
    atomic_store_explicit(&lock->revoked[slot], 1, memory_order_relaxed);
    atomic_store_explicit(&lock->owner, 0, memory_order_relaxed);
  }
}

bool gpumem__biased_lock_take_shared(gpumem__biased_lock *lock) {
  take_shared(lock);
  uintptr_t self = gpumem__thread_token();
  uintptr_t word = atomic_load_explicit(&lock->owner, memory_order_relaxed);
  if (word != 0) /* the owner takes the shared lock only once revoked, or holding no bias */
    return gpumem__bias_token(word) != self && revoke_bias(lock, word);
  if (!lock->biased_before) {
    /* The first taker: nobody else is inside (they would hold the shared lock), and from
     * now on this thread enters without it. */
    lock->biased_before = true;
    if (gpumem__biased_lock_can_bias())
      bias_to(lock, self);
    return false;
  }
  /* No bias holds: a run of this thread's takes with nobody waiting earns it one. */
  if (lock->run_token != self) {
    lock->run_token = self;
    lock->run_length = 0;
  }
  if (++lock->run_length >= run_needed(lock) && !lock->no_new_bias &&
      atomic_load_explicit(&lock->locked, memory_order_relaxed) == GPUMEM__LOCKED &&
      gpumem__biased_lock_biases_again())
    bias_to(lock, self);
  return false;
}
