/* sim_internal.h: what the files of the simulated device share, and nothing else includes.
 *
 * The simulated device is split by subject: sim.c (state, configuration, device queries,
 * fault injection, the public controls and the table), sim_memory.c (device, managed and
 * pinned memory, the registry of allocations, driver pools), sim_vmm.c (virtual memory
 * reserve and map) and sim_stream.c (streams, events, copies, simulated kernels, hazard
 * detection). All of their state lives in one struct behind one mutex: every function
 * declared here expects the caller to hold gpumem__sim.lock unless its comment says
 * otherwise. */
#ifndef GPUMEM_SIM_INTERNAL_H
#define GPUMEM_SIM_INTERNAL_H

#include "device/device.h"

#include <pthread.h>

/* The mapping granularity of virtual memory, as CUDA reports for current GPUs. */
#define GPUMEM__SIM_GRANULARITY ((size_t)2 << 20)

/* CUresult values the sim reports through gpumem__set_cuda_error. */
#define GPUMEM__SIM_CUDA_INVALID_VALUE 1
#define GPUMEM__SIM_CUDA_OUT_OF_MEMORY 2
#define GPUMEM__SIM_CUDA_UNKNOWN 999

/* ---------------------------------------------------------------------------------------
 * Sorted arrays keyed by 64-bit numbers (addresses, handles, stream ids): lookups by binary
 * search, so that "which allocation contains this address" costs O(log n).
 * ------------------------------------------------------------------------------------- */

typedef struct sim_entry {
  uint64_t key;
  union {
    void *ptr;    /* indexes of objects */
    uint64_t num; /* vector clocks: a sequence number */
  } value;
} sim_entry;

typedef struct sim_index {
  sim_entry *items;
  size_t count, capacity;
} sim_index;

/* The object stored under exactly `key`, or NULL. */
void *gpumem__sim_index_get(const sim_index *index, uint64_t key);
/* The object a handle given to the simulated device names: *out and GPUMEM_OK, or
 * INVALID_ARGUMENT saying that `handle` is not `what` ("a stream") of the simulated
 * device, for `call`. */
gpumem_status gpumem__sim_find_handle(const sim_index *index, const char *call, const char *what,
                                      const void *handle, void **out);
/* The object with the greatest key <= `key`, or NULL. */
void *gpumem__sim_index_floor(const sim_index *index, uint64_t key);
/* Makes room for `extra` more entries, so that the inserts after it cannot fail; false
 * when host memory is exhausted (the index is unchanged). */
bool gpumem__sim_index_reserve(sim_index *index, size_t extra);
/* Inserts or replaces; false when host memory is exhausted (the index is unchanged). */
bool gpumem__sim_index_put(sim_index *index, uint64_t key, void *ptr);
void gpumem__sim_index_remove(sim_index *index, uint64_t key);
void gpumem__sim_index_clear(sim_index *index);

/* A vector clock is an index from stream id to sequence number: "work enqueued on this
 * stream from now on is ordered after that stream's operations up to this number". */
uint64_t gpumem__sim_clock_get(const sim_index *clock, uint64_t stream_id);
/* Raises the entry to at least `seq`; false when host memory is exhausted. */
bool gpumem__sim_clock_raise(sim_index *clock, uint64_t stream_id, uint64_t seq);

/* ---------------------------------------------------------------------------------------
 * Allocations: every range the sim handed out, in one registry sorted by address.
 * ------------------------------------------------------------------------------------- */

typedef enum sim_mem_kind {
  SIM_MEM_DEVICE,  /* mem_alloc */
  SIM_MEM_MANAGED, /* managed_alloc */
  SIM_MEM_HOST,    /* host_alloc (pinned) */
  SIM_MEM_POOL,    /* a block of a driver pool, live or cached */
  SIM_MEM_VMM      /* a virtual address reservation; its mappings live in sim_vmm.c */
} sim_mem_kind;

struct sim_pool;

