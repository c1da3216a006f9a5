"""FixedSizeMemoryResource and BinningMemoryResource, the "other MemoryResources" of RMM's
Python user guide, composed over a pool.

Shows: a fixed-size resource handing out blocks of one size, taken from its upstream a
batch at a time; a binning resource sending each request to the smallest bin that holds
it (power-of-two bins from 1 KiB to 1 MiB, plus a 4 MiB bin added with add_bin), and
larger requests to its upstream.

    python3 examples/fixed_size_and_binning.py
"""
from _device import choose_backend

choose_backend()

import gpumem  # noqa: E402
import gpumem.mr  # noqa: E402

MiB = 2**20
upstream = gpumem.mr.PoolMemoryResource(gpumem.mr.CudaMemoryResource(),
                                        initial_pool_size=64 * MiB)

# Blocks of 1 MiB, 16 taken from the pool at a time; a request may be smaller than a block.
fixed = gpumem.mr.FixedSizeMemoryResource(upstream, block_size=MiB, blocks_to_preallocate=16)
blocks = [fixed.allocate(size) for size in (MiB, 1000, 300_000)]
print(f"fixed_size: {fixed.live_count} blocks live, {fixed.reserved_bytes // MiB} MiB "
      "taken from the pool")
for block, size in zip(blocks, (MiB, 1000, 300_000)):
    fixed.deallocate(block, size)

# Bins of 2**10 .. 2**20 bytes, and one of 4 MiB with a resource of our choosing:
binning = gpumem.mr.BinningMemoryResource(upstream, min_size_exponent=10,
                                          max_size_exponent=20)
large_bin = gpumem.mr.FixedSizeMemoryResource(upstream, block_size=4 * MiB,
                                              blocks_to_preallocate=4)
binning.add_bin(4 * MiB, large_bin)
gpumem.mr.set_current_device_resource(binning)

buffers = [gpumem.DeviceBuffer(size=size) for size in (100, 3000, 500_000, 3_000_000, 10_000_000)]
print("4 MiB bin:", large_bin.live_count, "allocation(s)")
print(f"binning: {binning.live_count} live allocations, {binning.live_bytes} bytes")
print("the pool under it all:", upstream.spec)
