/* pool_front.c: the pool's thread fronts, which let a pool that many threads use scale with
 * them. A pool used by one thread never has them: its biased lock (core/biased_lock.h)
 * costs plain loads and stores, and its paths stay exactly as they are. Once a second
 * thread takes the lock, the bias is revoked and calls take the shared lock (a thread that
 * then takes it many times in a row alone has it biased again), which sixteen threads
 * fight over (850 ns an operation on the H100 host, 38 times one thread's cost); once
 * threads find it held (pool.c, note_thread: threads that take turns never do), requests
 * under GPUMEM__POOL_FRONT_LIMIT go through a front of the calling thread instead, and the
 * lock is never biased again.
 *
 * A front (one per thread slot, core/thread_slots.h: no thread-local storage) holds whole
 * blocks by size class (4 to a power of two, GPUMEM__POOL_FRONT_SL_SHIFT), all free on one
 * stream, the front's: the stream they were freed on, so it may reuse them at once, as the
 * pool's own free sets do. It refills in batches under the pool's lock, carving blocks at
 * the top of their class, so that every block of a class fits every request of it (at most
 * 1/4 above it), as one run cut from one free block where one holds the batch (a search and
 * a carve, not one of each a block), and files them in its maps and lists after releasing
 * that lock; a class's batches double with each refill or give-back of it, so that the
 * pool's lock is taken once in hundreds of operations of a thread that turns memory over
 * (gpumem-bench threads --stats counts them). It gives a batch back when a list is over two
 * batches, half of every list when it holds over HOLD_BYTES, and all its blocks, open in
 * their stream's set, when its thread turns to another stream, and whenever the pool would
 * fold, trim or answer a free-memory query. So memory one thread's front holds never makes
 * the pool fail for another, and what it keeps while the pool grows is bounded: before
 * growing, the pool takes the smallest larger block from the fronts of the request's
 * stream, and when they have none, drains them one at a time, the fullest first, until the
 * request fits (blocks of another stream then need that stream's seal, or the fold before a
 * failure, as any free block of that stream does). For a front's refill, the drain leaves
 * the refilling thread's own front whole (up to HOLD_BYTES) and each other front
 * GPUMEM__POOL_FRONT_RESERVE: a drained front's thread takes its blocks back a class at a
 * time, under the pool's lock, so that fronts drained to nothing kept 16 threads on one
 * stream at a tenth of the speed. The fold before a failure drains everything. A front
 * records no event for what it gives the pool: those blocks are sealed by a later call on
 * their own stream (a drain that runs in a call on the front's stream seals at once when
 * due). Only a return batch it sends carries an event (pool_returns.c).
 *
 * Memory: a front holds at most HOLD_BYTES, plus a batch (BATCH_BYTES) and a block, free,
 * and a return batch on its way (GPUMEM__POOL_RETURN_BYTES, twice that while the device
 * refuses its event); taking returned batches may put it one batch over HOLD_BYTES until
 * its next allocation gives half back. So sixteen threads' fronts hold about 16 * 19 MiB
 * at most, and their inboxes what their threads allocated and others freed since their
 * lists last ran empty (a thread that stops allocating keeps its inbox
 * until the pool drains it: before it grows for the stream that freed them, or fails).
 * Measured on the threads workload, 16 threads on the GPU host, peak reserved: 138 to 140
 * MiB on their own streams, 110 to 114 MiB on one stream (60 MiB where fronts kept nothing,
 * ten times slower), 26 MiB with a producer; arena(vmm) in an earlier run 108, 112 and 172
 * MiB.
 * Host memory: a front that allocates keeps 8 maps of 16 KiB at first, which grow with the
 * blocks it holds and hands out (16 bytes a block, at most a quarter full).
 *
 * Every block a front holds or hands out is filed by address in that front's maps
 * (GPUMEM__POOL_LIVE_SHARDS of them) from the refill that carved it (under the front's
 * lock, which the refill holds from before it releases the pool's until the batch is filed)
 * until it goes back to the pool; `block->owner` names the front. Allocation and free only
 * set the block's requested size (0: free), so neither writes a map: a thread that frees
 * what it allocated touches no line another thread writes, and a producer's blocks come
 * back from its consumers still filed. Maps change under a lock of their own (refills,
 * give-backs), and any thread looks them up without a lock or a write (front_map.h: a
 * seqlock). A free looks in its own front's maps first, then in those of the front where
 * its last miss was found, then in every front's (a consumer finds its producer's at the
 * second look); it claims the block by setting its requested size from the freed size to 0
 * (of two frees of one block, one wins; a wrong size changes nothing and fails), without
 * the pool's lock: with a compare-and-swap, or with a load and a store by the front's own
 * thread while no other thread has freed a block of that map (share_claims). The freeing
 * thread's front takes the block into its lists when its own maps hold it, else into a
 * return batch for the front that does, sent back when full (pool_returns.c: a consumer
 * thread's frees go back to its producer, one event and one wait for a batch, without the
 * pool's lock). A front makes its maps before its first refill, so a thread that only frees
 * has none. Blocks held or handed out by fronts are in state GPUMEM__BLOCK_FRONT, which the
 * pool's merging never touches; only the pool's lock holder changes a block's state, its
 * neighbours and its size, so front code reads those and writes only its lists and
 * `requested`.
 *
 * Locks, in the order they are taken: the pool's lock, a front's lock, then a map's or an
 * inbox's. A front's thread never waits for the pool's lock while it holds its front's, so
 * the pool's lock holder may drain every front. Front, map and inbox locks are short spin
 * locks (a few list and map operations; a front's lock is held over the device calls of a
 * return batch's send or wait, one for many frees); a front's and a map's are nearly always
 * taken by one thread, so each costs an uncontended atomic exchange on a line that stays in
 * that thread's cache. Map and inbox locks are leaves: a thread takes another front's while
 * it holds its own front's. A gate that a front's thread entered with plain stores, and that
 * a drain closed and waited the thread out of (docs/gpu-runs.md, nineteenth session), saved 4
 * to 8% of one thread's front operation on the GPU host, nothing measurable at 16 threads,
 * and cost one stream's 16 threads a quarter when drains stopped every front; it was not
 * kept.
 *
 * Why fronts of blocks rather than a sub-pool per thread over superblocks (as the arena
 * keeps per stream): a sub-pool keeps every superblock it has touched, so memory would stay
 * with the thread that once used it; a block freed by another thread would have to go back
 * to its owner's sub-pool, under that owner's lock, which every consumer of one producer
 * would fight over; and a thread's sub-pool would need the pool's whole machinery again.
 * Fronts keep only whole free blocks, which the pool takes back at any time, and leave
 * stream rules, growth and trim to the pool.
 *
 * Counters: a front counts what it hands out and takes back, and queries add the fronts to
 * the pool's counters, so live bytes and counts are exact when read; the peak of live bytes
 * is raised from that sum when a refill grew the pool and at each query (a sum at every
 * refill would read 64 fronts' lines that other threads write), so it may miss a peak
 * between them. */
#include "suballoc/pool_internal.h"

#include <stdlib.h>
#include <string.h>

/* A class's first refill carves this many bytes' worth of blocks (at least one); each
 * later refill of the class twice as many as the one before, up to BATCH_BYTES' worth and
 * BATCH_MAX blocks (at least one). A list that grows past two of its batches gives one back,
 * and a front that holds more than HOLD_BYTES gives half of every list back. So a class
 * that its thread turns over fast takes the pool's lock once in many operations (a list
 * empties or fills only after a run of allocations or frees as long as its batch), one used
 * now and then holds little, and a front never holds more than HOLD_BYTES and a block. */
