"""The generated instance table, read from generated/manifest.json (never typed twice)."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

GENERATED_DIR_ENV = "MXLOGITS_GENERATED_DIR"


@dataclass(frozen=True)
class MqaLogitsVariant:
    """One compiled instance: `arch` is part of its identity, so a variant of one arch is
    never mistaken for another arch's instance with the same numbers."""

    name: str
    q_per_block: int
    block_k: int
    cta_resident: int
    arch: str


@dataclass(frozen=True)
class Emulation:
    """The host emulation build of a hip arch (instances.yaml `emulation`)."""

    wave: int
    flags: tuple[str, ...]
    macro: str  # defined, with MXLOGITS_EMULATE, by the emulation build
    header: str  # under generated/: included first by every TU of that build


@dataclass(frozen=True)
class ArchRecord:
    name: str
    family: str  # host | cuda | hip
    target: str
    flags: tuple[str, ...]
    sanitize_flags: tuple[str, ...]  # added to flags by MXLOGITS_SANITIZE=1
    scale_layout: str
    out_forms: tuple[str, ...]  # what the body writes beyond fp32 cells at column t: "bf16", "from_start"
    device_flags: tuple[str, ...]  # the device compiler's flags selecting the pass of `target`
    dispatch_key: str
    op_namespace: str
    sources: tuple[str, ...]
    files: tuple[tuple[str, str], ...]  # (path under generated/, sha256)
    source_hash: str
    emulation: Emulation | None  # a hip arch the host can emulate


@dataclass(frozen=True)
class OpRecord:
    """One op of every arch's module (codegen/ops.py): its schema, argument names in order, return."""

    name: str
    schema: str
    args: tuple[str, ...]
    returns: str  # "()": the op only checks or writes its (a!) arguments


@dataclass(frozen=True)
class Manifest:
    directory: Path
    heads: int
    head_dim: int
    page_size: int
    arches: dict[str, ArchRecord]
    layouts: dict[str, dict[str, tuple[int, ...]]]  # layout -> kind -> inner shape (after the leading dim)
    ops: dict[str, OpRecord]
    variants: tuple[MqaLogitsVariant, ...]
    defaults: dict[str, MqaLogitsVariant]
    tolerances: dict[MqaLogitsVariant, tuple[float, float]]  # (atol, rtol)
    setup_tokens: dict[MqaLogitsVariant, int]  # the schedule's weight of a tile's setup


def generated_dir() -> Path:
    """generated/ of a checkout, of an installed wheel, or $MXLOGITS_GENERATED_DIR."""
    env = os.environ.get(GENERATED_DIR_ENV)
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for candidate in (here / "generated", here.parent / "generated"):
        if (candidate / "manifest.json").is_file():
            return candidate
    raise RuntimeError(
        f"mxlogits: no generated/manifest.json beside {here}; reinstall the package or set {GENERATED_DIR_ENV}"
    )


def _emulation(record: dict | None) -> Emulation | None:
    if record is None:
        return None
    return Emulation(record["wave"], tuple(record["flags"]), record["macro"], record["header"])


@functools.cache
def manifest() -> Manifest:
    directory = generated_dir()
    doc = json.loads((directory / "manifest.json").read_text())
    arches = {
        name: ArchRecord(
            name=name,
            family=a["family"],
            target=a["target"],
            flags=tuple(a["flags"]),
            sanitize_flags=tuple(a["sanitize_flags"]),
            scale_layout=a["scale_layout"],
            out_forms=tuple(a["out_forms"]),
            device_flags=tuple(a["device_flags"]),
            dispatch_key=a["dispatch_key"],
            op_namespace=a["op_namespace"],
            sources=tuple(a["sources"]),
            files=tuple(sorted(a["files"].items())),
            source_hash=a["source_hash"],
            emulation=_emulation(a["emulation"]),
        )
        for name, a in doc["arches"].items()
    }
    variants, defaults, tolerances, setup_tokens = [], {}, {}, {}
    for rec in doc["instances"]:
        v = MqaLogitsVariant(rec["name"], rec["q_per_block"], rec["block_k"], rec["cta_resident"], rec["arch"])
        variants.append(v)
        tolerances[v] = (rec["atol"], rec["rtol"])
        setup_tokens[v] = rec["setup_tokens"]
        if rec["default"]:
            defaults[v.arch] = v
    table = doc["table"]
    return Manifest(
        directory=directory,
        heads=table["heads"],
        head_dim=table["head_dim"],
        page_size=table["page_size"],
        arches=arches,
        layouts={
            layout: {kind: tuple(shape) for kind, shape in kinds.items()} for layout, kinds in doc["layouts"].items()
        },
        ops={name: OpRecord(name, op["schema"], tuple(op["args"]), op["returns"]) for name, op in doc["ops"].items()},
        variants=tuple(variants),
        defaults=defaults,
        tolerances=tolerances,
        setup_tokens=setup_tokens,
    )


