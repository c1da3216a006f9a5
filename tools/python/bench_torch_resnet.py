"""bench_torch_resnet.py: ResNet-50 training (batch 64, synthetic data) with PyTorch's
caching allocator and with gpumem's hook-up, each in a fresh process (the allocator must be
chosen before PyTorch allocates anything), and their samples per second and peak reserved
memory side by side.

    python3 tools/python/bench_torch_resnet.py [--steps 60] [--resource "pool(vmm)"]

A mode alone: --mode caching | gpumem (prints one JSON line).
"""
import argparse
import json
import os
import subprocess
import sys
import time


def train(mode, steps, warmup, batch, resource):
    import torch

    if mode == "gpumem":
        import gpumem

        pool = gpumem.mr.from_spec(resource)
        gpumem.mr.set_current_device_resource(pool)
        from gpumem.allocators.torch import gpumem_torch_allocator

        torch.cuda.memory.change_current_allocator(gpumem_torch_allocator)
    import torchvision

    torch.manual_seed(0)
    device = torch.device("cuda")
    model = torchvision.models.resnet50().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, 224, 224, device=device)
    labels = torch.randint(0, 1000, (batch,), device=device)
    losses = []

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        losses.append(step())
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    result = {"bench": "torch_resnet50_train", "mode": mode, "batch": batch, "steps": steps,
              "samples_per_s": round(batch * steps / elapsed, 1),
              "first_loss": round(float(losses[0]), 4), "last_loss": round(float(losses[-1]), 4)}
    if mode == "gpumem":
        result["resource"] = pool.spec
        result["peak_reserved_bytes"] = pool.peak_reserved_bytes
        result["peak_live_bytes"] = pool.peak_live_bytes
    else:
        result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        result["peak_live_bytes"] = torch.cuda.max_memory_allocated()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["caching", "gpumem"])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--resource", default="pool(vmm)")
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(train(args.mode, args.steps, args.warmup, args.batch, args.resource)))
        return
    results = {}
    for mode in ("caching", "gpumem", "caching", "gpumem"):  # twice each: the spread shows
        command = [sys.executable, os.path.abspath(__file__), "--mode", mode, "--steps",
                   str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
                   "--resource", args.resource]
        line = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        result = json.loads(line.strip().splitlines()[-1])
        print(json.dumps(result))
        results.setdefault(mode, []).append(result)
    best = {mode: max(r["samples_per_s"] for r in runs) for mode, runs in results.items()}
    peak = {mode: runs[0]["peak_reserved_bytes"] for mode, runs in results.items()}
    print(f"samples/s: caching {best['caching']}, gpumem {best['gpumem']} "
          f"(gpumem/caching {best['gpumem'] / best['caching']:.3f}); peak reserved: caching "
          f"{peak['caching'] / 2**30:.2f} GiB, gpumem {peak['gpumem'] / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
