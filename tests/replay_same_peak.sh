#!/bin/sh
# replay_same_peak.sh BENCH TRACE...: a pool over limit(vmm) holds exactly what a pool over
# vmm holds at its peak, on every trace: the limit forwards placement, so the pool grows in
# place as over vmm alone. Compares the two resources' figures from one run of gpumem-bench;
# no number is pinned.
set -eu
bench=$1
shift
out=$("$bench" replay --resource "pool(vmm)" --resource "pool(limit(vmm, max=80GiB))" "$@")
printf '%s\n' "$out" | awk '
  /"bench":"replay"/ {
    match($0, /"resource":"[^"]*"/); resource = substr($0, RSTART + 12, RLENGTH - 13)
    match($0, /"trace":"[^"]*"/); trace = substr($0, RSTART + 9, RLENGTH - 10)
    match($0, /"peak_reserved_bytes":[0-9]+/); peak = substr($0, RSTART + 22, RLENGTH - 22)
    if (resource == "pool(vmm)") plain[trace] = peak; else limited[trace] = peak
  }
  END {
    traces = 0; bad = 0
    for (t in plain) {
      traces++
      if (!(t in limited) || limited[t] != plain[t]) {
        printf "%s: pool(vmm) peak %s, pool(limit(vmm)) peak %s\n", t, plain[t], limited[t]; bad = 1
      } else
        printf "%s: both peak at %s bytes reserved\n", t, plain[t]
    }
    if (traces == 0) { print "no replay lines"; exit 1 }
    exit bad
  }'
