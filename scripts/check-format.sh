#!/usr/bin/env bash
# check-format.sh: checks that every C, C++ and CUDA file of gpumem (library, headers, Python
# extension, tools, tests) is formatted as .clang-format says, without changing any. Exits
# 1 and names each file that differs; `scripts/check-format.sh --fix` formats them instead.
# The files are the ones git knows (tracked, or new and not ignored), so build directories
# and what they generate stay out; gpumem vendors no third-party code. CLANG_FORMAT picks the program (default
# clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format=${CLANG_FORMAT:-clang-format}
command -v "$clang_format" >/dev/null || { echo "check-format.sh: no $clang_format" >&2; exit 2; }

# Tracked files and new ones not yet committed (but not ignored ones); without git (a copy
# of the tree), every such file outside build directories.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- \
    '*.c' '*.h' '*.cu' '*.cuh' '*.cpp' '*.hpp' | sort -u)
else
  mapfile -t files < <(find . \( -path './build*' -o -path './.*' -o -name venv \) -prune -o \
    -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' \
    -o -name '*.hpp' \) -print | sort)
fi
if [[ ${1:-} == --fix ]]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi
bad=()
for file in "${files[@]}"; do
  "$clang_format" --dry-run --Werror "$file" >/dev/null 2>&1 || bad+=("$file")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "Not formatted as .clang-format says ($("$clang_format" --version)):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "Run scripts/check-format.sh --fix (or clang-format -i FILE) and commit the result." >&2
  exit 1
fi
echo "clang-format: ${#files[@]} files formatted as .clang-format says."
