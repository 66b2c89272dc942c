"""Run Python in a fresh process with a given environment (builds, caches, installs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def python(
    code: str,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
    background: bool = False,
):
    full_env = {**os.environ, **(env or {})}
    args = [sys.executable, "-c", code]
    if background:
        return subprocess.Popen(args, env=full_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result = subprocess.run(args, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"subprocess failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result