typedef struct sim_alloc {
  uintptr_t base;
  size_t size;    /* the usable range: the request rounded up to 256 bytes */
  size_t backing; /* length of the host mapping behind it; 0 when from aligned_alloc */
  sim_mem_kind kind;
  int device;
  bool managed; /* managed memory: a managed_alloc block, or one of a pool of managed memory */
  /* Driver pool blocks only. A cached block was freed with free_async on stream
   * `free_stream` after that stream's operation number `free_point`. */
  struct sim_pool *pool;
  struct sim_alloc *pool_prev, *pool_next;
  bool cached;
  uint64_t free_stream, free_point;
} sim_alloc;

const char *gpumem__sim_kind_name(sim_mem_kind kind);

/* The allocation whose range contains `address`, or NULL. */
sim_alloc *gpumem__sim_find_allocation(uintptr_t address);

/* Checks a range an operation touches: either it lies outside all sim allocations (host
 * memory) and *alloc is NULL, or it lies fully inside one, which goes to *alloc (inside a
 * reservation it must also be mapped and accessible). GPUMEM_ERR_INVALID_ARGUMENT with a
 * message naming `call` and `role` otherwise. */
gpumem_status gpumem__sim_check_range(const char *call, const char *role, const void *ptr,
                                      size_t bytes, sim_alloc **alloc);

/* Adds a range to the registry; NULL when host memory is exhausted. */
sim_alloc *gpumem__sim_register(sim_mem_kind kind, int device, uintptr_t base, size_t size,
                                size_t backing);
/* Removes it from the registry and frees the record (not the memory). */
void gpumem__sim_unregister(sim_alloc *alloc);

/* Counts `bytes` against the device's capacity: GPUMEM_ERR_OUT_OF_MEMORY (cuda error 2)
 * with a message naming `what` when they do not fit. */
gpumem_status gpumem__sim_charge_device(int device, size_t bytes, const char *what);
void gpumem__sim_refund_device(int device, size_t bytes);

/* After a stream or event synchronization on `device`: the device's driver pools give back
 * cached blocks above their release threshold (those whose free has completed). */
void gpumem__sim_apply_release_thresholds(int device);

/* sim_vmm.c: the range [address, address + bytes) inside a reservation is covered by
 * mappings made accessible; GPUMEM_ERR_INVALID_ARGUMENT with a message otherwise. */
gpumem_status gpumem__sim_vmm_check_access(const char *call, uintptr_t address, size_t bytes);

/* ---------------------------------------------------------------------------------------
 * Streams and their pending work (sim_stream.c).
 * ------------------------------------------------------------------------------------- */

typedef struct sim_op sim_op;

typedef struct sim_stream {
  uint64_t id; /* never reused */
  int device;
  bool is_default;
  uint64_t enqueued;  /* sequence number of the last operation enqueued */
  uint64_t completed; /* sequence number of the last operation run */
  sim_op *head, *tail;
  uint64_t touching; /* pending operations that touch memory (all but waits) */
  sim_index clock;
} sim_stream;

/* A new stream of `device` (not yet registered); NULL when host memory is exhausted. */
sim_stream *gpumem__sim_stream_new(int device, bool is_default);
/* Registers a stream in both stream indexes; false when host memory is exhausted. */
bool gpumem__sim_stream_register(sim_stream *stream);

/* The stream a handle stands for: the current device's default stream for NULL and the
 * legacy and per-thread handles. GPUMEM_ERR_INVALID_ARGUMENT for an unknown handle. */
gpumem_status gpumem__sim_resolve_stream(const char *call, gpumem_stream handle,
                                         sim_stream **stream);
/* As gpumem__sim_resolve_stream, but a special stream means `device`'s default stream. */
gpumem_status gpumem__sim_resolve_stream_of(const char *call, int device, gpumem_stream handle,
                                            sim_stream **stream);

/* Whether the stream with that id has run its work up to `point` (a stream that no longer
 * exists has run everything: destroying a stream runs its work). */
bool gpumem__sim_stream_reached(uint64_t stream_id, uint64_t point);

/* Runs the stream's pending work up to sequence number `point`, first running the work of
 * other streams it waits for. */