#define REFILL_BYTES ((size_t)64 << 10)
#define BATCH_BYTES ((size_t)512 << 10)
#define BATCH_MAX 64
/* 16 MiB, not 8: a thread whose live bytes swing by a few MiB (the threads workload's, for
 * half its threads) gave half of every list back and refilled it 25 to 30 times a pass at 8;
 * at 16, 2 to 8, and sixteen threads on their own streams held less at their peak (138 to
 * 140 MiB against 148 to 156 on the GPU host; docs/gpu-runs.md, seventeenth session). */
#define HOLD_BYTES ((size_t)16 << 20)

_Static_assert(GPUMEM__POOL_LIVE_SHARDS == 8, "shard_of keeps 3 bits");
_Static_assert(GPUMEM__POOL_FRONT_LIMIT < GPUMEM__POOL_CACHE_LIMIT / 2,
               "fronts' blocks, at the top of their class, are under the cache's limit");
_Static_assert(GPUMEM__POOL_FRONT_SL_SHIFT == 2 &&
                   (GPUMEM__POOL_FRONT_LIMIT >> GPUMEM__BLOCK_UNIT_SHIFT) == 1024,
               "the limit's class top, 1279 units, is in class 36 of GPUMEM__POOL_FRONT_CLASSES");
_Static_assert(BATCH_MAX <= UINT8_MAX, "batches fit pool_front.batches");
_Static_assert(GPUMEM__POOL_FRONT_TOP ==
                   (((((GPUMEM__POOL_FRONT_LIMIT >> GPUMEM__BLOCK_UNIT_SHIFT) >> 8) + 1) << 8) - 1)
                       << GPUMEM__BLOCK_UNIT_SHIFT,
               "front_size(GPUMEM__POOL_FRONT_LIMIT), with its class shift of 8");

/* ---------------------------------------------------------------------------------------
 * Spin locks, shards, lists
 * ------------------------------------------------------------------------------------- */

/* Whether the lock was free and is now the caller's. Sequentially consistent, the same
 * instruction as acquire on x86: share_claims needs a front's thread to read its maps' claims
 * after it took its lock, whichever way it took it. */
static inline bool spin_try_lock(atomic_int *lock) {
  return !atomic_exchange_explicit(lock, 1, memory_order_seq_cst);
}

GPUMEM_NOINLINE static void spin_lock_slow(atomic_int *lock) {
  for (unsigned spins = 0;; spins++) {
    if (!atomic_load_explicit(lock, memory_order_relaxed) && spin_try_lock(lock))
      return;
    gpumem__spin_pause(spins);
  }
}

static inline void spin_lock(atomic_int *lock) {
  if (GPUMEM_UNLIKELY(!spin_try_lock(lock)))
    spin_lock_slow(lock);
}

static inline void spin_unlock(atomic_int *lock) {
  atomic_store_explicit(lock, 0, memory_order_release);
}

void gpumem__pool_spin(atomic_int *lock, bool take) {
  if (take)
    spin_lock(lock);
  else
    spin_unlock(lock);
}

/* Counts one of the front's own statistics (plain stores: only its thread writes them). */
static inline void bump(_Atomic uint64_t *counter) {
  gpumem__slot_count(counter, 1);
}

/* The pool's lock, taken for front `f`'s thread and timed (only the fronts' slow paths take
 * it): how long its threads waited for it and held it (gpumem-bench threads --stats), which
 * is what bounds the pool's throughput when many threads share it. Returns when it was
 * taken, for release_pool. */
static inline uint64_t take_pool(pool_resource *pool, pool_front *f) {
  bump(&f->pool_locks);
  uint64_t before = gpumem__now_ns();
  gpumem__biased_lock_take(&pool->lock);
  uint64_t taken = gpumem__now_ns();
  gpumem__slot_count(&f->lock_wait_ns, taken - before);
  return taken;
}

static inline void release_pool(pool_resource *pool, pool_front *f, uint64_t taken) {
  gpumem__slot_count(&f->lock_hold_ns, gpumem__now_ns() - taken);
  gpumem__biased_lock_release(&pool->lock);
}

/* The map of front `f` for `addr`: blocks carved together (a refill's batch) share a
 * page, and so a map. */
static inline pool_live_shard *shard_of(pool_front *f, uintptr_t addr) {
  return &f->shards[((uint64_t)(addr >> 12) * 0x9E3779B97F4A7C15ull) >> 61];
}

/* Makes the front's maps, before its first refill (by its thread, under no lock but
 * each map's, which other threads' frees read); false when host memory is exhausted (the
 * maps made so far stay, for the next try). */
GPUMEM_COLD static bool ready_maps(pool_front *f) {
  for (size_t k = 0; k < GPUMEM__POOL_LIVE_SHARDS; k++) {
    pool_live_shard *shard = &f->shards[k];
    if (gpumem__front_map_table(&shard->map)) /* only this thread makes it */
      continue;
    spin_lock(&shard->lock);
    bool made = gpumem__front_map_init(&shard->map);
    spin_unlock(&shard->lock);
    if (!made)
      return false;
  }
  f->maps_ready = true;
  return true;
}

/* The front whose map holds `block`, one of the fronts' (state GPUMEM__BLOCK_FRONT). */
static inline pool_front *holder_of(const gpumem__block *block) {
  return (pool_front *)block->owner;
}

/* The block front `f`'s maps hold at `addr`, live or free, looked up without a lock. */
static inline gpumem__block *mapped_in(pool_front *f, uintptr_t addr) {
  return gpumem__front_map_lookup(&shard_of(f, addr)->map, addr);
}

/* The block some front's maps hold at `addr`, and that front in *holder: the calling
 * thread's front `self` (NULL past the slots' count) first (unless `look_in_self` is false),
 * then the front where its last block found elsewhere was (a consumer's producer), then every
 * front; it counts the maps of other fronts it reads, lines that their threads write. Live or
 * free: claim it before use. */
static gpumem__block *find_mapped(pool_fronts *fronts, pool_front *self, uintptr_t addr,
                                  bool look_in_self, pool_front **holder) {
  int me = self ? (int)(self - fronts->fronts) : -1;
  gpumem__block *block;
  if (self && look_in_self && (block = mapped_in(*holder = self, addr)))
    return block;
  if (self && self->hint != me) {
    bump(&self->shared_locks);
    if ((block = mapped_in(*holder = &fronts->fronts[self->hint], addr)))
      return block;
  }
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++) {
    if (i == me || (self && i == self->hint) || !gpumem__thread_slot_used(&fronts->slots, i))
      continue;
    if (self)
      bump(&self->shared_locks);
    if ((block = mapped_in(*holder = &fronts->fronts[i], addr))) {
      if (self)
        self->hint = i;
      return block;
    }
  }
  return NULL;
}

/* Claims a mapped block for a free of `bytes` at `ptr`: its requested size to 0 at once, so
 * that of two frees of one block only one wins; it stays mapped. NULL when it is not live
 * (*held 0: the locked way names the double free), or when it was allocated with another
 * size (*held that size: it stays live, and the free is a misuse). A program that frees one
 * pointer twice at once, from two threads, may find the block struct already reused for
 * another block: the address is checked before and after, so such a free claims nothing at
 * another address. */
