/* stats.c: the statistics adaptor, which counts what is allocated through it (RMM's
 * statistics_resource_adaptor): bytes as requested and allocations, each as its current
 * value, its peak and its total, in a stack of counters that push and pop nest.
 *
 * RMM's adaptor takes a lock per call, which makes its figures exact and costs every call a
 * locked instruction and, under threads, a cache line they all write. Here each thread
 * counts in a slot of its own (core/thread_slots.h), with plain loads and stores: its
 * current bytes and count not yet added to the shared sums, its totals, and the highest sum
 * it has seen. The shared sums (`flushed`) take a thread's changes when they reach
 * flush_bytes or flush_count, by an atomic addition; readers add up the shared sums and
 * every slot.
 *
 * The peak: at each allocation a thread compares the shared sums plus its own changes with
 * its slot's peak. While one thread alone has used the adaptor it never adds its changes
 * (its thresholds are "never"), the shared sums change only at a push or pop, and that sum is
 * the exact current value: the peak is exact, as RMM's. The first call of a second thread
 * stops the first, moves its changes into the shared sums and gives every slot the
 * thresholds; from then on a thread's sum misses only what the others have not added yet,
 * less than flush_bytes (flush_count) each, and so does the peak (docs/internals.md).
 *
 * Push, pop and reads are rare, and take the mutex. They need every slot still: the owner of
 * a slot enters it through the slot's gate (core/thread_slots.h), which the mutex holder
 * closes for every joined slot, waiting the owners out, as the limit's reclaim does; an
 * owner that finds its gate closed counts under the mutex instead. A slot's gate is closed
 * until its thread first takes the mutex (it joins then), and when the only thread that
 * joined pushes or pops itself, nobody needs stopping. Reads
 * stop the threads only once several have joined: with one, the sum it reads is exact. */
#include "adaptors/stats.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS GPUMEM__THREAD_SLOTS
#define SLOT_ALIGN GPUMEM__SLOT_ALIGN
#define DEFAULT_FLUSH_BYTES ((int64_t)1 << 20)
#define DEFAULT_FLUSH_COUNT 64
#define NEVER INT64_MAX /* a slot's thresholds while its thread is the only one */

static inline int64_t load(const _Atomic int64_t *value) {
  return atomic_load_explicit(value, memory_order_relaxed);
}

static inline void store(_Atomic int64_t *value, int64_t x) {
  atomic_store_explicit(value, x, memory_order_relaxed);
}

static inline void raise_to(_Atomic int64_t *peak, int64_t value) {
  if (value > load(peak))
    store(peak, value);
}

static inline int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

/* ---------------------------------------------------------------------------------------
 * Counting in a slot
 * ------------------------------------------------------------------------------------- */

/* Adds the slot's changes to the shared sums. The sum after it is one the thread saw. */
static GPUMEM_NOINLINE void flush(stats_resource *self, stats_slot *slot) {
  int64_t bytes = load(&slot->bytes), count = load(&slot->count);
  store(&slot->bytes, 0);
  store(&slot->count, 0);
  int64_t sum_bytes =
      atomic_fetch_add_explicit(&self->flushed.bytes, bytes, memory_order_relaxed) + bytes;
  int64_t sum_count =
      atomic_fetch_add_explicit(&self->flushed.count, count, memory_order_relaxed) + count;
  raise_to(&slot->peak_bytes, sum_bytes);
  raise_to(&slot->peak_count, sum_count);
}

/* An allocation of `bytes`, counted in a slot its caller may write (its owner inside it, or
 * the mutex holder). */
static inline void slot_allocated(stats_resource *self, stats_slot *slot, int64_t bytes) {
  int64_t own_bytes = load(&slot->bytes) + bytes, own_count = load(&slot->count) + 1;
  store(&slot->bytes, own_bytes);
  store(&slot->count, own_count);
  gpumem__slot_add(&slot->total_bytes, bytes);
  gpumem__slot_add(&slot->total_count, 1);
  raise_to(&slot->peak_bytes, load(&self->flushed.bytes) + own_bytes);
  raise_to(&slot->peak_count, load(&self->flushed.count) + own_count);
  if (GPUMEM_UNLIKELY(own_bytes >= load(&slot->flush_bytes)) ||
      GPUMEM_UNLIKELY(own_count >= load(&slot->flush_count)))
    flush(self, slot);
}

