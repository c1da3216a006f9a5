#!/usr/bin/env bash
# expect_output.sh: runs a program as a test that checks both its exit status and its output,
# which CTest's PASS_REGULAR_EXPRESSION alone cannot (it ignores the exit status).
#
# Usage: expect_output.sh [--match REGEX]... [--range FIELD MIN MAX]... -- COMMAND [ARGS...]
#   --match REGEX          the whole output (stdout and stderr, as one text in which "."
#                          also matches a newline) matches the extended regular expression
#   --range FIELD MIN MAX  the output has a JSON field "FIELD":NUMBER, and every such
#                          number lies within [MIN, MAX]
# Passes (0) when COMMAND exits 0 and every check holds; else prints why and exits 1.
set -uo pipefail

matches=()
ranges=()
while [[ $# -gt 0 && $1 != -- ]]; do
  case $1 in
  --match) matches+=("$2"); shift 2 ;;
  --range) ranges+=("$2 $3 $4"); shift 4 ;;
  *) echo "expect_output.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ ${1:-} == -- && $# -ge 2 ]] || { echo "usage: $0 [--match RE] [--range F MIN MAX] -- CMD" >&2; exit 2; }
shift

output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output"
failed=0
if [[ $status -ne 0 ]]; then
  echo "expect_output.sh: $1 exited with status $status" >&2
  failed=1
fi
for regex in "${matches[@]}"; do
  # -z: the output is one record, so a pattern may span lines.
  if ! printf '%s' "$output" | grep -qzE -- "$regex"; then
    echo "expect_output.sh: the output does not match: $regex" >&2
    failed=1
  fi
done
for range in "${ranges[@]}"; do
  read -r field min max <<<"$range"
  values=$(printf '%s' "$output" | grep -oE "\"$field\":-?[0-9.eE+-]+" | cut -d: -f2)
  if [[ -z $values ]]; then
    echo "expect_output.sh: no field \"$field\" in the output" >&2
    failed=1
    continue
  fi
  for value in $values; do
    if ! awk -v v="$value" -v lo="$min" -v hi="$max" 'BEGIN { exit !(v + 0 >= lo + 0 && v + 0 <= hi + 0) }'; then
      echo "expect_output.sh: \"$field\":$value is outside [$min, $max]" >&2
      failed=1
    fi
  done
done
exit $failed
