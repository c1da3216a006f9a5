"""tools/reference_model.py on traces small enough to place by hand: PyTorch's caching
allocator keeps requests of 1 to 10 MiB in shared segments of a fixed size and never merges
across segments; RMM's pool doubles at each growth and never merges across its upstream
blocks."""
import pytest

from model_tools import MIB, load_tool, write_events


def load_model():
    return load_tool("reference_model")


def test_torch_medium_requests_share_a_segment(tmp_path):
    trace = tmp_path / "medium.csv"
    # Two live 4 MiB blocks: one 20 MiB segment holds both (20 MiB for 8 live).
    write_events(trace, [("allocate", "0xa", 4 * MIB), ("allocate", "0xb", 4 * MIB),
                        ("free", "0xa", 4 * MIB), ("free", "0xb", 4 * MIB)])
    model = load_model()
    assert model.replay(str(trace), model.TorchCaching()) == [
        "after pass 1: 2.500", "after pass 2: 2.500"]
    # Segments of 4 MiB: one each, nothing over the live peak.
    assert model.replay(str(trace), model.TorchCaching(medium_segment=4 * MIB)) == [
        "after pass 1: 1.000", "after pass 2: 1.000"]


def test_torch_small_and_large_requests(tmp_path):
    trace = tmp_path / "pools.csv"
    # 512 KiB takes a small segment of 2 MiB; 11 MiB (10 MiB and up) a segment of its size
    # rounded up to 2 MiB, 12 MiB, where a later 11.5 MiB block fits: 14 MiB in all.
    write_events(trace, [("allocate", "0xs", 512 << 10), ("allocate", "0xl", 11 * MIB),
                        ("free", "0xl", 11 * MIB), ("allocate", "0xm", 23 * MIB // 2),
                        ("free", "0xm", 23 * MIB // 2), ("free", "0xs", 512 << 10)])
    model = load_model()
    live = (512 << 10) + 23 * MIB // 2
    assert model.replay(str(trace), model.TorchCaching()) == [
        f"after pass 1: {14 * MIB / live:.3f}", f"after pass 2: {14 * MIB / live:.3f}"]


def test_rmm_pool_doubles(tmp_path):
    trace = tmp_path / "doubling.csv"
    # 4 MiB (the pool takes 4), 4 MiB more (it doubles to 8), 1 MiB more (to 16): 16 MiB for
    # 9 live.
    write_events(trace, [("allocate", "0xa", 4 * MIB), ("allocate", "0xb", 4 * MIB),
                        ("allocate", "0xc", 1 * MIB), ("free", "0xa", 4 * MIB),
                        ("free", "0xb", 4 * MIB), ("free", "0xc", 1 * MIB)])
    model = load_model()
    assert model.replay(str(trace), model.RmmPool()) == [
        f"after pass 1: {16 / 9:.3f}", f"after pass 2: {16 / 9:.3f}"]
    # Started at 9 MiB, it never grows.
    assert model.replay(str(trace), model.RmmPool(initial=9 * MIB)) == [
        "after pass 1: 1.000", "after pass 2: 1.000"]


@pytest.mark.parametrize("allocator, block", [
    # Two 12 MiB segments, both freed: a 24 MiB request fits neither and takes a third.
    ("TorchCaching", 12 * MIB),
    # Two 4 MiB upstream blocks, both freed: 8 MiB fits neither, and the pool doubles to 16.
    ("RmmPool", 4 * MIB),
])
def test_freed_neighbours_do_not_merge(tmp_path, allocator, block):
    trace = tmp_path / "neighbours.csv"
    write_events(trace, [("allocate", "0xa", block), ("allocate", "0xb", block),
                        ("free", "0xa", block), ("free", "0xb", block),
                        ("allocate", "0xc", 2 * block), ("free", "0xc", 2 * block)])
    model = load_model()
    assert model.replay(str(trace), getattr(model, allocator)(), passes=1) == [
        "after pass 1: 2.000"]
