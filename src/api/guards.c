/* guards.c: debug level 3, the front end's checks of how a program uses its blocks: writes
 * past either end, writes into freed blocks, double frees, frees with a wrong size or to
 * the wrong resource, each reported with the call stacks of the block's allocation and
 * first free.
 *
 * Every block the front end hands out is asked of its resource with a guard zone on each
 * side, filled with GUARD_BYTE on the allocation's stream; the program gets the pointer
 * after the front guard. The front guard is a multiple of the alignment (the asked one, or
 * what an aligned adaptor promises), of which the FRONT_CHECKED bytes nearest the block are
 * filled; the rear one is GUARD_BYTES, right after the block's last byte. A side table keyed by the
 * program's pointer keeps each block's sizes and call stack. A free reads the guards back after the
 * work already on its stream (a copy on that stream, then a synchronization: level 3 may be slow),
 * overwrites the block with POISON_BYTE and keeps it, still allocated, in a quarantine of the last
 * frees (GPUMEM_DEBUG_QUARANTINE bytes, GPUMEM_DEBUG_QUARANTINE_BLOCKS blocks). A second free of a
 * quarantined block is a double free. A block leaving the quarantine (pushed out by newer ones, or
 * at a trim or the release of its resource) is read back: a byte that is no longer poison, or a
 * guard byte changed, was written after the free. The device layer does every read and write, so
 * the checks work alike on device, managed and host memory and on both backends.
 *
 * A finding at a free is the free's status (GPUMEM_ERR_MISUSE, the stacks in the message)
 * and is printed to stderr with the whole stacks; one found later, when a block leaves the
 * quarantine or at a trim, is printed only. When the resource cannot give a guarded block
 * (out of memory once the quarantine of the device is emptied, a fixed_size block already
 * full), the block is asked for without guards: still quarantined and checked for double
 * frees, with no guards to check. The figures of the resource a block was allocated from
 * (live bytes and count) leave out the guards and the quarantine, so a program sees what
 * it asked for; resources under it count them. */
#include "api/front_end.h"

#if GPUMEM__DEBUG_LEVEL >= 3

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_BYTE 0xFD  /* the guard zones' pattern */
#define POISON_BYTE 0xDD /* a freed block's */
#define GUARD_BYTES ((size_t)256)
/* The part of a front guard zone that is filled and checked: the bytes nearest the block.
 * A larger zone (a large alignment's) is padding: filling and reading back megabytes per
 * block would cost far more than the rare underrun that jumps that far. */
#define FRONT_CHECKED ((size_t)4096)
/* A block is read back in pieces of at most this, into one host buffer. */
#define CHECK_PIECE ((size_t)4 << 20)
/* Frames of each stack in a status message, which has room for about 1,000 characters. */
#define MESSAGE_FRAMES 4
#define SPEC_SIZE 160

typedef enum entry_state {
  LIVE,        /* the program's */
  FREEING,     /* a free is checking it */
  QUARANTINED, /* freed, held poisoned */
  EVICTING     /* leaving the quarantine: being checked and given back */
} entry_state;

typedef struct entry {
  struct entry *chain;         /* next in its bucket */
  struct entry *older, *newer; /* the quarantine's order, while quarantined */
  gpumem_resource *mr;         /* not retained: the release of mr empties what it has here */
  uintptr_t ptr;               /* the program's pointer */
  void *base;                  /* what the resource gave */
  size_t bytes, alignment;     /* as the program asked (alignment at least 256) */
  size_t asked;                /* bytes asked of mr: front + bytes + rear */
  size_t front, rear;          /* guard bytes; both 0 for a block without guards */
  uint64_t serial;             /* tells a block from a later one at the same address */
  entry_state state;
  gpumem_stream free_stream;
  gpumem__stack allocated, freed;
} entry;

/* What level 3 adds to a resource's live figures, to take out of them again. */
typedef struct account {
  const gpumem_resource *mr;
  uint64_t hidden_bytes; /* guards of its blocks, and its quarantined blocks whole */
  uint64_t held;         /* its quarantined (and evicting) blocks */
  uint64_t evicting;     /* of those, the ones some thread is giving back now */
} account;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t evicted; /* signalled whenever an eviction ends */
  entry **buckets;
  size_t bucket_count, entries;
  entry *oldest, *newest; /* the quarantine */
  size_t held_blocks;
  uint64_t held_bytes;
  bool limits_read;
  uint64_t max_bytes, max_blocks;
  account *accounts;
  size_t account_count, account_capacity;
  uint64_t serial;
} table = {.lock = PTHREAD_MUTEX_INITIALIZER, .evicted = PTHREAD_COND_INITIALIZER};

