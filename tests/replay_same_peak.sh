#!/bin/sh
# replay_same_peak.sh BENCH TRACE...: pools over pass-through adaptors over vmm
# (pool(limit(vmm)), pool(faulty(vmm)), pool(tracking(vmm)), pool(stats(vmm))) hold exactly
# what a pool over vmm holds at its peak, on every trace: the adaptors forward placement, so
# the pool grows in place as over vmm alone. Compares the resources' figures from one run of
# gpumem-bench; no number is pinned.
set -eu
bench=$1
shift
out=$("$bench" replay --resource "pool(vmm)" --resource "pool(limit(vmm, max=80GiB))" \
  --resource "pool(faulty(vmm))" --resource "pool(tracking(vmm))" --resource "pool(stats(vmm))" \
  "$@")
printf '%s\n' "$out" | awk '
  /"bench":"replay"/ {
    match($0, /"resource":"[^"]*"/); resource = substr($0, RSTART + 12, RLENGTH - 13)
    match($0, /"trace":"[^"]*"/); trace = substr($0, RSTART + 9, RLENGTH - 10)
    if (!match($0, /"peak_reserved_bytes":[0-9]+/)) { print "no peak in: " $0; bad = 1; next }
    peak = substr($0, RSTART + 22, RLENGTH - 22)
    if (resource == "pool(vmm)") plain[trace] = peak
    else { wrapped[trace, resource] = peak; names[resource] = 1 }
  }
  END {
    traces = 0
    for (t in plain) {
      traces++
      for (r in names) {
        if (!((t, r) in wrapped) || wrapped[t, r] != plain[t]) {
          printf "%s: pool(vmm) peak %s, %s peak %s\n", t, plain[t], r, wrapped[t, r]; bad = 1
        } else
          printf "%s: %s peaks at %s bytes reserved, as pool(vmm)\n", t, r, plain[t]
      }
    }
    if (traces == 0 || length(names) != 4) { print "expected pool(vmm) and 4 wrapped pools"; exit 1 }
    exit bad
  }'
