"""The ops of an arch's module, called by their schema's argument names (manifest.json's op list,
from codegen/ops.py): no caller depends on the order of an op's arguments."""

from __future__ import annotations

import torch

from .build import load
from .manifest import manifest


class ArchOps:
    """Each op of one arch's module as a function of keyword-only arguments, every schema argument
    named (None for an absent optional tensor), handed on in the schema's order."""

    def __init__(self, namespace: str):
        module = getattr(torch.ops, namespace)
        for op in manifest().ops.values():
            setattr(self, op.name, _by_name(op.name, getattr(module, op.name).default, op.args))


def _by_name(name: str, overload, args: tuple[str, ...]):
    """`def name(*, a, b): return overload(a, b)`, compiled as dataclasses compile __init__: Python binds
    the keywords (a missing or unknown one raises naming it) at the cost of a plain call, and
    torch.compile traces it as one."""
    if not all(a.isidentifier() for a in args):
        raise RuntimeError(f"mxlogits: manifest.json: op {name}: expected argument names, found {list(args)}")
    source = f"def {name}(*, {', '.join(args)}):\n    return overload({', '.join(args)})\n"
    scope: dict = {}
    exec(source, {"overload": overload}, scope)  # noqa: S102
    return scope[name]


_loaded: dict[tuple[str, str], ArchOps] = {}  # (arch, device type): a plain dict, which torch.compile traces


def ops(arch_name: str, device: torch.device) -> ArchOps:
    """The ops of the module that runs `arch_name` on `device`, loading (building) it on first use: on CPU
    tensors a GPU arch runs its host emulation."""
    found = _loaded.get((arch_name, device.type))
    if found is None:
        emulated = device.type == "cpu" and manifest().arches[arch_name].family != "host"
        found = _loaded[(arch_name, device.type)] = ArchOps(load(arch_name, emulated))
    return found
