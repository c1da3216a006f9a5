"""ddp_two_gpus.py: gpumem under torch.distributed: one process per GPU, each giving its
own device a gpumem pool and PyTorch gpumem's hook-up, training a small model with
DistributedDataParallel over NCCL. Checks that both processes' gradients agree after the
all-reduces (identical parameters at the end), that the loss falls, and that each process's
tensors came from gpumem (its pool has live memory while they exist).

    python3 tools/python/ddp_two_gpus.py         # spawns one process per visible GPU
"""
import json
import os
import sys


def worker(rank, world_size, port):
    # Per-process set-up, the pattern the README shows: PyTorch's allocator first (PyTorch
    # refuses to swap it once it has touched CUDA, which torch.cuda.set_device does), then
    # the device, then gpumem's pool for it.
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    import torch
    import torch.distributed as dist

    import gpumem
    from gpumem.allocators.torch import gpumem_torch_allocator

    torch.cuda.memory.change_current_allocator(gpumem_torch_allocator)
    torch.cuda.set_device(rank)
    gpumem.reinitialize(pool_allocator=True, devices=[rank])
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 10)).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    generator = torch.Generator(device="cuda").manual_seed(1 + rank)  # each rank its data
    inputs = torch.randn(256, 1024, device="cuda", generator=generator)
    targets = torch.randint(0, 10, (256,), device="cuda", generator=generator)
    losses = []
    for _ in range(20):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ddp(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    pool = gpumem.mr.get_per_device_resource(rank)
    live_while_training = pool.live_count
    # The same parameters on every rank: the gradient all-reduce worked.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], g) for g in gathered)
    torch.cuda.synchronize()
    result = {"rank": rank, "device": torch.cuda.current_device(), "resource": pool.spec,
              "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4),
              "live_allocations_while_training": live_while_training,
              "peak_reserved_bytes": pool.peak_reserved_bytes,
              "parameters_identical_across_ranks": same}
    print(json.dumps(result), flush=True)
    dist.destroy_process_group()
    ok = same and losses[-1] < losses[0] and live_while_training > 0
    sys.exit(0 if ok else 1)


def main():
    import torch
    import torch.multiprocessing as mp

    world_size = torch.cuda.device_count()
    if world_size < 2:
        print(f"skipped: {world_size} GPU(s) visible, this needs 2")
        return 0
    mp.spawn(worker, args=(world_size, 29512), nprocs=world_size, join=True)
    print(f"ddp over {world_size} GPUs with gpumem: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
