/* gpumem.h: the public C interface of gpumem, a GPU memory manager.
 *
 * A program creates memory resources (a plain CUDA allocator, managed memory, the driver's
 * own pool, pinned host memory, ...), composes them (adaptors wrap an upstream resource),
 * makes one the current resource of a device, and allocates stream-ordered memory from it.
 * Every fallible call returns a gpumem_status; results go to out-parameters, which a failed
 * call leaves untouched, and gpumem_last_error_message() tells what went wrong on this
 * thread.
 *
 * The library links no CUDA library: it loads the CUDA driver at run time, or runs on a
 * simulated device (GPUMEM_DEVICE=sim, see gpumem/sim.h) where there is no GPU.
 *
 * Thread safety: every function may be called from any thread, and resources may be shared
 * between threads, unless its comment says otherwise. */
#ifndef GPUMEM_H
#define GPUMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header: the one source of gpumem's version. CMakeLists.txt (the
 * library's SOVERSION, the CMake package, gpumem.pc) and setup.py (the Python package) read
 * these three lines; CHANGELOG.md says what each version changed. */
#define GPUMEM_VERSION_MAJOR 0
#define GPUMEM_VERSION_MINOR 1
#define GPUMEM_VERSION_PATCH 0
/* One number that orders versions: 1.2.3 is 10203. */
#define GPUMEM_VERSION_NUMBER                                                                      \
  (GPUMEM_VERSION_MAJOR * 10000 + GPUMEM_VERSION_MINOR * 100 + GPUMEM_VERSION_PATCH)

#if defined(GPUMEM_STATIC_DEFINE)
#define GPUMEM_API
#elif defined(__GNUC__)
#define GPUMEM_API __attribute__((visibility("default")))
#else
#define GPUMEM_API
#endif

/* ---------------------------------------------------------------------------------------
 * Status codes
 * ------------------------------------------------------------------------------------- */

