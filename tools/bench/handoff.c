/* handoff.c: the producer/consumer pass of the threads benchmark (--mode producer): one
 * thread allocates, and consumer threads free what it hands them, each on its own thread
 * and stream, as a loader thread feeding workers does. It measures an allocator under frees
 * of blocks that another thread allocated on another stream, which a per-thread or
 * per-stream structure must route back or absorb without a lock that every thread fights
 * over.
 *
 * Each consumer has a bounded queue of its own (one writer, one reader), so the queues cost
 * two cache lines a handoff and nothing is shared between consumers. The producer deals
 * its allocations to the consumers in turn, skipping full queues; when every queue is full
 * it yields. Alone (one thread), the producer frees its own allocations the same number of
 * handoffs later. Every allocation is freed within the pass, and each thread's operations
 * (allocations and frees) count. */
#include "bench/bench.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Entries a consumer's queue holds: with the sizes of the threads workload (8 B to 64 KiB)
 * at most some tens of MiB live per consumer. */
#define QUEUE_CAPACITY 512
/* Polls of an empty or full queue before giving the processor up. */
#define POLLS_BEFORE_YIELD 64

typedef struct handoff_entry {
  void *ptr;
  size_t bytes; /* SIZE_MAX: the end of the pass */
} handoff_entry;

/* Each side keeps the other's index as last read, on a line of its own, and reads the
 * shared one again only when the queue looks full (or empty): a handoff then costs the
 * entry's line and the index the side writes, not a read of the other side's too. */
typedef struct handoff_queue {
  _Alignas(128) atomic_size_t head; /* the next entry the consumer takes */
  size_t tail_seen;                 /* the consumer's last read of tail */
  _Alignas(128) atomic_size_t tail; /* the next entry the producer fills */
  size_t head_seen;                 /* the producer's last read of head */
  _Alignas(128) handoff_entry entries[QUEUE_CAPACITY];
} handoff_queue;

struct bench_handoff {
  int consumers;
  size_t next; /* the consumer the producer tries first (the producer's alone) */
  handoff_queue *queues;
};

bench_handoff *bench_handoff_new(int consumers) {
  bench_handoff *h = calloc(1, sizeof *h);
  if (!h)
    return NULL;
  h->consumers = consumers;
  /* One queue even without consumers: the lone producer's own. */
  h->queues = aligned_alloc(128, sizeof *h->queues * (size_t)(consumers > 0 ? consumers : 1));
  if (!h->queues) {
    free(h);
    return NULL;
  }
  for (int i = 0; i < (consumers > 0 ? consumers : 1); i++) {
    atomic_init(&h->queues[i].head, 0);
    atomic_init(&h->queues[i].tail, 0);
    h->queues[i].tail_seen = h->queues[i].head_seen = 0;
  }
  return h;
}

void bench_handoff_free(bench_handoff *h) {
  if (h)
    free(h->queues);
  free(h);
}

static bool try_push(handoff_queue *q, handoff_entry entry) {
  size_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
  if (tail - q->head_seen == QUEUE_CAPACITY &&
      tail - (q->head_seen = atomic_load_explicit(&q->head, memory_order_acquire)) ==
          QUEUE_CAPACITY)
    return false;
  q->entries[tail % QUEUE_CAPACITY] = entry;
  atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
  return true;
}

static bool try_pop(handoff_queue *q, handoff_entry *entry) {
  size_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
  if (head == q->tail_seen &&
      head == (q->tail_seen = atomic_load_explicit(&q->tail, memory_order_acquire)))
    return false;
  *entry = q->entries[head % QUEUE_CAPACITY];
  atomic_store_explicit(&q->head, head + 1, memory_order_release);
  return true;
}

static void wait_a_little(unsigned *polls) {
  if (++*polls % POLLS_BEFORE_YIELD == 0)
    sched_yield();
}

/* Hands `entry` to the next consumer with room, waiting while every queue is full. */
static void deal(bench_handoff *h, handoff_entry entry) {
  for (unsigned polls = 0;; wait_a_little(&polls))
    for (int tries = 0; tries < h->consumers; tries++) {
      handoff_queue *q = &h->queues[h->next++ % (size_t)h->consumers];
      if (try_push(q, entry))
        return;
    }
}