/* Calls into resources made from here on this thread, not yet returned. A front-end call
 * made inside one (by a resource a program wrote, forwarding to another) gives nothing back
 * from the quarantine: the block given back could be one of a resource whose lock this
 * thread holds further up. The quarantine may then exceed its limits until the next call
 * from outside. */
static _Thread_local int inside;

static gpumem_status resource_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                       gpumem_stream stream, void **out) {
  inside++;
  gpumem_status status = mr->ops->allocate(mr, bytes, alignment, stream, out);
  inside--;
  return status;
}

/* Under a tool that reads NVTX annotations, a block's annotation (the whole block the
 * resource gave, guards included: level 3 reads and writes them itself) goes as the
 * front end's does, and comes back if the free fails. */
static gpumem_status resource_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                         size_t alignment, gpumem_stream stream) {
  inside++;
  gpumem_status status = GPUMEM_UNLIKELY(gpumem__annotating())
                             ? gpumem__annotated_deallocate(mr, ptr, bytes, alignment, stream)
                             : mr->ops->deallocate(mr, ptr, bytes, alignment, stream);
  inside--;
  return status;
}

/* ---------------------------------------------------------------------------------------
 * The side table (all under table.lock)
 * ------------------------------------------------------------------------------------- */

static size_t bucket_of(uintptr_t ptr) {
  uint64_t h = (uint64_t)(ptr >> 8) * 0x9E3779B97F4A7C15ull;
  return (size_t)(h ^ (h >> 32)) & (table.bucket_count - 1);
}

/* Doubles the buckets when entries outnumber them twice; a failure keeps longer chains. */
static void maybe_grow(void) {
  if (table.bucket_count && table.entries < 2 * table.bucket_count)
    return;
  size_t count = table.bucket_count ? 2 * table.bucket_count : 1024;
  entry **grown = calloc(count, sizeof *grown);
  if (!grown)
    return;
  entry **old = table.buckets;
  size_t old_count = table.bucket_count;
  table.buckets = grown;
  table.bucket_count = count;
  for (size_t i = 0; i < old_count; i++) {
    for (entry *e = old[i], *next; e; e = next) {
      next = e->chain;
      size_t b = bucket_of(e->ptr);
      e->chain = table.buckets[b];
      table.buckets[b] = e;
    }
  }
  free(old);
}

/* The entry of (ptr, mr) that a free concerns: a live one first (a block just handed out
 * again at the address of one being evicted), else any. With mr NULL, any resource's live
 * one. */
static entry *find(uintptr_t ptr, const gpumem_resource *mr) {
  if (!table.bucket_count)
    return NULL;
  entry *found = NULL;
  for (entry *e = table.buckets[bucket_of(ptr)]; e; e = e->chain) {
    if (e->ptr != ptr || (mr && e->mr != mr) || (!mr && e->state != LIVE))
      continue;
    if (e->state == LIVE)
      return e;
    if (!found || e->state != EVICTING)
      found = e;
  }
  return found;
}

static void unlink_entry(entry *gone) {
  for (entry **at = &table.buckets[bucket_of(gone->ptr)]; *at; at = &(*at)->chain) {
    if (*at == gone) {
      *at = gone->chain;
      table.entries--;
      return;
    }
  }
}

static account *account_of(const gpumem_resource *mr, bool create) {
  for (size_t i = 0; i < table.account_count; i++)
    if (table.accounts[i].mr == mr)
      return &table.accounts[i];
  if (!create)
    return NULL;
  if (table.account_count == table.account_capacity) {
    size_t capacity = table.account_capacity ? 2 * table.account_capacity : 16;
    account *grown = realloc(table.accounts, capacity * sizeof *grown);
    if (!grown)
      return NULL;
    table.accounts = grown;
    table.account_capacity = capacity;
  }
  account *a = &table.accounts[table.account_count++];
  *a = (account){.mr = mr};
  return a;
}

static void read_limits(void) {
  if (table.limits_read)
    return;
  table.max_bytes = gpumem__option_size(GPUMEM__OPT_DEBUG_QUARANTINE, (uint64_t)256 << 20);
  table.max_blocks = gpumem__option_size(GPUMEM__OPT_DEBUG_QUARANTINE_BLOCKS, 1024);
  table.limits_read = true;
}

static void quarantine_push(entry *e) {
  e->older = table.newest;
  e->newer = NULL;
  if (table.newest)
    table.newest->newer = e;
  else
    table.oldest = e;
  table.newest = e;
  table.held_blocks++;
  table.held_bytes += e->asked;
}

/* Takes e out of the quarantine's order to be given back; it stays in the table (a free
 * of it meanwhile is still a double free) until evict() is done. */
