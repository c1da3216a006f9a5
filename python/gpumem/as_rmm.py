"""Runs a program written for RMM on gpumem, unchanged:

    python -m gpumem.as_rmm script.py [args...]
    python -m gpumem.as_rmm -m module [args...]
    python -m gpumem.as_rmm -c "code" [args...]

The program's `import rmm` gives gpumem's RMM-compatible layer (gpumem.rmm). The environment
variable GPUMEM_AS_RMM=1 is set for the program, so that the processes it starts (with
multiprocessing, subprocess or Dask) install the layer at interpreter start, through the
.pth file installed with gpumem. The script, module or code runs as __main__ with sys.argv
and sys.path[0] as `python script.py`, `python -m module` and `python -c` give them.
"""
import os
import runpy
import sys
import types

from ._rmm_alias import ENVIRONMENT_VARIABLE, install_as_rmm

_USAGE = ("usage: python -m gpumem.as_rmm script.py [args...]\n"
          "       python -m gpumem.as_rmm -m module [args...]\n"
          "       python -m gpumem.as_rmm -c code [args...]\n")


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(_USAGE) if argv else sys.stderr.write(_USAGE)
        return 0 if argv else 2
    if argv[0] in ("-m", "-c") and len(argv) < 2:
        sys.stderr.write(f"gpumem.as_rmm: {argv[0]} needs an argument\n{_USAGE}")
        return 2
    if argv[0] not in ("-m", "-c") and not os.path.exists(argv[0]):
        sys.stderr.write(f"gpumem.as_rmm: can't open file {argv[0]!r}\n")
        return 2
    os.environ[ENVIRONMENT_VARIABLE] = "1"
    install_as_rmm()
    if argv[0] == "-m":
        sys.argv = [argv[1]] + argv[2:]  # runpy puts the module's file in sys.argv[0]
        sys.path[0:1] = [os.getcwd()]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c"] + argv[2:]
        sys.path[0:1] = [""]
        main_module = types.ModuleType("__main__")
        sys.modules["__main__"] = main_module
        exec(compile(argv[1], "<string>", "exec"), main_module.__dict__)  # noqa: S102
    else:
        sys.argv = list(argv)
        sys.path[0:1] = [os.path.dirname(os.path.abspath(argv[0]))]
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
