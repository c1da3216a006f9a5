#!/usr/bin/env bash
# rmm-suite.sh: runs a copy of RMM's own Python test suite against gpumem's RMM-compatible
# layer, to measure how much of RMM's API runs unchanged (docs/rmm-compat.md). The suite is
# kept outside this tree (it is RMM's, not ours); point the script at its directory.
#
# Usage: scripts/rmm-suite.sh RMM_TESTS_DIR [pytest args...]
#   PYTHON: the interpreter with gpumem installed (default: build/venv/bin/python if there,
#   else python3); GPUMEM_DEVICE: the device (default cuda where nvidia-smi sees a GPU, else
#   sim).
# The tests run under `python -m gpumem.as_rmm -m pytest`, so their `import rmm` gives the
# layer. Printed at the end: passed / failed / skipped / errors, and apart from the failures
# the test files that could not be imported because a GPU library (CuPy, Numba, PyTorch,
# cuda-python) is missing, as on the simulated device; then one line per failure with the
# last line of its error. Exit status: 0 when nothing failed (missing libraries aside).
set -euo pipefail
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
  echo "usage: $0 RMM_TESTS_DIR [pytest args...]" >&2
  exit 2
fi
tests=$(cd "$1" && pwd)
shift
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x "$root/build/venv/bin/python" ]; then python=$root/build/venv/bin/python; else python=python3; fi
fi
# The suite's CuPy, Numba and PyTorch tests hand gpumem's pointers to the driver: on a GPU
# machine they must be real device memory.
if [ -z "${GPUMEM_DEVICE:-}" ]; then
  if nvidia-smi -L >/dev/null 2>&1; then GPUMEM_DEVICE=cuda; else GPUMEM_DEVICE=sim; fi
fi
export GPUMEM_DEVICE
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The plugin that classifies results; a file of its own so that pytest can load it by name.
cat >"$work/rmm_suite_plugin.py" <<'PLUGIN'
import re

GPU_LIBRARIES = {"cupy": "CuPy", "numba": "Numba", "torch": "PyTorch",
                 "cuda": "cuda-python (cuda.bindings)"}
MISSING = re.compile(r"No module named '([\w.]+)'")
counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "xfailed": 0, "xpassed": 0}
needs_library = []
failures = []
skips = {}


def _last_line(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return " ".join(crash.message.split())
    text = str(report.longrepr).strip().splitlines()
    lines = [line for line in text if line.startswith("E ")] or text
    return lines[-1].lstrip("E ").strip() if lines else ""


def pytest_collectreport(report):
    if not report.failed:
        return
    text = str(report.longrepr)
    missing = MISSING.search(text)
    if missing and missing.group(1).split(".")[0] in GPU_LIBRARIES:
        needs_library.append((report.nodeid, GPU_LIBRARIES[missing.group(1).split(".")[0]]))
    else:
        counts["errors"] += 1
        failures.append((report.nodeid, "collection: " + _last_line(report)))


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if hasattr(report, "wasxfail"):
            counts["xfailed" if report.skipped else "xpassed"] += 1
        elif report.passed:
            counts["passed"] += 1
        elif report.skipped:
            counts["skipped"] += 1
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            skips[reason] = skips.get(reason, 0) + 1
        else:
            counts["failed" if report.when == "call" else "errors"] += 1
            failures.append((report.nodeid, _last_line(report)))
    elif report.when == "teardown" and report.failed:
        counts["errors"] += 1
        failures.append((report.nodeid, "teardown: " + _last_line(report)))


def pytest_terminal_summary(terminalreporter):
    write = terminalreporter.write_line
    write("")
    write("== rmm-suite: " + ", ".join(f"{value} {key}" for key, value in counts.items()))
    write(f"== test files needing a GPU library (not imported): {len(needs_library)}")
    for nodeid, module in needs_library:
        write(f"   {nodeid}: needs {module}")
    write(f"== skipped, by reason: {counts['skipped']}")
    for reason, number in sorted(skips.items()):
        write(f"   {number} x {reason}")
    write(f"== failures and errors: {len(failures)}")
    for nodeid, reason in failures:
        write(f"   {nodeid}: {reason[:200]}")
PLUGIN
cd "$work"
PYTHONPATH="$work${PYTHONPATH:+:$PYTHONPATH}" "$python" -m gpumem.as_rmm -m pytest "$tests" \
  -p rmm_suite_plugin -p no:cacheprovider -q --no-header --rootdir "$tests" \
  --continue-on-collection-errors "$@"
