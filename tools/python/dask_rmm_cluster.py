"""dask_rmm_cluster.py: a Dask cluster set up for RMM, running on gpumem through its
RMM-compatible layer, with nothing in the set-up naming gpumem: the workers `import rmm`,
call rmm.reinitialize and give CuPy rmm_cupy_allocator, as dask-cuda does, and get gpumem
because the program runs under `python -m gpumem.as_rmm` (its GPUMEM_AS_RMM=1 reaches every
worker process, whose interpreter then installs the layer at start).

    python -m gpumem.as_rmm tools/python/dask_rmm_cluster.py --cluster cuda
        dask_cuda.LocalCUDACluster(rmm_pool_size="1GB", rmm_allocator_external_lib_list=
        ["cupy"]): one worker per GPU, CuPy arrays (needs dask-cuda, CuPy and a GPU);
        --managed adds rmm_managed_memory=True; --async is rmm_async=True instead of a pool
    python -m gpumem.as_rmm tools/python/dask_rmm_cluster.py --cluster local [--arrays cupy]
        distributed.LocalCluster of --workers processes with a worker plugin making
        dask-cuda's calls (RMMSetup's rmm.reinitialize, its CuPy allocator set-up), or with
        --setup dask-cuda dask-cuda's RMMSetup plugin itself; arrays are rmm.DeviceBuffer
        (runs on the simulated device: the test suite runs it) or CuPy arrays

Workers then make chunks of device memory, sum them on the worker, and one task combines
every chunk on one worker (the others' chunks travel to it and land in its memory). Checks:
the client's and every worker's `rmm` is gpumem.rmm; each worker's current resource is
gpumem's pool with the requested initial size, over managed memory with --managed (under
the statistics adaptor this program adds); CuPy's allocator is gpumem's; the sums equal NumPy's; while the chunks are held, each
worker's gpumem resource holds at least their bytes, and after they are released it holds
what it held before; the statistics read back from each worker count the allocations.
Prints one JSON object (every figure) and exits 0 when every check passes, else 1 with the
failed checks on stderr.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
from distributed import WorkerPlugin


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", choices=["cuda", "local"], default="local")
    parser.add_argument("--arrays", choices=["cupy", "buffer"], default=None,
                        help="cupy (the default with --cluster cuda) or rmm.DeviceBuffer")
    parser.add_argument("--workers", type=int, default=2, help="--cluster local only")
    parser.add_argument("--setup", choices=["own", "dask-cuda"], default="own",
                        help="--cluster local only: this program's plugin making dask-cuda's "
                        "calls, or dask_cuda.plugins.RMMSetup itself")
    parser.add_argument("--pool-size", default="1GB",
                        help="the pool's initial size, as rmm_pool_size takes it")
    parser.add_argument("--managed", action="store_true",
                        help="rmm_managed_memory=True: the pool over managed memory")
    parser.add_argument("--async", dest="async_alloc", action="store_true",
                        help="rmm_async=True: the driver's pool (CudaAsyncMemoryResource), "
                        "no rmm_pool_size")
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--chunk-elements", type=int, default=1 << 22, help="float64 each")
    args = parser.parse_args(argv)
    if args.async_alloc and args.managed:
        parser.error("--async and --managed exclude each other (as in dask-cuda)")
    if args.arrays is None:
        args.arrays = "cupy" if args.cluster == "cuda" else "buffer"
    return args


def expected_chunk(index, elements):
    """Chunk `index` as NumPy computes it: what the workers compute on the device."""
    return (np.arange(elements, dtype=np.float64) % 97) * (index + 1)


def parse_pool_size(text):
    """The size dask-cuda's RMMSetup gives rmm.reinitialize for rmm_pool_size: bytes, rounded
    up to 256 (dask.utils.parse_bytes's units: "1GB" is 10**9, "1GiB" 2**30)."""
    from dask.utils import parse_bytes

    size = parse_bytes(text)
    return (size + 255) // 256 * 256


class RMMLikeSetup(WorkerPlugin):
    """What dask-cuda's RMMSetup worker plugin does with rmm_pool_size and
    rmm_allocator_external_lib_list=["cupy"], for a plain distributed.LocalCluster: the same
    calls, with the same arguments, into whatever `import rmm` gives. distributed calls
    setup(worker) in each worker, restarted ones included."""

    idempotent = True
    name = "rmm-like-setup"

    def __init__(self, pool_size, managed_memory, async_alloc, cupy_allocator):
        self.pool_size = pool_size
        self.managed_memory = managed_memory
        self.async_alloc = async_alloc
        self.cupy_allocator = cupy_allocator

    def setup(self, worker=None):
        import rmm

        if self.async_alloc:
            rmm.mr.set_current_device_resource(
                rmm.mr.CudaAsyncMemoryResource(initial_pool_size=None, release_threshold=None))
        else:
            rmm.reinitialize(pool_allocator=True, managed_memory=self.managed_memory,
                             initial_pool_size=self.pool_size, maximum_pool_size=None,
                             logging=False, log_file_name=None)
        if self.cupy_allocator:
            import cupy
            from rmm.allocators.cupy import rmm_cupy_allocator

            cupy.cuda.set_allocator(rmm_cupy_allocator)


def setup_plugin(args, pool_bytes):
    cupy = args.arrays == "cupy"
    if args.setup == "own":
        return RMMLikeSetup(pool_bytes, args.managed, args.async_alloc, cupy)
    from dask_cuda.plugins import RMMSetup

    return RMMSetup(initial_pool_size=None if args.async_alloc else args.pool_size,
                    maximum_pool_size=None, managed_memory=args.managed,
                    async_alloc=args.async_alloc, release_threshold=None,
                    log_directory=None, track_allocations=False,
                    external_lib_list=["cupy"] if cupy else None)


def enable_statistics():
    """On each worker, after the set-up: counters over the resource it made."""
    import rmm.statistics

    rmm.statistics.enable_statistics()


def worker_report():
    """What one worker's memory set-up is, read in the worker."""
    import rmm
    import rmm.statistics

    import gpumem

    current = rmm.mr.get_current_device_resource()
    below = getattr(current, "upstream", None)
    statistics = rmm.statistics.get_statistics()
    report = {
        "pid": os.getpid(),
        "GPUMEM_AS_RMM": os.environ.get("GPUMEM_AS_RMM"),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "rmm_module": rmm.__name__,
        "rmm_file": rmm.__file__,
        "backend": gpumem.backend(),
        "resource_type": f"{type(current).__module__}.{type(current).__qualname__}",
        "resource_is_gpumem": isinstance(current, gpumem.mr.MemoryResource),
        "spec": current.spec,
        "pool_spec": None if below is None else below.spec,
        "live_bytes": current.live_bytes,
        "reserved_bytes": current.reserved_bytes,
        "statistics": None if statistics is None else vars(statistics),
        "cupy_allocator": None,
    }
    if "cupy" in sys.modules:
        import cupy

        from gpumem.allocators.cupy import gpumem_cupy_allocator

        allocator = cupy.cuda.get_allocator()
        report["cupy_allocator"] = getattr(allocator, "__qualname__", repr(allocator))
        # gpumem's own allocator, or the RMM layer's rmm_cupy_allocator (RMM's, over gpumem).
        report["cupy_allocator_is_gpumem"] = allocator is gpumem_cupy_allocator or getattr(
            allocator, "__module__", ""
        ).startswith("gpumem.")
    return report


def make_chunk(index, elements, arrays):
    """Chunk `index`, computed in device memory from the current resource."""
    if arrays == "cupy":
        import cupy

        return (cupy.arange(elements, dtype=cupy.float64) % 97) * (index + 1)
    import rmm

    host = expected_chunk(index, elements)
    buffer = rmm.DeviceBuffer(size=host.nbytes)
    buffer.copy_from_host(host.view(np.uint8))  # RMM copies from arrays of bytes
    return buffer


def chunk_sum(chunk, arrays):
    """The sum of one chunk: on the GPU with CuPy; for a DeviceBuffer, from a device-to-device
    copy brought back to the host (no array library runs on the simulated device)."""
    if arrays == "cupy":
        return float(chunk.sum())
    import rmm

    copy = rmm.DeviceBuffer(size=chunk.size)
    copy.copy_from_device(chunk)
    return float(np.frombuffer(copy.tobytes(), dtype=np.float64).sum())


def combine(chunks, arrays):
    """Every chunk on one worker: the others' arrive through Dask's transfer, deserialized
    into this worker's device memory. Returns the total and this worker's live bytes while it
    holds them all."""
    import rmm

    live = rmm.mr.get_current_device_resource().live_bytes
    if arrays == "cupy":
        import cupy

        return float(cupy.stack(chunks).sum()), live
    return sum(chunk_sum(chunk, arrays) for chunk in chunks), live


def start_cluster(args):
    if args.cluster == "cuda":
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(rmm_pool_size=None if args.async_alloc else args.pool_size,
                                rmm_managed_memory=args.managed, rmm_async=args.async_alloc,
                                rmm_allocator_external_lib_list=["cupy"] if args.arrays == "cupy"
                                else None, dashboard_address=None)
    from distributed import LocalCluster

    return LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                        dashboard_address=None)


