/* biased_lock.c: the biased lock of the hot paths (src/core/biased_lock.h).
 *
 * - Its first taker becomes its owner where the process can bias, and a second thread
 *   revokes the bias for good; where it cannot (ThreadSanitizer, no membarrier), nothing is
 *   ever biased.
 * - Mutual exclusion holds across the revocation: an owner hammering the lock through its
 *   bias while other threads arrive and revoke it, round after round, loses no update of a
 *   counter that only the lock protects.
 * - In a child of fork, a lock the parent biased is revoked by the child's threads.
 * - A waiter on the shared lock goes to sleep rather than spin on (the lock says so), and
 *   the unlock wakes it; many more threads than processors, each taking the lock again and
 *   again, all finish and lose no update.
 * Needs no device; it runs under the simulated device's label. */
#include "check.h"
#include "core/biased_lock.h"

#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- bias and revocation ---- */

static gpumem__biased_lock shared_lock;

static void *lock_once(void *arg) {
  (void)arg;
  gpumem__biased_lock_take(&shared_lock);
  gpumem__biased_lock_release(&shared_lock);
  return NULL;
}

static void test_bias_and_revocation(void) {
  gpumem__biased_lock_take(&shared_lock);
  gpumem__biased_lock_release(&shared_lock);
  if (gpumem__biased_lock_can_bias()) {
    CHECK(atomic_load(&shared_lock.owner) == gpumem__thread_token());
    CHECK_EQ(atomic_load(&shared_lock.revoked), 0);
    /* Taken through the bias: the shared lock stays free. */
    gpumem__biased_lock_take(&shared_lock);
    CHECK_EQ(atomic_load(&shared_lock.owner_inside), 1);
    CHECK_EQ(atomic_load(&shared_lock.locked), 0);
    gpumem__biased_lock_release(&shared_lock);
    CHECK_EQ(atomic_load(&shared_lock.owner_inside), 0);
  }
  pthread_t other;
  CHECK_EQ(pthread_create(&other, NULL, lock_once, NULL), 0);
  CHECK_EQ(pthread_join(other, NULL), 0);
  CHECK_EQ(atomic_load(&shared_lock.revoked), 1);
  CHECK(atomic_load(&shared_lock.owner) == 0); /* so the former owner never writes its flag */
  /* The former owner now takes the shared lock like everyone. */
  gpumem__biased_lock_take(&shared_lock);
  CHECK_EQ(atomic_load(&shared_lock.locked), 1);
  CHECK_EQ(atomic_load(&shared_lock.owner_inside), 0);
  gpumem__biased_lock_release(&shared_lock);
  CHECK_EQ(atomic_load(&shared_lock.locked), 0);
  printf("bias %s; revoked by a second thread\n",
         gpumem__biased_lock_can_bias() ? "taken by the first taker" : "not supported here");
}

/* ---- mutual exclusion across the revocation ---- */

/* The owner's critical sections outlast the revoker's membarrier (microseconds), so that
 * revocations find the owner inside and must wait for it. */
enum { rounds = 100, contenders = 3, increments = 50, owner_spin = 20000, contender_spin = 100 };

typedef struct race {
  gpumem__biased_lock lock;
  /* Plain memory: only the lock orders the read-modify-writes. */
  unsigned long counter;
  int increments_each; /* by each contender */
  atomic_int go;
} race;

/* One read-modify-write of the counter, spread out so that an overlap would lose updates. */
static void increment(race *r, int spin_count) {
  gpumem__biased_lock_take(&r->lock);
  unsigned long value = r->counter;
  for (volatile int spin = 0; spin < spin_count; spin++)
    ;
  r->counter = value + 1;
  gpumem__biased_lock_release(&r->lock);
}

static void *contend(void *arg) {
  race *r = arg;
  while (!atomic_load(&r->go))
    ;
  for (int i = 0; i < r->increments_each; i++)
    increment(r, contender_spin);
  return NULL;
}

static void test_exclusion_across_revocation(void) {
  static race r;
  for (int round = 0; round < rounds; round++) {
    memset(&r, 0, sizeof r);
    r.increments_each = increments;
    increment(&r, 0); /* biases the lock to this thread where it can */
    pthread_t threads[contenders];
    for (int i = 0; i < contenders; i++)
      CHECK_EQ(pthread_create(&threads[i], NULL, contend, &r), 0);
    atomic_store(&r.go, 1);
    /* Through the bias until a contender revokes it, then once more the shared way. */
    uint64_t own = 0;
    for (bool revoked = false; !revoked; own++) {
      revoked = atomic_load(&r.lock.revoked);
      increment(&r, owner_spin);
    }
    for (int i = 0; i < contenders; i++)
      CHECK_EQ(pthread_join(threads[i], NULL), 0);
    CHECK_U64_EQ(r.counter, 1 + own + (uint64_t)contenders * increments);
    CHECK_EQ(atomic_load(&r.lock.revoked), 1);
    CHECK_EQ(atomic_load(&r.lock.locked), 0);
    CHECK_EQ(atomic_load(&r.lock.owner_inside), 0);
  }
  printf("%d rounds of %d threads through a revocation: no update lost\n", rounds, contenders + 1);
}

