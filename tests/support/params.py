"""The arches and variants of the instance table, which of them run here, and their pytest params:
every op test is parametrised over every instance of the table (GPU ones carry the gpu mark) and runs
on the arches present on this machine: cpu, and the arch of the CUDA/HIP device when the table has
one; the others are reported skipped with the reason. The AMD instances also run here through the
host emulation (ids like gfx950-emulated-qlen1_kv64), wherever clang is installed."""

from __future__ import annotations

import dataclasses

import mxlogits as mx
import pytest
import torch
from mxlogits.build import sanitize_enabled
from mxlogits.manifest import manifest


def _gpu_arch() -> str | None:
    """The arch of this machine's GPU, or None without a GPU, when the table has no arch for it, or
    in the sanitizer job (MXLOGITS_SANITIZE=1), which checks the host arch."""
    if not torch.cuda.is_available() or sanitize_enabled():
        return None
    try:
        return mx.arch_of("cuda")
    except RuntimeError:  # a GPU the instance table does not target: its params are left out
        return None


GPU_ARCH = _gpu_arch()
PRESENT_ARCHES = ["cpu"] + ([GPU_ARCH] if GPU_ARCH else [])
TABLE_ARCHES = list(dict.fromkeys(v.arch for v in mx.variants()))  # every arch of the instance table
CPU_VARIANTS = mx.variants("cpu")
GPU_VARIANTS = mx.variants(GPU_ARCH) if GPU_ARCH else ()
PRESENT_VARIANTS = tuple(v for arch in PRESENT_ARCHES for v in mx.variants(arch))


def _emulated_arches() -> list[str]:
    """The AMD arches whose bodies run here through the host emulation: those with an emulation record,
    when clang is installed (not in the sanitizer job, which checks the host arch)."""
    if sanitize_enabled() or mx.build.emulation_compiler() is None:
        return []
    return [a for a in TABLE_ARCHES if manifest().arches[a].emulation]


EMULATED_ARCHES = _emulated_arches()
EMULATED_VARIANTS = tuple(v for arch in EMULATED_ARCHES for v in mx.variants(arch))


@dataclasses.dataclass(frozen=True)
class Emulated:
    """A param whose test runs on CPU tensors through the host emulation of its arch."""

    value: object  # a variant or an arch name

    @property
    def arch(self) -> str:
        return self.value if isinstance(self.value, str) else self.value.arch


def device_of(variant_or_arch) -> str:
    """cpu for the cpu arch and for the arch the host emulates in this test, cuda for a GPU's."""
    arch = variant_or_arch if isinstance(variant_or_arch, str) else variant_or_arch.arch
    return "cpu" if arch == "cpu" or arch == mx.emulated_arch() else "cuda"


def variant_id(v: mx.MqaLogitsVariant) -> str:
    return f"{v.arch}-{v.name}"


def _absent(arch: str) -> str:
    """Why `arch`'s params do not run here."""
    rec = manifest().arches[arch]
    if sanitize_enabled():
        return f"{arch} ({rec.family} {rec.target}): the sanitizer job runs the host arch only"
    here = f"this machine's GPU is {GPU_ARCH}" if GPU_ARCH else "this machine has no GPU of an arch in the table"
    return f"{arch} runs on a {rec.family} {rec.target} GPU only; {here}"


def _marks(arch: str):
    if arch == "cpu":
        return ()
    return (pytest.mark.gpu,) + (() if arch in PRESENT_ARCHES else (pytest.mark.skip(reason=_absent(arch)),))


def variant_params(variants=PRESENT_VARIANTS) -> list:
    """pytest params of `variants`, ids like cpu-qlen1_kv64 / sm90-qlen1_kv64, GPU ones marked gpu and
    those of an arch this machine cannot run skipped with the reason."""
    return [pytest.param(v, id=variant_id(v), marks=_marks(v.arch)) for v in variants]


def arch_params(arches=PRESENT_ARCHES) -> list:
    return [pytest.param(a, id=a, marks=_marks(a)) for a in arches]


def emulated_params(values) -> list:
    """pytest params running `values` (variants or arch names of EMULATED_ARCHES) through the host
    emulation, ids like gfx950-emulated-qlen1_kv64 and gfx950-emulated: `-k "gfx950 and emulated"`
    selects them. A fixture unwraps them with `unwrap`."""
    return [
        pytest.param(Emulated(v), id=f"{v}-emulated" if isinstance(v, str) else f"{v.arch}-emulated-{v.name}",
                     marks=(pytest.mark.toolchain,))  # fmt: skip
        for v in values
    ]


def unwrap(request):
    """The param of a fixture's `request`; an Emulated one is unwrapped, its arch emulated until the test
    ends."""
    if not isinstance(request.param, Emulated):
        return request.param
    context = mx.emulate(request.param.arch)
    context.__enter__()
    request.addfinalizer(lambda: context.__exit__(None, None, None))
    return request.param.value


def variant_with(arch: str, predicate, what: str) -> mx.MqaLogitsVariant:
    """The first variant of `arch` that satisfies `predicate`; skips (naming `what`) if it has none."""
    found = [v for v in mx.variants(arch) if predicate(v)]
    if not found:
        pytest.skip(f"{arch} compiles no variant with {what}")
    return found[0]
