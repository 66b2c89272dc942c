"""The marks of a test that runs a device toolchain: `toolchain` (pyproject's marker; `-m "not toolchain"`
leaves them out), and a skip, naming the tool, where it is not on PATH."""

from __future__ import annotations

import shutil

import pytest
from mxlogits_codegen.isa import CLANG


def needs(tool: str, what: str):
    """Decorator: the test runs `tool` (`what` says which package gives it)."""

    def mark(test):
        skip = pytest.mark.skipif(shutil.which(tool) is None, reason=f"needs {tool} ({what})")
        return pytest.mark.toolchain(skip(test))

    return mark


needs_nvcc = needs("nvcc", "the CUDA toolkit")
needs_clang = needs(CLANG, "Debian's clang-22")