static void quarantine_take(entry *e) {
  if (e->older)
    e->older->newer = e->newer;
  else
    table.oldest = e->newer;
  if (e->newer)
    e->newer->older = e->older;
  else
    table.newest = e->older;
  e->older = e->newer = NULL;
  table.held_blocks--;
  table.held_bytes -= e->asked;
  e->state = EVICTING;
  account_of(e->mr, false)->evicting++;
}

static size_t front_checked(const entry *e) {
  return e->front < FRONT_CHECKED ? e->front : FRONT_CHECKED;
}

static void *front_start(const entry *e) {
  return (void *)(e->ptr - front_checked(e));
}

/* A list of entries to evict, linked through `newer` (free once taken). */
typedef struct victims {
  entry *first, *last;
} victims;

static void victims_add(victims *list, entry *e) {
  quarantine_take(e);
  if (list->last)
    list->last->newer = e;
  else
    list->first = e;
  list->last = e;
}

/* True when mr is `of` or lies under it (an upstream of it, at any depth). */
static bool in_chain(const gpumem_resource *of, const gpumem_resource *mr) {
  for (; of; of = of->upstream)
    if (of == mr)
      return true;
  return false;
}

/* ---------------------------------------------------------------------------------------
 * Reports
 * ------------------------------------------------------------------------------------- */

typedef struct damage {
  size_t count;        /* bytes that differ */
  size_t first, last;  /* their offsets in the range compared */
  unsigned char found; /* the first one's value */
} damage;

static void damage_scan(const unsigned char *bytes, size_t size, size_t offset, unsigned char want,
                        damage *d) {
  /* The common case, all as written, at memcmp's speed: each byte equals the next. */
  if (size == 0 || (bytes[0] == want && memcmp(bytes, bytes + 1, size - 1) == 0))
    return;
  for (size_t i = 0; i < size; i++) {
    if (bytes[i] == want)
      continue;
    if (d->count++ == 0) {
      d->first = offset + i;
      d->found = bytes[i];
    }
    d->last = offset + i;
  }
}

static void describe_block(const entry *e, char *buf, size_t size) {
  char spec[SPEC_SIZE];
  gpumem__describe(e->mr, spec, sizeof spec);
  snprintf(buf, size, "the %zu-byte block %p of %s%s", e->bytes, (void *)e->ptr, spec,
           e->front ? "" : " (without guards)");
}

/* "N bytes before its start (at -a..-b, 0x41 where 0xfd was)" and the same after its end,
 * for damaged guards; "" when both are whole. */
static void describe_guards(const damage *front, const damage *rear, size_t front_size, char *buf,
                            size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  if (front->count)
    used += (size_t)snprintf(buf, size,
                             "%zu guard byte%s before its start changed (at -%zu to -%zu; 0x%02x "
                             "where 0x%02x was written)",
                             front->count, front->count == 1 ? "" : "s", front_size - front->first,
                             front_size - front->last, front->found, GUARD_BYTE);
  if (rear->count && used < size)
    snprintf(buf + used, size - used,
             "%s%zu guard byte%s after its end changed (at +%zu to +%zu past it; 0x%02x where "
             "0x%02x was written)",
             used ? ", and " : "", rear->count, rear->count == 1 ? "" : "s", rear->first,
             rear->last, rear->found, GUARD_BYTE);
}

/* Prints a report to stderr: its first line, then each stack given (label, stack). */
static void print_report(const char *headline, const char *label1, const gpumem__stack *stack1,
                         const char *label2, const gpumem__stack *stack2, const char *label3,
                         const gpumem__stack *stack3) {
  flockfile(stderr);
  fprintf(stderr, "gpumem (GPUMEM_DEBUG=3): %s\n", headline);
  const char *labels[3] = {label1, label2, label3};
  const gpumem__stack *stacks[3] = {stack1, stack2, stack3};
  for (int i = 0; i < 3; i++) {
    if (!labels[i])
      continue;
    fprintf(stderr, "  %s:\n", labels[i]);
    gpumem__stack_print(stacks[i], stderr, "    ");
  }
  fflush(stderr);
  funlockfile(stderr);
}

/* ---------------------------------------------------------------------------------------
 * Reading blocks back
 * ------------------------------------------------------------------------------------- */

/* Compares [at, at+size) of device-layer memory with `want`, read on `stream` in pieces
 * into `host` (CHECK_PIECE bytes). */
static gpumem_status compare_range(const gpumem__device_ops *dev, const void *at, size_t size,
                                   unsigned char want, gpumem_stream stream, unsigned char *host,
                                   damage *d) {
  for (size_t done = 0; done < size;) {
    size_t piece = size - done < CHECK_PIECE ? size - done : CHECK_PIECE;
    gpumem_status status = dev->memcpy_async(host, (const char *)at + done, piece, stream);
    if (status == GPUMEM_OK)
      status = dev->stream_synchronize(stream);
    if (status != GPUMEM_OK)
      return status;
    damage_scan(host, piece, done, want, d);
    done += piece;
  }
  return GPUMEM_OK;
}

