#!/usr/bin/env bash
# gpu-run-dask.sh: dask-cuda itself on gpumem, for one call of the GPU machine (which reaches
# no package registry): LocalCUDACluster(rmm_pool_size="1GB", rmm_allocator_external_lib_list=
# ["cupy"]) started under `python -m gpumem.as_rmm`, whose workers (one per GPU) `import rmm`
# and call rmm.reinitialize as dask-cuda does and get gpumem's layer through GPUMEM_AS_RMM=1;
# the same with rmm_managed_memory=True, and with rmm_async=True; then a distributed.LocalCluster of two workers on GPU 0 making dask-cuda's calls, so that
# CuPy arrays travel between workers on a one-GPU machine; then test_dask.py on the GPU. The
# program, tools/python/dask_rmm_cluster.py, computes CuPy arrays across the workers and
# checks that every worker's rmm is gpumem.rmm, its current resource gpumem's pool of the
# size asked for, CuPy's allocator gpumem's, the sums NumPy's, and that the arrays' bytes
# were live in each worker's gpumem pool (statistics read back from the workers).
#
# The wheels are downloaded beforehand on a machine with a registry, into wheels/dask (an
# ignored folder, carried to the GPU machine):
#
#   scripts/gpu-run-dask.sh --download
#
# which runs, for the GPU machine's Python 3.12 (PYTHON_VERSION=3.12, WHEELS=wheels/dask):
#
#   pip download --python-version 3.12 --only-binary=:all: --platform manylinux_2_28_x86_64 \
#     --platform manylinux2014_x86_64 --platform any -d wheels/dask --no-deps \
#     dask-cuda==26.10.0 rapids-dask-dependency==26.10.0
#   pip download --python-version 3.12 --only-binary=:all: --platform manylinux_2_28_x86_64 \
#     --platform manylinux2014_x86_64 --platform any -d wheels/dask \
#     dask==2026.7.1 distributed==2026.7.1 'cuda-core>=0.5.1,<2' 'cuda-bindings>=13,<14' \
#     click nvidia-ml-py pandas zict
#   rm wheels/dask/numpy-*.whl      # the GPU machine has NumPy (and CuPy, Numba, PyTorch)
#
# (rapids-dask-dependency without its dependencies: it would bring Bokeh, for dashboards,
# which this run turns off; cuda-bindings 13 for the machine's CUDA 13 driver.) Then, on the
# GPU machine, from the repository root with wheels/dask carried:
#
#   scripts/gpu-run-dask.sh
#
# It makes a virtual environment that sees the machine's packages (CuPy, NumPy), installs
# the wheels offline (--no-index --find-links) and gpumem (pip install --no-build-isolation
# ., which puts gpumem_as_rmm.pth in the environment's site-packages, where worker
# interpreters run it at start). Without a GPU (no nvidia-smi) it runs everything it can on
# the simulated device: the offline install and the program with a distributed.LocalCluster
# and rmm.DeviceBuffer arrays; dask-cuda's cluster and CuPy need the GPU. Logs go to $OUT
# (or ./gpu-out); the last lines printed are a summary.
set -uo pipefail
cd "$(dirname "$0")/.."
wheels=${WHEELS:-wheels/dask}
python=${PYTHON:-python3}

if [ "${1:-}" = --download ]; then
  set -e
  version=${PYTHON_VERSION:-3.12}
  common=(--python-version "$version" --only-binary=:all: --platform manylinux_2_28_x86_64
          --platform manylinux2014_x86_64 --platform any -d "$wheels")
  mkdir -p "$wheels"
  $python -m pip download -q "${common[@]}" --no-deps dask-cuda==26.10.0 \
    rapids-dask-dependency==26.10.0
  $python -m pip download -q "${common[@]}" dask==2026.7.1 distributed==2026.7.1 \
    'cuda-core>=0.5.1,<2' 'cuda-bindings>=13,<14' click nvidia-ml-py pandas zict
  rm -f "$wheels"/numpy-*.whl
  echo "$(ls "$wheels" | wc -l) wheels, $(du -sh "$wheels" | cut -f1), in $wheels"
  exit 0
fi

out=${OUT:-gpu-out}
mkdir -p "$out"
summary() { echo "$*" | tee -a "$out/summary-dask.txt"; }
[ -d "$wheels" ] || { summary "no $wheels: run scripts/gpu-run-dask.sh --download first"; exit 1; }
unset PYTHONPATH GPUMEM_AS_RMM # the environment's own gpumem, its .pth run at start

gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
  export GPUMEM_DEVICE=cuda
  summary "GPUs: $(nvidia-smi -L | wc -l) ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1))"
else
  export GPUMEM_DEVICE=sim
  summary "no GPU: the simulated device; dask-cuda's cluster and CuPy are skipped"
fi

# The environment: its own site-packages first, then the machine's (where CuPy, NumPy and
# the rest are, also when python3 is itself a virtual environment's). No pip or setuptools
# of its own (Python 3.11's venv would bring an old setuptools that cannot build wheels): the
# machine's pip installs into it (pip --python), building gpumem with the machine's
# setuptools.
venv=${VENV:-/tmp/gpumem-dask-venv}
rm -rf "$venv"
$python -m venv --system-site-packages --without-pip "$venv" >"$out/venv.log" 2>&1 ||
  { summary "venv: FAILED"; cat "$out/venv.log"; exit 1; }
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
$python -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p.endswith("-packages")]))' \
  >"$site/zz_machine_site.pth"
py=$venv/bin/python
pip_offline=($python -m pip --python "$py" install -q --no-index --find-links "$wheels")
{
  "${pip_offline[@]}" --no-deps dask-cuda rapids-dask-dependency &&
    "${pip_offline[@]}" dask==2026.7.1 distributed==2026.7.1 click nvidia-ml-py pandas zict \
      'cuda-core>=0.5.1,<2' cuda-bindings &&
    $python -m pip --python "$py" install -q --no-build-isolation --no-deps .
} >"$out/pip-dask.log" 2>&1
rc=$?
summary "offline install (dask-cuda, distributed, gpumem): rc=$rc; $("$py" -c 'import dask, distributed, dask_cuda; print("dask", dask.__version__, "distributed", distributed.__version__, "dask-cuda", dask_cuda.__version__)' 2>&1 | tail -1)"
[ $rc -eq 0 ] || { tail -20 "$out/pip-dask.log"; exit 1; }
summary "rmm under GPUMEM_AS_RMM=1: $(GPUMEM_AS_RMM=1 "$py" -c 'import rmm; print(rmm.__name__, rmm.__file__)' 2>&1 | tail -1)"

program=tools/python/dask_rmm_cluster.py
status=0
run_program() { # name, then the program's arguments
  local name=$1
  shift
  timeout --kill-after=10 180 "$py" -m gpumem.as_rmm "$program" "$@" >"$out/$name.json" 2>"$out/$name.log"
  local rc=$?
  [ $rc -eq 0 ] || status=1
  summary "$name: rc=$rc; $(tail -1 "$out/$name.log")"
  [ $rc -eq 0 ] || grep -E "FAILED|Error" "$out/$name.log" | head -10
}
if [ $gpu = 1 ]; then
  run_program dask-cuda --cluster cuda --pool-size 1GB --arrays cupy --chunks 8 \
    --chunk-elements $((1 << 24))
  run_program dask-cuda-managed --cluster cuda --pool-size 1GB --managed --arrays cupy \
    --chunks 8 --chunk-elements $((1 << 24))
  run_program dask-cuda-async --cluster cuda --async --arrays cupy --chunks 8 \
    --chunk-elements $((1 << 24))
  run_program local-cupy --cluster local --setup dask-cuda --workers 2 --pool-size 1GB \
    --arrays cupy --chunks 8 --chunk-elements $((1 << 24))
  test_env=(env GPUMEM_TEST_GPU=1)
else
  run_program local-buffer --cluster local --setup dask-cuda --workers 2 --pool-size 64MiB \
    --chunks 8 --chunk-elements $((1 << 18))
  run_program local-buffer-managed --cluster local --setup dask-cuda --workers 2 --managed \
    --pool-size 64MiB --chunks 8 --chunk-elements $((1 << 18))
  run_program local-buffer-async --cluster local --setup dask-cuda --workers 2 --async \
    --chunks 8 --chunk-elements $((1 << 18))
  test_env=(env GPUMEM_DEVICE=sim)
fi
if "$py" -c 'import pytest' 2>/dev/null; then
  (cd "$out" && "${test_env[@]}" timeout 300 "$py" -m pytest -v -rs "$OLDPWD/python/tests/test_dask.py") \
    >"$out/pytest-dask.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  summary "test_dask.py: rc=$rc; $(tail -1 "$out/pytest-dask.log")"
else
  summary "test_dask.py: skipped (no pytest)"
fi
exit $status
