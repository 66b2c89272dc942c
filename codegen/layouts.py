"""The tensor layouts an arch record's scale_layout may name, as the inner shape (after the leading
token or page dim) of q_scale, kv_cache and kv_scale in each: written once, in C++ over the ABI's
table constants (templates/common/abi.h.j2). The launcher's shape checks render these expressions;
manifest.json carries their values, which the runtime's converters and layout checks read
(docs/semantics.md, layouts)."""

from __future__ import annotations

import re

LAYOUTS = {
    "natural": {
        "q_scale": ("kHeads", "kRowScales"),
        "kv_cache": ("kPageSize", "kRowBytes"),
        "kv_scale": ("kPageSize", "kRowScales"),
    },
    # gfx950's scaled-MFMA operand order: each 32-row group's scale bytes by (block pair, row, ...), a page's
    # values block-major (one block's 16 bytes of every token together).
    "mfma_permuted": {
        "q_scale": ("2", "32", "kHeadDim / 64 * (kHeads / 32)"),
        "kv_cache": ("kRowScales", "kPageSize", "kScaleBlock / 2"),
        "kv_scale": ("2", "32", "kHeadDim / 64 * (kPageSize / 32)"),
    },
}

_CONSTANT = re.compile(r"inline constexpr int (k\w+) = ([^;]+);")
_ARITHMETIC = re.compile(r"[\w\s()+*/-]+")


def _evaluate(expression: str, names: dict[str, int]) -> int | None:
    """An integer C++ expression of literals, `names`, + - * / and parentheses, with C++'s integer
    division; None when it uses anything else (sizeof, a name not in `names`)."""
    if not _ARITHMETIC.fullmatch(expression):
        return None
    try:
        return int(eval(expression.replace("/", "//"), {"__builtins__": {}}, dict(names)))  # noqa: S307
    except (NameError, SyntaxError, ArithmeticError):
        return None


def abi_constants(abi_h: str) -> dict[str, int]:
    """The `inline constexpr int kName = ...;` constants of the rendered common/abi.h that are plain
    arithmetic over the table (kHeads, kRowScales, ...), with their values."""
    names: dict[str, int] = {}
    for name, expression in _CONSTANT.findall(abi_h):
        value = _evaluate(expression.strip(), names)
        if value is not None:
            names[name] = value
    return names


def inner_shapes(abi_h: str) -> dict[str, dict[str, list[int]]]:
    """{layout: {kind: inner shape}} of every layout, evaluated against the rendered common/abi.h."""
    names = abi_constants(abi_h)
    shapes: dict[str, dict[str, list[int]]] = {}
    for layout, kinds in LAYOUTS.items():
        shapes[layout] = {}
        for kind, dims in kinds.items():
            values = [_evaluate(d, names) for d in dims]
            if None in values:
                raise ValueError(f"mxlogits-gen: layout {layout} {kind}: expected arithmetic over abi.h's "
                                 f"constants {sorted(names)}, found {list(dims)}")  # fmt: skip
            shapes[layout][kind] = values
    return shapes