static unsigned char *check_buffer(size_t need) {
  return malloc(need < CHECK_PIECE ? need : CHECK_PIECE);
}

/* Reads a quarantined block back on `stream`: its poison and guards must be as written. */
static void check_quarantined(const entry *e, gpumem_stream stream, const char *when) {
  const gpumem__device_ops *dev = e->mr->dev;
  unsigned char *host = check_buffer(e->asked);
  damage body = {0}, front = {0}, rear = {0};
  gpumem_status status = host ? GPUMEM_OK : GPUMEM_ERR_OUT_OF_MEMORY;
  if (status == GPUMEM_OK)
    status = compare_range(dev, (void *)e->ptr, e->bytes, POISON_BYTE, stream, host, &body);
  if (status == GPUMEM_OK && e->front)
    status = compare_range(dev, front_start(e), front_checked(e), GUARD_BYTE, stream, host, &front);
  if (status == GPUMEM_OK && e->rear)
    status =
        compare_range(dev, (char *)e->ptr + e->bytes, e->rear, GUARD_BYTE, stream, host, &rear);
  free(host);
  char block[SPEC_SIZE + 96], line[1024];
  describe_block(e, block, sizeof block);
  if (status != GPUMEM_OK) {
    fprintf(stderr,
            "gpumem (GPUMEM_DEBUG=3): could not read back %s %s (%s): it is given back "
            "unchecked\n",
            block, when,
            status == GPUMEM_ERR_OUT_OF_MEMORY ? "no host memory" : gpumem_last_error_message());
    return;
  }
  if (!body.count && !front.count && !rear.count)
    return;
  char guards[384] = "";
  describe_guards(&front, &rear, front_checked(e), guards, sizeof guards);
  if (body.count)
    snprintf(line, sizeof line,
             "use after free: %zu byte%s of %s changed after it was freed, at +%zu to +%zu (0x%02x "
             "where the poison 0x%02x was written)%s%s; found %s",
             body.count, body.count == 1 ? "" : "s", block, body.first, body.last, body.found,
             POISON_BYTE, guards[0] ? "; also " : "", guards, when);
  else
    snprintf(line, sizeof line, "use after free: after %s was freed, %s; found %s", block, guards,
             when);
  print_report(line, "allocated at", &e->allocated, "first freed at", &e->freed, NULL, NULL);
}

/* The guards of a block, read on `stream` after the work already there. */
static gpumem_status read_guards(const entry *e, gpumem_stream stream, damage *front,
                                 damage *rear) {
  unsigned char *host = check_buffer(front_checked(e) > e->rear ? front_checked(e) : e->rear);
  if (!host)
    return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                        "gpumem_deallocate: no host memory to read back the guards of %p "
                        "(GPUMEM_DEBUG=3); the block is still allocated",
                        (void *)e->ptr);
  gpumem_status status =
      compare_range(e->mr->dev, front_start(e), front_checked(e), GUARD_BYTE, stream, host, front);
  if (status == GPUMEM_OK)
    status = compare_range(e->mr->dev, (char *)e->ptr + e->bytes, e->rear, GUARD_BYTE, stream, host,
                           rear);
  free(host);
  return status;
}

/* ---------------------------------------------------------------------------------------
 * Giving blocks back
 * ------------------------------------------------------------------------------------- */

/* Checks and gives back each victim (taken out of the quarantine), outside the lock: a
 * resource's free may come back to the front end (a resource a program wrote). A victim
 * freed on `stream` is given back on it; the others on the default stream (the stream
 * they were freed on may be gone; their work is done: their free synchronized it). One
 * whose resource refuses it goes back into the quarantine, to be tried again first, so
 * that it is not lost; the first such failure is returned (its message in `why`). */
static gpumem_status evict(victims *list, gpumem_stream stream, const char *when, char *why,
                           size_t why_size) {
  gpumem_status first = GPUMEM_OK;
  for (entry *e = list->first, *next; e; e = next) {
    next = e->newer;
    gpumem_stream on = e->free_stream == stream ? stream : NULL;
    check_quarantined(e, on, when);
    gpumem_status status = resource_deallocate(e->mr, e->base, e->asked, e->alignment, on);
    if (status != GPUMEM_OK) {
      char block[SPEC_SIZE + 96];
      describe_block(e, block, sizeof block);
      fprintf(stderr,
              "gpumem (GPUMEM_DEBUG=3): giving back %s from the quarantine failed: %s; it is "
              "held again\n",
              block, gpumem_last_error_message());
      if (first == GPUMEM_OK && why)
        snprintf(why, why_size, "%s", gpumem_last_error_message());
      first = first == GPUMEM_OK ? status : first;
    }
    pthread_mutex_lock(&table.lock);
    account *a = account_of(e->mr, false);
    a->evicting--;
    if (status == GPUMEM_OK) {
      a->hidden_bytes -= e->asked;
      a->held--;
      unlink_entry(e);
    } else {
      e->state = QUARANTINED;
      e->older = NULL;
      e->newer = table.oldest;
      if (table.oldest)
        table.oldest->older = e;
      else
        table.newest = e;
      table.oldest = e;
      table.held_blocks++;
      table.held_bytes += e->asked;
    }
    pthread_cond_broadcast(&table.evicted);
    pthread_mutex_unlock(&table.lock);
    if (status == GPUMEM_OK)
      free(e);
  }
  return first;
}

