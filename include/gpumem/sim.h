/* gpumem/sim.h: control of gpumem's simulated device, for tests.
 *
 * The simulated device (GPUMEM_DEVICE=sim, or gpumem_select_backend(GPUMEM_BACKEND_SIM))
 * models what an allocator depends on, in host memory: devices and their capacity, device,
 * managed and pinned host memory, streams, events, copies, virtual memory reserve and map.
 * Work enqueued on a stream (copies, memsets, simulated kernels) does not run when it is
 * enqueued: it runs when the simulation lets it, at a synchronization (stream, event, a
 * blocking copy, cuMemFree-like frees) or when a test calls gpumem_sim_complete. So a test
 * decides exactly which stream has finished what, and cross-stream ordering is
 * deterministic. A copy whose source is pageable host memory first runs the stream's pending
 * work, then reads the source (the synchronization CUDA documents for pageable copies).
 *
 * Hazard detection: each time a resource hands out memory on stream B (gpumem_allocate),
 * the simulation checks whether work on another stream A that touches those bytes is still
 * pending and B has not been made to wait for it (an event recorded on A after that work
 * and waited on by B). On a GPU that would be a silent data race; here it is counted,
 * described on stderr, and (GPUMEM_SIM_HAZARD=abort) aborts. GPUMEM_SIM_HAZARD=off checks
 * nothing, as a GPU does: the front end's path is then the one it takes on a GPU (what the
 * benchmarks time, and what the tests of that path run).
 *
 * Environment (read at initialization): GPUMEM_SIM_DEVICES (default 2), GPUMEM_SIM_MEMORY
 * (bytes per device, default 8GiB), GPUMEM_SIM_PAGEABLE (0/1: pageable memory access,
 * default 1), GPUMEM_SIM_VMM (0/1: virtual memory management, default 1),
 * GPUMEM_SIM_HAZARD (count|abort|off, default count), GPUMEM_SIM_MANAGED_POOLS (0/1: default
 * pools of managed memory, as CUDA 13 drivers have; default 1).
 *
 * Every function here returns GPUMEM_ERR_UNSUPPORTED when the simulated device is not the
 * backend in use, except gpumem_sim_configure which selects it. */
#ifndef GPUMEM_SIM_H
#define GPUMEM_SIM_H

#include "../gpumem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpumem_sim_config {
  int devices;            /* number of devices; 0: GPUMEM_SIM_DEVICES or 2 */
  uint64_t memory;        /* bytes of memory per device; 0: GPUMEM_SIM_MEMORY or 8 GiB */
  int no_pageable_access; /* nonzero: devices cannot access pageable host memory */
  int no_vmm;             /* nonzero: devices do not support virtual memory management */
  int abort_on_hazard;    /* nonzero: abort() at the first hazard */
  int no_managed_pools;   /* nonzero: no pools of managed memory (a driver before CUDA 13) */
} gpumem_sim_config;

/* Selects the simulated device with this configuration (NULL: from the environment).
 * Must come before the backend is initialized; GPUMEM_ERR_MISUSE afterwards. */
GPUMEM_API gpumem_status gpumem_sim_configure(const gpumem_sim_config *config);

/* Runs all work enqueued on `stream` so far (and, first, the work on other streams it
 * waits for). NULL: the current device's legacy default stream. */
GPUMEM_API gpumem_status gpumem_sim_complete(gpumem_stream stream);

/* Runs all pending work on every stream of every device. */
GPUMEM_API gpumem_status gpumem_sim_complete_all(void);

/* Number of operations enqueued on `stream` that have not run yet. */
GPUMEM_API gpumem_status gpumem_sim_pending(gpumem_stream stream, uint64_t *count);

/* Enqueues a simulated kernel on `stream` that reads and writes `bytes` bytes at `ptr`
 * (it fills them with `value` when it runs). This is the "use" hazard detection watches.
 * `ptr` may be device, managed or pinned host memory, or pageable host memory where the
 * device has pageable memory access. */
GPUMEM_API gpumem_status gpumem_sim_launch(gpumem_stream stream, void *ptr, size_t bytes,
                                           int value);

/* Number of hazards detected since initialization (or the last reset). */
GPUMEM_API uint64_t gpumem_sim_hazard_count(void);
GPUMEM_API void gpumem_sim_reset_hazards(void);

/* Kinds of device call, for fault injection and counting. */
typedef enum gpumem_sim_call {
  GPUMEM_SIM_CALL_MEM_ALLOC = 0, /* device memory (cuMemAlloc) */
  GPUMEM_SIM_CALL_MEM_FREE,
  GPUMEM_SIM_CALL_MANAGED_ALLOC,
  GPUMEM_SIM_CALL_HOST_ALLOC,
  GPUMEM_SIM_CALL_POOL_CREATE, /* driver pools */
  GPUMEM_SIM_CALL_POOL_ALLOC,
  GPUMEM_SIM_CALL_POOL_FREE,
  GPUMEM_SIM_CALL_STREAM_CREATE,
  GPUMEM_SIM_CALL_EVENT_CREATE,
  GPUMEM_SIM_CALL_EVENT_RECORD,
  GPUMEM_SIM_CALL_STREAM_WAIT,
  GPUMEM_SIM_CALL_SYNCHRONIZE, /* stream and event synchronization */
  GPUMEM_SIM_CALL_MEMCPY,
  GPUMEM_SIM_CALL_MEMSET,
  GPUMEM_SIM_CALL_PREFETCH,
  GPUMEM_SIM_CALL_VMM_RESERVE,
  GPUMEM_SIM_CALL_VMM_CREATE,
  GPUMEM_SIM_CALL_VMM_MAP,
  GPUMEM_SIM_CALL_VMM_SET_ACCESS,
  GPUMEM_SIM_CALL_VMM_UNMAP,
  GPUMEM_SIM_CALL_EVENT_QUERY, /* whether an event's work is done */
  GPUMEM_SIM_CALL_KIND_COUNT
} gpumem_sim_call;

/* Makes the `nth` next call of `kind` fail (1: the very next), once; 0 cancels. A failing
 * allocation fails as out of memory, other calls as a driver error. */
GPUMEM_API gpumem_status gpumem_sim_fail_call(gpumem_sim_call kind, uint64_t nth);

/* Number of calls of `kind` made so far (failed ones included). */
GPUMEM_API uint64_t gpumem_sim_call_count(gpumem_sim_call kind);

/* Bytes of device memory in use on a device (device allocations, driver pools and mapped
 * physical memory). */
GPUMEM_API gpumem_status gpumem_sim_device_used(int device, uint64_t *bytes);

/* Bytes of managed memory in use for a device, which counts apart from the device's own:
 * managed allocations and the allocated blocks of its default pool of managed memory. What
 * that pool keeps cached after frees is not counted: the pool is the process's, and keeps
 * up to whatever release threshold a program gave it. */
GPUMEM_API gpumem_status gpumem_sim_managed_used(int device, uint64_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_SIM_H */