static inline void slot_freed(stats_resource *self, stats_slot *slot, int64_t bytes) {
  int64_t own_bytes = load(&slot->bytes) - bytes, own_count = load(&slot->count) - 1;
  store(&slot->bytes, own_bytes);
  store(&slot->count, own_count);
  if (GPUMEM_UNLIKELY(own_bytes <= -load(&slot->flush_bytes)) ||
      GPUMEM_UNLIKELY(own_count <= -load(&slot->flush_count)))
    flush(self, slot);
}

/* Any change (placement): `bytes` and `count` to the current values, `total` allocations
 * of `bytes` to the totals. */
static void slot_changed(stats_resource *self, stats_slot *slot, int64_t bytes, int64_t count,
                         int64_t total) {
  if (total > 0) {
    slot_allocated(self, slot, bytes);
    return;
  }
  int64_t own_bytes = load(&slot->bytes) + bytes, own_count = load(&slot->count) + count;
  store(&slot->bytes, own_bytes);
  store(&slot->count, own_count);
  if (count > 0) /* a piece unmapped from the middle: two allocations where one was */
    raise_to(&slot->peak_count, load(&self->flushed.count) + own_count);
  int64_t most_bytes = load(&slot->flush_bytes), most_count = load(&slot->flush_count);
  if (own_bytes <= -most_bytes || own_bytes >= most_bytes || own_count <= -most_count ||
      own_count >= most_count)
    flush(self, slot);
}

/* ---------------------------------------------------------------------------------------
 * Owners and the mutex holder
 * ------------------------------------------------------------------------------------- */

/* The calling thread's slot, or NULL past the last one. */
static inline stats_slot *thread_slot(stats_resource *self) {
  int i = gpumem__thread_slot(&self->owners);
  return GPUMEM_LIKELY(i >= 0) ? &self->slots[i] : NULL;
}

/* The slot's address in one register: without this, gcc addresses each field from the
 * resource and the slot's index and, for atomics, spends an instruction on each address. */
static inline stats_slot *in_register(stats_slot *slot) {
  __asm__("" : "+r"(slot));
  return slot;
}

#define FOR_EACH_JOINED(self, i)                                                                   \
  for (int i = 0; i < MAX_SLOTS; i++)                                                              \
    if ((self)->joined >> i & 1)

/* Whether the calling thread is the only one that has joined: then no other thread can be
 * inside a slot (a thread joins under the mutex, which the caller holds). */
static bool caller_is_alone(const stats_resource *self) {
  if (self->shared)
    return false;
  uintptr_t token = gpumem__thread_token();
  FOR_EACH_JOINED(self, i) {
    return atomic_load_explicit(&self->owners.owners[i], memory_order_relaxed) == token;
  }
  return true; /* nobody joined */
}

/* Makes every joined slot's owner stay out of it until resume_owners, so that the caller
 * (holding the mutex) may read and write the slots. A kernel that refuses the barrier it
 * once offered would leave no safe way on: the process stops rather than miscount. */
static void stop_owners(stats_resource *self) {
  if (caller_is_alone(self))
    return;
  FOR_EACH_JOINED(self, i) {
    atomic_store_explicit(&self->slots[i].gate.closed, 1, memory_order_relaxed);
  }
  gpumem__gate_fence(self->membarrier);
  FOR_EACH_JOINED(self, i) {
    gpumem__gate_wait_out(&self->slots[i].gate);
  }
}

static void resume_owners(stats_resource *self) {
  FOR_EACH_JOINED(self, i) {
    atomic_store_explicit(&self->slots[i].gate.closed, 0, memory_order_release);
  }
}

/* The first call of a second thread: the one before gets thresholds, and its changes go to
 * the shared sums, so that no thread's unadded changes exceed them from now on. Under the
 * mutex. */
static void become_shared(stats_resource *self) {
  stop_owners(self);
  FOR_EACH_JOINED(self, i) {
    stats_slot *slot = &self->slots[i];
    store(&slot->flush_bytes, self->flush_bytes);
    store(&slot->flush_count, self->flush_count);
    flush(self, slot);
  }
  self->shared = true;
  resume_owners(self);
}

