"""Where a bench result comes from: the code it measured (the checkout's commit and the hash of the
generated sources) and the device it ran on. Written into every --json document."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import torch

from ..manifest import manifest


def provenance(arch: str) -> dict:
    """What a result was measured on: the checkout's commit (None outside git; a device copy's
    .git may be stale) and the hash of the generated sources the arch's module was built from,
    which names the code exactly wherever it runs."""
    return {"git_commit": git_commit(), "source_hash": manifest().arches[arch].source_hash}


def git_commit() -> str | None:
    """HEAD of the checkout this package runs from, '+dirty' with uncommitted changes; None outside git."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"],
                                capture_output=True, text=True, check=False)  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=False)  # fmt: skip
    except OSError:
        return None
    if commit.returncode != 0:
        return None
    return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def device_name(device: torch.device) -> str:
    """The GPU's name, or the host CPU's model."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        return next(line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()