void gpumem__sim_run_until(sim_stream *stream, uint64_t point);
/* Runs all pending work of every stream of `device`. */
void gpumem__sim_run_device(int device);
gpumem_status gpumem__sim_device_synchronize(int device);
gpumem_status gpumem__sim_pointer_is_managed(const void *ptr, int *managed);
/* Runs pending work until no operation touching [lo, hi) is left: called before host
 * memory is given back, so that no queued operation later touches freed memory. */
void gpumem__sim_drain_range(uintptr_t lo, uintptr_t hi);

/* ---------------------------------------------------------------------------------------
 * The state.
 * ------------------------------------------------------------------------------------- */

/* What each kind of vmm call takes, in ns (GPUMEM_SIM_VMM_CALL_US). */
typedef struct sim_vmm_costs {
  uint64_t create_ns, destroy_ns, map_ns, set_access_ns, unmap_ns;
  bool per_mapping; /* setting access and unmapping: for each mapping in the range */
} sim_vmm_costs;

typedef struct sim_state {
  pthread_mutex_t lock;
  int device_count;
  uint64_t capacity;      /* bytes of device memory per device */
  uint64_t managed_limit; /* bytes of managed memory per device (host memory bound) */
  bool pageable_access;
  bool vmm_supported;
  bool managed_pools; /* default pools of managed memory (CUDA 13) */
  bool abort_on_hazard;
  /* What each vmm call (create, destroy, map, unmap, access) takes, spent outside the lock
   * as a thread blocked in the driver spends it: a policy bounded by time, as a pool's
   * release of holes, meets the driver's cost. Setting access and unmapping cost theirs for
   * each mapping in the range where `per_mapping`, as a GPU's driver charges. */
  sim_vmm_costs vmm_costs;
  uint64_t used[GPUMEM_MAX_DEVICES];         /* device memory in use */
  uint64_t managed_used[GPUMEM_MAX_DEVICES]; /* managed memory in use */
  sim_stream *default_stream[GPUMEM_MAX_DEVICES];
  sim_index allocations;       /* base address -> sim_alloc */
  sim_index streams_by_handle; /* handle value -> sim_stream */
  sim_index streams_by_id;     /* id -> sim_stream */
  sim_index events;            /* handle value -> sim_event */
  sim_index pools;             /* handle value -> sim_pool */
  sim_index vmm_handles;       /* handle -> physical allocation */
  sim_index mappings;          /* virtual address -> mapping */
  /* Each device's default pool of managed memory, made on first use (also in pools). */
  struct sim_pool *managed_pool[GPUMEM_MAX_DEVICES];
  uint64_t next_stream_id;
  uint64_t next_vmm_handle;
  uint64_t calls[GPUMEM_SIM_CALL_KIND_COUNT];
  uint64_t fail_at[GPUMEM_SIM_CALL_KIND_COUNT]; /* call number that fails; 0: none */
  _Atomic uint64_t hazards;
} sim_state;

extern sim_state gpumem__sim;

/* The calling thread's current device (set_device), 0 by default. Needs no lock. */
int gpumem__sim_current_device(void);

/* Checks a device index: GPUMEM_ERR_INVALID_DEVICE with a message naming `call`. */
gpumem_status gpumem__sim_check_device(const char *call, int device);

/* Counts a call of `kind` and fails it when fault injection asks: allocations as
 * GPUMEM_ERR_OUT_OF_MEMORY (cuda error 2), others as GPUMEM_ERR_CUDA (cuda error 999). */
gpumem_status gpumem__sim_enter(gpumem_sim_call kind);

/* GPUMEM_OK when the simulated device is the backend in use; else
 * GPUMEM_ERR_UNSUPPORTED with a message naming `function`. Call without the lock. */
gpumem_status gpumem__sim_require(const char *function);

/* ---------------------------------------------------------------------------------------
 * The entries of the device table, by file.
 * ------------------------------------------------------------------------------------- */