/* Takes the quarantined blocks for which `pick` says yes. Under the lock. */
static void take_matching(victims *list, bool (*pick)(const entry *e, const void *arg),
                          const void *arg) {
  for (entry *e = table.oldest, *next; e; e = next) {
    next = e->newer;
    if (pick(e, arg))
      victims_add(list, e);
  }
}

static bool on_device(const entry *e, const void *arg) {
  return e->mr->device == *(const int *)arg;
}

static bool under(const entry *e, const void *arg) {
  return in_chain(e->mr, arg);
}

static bool of_resource(const entry *e, const void *arg) {
  return e->mr == arg;
}

/* Gives back the quarantine's blocks on `device`; true when there were any. */
static bool empty_device(int device, gpumem_stream stream) {
  if (inside)
    return false;
  victims list = {0};
  pthread_mutex_lock(&table.lock);
  take_matching(&list, on_device, &device);
  pthread_mutex_unlock(&table.lock);
  bool any = list.first != NULL;
  evict(&list, stream, "when an allocation ran out of memory", NULL, 0);
  return any;
}

/* ---------------------------------------------------------------------------------------
 * Allocation
 * ------------------------------------------------------------------------------------- */

/* The front guard: a multiple of the alignment asked and of what the resource promises for
 * a request of the guarded size. 0 when the guarded request would overflow. */
static size_t front_guard(const gpumem_resource *mr, size_t bytes, size_t alignment) {
  size_t front = alignment > GUARD_BYTES ? alignment : GUARD_BYTES;
  if (mr->caps.align_promise > front && bytes <= SIZE_MAX - front - GUARD_BYTES &&
      front + bytes + GUARD_BYTES >= mr->caps.align_threshold)
    front = mr->caps.align_promise;
  if (bytes > SIZE_MAX - front - GUARD_BYTES - alignment)
    return 0;
  return front;
}

/* Asks mr for e's block: with guards; when out of memory, again after emptying the
 * device's quarantine; when still out of memory or unsupported, without guards. */
static gpumem_status ask(gpumem_resource *mr, entry *e, gpumem_stream stream) {
  gpumem_status status = GPUMEM_ERR_OUT_OF_MEMORY;
  uint64_t serial = gpumem__error_serial();
  if (e->front) {
    e->asked = e->front + e->bytes + e->rear;
    status = resource_allocate(mr, e->asked, e->alignment, stream, &e->base);
    if (status == GPUMEM_ERR_OUT_OF_MEMORY && empty_device(mr->device, stream))
      status = resource_allocate(mr, e->asked, e->alignment, stream, &e->base);
  }
  if (status == GPUMEM_ERR_OUT_OF_MEMORY || status == GPUMEM_ERR_UNSUPPORTED) {
    e->front = e->rear = 0;
    e->asked = e->bytes;
    status = resource_allocate(mr, e->asked, e->alignment, stream, &e->base);
  }
  if (status == GPUMEM_OK && gpumem__error_serial() != serial)
    gpumem__clear_error(); /* a failure absorbed */
  return status;
}

