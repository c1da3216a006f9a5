"""Builds gpumem's Python extension, gpumem._lib, with the C library compiled into it, so
that `pip install .` needs nothing but a C compiler and the CUDA headers (cuda.h): the
driver itself is loaded at run time. CUDA_HOME (or CUDA_PATH) points at the headers when
they are not in /usr/local/cuda."""
import glob
import os

from setuptools import Extension, setup


def cuda_include_dir():
    candidates = [os.path.join(os.environ[name], "include")
                  for name in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(name)]
    candidates += ["/usr/local/cuda/include", "/usr/include"]
    for directory in candidates:
        if os.path.exists(os.path.join(directory, "cuda.h")):
            return directory
    raise RuntimeError("cuda.h not found: install the CUDA headers or set CUDA_HOME")


sources = sorted(glob.glob("src/**/*.c", recursive=True))
sources += sorted(glob.glob("python/csrc/*.c"))

extension = Extension(
    "gpumem._lib",
    sources=sources,
    include_dirs=["include", "src", "python/csrc", cuda_include_dir()],
    define_macros=[("_GNU_SOURCE", None), ("GPUMEM_STATIC_DEFINE", None)],
    # The library's internal symbols stay hidden; the PyTorch hooks are exported by name.
    extra_compile_args=["-std=c11", "-fvisibility=hidden", "-O2", "-Wno-unused-parameter"],
    libraries=["dl", "m", "pthread"],
)

setup(ext_modules=[extension])
