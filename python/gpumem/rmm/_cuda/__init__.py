"""rmm._cuda: RMM's small CUDA helpers (gpu.py), on gpumem's device calls."""
