/* tracking.h: what the files of the tracking adaptor share (tracking.c: the adaptor and the
 * text it writes; tracking_table.c: its table of outstanding allocations).
 *
 * The table is a hash table split into shards by pointer, each with a lock of its own, so
 * that threads allocating and freeing different blocks rarely meet; the lock is the biased
 * lock of the hot paths (core/biased_lock.h), so a program whose allocations come from one
 * thread takes no atomic instruction at all. Each shard keeps the bytes and count of its
 * entries; the adaptor's figures are their sums.
 *
 * An entry being freed stays in the table, marked with a serial number of its shard, until
 * the upstream has answered: a free the upstream refuses leaves the allocation outstanding
 * exactly as it was, and an allocation that gets the same address from the upstream in the
 * meantime (the upstream freed it at once) takes the marked entry over rather than meeting
 * a duplicate; the freeing thread then finds its mark gone and leaves the new entry alone. */
#ifndef GPUMEM_TRACKING_H
#define GPUMEM_TRACKING_H

#include "core/biased_lock.h"
#include "core/internal.h"
#include "core/report.h"

#include <stdio.h>

#define GPUMEM__TRACKING_SHARDS 64
/* Frames kept of each stack by default, and at most. */
#define GPUMEM__TRACKING_DEFAULT_DEPTH 32
#define GPUMEM__TRACKING_MAX_DEPTH 256

/* A call stack: raw return addresses, named only when a report is written. */
typedef struct gpumem__tracking_stack {
  int depth;
  void *frames[];
} gpumem__tracking_stack;

typedef struct gpumem__tracking_entry {
  uintptr_t ptr; /* 0: an empty slot */
  size_t bytes;  /* as the allocation asked */
  gpumem_stream stream;
  uint64_t time_ns; /* from the adaptor's creation to the allocation (a coarse clock) */
  gpumem__tracking_stack *stack; /* NULL without stacks; owned by the entry */
  uint32_t freeing;              /* 0, or the mark of the free in flight (a serial of the shard) */
} gpumem__tracking_entry;

typedef struct gpumem__tracking_shard {
  gpumem__biased_lock lock;
  gpumem__tracking_entry *slots;
  size_t capacity; /* a power of two, or 0 */
  size_t used;
  size_t reserved; /* room promised to inserts that must not fail (a piece cut off) */
  uint32_t serial; /* the last mark handed out */
  /* Written under the lock, read without it (relaxed: plain moves). */
  atomic_uint_fast64_t bytes, count;
} __attribute__((aligned(128))) gpumem__tracking_shard;

typedef struct gpumem__tracking_table {
  gpumem__tracking_shard shards[GPUMEM__TRACKING_SHARDS];
} gpumem__tracking_table;

/* The adaptor (tracking.c; here for the tests of its validation). */
typedef struct gpumem__tracking_resource {
  gpumem_resource header;
  bool capture_stacks;
  int depth; /* frames kept of each stack */
  void (*report)(const char *text, void *user);
  void *user;
  uint64_t created_ns;
  gpumem__tracking_table table;
} gpumem__tracking_resource;

/* What happened to an address already in the table when a new allocation of it was
 * recorded. */
typedef enum gpumem__tracking_replaced {
  /* the address was not tracked */
  GPUMEM__TRACKING_NEW,
  /* its entry was being freed: the upstream freed it and gave it out again at once */
  GPUMEM__TRACKING_TAKEOVER,
  /* its entry was live: it was freed past this adaptor, then given out again */
  GPUMEM__TRACKING_STALE
} gpumem__tracking_replaced;

void gpumem__tracking_table_init(gpumem__tracking_table *table);
/* Frees every entry's stack and the slots. */
void gpumem__tracking_table_destroy(gpumem__tracking_table *table);

/* Records an allocation (the entry's ptr not 0). A replaced entry is copied to *old (its
 * stack is then the caller's to free). GPUMEM_ERR_OUT_OF_MEMORY, with a message and
 * nothing changed, when the shard cannot grow; with `reserved` the insert uses room
 * promised by gpumem__tracking_reserve and cannot fail. */
gpumem_status gpumem__tracking_insert(gpumem__tracking_table *table,
                                      const gpumem__tracking_entry *entry, bool reserved,
                                      gpumem__tracking_entry *old,
                                      gpumem__tracking_replaced *replaced);

/* Promises room for one insert into ptr's shard (growing it now): GPUMEM_ERR_OUT_OF_MEMORY
 * with a message when it cannot grow. gpumem__tracking_unreserve takes a promise back. */
gpumem_status gpumem__tracking_reserve(gpumem__tracking_table *table, uintptr_t ptr);
void gpumem__tracking_unreserve(gpumem__tracking_table *table, uintptr_t ptr);

/* Marks ptr's entry as being freed and copies it to *entry: its mark, or 0 when ptr is not
 * tracked or already being freed (*entry then says which: its ptr 0 when not tracked). */
uint32_t gpumem__tracking_mark(gpumem__tracking_table *table, uintptr_t ptr,
                               gpumem__tracking_entry *entry);

/* Marks the entry whose block holds addr (found by its start, else by a walk of every shard:
 * only trims cut pieces), as gpumem__tracking_mark. */
uint32_t gpumem__tracking_mark_containing(gpumem__tracking_table *table, uintptr_t addr,
                                          gpumem__tracking_entry *entry);

/* The free (or cut) marked `mark` is over: the entry keeps `bytes` and loses its mark, or
 * with `bytes` 0 goes, its stack to *stack (the caller frees it). False, changing nothing,
 * when the mark is gone (the entry was taken over). */
bool gpumem__tracking_finish(gpumem__tracking_table *table, uintptr_t ptr, uint32_t mark,
                             size_t bytes, gpumem__tracking_stack **stack);

/* A copy of the stack on the heap; NULL for NULL, or when the host has no memory for it. */
gpumem__tracking_stack *gpumem__tracking_copy_stack(const gpumem__tracking_stack *stack);

/* Sums of the shards' figures. */
uint64_t gpumem__tracking_bytes(const gpumem__tracking_table *table);
uint64_t gpumem__tracking_count(const gpumem__tracking_table *table);

/* Copies every entry, each with its own copy of its stack, sorted by address, into a new
 * array (*entries, to free with gpumem__tracking_free_copy). GPUMEM_ERR_OUT_OF_MEMORY with a
 * message when the host has no memory for it. */
gpumem_status gpumem__tracking_copy(gpumem__tracking_table *table, gpumem__tracking_entry **entries,
                                    size_t *count);
void gpumem__tracking_free_copy(gpumem__tracking_entry *entries, size_t count);

/* Level 2: each shard's slots, probe runs, count and bytes. GPUMEM_ERR_INTERNAL with a
 * message naming what is wrong. */
gpumem_status gpumem__tracking_validate(gpumem__tracking_table *table);

#endif /* GPUMEM_TRACKING_H */
