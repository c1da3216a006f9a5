#!/usr/bin/env bash
# demo.sh: builds gpumem and replays a real PyTorch training trace (ResNet-50, 8 steps, in
# RMM's log format) through gpumem's default pool (what gpumem_reinitialize with the pool
# switch builds: a pool over virtual memory where the device supports it) beside the CUDA
# driver's own allocators (cuMemAlloc and the driver pool), then prints a table of time per
# event and of memory reserved over memory in use, and draws the trace's memory over time
# (build/demo-timeline.png) where Python has gpumem and matplotlib.
#
# With a GPU it runs on the GPU; without one, on gpumem's simulated device, whose times
# measure gpumem's host-side bookkeeping and the simulation, not a GPU. It needs gcc,
# cmake and the CUDA headers (cuda.h) only: no GPU, driver or CUDA toolkit library.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build --target gpumem-bench -j "$(nproc 2>/dev/null || echo 2)"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  export GPUMEM_DEVICE=cuda
  echo "Running on the GPU: $(nvidia-smi -L | head -n 1)"
else
  export GPUMEM_DEVICE=sim
  # The trace was recorded on an 80 GB H100; give the simulated device as much memory
  # (host memory is only touched where written, and the replay writes none).
  export GPUMEM_SIM_MEMORY="${GPUMEM_SIM_MEMORY:-80GiB}"
  echo "No GPU here: running on gpumem's simulated device (GPUMEM_DEVICE=sim)"
fi

build/bin/gpumem-bench replay --compare --resource "reinitialize(pool)" --table \
  data/torch_resnet50_train.csv

# The picture of where memory went (python -m gpumem.plot): bytes live over the trace, and
# what gpumem's default pool and a pool of cuMemAlloc chunks hold replaying it. It needs a
# Python with gpumem and matplotlib (test.sh's build/venv, or: pip install . matplotlib).
for python in build/venv/bin/python python3; do
  if "$python" -c "import gpumem, matplotlib" 2>/dev/null; then
    "$python" -m gpumem.plot data/torch_resnet50_train.csv --resource "pool(vmm)" \
      --resource "pool(cuda, initial=1)" --output build/demo-timeline.png
    exit 0
  fi
done
echo "For a picture of this trace over time: pip install . matplotlib, then run"
echo "  python -m gpumem.plot data/torch_resnet50_train.csv --resource \"pool(vmm)\" --output timeline.png"
