/* internal.h: what every part of gpumem shares: the resource struct and its table of
 * operations, error reporting, and small helpers.
 *
 * A resource is a struct whose first member is a gpumem_resource (the header below), whose
 * first member points to a static const gpumem__resource_ops table. The table is versioned
 * and append-only: a new operation goes at the end and older tables leave it NULL. */
#ifndef GPUMEM_INTERNAL_H
#define GPUMEM_INTERNAL_H

#include "gpumem.h"
#include "gpumem/sim.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define GPUMEM_LIKELY(x) __builtin_expect(!!(x), 1)
#define GPUMEM_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* For the rare paths of hot functions: kept out of line, so that the hot path does not
 * save and restore the registers they need. */
#define GPUMEM_COLD __attribute__((cold, noinline))
/* For the less common paths of hot functions that must stay fast: out of line, not cold. */
#define GPUMEM_NOINLINE __attribute__((noinline))

/* The monotonic clock, in ns: for the slow paths that time themselves. */
static inline uint64_t gpumem__now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

/* Most devices a process can address; the per-device tables are this long. */
#define GPUMEM_MAX_DEVICES 64

/* ---------------------------------------------------------------------------------------
 * Resources
 * ------------------------------------------------------------------------------------- */

/* One resource inside another (see the parts operation): how it hangs there (`role`:
 * "bin", with its size as `key`; "global"; "stream", with the stream's handle as `key`). */
typedef struct gpumem__part {
  const gpumem_resource *resource;
  const char *role; /* static */
  uint64_t key;
} gpumem__part;

typedef struct gpumem__resource_ops {
  uint32_t version; /* GPUMEM__RESOURCE_OPS_VERSION of the table's author */
  const char *kind; /* "cuda", "pool", ... : the resource's name and spec keyword */

  /* Preconditions (checked by the front end): ptr != NULL, bytes > 0, alignment a power of
   * two >= GPUMEM_DEFAULT_ALIGNMENT, bytes + alignment does not overflow. On failure *ptr
   * is untouched and the thread's error is set. */
  gpumem_status (*allocate)(gpumem_resource *self, size_t bytes, size_t alignment,
                            gpumem_stream stream, void **ptr);
  /* Preconditions: ptr != NULL, bytes > 0, alignment as for allocate. */
  gpumem_status (*deallocate)(gpumem_resource *self, void *ptr, size_t bytes, size_t alignment,
                              gpumem_stream stream);
  /* Optional numeric facts: GPUMEM_ERR_UNSUPPORTED (no message) when unknown. May be NULL. */
  gpumem_status (*query)(const gpumem_resource *self, gpumem_query what, uint64_t *out);
  /* Writes the spec of this resource (with its upstream's) into buf. */
  void (*describe)(const gpumem_resource *self, char *buf, size_t size);
  /* Frees the resource (its upstream reference is released afterwards by the caller).
   * Called only with no live allocations. If giving memory back fails, returns the failure
   * and leaves the resource valid and usable, so that its release can be tried again. */
  gpumem_status (*destroy)(gpumem_resource *self);

  /* Version 2: placement. Read only when the resource's capabilities say
   * places_at_address, and only from a table of version 2 or later. */
  /* As allocate, at exactly `addr` (a multiple of the granularity inside the range), on the
   * default stream: GPUMEM_ERR_OUT_OF_MEMORY without a message when that range is taken or
   * cannot be mapped, so that the caller can grow elsewhere. */
  gpumem_status (*allocate_at)(gpumem_resource *self, uintptr_t addr, size_t bytes, void **ptr);
  /* Unmaps [addr, addr+size), a run of whole pieces of one live allocation, after the work
   * on the default stream; the rest of the allocation stays allocated. *allocations_added
   * gets the change in the number of live allocations: -1 (the whole allocation went),
   * 0 (one end went) or +1 (the middle went: what is left is two allocations, each freed on
   * its own later). Nothing changes on failure. */
  gpumem_status (*unmap_pieces)(gpumem_resource *self, uintptr_t addr, size_t size,
                                int *allocations_added);

  /* Version 3: trim. Gives free memory the resource holds back to its upstream (see
   * gpumem_resource_trim); *released grows by the bytes given back. NULL: nothing to give
   * back (GPUMEM_ERR_UNSUPPORTED to the caller). Read only from a table of version 3 or
   * later. */
  gpumem_status (*trim)(gpumem_resource *self, size_t *released);

  /* Version 4: validation (src/core/debug.c). Checks the resource's whole structure, and
   * that of the resources inside it that are not its upstream (an arena's pools, a
   * binning resource's bins), under their locks: GPUMEM_OK, or GPUMEM_ERR_INTERNAL with a
   * message naming what is wrong. NULL: nothing of its own to check. */
  gpumem_status (*validate)(const gpumem_resource *self);

  /* Version 5: reports (src/core/report.c). The resources inside this one that are not its
   * upstream (a binning resource's bins, an arena's pools), for the walk of a report: fills
   * up to `capacity` entries of `parts` and returns how many there are (more than
   * `capacity`: call again with room for all). Borrowed: valid while self is and its parts
   * are not replaced. Takes only the locks that guard the list. NULL: none. */
  size_t (*parts)(const gpumem_resource *self, gpumem__part *parts, size_t capacity);

  /* Version 6: held pieces (placement). From hold true to hold false, the physical memory of
   * pieces that unmap_pieces and deallocate unmap is kept (still counted as reserved) rather
   * than freed, and mapping a piece of a size kept maps that memory again, so that moving
   * memory from holes to where a pool grows saves the driver's release and creation of it;
   * hold false frees what was not mapped again (calls pair up: held while any caller holds).
   * Cannot fail. NULL: nothing is held. Read only when places_at_address, from a table of
   * version 6 or later. */
  void (*hold_pieces)(gpumem_resource *self, bool hold);
} gpumem__resource_ops;