/* Sends the end of the pass to one consumer. */
static void send_end(handoff_queue *q) {
  for (unsigned polls = 0; !try_push(q, (handoff_entry){NULL, SIZE_MAX}); wait_a_little(&polls))
    ;
}

/* Frees `entry`; a failure is noted in *failure unless one was already (`status`, the
 * pass's status so far, is not GPUMEM_OK). Returns the pass's status now. */
static gpumem_status free_entry(bench_allocator *alloc, gpumem_stream stream, handoff_entry entry,
                                size_t step, gpumem_status status, bench_failure *failure) {
  gpumem_status freed = alloc->deallocate(alloc, entry.ptr, entry.bytes, stream);
  if (freed != GPUMEM_OK && status == GPUMEM_OK)
    return bench_note_failure(freed, step, &(bench_op){.bytes = entry.bytes, .is_free = 1},
                              failure);
  return status;
}

/* The lone producer: frees its own allocations QUEUE_CAPACITY allocations later, from its
 * queue's entries used as a ring of its own. */
static gpumem_status produce_alone(bench_handoff *h, bench_allocator *alloc, gpumem_stream stream,
                                   const size_t *sizes, size_t count, bench_failure *failure) {
  handoff_entry *ring = h->queues[0].entries;
  size_t oldest = 0, held = 0;
  gpumem_status status = GPUMEM_OK;
  for (size_t i = 0; i < count && status == GPUMEM_OK; i++) {
    if (held == QUEUE_CAPACITY) {
      status = free_entry(alloc, stream, ring[oldest++ % QUEUE_CAPACITY], i, status, failure);
      held--;
    }
    handoff_entry *entry = &ring[(oldest + held) % QUEUE_CAPACITY];
    entry->bytes = sizes[i];
    gpumem_status allocated = alloc->allocate(alloc, sizes[i], stream, &entry->ptr);
    if (allocated == GPUMEM_OK)
      held++;
    else if (status == GPUMEM_OK)
      status = bench_note_failure(allocated, i, &(bench_op){.bytes = sizes[i]}, failure);
  }
  /* Whatever is still held is freed, even after a failure, so the pass leaves nothing. */
  for (; held > 0; held--)
    status = free_entry(alloc, stream, ring[oldest++ % QUEUE_CAPACITY], count, status, failure);
  return status;
}

gpumem_status bench_handoff_produce(bench_handoff *h, bench_allocator *alloc, gpumem_stream stream,
                                    const size_t *sizes, size_t count, bench_failure *failure) {
  if (h->consumers == 0)
    return produce_alone(h, alloc, stream, sizes, count, failure);
  gpumem_status (*const allocate)(bench_allocator *, size_t, gpumem_stream, void **) =
      alloc->allocate;
  gpumem_status status = GPUMEM_OK;
  for (size_t i = 0; i < count; i++) {
    void *ptr;
    if ((status = allocate(alloc, sizes[i], stream, &ptr)) != GPUMEM_OK) {
      bench_note_failure(status, i, &(bench_op){.bytes = sizes[i]}, failure);
      break;
    }
    deal(h, (handoff_entry){ptr, sizes[i]});
  }
  /* The end goes out even after a failure: the consumers must not wait for ever. */
  for (int c = 0; c < h->consumers; c++)
    send_end(&h->queues[c]);
  return status;
}

gpumem_status bench_handoff_consume(bench_handoff *h, int consumer, bench_allocator *alloc,
                                    gpumem_stream stream, bench_failure *failure) {
  handoff_queue *q = &h->queues[consumer];
  gpumem_status status = GPUMEM_OK;
  handoff_entry entry;
  for (size_t step = 0;; step++) {
    for (unsigned polls = 0; !try_pop(q, &entry); wait_a_little(&polls))
      ;
    if (entry.bytes == SIZE_MAX)
      return status;
    /* After a failure the rest is still freed (the queue must drain), and the first failure
     * is what the pass reports. */
    status = free_entry(alloc, stream, entry, step, status, failure);
  }
}
