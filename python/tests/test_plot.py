"""python -m gpumem.plot: the data path (reading logs in RMM's format, the live and reserved
series, their peaks) without matplotlib, and the picture where matplotlib is installed; the
command names matplotlib when it is missing. The live peaks are gpumem-bench replay's."""
import os
import sys
from pathlib import Path

import pytest

import gpumem
from gpumem import mr, plot

DATA = Path(__file__).resolve().parents[2] / "data"
HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"


def write(path, lines, tail=b""):
    path.write_bytes((HEADER + "".join(line + "\n" for line in lines)).encode() + tail)
    return str(path)


def test_the_live_peak_of_each_trace_is_the_replays():
    # gpumem-bench replay's peak_live_bytes of the traces in data/.
    for name, events, peak in [("cupy_etl.csv", 590, 581863936),
                               ("torch_resnet50_train.csv", 11619, 5777129724)]:
        log = plot.read_log(DATA / name)
        assert len(log.events) == events
        series = plot.live_series(log)
        assert series.values[series.peak_index] == peak
        assert series.times[0] == 0 and series.times[-1] > 0


def test_zero_bytes_midnight_failures_and_unknown_frees(tmp_path):
    path = write(tmp_path / "log.csv", [
        "7,23:59:59.500000,allocate,0x1000,100,0",
        "7,23:59:59.750000,free,0x9000,50,0",  # from before the log began: skipped
        "8,00:00:00.250000,allocate,0x2000,300,7f",
        "8,00:00:01.000000,allocate failure,(nil),1000000,7f",
        "7,00:00:02.000000,free,0x1000,100,0",
    ], tail=b"\0" * 4096)  # what a killed process leaves
    log = plot.read_log(path)
    assert [event.time for event in log.events] == [0, 0.25, 0.75, 1.5, 2.5]
    assert log.events[2].stream == 0x7F and log.events[3].pointer == 0
    series = plot.live_series(log)
    assert series.values == [100, 100, 400, 400, 300]
    assert series.peak_index == 2
    assert plot.failures(log) == [1.5]


def test_a_file_not_in_the_format_is_refused_with_its_line(tmp_path):
    bad_header = tmp_path / "bad.csv"
    bad_header.write_text("time,bytes\n1,2\n")
    with pytest.raises(plot.LogFormatError, match="bad.csv:1: not an event log"):
        plot.read_log(bad_header)
    with pytest.raises(plot.LogFormatError, match="line.csv:3: cannot read"):
        plot.read_log(write(tmp_path / "line.csv", ["1,00:00:00.000000,allocate,0x10,5,0",
                                                     "1,00:00:00.000001,allocate,zz,5,0"]))
    with pytest.raises(plot.LogFormatError, match="unknown action 'reallocate'"):
        plot.read_log(write(tmp_path / "act.csv", ["1,00:00:00.000000,reallocate,0x10,5,0"]))


def test_reserved_bytes_of_a_replay_through_a_spec():
    log = plot.read_log(DATA / "cupy_etl.csv")
    series = plot.reserved_series(log, "pool(vmm)")
    assert series.label == "cupy_etl.csv: pool(vmm) reserved"
    live = plot.live_series(log)
    assert series.values[series.peak_index] >= live.values[live.peak_index]
    if gpumem.backend() == "sim":  # gpumem-bench replay's figure on the simulated device
        assert series.values[series.peak_index] == 585105408


def test_a_resource_that_does_not_tell_its_reserved_bytes_draws_no_line(tmp_path, pool):
    callback = mr.CallbackMemoryResource(lambda size, stream: pool.allocate(size, stream),
                                         lambda ptr, size, stream: pool.deallocate(ptr, size, stream))
    mr.define_spec_name("plot_callback", callback)
    try:
        log = plot.read_log(write(tmp_path / "log.csv", ["1,00:00:00.000000,allocate,0x10,5,0"]))
        assert plot.reserved_series(log, "plot_callback") is None
        assert pool.live_count == 0  # the replay freed what it allocated
    finally:
        mr.define_spec_name("plot_callback", None)


def test_the_command_names_matplotlib_when_it_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    status = plot.main([str(DATA / "cupy_etl.csv"), "--output", str(tmp_path / "x.png")])
    assert status == 2
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_the_command_reports_bad_logs_and_specs(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the command stops before reading without it")
    assert plot.main([str(tmp_path / "missing.csv"), "--output", str(tmp_path / "x.png")]) == 1
    assert "missing.csv" in capsys.readouterr().err
    assert plot.main([str(DATA / "cupy_etl.csv"), "--output", str(tmp_path / "x.png"),
                      "--resource", "pool(nothing)"]) == 1
    assert "unknown resource 'nothing'" in capsys.readouterr().err


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_the_picture(tmp_path, capsys, suffix, magic):
    pytest.importorskip("matplotlib", reason="drawing needs matplotlib (pip install matplotlib); "
                                             "the data path is tested without it")
    output = tmp_path / f"timeline{suffix}"
    status = plot.main([str(DATA / "cupy_etl.csv"), "--output", str(output),
                        "--resource", "pool(vmm)", "--title", "cupy"])
    assert status == 0
    assert output.read_bytes().startswith(magic)
    out = capsys.readouterr().out
    assert "cupy_etl.csv: live: peak 581863936 bytes" in out
    assert "cupy_etl.csv: pool(vmm) reserved: peak" in out


def test_python_dash_m_runs_it(run_script):
    out = run_script("import runpy, sys\n"
                     "sys.argv = ['plot', '--help']\n"
                     "try:\n"
                     "    runpy.run_module('gpumem.plot', run_name='__main__')\n"
                     "except SystemExit as end:\n"
                     "    print('exit', end.code)\n", timeout=60)
    assert "usage: python -m gpumem.plot" in out and out.endswith("exit 0\n")
