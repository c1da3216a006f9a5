#!/usr/bin/env bash
# gpu-run.sh: the whole GPU job, made for one call of the device machine: build with the
# GPU tests, run the full test suite (GPU and simulated device), then the benchmarks beside
# the references. Logs go to $OUT (the device tool's folder) or ./gpu-out; the last lines
# printed are a short summary. Usage: scripts/gpu-run.sh [quick]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
summary() { echo "$*" | tee -a "$out/summary.txt"; }

nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader \
  >"$out/gpu.txt" 2>&1
summary "gpu: $(cat "$out/gpu.txt")"
# The device machine gets the working tree without .git: the caller passes the commit.
summary "commit: ${GPUMEM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"

# RMM's C++ library for the RMM interop tests (tests/cpp_rmm.cu, tests/gpu/cpp_rmm.cu): this
# machine reaches no registry, so the wheels come with the tree in wheels/librmm (run
# scripts/librmm.sh once where there is one, and carry that folder); scripts/librmm.sh
# installs them offline. Without them those tests are skipped.
rmm_options=()
if compgen -G "wheels/librmm/librmm_*.whl" >/dev/null; then
  if rmm_root=$(scripts/librmm.sh 2>"$out/librmm.log"); then
    rmm_options=(-DGPUMEM_RMM_ROOT="$rmm_root")
    summary "librmm: $(cd wheels/librmm && echo librmm_*.whl)"
  else
    summary "librmm: install FAILED (see librmm.log): the RMM interop tests are skipped"
  fi
else
  summary "librmm: no wheels in wheels/librmm: the RMM interop tests are skipped"
fi

jobs=$(nproc)
if ! { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGPUMEM_BUILD_GPU_TESTS=ON \
         -DCMAKE_CUDA_ARCHITECTURES=90 "${rmm_options[@]}" && cmake --build build -j "$jobs"; } >"$out/build.log" 2>&1; then
  summary "build FAILED (see build.log)"
  tail -30 "$out/build.log"
  exit 1
fi

# GPU tests one at a time (they time kernels and share the card); sim tests in parallel.
ctest --test-dir build -V -L gpu >"$out/ctest.log" 2>&1
gpu_rc=$?
ctest --test-dir build --output-on-failure -L sim -j "$jobs" >>"$out/ctest.log" 2>&1
sim_rc=$?
summary "tests: $(grep -E '^[0-9]+% tests passed' "$out/ctest.log" | tr '\n' ';') (gpu rc=$gpu_rc, sim rc=$sim_rc)"
grep -E 'Failed|Not Run|\*\*\*' "$out/ctest.log" | head -20

bench=build/bin/gpumem-bench
# gpumem's resources beside the references; GPUMEM_BENCH_RESOURCES overrides the list.
resources=(--resource cuda --resource async --resource "pool(vmm)" --resource "pool(cuda)"
  --resource "arena(vmm)" --resource "binning(pool(vmm))")
if [ -n "${GPUMEM_BENCH_RESOURCES:-}" ]; then
  eval "resources=($GPUMEM_BENCH_RESOURCES)"
fi
{
  # Medians of 5 timed passes: one pass is milliseconds, and this host is shared.
  "$bench" random --workload small,mixed,large --compare "${resources[@]}" --repeat 5 --table
  if [ "${1:-}" != quick ]; then
    # The driver pool is the threads reference; cuMemAlloc from 16 threads takes minutes.
    # Medians of 3 runs of all threads: a timed pass lasts milliseconds.
    # Each thread on its own stream, all on one stream, and a producer handing blocks to
    # consumers that free them on their own threads and streams.
    "$bench" threads --threads 1,4,16 --mode own,shared,producer --resource driver:async \
      --resource "pool(vmm)" --resource "arena(vmm)" --resource "arena(cuda)" --repeat 3 --table
  fi
  "$bench" replay --compare "${resources[@]}" --repeat 3 --table data/*.csv
  if [ "${1:-}" != quick ]; then
    # What composing costs: each pass-through adaptor beside the bare pool in one run, the
    # limit and the statistics adaptor over the arena from 16 threads, and pools over
    # adaptors over vmm on the traces (the same reserved bytes as pool(vmm) if wrapping
    # changes nothing).
    "$bench" random --workload small,mixed,large --resource "pool(vmm)" \
      --resource "limit(pool(vmm), max=64GiB)" --resource "aligned(pool(vmm), alignment=256)" \
      --resource "prefetch(pool(vmm))" --resource "retry(pool(vmm))" \
      --resource "faulty(pool(vmm))" --resource "stats(pool(vmm))" --resource "pool(cuda)" \
      --resource "pool(user_cuda)" --repeat 5 --table
    "$bench" threads --threads 1,4,16 --resource "arena(vmm)" \
      --resource "limit(arena(vmm), max=64GiB)" --resource "stats(arena(vmm))" --repeat 3 --table
    "$bench" replay --resource "pool(vmm)" --resource "pool(limit(vmm, max=80GiB))" \
      --resource "pool(faulty(vmm))" --resource "pool(prefetch(aligned(vmm)))" --table data/*.csv
    # What tracking costs: every outstanding allocation kept (and with stacks, a backtrace
    # per allocation) beside the bare pool and arena, one thread and 16.
    "$bench" random --workload small,mixed,large --resource "pool(vmm)" \
      --resource "tracking(pool(vmm))" --resource "tracking(pool(vmm), stacks=true)" \
      --resource "pool(tracking(vmm))" --repeat 5 --table
    "$bench" threads --threads 1,4,16 --resource "arena(vmm)" --resource "tracking(arena(vmm))" \
      --repeat 3 --table
    "$bench" replay --resource "pool(vmm)" --resource "tracking(pool(vmm))" --repeat 3 --table \
      data/*.csv
    # What the event log costs: a log over the pool and over the arena, to a file in /tmp.
    log="file=/tmp/gpumem-bench-log-%p.csv"
    "$bench" random --workload small,mixed,large --resource "pool(vmm)" \
      --resource "log(pool(vmm), $log)" --repeat 5 --table
    "$bench" threads --threads 1,4,16 --resource "arena(vmm)" --resource "log(arena(vmm), $log)" \
      --repeat 3 --table
    "$bench" replay --resource "pool(vmm)" --resource "log(pool(vmm), $log)" --repeat 3 --table \
      data/*.csv
    rm -f /tmp/gpumem-bench-log-*.csv
  fi
  # This machine's processor on the same host-side work as a simulated-device run elsewhere:
  # the pool's bookkeeping without a GPU, for comparing processors.
  GPUMEM_DEVICE=sim "$bench" random --workload small,mixed,large --resource "pool(cuda)" \
    --repeat 5 --table
} >"$out/bench.txt" 2>&1
summary "bench rc=$?"
grep -v '^{' "$out/bench.txt" | tail -80