#define GPUMEM__RESOURCE_OPS_VERSION 6u

/* mr's parts into a new array (free() it), *count of them; NULL with *count 0 when it has
 * none or the host is out of memory (then *complete is false). */
gpumem__part *gpumem__parts_of(const gpumem_resource *mr, size_t *count, bool *complete);

/* What a resource can do (the contract's data, public as gpumem_resource_capabilities).
 * A resource sets it at creation; a pass-through adaptor copies its upstream's. */
typedef struct gpumem__capabilities {
  gpumem_memory_kind memory;
  bool stream_ordered;
  /* Each allocation is one that CUDA's tools know as an allocation of its own (cuMemAlloc,
   * cuMemAllocManaged, cuMemHostAlloc), so a suballocator may annotate it as a heap of
   * blocks (core/annotate.h). */
  bool annotatable;
  /* allocate_at and unmap_pieces work, with the geometry below */
  bool places_at_address;
  size_t granularity; /* addresses and sizes of placement are multiples of it */
  size_t piece_size;  /* physical memory is cut at every multiple of it from range_base */
  /* ...but that of one allocation (or allocate_at) of at least large_block_size bytes at
   * every multiple of large_piece_size (a multiple of piece_size) up to the last one inside
   * it, and at every multiple of piece_size past that; 0: never */
  size_t large_block_size, large_piece_size;
  uintptr_t range_base;
  size_t range_size;
  /* Blocks of requests of at least align_threshold bytes are aligned to align_promise
   * (0: as asked only). The aligned adaptor sets it; debug level 3's guards read it, so
   * that the pointer they hand out past a guard keeps that alignment. */
  size_t align_promise, align_threshold;
} gpumem__capabilities;

struct gpumem_resource {
  const gpumem__resource_ops *ops;
  gpumem_resource *upstream; /* retained; NULL for base resources */
  int device;                /* resolved device index */
  atomic_uint_fast64_t refcount;
  /* The device backend, cached so that the hot path needs no lookup. */
  const struct gpumem__device_ops *dev;
  gpumem__capabilities caps;
  /* A pass-through adaptor (gpumem__resource_init_pass_through): the free-memory figures it
   * answers are its upstream's, so a report judges them there. */
  bool passes_through;
};

