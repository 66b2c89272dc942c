"""Which arch of the instance table runs on a device: probed once per device, then cached. CPU tensors
run the cpu arch, or an AMD arch through its host emulation: MXLOGITS_EMULATE=<arch> in the
environment, or `with mxlogits.emulate(<arch>):` in code (which wins; `emulate(None)` selects cpu)."""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import threading

import torch

from .manifest import manifest

EMULATE_ENV = "MXLOGITS_EMULATE"

_lock = threading.Lock()
_arch_by_device: dict[torch.device, str] = {}
_UNSET = object()
_emulating: contextvars.ContextVar = contextvars.ContextVar("mxlogits_emulate", default=_UNSET)


def _emulable(arch: str | None, source: str) -> str | None:
    """`arch` if the host can emulate it (or None: no emulation), else raise naming where it came from."""
    if arch is None:
        return None
    arches = manifest().arches
    can = sorted(a.name for a in arches.values() if a.emulation)
    if not isinstance(arch, str) or arch not in arches or not arches[arch].emulation:
        raise ValueError(f"mxlogits: {source}: expected an arch the host emulation runs ({can}), found {arch!r}")
    return arch


@torch.compiler.assume_constant_result  # torch.compile reads it once, when it traces
def emulated_arch() -> str | None:
    """The arch CPU tensors run through its host emulation here, or None (they run the cpu arch)."""
    chosen = _emulating.get()
    if chosen is not _UNSET:
        return chosen
    return _emulable(os.environ.get(EMULATE_ENV) or None, EMULATE_ENV)


@contextlib.contextmanager
def emulate(arch: str | None):
    """Within the block (this thread or task), CPU tensors run `arch`'s body through the host emulation;
    None: the cpu arch, whatever MXLOGITS_EMULATE says."""
    token = _emulating.set(_emulable(arch, "emulate"))
    try:
        yield
    finally:
        _emulating.reset(token)


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
    """The arch name that serves `device` (cpu for CPU tensors, unless an arch is emulated); raises if the
    table has none."""
    if (device.type if isinstance(device, torch.device) else normalize_device(device).type) == "cpu":
        emulated = emulated_arch()
        if emulated is not None:
            return emulated
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