/* sim_memory.c */
gpumem_status gpumem__sim_mem_alloc(int device, size_t bytes, void **ptr);
gpumem_status gpumem__sim_mem_free(int device, void *ptr);
gpumem_status gpumem__sim_managed_alloc(int device, size_t bytes, void **ptr);
gpumem_status gpumem__sim_managed_free(int device, void *ptr);
gpumem_status gpumem__sim_advise(void *ptr, size_t bytes, unsigned advice, int device);
gpumem_status gpumem__sim_host_alloc(int device, size_t bytes, unsigned flags, void **ptr);
gpumem_status gpumem__sim_host_free(int device, void *ptr);
gpumem_status gpumem__sim_pool_create(int device, gpumem_ipc_handle ipc, gpumem__mempool *pool);
gpumem_status gpumem__sim_pool_destroy(int device, gpumem__mempool pool);
gpumem_status gpumem__sim_pool_set_release_threshold(gpumem__mempool pool, uint64_t bytes);
gpumem_status gpumem__sim_pool_reserved(gpumem__mempool pool, uint64_t *bytes);
gpumem_status gpumem__sim_pool_trim(gpumem__mempool pool, size_t keep);
/* Bytes the device's default pool of managed memory keeps cached (freed blocks it has not
 * released). Called with the simulator's lock held. */
uint64_t gpumem__sim_managed_pool_cached(int device);
gpumem_status gpumem__sim_pool_alloc_async(int device, gpumem__mempool pool, size_t bytes,
                                           gpumem_stream stream, void **ptr);
gpumem_status gpumem__sim_free_async(void *ptr, gpumem_stream stream);
gpumem_status gpumem__sim_pool_default_managed(int device, gpumem__mempool *pool);

/* sim_vmm.c */
/* Sets what each vmm call takes: `call_us` for every call, or with `h200` what an H200
 * charged. The caller holds the lock, before any call. */
void gpumem__sim_vmm_costs(bool h200, uint64_t call_us);
gpumem_status gpumem__sim_vmm_reserve(int device, size_t bytes, size_t alignment, void **va);
gpumem_status gpumem__sim_vmm_release(void *va, size_t bytes);
gpumem_status gpumem__sim_vmm_create(int device, size_t bytes, gpumem__vmm_handle *handle);
gpumem_status gpumem__sim_vmm_destroy(gpumem__vmm_handle handle);
gpumem_status gpumem__sim_vmm_map(void *va, size_t bytes, gpumem__vmm_handle handle);
gpumem_status gpumem__sim_vmm_set_access(void *va, size_t bytes, int device);
gpumem_status gpumem__sim_vmm_unmap(void *va, size_t bytes);

/* sim_stream.c */
gpumem_status gpumem__sim_stream_device(gpumem_stream stream, int *device);
gpumem_status gpumem__sim_prefetch(void *ptr, size_t bytes, int device, gpumem_stream stream);
gpumem_status gpumem__sim_stream_create(int device, gpumem_stream *stream);
gpumem_status gpumem__sim_stream_destroy(gpumem_stream stream);
gpumem_status gpumem__sim_stream_synchronize(gpumem_stream stream);
gpumem_status gpumem__sim_stream_query(gpumem_stream stream);
gpumem_status gpumem__sim_event_create(int device, gpumem__event *event);
gpumem_status gpumem__sim_event_destroy(gpumem__event event);
gpumem_status gpumem__sim_event_record(int device, gpumem__event event, gpumem_stream stream);
gpumem_status gpumem__sim_event_query(gpumem__event event);
gpumem_status gpumem__sim_event_synchronize(gpumem__event event);
gpumem_status gpumem__sim_stream_wait_event(int device, gpumem_stream stream, gpumem__event event);
gpumem_status gpumem__sim_memcpy_async(void *dst, const void *src, size_t bytes,
                                       gpumem_stream stream);
gpumem_status gpumem__sim_memset_async(void *dst, unsigned char value, size_t bytes,
                                       gpumem_stream stream);
void gpumem__sim_note_handout(void *ptr, size_t bytes, gpumem_stream stream);

#endif /* GPUMEM_SIM_INTERNAL_H */
