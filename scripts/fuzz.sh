#!/usr/bin/env bash
# fuzz.sh [SECONDS]: builds gpumem's libFuzzer targets (tests/fuzz) with clang under
# AddressSanitizer+UndefinedBehaviorSanitizer in build-fuzz/, and runs each for SECONDS
# (default 30) over a copy of its seed corpus, failing if any input crashes one. The targets
# run side by side where there is a core for each.
#   scripts/fuzz.sh          30 s a target, as CI does (test.sh, with less)
#   scripts/fuzz.sh 3600     an hour a target
#   scripts/fuzz.sh --available   exits 0 where clang links libFuzzer, else 1 (and says why)
# What each run found stays in build-fuzz/corpus/TARGET (a later run starts from it); an
# input that crashed a target is written to build-fuzz/crashes/TARGET/ (ignored by git:
# build*/), with the target's output in build-fuzz/logs/TARGET.log. To replay one:
#   build-fuzz/fuzz_TARGET build-fuzz/crashes/TARGET/crash-...
# and, once the bug is fixed, add it to tests/fuzz/corpus/TARGET/ so CTest replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
cc=${FUZZ_CC:-clang}
dir=build-fuzz
targets=(spec ops)

# clang must link a libFuzzer program (Debian's clang carries libFuzzer; some don't).
available() {
  command -v "$cc" >/dev/null || { echo "no $cc"; return 1; }
  local probe
  probe=$(mktemp -d)
  printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }' >"$probe/probe.c"
  if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/probe.c" -o "$probe/probe" \
    >/dev/null 2>&1; then
    rm -rf "$probe"
    echo "$cc does not link libFuzzer (-fsanitize=fuzzer)"
    return 1
  fi
  rm -rf "$probe"
}

if [[ ${1:-} == --available ]]; then
  available
  exit
fi
seconds=${1:-30}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS | --available]" >&2; exit 2; }
why=$(available) || { echo "fuzz.sh: $why" >&2; exit 2; }

cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGPUMEM_BUILD_FUZZERS=ON -DGPUMEM_BUILD_TESTS=OFF -DGPUMEM_BUILD_TOOLS=OFF \
  -DGPUMEM_WERROR=ON >/dev/null
jobs=$(nproc)
cmake --build "$dir" -j "$jobs" --target "${targets[@]/#/fuzz_}"

# allocator_may_return_null: out-of-memory paths ask host malloc for more than there is,
# and must get NULL as from malloc, not an abort.
export ASAN_OPTIONS="allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
run_target() {
  local target=$1 options=()
  mkdir -p "$dir/corpus/$target" "$dir/crashes/$target" "$dir/logs"
  cp -n tests/fuzz/corpus/"$target"/* "$dir/corpus/$target/"
  [[ -f tests/fuzz/$target.dict ]] && options+=(-dict="tests/fuzz/$target.dict")
  # A sequence of calls needs length to reach deep states: long inputs from the start.
  [[ $target == ops ]] && options+=(-max_len=1200 -len_control=0)
  "$dir/bin/fuzz_$target" -max_total_time="$seconds" -timeout=60 -print_final_stats=1 \
    -artifact_prefix="$dir/crashes/$target/" "${options[@]}" "$dir/corpus/$target" \
    >"$dir/logs/$target.log" 2>&1
}

report() {
  local target=$1 status=$2
  if [[ $status -eq 0 ]]; then
    echo "fuzz_$target: $(grep -Eo 'stat::number_of_executed_units: *[0-9]+' \
      "$dir/logs/$target.log" | grep -Eo '[0-9]+$') inputs, no crash"
    return 0
  fi
  echo "fuzz_$target FAILED; the end of its output ($dir/logs/$target.log):"
  tail -n 60 "$dir/logs/$target.log"
  echo "reproducer(s) in $dir/crashes/$target/: $(ls "$dir/crashes/$target/")"
  return 1
}

# Side by side where there is a core for each target, else one after the other.
echo "== fuzzing ${targets[*]} for ${seconds} s each (ASan+UBSan) =="
declare -A pid status
for target in "${targets[@]}"; do
  run_target "$target" &
  pid[$target]=$!
  if [[ $jobs -lt ${#targets[@]} ]]; then
    wait "${pid[$target]}" && status[$target]=0 || status[$target]=$?
  fi
done
failed=0
for target in "${targets[@]}"; do
  if [[ -z ${status[$target]:-} ]]; then
    wait "${pid[$target]}" && status[$target]=0 || status[$target]=$?
  fi
  report "$target" "${status[$target]}" || failed=1
done
[[ $failed -eq 0 ]] || exit 1
echo "Fuzzing passed."