/* A call the fast path could not count: a thread's first, one made while its slot is
 * blocked, or one of a thread without a slot (NULL). */
static GPUMEM_NOINLINE void count_slowly(stats_resource *self, stats_slot *slot, int64_t bytes,
                                         int64_t count, int64_t total) {
  pthread_mutex_lock(&self->lock);
  if (!slot) {
    slot = &self->spill;
    if (!self->shared)
      become_shared(self);
  } else {
    int index = (int)(slot - self->slots);
    if (!(self->joined >> index & 1)) {
      if (self->joined && !self->shared)
        become_shared(self);
      store(&slot->flush_bytes, self->shared ? self->flush_bytes : NEVER);
      store(&slot->flush_count, self->shared ? self->flush_count : NEVER);
      self->joined |= (uint64_t)1 << index;
      atomic_store_explicit(&slot->gate.closed, 0, memory_order_release);
    }
  }
  slot_changed(self, slot, bytes, count, total);
  pthread_mutex_unlock(&self->lock);
}

/* Counts a change in the calling thread's slot. */
static void count_change(stats_resource *self, int64_t bytes, int64_t count, int64_t total) {
  stats_slot *slot = thread_slot(self);
  if (slot && gpumem__gate_enter(&slot->gate)) {
    slot_changed(self, slot, bytes, count, total);
    gpumem__gate_leave(&slot->gate);
    return;
  }
  count_slowly(self, slot, bytes, count, total);
}

/* ---------------------------------------------------------------------------------------
 * The counters: collected from the slots, pushed and popped (all under the mutex)
 * ------------------------------------------------------------------------------------- */

/* The top counters: the shared sums and what the slots hold. Exact while the owners are
 * stopped, or while one thread alone counts (its slot holds all there is). */
static stats_frame top_frame(const stats_resource *self) {
  stats_frame top = {
      .bytes = {load(&self->flushed.bytes), self->peak_bytes, self->total_bytes},
      .count = {load(&self->flushed.count), self->peak_count, self->total_count},
  };
  const stats_slot *spill = &self->spill;
  for (int i = -1; i < MAX_SLOTS; i++) {
    const stats_slot *slot = i < 0 ? spill : &self->slots[i];
    if (i >= 0 && !(self->joined >> i & 1))
      continue;
    top.bytes.current += load(&slot->bytes);
    top.count.current += load(&slot->count);
    top.bytes.total += load(&slot->total_bytes);
    top.count.total += load(&slot->total_count);
    top.bytes.peak = max64(top.bytes.peak, load(&slot->peak_bytes));
    top.count.peak = max64(top.count.peak, load(&slot->peak_count));
  }
  top.bytes.peak = max64(top.bytes.peak, top.bytes.current);
  top.count.peak = max64(top.count.peak, top.count.current);
  return top;
}

/* Makes `top` the top counters, with every slot empty. Owners stopped. */
static void set_top(stats_resource *self, const stats_frame *top) {
  for (int i = -1; i < MAX_SLOTS; i++) {
    stats_slot *slot = i < 0 ? &self->spill : &self->slots[i];
    store(&slot->bytes, 0);
    store(&slot->count, 0);
    store(&slot->total_bytes, 0);
    store(&slot->total_count, 0);
    store(&slot->peak_bytes, 0);
    store(&slot->peak_count, 0);
  }
  store(&self->flushed.bytes, top->bytes.current);
  store(&self->flushed.count, top->count.current);
  self->peak_bytes = top->bytes.peak;
  self->peak_count = top->count.peak;
  self->total_bytes = top->bytes.total;
  self->total_count = top->count.total;
}

/* The top counters as a read sees them: exact (owners stopped while several count), and
 * kept as the peak so far, so that a peak read never falls. Under the mutex. */
static stats_frame read_top(stats_resource *self) {
  bool stop = self->shared;
  if (stop)
    stop_owners(self);
  stats_frame top = top_frame(self);
  if (stop)
    resume_owners(self);
  self->peak_bytes = top.bytes.peak;
  self->peak_count = top.count.peak;
  return top;
}

