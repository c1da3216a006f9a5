"""PyTorch allocating through gpumem
(torch.cuda.memory.change_current_allocator(gpumem_torch_allocator)), on a real GPU. The
allocator can be swapped only before PyTorch allocates on the GPU, so the test runs in a
fresh interpreter: a few training steps of a tiny model give finite, decreasing losses, and
the tensors' memory comes from gpumem's current resource. Skipped on the simulated device
and where PyTorch is missing or sees no GPU."""
import math

import pytest

pytestmark = pytest.mark.gpu

TRAINING_SCRIPT = """
import sys

try:
    import torch
except Exception as error:
    print(f"skipped: PyTorch is not usable here ({type(error).__name__}: {error})")
    sys.exit(0)
if not torch.cuda.is_available():
    print("skipped: PyTorch sees no GPU")
    sys.exit(0)

import gpumem
from gpumem.allocators.torch import gpumem_torch_allocator

pool = gpumem.mr.PoolMemoryResource(gpumem.mr.CudaMemoryResource(), initial_pool_size="256MiB")
gpumem.mr.set_current_device_resource(pool)
torch.cuda.memory.change_current_allocator(gpumem_torch_allocator)  # before any allocation

torch.manual_seed(0)
device = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                            torch.nn.Linear(32, 1)).to(device)
inputs = torch.randn(256, 16, device=device)
targets = inputs[:, :4].sum(dim=1, keepdim=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
losses = []
for step in range(20):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print("losses:", " ".join(repr(value) for value in losses))
print("live while tensors live:", pool.live_count)
del model, inputs, targets, optimizer, loss
torch.cuda.synchronize()
print("live after:", pool.live_count)
"""


def values_after(output, prefix):
    return [line[len(prefix):].strip() for line in output.splitlines() if line.startswith(prefix)]


def test_training_steps_on_gpumem_memory(run_script):
    output = run_script(TRAINING_SCRIPT)
    losses = [float(value) for value in values_after(output, "losses:")[0].split()]
    assert len(losses) == 20, output
    assert all(math.isfinite(value) for value in losses), output
    assert losses[-1] < losses[0], f"the loss does not decrease: {losses}"
    live_during = int(values_after(output, "live while tensors live:")[0])
    assert live_during > 0, "the tensors' memory did not come from gpumem"
    assert int(values_after(output, "live after:")[0]) < live_during, output