def wait_for(predicate, seconds=20.0):
    """Polls predicate() until it holds (Dask releases memory asynchronously)."""
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def run(args):
    from distributed import Client, wait

    import rmm

    result = {"client_rmm_module": rmm.__name__, "cluster": args.cluster, "arrays": args.arrays,
              "managed": args.managed, "async": args.async_alloc,
              "setup": "dask-cuda" if args.cluster == "cuda" else args.setup}
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    check(rmm.__name__ == "gpumem.rmm",
          f"the client's rmm is {rmm.__name__} ({getattr(rmm, '__file__', '?')}), not gpumem.rmm:"
          " run this under python -m gpumem.as_rmm")
    pool_bytes = parse_pool_size(args.pool_size)
    started = time.monotonic()
    with start_cluster(args) as cluster, Client(cluster) as client:
        if args.cluster == "local":
            client.register_plugin(setup_plugin(args, pool_bytes))
        result["start_s"] = round(time.monotonic() - started, 2)
        client.run(enable_statistics)
        before = client.run(worker_report)
        result["workers"] = before
        for address, report in before.items():
            check(report["GPUMEM_AS_RMM"] == "1", f"{address}: GPUMEM_AS_RMM not inherited")
            check(report["rmm_module"] == "gpumem.rmm",
                  f"{address}: rmm is {report['rmm_module']} ({report['rmm_file']})")
            check(report["resource_is_gpumem"], f"{address}: resource {report['resource_type']}")
            pool = report["pool_spec"] or ""
            if args.async_alloc:
                check(pool.startswith("async("), f"{address}: expected gpumem's async(...), "
                      f"got {pool!r}")
            else:
                upstream = "pool(managed(" if args.managed else "pool(vmm(" if report[
                    "backend"] == "sim" else "pool("  # on a GPU: vmm where the device has it
                check(pool.startswith(upstream) and f"initial={pool_bytes}," in pool,
                      f"{address}: expected gpumem's {upstream}...) of initial={pool_bytes}, "
                      f"got {pool!r}")
                check(report["reserved_bytes"] >= pool_bytes,
                      f"{address}: reserves {report['reserved_bytes']} < {pool_bytes}")
            if args.arrays == "cupy":
                check(report.get("cupy_allocator_is_gpumem"),
                      f"{address}: CuPy's allocator is {report['cupy_allocator']}")

        # Chunk i on worker i mod n: every worker holds some, and the combine below moves
        # the others' to one worker.
        addresses = sorted(before)
        futures = [client.submit(make_chunk, i, elements=args.chunk_elements, arrays=args.arrays,
                                 workers=[addresses[i % len(addresses)]], pure=False)
                   for i in range(args.chunks)]
        wait(futures)
        chunk_bytes = args.chunk_elements * 8
        held = client.who_has(futures)
        holding = client.run(worker_report)
        result["held"] = {}
        for address, report in holding.items():
            count = sum(1 for holders in held.values() if address in holders)
            least = before[address]["live_bytes"] + count * chunk_bytes
            result["held"][address] = {"chunks": count, "live_bytes": report["live_bytes"],
                                       "statistics": report["statistics"]}
            check(report["live_bytes"] >= least,
                  f"{address}: holds {count} chunks but gpumem has {report['live_bytes']} live "
                  f"bytes < {least}")
            check(report["statistics"]["total_count"] >= count,
                  f"{address}: {report['statistics']['total_count']} allocations counted for "
                  f"{count} chunks")
        check(len([a for a, r in result["held"].items() if r["chunks"]]) == min(
            len(holding), args.chunks), f"chunks not spread over every worker: {held}")

        sums = client.gather(client.map(chunk_sum, futures, arrays=args.arrays, pure=False))
        expected = [float(expected_chunk(i, args.chunk_elements).sum())
                    for i in range(args.chunks)]
        check(sums == expected, f"chunk sums {sums} != {expected}")
        target = addresses[0]
        total, live_there = client.submit(combine, futures, arrays=args.arrays,
                                          workers=[target], pure=False).result()
        result["total"] = total
        result["combine_live_bytes"] = live_there
        check(total == sum(expected), f"total {total} != {sum(expected)}")
        check(live_there >= args.chunks * chunk_bytes,
              f"{target} held every chunk with {live_there} live bytes < "
              f"{args.chunks * chunk_bytes}")

        # Released, the chunks' memory goes back to each worker's pool. CuPy may keep small
        # blocks of its own (kernel workspaces) from gpumem: less than half a chunk is let by.
        del futures
        slack = chunk_bytes // 2 if args.arrays == "cupy" else 0
        after = wait_for(lambda: (lambda reports: reports if all(
            reports[a]["live_bytes"] <= before[a]["live_bytes"] + slack for a in reports)
            else None)(client.run(worker_report)))
        if after is None:
            after = client.run(worker_report)
            check(False, "live bytes not back to where they were after release: " + ", ".join(
                f"{a} {after[a]['live_bytes']} > {before[a]['live_bytes']} + {slack}"
                for a in after))
        result["after"] = {a: {"live_bytes": r["live_bytes"], "statistics": r["statistics"]}
                           for a, r in after.items()}
    result["seconds"] = round(time.monotonic() - started, 2)
    result["failures"] = failures
    return result


def main(argv):
    args = parse_args(argv)
    result = run(args)
    print(json.dumps(result, indent=1, sort_keys=True))
    for failure in result["failures"]:
        print(f"FAILED: {failure}", file=sys.stderr)
    print(f"{'ok' if not result['failures'] else 'FAILED'}: {args.cluster} cluster "
          f"({result['setup']} set-up{', managed memory' if args.managed else ''}"
          f"{', rmm_async' if args.async_alloc else ''}), "
          f"{len(result['workers'])} worker(s), {args.arrays} arrays on gpumem "
          f"({result['seconds']} s)", file=sys.stderr)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