static inline gpumem__block *try_claim(gpumem__block *block, void *ptr, size_t bytes,
                                       size_t *held) {
  size_t requested = bytes;
  *held = 0;
  if (__atomic_load_n(&block->addr, __ATOMIC_RELAXED) != (uintptr_t)ptr)
    return NULL;
  if (__atomic_compare_exchange_n(&block->requested, &requested, 0, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    if (GPUMEM_LIKELY(__atomic_load_n(&block->addr, __ATOMIC_RELAXED) == (uintptr_t)ptr))
      return block;
    __atomic_store_n(&block->requested, bytes, __ATOMIC_RELAXED); /* another's: as it was */
    return NULL;
  }
  *held = requested; /* 0: not live */
  return NULL;
}

/* The misuse of a free with `bytes` of a block allocated with `held` bytes. */
GPUMEM_COLD static gpumem_status refuse_claim(void *ptr, size_t bytes, size_t held) {
  return gpumem__fail(GPUMEM_ERR_MISUSE,
                      "deallocate of %p from a pool with %zu bytes, but it was allocated with %zu "
                      "bytes",
                      ptr, bytes, held);
}

/* try_claim by the thread of the front whose map `shard` holds `block`, that front's lock
 * held: while no other thread claims that map's blocks, a load and a store, no atomic
 * instruction (16 threads on their own streams ran 3 to 10% faster on the GPU host, medians
 * of alternating rounds in three leases; docs/gpu-runs.md, twenty-sixth session). */
static inline gpumem__block *claim_own(pool_live_shard *shard, gpumem__block *block, size_t bytes,
                                       void *ptr, size_t *held) {
  if (GPUMEM_UNLIKELY(atomic_load_explicit(&shard->claims, memory_order_seq_cst) !=
                      GPUMEM__CLAIMS_OWN))
    return try_claim(block, ptr, bytes, held);
  /* Only this thread wrote it since it was handed out, and its map names it by its address. */
  size_t requested = __atomic_load_n(&block->requested, __ATOMIC_RELAXED);
  if (requested != bytes) {
    *held = requested;
    return NULL;
  }
  *held = 0;
  __atomic_store_n(&block->requested, 0, __ATOMIC_RELAXED);
  return block;
}

/* Whether threads other than `holder`'s may claim the blocks of its map for `addr`. */
static inline bool claims_shared(pool_front *holder, uintptr_t addr) {
  return atomic_load_explicit(&shard_of(holder, addr)->claims, memory_order_acquire) ==
         GPUMEM__CLAIMS_SHARED;
}

/* Makes claims of the blocks of `holder`'s map for `addr` safe for a thread other than its
 * own, once for that map. Of two frees of one block, one must win; holder's thread claims
 * with a plain load and store, so the first other thread announces itself and waits until it
 * sees holder's lock free: holder's thread reads the announcement after taking that lock
 * (both sequentially consistent), so each of its claims either saw it and uses a
 * compare-and-swap too, or came in a section of the lock that ended before this returns, its
 * store seen here. The caller holds no front's lock (two threads each waiting out the other's
 * would wait for good); holders of a front's lock never wait for anything but leaf locks. */
GPUMEM_COLD static void share_claims(pool_front *holder, uintptr_t addr) {
  pool_live_shard *shard = shard_of(holder, addr);
  atomic_store_explicit(&shard->claims, GPUMEM__CLAIMS_ANNOUNCED, memory_order_seq_cst);
  for (unsigned spins = 0; atomic_load_explicit(&holder->lock, memory_order_seq_cst); spins++)
    gpumem__spin_pause(spins);
  atomic_store_explicit(&shard->claims, GPUMEM__CLAIMS_SHARED, memory_order_release);
}

/* try_claim with its refusal: *status the misuse where the block is live with another size,
 * else GPUMEM_OK. */
static gpumem__block *claim(gpumem__block *block, void *ptr, size_t bytes, gpumem_status *status) {
  size_t held;
  block = try_claim(block, ptr, bytes, &held);
  *status = held ? refuse_claim(ptr, bytes, held) : GPUMEM_OK;
  return block;
}

/* claim by a thread that holds no front's lock, of a block of `holder`'s maps: shares that
 * map's claims first where no other thread has. */
static gpumem__block *claim_other(pool_front *holder, gpumem__block *block, void *ptr, size_t bytes,
                                  gpumem_status *status) {
  if (!claims_shared(holder, (uintptr_t)ptr))
    share_claims(holder, (uintptr_t)ptr);
  return claim(block, ptr, bytes, status);
}

/* Takes a block that leaves the fronts out of the maps holding it (under the map's lock, a
 * leaf). */
static void forget(gpumem__block *block) {
  pool_live_shard *shard = shard_of(holder_of(block), block->addr);
  spin_lock(&shard->lock);
  gpumem__front_map_take(&shard->map, block->addr);
  spin_unlock(&shard->lock);
}

/* The size a front carves for a request of `bytes`: the top of the request's front class. */
static inline size_t front_size(size_t bytes) {
  uint64_t units = gpumem__align_up(bytes, GPUMEM__BLOCK_UNIT) >> GPUMEM__BLOCK_UNIT_SHIFT;
  int shift = 63 - __builtin_clzll(units | (1u << GPUMEM__POOL_FRONT_SL_SHIFT)) -
              GPUMEM__POOL_FRONT_SL_SHIFT;
  return (size_t)((((units >> shift) + 1) << shift) - 1) << GPUMEM__BLOCK_UNIT_SHIFT;
}

static inline size_t clamp_batch(size_t n, size_t size) {
  size_t most = BATCH_BYTES / size;
  most = most > BATCH_MAX ? BATCH_MAX : most;
  return n < 1 ? 1 : n > most ? (most < 1 ? 1 : most) : n;
}

/* How many blocks of class `c` (of `size` bytes) the front's next refill carves, and a
 * give-back returns. */
static inline size_t batch_of(const pool_front *f, size_t c, size_t size) {
  return f->batches[c] ? f->batches[c] : clamp_batch(REFILL_BYTES / size, size);
}

static inline gpumem__block *front_pop(pool_front *f, size_t c) {
  gpumem__block *block = f->lists[c];
  if (block) {
    f->lists[c] = block->next_free;
    f->lengths[c]--;
    f->bytes -= block->size;
  }
  return block;
}

/* Files a block in its class's list; returns whether the list is now over two batches, or
 * the front over HOLD_BYTES, so that some should go back to the pool. */
static inline bool front_push(pool_front *f, gpumem__block *block) {
  size_t c = gpumem__pool_front_class(block->size);
  block->next_free = f->lists[c];
  f->lists[c] = block;
  f->bytes += block->size;
  return ++f->lengths[c] > 2 * batch_of(f, c, block->size) || f->bytes > HOLD_BYTES;
}

static inline void front_count(pool_front *f, int64_t bytes, int64_t count) {
  gpumem__slot_add(&f->live_bytes, bytes);
  gpumem__slot_add(&f->live_count, count);
}

/* Binds an empty front to `set`; under the pool's lock and the front's. */
static void bind(pool_front *f, free_set *set) {
  f->set = set;
  f->stream = set->stream;
  set->fronts++;
}

/* Gives `n` blocks of class `c` back to `set`, open, out of the maps that hold them. */
static void give_back(pool_resource *pool, free_set *set, pool_front *f, size_t c, size_t n) {
  for (; n > 0 && f->lengths[c] > 0; n--) {
    gpumem__block *block = front_pop(f, c);
    forget(block);
    release_block(pool, set, block, GPUMEM__BLOCK_OPEN);
    set->open_frees++;
  }
}

/* A return batch's blocks out of their owner's maps and back to the set they were freed in,
 * open; under the pool's lock (or at its end). */
static void release_batch(pool_resource *pool, pool_return *batch) {
  for (size_t i = 0; i < batch->count; i++)
    forget(batch->blocks[i]);
  gpumem__pool_return_release(pool, batch);
}

/* The blocks of the front's pending return batch back to its set, open; under the pool's
 * lock and the front's. */
static void flush_pending(pool_resource *pool, pool_fronts *fronts, pool_front *f) {
  if (!f->pending)
    return;
  release_batch(pool, f->pending);
  gpumem__pool_return_recycle(fronts, f->pending);
  f->pending = NULL;
}

/* Gives the front's blocks back to its set, open, its pending return batch's too; under the
 * pool's lock and the front's. Returns whether it held any. */
static bool flush_front(pool_resource *pool, pool_front *f) {
  free_set *set = f->set;
  if (!set)
    return false;
  flush_pending(pool, atomic_load_explicit(&pool->fronts, memory_order_relaxed), f);
  for (size_t c = 0; c < GPUMEM__POOL_FRONT_CLASSES && f->bytes > 0; c++)
    give_back(pool, set, f, c, f->lengths[c]);
  GPUMEM__ASSERT(&pool->header, f->bytes == 0, "a flushed front is empty");
  set->fronts--;
  f->set = NULL;
  bump(&atomic_load_explicit(&pool->fronts, memory_order_relaxed)->flushes);
  return true;
}

/* ---------------------------------------------------------------------------------------
 * Blocks freed by other threads, sent back (pool_returns.c)
 * ------------------------------------------------------------------------------------- */

/* Files a return batch's blocks in front f's lists (its lock held), emptying the batch; they
 * stay in their owner's maps (f's, but for a batch f could not send). The front may then
 * hold more than it keeps, which its next give-back corrects. */
static void file_batch(pool_front *f, pool_return *batch) {
  for (size_t i = 0; i < batch->count; i++)
    front_push(f, batch->blocks[i]);
  batch->count = batch->bytes = 0;
}

/* Sends the front's pending batch to its owner. When the device refuses the event, the batch
 * stays pending, to be sent at the next free, up to twice its size (or, with `all`, the
 * front's thread turning to another owner); then the front keeps the blocks itself (they are
 * free on its stream). Under the front's lock. */
static void send_pending(pool_fronts *fronts, pool_resource *pool, pool_front *f, bool all) {
  pool_return *batch = f->pending;
  if (gpumem__pool_return_send(pool, batch, &fronts->fronts[batch->owner])) {
    f->pending = NULL;
    bump(&f->returns_sent);
    return;
  }
  if (!all && batch->count < 2 * GPUMEM__POOL_RETURN_BLOCKS &&
      batch->bytes < 2 * GPUMEM__POOL_RETURN_BYTES)
    return;
  f->pending = NULL;
  file_batch(f, batch);
  gpumem__pool_return_recycle(fronts, batch);
}

/* A block that front `to` handed out and front `f`'s thread freed (f's lock held, f bound):
 * into f's pending batch for `to`, sent when full. False when host memory for a batch is
 * exhausted: f keeps the block. */
static bool return_block(pool_fronts *fronts, pool_resource *pool, pool_front *f, int to,
                         gpumem__block *block) {
  if (f->pending && f->pending->owner != to)
    send_pending(fronts, pool, f, true);
  if (!f->pending && !(f->pending = gpumem__pool_return_new(fronts, f->set, to)))
    return false;
  pool_return *batch = f->pending;
  batch->blocks[batch->count++] = block;
  batch->bytes += block->size;
  if (batch->count >= GPUMEM__POOL_RETURN_BLOCKS || batch->bytes >= GPUMEM__POOL_RETURN_BYTES)
    send_pending(fronts, pool, f, false);
  return true;
}

/* Files the batches of front f's inbox in its lists, each after f's stream waited for its
 * frees, while it holds at most HOLD_BYTES (f's lock held, f bound). A batch whose wait the
 * device refused, or past that bound, goes back to the inbox with the rest, or to the set
 * it was freed in when the caller holds the pool's lock (`pool_locked`). */
static void take_returns(pool_resource *pool, pool_fronts *fronts, pool_front *f,
                         bool pool_locked) {
  pool_return *list = gpumem__pool_inbox_take(f);
  while (list) {
    pool_return *batch = list;
    list = batch->next;
    if (f->bytes <= HOLD_BYTES && gpumem__pool_return_wait(pool, batch, f->stream)) {
      file_batch(f, batch);
    } else if (pool_locked) {
      release_batch(pool, batch);
    } else {
      batch->next = list;
      gpumem__pool_inbox_put_back(f, batch);
      return;
    }
    gpumem__pool_return_recycle(fronts, batch);
    if (!pool_locked)
      bump(&f->returns_taken);
  }
}

/* Batches in front f's inbox back to the sets they were freed in: all of them, or only
 * those of `set` (not NULL); under the pool's lock. Returns whether it released any. */
static bool release_inbox(pool_resource *pool, pool_fronts *fronts, pool_front *f,
                          const free_set *set) {
  if (!atomic_load_explicit(&f->inbox, memory_order_relaxed))
    return false;
  pool_return *list = gpumem__pool_inbox_take(f), *kept = NULL;
  bool released = false;
  while (list) {
    pool_return *batch = list;
    list = batch->next;
    if (set && batch->set != set) {
      batch->next = kept;
      kept = batch;
      continue;
    }
    release_batch(pool, batch);
    gpumem__pool_return_recycle(fronts, batch);
    released = true;
  }
  gpumem__pool_inbox_put_back(f, kept);
  return released;
}

/* ---------------------------------------------------------------------------------------
 * Life, counters
 * ------------------------------------------------------------------------------------- */

void gpumem__pool_enable_fronts(pool_resource *pool) {
  if (atomic_load_explicit(&pool->fronts, memory_order_relaxed) || pool->fixed_block)
    return;
  pool_fronts *fronts = aligned_alloc(GPUMEM__SLOT_ALIGN, sizeof *fronts);
  if (!fronts)
    return;
  memset(fronts, 0, sizeof *fronts); /* no maps yet: each front makes its own */
  atomic_store_explicit(&pool->fronts, fronts, memory_order_release);
  /* The paths through the lock's bias know nothing of fronts: a thread biased again would
   * free a front's block into the pool's live map, which never held it. */
  gpumem__biased_lock_no_new_bias(&pool->lock);
}

void gpumem__pool_free_fronts(pool_resource *pool) {
  pool_fronts *fronts = atomic_load_explicit(&pool->fronts, memory_order_relaxed);
  if (!fronts)
    return;
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++)
    for (size_t k = 0; k < GPUMEM__POOL_LIVE_SHARDS; k++)
      gpumem__front_map_destroy(&fronts->fronts[i].shards[k].map);
  gpumem__pool_returns_free(pool, fronts);
  free(fronts);
}