/* Fills the header of a new resource: refcount 1, upstream retained (may be NULL). The
 * capabilities start as synchronous device memory without placement; a resource that
 * differs sets its own after this. */
void gpumem__resource_init(gpumem_resource *mr, const gpumem__resource_ops *ops, int device,
                           const struct gpumem__device_ops *dev, gpumem_resource *upstream);

/* Fills the header of a pass-through adaptor over `upstream`: its device, backend and
 * capabilities are the upstream's. Placement is forwarded only when `ops` can forward it
 * (a version 2 table with allocate_at and unmap_pieces). */
void gpumem__resource_init_pass_through(gpumem_resource *mr, const gpumem__resource_ops *ops,
                                        gpumem_resource *upstream);

/* Fills the header of a suballocator over `upstream`: the upstream's device and kind of
 * memory, stream-ordered, no placement of its own. */
void gpumem__resource_init_suballocator(gpumem_resource *mr, const gpumem__resource_ops *ops,
                                        gpumem_resource *upstream);

/* Takes placement out of mr's capabilities, keeping the rest:
 * for an adaptor that cannot keep placement's promise. */
static inline void gpumem__drop_placement(gpumem_resource *mr) {
  mr->caps.places_at_address = false;
  mr->caps.granularity = 0;
  mr->caps.piece_size = 0;
  mr->caps.large_block_size = mr->caps.large_piece_size = 0;
  mr->caps.range_base = 0;
  mr->caps.range_size = 0;
}

/* True when mr can map memory at chosen addresses: its capabilities say so and its table is
 * recent enough to have the operations. */
static inline bool gpumem__places_at_address(const gpumem_resource *mr) {
  return mr->caps.places_at_address && mr->ops->version >= 2 && mr->ops->allocate_at &&
         mr->ops->unmap_pieces;
}

/* Holds (or stops holding) the pieces mr unmaps, where it can (hold_pieces). */
static inline void gpumem__hold_pieces(gpumem_resource *mr, bool hold) {
  if (gpumem__places_at_address(mr) && mr->ops->version >= 6 && mr->ops->hold_pieces)
    mr->ops->hold_pieces(mr, hold);
}

/* The spec's retry(UPSTREAM, attempts=N): a failure callback adaptor whose callback waits
 * for the device, at most `attempts` times per allocation (src/adaptors/retry.c). */
gpumem_status gpumem__retry_create(gpumem_resource *upstream, uint64_t attempts,
                                   gpumem_resource **out);

/* ---------------------------------------------------------------------------------------
 * Errors. The thread's last error message and raw CUDA error live in thread-local storage.
 * ------------------------------------------------------------------------------------- */

/* Sets the thread's error message (printf format) and returns `status`, so that a failure
 * path reads `return gpumem__fail(GPUMEM_ERR_..., "...", ...);`. */
