"""Builds gpumem's Python extension, gpumem._lib, with the C library compiled into it, so
that `pip install .` needs nothing but a C compiler and the CUDA headers (cuda.h): the
driver itself is loaded at run time. CUDA_HOME (or CUDA_PATH) points at the headers when
they are not in /usr/local/cuda.

The package's version is the library's: include/gpumem.h's GPUMEM_VERSION_* lines, the
one source of it. GPUMEM_WERROR=1 in the environment (test.sh sets it) makes compiler
warnings errors, as CI wants; users' builds never set it. GPUMEM_DEBUG_LEVEL=0|1|2|3 in the
environment compiles the C library's debug checks in, as the CMake option of that name does
(docs/reference.md, "Debug levels"); unset, none are, and the extension carries no cost for them."""
import glob
import os
import re
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


def cuda_include_dir():
    candidates = [os.path.join(os.environ[name], "include")
                  for name in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(name)]
    candidates += ["/usr/local/cuda/include", "/usr/include"]
    for directory in candidates:
        if os.path.exists(os.path.join(directory, "cuda.h")):
            return directory
    raise RuntimeError("cuda.h not found: install the CUDA headers or set CUDA_HOME")


def header_version():
    with open(os.path.join("include", "gpumem.h"), encoding="utf-8") as header:
        text = header.read()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        match = re.search(rf"^#define GPUMEM_VERSION_{part} (\d+)$", text, re.MULTILINE)
        if not match:
            raise RuntimeError(f"include/gpumem.h has no line #define GPUMEM_VERSION_{part} N")
        parts.append(match.group(1))
    return ".".join(parts)


def debug_level():
    """The debug checks compiled in: GPUMEM_DEBUG_LEVEL, 0 when unset."""
    level = os.environ.get("GPUMEM_DEBUG_LEVEL", "0") or "0"
    if level not in ("0", "1", "2", "3"):
        raise RuntimeError(f"GPUMEM_DEBUG_LEVEL is {level!r}: 0, 1, 2 or 3")
    return level


def warning_flags():
    """The flags of the CMake build with GPUMEM_WERROR on, when GPUMEM_WERROR=1."""
    if os.environ.get("GPUMEM_WERROR") != "1":
        return ["-Wno-unused-parameter"]
    flags = ["-Wall", "-Wextra", "-Wshadow", "-Wstrict-prototypes", "-Wno-unused-parameter"]
    compiler = os.environ.get("CC") or sysconfig.get_config_var("CC") or ""
    # As CMakeLists.txt: truncated messages and fields left zero are meant.
    if "clang" in compiler:
        flags.append("-Wno-missing-field-initializers")
    else:
        flags.append("-Wno-format-truncation")
    return flags + ["-Werror"]


sources = sorted(glob.glob("src/**/*.c", recursive=True))
sources += sorted(glob.glob("python/csrc/*.c"))

extension = Extension(
    "gpumem._lib",
    sources=sources,
    include_dirs=["include", "src", "python/csrc", cuda_include_dir()],
    define_macros=[("_GNU_SOURCE", None), ("GPUMEM_STATIC_DEFINE", None),
                   ("GPUMEM__DEBUG_LEVEL", debug_level())],
    # The library's internal symbols stay hidden; the PyTorch hooks are exported by name.
    extra_compile_args=["-std=c11", "-fvisibility=hidden", "-O2"] + warning_flags(),
    libraries=["dl", "m", "pthread"],
)



class build_py_with_pth(build_py):
    """Also puts python/gpumem_as_rmm.pth at the top of the built tree, so that it lands in
    site-packages itself, where the interpreter runs .pth files at start: with
    GPUMEM_AS_RMM=1 it installs gpumem's rmm layer (docs/rmm-compat.md); without, it does
    nothing and imports nothing."""

    PTH = "gpumem_as_rmm.pth"

    def run(self):
        super().run()
        self.copy_file(os.path.join("python", self.PTH), os.path.join(self.build_lib, self.PTH))

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, self.PTH)]


setup(version=header_version(), ext_modules=[extension],
      cmdclass={"build_py": build_py_with_pth})