void gpumem__pool_flush_fronts(pool_resource *pool) {
  pool_fronts *fronts = fronts_of(pool);
  if (!fronts)
    return;
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++) {
    if (!gpumem__thread_slot_used(&fronts->slots, i))
      continue;
    pool_front *f = &fronts->fronts[i];
    spin_lock(&f->lock);
    release_inbox(pool, fronts, f, NULL);
    flush_front(pool, f);
    spin_unlock(&f->lock);
  }
}

bool gpumem__pool_drain_fullest_front(pool_resource *pool, free_set *set, size_t size) {
  pool_fronts *fronts = fronts_of(pool);
  if (!fronts)
    return false;
  bool front_sized = size <= GPUMEM__POOL_FRONT_TOP;
  int spared = front_sized ? gpumem__thread_slot(&fronts->slots) : -1;
  size_t keep = front_sized ? GPUMEM__POOL_FRONT_RESERVE : 0;
  pool_front *fullest = NULL;
  size_t most = keep;
  /* First what this stream freed of other threads' blocks, sent back to them or not yet: it
   * is free on this stream already. */
  bool released = false;
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++) {
    pool_front *f = &fronts->fronts[i];
    if (!gpumem__thread_slot_used(&fronts->slots, i))
      continue;
    spin_lock(&f->lock);
    released |= release_inbox(pool, fronts, f, set);
    if (f->pending && f->set == set) {
      flush_pending(pool, fronts, f);
      released = true;
    }
    spin_unlock(&f->lock);
  }
  if (released)
    return true;
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++) {
    pool_front *f = &fronts->fronts[i];
    if (!gpumem__thread_slot_used(&fronts->slots, i) || i == spared || f->set != set)
      continue; /* f->set is stable: it changes under the pool's lock */
    spin_lock(&f->lock);
    if (atomic_load_explicit(&f->inbox, memory_order_relaxed))
      take_returns(pool, fronts, f, true); /* its blocks, sent back from other streams */
    size_t held = f->bytes + (f->pending ? f->pending->bytes : 0);
    if (held > most) {
      most = held;
      fullest = f;
    }
    spin_unlock(&f->lock);
  }
  if (!fullest)
    return false;
  spin_lock(&fullest->lock);
  flush_pending(pool, fronts, fullest);
  if (keep == 0) {
    flush_front(pool, fullest);
  } else {
    /* Half of every list, the largest classes first, until it holds its reserve: it keeps
     * some of each class it uses, so its thread does not refill them all at once. */
    while (fullest->bytes > keep)
      for (size_t c = GPUMEM__POOL_FRONT_CLASSES; c-- > 0 && fullest->bytes > keep;)
        give_back(pool, set, fullest, c, (fullest->lengths[c] + 1u) / 2);
    bump(&fronts->trims);
  }
  spin_unlock(&fullest->lock);
  gpumem__pool_seal_if_due(pool, set);
  return true;
}