/* `child` folded into `parent`, as a pop does. */
static gpumem_statistics_counter fold(gpumem_statistics_counter parent,
                                      gpumem_statistics_counter child) {
  return (gpumem_statistics_counter){
      .current = parent.current + child.current,
      .peak = max64(parent.peak, parent.current + child.peak),
      .total = parent.total + child.total,
  };
}

/* Everything allocated through the adaptor: the whole stack folded into its bottom. */
static stats_frame whole(stats_resource *self) {
  pthread_mutex_lock(&self->lock);
  stats_frame all = read_top(self);
  for (size_t i = self->depth; i-- > 0;) {
    all.bytes = fold(self->saved[i].bytes, all.bytes);
    all.count = fold(self->saved[i].count, all.count);
  }
  pthread_mutex_unlock(&self->lock);
  return all;
}

/* ---------------------------------------------------------------------------------------
 * The resource
 * ------------------------------------------------------------------------------------- */

static gpumem_status stats_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                    gpumem_stream stream, void **ptr) {
  gpumem_status status = mr->upstream->ops->allocate(mr->upstream, bytes, alignment, stream, ptr);
  if (GPUMEM_UNLIKELY(status != GPUMEM_OK))
    return gpumem__fail_through(mr, status);
  stats_resource *self = (stats_resource *)mr;
  stats_slot *slot = thread_slot(self);
  if (GPUMEM_LIKELY(slot != NULL)) {
    stats_slot *own = in_register(slot);
    if (GPUMEM_LIKELY(gpumem__gate_enter(&own->gate))) {
      slot_allocated(self, own, (int64_t)bytes);
      gpumem__gate_leave(&own->gate);
      return GPUMEM_OK;
    }
  }
  count_slowly(self, slot, (int64_t)bytes, 1, 1);
  return GPUMEM_OK;
}

/* Counted after the upstream took the memory back, so that a refused free changes nothing. */
static gpumem_status stats_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                      size_t alignment, gpumem_stream stream) {
  gpumem_status status = mr->upstream->ops->deallocate(mr->upstream, ptr, bytes, alignment, stream);
  if (GPUMEM_UNLIKELY(status != GPUMEM_OK))
    return status;
  stats_resource *self = (stats_resource *)mr;
  stats_slot *slot = thread_slot(self);
  if (GPUMEM_LIKELY(slot != NULL)) {
    stats_slot *own = in_register(slot);
    if (GPUMEM_LIKELY(gpumem__gate_enter(&own->gate))) {
      slot_freed(self, own, (int64_t)bytes);
      gpumem__gate_leave(&own->gate);
      return GPUMEM_OK;
    }
  }
  count_slowly(self, slot, -(int64_t)bytes, -1, 0);
  return GPUMEM_OK;
}

/* Placement counts as allocation; a refusal stays quiet, as the upstream's is. */
static gpumem_status stats_allocate_at(gpumem_resource *mr, uintptr_t addr, size_t bytes,
                                       void **ptr) {
  gpumem_status status = mr->upstream->ops->allocate_at(mr->upstream, addr, bytes, ptr);
  if (status == GPUMEM_OK)
    count_change((stats_resource *)mr, (int64_t)bytes, 1, 1);
  return status;
}

static gpumem_status stats_unmap_pieces(gpumem_resource *mr, uintptr_t addr, size_t size,
                                        int *allocations_added) {
  gpumem_status status =
      mr->upstream->ops->unmap_pieces(mr->upstream, addr, size, allocations_added);
  if (status == GPUMEM_OK)
    count_change((stats_resource *)mr, -(int64_t)size, *allocations_added, 0);
  return status;
}

static gpumem_status stats_query(const gpumem_resource *mr, gpumem_query what, uint64_t *out) {
  if (what != GPUMEM_QUERY_LIVE_BYTES && what != GPUMEM_QUERY_LIVE_COUNT &&
      what != GPUMEM_QUERY_PEAK_LIVE_BYTES)
    return gpumem__forward_query(mr, what, out);
  stats_frame all = whole((stats_resource *)mr);
  int64_t value = what == GPUMEM_QUERY_LIVE_BYTES   ? all.bytes.current
                  : what == GPUMEM_QUERY_LIVE_COUNT ? all.count.current
                                                    : all.bytes.peak;
  *out = value > 0 ? (uint64_t)value : 0; /* below 0 only where frees of others' memory came */
  return GPUMEM_OK;
}

