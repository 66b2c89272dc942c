"""Compiler flags of an arch record, tried on the compiler that will build with them, so that
mxlogits-gen refuses a flag at its YAML line instead of the first JIT build failing on it. Where
the family's compiler is not installed, nothing is tried (the build machine decides)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

# family -> (compiler, arguments after the flags that only parse them); hip is not tried.
_TRIES = {
    "host": (lambda: os.environ.get("CXX", "c++"), ["-fsyntax-only", "-x", "c++", os.devnull]),
    "cuda": (lambda: "nvcc", ["--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull]),
}


@functools.cache
def rejected_flags(family: str, flags: tuple[str, ...]) -> str | None:
    """The compiler's first complaint about `flags`, or None when it accepts them or is not installed."""
    if family not in _TRIES:
        return None
    name, tail = _TRIES[family]
    compiler = shutil.which(name())
    if compiler is None:
        return None
    run = subprocess.run([compiler, *flags, *tail], capture_output=True, text=True, timeout=120, check=False)
    if run.returncode == 0:
        return None
    lines = [line.strip() for line in (run.stderr or run.stdout).splitlines() if line.strip()]
    return lines[0] if lines else f"{compiler} exited with status {run.returncode}"