bool gpumem__pool_front_give_larger(pool_resource *pool, free_set *set, size_t size) {
  pool_fronts *fronts = fronts_of(pool);
  if (!fronts || size >= GPUMEM__POOL_FRONT_TOP)
    return false;
  size_t above = gpumem__pool_front_class(front_size(size)) + 1, best_class = SIZE_MAX;
  pool_front *best = NULL;
  for (int i = 0; i < GPUMEM__THREAD_SLOTS && best_class > above; i++) {
    pool_front *f = &fronts->fronts[i];
    if (!gpumem__thread_slot_used(&fronts->slots, i) || f->set != set) /* stable: pool lock */
      continue;
    spin_lock(&f->lock);
    for (size_t c = above; c < best_class && c < GPUMEM__POOL_FRONT_CLASSES; c++)
      if (f->lengths[c] > 0) {
        best_class = c;
        best = f;
      }
    spin_unlock(&f->lock);
  }
  if (!best)
    return false;
  spin_lock(&best->lock); /* only its thread pops, and it waits for the pool's lock */
  bool taken = best->lengths[best_class] > 0;
  give_back(pool, set, best, best_class, 1);
  spin_unlock(&best->lock);
  return taken;
}

/* Live bytes and count, fronts included (sums of relaxed loads: exact at rest). */
static void live_totals(const pool_resource *pool, pool_fronts *fronts, int64_t *bytes,
                        int64_t *count) {
  *bytes = (int64_t)atomic_load_explicit(&pool->stats.live_bytes, memory_order_relaxed) +
           atomic_load_explicit(&fronts->unslotted_live_bytes, memory_order_relaxed);
  *count = (int64_t)atomic_load_explicit(&pool->stats.live_count, memory_order_relaxed) +
           atomic_load_explicit(&fronts->unslotted_live_count, memory_order_relaxed);
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++) {
    *bytes += atomic_load_explicit(&fronts->fronts[i].live_bytes, memory_order_relaxed);
    *count += atomic_load_explicit(&fronts->fronts[i].live_count, memory_order_relaxed);
  }
}

/* Raises the peak of live bytes to `bytes`, a sum from live_totals. */
static void raise_peak_to(pool_resource *pool, int64_t bytes) {
  if (bytes > 0)
    gpumem__counters_raise_peak(&pool->stats.peak_live_bytes, (uint64_t)bytes);
}

static void raise_peak(pool_resource *pool, pool_fronts *fronts) {
  int64_t bytes, count;
  live_totals(pool, fronts, &bytes, &count);
  raise_peak_to(pool, bytes);
}