gpumem_status gpumem__guarded_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                       gpumem_stream stream, void **ptr, const void *caller) {
  entry *e = calloc(1, sizeof *e);
  pthread_mutex_lock(&table.lock);
  bool tracked = e && account_of(mr, true);
  pthread_mutex_unlock(&table.lock);
  if (!tracked) {
    /* No host memory to keep the block's record: an unchecked block, which its free passes
     * on as it is. */
    free(e);
    void *block;
    gpumem_status status = resource_allocate(mr, bytes, alignment, stream, &block);
    gpumem__debug_after(mr, "allocate");
    if (status != GPUMEM_OK)
      return gpumem__allocation_failed(mr, status, bytes, alignment);
    gpumem__hand_out(mr, block, bytes, stream);
    *ptr = block;
    return GPUMEM_OK;
  }
  gpumem__stack_capture(&e->allocated, caller);
  e->mr = mr;
  e->bytes = bytes;
  e->alignment = alignment;
  e->front = front_guard(mr, bytes, alignment);
  e->rear = e->front ? GUARD_BYTES : 0;
  gpumem_status status = ask(mr, e, stream);
  gpumem__debug_after(mr, "allocate");
  if (status != GPUMEM_OK) {
    free(e);
    /* Out of memory, the last try was the block without guards: the request as asked. */
    return gpumem__allocation_failed(mr, status, bytes, alignment);
  }
  e->ptr = (uintptr_t)e->base + e->front;
  if (GPUMEM_UNLIKELY(mr->dev->note_handout != NULL))
    mr->dev->note_handout(e->base, e->asked, stream);
  if (e->front) {
    status = mr->dev->memset_async(front_start(e), GUARD_BYTE, front_checked(e), stream);
    if (status == GPUMEM_OK)
      status = mr->dev->memset_async((void *)(e->ptr + bytes), GUARD_BYTE, e->rear, stream);
    if (status != GPUMEM_OK) {
      resource_deallocate(mr, e->base, e->asked, alignment, stream);
      free(e);
      return gpumem__fail_context(status, "gpumem_allocate: filling the guards (GPUMEM_DEBUG=3)");
    }
  }
  if (GPUMEM_UNLIKELY(gpumem__annotating()))
    gpumem__annotate_block_add(e->base, e->asked);
  pthread_mutex_lock(&table.lock);
  maybe_grow();
  size_t b = bucket_of(e->ptr);
  e->chain = table.buckets[b];
  table.buckets[b] = e;
  table.entries++;
  e->serial = ++table.serial;
  account_of(mr, false)->hidden_bytes += e->asked - e->bytes;
  pthread_mutex_unlock(&table.lock);
  *ptr = (void *)e->ptr;
  return GPUMEM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Free
 * ------------------------------------------------------------------------------------- */

/* A free refused before anything changed: a double free, a wrong size or alignment, or a
 * block of another resource. `e` is a copy taken under the lock. */
static gpumem_status refuse(const entry *e, const gpumem_resource *mr, size_t bytes,
                            size_t alignment, const gpumem__stack *now) {
  char block[SPEC_SIZE + 96], headline[1024], at[320], first[320];
  describe_block(e, block, sizeof block);
  gpumem__stack_line(&e->allocated, MESSAGE_FRAMES, at, sizeof at);
  gpumem__stack_line(&e->freed, MESSAGE_FRAMES, first, sizeof first);
  if (e->mr != mr) {
    char spec[SPEC_SIZE];
    gpumem__describe(mr, spec, sizeof spec);
    snprintf(headline, sizeof headline, "%p was allocated as %s, and is freed to %s",
             (void *)e->ptr, block, spec);
    print_report(headline, "allocated at", &e->allocated, "freed at", now, NULL, NULL);
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "gpumem_deallocate: %s; nothing changed (GPUMEM_DEBUG=3). Allocated at %s",
                        headline, at);
  }
  if (e->state != LIVE) {
    snprintf(headline, sizeof headline,
             "double free of %s: it was freed before and is held in the quarantine", block);
    print_report(headline, "allocated at", &e->allocated, "first freed at", &e->freed,
                 "freed again at", now);
    return gpumem__fail(GPUMEM_ERR_MISUSE,
                        "gpumem_deallocate: %s; nothing changed (GPUMEM_DEBUG=3). Allocated at "
                        "%s; first freed at %s",
                        headline, at, first);
  }
  snprintf(headline, sizeof headline,
           "%s freed with size %zu and alignment %zu; it was allocated with size %zu and "
           "alignment %zu",
           block, bytes, alignment, e->bytes, e->alignment);
  print_report(headline, "allocated at", &e->allocated, "freed at", now, NULL, NULL);
  return gpumem__fail(GPUMEM_ERR_MISUSE,
                      "gpumem_deallocate: %s; nothing changed (GPUMEM_DEBUG=3). Allocated at %s",
                      headline, at);
}

/* The finding of a free whose guards were changed: printed, and the free's status. */
static gpumem_status report_overrun(const entry *e, const damage *front, const damage *rear) {
  char block[SPEC_SIZE + 96], guards[384], headline[1024], at[320];
  describe_block(e, block, sizeof block);
  describe_guards(front, rear, front_checked(e), guards, sizeof guards);
  snprintf(headline, sizeof headline, "a write %s %s: %s",
           rear->count ? (front->count ? "outside" : "past the end of") : "before the start of",
           block, guards);
  print_report(headline, "allocated at", &e->allocated, "freed at", &e->freed, NULL, NULL);
  gpumem__stack_line(&e->allocated, MESSAGE_FRAMES, at, sizeof at);
  return gpumem__fail(GPUMEM_ERR_MISUSE,
                      "gpumem_deallocate: %s; the block is freed all the same (GPUMEM_DEBUG=3). "
                      "Allocated at %s",
                      headline, at);
}

