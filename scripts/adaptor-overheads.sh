#!/usr/bin/env bash
# adaptor-overheads.sh: what the pass-through adaptors cost over their upstream, measured so
# that a noisy host moves the figure little. One pass is milliseconds, and a host shared
# with other jobs slows some passes several-fold, so a single run of each resource after the
# other can put a quiet bare run beside a slowed adaptor run. Here each round runs every
# resource of a set in one process (medians of --repeat passes each, the set's order rotated
# from round to round), the rounds alternate,
# and the figure is the median over rounds of each round's difference (one thread: ns per
# operation over the bare resource) or ratio (16 threads: share of the bare throughput).
#
# Usage: scripts/adaptor-overheads.sh [ROUNDS] (default 5); GPUMEM_DEVICE picks the device
# as for gpumem-bench. Logs go to $OUT (or ./gpu-out); the table is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
out=${OUT:-gpu-out}
mkdir -p "$out"
bench=${GPUMEM_BENCH:-build/bin/gpumem-bench}
log="$out/adaptor-overheads.jsonl"
: >"$log"

single=("pool(vmm)" "limit(pool(vmm), max=64GiB)" "stats(pool(vmm))"
  "aligned(pool(vmm), alignment=256)" "prefetch(pool(vmm))" "retry(pool(vmm))" "pool(cuda)"
  "pool(user_cuda)")
threaded=("arena(vmm)" "limit(arena(vmm), max=64GiB)" "stats(arena(vmm))")
# Each round starts the list at another resource: a resource that always ran right after
# another would carry whatever that one left behind (caches, the heap, the clock).
rotated() { # ROUND NAME...: the names as --resource arguments, rotated by ROUND
  local shift=$1
  shift
  local names=("$@") i
  for ((i = 0; i < ${#names[@]}; i++)); do
    printf '%s\0%s\0' --resource "${names[(i + shift) % ${#names[@]}]}"
  done
}
for ((round = 1; round <= rounds; round++)); do
  mapfile -d '' args < <(rotated "$round" "${single[@]}")
  "$bench" random --workload small,mixed,large "${args[@]}" --repeat 7 |
    sed "s/^{/{\"round\":$round,/" >>"$log"
  mapfile -d '' args < <(rotated "$round" "${threaded[@]}")
  "$bench" threads --threads 16 "${args[@]}" --repeat 7 |
    sed "s/^{/{\"round\":$round,/" >>"$log"
done

python3 - "$log" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
def figure(bench, resource, workload, rnd):
    for r in rows:
        if (r["bench"], r["resource"], r["workload"], r["round"]) == (bench, resource, workload, rnd):
            return r["ns_per_op"] if bench == "random" else r["mops"]
rounds = sorted({r["round"] for r in rows})
print("One thread, ns per operation over pool(vmm): median over %d rounds (each round's figures)" % len(rounds))
for resource in ["limit(pool(vmm), max=64GiB)", "stats(pool(vmm))", "aligned(pool(vmm), alignment=256)",
                 "prefetch(pool(vmm))", "retry(pool(vmm))"]:
    cells = []
    for workload in ["small", "mixed", "large"]:
        diffs = [figure("random", resource, workload, n) - figure("random", "pool(vmm)", workload, n)
                 for n in rounds]
        cells.append("%+.1f (%s)" % (statistics.median(diffs), " ".join("%+.1f" % d for d in diffs)))
    print("  %-36s small %s | mixed %s | large %s" % (resource, *cells))
# A pool over a user-written resource (the cuda resource's calls through the public
# operations struct) against the pool over cuda itself: the same once warm.
cells = []
for workload in ["small", "mixed", "large"]:
    diffs = [figure("random", "pool(user_cuda)", workload, n) - figure("random", "pool(cuda)", workload, n)
             for n in rounds]
    cells.append("%+.1f (%s)" % (statistics.median(diffs), " ".join("%+.1f" % d for d in diffs)))
print("  %-36s small %s | mixed %s | large %s" % ("pool(user_cuda) over pool(cuda)", *cells))
def fastest(resource, workload):
    return min(r["ns_per_op_min"] for r in rows
               if (r["bench"], r["resource"], r["workload"]) == ("random", resource, workload))
print("  the same from each resource's fastest pass over all rounds (the host's least slowed):")
for resource in ["limit(pool(vmm), max=64GiB)", "stats(pool(vmm))"]:
    print("  %-36s %s" % (resource, " / ".join(
        "%+.1f" % (fastest(resource, w) - fastest("pool(vmm)", w)) for w in ["small", "mixed", "large"])))
bare = [figure("random", "pool(vmm)", w, n) for w in ["small", "mixed", "large"] for n in rounds]
print("  pool(vmm) itself: %.1f to %.1f ns" % (min(bare), max(bare)))
print("16 threads, share of arena(vmm)'s throughput: median over rounds (each round's)")
for resource in ["limit(arena(vmm), max=64GiB)", "stats(arena(vmm))"]:
    shares = [figure("threads", resource, "threads", n) / figure("threads", "arena(vmm)", "threads", n)
              for n in rounds]
    print("  %-36s %.0f%% (%s)" % (resource, 100 * statistics.median(shares),
                                    " ".join("%.0f%%" % (100 * s) for s in shares)))
arena = [figure("threads", "arena(vmm)", "threads", n) for n in rounds]
print("  arena(vmm) itself: %.1f to %.1f Mops/s" % (min(arena), max(arena)))
EOF