/* X(name, value, message). GPUMEM_OK is 0; values are stable and never reused. */
#define GPUMEM_STATUS_TABLE(X)                                                                     \
  X(GPUMEM_OK, 0, "success")                                                                       \
  X(GPUMEM_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                            \
  X(GPUMEM_ERR_OUT_OF_MEMORY, 2, "out of memory")                                                  \
  X(GPUMEM_ERR_UNSUPPORTED, 3, "not supported by this resource or device")                         \
  X(GPUMEM_ERR_MISUSE, 4, "misuse (double free, foreign pointer, wrong size, live memory)")        \
  X(GPUMEM_ERR_NO_DRIVER, 5, "no CUDA driver could be loaded")                                     \
  X(GPUMEM_ERR_NO_DEVICE, 6, "no CUDA device is present")                                          \
  X(GPUMEM_ERR_INVALID_DEVICE, 7, "invalid device index")                                          \
  X(GPUMEM_ERR_INVALID_STREAM, 8, "stream belongs to another device")                              \
  X(GPUMEM_ERR_CUDA, 9, "CUDA driver call failed")                                                 \
  X(GPUMEM_ERR_INJECTED_FAULT, 10, "failure injected for testing")                                 \
  X(GPUMEM_ERR_NOT_READY, 11, "work not complete yet")                                             \
  X(GPUMEM_ERR_INTERNAL, 12, "internal error")                                                     \
  X(GPUMEM_ERR_CALLBACK, 13, "a user-supplied function failed")                                    \
  X(GPUMEM_ERR_IO, 14, "a file could not be opened or written")

typedef enum gpumem_status {
#define GPUMEM_STATUS_ENUM_(name, value, message) name = value,
  GPUMEM_STATUS_TABLE(GPUMEM_STATUS_ENUM_)
#undef GPUMEM_STATUS_ENUM_
} gpumem_status;

/* The enumerator's name ("GPUMEM_ERR_OUT_OF_MEMORY"); "GPUMEM_STATUS_UNKNOWN" for values
 * outside the table. Never NULL; the string is static. */
GPUMEM_API const char *gpumem_status_name(gpumem_status status);

/* A one-line description of the status ("out of memory"). Never NULL; static. */
GPUMEM_API const char *gpumem_status_string(gpumem_status status);

/* The message of the last failed call on this thread, with its detail (the request, the
 * resource, what it holds); "" when no call on this thread has failed yet. The string
 * belongs to the thread and stays valid until its next failed gpumem call. */
GPUMEM_API const char *gpumem_last_error_message(void);

/* The raw CUresult of the last failed CUDA driver call made for this thread's gpumem
 * calls (0 when none failed). Meaningful when a call returned GPUMEM_ERR_CUDA or an error
 * that came from the driver. */
GPUMEM_API int gpumem_last_cuda_error(void);

/* The version of the library running the program, as "MAJOR.MINOR.PATCH" ("0.1.0"), which
 * may differ from the header a program was compiled with when it loads another libgpumem.
 * Never NULL; the string is static. Needs no initialization. */
GPUMEM_API const char *gpumem_version(void);

/* The same version as one number, GPUMEM_VERSION_NUMBER of the library's header: a program
 * may compare it with the GPUMEM_VERSION_NUMBER it was compiled with. */
GPUMEM_API int gpumem_version_number(void);

/* ---------------------------------------------------------------------------------------
 * Types
 * ------------------------------------------------------------------------------------- */

/* A CUDA stream: the same value as a CUstream or cudaStream_t. NULL is the legacy default
 * stream of the current device. */
typedef struct CUstream_st *gpumem_stream;

/* A memory resource. Opaque, reference counted. */
typedef struct gpumem_resource gpumem_resource;

/* A stream-ordered device buffer (see "Device buffer" below). Opaque. */
typedef struct gpumem_buffer gpumem_buffer;

/* The device index of "the current device of the calling thread" where a function takes a
 * device. */
#define GPUMEM_CURRENT_DEVICE (-1)

/* The alignment every allocation has at least. */
#define GPUMEM_DEFAULT_ALIGNMENT ((size_t)256)

/* ---------------------------------------------------------------------------------------
 * Devices and the device backend
 * ------------------------------------------------------------------------------------- */

typedef enum gpumem_backend {
  GPUMEM_BACKEND_DEFAULT = 0, /* GPUMEM_DEVICE from the environment, else cuda */
  GPUMEM_BACKEND_CUDA = 1,    /* the CUDA driver, loaded at run time */
  GPUMEM_BACKEND_SIM = 2      /* the simulated device in host memory (gpumem/sim.h) */
} gpumem_backend;

/* Chooses the device backend. Must come before any other gpumem call that touches a
 * device; afterwards only the backend already in use is accepted.
 * Returns GPUMEM_ERR_INVALID_ARGUMENT for an unknown value, GPUMEM_ERR_MISUSE when another
 * backend is already in use. */
GPUMEM_API gpumem_status gpumem_select_backend(gpumem_backend backend);

/* The backend in use, initializing it if needed: "cuda" or "sim". Never NULL. */
GPUMEM_API const char *gpumem_backend_name(void);

/* Initializes the backend now (otherwise the first call that needs it does). Returns
 * GPUMEM_ERR_NO_DRIVER or GPUMEM_ERR_NO_DEVICE, with a message naming GPUMEM_DEVICE=sim,
 * where no GPU can be used. */
GPUMEM_API gpumem_status gpumem_init(void);

GPUMEM_API gpumem_status gpumem_device_count(int *count);

/* The current device of the calling thread: the device of the CUDA context current on the
 * thread, or 0 when none is. */
GPUMEM_API gpumem_status gpumem_get_device(int *device);

/* Makes `device` current on the calling thread (its primary context, as cudaSetDevice). */
GPUMEM_API gpumem_status gpumem_set_device(int device);

/* Free and total bytes of a device's memory. `device` may be GPUMEM_CURRENT_DEVICE. */
GPUMEM_API gpumem_status gpumem_device_memory_info(int device, size_t *free_bytes,
                                                   size_t *total_bytes);

/* The device's name, NUL-terminated and truncated to `size` bytes. */
GPUMEM_API gpumem_status gpumem_device_name(int device, char *name, size_t size);

/* The effective settings (backend, environment options) as text, one "name=value" a line.
 * The string is static and built once. Setting GPUMEM_VERBOSE=1 prints it to stderr at
 * initialization. GPUMEM_DEBUG's line names the debug level built in (docs/reference.md "Debug
 * levels"), the most that GPUMEM_DEBUG can choose. */
GPUMEM_API const char *gpumem_settings(void);

/* ---------------------------------------------------------------------------------------
 * Allocation through a resource
 * ------------------------------------------------------------------------------------- */

/* Allocates `bytes` bytes aligned to GPUMEM_DEFAULT_ALIGNMENT, usable at once by work
 * enqueued on `stream` after this call. `bytes` == 0 succeeds with *ptr = NULL.
 * Returns GPUMEM_ERR_INVALID_ARGUMENT (NULL mr or ptr, size overflow),
 * GPUMEM_ERR_OUT_OF_MEMORY (message: request, resource, what it holds, then the report of
 * gpumem_resource_report ending with its verdict line), GPUMEM_ERR_INVALID_STREAM, or an
 * upstream failure. *ptr is untouched on failure. */
GPUMEM_API gpumem_status gpumem_allocate(gpumem_resource *mr, size_t bytes, gpumem_stream stream,
                                         void **ptr);

/* As gpumem_allocate with an alignment: a power of two (else GPUMEM_ERR_INVALID_ARGUMENT);
 * below 256 means 256. A resource that cannot give the alignment says
 * GPUMEM_ERR_UNSUPPORTED (fixed_size, above 256). */
GPUMEM_API gpumem_status gpumem_allocate_aligned(gpumem_resource *mr, size_t bytes,
                                                 size_t alignment, gpumem_stream stream,
                                                 void **ptr);

/* Frees memory from gpumem_allocate: it becomes free once the work already enqueued on
 * `stream` is done; the caller does not synchronize. `bytes` must be the size allocated.
 * NULL ptr is a no-op. Returns GPUMEM_ERR_MISUSE for a pointer the resource did not give
 * (or gave and already took back) or a wrong size, where the resource can know; the
 * resource is unchanged then. */
GPUMEM_API gpumem_status gpumem_deallocate(gpumem_resource *mr, void *ptr, size_t bytes,
                                           gpumem_stream stream);

/* As gpumem_deallocate for memory from gpumem_allocate_aligned with that alignment. */
GPUMEM_API gpumem_status gpumem_deallocate_aligned(gpumem_resource *mr, void *ptr, size_t bytes,
                                                   size_t alignment, gpumem_stream stream);

/* ---------------------------------------------------------------------------------------
 * Resources: life and facts
 * ------------------------------------------------------------------------------------- */

/* Adds a reference. Accepts NULL. Returns mr. */
GPUMEM_API gpumem_resource *gpumem_resource_retain(gpumem_resource *mr);

/* Drops a reference; the last one destroys the resource and releases its upstreams.
 * Accepts NULL (GPUMEM_OK). If the resource still has live allocations at its last
 * release, it is not destroyed (memory in use is never freed): the call returns
 * GPUMEM_ERR_MISUSE with a message that counts them, and the resource stays alive. */
GPUMEM_API gpumem_status gpumem_resource_release(gpumem_resource *mr);

/* The resource's name: its kind ("cuda", "pool", ...). Never NULL; valid while mr is. */
GPUMEM_API const char *gpumem_resource_name(const gpumem_resource *mr);

/* The spec that builds an equal resource, e.g. "faulty(cuda, fail_at=3)", written whole
 * into `buf`, NUL-terminated. A buffer too small for it: GPUMEM_ERR_INVALID_ARGUMENT, with
 * the size needed in the message, and `buf` untouched (a spec is never cut short). */
GPUMEM_API gpumem_status gpumem_resource_describe(const gpumem_resource *mr, char *buf,
                                                  size_t size);

/* The device the resource allocates for (host-memory resources answer the device they
 * were created on). */
GPUMEM_API int gpumem_resource_device(const gpumem_resource *mr);

typedef enum gpumem_query {
  GPUMEM_QUERY_LIVE_BYTES = 1,     /* bytes allocated and not yet freed through mr */
  GPUMEM_QUERY_LIVE_COUNT = 2,     /* allocations not yet freed */
  GPUMEM_QUERY_RESERVED_BYTES = 3, /* bytes held from upstream (or the driver) */
  GPUMEM_QUERY_PEAK_LIVE_BYTES = 4,
  GPUMEM_QUERY_PEAK_RESERVED_BYTES = 5,
  GPUMEM_QUERY_LARGEST_FREE_BLOCK = 6, /* suballocators */
  GPUMEM_QUERY_FREE_BLOCKS = 7,        /* suballocators */
  GPUMEM_QUERY_FREE_BYTES = 8,         /* suballocators: reserved bytes not in live blocks */
  GPUMEM_QUERY_LIMIT_BYTES = 9,        /* most bytes allocated through it (limit adaptor) */
  GPUMEM_QUERY_MAX_RESERVED_BYTES = 10 /* most bytes held from upstream (pool's maximum) */
} gpumem_query;

/* Reads a numeric fact. Returns GPUMEM_ERR_UNSUPPORTED when the resource does not know it
 * (*out untouched). Cheap: never walks the free lists unless the fact is about them. */
GPUMEM_API gpumem_status gpumem_resource_query(const gpumem_resource *mr, gpumem_query what,
                                               uint64_t *out);

/* Where memory goes (docs/reports.md). The report of mr for a request of `bytes` at
 * `alignment` (0: 256), as text: a line per resource of mr's tree (its upstreams, and what
 * it holds inside: a binning resource's bins, an arena's pools), indented by depth, with the
 * figures it knows (live, reserved and peak bytes, free bytes and blocks, the largest free
 * block, a limit or maximum); a line on the device (free and total memory, and how much of
 * it gpumem's resources in this process hold); and a last line
 * "verdict: WORD: why", WORD one of fragmentation (enough free bytes, no block large
 * enough), limit_reached, device_full, host_failure, too_large, injected, unexplained, or
 * none (nothing in the figures stops the request; also with `bytes` 0). The message of an
 * out-of-memory failure of gpumem_allocate ends with this report (its verdict starting from
 * what the refusing resource said). The report is written whole into `buf`, NUL-terminated,
 * and *needed (may be NULL) gets the size it took with its NUL. A buffer too small (buf NULL
 * with size 0 asks for the size): GPUMEM_ERR_INVALID_ARGUMENT, `buf` untouched, and the
 * size needed in *needed and in the message; figures move while other threads allocate, so
 * leave room when calling again. Reads each resource under the locks its queries take. */
GPUMEM_API gpumem_status gpumem_resource_report(const gpumem_resource *mr, size_t bytes,
                                                size_t alignment, char *buf, size_t size,
                                                size_t *needed);

/* The same walk as JSON (a "gpumem.stats" document, version 1; docs/reports.md names every
 * key): every node of mr's tree with all its figures (null where unknown), and the device's.
 * Buffer, *needed and errors as gpumem_resource_report. */
GPUMEM_API gpumem_status gpumem_resource_stats_json(const gpumem_resource *mr, char *buf,
                                                    size_t size, size_t *needed);

/* Gives free memory the resource holds back to its upstream, as gpumem_pool_trim does for a
 * pool: a pool's whole free chunks (and over vmm its whole free pieces); an arena's free
 * superblocks, from its streams' pools to its global pool, and then the global pool's; the
 * free chunks of the bins a binning resource made (not of the bins the program added) and
 * of a fixed_size resource. The upstream keeps what it gets: trim it too to give memory back
 * further down. Synchronizes the device first, so that blocks freed on any stream count as
 * free. *released (may be NULL) receives the bytes given back, also when a driver call fails
 * part way (what went back before the failure stays given back). Returns
 * GPUMEM_ERR_UNSUPPORTED for a resource that keeps no free memory (base resources,
 * adaptors). */
GPUMEM_API gpumem_status gpumem_resource_trim(gpumem_resource *mr, size_t *released);

/* The resource an adaptor or suballocator draws from (borrowed: valid while mr is).
 * Returns GPUMEM_ERR_UNSUPPORTED for a base resource. */
GPUMEM_API gpumem_status gpumem_resource_upstream(const gpumem_resource *mr,
                                                  gpumem_resource **upstream);

/* The kind of memory a resource hands out. */
typedef enum gpumem_memory_kind {
  GPUMEM_MEMORY_DEVICE = 0,      /* device memory: cuda, async, vmm and what is built on them */
  GPUMEM_MEMORY_MANAGED = 1,     /* managed memory, pages moving between host and device */
  GPUMEM_MEMORY_PINNED_HOST = 2, /* page-locked host memory the device can reach */
  GPUMEM_MEMORY_HOST = 3         /* pageable host memory (system) */
} gpumem_memory_kind;

/* What a resource can do, as data (the resource contract, version 2). Every resource
 * reports it; an adaptor that passes allocations through reports its upstream's, so wrapping
 * a resource never changes what the layers above may do with it (a pool over
 * limit(vmm) grows in place exactly as a pool over vmm). */
typedef struct gpumem_resource_capabilities {
  size_t size;      /* set by the caller: sizeof(gpumem_resource_capabilities) */
  uint32_t version; /* set by gpumem: GPUMEM_CAPABILITIES_VERSION of the library */
  int device;       /* the device the memory is for */
  gpumem_memory_kind memory;
  /* 1: allocate and deallocate follow the stream-ordered contract themselves (a free
   * becomes reusable only after the stream's work); 0: they are synchronous. */
  int stream_ordered;
  /* 1: the resource maps memory at addresses its caller chooses inside one reserved range,
   * in multiples of `granularity`, and can unmap whole `piece_size` pieces of a live
   * allocation, or of twice that in most of a large one (gpumem_vmm_options): vmm, and
   * pass-through adaptors over it. A pool over it grows in place. */
  int places_at_address;
  size_t granularity; /* with places_at_address; else 0 */
  size_t piece_size;  /* with places_at_address; else 0 */
} gpumem_resource_capabilities;

#define GPUMEM_CAPABILITIES_VERSION 1u

/* Fills *caps with what mr can do. caps->size must be set: a caller built against an older,
 * smaller struct gets the fields it knows. GPUMEM_ERR_INVALID_ARGUMENT for NULL or a size
 * smaller than the first version's. */
GPUMEM_API gpumem_status gpumem_resource_get_capabilities(const gpumem_resource *mr,
                                                          gpumem_resource_capabilities *caps);

/* ---------------------------------------------------------------------------------------
 * Base resources. Each takes a device (or GPUMEM_CURRENT_DEVICE) and an options struct in
 * which zero means default (NULL means all defaults). On success *out holds a new
 * reference.
 * ------------------------------------------------------------------------------------- */

/* cuMemAlloc / cuMemFree: synchronous, slow (tens of microseconds), the plain reference. */
GPUMEM_API gpumem_status gpumem_cuda_create(int device, gpumem_resource **out);

/* Memory advice for managed memory, as flags. */
typedef enum gpumem_managed_advice {
  GPUMEM_ADVISE_READ_MOSTLY = 1u << 0,
  GPUMEM_ADVISE_PREFERRED_LOCATION_DEVICE = 1u << 1,
  GPUMEM_ADVISE_PREFERRED_LOCATION_HOST = 1u << 2,
  GPUMEM_ADVISE_ACCESSED_BY_DEVICE = 1u << 3
} gpumem_managed_advice;

typedef struct gpumem_managed_options {
  int prefetch;    /* nonzero: prefetch each allocation to the device on its stream */
  unsigned advice; /* gpumem_managed_advice flags, applied to each allocation */
} gpumem_managed_options;

/* cuMemAllocManaged: memory that pages between host and device, may exceed the device's
 * memory (oversubscription). */
GPUMEM_API gpumem_status gpumem_managed_create(int device, const gpumem_managed_options *opts,
                                               gpumem_resource **out);

typedef enum gpumem_ipc_handle {
  GPUMEM_IPC_NONE = 0,
  GPUMEM_IPC_POSIX_FD = 1,
  GPUMEM_IPC_FABRIC = 2
} gpumem_ipc_handle;

typedef struct gpumem_async_options {
  /* bytes the pool keeps at a synchronization; 0 means UINT64_MAX (keep everything); 1
   * releases (nearly) all free memory at each synchronization */
  uint64_t release_threshold;
  size_t initial_size;          /* bytes to reserve at creation; 0: none */
  gpumem_ipc_handle ipc_handle; /* exportable handle type of the pool's memory */
  /* An existing driver pool of `device` (a CUmemoryPool: the device's default pool, one the
   * program made, or gpumem_async_pool_handle's) to allocate from instead of a pool of its
   * own, as RMM's cuda_async_view_memory_resource: the resource never destroys it and
   * leaves its release threshold as it is unless release_threshold is given; it must
   * outlive the resource. ipc_handle must be GPUMEM_IPC_NONE (the pool's own handle types
   * apply). Reserved bytes are then what the resource allocated from it. NULL: a pool of its
   * own. */
  void *pool;
  /* Nonzero: managed memory, from the device's default pool of managed memory
   * (cuMemGetDefaultMemPool with CU_MEM_ALLOCATION_TYPE_MANAGED), as RMM's
   * cuda_async_managed_memory_resource. That pool is the driver's, shared by the process: the
   * resource treats it as a pool of the program's (never destroyed; its release threshold
   * changed only when release_threshold is given; reserved bytes are what the resource
   * allocated). pool must be NULL and ipc_handle GPUMEM_IPC_NONE. Needs a CUDA 13.0 driver
   * and a device with concurrent managed access: GPUMEM_ERR_UNSUPPORTED otherwise. */
  int managed;
} gpumem_async_options;

/* A driver memory pool of its own (cuMemPoolCreate, cuMemAllocFromPoolAsync), one given in
 * options->pool, or the device's default pool of managed memory (options->managed). */
GPUMEM_API gpumem_status gpumem_async_create(int device, const gpumem_async_options *opts,
                                             gpumem_resource **out);

/* The driver pool (CUmemoryPool) an async resource allocates from. GPUMEM_ERR_INVALID_ARGUMENT
 * when mr is not an async resource or pool is NULL. */
GPUMEM_API gpumem_status gpumem_async_pool_handle(const gpumem_resource *mr, void **pool);

typedef enum gpumem_pinned_flags {
  GPUMEM_PINNED_PORTABLE = 1u << 0,      /* pinned for every context */
  GPUMEM_PINNED_DEVICE_MAPPED = 1u << 1, /* mapped into the device's address space */
  GPUMEM_PINNED_WRITE_COMBINED = 1u << 2
} gpumem_pinned_flags;

typedef struct gpumem_pinned_host_options {
  unsigned flags; /* gpumem_pinned_flags; 0: portable */
} gpumem_pinned_host_options;

/* cuMemHostAlloc: page-locked host memory, for fast copies. */
GPUMEM_API gpumem_status gpumem_pinned_host_create(int device,
                                                   const gpumem_pinned_host_options *opts,
                                                   gpumem_resource **out);

/* Host malloc, for devices that access pageable host memory (HMM or ATS). Elsewhere
 * GPUMEM_ERR_UNSUPPORTED. */
GPUMEM_API gpumem_status gpumem_system_create(int device, gpumem_resource **out);

/* ---------------------------------------------------------------------------------------
 * Resources users write: a program plugs its own allocator in as a gpumem_resource, which
 * composes with everything else (a pool over it, adaptors over it, the current resource).
 *
 * The library keeps the contract around the user's functions, so that they see only valid
 * requests and a mistake of theirs cannot corrupt what is built on them:
 * - the front end's argument checks (size 0, alignment, overflow) and the stream check run
 *   before the user's allocate is called;
 * - every pointer the user's allocate returns is recorded; a free of a pointer that is not
 *   live, a double free or a wrong size is refused with GPUMEM_ERR_MISUSE (the message names
 *   the pointer and size) without calling the user's deallocate;
 * - an allocate that returns success with NULL, a pointer not aligned as asked, or a pointer
 *   already live is refused with GPUMEM_ERR_MISUSE and a message that says what the resource
 *   did wrong; nothing is recorded. A misaligned pointer is given back at once through the
 *   user's deallocate (it is a fresh allocation of the user's); a pointer already live is
 *   neither recorded nor given back, since freeing it would free memory that the earlier
 *   allocation still uses: the user resource must mend its own state;
 * - a failing allocate keeps its status; its message is the one the user's code set (by a
 *   gpumem call that failed, or gpumem_set_error_message) after "user resource 'NAME'",
 *   or, where it set none, one that names the resource, the request and the status.
 *   GPUMEM_ERR_OUT_OF_MEMORY gets the standard out-of-memory detail;
 * - a failing deallocate leaves the allocation live (it can be freed again);
 * - live bytes, live count and peak live bytes come from the library's table; every other
 *   fact from the user's query, when there is one;
 * - destroy(state) is called once, at the last release, which (as for every resource) only
 *   happens with no live allocations.
 * Thread safety: the library calls the user's functions from any thread, also at once from
 * several, and holds no lock of its own across them (its table's lock is held only while a
 * pointer is filed or looked up). A user resource that is not thread-safe must lock itself.
 * A suballocator over a user resource (a pool) calls its allocate and deallocate while the
 * pool's lock is held: they must not allocate from that pool.
 * ------------------------------------------------------------------------------------- */

#define GPUMEM_USER_RESOURCE_OPS_VERSION 1u

typedef struct gpumem_user_resource_ops {
  size_t size;      /* set by the caller: sizeof(gpumem_user_resource_ops) */
  uint32_t version; /* set by the caller: GPUMEM_USER_RESOURCE_OPS_VERSION */
  /* Required. `bytes` > 0; `alignment` a power of two >= GPUMEM_DEFAULT_ALIGNMENT; the
   * stream is one of the resource's device. On success *ptr holds memory of `bytes` bytes
   * aligned to `alignment`, usable by work enqueued on `stream` after the call. */
  gpumem_status (*allocate)(void *state, size_t bytes, size_t alignment, gpumem_stream stream,
                            void **ptr);
  /* Required. Called only for a pointer this allocate returned and that is live, with its
   * size and alignment. */
  gpumem_status (*deallocate)(void *state, void *ptr, size_t bytes, size_t alignment,
                              gpumem_stream stream);
  /* Optional (NULL: none). Facts other than the live ones; GPUMEM_ERR_UNSUPPORTED for a fact
   * it does not know. */
  gpumem_status (*query)(void *state, gpumem_query what, uint64_t *out);
  /* Optional. Called once, at the resource's last release. */
  void (*destroy)(void *state);
  gpumem_memory_kind memory; /* the kind of memory allocate returns */
  /* nonzero: a free becomes reusable only after the stream's work (stream-ordered);
   * 0: allocate and deallocate are synchronous */
  int stream_ordered;
  /* Optional: the resource's name (gpumem_resource_name, messages, its describe), copied
   * (at most 63 bytes); NULL: "user". */
  const char *name;
} gpumem_user_resource_ops;

/* A resource of `device` (or GPUMEM_CURRENT_DEVICE) over the user's functions. `ops` is
 * read during the call only; `state` is passed to every function. On success *out holds a
 * new reference. Returns GPUMEM_ERR_INVALID_ARGUMENT, naming the field and creating
 * nothing, for NULL ops or out, ops->size smaller than the first version's, an unknown
 * ops->version, NULL allocate or deallocate, or an unknown memory kind. */
GPUMEM_API gpumem_status gpumem_user_resource_create(int device,
                                                     const gpumem_user_resource_ops *ops,
                                                     void *state, gpumem_resource **out);

/* Sets the calling thread's error message (gpumem_last_error_message), for a user
 * resource's function that fails and wants to say why. NULL sets "". */
GPUMEM_API void gpumem_set_error_message(const char *message);

/* ---------------------------------------------------------------------------------------
 * Failure callback adaptor (retry): passes calls to its upstream; when an allocation fails
 * with GPUMEM_ERR_OUT_OF_MEMORY it calls the callback with the request's size, and tries
 * again while the callback returns nonzero (it may free memory, wait for streams, ...).
 * When the callback says no (or a limit of attempts is reached), the allocation fails with
 * the upstream's last status and message, after "retry (gave up after N retries)". Other
 * failures are not retried. The adaptor holds no lock across the callback, which may
 * allocate from the adaptor itself: an out-of-memory failure of any retry adaptor inside a
 * callback on the same thread is not retried again (it returns to the callback at once),
 * so there is no endless recursion. Placement (a pool over retry(vmm) growing in place) is
 * passed through and never retried. The callback is called from whichever thread
 * allocates, at once from several: it must be thread-safe. Like aligned and prefetch, it
 * reports its upstream's live figures, so its last release is refused while the upstream
 * has live allocations.
 * ------------------------------------------------------------------------------------- */

typedef struct gpumem_failure_callback_options {
  /* Required: nonzero to try the allocation again. Called on the allocating thread, with
   * no lock of gpumem held. */
  int (*callback)(size_t bytes, void *user);
  void *user;
  /* Optional: called with `user` once, when the adaptor is destroyed (its last release),
   * so that `user` can live exactly as long as the adaptor. */
  void (*destroy)(void *user);
} gpumem_failure_callback_options;

/* Returns GPUMEM_ERR_INVALID_ARGUMENT for a NULL upstream, opts, callback or out. */
GPUMEM_API gpumem_status gpumem_failure_callback_create(gpumem_resource *upstream,
                                                        const gpumem_failure_callback_options *opts,
                                                        gpumem_resource **out);

/* ---------------------------------------------------------------------------------------
 * Fault injection adaptor: passes calls to its upstream, except the ones it is told to
 * fail, which fail with `status` and leave the upstream untouched. For tests.
 * ------------------------------------------------------------------------------------- */

typedef struct gpumem_faulty_options {
  uint64_t fail_at;     /* the Nth allocation (1-based, counted from creation or reset) fails */
  uint64_t fail_every;  /* every Nth allocation fails */
  gpumem_status status; /* the status of an injected failure; 0 means GPUMEM_ERR_INJECTED_FAULT */
} gpumem_faulty_options;

GPUMEM_API gpumem_status gpumem_faulty_create(gpumem_resource *upstream,
                                              const gpumem_faulty_options *opts,
                                              gpumem_resource **out);

/* Replaces the options and restarts the count of allocations. */
GPUMEM_API gpumem_status gpumem_faulty_reset(gpumem_resource *mr,
                                             const gpumem_faulty_options *opts);

/* ---------------------------------------------------------------------------------------
 * Tracking adaptor (RMM's tracking_resource_adaptor): passes every call to its upstream and
 * keeps each outstanding allocation made through it, with its size, stream, time (from the
 * adaptor's creation, on a clock of millisecond steps) and, with capture_stacks, the call
 * stack that made it, named (dladdr) only when a list is written. It changes no outcome:
 * each call reaches the upstream as it was made. A free it cannot match is reported and
 * passed on as it came: a pointer it does not track (a tracking adaptor over this one
 * frees through it what it allocated itself), or a size other than the one it recorded
 * (the upstream judges it: gpumem's resources refuse it with GPUMEM_ERR_MISUSE and keep the
 * allocation, which the adaptor then keeps too; RMM's adaptor frees with the recorded size
 * instead). A pointer the upstream gives out again while it is still tracked (it was freed
 * past the adaptor) is reported, and its record replaced. Reports go to options.report, or
 * to stderr. Live figures (GPUMEM_QUERY_LIVE_BYTES, _COUNT) are the adaptor's own; placement
 * is passed through and tracked (a pool over tracking(vmm) grows in place, and its chunks
 * are the outstanding allocations). Threads: the table is split into 64 shards by pointer,
 * each under a lock of its own that costs one thread no atomic instruction.
 * ------------------------------------------------------------------------------------- */

typedef struct gpumem_tracking_options {
  /* nonzero: keep each allocation's call stack (backtrace(): a few microseconds each) */
  int capture_stacks;
  int stack_depth; /* frames kept of each stack; 0: 32; at most 256 */
  /* Optional: receives each report (a free it cannot match, a pointer given out again, the
   * list of gpumem_tracking_log_outstanding_allocations) as text of whole lines, on the
   * thread that caused it, with no lock of gpumem held. NULL: the text goes to stderr. */
  void (*report)(const char *text, void *user);
  void *user;
} gpumem_tracking_options;

/* Errors: GPUMEM_ERR_INVALID_ARGUMENT for a NULL upstream or out or a stack_depth out of
 * range (nothing created). */
GPUMEM_API gpumem_status gpumem_tracking_create(gpumem_resource *upstream,
                                                const gpumem_tracking_options *opts,
                                                gpumem_resource **out);

/* Bytes of the outstanding allocations (RMM's get_allocated_bytes): exact while no thread
 * allocates through it. GPUMEM_ERR_INVALID_ARGUMENT when mr is not a tracking adaptor or
 * bytes is NULL. */
GPUMEM_API gpumem_status gpumem_tracking_get_allocated_bytes(const gpumem_resource *mr,
                                                             size_t *bytes);

/* The outstanding allocations as text, by address, a line each (RMM's
 * get_outstanding_allocations_str): "0x7f0a00000000: 1000 B, stream 0x0, at +1.250 s";
 * with stacks, " : callstack:" ends the line and a frame a line follows ("#0 in name+0x1c
 * (module)", or "module+0x2f10" for a function the dynamic symbol table does not name:
 * `addr2line -f -e MODULE 0x2f10` names it), then an empty line. No allocations: "". The
 * text is written whole into `buf`, NUL-terminated, and *needed (may be NULL) gets the size
 * it took with its NUL. A buffer too small (buf NULL with size 0 asks for the size):
 * GPUMEM_ERR_INVALID_ARGUMENT, `buf` untouched, the size needed in *needed and in the
 * message; the list changes while other threads allocate, so leave room when calling
 * again. GPUMEM_ERR_OUT_OF_MEMORY when the host has no memory for the list. */
GPUMEM_API gpumem_status gpumem_tracking_get_outstanding_allocations_str(const gpumem_resource *mr,
                                                                         char *buf, size_t size,
                                                                         size_t *needed);

/* Reports the outstanding allocations (RMM's log_outstanding_allocations): a line naming the
 * adaptor, "Outstanding Allocations: N (SIZE)", then the list above, to options.report or
 * stderr. */
GPUMEM_API gpumem_status gpumem_tracking_log_outstanding_allocations(const gpumem_resource *mr);

/* ---------------------------------------------------------------------------------------
 * Control adaptors. Each passes allocations to its upstream (retained: the caller may
 * release its own handle at once) through a rule of its own, and reports its upstream's
 * capabilities, placement included where the rule keeps its promise there, so that a pool
 * over an adaptor over vmm grows in place as over vmm. Each may be shared by threads.
 * Creation: GPUMEM_ERR_INVALID_ARGUMENT for a NULL upstream or out, or a bad option (the
 * message names it), with *out untouched; on success *out holds a new reference.
 * ------------------------------------------------------------------------------------- */

/* Limit: allocations that would take the bytes allocated through the adaptor past
 * `maximum_size` fail with GPUMEM_ERR_OUT_OF_MEMORY before reaching the upstream (the
 * message names the limit and what is allocated). The count is of bytes as asked; memory
 * placed through the adaptor (a pool over it growing in place) counts too. The limit is
 * exact: an allocation fails only if the bytes allocated (and being allocated by other
 * threads at that moment) plus the request exceed it. Threads keep credit of their own, so
 * the hot path takes no lock and shares no written cache line. */
typedef struct gpumem_limit_options {
  size_t maximum_size; /* required: 0 is GPUMEM_ERR_INVALID_ARGUMENT */
} gpumem_limit_options;

GPUMEM_API gpumem_status gpumem_limit_create(gpumem_resource *upstream,
                                             const gpumem_limit_options *opts,
                                             gpumem_resource **out);

/* Bytes allocated through a limit adaptor and not yet freed (RMM's get_allocated_bytes):
 * exact while no thread allocates through it; a moment's sum while others do.
 * GPUMEM_ERR_INVALID_ARGUMENT when mr is not a limit adaptor or bytes is NULL. */
GPUMEM_API gpumem_status gpumem_limit_get_allocated_bytes(const gpumem_resource *mr, size_t *bytes);

/* The limit (RMM's get_allocation_limit). Errors as gpumem_limit_get_allocated_bytes. */
GPUMEM_API gpumem_status gpumem_limit_get_allocation_limit(const gpumem_resource *mr,
                                                           size_t *bytes);

/* Aligned: requests of at least `threshold` bytes come back aligned to `alignment` (the
 * raised alignment is passed to the upstream, and the same to its deallocate), smaller ones
 * as asked. Every gpumem resource honours large alignments except fixed_size (above 256:
 * GPUMEM_ERR_UNSUPPORTED). Placement is forwarded only while `alignment` is at most the
 * upstream's granularity (then every placed block is aligned anyway); above it, a pool over
 * the adaptor grows by plain allocations. Live figures are the upstream's. */
typedef struct gpumem_aligned_options {
  size_t alignment; /* a power of two; 0: 256 (GPUMEM_DEFAULT_ALIGNMENT) */
  size_t threshold; /* smallest request aligned; 0: every request */
} gpumem_aligned_options;

GPUMEM_API gpumem_status gpumem_aligned_create(gpumem_resource *upstream,
                                               const gpumem_aligned_options *opts,
                                               gpumem_resource **out);

/* Prefetch: each allocation of managed memory (an upstream whose capabilities say
 * GPUMEM_MEMORY_MANAGED, such as managed or a pool over it) is prefetched to the
 * resource's device on the allocation's stream; over any other memory the adaptor only
 * passes calls on. A failed prefetch fails the allocation with the driver's status, after
 * giving the memory back to the upstream. Live figures are the upstream's. */
GPUMEM_API gpumem_status gpumem_prefetch_create(gpumem_resource *upstream, gpumem_resource **out);

/* ---------------------------------------------------------------------------------------
 * Statistics adaptor (RMM's statistics_resource_adaptor): passes calls to its upstream and
 * counts what is allocated through it, in bytes as requested and in allocations, each as
 * its current value, its peak and its total, in a stack of counters:
 * gpumem_statistics_push starts fresh counters (the ones below keep what they had), and
 * gpumem_statistics_pop ends the top ones and folds them into those below as if they had
 * never been pushed (current and total add up; the peak below becomes the larger of its
 * own and its current value plus the popped peak). A pushed counter's current value may go
 * below zero (frees of memory allocated before the push). Placement through the adaptor (a
 * pool over stats(vmm) growing in place) counts as allocation. Live-figure queries answer
 * for everything allocated through it, whatever the stack.
 *
 * Threads: each counts in a slot of its own, with no lock and no shared written cache
 * line. Current values and totals are exact (a read stops the counting threads for a
 * moment). The peak is exact while one thread has used the adaptor; once several have,
 * each thread adds its own changes to the shared sums whenever they reach flush_bytes or
 * flush_count, and the peak may miss or exceed the exact peak by what the other threads
 * had not added yet: less than flush_bytes (flush_count) for each (docs/internals.md).
 * Pushes, pops and reads take a lock; allocations never wait for them.
 * ------------------------------------------------------------------------------------- */

typedef struct gpumem_statistics_options {
  /* Under several threads, a thread adds its changes to the shared sums when they reach
   * this many bytes (allocations); smaller is a closer peak and more atomic additions to a
   * cache line the threads share. 0: 1 MiB and 64; at most INT64_MAX. */
  size_t flush_bytes;
  uint64_t flush_count;
} gpumem_statistics_options;

GPUMEM_API gpumem_status gpumem_statistics_create(gpumem_resource *upstream,
                                                  const gpumem_statistics_options *opts,
                                                  gpumem_resource **out);

/* One figure of gpumem_statistics: its current value, its highest value, and the sum of
 * everything ever added to it (allocated bytes, or allocations). */
typedef struct gpumem_statistics_counter {
  int64_t current, peak, total;
} gpumem_statistics_counter;

/* The top counters of a statistics adaptor. The caller sets `size` to sizeof its struct;
 * gpumem fills the fields a struct of that size has, and `version`. */
typedef struct gpumem_statistics {
  size_t size;                     /* set by the caller: sizeof(gpumem_statistics) */
  uint32_t version;                /* set by gpumem: GPUMEM_STATISTICS_VERSION */
  gpumem_statistics_counter bytes; /* bytes as requested */
  gpumem_statistics_counter count; /* allocations */
} gpumem_statistics;

#define GPUMEM_STATISTICS_VERSION 1u

/* The top counters (RMM's get_bytes_counter and get_allocations_counter). Errors, each
 * with a message and nothing changed: GPUMEM_ERR_INVALID_ARGUMENT (NULL mr or stats,
 * stats->size smaller than the first version's), GPUMEM_ERR_UNSUPPORTED (mr is not a
 * statistics adaptor: it keeps no statistics). */
GPUMEM_API gpumem_status gpumem_statistics_get(const gpumem_resource *mr, gpumem_statistics *stats);

/* Pushes fresh counters; *stats (may be NULL) receives the top counters as they were before
 * the push. Errors as gpumem_statistics_get, and GPUMEM_ERR_OUT_OF_MEMORY when the host has
 * no memory for the stack. */
GPUMEM_API gpumem_status gpumem_statistics_push(gpumem_resource *mr, gpumem_statistics *stats);

/* Pops the top counters and folds them into the ones below; *stats (may be NULL) receives
 * the popped counters. GPUMEM_ERR_MISUSE, changing nothing, when no counters were pushed
 * (the adaptor's own counters are never popped); other errors as gpumem_statistics_get. */
GPUMEM_API gpumem_status gpumem_statistics_pop(gpumem_resource *mr, gpumem_statistics *stats);

/* ---------------------------------------------------------------------------------------
 * Log (RMM's logging_resource_adaptor): passes every call to its upstream and writes each
 * allocation, free and failed allocation as a line of a CSV file in RMM's format (header
 * Thread,Time,Action,Pointer,Size,Stream; actions allocate, free, allocate failure), which
 * RMM's replay benchmark and `gpumem-bench replay` read. Lines are in the order of the
 * calls (a free is logged before the upstream sees it, an allocation after it returned).
 * Threads take no lock to log: each copies its line into the file, mapped in memory, so an
 * event is in the file as soon as its call returns, even if the process is then killed
 * (SIGKILL included). The file ends in zeros past its events until a flush, the last
 * release, exit or a failed allocation cuts it where they end. Pipes, terminals and other
 * files that cannot be mapped are written through a buffer (lost if the process is killed).
 * The file is truncated when opened; logs of one process that name one file share it. A
 * disk that fills up stops the log, once reported on stderr; allocations go on. Placement
 * is forwarded and logged. Live figures are the upstream's. See README "Finding where
 * memory went".
 * ------------------------------------------------------------------------------------- */

typedef struct gpumem_log_options {
  /* The file; "%p" becomes the process id (a log per process of a job), "%%" a '%'.
   * NULL: the GPUMEM_LOG_FILE environment variable's. */
  const char *file_name;
} gpumem_log_options;

/* GPUMEM_ERR_IO with the path and the reason when the file cannot be opened or written;
 * GPUMEM_ERR_INVALID_ARGUMENT when no file is named (and GPUMEM_LOG_FILE is unset). */
GPUMEM_API gpumem_status gpumem_log_create(gpumem_resource *upstream,
                                           const gpumem_log_options *opts, gpumem_resource **out);

/* Makes the log's file hold exactly the events so far. GPUMEM_ERR_IO once writing it failed
 * (the message says why and how many events were dropped); GPUMEM_ERR_INVALID_ARGUMENT
 * when mr is not a log adaptor. */
GPUMEM_API gpumem_status gpumem_log_flush(gpumem_resource *mr);

/* The log's file name (with "%p" replaced), NUL-terminated into buf. A buffer too small:
 * GPUMEM_ERR_INVALID_ARGUMENT naming the size needed. */
GPUMEM_API gpumem_status gpumem_log_file_name(const gpumem_resource *mr, char *buf, size_t size);

/* ---------------------------------------------------------------------------------------
 * Pool: a coalescing suballocator over an upstream resource. Allocation and free cost tens
 * of nanoseconds instead of the driver's microseconds and do not synchronize, but for the
 * first call on a second stream, which waits for the device where the first stream has
 * freed memory, so that what it freed until then serves every stream; a release of holes
 * (release_holes_over, below) and a request nothing else can serve wait too. Free blocks
 * are kept per stream: a block freed on stream A is reused at once by A; another stream B
 * gets A's free blocks once A's work on them is done (an event recorded on A for a batch of
 * frees, which B finds complete). While that work is pending, B grows the pool rather than
 * wait for A, so that streams that each reuse their own memory do not run one after
 * another; only when the pool cannot grow does B wait for A's work (the event waited on by
 * B, which moves A's free blocks of the request's kind to B at once). A pool at its maximum
 * hands its fresh memory out a request at a time, so that no one stream holds it all for
 * the others to wait on. Pools shared by threads are the exception: a thread's cache takes
 * the blocks other threads freed to it on their streams after waiting for those streams.
 *
 * Growth: when no free block fits, the pool takes the request (rounded up to 2 MiB, or to
 * the granularity over vmm) from its upstream, up to maximum_size. Over a vmm upstream the
 * new memory is mapped right after the old, so growth steps coalesce into one range and
 * the pool never needs a large initial size.
 *
 * Out of memory: before failing, a pool serving several streams waits for its device, so
 * that every stream's free blocks can serve the request; then, where its free blocks hold
 * whole chunks (or, over vmm, whole pieces) and the request is no larger than the maximum
 * or the device's memory, it gives them back as gpumem_pool_trim does and grows once more,
 * so that the holes' memory can serve a request no hole fits (as CuPy's pool and PyTorch's
 * caching allocator free their cached blocks before they fail). A failed allocation changes
 * no allocation; the free memory given back before it stays given back, and when host
 * memory ran out after the pool grew, the grown memory stays in its free blocks
 * (gpumem_pool_trim gives it back).
 * ------------------------------------------------------------------------------------- */

typedef struct gpumem_pool_options {
  /* bytes taken from the upstream at creation; 0: half of the device's free memory, or
   * nothing over vmm (which grows in place) and over host-memory upstreams */
  size_t initial_size;
  size_t maximum_size; /* most bytes held from the upstream; 0: no limit */
  /* Over an upstream that makes memory in pieces (vmm) only. N, from 100 to 10000: before
   * growing to hold more than N% of its live peak (the request being served counted in),
   * the pool waits for its device (with several streams, for the calling stream: it gives
   * back only that stream's holes and fresh memory's, and leaves other streams' alone) and
   * gives back the whole free pieces (gpumem_vmm_options.piece_size) lying in its holes,
   * free blocks other than a region's last, lowest first, as many bytes as the growth
   * takes: physical memory moves to where the pool grows rather than adding to it, and the
   * address ranges given back stay unused. A workload whose blocks outgrow the holes they
   * leave (generation with a growing cache) then holds far less for little time; one that
   * frees and fills the same holes every step (a training loop) could spend most of its
   * allocation time waiting and in the driver's unmap and map calls, so releases and every
   * growth past N% (what a release costs later) draw on a budget of time, to which the time
   * between them adds a third of its length, up to 20 ms: a burst of releases (a first
   * pass, a generation step) runs whole, and over the long run they take at most a quarter
   * of the time (release_holes_time); no release starts while the budget is spent, and its
   * memory gains shrink with it (docs/internals.md has the figures). The physical memory a
   * release unmaps is mapped again by the growth after it where sizes match, rather than
   * freed and made anew. A request that fails after holes were given back leaves them given
   * back, as a trim would. 0, the default: the same at GPUMEM_POOL_RELEASE_HOLES_DEFAULT
   * (110), but only for a request of at least half of the live peak of the program's pass
   * (since it last let go of nearly everything) and no more than it, or of 40% while the
   * program holds no more than three quarters of that peak (a copy of most of what a
   * program holds: a cache copied into a larger one after the copy before it was let go),
   * or, once the live peak so far spans 32 pieces (1 GiB over the default pieces), for a
   * request of 1 MiB or more of a size the pool has handed out before (a training loop's
   * next step, also one whose shapes vary; the pool keeps up to 32,768 such sizes, and a
   * program that, past 2,048 of them, draws most of its sizes anew, more than half of 1,024
   * large requests, is no loop: from then on no size counts as seen). Such a request gives
   * back past 108% instead where the pool holds free at least four times the growth while
   * the program's pass holds 99% of its highest live bytes so far: a growth that
   * fragmentation alone makes as the program climbs. Any other request of 1 MiB or more
   * gives back past the live peak itself where the program holds no more than three
   * quarters of its pass's live peak, the pool holds free at least four times the growth
   * and, before it, no more than 110% of that peak, and that peak spans 32 pieces: a growth
   * that fragmentation alone makes after the program let go (an optimizer's step after the
   * pass's peak). Other requests, of a program still climbing to its working set, keep the
   * holes. Chosen on real traces, judged on 116 of four recorded sets and 88 more
   * (docs/internals.md). GPUMEM_POOL_KEEP_HOLES: never. */
  unsigned release_holes_over;
  /* The time side of release_holes_over's trade: the most percentage of the pool's time, P
   * from 1 to 100, that its releases of holes and the growths past the threshold take over
   * the long run; the time between them refills the budget by P / (100 - P) of its length
   * (a third at 25%), up to its 20 ms burst. 100: no budget, every growth past the threshold gives
   * back holes first. 0, the default: GPUMEM_POOL_RELEASE_HOLES_TIME_DEFAULT (25), which
   * keeps a replay of a training loop with no kernels in between under 100 ns an event;
   * where steps run kernels for milliseconds the budget refills between them anyway. More
   * buys less memory for a loop that frees and fills the same holes every step (on an H200
   * an LSTM's warm passes hold 1.228 times their live bytes at 95 ns an event, 1.168 at 50%,
   * 1.038 at 100% and 4,900 ns, where the driver's pool holds 1.119 at 4,700:
   * docs/internals.md). */
  unsigned release_holes_time;
} gpumem_pool_options;

/* gpumem_pool_options.release_holes_over: the percentage of the live peak its default uses
 * (for a request of about half of the pass's live peak up to all of it, or of a size
 * served before), and the value that keeps holes mapped. */
#define GPUMEM_POOL_RELEASE_HOLES_DEFAULT 110u
#define GPUMEM_POOL_KEEP_HOLES 0xFFFFFFFFu
/* gpumem_pool_options.release_holes_time's default: a quarter of the time. */
#define GPUMEM_POOL_RELEASE_HOLES_TIME_DEFAULT 25u

GPUMEM_API gpumem_status gpumem_pool_create(gpumem_resource *upstream,
                                            const gpumem_pool_options *opts, gpumem_resource **out);

/* Gives free memory back to the upstream: every whole free upstream chunk, and over vmm
 * every whole free piece of mapped memory (gpumem_vmm_options.piece_size), also inside
 * chunks that are partly in use. Synchronizes the pool's device first, so that blocks
 * freed on any stream count as free. *released (may be NULL) receives the bytes given
 * back, also when a driver call fails part way. Arenas, binning and fixed_size resources
 * are taken too (as gpumem_resource_trim); any other resource:
 * GPUMEM_ERR_INVALID_ARGUMENT. */
GPUMEM_API gpumem_status gpumem_pool_trim(gpumem_resource *pool, size_t *released);

/* ---------------------------------------------------------------------------------------
 * Arena: a pool per stream over one global pool, for many threads and streams at once.
 * Each stream gets its own pool (found through a per-thread cache, so threads on their own
 * streams share no lock), which takes superblocks from the global pool; allocations of a
 * quarter superblock or more go to the global pool directly. A block freed on another
 * stream goes back to the pool that owns it, with the same cross-stream rules as the pool.
 * A free is routed by where its pointer lies, and a size other than the allocation's is
 * refused (GPUMEM_ERR_MISUSE). When the global pool runs out, for a small or a large
 * request, the streams' pools give back their free superblocks and the request is tried
 * again.
 * ------------------------------------------------------------------------------------- */

typedef struct gpumem_arena_options {
  size_t size;            /* the global pool's initial size; 0: as gpumem_pool_options */
  size_t maximum_size;    /* the global pool's maximum; 0: no limit */
  size_t superblock_size; /* what a stream's pool takes at a time; 0: 4 MiB */
} gpumem_arena_options;

GPUMEM_API gpumem_status gpumem_arena_create(gpumem_resource *upstream,
                                             const gpumem_arena_options *opts,
                                             gpumem_resource **out);

/* ---------------------------------------------------------------------------------------
 * Fixed-size blocks: every allocation gets one block of `block_size` bytes (larger requests
 * fail with GPUMEM_ERR_OUT_OF_MEMORY, alignments above 256 with GPUMEM_ERR_UNSUPPORTED),
 * taken from the upstream `blocks_to_preallocate` at a time, with the pool's stream rules.
 * ------------------------------------------------------------------------------------- */

typedef struct gpumem_fixed_size_options {
  size_t block_size;            /* 0: 1 MiB; rounded up to 256 */
  size_t blocks_to_preallocate; /* blocks taken from the upstream at a time; 0: 128 */
} gpumem_fixed_size_options;

GPUMEM_API gpumem_status gpumem_fixed_size_create(gpumem_resource *upstream,
                                                  const gpumem_fixed_size_options *opts,
                                                  gpumem_resource **out);

/* ---------------------------------------------------------------------------------------
 * Binning: requests go to the smallest bin whose size holds them; larger ones to the
 * upstream. The bins of sizes 2^min_exponent .. 2^max_exponent (256 B .. 1 MiB by default,
 * as the spec's binning(UPSTREAM)) are fixed_size resources over the upstream, created
 * when first used; gpumem_binning_add_bin adds a bin served by
 * any resource. A free with a size other than the allocation's is refused
 * (GPUMEM_ERR_MISUSE): the bin of that size does not hold the pointer with it, and a size
 * past the bins reaches the upstream only for a pointer the upstream served directly. When
 * the upstream runs out, the bins made here give their free chunks back to it and the
 * request is tried again.
 * ------------------------------------------------------------------------------------- */

typedef struct gpumem_binning_options {
  int min_exponent;     /* smallest bin 2^min_exponent bytes; 0: 8 (256 B) */
  int max_exponent;     /* largest bin 2^max_exponent bytes; 0: 20 (1 MiB) */
  int no_exponent_bins; /* nonzero: no bins until gpumem_binning_add_bin adds them */
} gpumem_binning_options;

GPUMEM_API gpumem_status gpumem_binning_create(gpumem_resource *upstream,
                                               const gpumem_binning_options *opts,
                                               gpumem_resource **out);

/* Requests of at most `size` bytes (and more than the next smaller bin's) go to `bin`
 * (retained), or to a fixed_size bin over the upstream when `bin` is NULL. A bin of a size
 * already present is replaced; GPUMEM_ERR_MISUSE, with nothing changed, while the old bin
 * holds live allocations. Not safe while other threads allocate from the binning resource:
 * add bins before sharing it. */
GPUMEM_API gpumem_status gpumem_binning_add_bin(gpumem_resource *binning, size_t size,
                                                gpumem_resource *bin);

/* ---------------------------------------------------------------------------------------
 * Virtual memory upstream: one virtual address range reserved per resource
 * (cuMemAddressReserve; each resource is of one device, and each has a range of its own so
 * that two pools on a device grow in place without meeting), physical memory mapped into
 * it on demand (cuMemCreate, cuMemMap, cuMemSetAccess) and unmapped when freed. Its reserved bytes
 * are the mapped physical bytes. Successive allocations are placed at the lowest free address, so a
 * pool over vmm grows in place. Devices without virtual memory management: GPUMEM_ERR_UNSUPPORTED.
 * ------------------------------------------------------------------------------------- */

typedef struct gpumem_vmm_options {
  /* bytes of address space to reserve; 0: four times the device's memory */
  size_t reserve_size;
  /* Physical memory is made and mapped in pieces of at most this many bytes (whole
   * granules; a piece never crosses a multiple of piece_size from the range's start), so
   * that a pool's trim can unmap any whole free piece, even inside a growth step that is
   * partly in use. Smaller pieces give back more and cost more driver calls when memory is
   * mapped or unmapped; 0: 32 MiB. An allocation of 32 pieces or more (a pool's growth of
   * 1 GiB and up) is cut at every multiple of twice piece_size instead, up to the last one
   * inside it, and at every multiple of piece_size past that: the driver's cost is per
   * piece, and a pool that moves a large block's memory every pass moves twice as much in
   * the same time (docs/internals.md). */
  size_t piece_size;
} gpumem_vmm_options;

GPUMEM_API gpumem_status gpumem_vmm_create(int device, const gpumem_vmm_options *opts,
                                           gpumem_resource **out);

/* ---------------------------------------------------------------------------------------
 * Reinitialize: the C twin of rmm.reinitialize. Builds one resource per listed device and
 * makes it that device's current resource (devices not listed keep theirs):
 *   pool_allocator, no managed memory: pool(vmm), or pool(cuda) where the device lacks
 *     virtual memory management (over vmm the pool grows in place: no initial size needed),
 *     or where the maximum cannot hold the initial size in whole granules of vmm (2 MiB);
 *   pool_allocator with managed memory: pool(managed); managed memory alone: managed;
 *   neither: cuda.
 * Either every listed device gets its new resource, or (on failure) none does.
 * ------------------------------------------------------------------------------------- */

typedef struct gpumem_reinitialize_options {
  int pool_allocator;
  int managed_memory;
  size_t initial_pool_size; /* 0: the pool's default (half of free memory; none over vmm) */
  size_t maximum_pool_size; /* 0: no limit */
  const int *devices;       /* NULL: device 0 only, as RMM's devices=0 */
  size_t device_count;
  /* nonzero: each resource inside a log adaptor, writing log_file_name with ".devN" before
   * its extension (NULL: GPUMEM_LOG_FILE's name), as rmm.reinitialize(logging=True) */
  int logging;
  const char *log_file_name;
} gpumem_reinitialize_options;

GPUMEM_API gpumem_status gpumem_reinitialize(const gpumem_reinitialize_options *options);

/* The spec gpumem_reinitialize builds for a device with these options (e.g. "pool(vmm)"),
 * written into `spec`. */
GPUMEM_API gpumem_status gpumem_reinitialize_spec(const gpumem_reinitialize_options *options,
                                                  int device, char *spec, size_t size);

/* ---------------------------------------------------------------------------------------
 * Resources from a spec string: one grammar for C, the environment, the tools and Python.
 *
 *   spec  := name [ "(" arg { "," arg } ")" ]
 *   arg   := spec | key "=" value          an unnamed arg is the upstream resource
 *   value := number [ unit ] | number "%" | true | false | word
 *   unit  := K M G T (powers of 1024) | KB MB GB TB (powers of 1000) | KiB MiB GiB TiB | B
 *
 * e.g. "cuda", "managed(prefetch=true)", "async(release_threshold=1GiB)", "pinned_host",
 * "system", "faulty(cuda, fail_every=3)", "retry(async, attempts=2)" (the failure callback
 * adaptor whose callback waits for the device, up to `attempts` times: default 1). A
 * percentage is of the device's total memory.
 * A bad spec returns GPUMEM_ERR_INVALID_ARGUMENT; the message quotes the spec and marks
 * the offending character.
 * ------------------------------------------------------------------------------------- */

GPUMEM_API gpumem_status gpumem_resource_from_spec(const char *spec, gpumem_resource **out);

/* As gpumem_resource_from_spec, for a given device (or GPUMEM_CURRENT_DEVICE). */
GPUMEM_API gpumem_status gpumem_resource_from_spec_for_device(const char *spec, int device,
                                                              gpumem_resource **out);

/* Names an existing resource for specs: afterwards a spec may use `name` where a base
 * resource goes ("pool(mine)", "limit(mine, max=1GiB)"), and the spec gets that very
 * resource (another reference to it), not a copy. This is how a resource the program wrote
 * (gpumem_user_resource_create) or built by hand composes through the grammar, the
 * GPUMEM_RESOURCE variable included. The name is letters, digits and '_' (a letter or '_'
 * first), at most 63 characters, and not a built-in kind; defining it again replaces the
 * resource it names. mr NULL removes the name. The table retains mr (released when the name
 * is removed or replaced). A spec built for another device than mr's fails with
 * GPUMEM_ERR_INVALID_DEVICE. Errors: GPUMEM_ERR_INVALID_ARGUMENT (NULL or malformed name, a
 * built-in kind's name, removing a name not defined). */
GPUMEM_API gpumem_status gpumem_spec_define(const char *name, gpumem_resource *mr);

/* ---------------------------------------------------------------------------------------
 * The current resource of each device. Default: the spec in GPUMEM_RESOURCE (read once),
 * else a cuda resource of that device.
 * ------------------------------------------------------------------------------------- */

/* The current device's resource. *mr is borrowed: it stays valid until the device's
 * resource is replaced and, after that, for as long as allocations made from it are live
 * (so they can be freed through it); retain it to keep it longer. */
GPUMEM_API gpumem_status gpumem_get_current_device_resource(gpumem_resource **mr);

/* Makes mr the resource of the resource's own device (gpumem_resource_device) and retains
 * it; the previous one is released. The caller may release its own reference after. A
 * previous resource that still has live allocations is not destroyed but retired: it
 * is destroyed by the first later call that finds its allocations all freed. */
GPUMEM_API gpumem_status gpumem_set_current_device_resource(gpumem_resource *mr);

GPUMEM_API gpumem_status gpumem_get_per_device_resource(int device, gpumem_resource **mr);

/* As gpumem_set_current_device_resource for a given device. mr == NULL restores the
 * default. */
GPUMEM_API gpumem_status gpumem_set_per_device_resource(int device, gpumem_resource *mr);

/* ---------------------------------------------------------------------------------------
 * Device buffer: an untyped, uninitialized, resizable block of device memory with a size,
 * a capacity, a stream and a resource (retained). Every operation is stream-ordered on the
 * buffer's stream, as RMM's device_buffer. A buffer is not safe to use from several
 * threads at once.
 * ------------------------------------------------------------------------------------- */

/* mr NULL: the current device resource. */
GPUMEM_API gpumem_status gpumem_buffer_create(size_t size, gpumem_stream stream,
                                              gpumem_resource *mr, gpumem_buffer **out);

/* A buffer holding a copy of `size` bytes at host address `src`. The copy is enqueued on
 * `stream`; `src` must stay valid until the stream's work is done (pageable host memory is
 * staged by the driver before the call returns). */
GPUMEM_API gpumem_status gpumem_buffer_create_from_host(const void *src, size_t size,
                                                        gpumem_stream stream, gpumem_resource *mr,
                                                        gpumem_buffer **out);

/* A deep copy of `src` on `stream`, allocated from mr (NULL: src's resource). */
GPUMEM_API gpumem_status gpumem_buffer_copy(const gpumem_buffer *src, gpumem_stream stream,
                                            gpumem_resource *mr, gpumem_buffer **out);

/* Copies the buffer's first `size` bytes (at most its size) to host memory `dst` and
 * waits for the copy. */
GPUMEM_API gpumem_status gpumem_buffer_copy_to_host(const gpumem_buffer *buf, void *dst,
                                                    size_t size);

/* Copies `size` bytes from host memory into the buffer at `offset` on its stream. */
GPUMEM_API gpumem_status gpumem_buffer_copy_from_host(gpumem_buffer *buf, size_t offset,
                                                      const void *src, size_t size);

/* Sets the size. Growing past the capacity reallocates and copies the contents on
 * `stream` (which becomes the buffer's stream); shrinking keeps the memory. */
GPUMEM_API gpumem_status gpumem_buffer_resize(gpumem_buffer *buf, size_t size,
                                              gpumem_stream stream);

/* Makes the capacity at least `capacity`, keeping contents and size. */
GPUMEM_API gpumem_status gpumem_buffer_reserve(gpumem_buffer *buf, size_t capacity,
                                               gpumem_stream stream);

/* Reallocates so the capacity equals the size. */
GPUMEM_API gpumem_status gpumem_buffer_shrink_to_fit(gpumem_buffer *buf, gpumem_stream stream);

/* Changes the stream later operations (and the final free) are ordered on. */
GPUMEM_API gpumem_status gpumem_buffer_set_stream(gpumem_buffer *buf, gpumem_stream stream);

/* Frees the memory on the buffer's stream and the buffer. Accepts NULL. If freeing the
 * memory fails, the buffer is left as it was (and may be destroyed again later). */
GPUMEM_API gpumem_status gpumem_buffer_destroy(gpumem_buffer *buf);

GPUMEM_API void *gpumem_buffer_data(const gpumem_buffer *buf);
GPUMEM_API size_t gpumem_buffer_size(const gpumem_buffer *buf);
GPUMEM_API size_t gpumem_buffer_capacity(const gpumem_buffer *buf);
GPUMEM_API gpumem_stream gpumem_buffer_stream(const gpumem_buffer *buf);
GPUMEM_API gpumem_resource *gpumem_buffer_resource(const gpumem_buffer *buf); /* borrowed */

/* ---------------------------------------------------------------------------------------
 * Streams, for programs and tools that do not use the CUDA runtime. Same handles as CUDA's.
 * ------------------------------------------------------------------------------------- */

/* A non-blocking stream on `device` (or GPUMEM_CURRENT_DEVICE). */
GPUMEM_API gpumem_status gpumem_stream_create(int device, gpumem_stream *out);
GPUMEM_API gpumem_status gpumem_stream_destroy(gpumem_stream stream);
GPUMEM_API gpumem_status gpumem_stream_synchronize(gpumem_stream stream);

/* Copies `bytes` between any two addresses (device, managed or host), ordered on stream. */
GPUMEM_API gpumem_status gpumem_memcpy_async(void *dst, const void *src, size_t bytes,
                                             gpumem_stream stream);

/* Prefetches `bytes` bytes of managed memory at ptr to `device` (or GPUMEM_CURRENT_DEVICE),
 * ordered on stream. Returns GPUMEM_ERR_UNSUPPORTED, and changes nothing, for memory that is
 * not managed (a caller may treat that as "nothing to move"). */
GPUMEM_API gpumem_status gpumem_prefetch(void *ptr, size_t bytes, int device, gpumem_stream stream);

/* Sets `bytes` bytes at device address dst to `value`, ordered on stream. */
GPUMEM_API gpumem_status gpumem_memset_async(void *dst, int value, size_t bytes,
                                             gpumem_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_H */
