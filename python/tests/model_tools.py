"""What the tests of tools/placement_model.py and tools/reference_model.py share: loading a
tool by its path (tools/ is no package) and writing a trace small enough to place by hand."""
import importlib.util
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"
MIB = 1 << 20


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_events(path, events):
    """A one-thread, one-stream trace of (action, pointer, size) events, a microsecond apart."""
    lines = ["Thread,Time,Action,Pointer,Size,Stream"]
    lines += [f"0,00:00:00.{i:06d},{action},{pointer},{size},0"
              for i, (action, pointer, size) in enumerate(events)]
    path.write_text("\n".join(lines) + "\n")
