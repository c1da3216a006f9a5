"""gpumem's version is one figure everywhere: include/gpumem.h's GPUMEM_VERSION_* lines (its
one source), the C library's gpumem_version() at run time, gpumem.__version__ and the
installed package's metadata (which setup.py read from the header)."""
import importlib.metadata
import pathlib
import re

import gpumem

HEADER = pathlib.Path(__file__).resolve().parents[2] / "include" / "gpumem.h"


def header_version():
    text = HEADER.read_text(encoding="utf-8")
    return ".".join(re.search(rf"^#define GPUMEM_VERSION_{part} (\d+)$", text, re.MULTILINE)
                    .group(1) for part in ("MAJOR", "MINOR", "PATCH"))


def test_the_version_is_the_headers_everywhere():
    version = header_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert gpumem._lib.version() == version, "the C library's gpumem_version()"
    assert gpumem.__version__ == version
    assert importlib.metadata.version("gpumem") == version, "the installed package's metadata"