/* Puts a checked, poisoned block in the quarantine and takes out what no longer fits. */
static void hold(entry *e, victims *out) {
  pthread_mutex_lock(&table.lock);
  e->state = QUARANTINED;
  account *a = account_of(e->mr, false);
  a->hidden_bytes += e->bytes;
  a->held++;
  quarantine_push(e);
  while (!inside && table.oldest &&
         (table.held_bytes > table.max_bytes || table.held_blocks > table.max_blocks))
    victims_add(out, table.oldest);
  pthread_mutex_unlock(&table.lock);
}

gpumem_status gpumem__guarded_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                         size_t alignment, gpumem_stream stream,
                                         const void *caller) {
  gpumem__stack now;
  gpumem__stack_capture(&now, caller);
  pthread_mutex_lock(&table.lock);
  read_limits();
  entry *e = find((uintptr_t)ptr, mr);
  if (!e)
    e = find((uintptr_t)ptr, NULL); /* another resource's block? */
  if (!e) {
    /* Not a block level 3 handed out: the resource judges it, as at any level. */
    pthread_mutex_unlock(&table.lock);
    gpumem_status status = resource_deallocate(mr, ptr, bytes, alignment, stream);
    gpumem__debug_after(mr, "deallocate");
    return status;
  }
  if (e->mr != mr || e->state != LIVE || e->bytes != bytes || e->alignment != alignment) {
    entry copy = *e;
    pthread_mutex_unlock(&table.lock);
    return refuse(&copy, mr, bytes, alignment, &now);
  }
  e->state = FREEING;
  e->freed = now;
  e->free_stream = stream;
  bool quarantine = e->asked <= table.max_bytes && table.max_blocks > 0;
  pthread_mutex_unlock(&table.lock);

  /* The guards, after the work already on the stream; the poison after them. */
  damage front = {0}, rear = {0};
  gpumem_status status = GPUMEM_OK;
  if (e->front)
    status = read_guards(e, stream, &front, &rear);
  if (status == GPUMEM_OK && quarantine) {
    /* Damaged guards are written again: reported now, they must not be taken for a write
     * after the free when the block leaves the quarantine. */
    if (front.count)
      status = mr->dev->memset_async(front_start(e), GUARD_BYTE, front_checked(e), stream);
    if (status == GPUMEM_OK && rear.count)
      status = mr->dev->memset_async((void *)(e->ptr + e->bytes), GUARD_BYTE, e->rear, stream);
    if (status == GPUMEM_OK)
      status = mr->dev->memset_async((void *)e->ptr, POISON_BYTE, e->bytes, stream);
    if (status == GPUMEM_OK)
      status = mr->dev->stream_synchronize(stream);
  }
  if (status == GPUMEM_OK && !quarantine)
    status = resource_deallocate(mr, e->base, e->asked, e->alignment, stream);
  if (status != GPUMEM_OK) {
    pthread_mutex_lock(&table.lock);
    e->state = LIVE;
    pthread_mutex_unlock(&table.lock);
    gpumem__debug_after(mr, "deallocate");
    return status;
  }
  gpumem_status finding = GPUMEM_OK;
  if (front.count || rear.count)
    finding = report_overrun(e, &front, &rear);
  victims out = {0};
  if (quarantine) {
    hold(e, &out);
  } else {
    pthread_mutex_lock(&table.lock);
    account_of(mr, false)->hidden_bytes -= e->asked - e->bytes;
    unlink_entry(e);
    pthread_mutex_unlock(&table.lock);
    free(e);
  }
  evict(&out, stream, "when it left the quarantine", NULL, 0);
  gpumem__debug_after(mr, "deallocate");
  return finding;
}

/* ---------------------------------------------------------------------------------------
 * Trim, release, figures
 * ------------------------------------------------------------------------------------- */

/* Checks the guards of the live blocks of mr and of the resources over it, once the
 * device is idle; a finding is printed if the block is still the same live block after. */
