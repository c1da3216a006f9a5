#!/usr/bin/env bash
# gpu-run-traces.sh: records allocation traces of real PyTorch programs and compares gpumem's
# pool(vmm) with the driver pool, PyTorch's caching allocator (with and without expandable
# segments) and RMM's pool (where rmm is installed) on them and on data/*.csv, in one call of
# the device machine (docs/traces.md). Builds gpumem-bench, installs gpumem into $PYTHON's
# environment, records every workload of tools/python/record_traces.py (each in its own
# process, with a time budget), compares, and packs the traces into one tar.gz.
#
# Usage: scripts/gpu-run-traces.sh   (RMM's column needs wheels/rmm-python: see
#                                     scripts/rmm-python.sh)
#   PYTHON               the interpreter with torch (default python3)
#   TRACE_RESOURCES      gpumem resources to judge, as bash words (default "pool(vmm)"),
#                        e.g. TRACE_RESOURCES='"pool(vmm)" "arena(vmm)"'
#   TRACE_WORKLOADS      comma-separated workloads to record (default: all)
#   TRACE_WORKLOADS_FROM a file of more workloads (record_traces.py --workloads-from),
#                        e.g. tools/python/heldout_workloads.py
#   TRACE_SEED           record_traces.py --seed: other lengths, batches and graphs
#                        (default its own, 0)
#   TRACE_BUDGET         seconds of steps per workload (default 25)
#   TRACE_JOBS           workloads recorded at once (default 4)
# Output in $OUT (or ./gpu-out), at most six files: summary-traces.txt, compare.txt (the
# table), compare.jsonl, record.jsonl, traces.tar.gz (the recorded CSVs and each workload's
# output) and build.log; the last lines printed are the table and a summary.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-gpu-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
python=${PYTHON:-python3}
work="$out/traces"
rm -rf "$work" "$out/summary-traces.txt"
summary() { echo "$*" | tee -a "$out/summary-traces.txt"; }
stage_start=$SECONDS
stage() { summary "$1 ($((SECONDS - stage_start)) s)"; stage_start=$SECONDS; }

gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)
summary "gpu: $(echo "$gpu" | head -1)"
# The device machine gets the working tree without .git: the caller passes the commit.
summary "commit: ${GPUMEM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
versions='import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'
summary "python: $($python -c "$versions" 2>&1 | tail -1)"

if ! { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release &&
  cmake --build build -j "$(nproc)" --target gpumem-bench; } >"$out/build.log" 2>&1; then
  stage "build of gpumem-bench FAILED (see build.log)"
  tail -30 "$out/build.log"
  exit 1
fi
# pip, as a user installs it, into the interpreter's own environment (the machine is fresh
# each lease); where that fails, the extension built in place (the log goes after the
# build's).
if $python -m pip install -q --no-build-isolation --no-deps . >>"$out/build.log" 2>&1; then
  stage "built gpumem-bench; pip install --no-build-isolation --no-deps .: ok"
elif $python setup.py -q build_ext --inplace >>"$out/build.log" 2>&1; then
  export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
  stage "built gpumem-bench; pip install FAILED (see build.log): gpumem built in place"
else
  stage "built gpumem-bench; gpumem FAILED to build (see build.log)"
  tail -30 "$out/build.log"
  exit 1
fi

selection=()
[ -n "${TRACE_WORKLOADS:-}" ] && selection=(--only "$TRACE_WORKLOADS")
[ -n "${TRACE_WORKLOADS_FROM:-}" ] && selection+=(--workloads-from "$TRACE_WORKLOADS_FROM")
[ -n "${TRACE_SEED:-}" ] && selection+=(--seed "$TRACE_SEED")
# Each workload stops stepping at its budget and is killed 60 s past it; the whole
# recording is cut at 300 s.
timeout 300 "$python" tools/python/record_traces.py --out "$work" --jobs "${TRACE_JOBS:-4}" \
  --budget "${TRACE_BUDGET:-25}" --import-allowance 60 "${selection[@]}" | tee "$out/record.txt"
record_rc=${PIPESTATUS[0]}
traces=(data/*.csv)
recorded=0
for trace in "$work"/*.csv; do
  if [[ -e $trace && $trace != *.invalid.csv ]]; then
    traces+=("$trace")
    recorded=$((recorded + 1))
  fi
done
stage "recorded: rc=$record_rc; $recorded valid traces"
cp "$work/record.jsonl" "$out/record.jsonl" 2>/dev/null

resources=("pool(vmm)")
[ -n "${TRACE_RESOURCES:-}" ] && eval "resources=($TRACE_RESOURCES)"
resource_args=()
for spec in "${resources[@]}"; do resource_args+=(--resource "$spec"); done
# RMM's Python package, where its wheels came with the tree (scripts/rmm-python.sh
# download, then carry wheels/rmm-python): installed apart, for the RMM replay only.
if compgen -G "wheels/rmm-python/rmm_*.whl" >/dev/null; then
  if rmm_path=$(PYTHON=$python scripts/rmm-python.sh install 2>>"$out/build.log"); then
    resource_args+=(--rmm-path "$rmm_path")
    stage "RMM: $(cd wheels/rmm-python && echo rmm_*.whl)"
  else
    stage "RMM: install FAILED (see build.log): no RMM column"
  fi
fi
timeout 240 "$python" tools/python/compare_allocators.py "${resource_args[@]}" --repeat 3 \
  --json "$out/compare.jsonl" "${traces[@]}" >"$out/compare.txt" 2>&1
compare_rc=$?
stage "compared ${#traces[@]} traces: rc=$compare_rc"

# One archive: the device machine returns a few files, not a folder of them.
(cd "$work" && tar -czf "$out/traces.tar.gz" --exclude=raw ./*.csv record.jsonl logs) 2>/dev/null
stage "packed: traces.tar.gz $(du -h "$out/traces.tar.gz" 2>/dev/null | cut -f1)"
[ -n "${OUT:-}" ] && rm -rf "$work" "$out/record.txt"
cat "$out/compare.txt"
grep -E 'at or below|^PROBLEM|^ERROR' "$out/compare.txt" | head -20 >>"$out/summary-traces.txt"
exit $compare_rc
