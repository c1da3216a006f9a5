#!/usr/bin/env bash
# gpu-run-python.sh: the Python side of the GPU job, for one call of the device machine
# (which reaches no package registry): build gpumem's extension with what the machine has,
# check that `pip install --no-build-isolation .` works there, run the pytest suite on the
# GPU with real CuPy, Numba and PyTorch, then the CuPy and PyTorch benchmarks. Logs go to
# $OUT (or ./gpu-out); the last lines printed are a summary.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
summary() { echo "$*" | tee -a "$out/summary-python.txt"; }
python=${PYTHON:-python3}
summary "python: $($python --version 2>&1); $($python -c 'import setuptools, numpy; print("setuptools", setuptools.__version__, "numpy", numpy.__version__)' 2>&1)"
summary "frameworks: $($python -c 'import cupy, torch; print("cupy", cupy.__version__, "torch", torch.__version__)' 2>&1) $($python -c 'import numba; print("numba", numba.__version__)' 2>&1 | tail -1)"

# pip, as a user would install it there: into the interpreter's own environment (the
# machine is fresh each lease), so that the gpumem_as_rmm.pth it installs is read by the
# child interpreters that test_as_rmm.py and RMM's suite start.
if $python -m pip install -q --no-build-isolation --no-deps . >"$out/pip.log" 2>&1; then
  summary "pip install --no-build-isolation .: ok"
else
  summary "pip install --no-build-isolation .: FAILED (see pip.log); building in place"
  $python setup.py -q build_ext --inplace >"$out/pip.log" 2>&1 || { tail -20 "$out/pip.log"; exit 1; }
  export PYTHONPATH=$PWD/python
fi

# From /tmp, so that the tree's python/ does not shadow the installed package.
(cd /tmp && GPUMEM_TEST_GPU=1 $python -m pytest -v -rs "$OLDPWD/python/tests") >"$out/pytest.log" 2>&1
summary "pytest (GPU): rc=$? $(tail -1 "$out/pytest.log")"
grep -E "FAILED|ERROR|SKIPPED" "$out/pytest.log" | head -20

{
  $python tools/python/bench_cupy.py
  $python tools/python/bench_torch_resnet.py
} >"$out/bench-python.txt" 2>&1
summary "python benchmarks rc=$?"
tail -12 "$out/bench-python.txt"

# RMM's own Python suites, where copies of them were carried (wheels/rmm-tests/<tag>).
for suite in wheels/rmm-tests/*/; do
  [ -d "$suite" ] || continue
  tag=$(basename "$suite")
  PYTHON=$python scripts/rmm-suite.sh "$suite" >"$out/rmm-suite-$tag.log" 2>&1
  summary "RMM suite $tag: rc=$? $(grep -E '^== rmm-suite' "$out/rmm-suite-$tag.log")"
done
