#!/usr/bin/env bash
# rmm-python.sh: RMM's Python package, for the RMM column of tools/python/compare_allocators.py
# on a machine that reaches no registry (the GPU machine). Two steps:
#
#   scripts/rmm-python.sh download [PYTHON_VERSION]
#       where there is a registry: the wheels of rmm-cu13 and what it needs (librmm-cu13,
#       rapids-logger, cuda-bindings, cuda-pathfinder) for CPython PYTHON_VERSION (default
#       3.12, the GPU machine's) on x86-64 Linux, into wheels/rmm-python (ignored by git;
#       about 14 MB). librmm-cu13 and rapids-logger are copied from wheels/librmm where
#       scripts/librmm.sh downloaded them and they fit; only what is missing comes from the
#       registry. Carry that folder to the GPU machine.
#   scripts/rmm-python.sh install [TARGET_DIR]
#       there: installs those wheels offline into TARGET_DIR (default build/rmm-python),
#       apart from the interpreter's own packages, and prints TARGET_DIR, which
#       compare_allocators.py --rmm-path puts first on the RMM replay's path only.
#
# PYTHON: the interpreter whose pip runs (default python3). Exit status 1, with the reason on
# stderr, when a step fails; scripts/gpu-run-traces.sh then skips the RMM column.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
wheels=$root/wheels/rmm-python
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
fail() {
  echo "rmm-python.sh: $*" >&2
  exit 1
}

case "${1:-}" in
download)
  version=${2:-3.12}
  mkdir -p "$wheels"
  platforms=()
  for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
    manylinux_2_17_x86_64 manylinux2014_x86_64; do platforms+=(--platform "$p"); done
  download=("$python" -m pip download -q --no-deps --only-binary=:all: --python-version
    "$version" "${platforms[@]}" -d "$wheels")
  # The same releases as scripts/librmm.sh's: its wheels serve where pip, offline, finds
  # that they fit this version and platform; else they come from the registry too.
  libraries=("librmm-cu13==26.10.*" "rapids-logger==0.3.*")
  if "${download[@]}" --no-index --find-links "$root/wheels/librmm" "${libraries[@]}" \
    2>/dev/null; then
    libraries=()
  fi
  "${download[@]}" "rmm-cu13==26.10.*" "${libraries[@]}" "cuda-bindings>=13,<14" \
    cuda-pathfinder || fail "pip could not download RMM's wheels into $wheels"
  ls "$wheels"
  ;;
install)
  target=${2:-$root/build/rmm-python}
  shopt -s nullglob
  found=("$wheels"/*.whl)
  [ ${#found[@]} -gt 0 ] || fail "no wheels in $wheels (scripts/rmm-python.sh download)"
  rm -rf "$target"
  "$python" -m pip install -q --no-deps --no-index --target "$target" "${found[@]}" >&2 ||
    fail "pip could not install the wheels of $wheels into $target"
  echo "$target"
  ;;
*)
  echo "usage: $0 download [PYTHON_VERSION] | install [TARGET_DIR]" >&2
  exit 2
  ;;
esac