/* ---- after fork ---- */

static void test_revocation_after_fork(void) {
  static gpumem__biased_lock lock;
  gpumem__biased_lock_take(&lock); /* biased to this thread of the parent */
  gpumem__biased_lock_release(&lock);
  fflush(stdout);
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    shared_lock = lock; /* lock_once works on shared_lock */
    pthread_t other;
    if (pthread_create(&other, NULL, lock_once, NULL) != 0 || pthread_join(other, NULL) != 0)
      _exit(2);
    _exit(atomic_load(&shared_lock.revoked) == 1 ? 0 : 3);
  }
  int status;
  CHECK_EQ(waitpid(child, &status, 0), child);
  CHECK(WIFEXITED(status));
  CHECK_EQ(WEXITSTATUS(status), 0);
  printf("revoked in a child of fork\n");
}

/* ---- sleeping waiters ---- */

static void *take_and_count(void *arg) {
  race *r = arg;
  increment(r, 0);
  return NULL;
}

#if defined(__linux__)
static atomic_long sleeper_tid;

static void *publish_tid_then_take(void *arg) {
  atomic_store(&sleeper_tid, (long)syscall(SYS_gettid));
  return take_and_count(arg);
}

/* The scheduler's state of one of this process's threads ('R' running, 'S' asleep, ...). */
static char thread_state(long tid) {
  char path[64], stat[512];
  snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  FILE *file = fopen(path, "r");
  if (!file)
    return '?';
  size_t length = fread(stat, 1, sizeof stat - 1, file);
  fclose(file);
  stat[length] = '\0';
  /* "tid (name) state ...": the name may hold spaces and parentheses, the state follows
   * the last ')'. */
  const char *close = strrchr(stat, ')');
  return close && close[1] == ' ' ? close[2] : '?';
}
#endif

static void test_waiter_sleeps_until_woken(void) {
  static race r;
  memset(&r, 0, sizeof r);
  /* Revoked first, so that this thread takes the shared lock below. */
  pthread_t other;
  increment(&r, 0);
  CHECK_EQ(pthread_create(&other, NULL, take_and_count, &r), 0);
  CHECK_EQ(pthread_join(other, NULL), 0);
  gpumem__biased_lock_take(&r.lock);
#if defined(__linux__)
  atomic_store(&sleeper_tid, 0);
  CHECK_EQ(pthread_create(&other, NULL, publish_tid_then_take, &r), 0);
#else
  CHECK_EQ(pthread_create(&other, NULL, take_and_count, &r), 0);
#endif
  /* The waiter spins a thousand pauses, then marks the lock and sleeps. */
  for (int waited_ms = 0; atomic_load(&r.lock.locked) != GPUMEM__LOCKED_WAITERS; waited_ms++) {
    CHECK(waited_ms < 10000);
    usleep(1000);
  }
#if defined(__linux__)
  /* Marked, and asleep in the kernel rather than spinning on: the scheduler says 'S'. */
  char state = '?';
  for (int waited_ms = 0; (state = thread_state(atomic_load(&sleeper_tid))) != 'S'; waited_ms++) {
    CHECK(waited_ms < 10000);
    usleep(1000);
  }
  CHECK_EQ(state, 'S');
#endif
  CHECK_U64_EQ(r.counter, 2);
  gpumem__biased_lock_release(&r.lock); /* wakes it */
  CHECK_EQ(pthread_join(other, NULL), 0);
  CHECK_U64_EQ(r.counter, 3);
  CHECK_EQ(atomic_load(&r.lock.locked), GPUMEM__UNLOCKED);
  printf("a waiter sleeps on the held lock and the unlock wakes it\n");
}

enum { crowd = 32, crowd_increments = 2000 };

static void test_crowd(void) {
  static race r;
  memset(&r, 0, sizeof r);
  r.increments_each = crowd_increments;
  pthread_t threads[crowd];
  for (int i = 0; i < crowd; i++)
    CHECK_EQ(pthread_create(&threads[i], NULL, contend, &r), 0);
  atomic_store(&r.go, 1);
  for (int i = 0; i < crowd; i++)
    CHECK_EQ(pthread_join(threads[i], NULL), 0);
  CHECK_U64_EQ(r.counter, (uint64_t)crowd * crowd_increments);
  CHECK_EQ(atomic_load(&r.lock.locked), GPUMEM__UNLOCKED);
  printf("%d threads, %d sections each: all finished, no update lost\n", crowd, crowd_increments);
}

int main(void) {
  test_bias_and_revocation();
  test_exclusion_across_revocation();
  test_revocation_after_fork();
  test_waiter_sleeps_until_woken();
  test_crowd();
  return 0;
}