static void stats_describe(const gpumem_resource *mr, char *buf, size_t size) {
  const stats_resource *self = (const stats_resource *)mr;
  gpumem__describe_over(mr, buf, size, ", flush_bytes=%lld, flush_count=%lld",
                        (long long)self->flush_bytes, (long long)self->flush_count);
}

/* Level 2: what holds under the mutex whatever the threads do. */
static gpumem_status stats_validate(const gpumem_resource *mr) {
  stats_resource *self = (stats_resource *)mr;
  const char *wrong = NULL;
  pthread_mutex_lock(&self->lock);
  if (self->depth > self->capacity || (self->depth && !self->saved))
    wrong = "the stack's depth is past its capacity";
  for (size_t i = 0; !wrong && i < self->depth; i++) {
    const stats_frame *f = &self->saved[i];
    if (f->bytes.peak < 0 || f->count.peak < 0 || f->bytes.total < 0 || f->count.total < 0 ||
        f->bytes.peak < f->bytes.current || f->count.peak < f->count.current)
      wrong = "saved counters have a negative peak or total, or a peak below their current value";
  }
  for (int i = 0; !wrong && i < MAX_SLOTS; i++) {
    const stats_slot *slot = &self->slots[i];
    bool joined = self->joined >> i & 1;
    int64_t expected = self->shared ? self->flush_bytes : NEVER;
    if (atomic_load_explicit(&slot->gate.closed, memory_order_relaxed) != !joined)
      wrong = "a slot is blocked outside a push, pop or read, or open before its thread joined";
    else if (joined && load(&slot->flush_bytes) != expected)
      wrong = "a joined slot's threshold does not match the resource's sharing";
    else if (joined && !gpumem__thread_slot_used(&self->owners, i))
      wrong = "a slot joined without an owner";
  }
  pthread_mutex_unlock(&self->lock);
  if (wrong)
    return gpumem__fail(GPUMEM_ERR_INTERNAL, "stats: %s", wrong);
  return GPUMEM_OK;
}

static gpumem_status stats_destroy(gpumem_resource *mr) {
  stats_resource *self = (stats_resource *)mr;
  pthread_mutex_destroy(&self->lock);
  free(self->saved);
  free(self);
  return GPUMEM_OK;
}

static const gpumem__resource_ops stats_ops = {
    .version = GPUMEM__RESOURCE_OPS_VERSION,
    .kind = "stats",
    .allocate = stats_allocate,
    .deallocate = stats_deallocate,
    .query = stats_query,
    .describe = stats_describe,
    .destroy = stats_destroy,
    .allocate_at = stats_allocate_at,
    .unmap_pieces = stats_unmap_pieces,
    .hold_pieces = gpumem__forward_hold_pieces,
    .trim = gpumem__forward_trim,
    .validate = stats_validate,
};

gpumem_status gpumem_statistics_create(gpumem_resource *upstream,
                                       const gpumem_statistics_options *opts,
                                       gpumem_resource **out) {
  gpumem_status status = gpumem__check_adaptor_args("gpumem_statistics_create", upstream, out);
  if (status != GPUMEM_OK)
    return status;
  gpumem_statistics_options options = opts ? *opts : (gpumem_statistics_options){0};
  if (options.flush_bytes > (size_t)INT64_MAX || options.flush_count > (uint64_t)INT64_MAX)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "gpumem_statistics_create: %s is past INT64_MAX",
                        options.flush_bytes > (size_t)INT64_MAX ? "flush_bytes" : "flush_count");
  stats_resource *self = gpumem__adaptor_new(sizeof *self);
  if (!self)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "gpumem_statistics_create: out of host memory");
  gpumem__resource_init_pass_through(&self->header, &stats_ops, upstream);
  self->flush_bytes = options.flush_bytes ? (int64_t)options.flush_bytes : DEFAULT_FLUSH_BYTES;
  self->flush_count = options.flush_count ? (int64_t)options.flush_count : DEFAULT_FLUSH_COUNT;
  self->membarrier = gpumem__thread_barrier_available();
  for (int i = 0; i < MAX_SLOTS; i++) {
    self->slots[i].gate.membarrier = self->membarrier;
    atomic_init(&self->slots[i].gate.closed, 1);
  }
  store(&self->spill.flush_bytes, self->flush_bytes);
  store(&self->spill.flush_count, self->flush_count);
  pthread_mutex_init(&self->lock, NULL);
  *out = &self->header;
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Reading, pushing and popping
 * ------------------------------------------------------------------------------------- */

