"""tools/placement_model.py on a trace small enough to place by hand: the pool's placement
("now") leaves a hole that the offline placement, knowing lifetimes, does not."""
from model_tools import MIB, load_tool, write_events


def load_model():
    return load_tool("placement_model")


def write_trace(path):
    # A and B take 4 MiB each; A is freed, and C (8 MiB) does not fit A's hole.
    write_events(path, [("allocate", "0xa", 4 * MIB), ("allocate", "0xb", 4 * MIB),
                        ("free", "0xa", 4 * MIB), ("allocate", "0xc", 8 * MIB),
                        ("free", "0xc", 8 * MIB), ("free", "0xb", 4 * MIB)])


def test_pool_placement_keeps_the_hole(tmp_path):
    trace = tmp_path / "hole.csv"
    write_trace(trace)
    # A at 0, B at 4 MiB, C past B: 16 MiB mapped for 12 live, in both passes.
    assert load_model().replay(str(trace), "now") == ["after pass 1: 1.333", "after pass 2: 1.333"]


def test_offline_placement_knows_lifetimes(tmp_path):
    trace = tmp_path / "hole.csv"
    write_trace(trace)
    # C first at 0, A at 0 before C's life, B after C: 12 MiB for 12 live.
    assert load_model().offline(str(trace)) == 1.0


def test_offline_in_allocation_order_keeps_the_hole(tmp_path):
    trace = tmp_path / "hole.csv"
    write_trace(trace)
    # Placed as they come, A at 0 and B at 4 MiB: C, placed last, goes past B.
    assert load_model().offline(str(trace), order="start") == 16 / 12


def write_gap_trace(path):
    # A (2 MiB) and B (4 MiB) live throughout, above holes of 5 and 3 MiB (left by H and I);
    # then C (3 MiB) and, while C lives, D (5 MiB).
    write_events(path, [("allocate", "0xh", 5 * MIB), ("allocate", "0xa", 2 * MIB),
                        ("allocate", "0xi", 3 * MIB), ("allocate", "0xb", 4 * MIB),
                        ("free", "0xh", 5 * MIB), ("free", "0xi", 3 * MIB),
                        ("allocate", "0xc", 3 * MIB), ("allocate", "0xd", 5 * MIB),
                        ("free", "0xc", 3 * MIB), ("free", "0xd", 5 * MIB),
                        ("free", "0xa", 2 * MIB), ("free", "0xb", 4 * MIB)])


def test_offline_fit_lowest_or_tightest(tmp_path):
    trace = tmp_path / "gaps.csv"
    write_gap_trace(trace)
    model = load_model()
    # In allocation order: H 0-5, A 5-7, I 7-10, B 10-14 MiB, 14 live. The lowest fit puts C
    # in H's 5 MiB hole, so D goes past B (19 MiB); the tightest puts C in I's 3 MiB hole
    # and D in H's.
    assert model.offline(str(trace), order="start", fit="lowest") == 19 / 14
    assert model.offline(str(trace), order="start", fit="tightest") == 1.0


def test_layout_names_the_block_that_pins_the_hole(tmp_path, capsys):
    trace = tmp_path / "hole.csv"
    write_trace(trace)
    load_model().replay(str(trace), "now", layouts={3})
    # Before C: A's 4 MiB hole at 0, then B, which lives until the last event.
    assert capsys.readouterr().out.splitlines() == [
        "before event 3: large region of 8.0 MiB",
        "        0.0 MiB      4.0 MiB  free",
        "        4.0 MiB      4.0 MiB  allocated at event 1, freed at event 5",
    ]


def test_gap_gives_the_hole_back_before_growing(tmp_path):
    trace = tmp_path / "hole.csv"
    write_trace(trace)
    # C does not fit A's hole: past 1.1 times the live peak (12 MiB with C) the hole's two
    # granules are given back before the pool grows, so 12 MiB is mapped, not 16. The second
    # pass does the same above the gap: A's new hole goes back before C's growth.
    assert load_model().replay(str(trace), "gap", cap=1.1) == [
        "after pass 1: 1.000, 2 granules given back in 1 runs",
        "after pass 2: 1.000, 2 granules given back in 1 runs"]
    # Under a cap of 1.5 the pool grows as "now" does.
    assert load_model().replay(str(trace), "gap", cap=1.5) == [
        "after pass 1: 1.333, 0 granules given back in 0 runs",
        "after pass 2: 1.333, 0 granules given back in 0 runs"]


def test_gap_gives_back_whole_pieces_only(tmp_path):
    trace = tmp_path / "hole.csv"
    write_trace(trace)
    model = load_model()
    # A's 4 MiB hole at 0 is one whole piece of 4 MiB: given back, as with granules.
    assert model.replay(str(trace), "gap", cap=1.1, piece=4 * MIB) == [
        "after pass 1: 1.000, 1 pieces of 4 MiB given back in 1 runs",
        "after pass 2: 1.000, 1 pieces of 4 MiB given back in 1 runs"]
    # It holds no whole piece of 8 MiB: the pool grows as "now" does.
    assert model.replay(str(trace), "gap", cap=1.1, piece=8 * MIB) == [
        "after pass 1: 1.333, 0 pieces of 8 MiB given back in 0 runs",
        "after pass 2: 1.333, 0 pieces of 8 MiB given back in 0 runs"]
