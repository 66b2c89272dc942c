"""Which arch of the instance table runs on a device: probed once per device, then cached."""

from __future__ import annotations

import re
import threading

import torch

from .manifest import manifest

_lock = threading.Lock()
_arch_by_device: dict[torch.device, str] = {}


def normalize_device(device: torch.device | str | int) -> torch.device:
    """A torch.device with the current CUDA index filled in (ints are CUDA indices)."""
    dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _probe(dev: torch.device) -> str:
    arches = manifest().arches
    if dev.type == "cpu":
        family, wanted = "host", "host"
    elif dev.type == "cuda" and torch.version.hip:
        family, wanted = "hip", torch.cuda.get_device_properties(dev).gcnArchName.split(":")[0]
    elif dev.type == "cuda":
        major, minor = torch.cuda.get_device_capability(dev)
        family, wanted = "cuda", f"sm_{major}{minor}"
    else:
        raise RuntimeError(f"mxlogits: no arch runs on device type {dev.type!r}; the table has {sorted(arches)}")
    for a in arches.values():
        # sm_90a serves an sm_90 device: the suffix only unlocks instructions of that exact chip.
        if a.family == family and re.sub(r"a$", "", a.target) == wanted:
            return a.name
    have = ", ".join(f"{a.name} ({a.family} {a.target})" for a in arches.values())
    raise RuntimeError(
        f"mxlogits: {dev} is {family} {wanted}, which no arch of the instance table targets; it has {have}"
    )


def arch_of(device: torch.device | str | int) -> str:
    """The arch name that serves `device` (cpu for CPU tensors); raises if the table has none."""
    arch = _arch_by_device.get(device) if isinstance(device, torch.device) else None
    if arch is not None:  # a tensor's device, already probed: the op's per-call path
        return arch
    dev = normalize_device(device)
    arch = _arch_by_device.get(dev)
    if arch is None:
        with _lock:
            arch = _arch_by_device.get(dev)
            if arch is None:
                arch = _arch_by_device[dev] = _probe(dev)
    return arch