gpumem_status gpumem__fail(gpumem_status status, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Forgets the thread's message: for a failure that was absorbed, so that a call that goes
 * on to succeed leaves no stale message behind. */
void gpumem__clear_error(void);

/* gpumem__clear_error for a failure absorbed by design, counted: the fault sweep checks that
 * each failure it plants is reported or absorbed (tests/fault_sweep.c). */
void gpumem__absorb_error(void);
uint64_t gpumem__absorbed_errors(void);

/* A number that changes whenever the thread's message is set: equal before and after a call
 * when the call set no message. */
uint64_t gpumem__error_serial(void);

/* Prepends context to the thread's message: "<context>: <old message>". Returns status. */
gpumem_status gpumem__fail_context(gpumem_status status, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefixes the thread's message with mr's spec. Returns status. */
gpumem_status gpumem__prefix_with_spec(const gpumem_resource *mr, gpumem_status status);

/* The result of a call `mr` passed on to another resource, told as mr's: a failure gets
 * mr's spec before its message (the caller knows mr, not its insides); GPUMEM_OK passes
 * through untouched, so that a result can be handed back as it is. */
static inline gpumem_status gpumem__fail_through(const gpumem_resource *mr, gpumem_status status) {
  return GPUMEM_LIKELY(status == GPUMEM_OK) ? status : gpumem__prefix_with_spec(mr, status);
}

/* Records the raw CUresult of a failed driver call for gpumem_last_cuda_error(). */
void gpumem__set_cuda_error(int cuda_error);

/* An out-of-memory failure with the standard detail: the request, the resource, its
 * reserved and live bytes and largest free block where the resource knows them. */
gpumem_status gpumem__fail_out_of_memory(const gpumem_resource *mr, size_t bytes, const char *why);

/* Why an allocation ran out of memory, as the resource that refused it first knows: the
 * cause that an out-of-memory report's verdict starts from (src/core/report.c). */
typedef enum gpumem__oom_cause {
  GPUMEM__OOM_NONE = 0,
  GPUMEM__OOM_LIMIT,     /* a limit: a limit adaptor's, a pool's maximum, vmm's address range */
  GPUMEM__OOM_DEVICE,    /* the device (or the driver's pool) had no memory to give */
  GPUMEM__OOM_HOST,      /* host memory: bookkeeping, or pinned or pageable host memory */
  GPUMEM__OOM_TOO_LARGE, /* larger than the resource can ever serve */
  GPUMEM__OOM_INJECTED,  /* a test's injected failure */
  GPUMEM__OOM_OTHER      /* a resource gpumem cannot see into said so (a user resource) */
} gpumem__oom_cause;

typedef struct gpumem__oom_note {
  gpumem__oom_cause cause;
  const gpumem_resource *mr; /* not retained: compared only, with a walk's resources */
  uint64_t bytes;            /* asked of mr */
  uint64_t serial;           /* counts the notes of the thread */
  /* GPUMEM__OOM_OTHER: the refusing resource's own words ("" if it gave none), kept per
   * thread until the next note (at most GPUMEM__OOM_SAID_SIZE - 1 bytes); else "". */
  const char *said;
} gpumem__oom_note;

#define GPUMEM__OOM_SAID_SIZE 640

/* Notes, for this thread, that `mr` refused `bytes` for `cause`. Called where a refusal
 * starts (the resource that knows why), not where it is passed on. */
void gpumem__note_oom(gpumem__oom_cause cause, const gpumem_resource *mr, uint64_t bytes);
/* Notes a refusal by a resource gpumem cannot see into (GPUMEM__OOM_OTHER), with its own
 * words (NULL or "": none), so that the verdict can quote them whatever layer reports the
 * failure: a pool over it words its own message. A resource that passes on the refusal of
 * one beneath it gives that note's words. */
void gpumem__note_oom_said(const gpumem_resource *mr, uint64_t bytes, const char *said);
/* The thread's last note (cause GPUMEM__OOM_NONE and serial 0 when there was none). */
gpumem__oom_note gpumem__last_oom(void);

/* Replaces the thread's message with `text`, which may be longer than the fixed buffer
 * (an out-of-memory report): false, with the message unchanged, when host memory for it
 * is exhausted. */
bool gpumem__set_long_message(const char *text, size_t length);

/* The front end's out-of-memory path (src/core/report.c): appends the report of mr for the
 * request (each resource's figures, the device's, and the verdict) to the thread's
 * message. Returns GPUMEM_ERR_OUT_OF_MEMORY. */
gpumem_status gpumem__report_out_of_memory(const gpumem_resource *mr, size_t bytes,
                                           size_t alignment);

/* The resources that hold device memory from the driver (the base resources and vmm),
 * listed so that a report can say how much of a device gpumem holds in this process. Each
 * embeds a holder; add at creation, remove before anything of it is freed (and add again
 * when its destroy then fails). */
typedef struct gpumem__holder {
  struct gpumem__holder *prev, *next;
  const gpumem_resource *mr;
} gpumem__holder;
void gpumem__holder_add(gpumem__holder *holder, const gpumem_resource *mr);
void gpumem__holder_remove(gpumem__holder *holder);

/* Formats a byte count for messages: "512 B", "1.5 MiB (1572864 B)". Returns buf. */
const char *gpumem__format_bytes(uint64_t bytes, char *buf, size_t size);
/* The same without the exact figure ("1.5 MiB"), for lines that carry many figures. */
const char *gpumem__format_bytes_short(uint64_t bytes, char *buf, size_t size);

/* Writes the spec of a resource into buf (ops->describe or its kind), NUL-terminated and cut
 * at `size`. */
void gpumem__describe(const gpumem_resource *mr, char *buf, size_t size);

/* The describe of a resource over an upstream: writes "<kind>(<upstream's spec><params>)",
 * where `params` (a printf format) starts with ", " when there are any. The upstream's spec
 * is written in place, in `buf`, so that a chain of any depth is cut only by `size` (which
 * gpumem_resource_describe turns into a clear failure), never by a buffer of a layer. */
void gpumem__describe_over(const gpumem_resource *mr, char *buf, size_t size, const char *params,
                           ...) __attribute__((format(printf, 4, 5)));

/* True when mr's table has a trim operation (version 3 or later, not NULL). */
static inline bool gpumem__can_trim(const gpumem_resource *mr) {
  return mr->ops->version >= 3 && mr->ops->trim;
}

/* ---------------------------------------------------------------------------------------
 * Debug levels (src/core/debug.c). GPUMEM__DEBUG_LEVEL, set by the build (CMake option
 * GPUMEM_DEBUG_LEVEL), is the most checking compiled in: 0 none, 1 internal assertions,
 * 2 also a validation of the whole structure after every allocate, deallocate and trim of
 * the front end, 3 also guards, poison and a quarantine around every block the front end
 * hands out (src/api/guards.c). GPUMEM_DEBUG chooses the level at run time, up to that. At
 * 0 every check below is a constant false that the compiler removes: the release build
 * carries nothing.
 * ------------------------------------------------------------------------------------- */

#ifndef GPUMEM__DEBUG_LEVEL
#define GPUMEM__DEBUG_LEVEL 0
#endif

#if GPUMEM__DEBUG_LEVEL > 0
/* The level in force: GPUMEM_DEBUG, at most the compiled level; unset, 1 (assertions cost
 * little, validation is asked for). Read once. */
int gpumem__debug_level_read(void);
extern atomic_int gpumem__debug_level_value; /* -1 until read */
static inline int gpumem__debug_level(void) {
  int level = atomic_load_explicit(&gpumem__debug_level_value, memory_order_relaxed);
  return GPUMEM_LIKELY(level >= 0) ? level : gpumem__debug_level_read();
}
#else
static inline int gpumem__debug_level(void) {
  return 0;
}
#endif

/* A failed assertion: prints the message with its place and mr's spec (mr may be NULL) to
 * stderr and aborts. It is a bug in gpumem, not a misuse by the program. */
GPUMEM_COLD __attribute__((noreturn)) void gpumem__assert_fail(const gpumem_resource *mr,
                                                               const char *file, int line,
                                                               const char *condition,
                                                               const char *message);

/* Level 1: an internal assertion, cheap, about gpumem's own invariants. `mr` (may be NULL)
 * is the resource whose spec the report names. Not evaluated at all below level 1. */
#define GPUMEM__ASSERT(mr, cond, message)                                                          \
  do {                                                                                             \
    if (GPUMEM__DEBUG_LEVEL >= 1 && GPUMEM_UNLIKELY(!(cond)) && gpumem__debug_level() >= 1)        \
      gpumem__assert_fail((mr), __FILE__, __LINE__, #cond, (message));                             \
  } while (0)

/* Validates mr and every resource under it (its upstreams, and what each holds inside):
 * GPUMEM_OK, or GPUMEM_ERR_INTERNAL with the thread's message naming the resource and what
 * is wrong. Resources without a validate operation (base resources, adaptors) are passed
 * through. Takes each resource's lock in turn: callable at any time, from any thread. Built
 * at every level; tests call it directly. */
gpumem_status gpumem__validate(const gpumem_resource *mr);
/* Validates mr alone, not its upstream (for a resource validating those inside it). */
gpumem_status gpumem__validate_one(const gpumem_resource *mr);

/* Level 2: validates mr after a front-end operation (`what`, for the report) and aborts
 * with the validator's message when it fails. Only called where GPUMEM__DEBUG_LEVEL >= 2. */
void gpumem__debug_after(const gpumem_resource *mr, const char *what);

#if GPUMEM__DEBUG_LEVEL >= 3
#include <stdio.h>

/* Level 3 (src/api/guards.c): the front end's allocate and deallocate at level 3, called
 * after the argument checks (bytes > 0, alignment a power of two of at least 256). Each
 * block is asked of mr with a guard zone on each side, filled with a pattern on the stream;
 * the allocation's call stack is kept. A free checks the guards after the work on its
 * stream, poisons the block and keeps it in a bounded quarantine; a double free, a wrong
 * size or a damaged guard is GPUMEM_ERR_MISUSE with the stacks in the message (and on
 * stderr). `caller`: the public call's return address, where the program's stack starts. */
gpumem_status gpumem__guarded_allocate(gpumem_resource *mr, size_t bytes, size_t alignment,
                                       gpumem_stream stream, void **ptr, const void *caller);
gpumem_status gpumem__guarded_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                         size_t alignment, gpumem_stream stream,
                                         const void *caller);
/* Before mr's trim: checks the guards of mr's live blocks (and those of resources over it)
 * once the device is idle, and frees their quarantined blocks, checking each one's poison.
 * Reports go to stderr. */
void gpumem__guards_before_trim(gpumem_resource *mr);
/* When mr's last reference goes, before its live allocations are counted: frees mr's
 * quarantined blocks (checking their poison) and waits for those other threads are
 * freeing. A failure (mr refused to free one: it is still held) must keep mr alive. */
gpumem_status gpumem__guards_before_release(gpumem_resource *mr);
/* After mr is destroyed: forgets whatever is still recorded for it. */
void gpumem__guards_forget(const gpumem_resource *mr);
/* A live figure of mr (LIVE_BYTES, LIVE_COUNT) without the guards and the quarantined
 * blocks of the allocations made through mr, as the program counts them. */
uint64_t gpumem__guards_adjust(const gpumem_resource *mr, gpumem_query what, uint64_t value);
#endif

/* Call stacks, for level 3's reports and the tracking adaptor's (src/core/backtrace.c),
 * built at every level. */
#include <stdio.h>
/* Up to `depth` (at most 256) return addresses of the calling thread's stack into `frames`,
 * from the frame whose return address is `from` outwards (the program's frames, when `from`
 * is the return address of the call it made into gpumem; not found or NULL: from this
 * function's caller on). Returns how many. glibc's backtrace(): a walk of the unwind
 * tables, a microsecond or two. */
int gpumem__backtrace(void **frames, int depth, const void *from);
/* One frame: "name+0x1c" and, with `module`, " (module)"; or "module+0x2f10" for a function
 * the dynamic symbol table does not name (addr2line reads it); or the bare address. */
void gpumem__format_frame(void *address, bool module, char *buf, size_t size);
#define GPUMEM__STACK_DEPTH 16
typedef struct gpumem__stack {
  void *frames[GPUMEM__STACK_DEPTH];
  int depth;
} gpumem__stack;
/* The stack from the frame whose return address is `from` outwards, as gpumem__backtrace. */
void gpumem__stack_capture(gpumem__stack *stack, const void *from);
/* One line, at most `frames` frames: "name+0x1c < name+0x55 < module+0x2f10" (a frame
 * whose function the dynamic linker does not name shows as its module and offset, which
 * addr2line reads). Returns buf. */
const char *gpumem__stack_line(const gpumem__stack *stack, int frames, char *buf, size_t size);
/* Writes the stack to `out`, a frame a line, each line starting with `indent`. */
void gpumem__stack_print(const gpumem__stack *stack, FILE *out, const char *indent);

/* ---------------------------------------------------------------------------------------
 * Sizes
 * ------------------------------------------------------------------------------------- */

/* Raises a peak counter shared by threads without a lock to at least `value`. */
static inline void gpumem__atomic_raise(atomic_uint_fast64_t *peak, uint64_t value) {
  uint64_t seen = atomic_load_explicit(peak, memory_order_relaxed);
  while (value > seen && !atomic_compare_exchange_weak_explicit(
                             peak, &seen, value, memory_order_relaxed, memory_order_relaxed)) {
  }
}

static inline bool gpumem__is_pow2(size_t x) {
  return x != 0 && (x & (x - 1)) == 0;
}

/* Rounds up to a multiple of `align` (a power of two); the caller excludes overflow. */
static inline size_t gpumem__align_up(size_t x, size_t align) {
  return (x + align - 1) & ~(align - 1);
}

/* Parses "1GiB", "512M", "100" (bytes), "50%" (of `percent_of`). Returns false on a bad
 * string; *consumed (if not NULL) receives the characters read. */
bool gpumem__parse_size(const char *text, uint64_t percent_of, uint64_t *out, size_t *consumed);

/* ---------------------------------------------------------------------------------------
 * Environment options: one table, read once (src/core/options.c).
 * ------------------------------------------------------------------------------------- */

typedef enum gpumem__option {
  GPUMEM__OPT_DEVICE,       /* GPUMEM_DEVICE: cuda | sim */
  GPUMEM__OPT_RESOURCE,     /* GPUMEM_RESOURCE: spec of every device's default resource */
  GPUMEM__OPT_VERBOSE,      /* GPUMEM_VERBOSE: print settings at initialization */
  GPUMEM__OPT_SIM_DEVICES,  /* GPUMEM_SIM_DEVICES */
  GPUMEM__OPT_SIM_MEMORY,   /* GPUMEM_SIM_MEMORY */
  GPUMEM__OPT_SIM_PAGEABLE, /* GPUMEM_SIM_PAGEABLE */
  GPUMEM__OPT_SIM_VMM,      /* GPUMEM_SIM_VMM */
  GPUMEM__OPT_SIM_HAZARD,   /* GPUMEM_SIM_HAZARD: count | abort | off */
  /* GPUMEM_SIM_MANAGED_POOLS */
  GPUMEM__OPT_SIM_MANAGED_POOLS,
  GPUMEM__OPT_SIM_VMM_CALL_US, /* GPUMEM_SIM_VMM_CALL_US: time each vmm call takes */
  GPUMEM__OPT_DEBUG,           /* GPUMEM_DEBUG: 0 to 3, up to the compiled level */
  GPUMEM__OPT_DEBUG_EVERY,     /* GPUMEM_DEBUG_EVERY: at level 2, validate every N-th call */
  /* GPUMEM_DEBUG_QUARANTINE and _BLOCKS: level 3's quarantine, in bytes and in blocks */
  GPUMEM__OPT_DEBUG_QUARANTINE,
  GPUMEM__OPT_DEBUG_QUARANTINE_BLOCKS,
  GPUMEM__OPT_LOG_FILE,   /* GPUMEM_LOG_FILE: log default resources; logs' default file */
  GPUMEM__OPT_BIAS_AGAIN, /* GPUMEM_BIAS_AGAIN: 0: a revoked lock is never biased again */
  GPUMEM__OPT_COUNT
} gpumem__option;

/* The option's value from the environment, or NULL when unset or empty. */
const char *gpumem__option_string(gpumem__option option);
/* The option as a size (suffixes accepted) or `fallback` when unset or unreadable. */
uint64_t gpumem__option_size(gpumem__option option, uint64_t fallback);

#endif /* GPUMEM_INTERNAL_H */
