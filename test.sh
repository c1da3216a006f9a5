#!/usr/bin/env bash
# test.sh: builds gpumem and runs every test that can run on this machine: the whole suite
# (on the simulated device, and on the GPU where there is one), then the simulated-device
# suite again under AddressSanitizer+UndefinedBehaviorSanitizer and under ThreadSanitizer.
# Needs gcc, cmake and the CUDA headers (cuda.h); installs cmake (and clang-format, for the
# format check) from Debian if missing. Compiler warnings are errors in every build here
# (GPUMEM_WERROR), as they are not for users.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v cmake >/dev/null; then
  apt-get update -qq && apt-get install -y -qq cmake
fi
# clang-format is only for the format check below: where it cannot be installed, the check
# is skipped (and says so).
if ! command -v clang-format >/dev/null && command -v apt-get >/dev/null; then
  { apt-get update -qq && apt-get install -y -qq clang-format; } ||
    echo "Could not install clang-format."
fi

# The sources as .clang-format says, checked with the clang-format this check was made with
# (Debian 12's, version 14): another version may format some lines differently.
if command -v clang-format >/dev/null; then
  if [[ $(clang-format --version) =~ version\ 14\. ]]; then
    scripts/check-format.sh
  else
    echo "Format check skipped: $(clang-format --version) is not version 14."
  fi
else
  echo "Format check skipped: no clang-format."
fi

jobs=$(nproc)
gpu_options=()
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null; then
  echo "A GPU is present: building and running the GPU tests too."
  gpu_options=(-DGPUMEM_BUILD_GPU_TESTS=ON)
else
  echo "No GPU here: the tests run on gpumem's simulated device; GPU-only tests are skipped."
fi

# RMM's C++ library (the librmm wheel of PyPI) for the tests of gpumem inside RMM and RMM under
# gpumem (tests/cpp_rmm.cu): scripts/librmm.sh pip-installs it into build/librmm, downloading
# it into wheels/librmm the first time. Where it cannot (no nvcc, no registry), those tests
# are skipped, and CMake says so.
rmm_options=()
if rmm_root=$(scripts/librmm.sh); then
  rmm_options=(-DGPUMEM_RMM_ROOT="$rmm_root")
else
  echo "No librmm: the RMM interop tests are skipped."
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGPUMEM_WERROR=ON "${gpu_options[@]}" \
  "${rmm_options[@]}" >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

# The Python package, in a virtual environment of its own: pip builds the extension (with
# the C library compiled in) and the suite runs on the simulated device (or the GPU).
echo "== Python package =="
python3 -m venv build/venv
build/venv/bin/python -m pip install -q --upgrade pip
# distributed: python/tests/test_dask.py runs a cluster of worker processes (it skips
# where distributed is absent); pinned to a release that supports Python 3.10 to 3.14.
GPUMEM_WERROR=1 build/venv/bin/python -m pip install -q pytest numpy distributed==2026.8.0 .
gpu_python=()
[ ${#gpu_options[@]} -gt 0 ] && gpu_python=(env GPUMEM_TEST_GPU=1)
(cd build && "${gpu_python[@]}" venv/bin/python -m pytest -q -rs ../python/tests)

# The ASan+UBSan build also compiles in debug level 3 (docs/reference.md, "Debug levels"): its tests run
# with the internal assertions on, the suballocators' tests once more validating every
# structure after each call (the *_debug2 tests), and the conformance suite once more with
# guards, poison and quarantine around every block, beside the test of what they catch
# (conformance_debug3, debug3).
for sanitizer in address,undefined thread; do
  dir="build-${sanitizer//,/-}"
  debug_level=0
  [ "$sanitizer" = address,undefined ] && debug_level=3
  echo "== simulated-device suite under -fsanitize=$sanitizer, debug level $debug_level =="
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DGPUMEM_SANITIZE="$sanitizer" \
    -DGPUMEM_DEBUG_LEVEL="$debug_level" -DGPUMEM_WERROR=ON -DGPUMEM_BUILD_TOOLS=OFF >/dev/null
  cmake --build "$dir" -j "$jobs"
  # The consumer test installs and rebuilds the library; it proves packaging, not memory
  # safety, and runs in the main build above.
  # The out-of-memory tests ask host malloc for a petabyte: the sanitizers must answer NULL
  # as malloc does, not abort.
  ASAN_OPTIONS="allocator_may_return_null=1" TSAN_OPTIONS="halt_on_error=1 allocator_may_return_null=1" ctest --test-dir "$dir" --output-on-failure -j "$jobs" \
    -L sim -E consumer
done
# The libFuzzer targets (tests/fuzz), briefly: 20 s each under ASan+UBSan, where clang links
# libFuzzer (scripts/fuzz.sh 3600 runs them an hour each).
if why=$(scripts/fuzz.sh --available); then
  scripts/fuzz.sh 20
else
  echo "Fuzzing skipped: $why."
fi
echo "All tests passed."
