#!/usr/bin/env bash
# check-commits.sh: checks the messages of the commits a branch adds, before it is merged:
# a subject of at most 72 characters, then a blank line and a body that says why.
# Merge commits are left out (git writes their subjects). Usage:
#   scripts/check-commits.sh [BASE]    # the commits in BASE..HEAD; BASE defaults to main
# Not part of test.sh: CI checks out one branch with no base to compare with, and most of
# the history before this rule (2026-11) would fail it.
set -euo pipefail
base=${1:-main}
bad=0
for commit in $(git rev-list --no-merges "$base..HEAD"); do
  subject=$(git log -1 --format=%s "$commit")
  short=$(git rev-parse --short "$commit")
  if [[ ${#subject} -gt 72 ]]; then
    echo "$short: subject of ${#subject} characters (at most 72): $subject"
    bad=1
  fi
  if [[ -z $(git log -1 --format=%b "$commit" | tr -d '[:space:]') ]]; then
    echo "$short: no body saying why: $subject"
    bad=1
  fi
done
exit $bad