static void check_live_guards(gpumem_resource *mr) {
  pthread_mutex_lock(&table.lock);
  size_t count = 0;
  for (size_t b = 0; b < table.bucket_count; b++)
    for (entry *e = table.buckets[b]; e; e = e->chain)
      count += e->state == LIVE && e->front && in_chain(e->mr, mr);
  entry *copies = count ? malloc(count * sizeof *copies) : NULL; /* they may be freed meanwhile */
  size_t taken = 0;
  for (size_t b = 0; copies && b < table.bucket_count; b++)
    for (entry *e = table.buckets[b]; e; e = e->chain)
      if (e->state == LIVE && e->front && in_chain(e->mr, mr))
        copies[taken++] = *e;
  pthread_mutex_unlock(&table.lock);
  if (!taken || mr->dev->device_synchronize(mr->device) != GPUMEM_OK) {
    free(copies);
    return;
  }
  for (size_t i = 0; i < taken; i++) {
    const entry *c = &copies[i];
    damage front = {0}, rear = {0};
    if (read_guards(c, NULL, &front, &rear) != GPUMEM_OK || (!front.count && !rear.count))
      continue;
    pthread_mutex_lock(&table.lock);
    entry *now = find(c->ptr, c->mr);
    bool same = now && now->serial == c->serial && now->state == LIVE;
    pthread_mutex_unlock(&table.lock);
    if (!same)
      continue;
    char block[SPEC_SIZE + 96], guards[384], headline[1024];
    describe_block(c, block, sizeof block);
    describe_guards(&front, &rear, front_checked(c), guards, sizeof guards);
    snprintf(headline, sizeof headline, "a write %s %s, which is live (found at a trim): %s",
             rear.count ? (front.count ? "outside" : "past the end of") : "before the start of",
             block, guards);
    print_report(headline, "allocated at", &c->allocated, NULL, NULL, NULL, NULL);
  }
  free(copies);
}

void gpumem__guards_before_trim(gpumem_resource *mr) {
  if (gpumem__debug_level() < 3 || inside)
    return;
  check_live_guards(mr);
  victims list = {0};
  pthread_mutex_lock(&table.lock);
  take_matching(&list, under, mr);
  pthread_mutex_unlock(&table.lock);
  evict(&list, NULL, "at a trim", NULL, 0);
}

gpumem_status gpumem__guards_before_release(gpumem_resource *mr) {
  if (gpumem__debug_level() < 3)
    return GPUMEM_OK;
  victims list = {0};
  pthread_mutex_lock(&table.lock);
  take_matching(&list, of_resource, mr);
  pthread_mutex_unlock(&table.lock);
  char why[512] = "another thread's attempt failed";
  gpumem_status status = evict(&list, NULL, "at the release of its resource", why, sizeof why);
  pthread_mutex_lock(&table.lock);
  account *a;
  while ((a = account_of(mr, false)) && a->evicting)
    pthread_cond_wait(&table.evicted, &table.lock);
  uint64_t held = a ? a->held : 0;
  pthread_mutex_unlock(&table.lock);
  if (held == 0)
    return GPUMEM_OK;
  char spec[SPEC_SIZE];
  gpumem__describe(mr, spec, sizeof spec);
  return gpumem__fail(status != GPUMEM_OK ? status : GPUMEM_ERR_INTERNAL,
                      "last release of resource %s: %llu freed block%s held by the quarantine "
                      "of GPUMEM_DEBUG=3 could not be given back (%s); not destroyed, the "
                      "handle is still yours: release it again",
                      spec, (unsigned long long)held, held == 1 ? "" : "s", why);
}

void gpumem__guards_forget(const gpumem_resource *mr) {
  if (gpumem__debug_level() < 3)
    return;
  /* Live blocks are left where a resource does not count its own (its release could not
   * refuse); quarantined ones where the program freed to it during its last release. */
  pthread_mutex_lock(&table.lock);
  for (size_t b = 0; b < table.bucket_count; b++) {
    for (entry **at = &table.buckets[b]; *at;) {
      entry *e = *at;
      if (e->mr != mr || (e->state != LIVE && e->state != QUARANTINED)) {
        at = &e->chain;
        continue;
      }
      if (e->state == QUARANTINED) {
        quarantine_take(e);
        account_of(mr, false)->evicting--;
      }
      *at = e->chain;
      table.entries--;
      free(e);
    }
  }
  account *a = account_of(mr, false);
  if (a && a->evicting == 0)
    *a = table.accounts[--table.account_count];
  pthread_mutex_unlock(&table.lock);
}

uint64_t gpumem__guards_adjust(const gpumem_resource *mr, gpumem_query what, uint64_t value) {
  if (gpumem__debug_level() < 3 ||
      (what != GPUMEM_QUERY_LIVE_BYTES && what != GPUMEM_QUERY_LIVE_COUNT))
    return value;
  pthread_mutex_lock(&table.lock);
  const account *a = account_of(mr, false);
  uint64_t hidden = !a ? 0 : what == GPUMEM_QUERY_LIVE_BYTES ? a->hidden_bytes : a->held;
  pthread_mutex_unlock(&table.lock);
  return value > hidden ? value - hidden : 0;
}

#else
/* Level 3 is not built in: nothing here (a translation unit must declare something). */
typedef int gpumem__guards_unused;
#endif
