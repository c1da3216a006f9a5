"""bench_cupy.py: the cost of allocating and freeing CuPy arrays in a Python loop, through
CuPy's own memory pool and through gpumem's hook-up, in one process and run.

Each mode runs the same sequence: arrays of sizes drawn log-uniformly between 256 B and
4 MiB (seeded), allocated with cupy.empty and kept in a window of 64 live arrays, so every
step is one allocation and one free. Figure: microseconds per allocate+free pair, the
median of several repetitions, the modes taking turns. Prints one JSON line per mode and a
comparison.

    python3 tools/python/bench_cupy.py [--steps 100000] [--resource "pool(vmm)"]
"""
import argparse
import json
import math
import random
import statistics
import time


def sizes(steps, seed=7):
    rng = random.Random(seed)
    lo, hi = math.log(256), math.log(4 << 20)
    return [int(math.exp(lo + (hi - lo) * rng.random())) for _ in range(steps)]


def run(cupy, sequence, window=64):
    live = [None] * window
    stream = cupy.cuda.get_current_stream()
    start = time.perf_counter()
    for i, size in enumerate(sequence):
        live[i % window] = cupy.empty(size, dtype=cupy.uint8)  # frees the one it replaces
    live = None
    elapsed = time.perf_counter() - start
    stream.synchronize()
    return elapsed / len(sequence) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--resource", default="pool(vmm)")
    args = parser.parse_args()
    import cupy

    import gpumem
    from gpumem.allocators.cupy import gpumem_cupy_allocator

    sequence = sizes(args.steps)
    results = {}
    pool = gpumem.mr.from_spec(args.resource)
    gpumem.mr.set_current_device_resource(pool)
    modes = {
        "cupy MemoryPool": cupy.cuda.MemoryPool().malloc,
        "gpumem " + args.resource: gpumem_cupy_allocator,
    }
    for allocator in modes.values():
        cupy.cuda.set_allocator(allocator)
        run(cupy, sequence[: args.steps // 10])  # warm-up: grows the pools
    # The modes take turns, repetition by repetition: the host's speed drifts over seconds,
    # and one mode's repetitions all in a row would take that drift for a difference.
    times = {name: [] for name in modes}
    for _ in range(args.repeat):
        for name, allocator in modes.items():
            cupy.cuda.set_allocator(allocator)
            times[name].append(run(cupy, sequence))
    for name in modes:
        results[name] = statistics.median(times[name])
        print(json.dumps({"bench": "cupy_loop", "mode": name, "steps": args.steps,
                          "us_per_alloc_free": round(results[name], 3),
                          "repeats_us": [round(t, 3) for t in times[name]]}))
    cupy.cuda.set_allocator(None)
    reference = results["cupy MemoryPool"]
    ours = results["gpumem " + args.resource]
    print(f"CuPy MemoryPool {reference:.3f} us, gpumem {ours:.3f} us per allocate+free: "
          f"gpumem/CuPy = {ours / reference:.3f}")


if __name__ == "__main__":
    main()
