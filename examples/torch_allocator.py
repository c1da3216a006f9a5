"""PyTorch allocating through gpumem, as "Using RMM with PyTorch" in RMM's Python user guide:

    from gpumem.allocators.torch import gpumem_torch_allocator
    torch.cuda.memory.change_current_allocator(gpumem_torch_allocator)

(before PyTorch allocates anything on the GPU). Shows: a few training steps of a small
model, every tensor's memory taken from gpumem's current resource (the pool
gpumem.reinitialize builds). Needs a GPU and PyTorch; prints "skipped: ..." and exits 0
without them.

    python3 examples/torch_allocator.py
"""
import sys

from _device import choose_backend

if choose_backend() != "cuda":
    print("skipped: PyTorch on CUDA needs a GPU (this run uses gpumem's simulated device)")
    sys.exit(0)
try:
    import torch
except ImportError:
    print("skipped: PyTorch is not installed")
    sys.exit(0)

import gpumem  # noqa: E402
from gpumem.allocators.torch import gpumem_torch_allocator  # noqa: E402

gpumem.reinitialize(pool_allocator=True)
torch.cuda.memory.change_current_allocator(gpumem_torch_allocator)
pool = gpumem.mr.get_current_device_resource()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 1)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.randn(512, 32, device="cuda")
targets = inputs.mean(dim=1, keepdim=True)
for step in range(5):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.5f}")
print("tensors in gpumem's pool:", pool.live_count)
