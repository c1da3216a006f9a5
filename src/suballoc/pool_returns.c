/* pool_returns.c: the batches in which a pool's threads send blocks back to the thread
 * front that handed them out (pool_front.c says when).
 *
 * A thread that allocates what other threads free (a loader feeding workers, a producer)
 * would otherwise get its memory back only through the pool, under its lock: each freeing
 * thread's front gives the blocks to its own stream's set, the producer's refill takes them
 * from there after a wait, split again. On the GPU host, 16 threads so ran at 4 to 6
 * million operations a second, the pool's lock held for over half the time.
 *
 * Instead a freeing thread keeps another front's blocks in a batch of its own (its
 * front's `pending`), free on its stream, and sends the batch when it is full: one event
 * recorded on its stream after the frees, the batch into the owner's inbox under the
 * inbox's lock. The owner's thread takes its inbox when a list of its front runs empty,
 * makes its stream wait on each batch's event (when the batch is of another stream), and
 * files the blocks in its lists: two device calls for a batch, no pool lock. The pool's
 * lock holder does the same for the owner when it drains the owner's front before growing.
 *
 * A batch counts in its set's `returns` from its making until it is emptied, so the set
 * (whose stream its blocks are free on) stays. The pool's lock holder empties batches into
 * their sets when it drains fronts (pool_front.c). Batches are kept for reuse with their
 * events, and freed with the pool. */
#include "suballoc/pool_internal.h"

#include <stdlib.h>

pool_return *gpumem__pool_return_new(pool_fronts *fronts, free_set *set, int owner) {
  gpumem__pool_spin(&fronts->spare_lock, true);
  pool_return *batch = fronts->spares;
  if (batch)
    fronts->spares = batch->next;
  gpumem__pool_spin(&fronts->spare_lock, false);
  if (!batch) {
    batch = calloc(1, sizeof *batch);
    if (!batch)
      return NULL;
    gpumem__pool_spin(&fronts->spare_lock, true);
    batch->made_next = fronts->made;
    fronts->made = batch;
    gpumem__pool_spin(&fronts->spare_lock, false);
  }
  batch->next = NULL;
  batch->count = batch->bytes = 0;
  batch->owner = owner;
  batch->set = set;
  atomic_fetch_add_explicit(&set->returns, 1, memory_order_relaxed);
  return batch;
}

bool gpumem__pool_return_send(pool_resource *pool, pool_return *batch, pool_front *to) {
  const gpumem__device_ops *dev = pool->header.dev;
  gpumem_status status = GPUMEM_OK;
  if (!batch->event)
    status = dev->event_create(pool->header.device, &batch->event);
  if (status == GPUMEM_OK)
    status = dev->event_record(pool->header.device, batch->event, batch->set->stream);
  if (status != GPUMEM_OK) {
    gpumem__absorb_error(); /* the frees succeeded: the sender keeps the blocks */
    return false;
  }
  gpumem__pool_spin(&to->inbox_lock, true);
  batch->next = atomic_load_explicit(&to->inbox, memory_order_relaxed);
  to->inbox_bytes += batch->bytes;
  atomic_store_explicit(&to->inbox, batch, memory_order_relaxed);
  gpumem__pool_spin(&to->inbox_lock, false);
  return true;
}

pool_return *gpumem__pool_inbox_take(pool_front *f) {
  gpumem__pool_spin(&f->inbox_lock, true);
  pool_return *list = atomic_load_explicit(&f->inbox, memory_order_relaxed);
  atomic_store_explicit(&f->inbox, NULL, memory_order_relaxed);
  f->inbox_bytes = 0;
  gpumem__pool_spin(&f->inbox_lock, false);
  return list;
}

void gpumem__pool_inbox_put_back(pool_front *f, pool_return *list) {
  if (!list)
    return;
  pool_return *last = list;
  size_t bytes = list->bytes;
  for (; last->next; last = last->next)
    bytes += last->next->bytes;
  gpumem__pool_spin(&f->inbox_lock, true);
  last->next = atomic_load_explicit(&f->inbox, memory_order_relaxed);
  f->inbox_bytes += bytes;
  atomic_store_explicit(&f->inbox, list, memory_order_relaxed);
  gpumem__pool_spin(&f->inbox_lock, false);
}

bool gpumem__pool_return_wait(pool_resource *pool, const pool_return *batch, gpumem_stream stream) {
  if (batch->set->stream == stream)
    return true;
  gpumem_status status =
      pool->header.dev->stream_wait_event(pool->header.device, stream, batch->event);
  if (status != GPUMEM_OK) {
    gpumem__absorb_error(); /* its blocks go back to their own stream's set, or wait again */
    return false;
  }
  return true;
}

void gpumem__pool_return_release(pool_resource *pool, pool_return *batch) {
  free_set *set = batch->set;
  for (size_t i = 0; i < batch->count; i++) {
    release_block(pool, set, batch->blocks[i], GPUMEM__BLOCK_OPEN);
    set->open_frees++;
  }
  batch->count = batch->bytes = 0;
}

void gpumem__pool_return_recycle(pool_fronts *fronts, pool_return *batch) {
  /* Release: the set's stream was read before; a drop of the set acquires this. */
  atomic_fetch_sub_explicit(&batch->set->returns, 1, memory_order_release);
  batch->set = NULL;
  gpumem__pool_spin(&fronts->spare_lock, true);
  batch->next = fronts->spares;
  fronts->spares = batch;
  gpumem__pool_spin(&fronts->spare_lock, false);
}

void gpumem__pool_returns_free(pool_resource *pool, pool_fronts *fronts) {
  for (pool_return *batch = fronts->made, *next; batch; batch = next) {
    next = batch->made_next;
    if (batch->event)
      pool->header.dev->event_destroy(batch->event);
    free(batch);
  }
  fronts->made = fronts->spares = NULL;
}