gpumem_status gpumem__pool_front_counters(const pool_resource *pool, gpumem_query what,
                                          uint64_t *out) {
  pool_fronts *fronts = fronts_of(pool);
  if (!fronts || (what != GPUMEM_QUERY_LIVE_BYTES && what != GPUMEM_QUERY_LIVE_COUNT &&
                  what != GPUMEM_QUERY_PEAK_LIVE_BYTES))
    return gpumem__counters_query(&pool->stats, what, out);
  int64_t bytes, count;
  live_totals(pool, fronts, &bytes, &count);
  if (what == GPUMEM_QUERY_PEAK_LIVE_BYTES) {
    /* The counters are atomics: raising the peak from a query is safe. */
    raise_peak_to((pool_resource *)pool, bytes);
    return gpumem__counters_query(&pool->stats, what, out);
  }
  int64_t value = what == GPUMEM_QUERY_LIVE_BYTES ? bytes : count;
  *out = value > 0 ? (uint64_t)value : 0;
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Allocate
 * ------------------------------------------------------------------------------------- */

static gpumem_status give_back_batch(pool_resource *pool, pool_front *f, size_t size);

/* Makes room in every map of front `f` for `extra` more blocks, so that a refill files its
 * batch after the pool's lock is released, where a failure could no longer give the blocks
 * back; false when host memory is exhausted. By the front's thread (the only one that adds
 * to its maps). */
static bool reserve_maps(pool_front *f, size_t extra) {
  bool reserved = true;
  for (size_t k = 0; k < GPUMEM__POOL_LIVE_SHARDS && reserved; k++) {
    pool_live_shard *shard = &f->shards[k];
    spin_lock(&shard->lock);
    reserved = gpumem__front_map_reserve(&shard->map, extra);
    spin_unlock(&shard->lock);
  }
  return reserved;
}

/* Files a block of a refill in f's maps, which have room (reserve_maps). */
static void map_reserved(pool_front *f, gpumem__block *block) {
  pool_live_shard *shard = shard_of(f, block->addr);
  spin_lock(&shard->lock);
  bool mapped = gpumem__front_map_insert(&shard->map, block);
  spin_unlock(&shard->lock);
  GPUMEM__ASSERT(NULL, mapped, "a map with room reserved takes a block without growing");
  (void)mapped;
}

/* Up to `want` blocks of `size` bytes for a refill of front `f` bound (or about to be) to
 * `set`, marked as f's; under the pool's lock. One run cut from a single free block when one
 * holds them all (gpumem__pool_take_run); else block by block, as an allocation finds them,
 * the first with growth and the fold. Returns how many. */
static size_t take_batch(pool_resource *pool, pool_front *f, free_set *set, size_t size,
                         size_t want, gpumem__block **batch) {
  size_t n = gpumem__pool_take_run(pool, set, size, want, batch);
  const char *why;
  while (n < want) {
    gpumem__block *block;
    gpumem_status status = gpumem__pool_take_block(pool, set, size, n == 0, &block, &why);
    if (status != GPUMEM_OK)
      gpumem__clear_error();
    if (status != GPUMEM_OK || !block)
      break;
    if (GPUMEM_UNLIKELY(block->size != size)) {
      /* Taken whole, as host memory ran out for a split: a front keeps class tops only. */
      release_block(pool, set, block, GPUMEM__BLOCK_OPEN);
      break;
    }
    batch[n++] = block;
  }
  for (size_t k = 0; k < n; k++) {
    batch[k]->state = GPUMEM__BLOCK_FRONT;
    batch[k]->owner = f;
    __atomic_store_n(&batch[k]->requested, 0, __ATOMIC_RELAXED);
  }
  return n;
}

/* The front had no block of the class for this stream: a batch from the pool, under its
 * lock (its first block as the locked path would find it, growth and fold included). The
 * batch goes into the front's maps and lists after the pool's lock is released, under the
 * front's own: sixteen threads refilling at once wait for each other's hold of the pool's
 * lock, and filing a batch there doubled it. False when the pool has none, or host memory
 * ran out: the caller's locked path then fails with its message. */
GPUMEM_NOINLINE static bool refill_and_allocate(pool_resource *pool, pool_fronts *fronts,
                                                pool_front *f, size_t bytes, size_t size,
                                                gpumem_stream stream, void **ptr) {
  size_t c = gpumem__pool_front_class(size), want = batch_of(f, c, size);
  if ((!f->maps_ready && !ready_maps(f)) || !reserve_maps(f, want))
    return false;
  bump(&f->refills);
  uint64_t taken = take_pool(pool, f);
  uint64_t reserved = gpumem__counters_reserved(&pool->stats);
  free_set *set;
  if (set_for(pool, stream, &set) != GPUMEM_OK) {
    release_pool(pool, f, taken);
    gpumem__clear_error(); /* the locked path meets the same failure and reports it */
    return false;
  }
  spin_lock(&f->lock);
  if (f->set && f->set != set) /* another stream's blocks; not that stream's call: no seal */
    flush_front(pool, f);
  spin_unlock(&f->lock);
  /* The front's lock is free while the pool carves: growth drains every front. Only this
   * thread writes the front's batches. */
  f->batches[c] = (uint8_t)clamp_batch(2 * want, size);
  gpumem__block *batch[BATCH_MAX];
  size_t n = take_batch(pool, f, set, size, want, batch);
  if (n == 0) {
    release_pool(pool, f, taken);
    return false;
  }
  spin_lock(&f->lock);
  if (!f->set) /* only this thread binds its front: it is unbound, or bound to `set` */
    bind(f, set);
  gpumem__block *block = batch[0];
  __atomic_store_n(&block->requested, bytes, __ATOMIC_RELAXED);
  front_count(f, (int64_t)bytes, 1);
  /* The peak of live bytes only from the pool's growth (and queries): a sum over every
   * front at each refill would read lines that all threads write. */
  if (gpumem__counters_reserved(&pool->stats) != reserved) {
    bump(&f->grows);
    raise_peak(pool, fronts);
  }
  /* A drain that takes the pool's lock now waits for the front's, which is held until the
   * batch is filed: the blocks are the front's, unmapped, meanwhile. */
  release_pool(pool, f, taken);
  for (size_t k = 0; k < n; k++)
    map_reserved(f, batch[k]);
  for (size_t k = 1; k < n; k++)
    front_push(f, batch[k]);
  *ptr = (void *)block->addr;
  spin_unlock(&f->lock);
  return true;
}

/* The front's list of class `c` is empty: the blocks other threads sent back, if any, into
 * its lists (under its lock, the front bound to `stream`), and one of class `c` from them;
 * NULL when none came. */
GPUMEM_NOINLINE static gpumem__block *pop_returned(pool_resource *pool, pool_fronts *fronts,
                                                   pool_front *f, size_t c) {
  if (!atomic_load_explicit(&f->inbox, memory_order_relaxed))
    return NULL;
  take_returns(pool, fronts, f, false);
  return front_pop(f, c);
}

/* Hands `block`, popped from front `f`'s lists, out for `bytes` at *ptr and releases the
 * front's lock; returns whether the front holds more than it keeps now. */
static inline bool hand_out_then_unlock(pool_front *f, gpumem__block *block, size_t bytes,
                                        void **ptr) {
  __atomic_store_n(&block->requested, bytes, __ATOMIC_RELAXED); /* it stays mapped */
  front_count(f, (int64_t)bytes, 1);
  *ptr = (void *)block->addr;
  bool over = f->bytes > HOLD_BYTES; /* only after blocks came back */
  spin_unlock(&f->lock);
  return over;
}

/* The front class of a request of `bytes`: the class of its units, which is the class of
 * the size carved for it (the class's top). */
static inline size_t request_class(size_t bytes) {
  return gpumem__pool_front_class(gpumem__align_up(bytes, GPUMEM__BLOCK_UNIT));
}

/* A request that front `f`'s lists could not serve: a block other threads returned to it,
 * else a refill under the pool's lock, else the pool's locked way. */
GPUMEM_NOINLINE static gpumem_status allocate_missed(pool_resource *pool, pool_front *f,
                                                     size_t bytes, gpumem_stream stream,
                                                     void **ptr) {
  pool_fronts *fronts = fronts_of(pool);
  size_t c = request_class(bytes), size = front_size(bytes);
  spin_lock(&f->lock);
  gpumem__block *block = NULL;
  if (f->set && f->stream == stream &&
      ((block = front_pop(f, c)) || (block = pop_returned(pool, fronts, f, c)))) {
    if (hand_out_then_unlock(f, block, bytes, ptr))
      give_back_batch(pool, f, size);
    return GPUMEM_OK;
  }
  spin_unlock(&f->lock);
  if (refill_and_allocate(pool, fronts, f, bytes, size, stream, ptr))
    return GPUMEM_OK;
  bump(&f->pool_locks);
  return gpumem__pool_allocate_locked(pool, bytes, stream, ptr);
}

/* An allocation from front `f`, its lock held: from its list, else allocate_missed.
 * Releases the lock. Each way out is a tail call. */
static inline gpumem_status allocate_then_unlock_front(pool_resource *pool, pool_front *f,
                                                       size_t bytes, gpumem_stream stream,
                                                       void **ptr) {
  gpumem__block *block;
  if (GPUMEM_UNLIKELY(!f->set || f->stream != stream ||
                      !(block = front_pop(f, request_class(bytes))))) {
    spin_unlock(&f->lock);
    return allocate_missed(pool, f, bytes, stream, ptr);
  }
  if (GPUMEM_UNLIKELY(hand_out_then_unlock(f, block, bytes, ptr)))
    return give_back_batch(pool, f, front_size(bytes));
  return GPUMEM_OK;
}

/* The allocation of a thread whose front's lock was held (by a drain). */
GPUMEM_NOINLINE static gpumem_status allocate_contended(pool_resource *pool, pool_front *f,
                                                        size_t bytes, gpumem_stream stream,
                                                        void **ptr) {
  spin_lock_slow(&f->lock);
  return allocate_then_unlock_front(pool, f, bytes, stream, ptr);
}

/* The allocation of a thread whose slot is not where its token hashes (or that has none). */
GPUMEM_NOINLINE static gpumem_status allocate_claiming_slot(pool_resource *pool,
                                                            pool_fronts *fronts, size_t bytes,
                                                            gpumem_stream stream, void **ptr) {
  int slot = gpumem__thread_slot_claim(&fronts->slots, gpumem__thread_token());
  if (slot < 0)
    return gpumem__pool_allocate_locked(pool, bytes, stream, ptr);
  pool_front *f = &fronts->fronts[slot];
  bump(&f->ops);
  spin_lock(&f->lock);
  return allocate_then_unlock_front(pool, f, bytes, stream, ptr);
}

gpumem_status gpumem__pool_front_allocate(pool_resource *pool, pool_fronts *fronts, size_t bytes,
                                          gpumem_stream stream, void **ptr) {
  int slot = gpumem__thread_slot_at_home(&fronts->slots);
  if (GPUMEM_UNLIKELY(slot < 0))
    return allocate_claiming_slot(pool, fronts, bytes, stream, ptr);
  pool_front *f = &fronts->fronts[slot];
  __asm__("" : "+r"(f)); /* one register: addresses derived from `fronts` filled them */
  bump(&f->ops);
  if (GPUMEM_UNLIKELY(!spin_try_lock(&f->lock)))
    return allocate_contended(pool, f, bytes, stream, ptr);
  return allocate_then_unlock_front(pool, f, bytes, stream, ptr);
}

/* ---------------------------------------------------------------------------------------
 * Free
 * ------------------------------------------------------------------------------------- */

/* Whether a front handed `ptr` out and it is live; `self` as for find_mapped. */
static bool is_front_live(pool_fronts *fronts, pool_front *self, void *ptr) {
  pool_front *holder;
  gpumem__block *block = find_mapped(fronts, self, (uintptr_t)ptr, true, &holder);
  return block && __atomic_load_n(&block->requested, __ATOMIC_RELAXED) != 0;
}

/* The end of a free that the fronts `handled` (with `status`), or else the pool's locked way. */
static inline gpumem_status free_done(pool_resource *pool, void *ptr, size_t bytes,
                                      gpumem_stream stream, bool *owned, bool handled,
                                      gpumem_status status) {
  if (!handled)
    return gpumem__pool_deallocate_locked(pool, ptr, bytes, stream, owned);
  if (owned)
    *owned = true;
  return status;
}

/* A thread past the slots' count: the block goes straight to its stream's set. */
GPUMEM_COLD static gpumem_status free_unslotted(pool_resource *pool, pool_fronts *fronts, void *ptr,
                                                size_t bytes, gpumem_stream stream, bool *owned) {
  if (!is_front_live(fronts, NULL, ptr))
    return free_done(pool, ptr, bytes, stream, owned, false, GPUMEM_OK);
  gpumem__biased_lock_take(&pool->lock);
  free_set *set;
  pool_front *holder;
  gpumem__block *block = NULL;
  gpumem_status status = set_for(pool, stream, &set);
  bool handled = status != GPUMEM_OK;
  if (!handled && (block = find_mapped(fronts, NULL, (uintptr_t)ptr, true, &holder)) &&
      (block = claim_other(holder, block, ptr, bytes, &status))) {
    atomic_fetch_sub_explicit(&fronts->unslotted_live_bytes, (int64_t)bytes, memory_order_relaxed);
    atomic_fetch_sub_explicit(&fronts->unslotted_live_count, 1, memory_order_relaxed);
    forget(block);
    release_block(pool, set, block, GPUMEM__BLOCK_OPEN);
    set->open_frees++;
    gpumem__pool_seal_if_due(pool, set);
  }
  gpumem__biased_lock_release(&pool->lock);
  /* Else freed meanwhile: the locked way says so. */
  return free_done(pool, ptr, bytes, stream, owned, handled || block || status != GPUMEM_OK,
                   status);
}

/* A list of the front grew past two batches: one batch goes back to the front's set, in
 * this call on its stream (which may seal it); and when the front holds over HOLD_BYTES,
 * half of every list, the largest classes first, until it holds half of that. Returns
 * GPUMEM_OK, the status of the call that asks, so that the call ends with it. */
GPUMEM_NOINLINE static gpumem_status give_back_batch(pool_resource *pool, pool_front *f,
                                                     size_t size) {
  bump(&f->give_backs);
  uint64_t taken = take_pool(pool, f);
  spin_lock(&f->lock);
  free_set *set = f->set; /* a drain may have emptied the front meanwhile */
  size_t c = gpumem__pool_front_class(size);
  if (set && f->lengths[c] > 2 * batch_of(f, c, size)) {
    give_back(pool, set, f, c, batch_of(f, c, size));
    f->batches[c] = (uint8_t)clamp_batch(2 * batch_of(f, c, size), size);
  }
  for (size_t k = GPUMEM__POOL_FRONT_CLASSES; set && k-- > 0 && f->bytes > HOLD_BYTES / 2;)
    give_back(pool, set, f, k, (f->lengths[k] + 1u) / 2);
  spin_unlock(&f->lock);
  if (set)
    gpumem__pool_seal_if_due(pool, set);
  release_pool(pool, f, taken);
  return GPUMEM_OK;
}

/* A free of a block another front's maps hold into front `f` (its lock held, bound): looked
 * up and claimed without a write to that front's lines, then into f's return batch for it
 * (or, without host memory for one, into f's lists, still mapped there). Where that front's
 * map is not yet shared (share_claims), *unshared names the front and nothing is done. The
 * limit of this check: a double free whose block, between the lookup and the claim, goes
 * back to the pool, is carved whole at the same address for a third front whose map no
 * other thread has shared, handed out there and freed by that front's thread at the same
 * moment, may be taken by both frees (with compare-and-swap on both sides, by one of them,
 * as a free of the allocation then at that address). */
GPUMEM_NOINLINE static gpumem__block *absorb_foreign(pool_resource *pool, pool_fronts *fronts,
                                                     pool_front *f, void *ptr, size_t bytes,
                                                     gpumem_status *status, size_t *size,
                                                     bool *over, pool_front **unshared) {
  pool_front *holder;
  gpumem__block *block = find_mapped(fronts, f, (uintptr_t)ptr, false, &holder);
  *status = GPUMEM_OK;
  if (block && GPUMEM_UNLIKELY(!claims_shared(holder, (uintptr_t)ptr))) {
    *unshared = holder;
    return NULL;
  }
  if (!block || !claim(block, ptr, bytes, status))
    return NULL;
  *size = block->size; /* a sent batch may be drained at once */
  front_count(f, -(int64_t)bytes, -1);
  if (!return_block(fronts, pool, f, (int)(holder_of(block) - fronts->fronts), block))
    *over = front_push(f, block);
  return block;
}

/* A free into front `f` (its lock held, bound) of a block `claimed` from its own maps: into
 * its list (it stays mapped: the next allocation of it writes no map), counted. Releases f's
 * lock; a front that holds more than it keeps then gives a batch of the block's size (read
 * under the lock, since a drain may merge the block once it is free) back. */
static inline gpumem_status free_claimed_then_unlock(pool_resource *pool, pool_front *f,
                                                     gpumem__block *claimed, size_t bytes,
                                                     bool *owned) {
  size_t size = claimed->size;
  front_count(f, -(int64_t)bytes, -1);
  bool over = front_push(f, claimed);
  spin_unlock(&f->lock);
  if (owned)
    *owned = true;
  if (GPUMEM_UNLIKELY(over))
    return give_back_batch(pool, f, size);
  return GPUMEM_OK;
}

/* A free that front `f` (its lock held, bound to the call's stream) did not claim from its
 * own maps at first: looked up again, through a writer's change that spoiled the first
 * reading, and claimed there if it is f's; another front's block goes into f's return batch
 * for it (absorb_foreign); a block of f live with another size is a misuse; anything else
 * goes the pool's locked way (a block not live, which it names; a block no front holds).
 * Releases f's lock. */
GPUMEM_NOINLINE static gpumem_status free_unclaimed_then_unlock(pool_resource *pool, pool_front *f,
                                                                void *ptr, size_t bytes,
                                                                gpumem_stream stream, bool *owned) {
  pool_fronts *fronts = fronts_of(pool);
  pool_live_shard *shard = shard_of(f, (uintptr_t)ptr);
  gpumem__block *mine = gpumem__front_map_lookup(&shard->map, (uintptr_t)ptr), *block;
  size_t held = 0;
  if (mine && (block = claim_own(shard, mine, bytes, ptr, &held)))
    return free_claimed_then_unlock(pool, f, block, bytes, owned);
  if (mine) {
    spin_unlock(&f->lock);
    return free_done(pool, ptr, bytes, stream, owned, held != 0,
                     held ? refuse_claim(ptr, bytes, held) : GPUMEM_OK);
  }
  size_t size = 0;
  bool over = false;
  gpumem_status status;
  pool_front *unshared = NULL;
  block = absorb_foreign(pool, fronts, f, ptr, bytes, &status, &size, &over, &unshared);
  spin_unlock(&f->lock);
  if (unshared) { /* the first free of a block of that map by another thread: again after */
    share_claims(unshared, (uintptr_t)ptr);
    return gpumem__pool_front_deallocate(pool, fronts, ptr, bytes, stream, owned);
  }
  if (over)
    give_back_batch(pool, f, size);
  return free_done(pool, ptr, bytes, stream, owned, block || status != GPUMEM_OK, status);
}

/* A free of `ptr` into front `f`, its lock held and bound to the call's stream: a block of
 * f's maps claimed and into its list (free_claimed_then_unlock); anything else out of line.
 * Releases f's lock. Each way out is a tail call. */
static inline gpumem_status free_bound_then_unlock(pool_resource *pool, pool_front *f, void *ptr,
                                                   size_t bytes, gpumem_stream stream,
                                                   bool *owned) {
  pool_live_shard *shard = shard_of(f, (uintptr_t)ptr);
  gpumem__block *mine, *block;
  size_t held;
  if (GPUMEM_UNLIKELY(!gpumem__front_map_read(&shard->map, (uintptr_t)ptr, &mine) || !mine ||
                      !(block = claim_own(shard, mine, bytes, ptr, &held))))
    return free_unclaimed_then_unlock(pool, f, ptr, bytes, stream, owned);
  return free_claimed_then_unlock(pool, f, block, bytes, owned);
}

/* The front cannot take the block as it is (bound to another stream, or to none): under the
 * pool's lock it gives its blocks back and binds to the stream of this call, then takes the
 * block as a bound front does. */
GPUMEM_NOINLINE static gpumem_status free_slow(pool_resource *pool, pool_front *f, void *ptr,
                                               size_t bytes, gpumem_stream stream, bool *owned) {
  /* Frees of blocks no front handed out bind nothing: the locked way has them. */
  if (!is_front_live(fronts_of(pool), f, ptr)) {
    bump(&f->pool_locks); /* the locked way */
    return free_done(pool, ptr, bytes, stream, owned, false, GPUMEM_OK);
  }
  uint64_t taken = take_pool(pool, f);
  free_set *set;
  gpumem_status status = set_for(pool, stream, &set);
  if (status != GPUMEM_OK) {
    release_pool(pool, f, taken); /* nothing changed: the block stays live */
    return free_done(pool, ptr, bytes, stream, owned, true, status);
  }
  spin_lock(&f->lock);
  if (f->set && f->set != set)
    flush_front(pool, f); /* not a call on that stream: no seal */
  if (!f->set)
    bind(f, set);
  /* The binding needed the pool's lock; the free needs the front's only. */
  release_pool(pool, f, taken);
  return free_bound_then_unlock(pool, f, ptr, bytes, stream, owned);
}

/* A free into front `f`, its lock held: bound to the call's stream, or free_slow. */
static inline gpumem_status free_then_unlock_front(pool_resource *pool, pool_front *f, void *ptr,
                                                   size_t bytes, gpumem_stream stream,
                                                   bool *owned) {
  if (GPUMEM_UNLIKELY(!f->set || f->stream != stream)) {
    spin_unlock(&f->lock);
    return free_slow(pool, f, ptr, bytes, stream, owned);
  }
  return free_bound_then_unlock(pool, f, ptr, bytes, stream, owned);
}

/* The free of a thread whose front's lock was held (by a drain). */
GPUMEM_NOINLINE static gpumem_status free_contended(pool_resource *pool, pool_front *f, void *ptr,
                                                    size_t bytes, gpumem_stream stream,
                                                    bool *owned) {
  spin_lock_slow(&f->lock);
  return free_then_unlock_front(pool, f, ptr, bytes, stream, owned);
}

/* The free of a thread whose slot is not where its token hashes (or that has none). */
GPUMEM_NOINLINE static gpumem_status free_claiming_slot(pool_resource *pool, pool_fronts *fronts,
                                                        void *ptr, size_t bytes,
                                                        gpumem_stream stream, bool *owned) {
  int slot = gpumem__thread_slot_claim(&fronts->slots, gpumem__thread_token());
  if (slot < 0)
    return free_unslotted(pool, fronts, ptr, bytes, stream, owned);
  pool_front *f = &fronts->fronts[slot];
  bump(&f->ops);
  spin_lock(&f->lock);
  return free_then_unlock_front(pool, f, ptr, bytes, stream, owned);
}

size_t gpumem__pool_front_requested(pool_fronts *fronts, void *ptr) {
  pool_front *holder;
  gpumem__block *block = find_mapped(fronts, NULL, (uintptr_t)ptr, true, &holder);
  return block ? __atomic_load_n(&block->requested, __ATOMIC_RELAXED) : 0;
}

gpumem_status gpumem__pool_front_deallocate(pool_resource *pool, pool_fronts *fronts, void *ptr,
                                            size_t bytes, gpumem_stream stream, bool *owned) {
  int slot = gpumem__thread_slot_at_home(&fronts->slots);
  if (GPUMEM_UNLIKELY(slot < 0))
    return free_claiming_slot(pool, fronts, ptr, bytes, stream, owned);
  pool_front *f = &fronts->fronts[slot];
  __asm__("" : "+r"(f)); /* as in gpumem__pool_front_allocate */
  bump(&f->ops);
  if (GPUMEM_UNLIKELY(!spin_try_lock(&f->lock)))
    return free_contended(pool, f, ptr, bytes, stream, owned);
  return free_then_unlock_front(pool, f, ptr, bytes, stream, owned);
}

bool gpumem__pool_make_fronts(gpumem_resource *mr) {
  if (!gpumem__is_pool(mr))
    return false;
  pool_resource *pool = (pool_resource *)mr;
  gpumem__biased_lock_take(&pool->lock);
  gpumem__pool_enable_fronts(pool);
  gpumem__biased_lock_release(&pool->lock);
  return fronts_of(pool) != NULL;
}

bool gpumem__pool_front_stats_of(const gpumem_resource *mr, gpumem__pool_front_stats *out) {
  *out = (gpumem__pool_front_stats){0};
  if (!gpumem__is_pool(mr))
    return false;
  pool_fronts *fronts = fronts_of((const pool_resource *)mr);
  if (!fronts)
    return false;
  out->flushes = atomic_load_explicit(&fronts->flushes, memory_order_relaxed);
  out->trims = atomic_load_explicit(&fronts->trims, memory_order_relaxed);
  for (int i = 0; i < GPUMEM__THREAD_SLOTS; i++) {
    const pool_front *f = &fronts->fronts[i];
    out->ops += atomic_load_explicit(&f->ops, memory_order_relaxed);
    out->pool_locks += atomic_load_explicit(&f->pool_locks, memory_order_relaxed);
    out->shared_locks += atomic_load_explicit(&f->shared_locks, memory_order_relaxed);
    out->refills += atomic_load_explicit(&f->refills, memory_order_relaxed);
    out->give_backs += atomic_load_explicit(&f->give_backs, memory_order_relaxed);
    out->returns_sent += atomic_load_explicit(&f->returns_sent, memory_order_relaxed);
    out->returns_taken += atomic_load_explicit(&f->returns_taken, memory_order_relaxed);
    if (gpumem__thread_slot_used(&fronts->slots, i)) {
      pool_front *locked = (pool_front *)f; /* its lock guards the bytes it holds */
      spin_lock(&locked->lock);
      out->held_bytes += f->bytes;
      spin_unlock(&locked->lock);
    }
    out->grows += atomic_load_explicit(&f->grows, memory_order_relaxed);
    out->lock_wait_ns += atomic_load_explicit(&f->lock_wait_ns, memory_order_relaxed);
    out->lock_hold_ns += atomic_load_explicit(&f->lock_hold_ns, memory_order_relaxed);
  }
  return true;
}
