#!/bin/sh
# log_replay_peak.sh BENCH TEST_LOG TRACE...: a log written by gpumem replays through
# gpumem-bench replay to the same peak live bytes. Each trace is replayed through a log
# adaptor, and the log replayed again: the two replays' peak live bytes must be equal. Then
# a log of 4 threads on streams of their own freeing each other's blocks, and of a fifth on
# the default stream (written by test_log), replays with 5 threads and 5 streams through a
# log whose replay peaks at the same live bytes, which are also those test_log read from
# its own file.
set -eu
bench=$1
writer=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
same() {
  if [ "$2" != "$3" ] || [ -z "$2" ]; then
    echo "$1: peak live $2, its log's replay $3"
    exit 1
  fi
  echo "$1: peak live $2 bytes, and the same replaying its log"
}
for trace in "$@"; do
  out=$("$bench" replay --resource "log(pool(vmm), file=$tmp/log.csv)" "$trace")
  first=$(printf '%s\n' "$out" | field peak_live_bytes)
  out=$("$bench" replay --resource "pool(vmm)" "$tmp/log.csv")
  again=$(printf '%s\n' "$out" | field peak_live_bytes)
  same "$(basename "$trace")" "$first" "$again"
done
out=$("$writer" threads-log "$tmp/threads.csv")
written=$(printf '%s\n' "$out" | sed -n 's/.*peak live \([0-9]*\) bytes.*/\1/p')
line=$("$bench" replay --resource "log(pool(vmm), file=$tmp/again.csv)" "$tmp/threads.csv")
case $line in
*'"threads":5,"streams":5,'*) ;;
*) echo "the log of 5 threads on 5 streams replayed as: $line"; exit 1 ;;
esac
first=$(printf '%s\n' "$line" | field peak_live_bytes)
same "test_log's own reading of its log" "$written" "$first"
out=$("$bench" replay --resource "pool(vmm)" "$tmp/again.csv")
again=$(printf '%s\n' "$out" | field peak_live_bytes)
same "5 threads on 5 streams" "$first" "$again"
