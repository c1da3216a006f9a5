#!/usr/bin/env bash
# sanitizer_sees_blocks.sh PROGRAM: runs tests/gpu/sanitizer_sees_blocks.cu under
# compute-sanitizer's memcheck and checks that the tool reports a write past a block and a
# write into a freed block of gpumem's suballocators over the device's own allocations, and
# nothing on a clean workload. Over vmm and async the tool accepts no annotation: those
# faults are printed, not required. Exit 77 without the tool.
set -uo pipefail
program=$1
tool=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$tool" ] || { echo "compute-sanitizer not found: skipped"; exit 77; }
nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }

failures=0
run() { # spec case -> the tool's output in $log, the program's exit status in $status
  log=$("$tool" --tool memcheck "$program" "$1" "$2" 2>&1)
  status=$?
}
expect() { # spec case what(report|clean)
  run "$1" "$2"
  local verdict=ok
  if grep -q "Warning: Call to nvtx" <<<"$log"; then
    verdict="FAILED (the tool refused an annotation)"
  elif [ "$3" = report ] && ! grep -q "Invalid __global__ write" <<<"$log"; then
    verdict="FAILED (no report)"
  elif [ "$3" = clean ] && ! grep -q "ERROR SUMMARY: 0 errors" <<<"$log"; then
    verdict="FAILED (reports on a clean run)"
  elif [ "$3" = clean ] && { [ "$status" -ne 0 ] || ! grep -q "kernels: no error" <<<"$log"; }; then
    verdict="FAILED (the clean run did not finish: exit status $status)"
  fi
  printf '%-40s %-10s %-7s %s\n' "$1" "$2" "$3" "$verdict"
  if [ "$verdict" != ok ]; then
    failures=$((failures + 1))
    grep -v "Host Frame" <<<"$log" | head -30
  fi
}

for spec in "pool(cuda, initial=64MiB)" "arena(cuda)" "binning(pool(cuda, initial=64MiB))" \
  "pool(managed, initial=64MiB)" "pool(pinned_host, initial=64MiB)" \
  "pool(limit(cuda, max=1GiB), initial=64MiB)"; do
  expect "$spec" clean clean
  expect "$spec" past_end report
  expect "$spec" after_free report
done
# The tool accepts no annotation over memory mappings (vmm) or a driver pool's blocks
# (async): those pools are annotated with nothing, run clean, and their faults are seen
# only where they leave the mapping or block.
for spec in "pool(vmm)" "pool(async)"; do
  expect "$spec" clean clean
  for case in past_end after_free; do
    run "$spec" $case
    grep -q "Invalid __global__ write" <<<"$log" && seen=reported || seen="not seen"
    printf '%-40s %-10s %s\n' "$spec" "$case" "$seen"
  done
done
# One report in full, to show what a user sees.
run "pool(cuda, initial=64MiB)" past_end
grep -v "Host Frame" <<<"$log" | head -20
echo "$failures failed"
[ "$failures" -eq 0 ]
