#!/usr/bin/env bash
# librmm.sh: RMM's C++ library for the tests of gpumem inside RMM (tests/cpp_rmm.cu,
# tests/gpu/cpp_rmm.cu): the librmm wheel of PyPI for the CUDA major version of nvcc, and
# the rapids-logger wheel it needs. The wheels are kept in wheels/librmm (ignored by git):
# where they are missing, pip downloads them there (this needs the registry); then pip
# installs them, offline, from that folder into TARGET_DIR (default build/librmm). A machine
# without a registry (the GPU machine) is given the folder with the tree.
#
# Prints TARGET_DIR (for cmake -DGPUMEM_RMM_ROOT=...) and exits 0; on failure says why on
# stderr and exits 1 (the tests are then skipped). PYTHON: the interpreter (default python3).
# Usage: scripts/librmm.sh [TARGET_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:-$root/build/librmm}
python=${PYTHON:-python3}
export PIP_ROOT_USER_ACTION=ignore # root in containers and on the GPU machine
wheels=$root/wheels/librmm
# The release the tests were written against; rapids-logger as its metadata pins it.
rmm_version="26.10.*"
logger_version="0.3.*"

fail() {
  echo "librmm.sh: $*" >&2
  exit 1
}
command -v "$python" >/dev/null || fail "no $python"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || fail "no nvcc: RMM's headers are CUDA C++"
cuda_major=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
[ -n "$cuda_major" ] || fail "cannot read the CUDA version from $nvcc --version"

shopt -s nullglob
rmm_wheels=("$wheels"/librmm_cu"$cuda_major"-*.whl)
logger_wheels=("$wheels"/rapids_logger-*.whl)
if [ ${#rmm_wheels[@]} -eq 0 ] || [ ${#logger_wheels[@]} -eq 0 ]; then
  mkdir -p "$wheels"
  "$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$wheels" \
    "librmm-cu$cuda_major==$rmm_version" "rapids-logger==$logger_version" >&2 ||
    fail "pip could not download librmm-cu$cuda_major and rapids-logger into $wheels"
  rmm_wheels=("$wheels"/librmm_cu"$cuda_major"-*.whl)
  logger_wheels=("$wheels"/rapids_logger-*.whl)
fi
[ ${#rmm_wheels[@]} -eq 1 ] && [ ${#logger_wheels[@]} -eq 1 ] ||
  fail "expected one librmm_cu$cuda_major and one rapids_logger wheel in $wheels"

# Installed already from these very wheels: nothing to do.
stamp="$target/.gpumem-wheels"
wanted=$(basename -a "${rmm_wheels[0]}" "${logger_wheels[0]}")
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] &&
  [ -f "$target/librmm/lib64/cmake/rmm/rmm-config.cmake" ]; then
  echo "$target"
  exit 0
fi
rm -rf "$target"
mkdir -p "$target"
"$python" -m pip install -q --disable-pip-version-check --no-deps --no-index --target "$target" \
  "${rmm_wheels[0]}" "${logger_wheels[0]}" >&2 ||
  fail "pip could not install $wanted into $target"
[ -f "$target/librmm/lib64/cmake/rmm/rmm-config.cmake" ] ||
  fail "the librmm wheel has no lib64/cmake/rmm/rmm-config.cmake"
echo "$wanted" >"$stamp"
echo "$target"