/* Checks the handles of a statistics call; `stats` may be NULL where `optional`. */
static gpumem_status stats_of(const char *caller, const gpumem_resource *mr,
                              const gpumem_statistics *stats, bool optional,
                              stats_resource **self) {
  size_t first = offsetof(gpumem_statistics, count) + sizeof stats->count;
  if (!mr || (!stats && !optional))
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: %s is NULL", caller,
                        mr ? "stats" : "the resource");
  if (stats && stats->size < first)
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "%s: stats->size (%zu) is smaller than any version of the struct: set it "
                        "to sizeof(gpumem_statistics)",
                        caller, stats->size);
  if (mr->ops != &stats_ops) {
    char spec[256];
    gpumem__describe(mr, spec, sizeof spec);
    return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                        "%s: %s keeps no statistics: only a statistics adaptor does (wrap the "
                        "resource in stats(...), gpumem_statistics_create)",
                        caller, spec);
  }
  *self = (stats_resource *)mr;
  return GPUMEM_OK;
}

static void copy_out(const stats_frame *frame, gpumem_statistics *stats) {
  if (!stats)
    return;
  gpumem_statistics filled;
  memset(&filled, 0, sizeof filled); /* the padding too, so that results compare whole */
  filled.size = stats->size;
  filled.version = GPUMEM_STATISTICS_VERSION;
  filled.bytes = frame->bytes;
  filled.count = frame->count;
  memcpy(stats, &filled, stats->size < sizeof filled ? stats->size : sizeof filled);
}

gpumem_status gpumem_statistics_get(const gpumem_resource *mr, gpumem_statistics *stats) {
  stats_resource *self = NULL;
  gpumem_status status = stats_of("gpumem_statistics_get", mr, stats, false, &self);
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&self->lock);
  stats_frame top = read_top(self);
  pthread_mutex_unlock(&self->lock);
  copy_out(&top, stats);
  return GPUMEM_OK;
}

gpumem_status gpumem_statistics_push(gpumem_resource *mr, gpumem_statistics *stats) {
  stats_resource *self = NULL;
  gpumem_status status = stats_of("gpumem_statistics_push", mr, stats, true, &self);
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&self->lock);
  if (self->depth == self->capacity) { /* first, so that a failure changes nothing */
    size_t capacity = self->capacity ? 2 * self->capacity : 8;
    stats_frame *grown = realloc(self->saved, capacity * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&self->lock);
      return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                          "gpumem_statistics_push: out of host memory for %zu pushed counters",
                          self->depth + 1);
    }
    self->saved = grown;
    self->capacity = capacity;
  }
  stop_owners(self);
  stats_frame top = top_frame(self);
  self->saved[self->depth++] = top;
  set_top(self, &(stats_frame){{0, 0, 0}, {0, 0, 0}});
  resume_owners(self);
  pthread_mutex_unlock(&self->lock);
  copy_out(&top, stats);
  return GPUMEM_OK;
}

gpumem_status gpumem_statistics_pop(gpumem_resource *mr, gpumem_statistics *stats) {
  stats_resource *self = NULL;
  gpumem_status status = stats_of("gpumem_statistics_pop", mr, stats, true, &self);
  if (status != GPUMEM_OK)
    return status;
  pthread_mutex_lock(&self->lock);
  if (self->depth == 0) {
    pthread_mutex_unlock(&self->lock);
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "gpumem_statistics_pop: cannot pop the last counter pair: no counters "
                        "were pushed, and the adaptor's own are never popped");
  }
  stop_owners(self);
  stats_frame child = top_frame(self);
  const stats_frame *parent = &self->saved[--self->depth];
  stats_frame folded = {fold(parent->bytes, child.bytes), fold(parent->count, child.count)};
  set_top(self, &folded);
  resume_owners(self);
  pthread_mutex_unlock(&self->lock);
  copy_out(&child, stats);
  return GPUMEM_OK;
}