def _arch_record(arch: str) -> ArchRecord:
    m = manifest()
    if arch not in m.arches:
        raise ValueError(f"mxlogits: unknown arch {arch!r}; the instance table has {sorted(m.arches)}")
    return m.arches[arch]


def variants(arch: str | None = None) -> tuple[MqaLogitsVariant, ...]:
    """Every compiled variant, or those of `arch`."""
    if arch is None:
        return manifest().variants
    _arch_record(arch)
    return tuple(v for v in manifest().variants if v.arch == arch)


def default_variant(arch: str) -> MqaLogitsVariant:
    _arch_record(arch)
    return manifest().defaults[arch]


def tolerance(variant: MqaLogitsVariant) -> tuple[float, float]:
    """(atol, rtol) of `variant` against an fp32 reference (docs/semantics.md; instances.yaml)."""
    return manifest().tolerances[variant]


def fewest_tiles(
    rows_per_sequence: int, default: MqaLogitsVariant, own: Sequence[MqaLogitsVariant]
) -> MqaLogitsVariant:
    """Of the variants `own` (`default` among them), the one for sequences of about `rows_per_sequence` query
    rows: the q_per_block that takes a sequence's rows in the fewest tiles, the smallest among those. Each
    tile reads the sequence's keys once, and ceil(n / q) * q rows are multiplied either way (next_n 3 as one
    4-row tile, not 2 + 1). The default among equals, else the smallest block_k (what the bench and the demo
    have measured)."""
    n = max(rows_per_sequence, 1)
    best = min({v.q_per_block for v in own}, key=lambda q: (-(-n // q), q))
    if default.q_per_block == best:
        return default
    return min((v for v in own if v.q_per_block == best), key=lambda v: v.block_k)


def variant_for_rows(arch: str, rows_per_sequence: int) -> MqaLogitsVariant:
    """The instance for sequences of about `rows_per_sequence` query rows (next_n at decode, the chunk
    length at prefill): fewest_tiles of the arch's variants."""
    return fewest_tiles(rows_per_sequence, default_variant(arch), variants(arch))


def resolve_variant(variant: str | MqaLogitsVariant | None, arch: str) -> MqaLogitsVariant:
    """A name, a variant or None (the arch default) -> a variant compiled for `arch`; raises otherwise."""
    if variant is None:
        return default_variant(arch)
    own = variants(arch)
    if isinstance(variant, MqaLogitsVariant):
        if variant.arch != arch:
            raise ValueError(
                f"mxlogits: variant {variant.name!r} was compiled for {variant.arch}, not {arch}; "
                f"{arch} has {[v.name for v in own]}"
            )
        if variant not in own:
            raise ValueError(
                f"mxlogits: {variant} is not an instance {arch} compiled (hand-built or from another table); "
                f"available: {list(own)}"
            )
        return variant
    if isinstance(variant, str):
        for v in own:
            if v.name == variant:
                return v
        raise ValueError(f"mxlogits: unknown variant {variant!r} for {arch}; available: {[v.name for v in own]}")
    raise TypeError(f"mxlogits: variant: expected a name, an MqaLogitsVariant or None, found {type(variant).__name__}")
