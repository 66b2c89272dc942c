"""Tensor layouts of the key/query scales and key values (docs/semantics.md): converters between the natural
layout and the "mfma_permuted" one (an arch record's scale_layout names which its kernels read), layout
detection, and the refusal of a tensor laid out for another arch. The same bytes in either layout:
ranks and shapes tell them apart; each layout's shapes come from manifest.json.

mfma_permuted, per R-row group (R = H heads of one query row, or the PAGE tokens of one page) of
B = D/32 scale bytes per row: the byte of row o = 32·mi + m and block b = 2·kt + g is stored at
[g, m, kt·(R/32) + mi] of a [2, 32, (B/2)·(R/32)] group (for R = 64, B = 4: [g, m, 2·kt + mi]).
Values: the 16 bytes of block b of token o of page p are at [p, b, o, :] ([pages, B, PAGE, 16]).
"""

from __future__ import annotations

import math

import torch

from .manifest import manifest

NATURAL, PERMUTED = "natural", "mfma_permuted"
LAYOUTS = (NATURAL, PERMUTED)
KINDS = ("q_scale", "kv_cache", "kv_scale")


# Filled from the manifest on first use: plain dicts trace under torch.compile, manifest() does not.
_SHAPES: dict[str, dict[str, tuple[int, ...]]] = {}
_ARCH_LAYOUT: dict[str, str] = {}


def _shapes(kind: str) -> dict[str, tuple[int, ...]]:
    """Inner shape (after the leading T or pages dim) of `kind` in each layout (manifest.json's)."""
    shapes = _SHAPES.get(kind)
    if shapes is None:
        if kind not in KINDS:
            raise ValueError(f"mxlogits: kind: expected one of {KINDS}, found {kind!r}")
        shapes = _SHAPES[kind] = {layout: manifest().layouts[layout][kind] for layout in LAYOUTS}
    return shapes


def _scale_positions(rows: int, blocks: int) -> tuple[torch.Tensor, ...]:
    """(o, b, g, m, c): natural [o, b] of a group goes to permuted [g, m, c], one entry per byte."""
    o = torch.arange(rows).repeat_interleave(blocks)
    b = torch.arange(blocks).repeat(rows)
    mi, kt = o // 32, b // 2
    return o, b, b % 2, o % 32, kt * (rows // 32) + mi


def layout_of(tensor: torch.Tensor, kind: str) -> str:
    """"natural" or "mfma_permuted" from the rank and shape of `tensor` (a `kind` tensor); raises
    ValueError when it is neither."""
    shapes = _shapes(kind)
    for layout, inner in shapes.items():
        if _has_inner(tensor, inner):
            return layout
    expected = " or ".join(f"{layout} [N, {', '.join(map(str, s))}]" for layout, s in shapes.items())
    raise ValueError(f"mxlogits: {kind}: expected the {expected} layout, found shape {tuple(tensor.shape)}")


def _has_inner(tensor: torch.Tensor, inner: tuple[int, ...]) -> bool:
    """Whether `tensor` is [N, *inner] (every layout's inner shape has dimensions, so a 0-d tensor is not)."""
    return tensor.shape[1:] == inner


def to_layout(tensor: torch.Tensor, kind: str, layout: str) -> torch.Tensor:
    """`tensor` (a `kind` tensor in either layout) in `layout`; a new contiguous tensor unless it
    is already in `layout` (then `tensor` itself)."""
    if layout not in LAYOUTS:
        raise ValueError(f"mxlogits: layout: expected one of {LAYOUTS}, found {layout!r}")
    source = layout_of(tensor, kind)
    if source == layout:
        return tensor
    n, shape = tensor.shape[0], _shapes(kind)
    if kind == "kv_cache":  # [N, PAGE, B·16] <-> [N, B, PAGE, 16]: swap the token and block dims
        pages, blocks = shape[NATURAL][0], shape[PERMUTED][0]
        if layout == PERMUTED:
            return tensor.reshape(n, pages, blocks, 16).transpose(1, 2).contiguous()
        return tensor.transpose(1, 2).reshape(n, *shape[NATURAL]).contiguous()
    o, b, g, m, c = (t.to(tensor.device) for t in _scale_positions(*shape[NATURAL]))
    out = tensor.new_empty((n, *shape[layout]))
    if layout == PERMUTED:
        out[:, g, m, c] = tensor[:, o, b]
    else:
        out[:, o, b] = tensor[:, g, m, c]
    return out


def from_layout(tensor: torch.Tensor, kind: str) -> torch.Tensor:
    """`tensor` in the natural layout, from either layout."""
    return to_layout(tensor, kind, NATURAL)


def layout_arches(layout: str) -> tuple[str, ...]:
    """The arches whose kernels read `layout`."""
    return tuple(sorted(a.name for a in manifest().arches.values() if a.scale_layout == layout))


def arch_layout(arch: str) -> str | None:
    """The layout `arch` reads (its record's scale_layout); None while not yet known under
    torch.compile (the op's own shape checks still refuse a wrong layout there)."""
    layout = _ARCH_LAYOUT.get(arch)
    if layout is None and not torch.compiler.is_compiling():
        layout = _ARCH_LAYOUT[arch] = manifest().arches[arch].scale_layout
        for kind in KINDS:
            _shapes(kind)
    return layout


def check_layout(name: str, tensor, kind: str, expected_layout: str | None) -> None:
    """Raise when `tensor` (argument `name`) is laid out as another layout than `expected_layout`.
    A tensor of neither layout's shape (or no tensor, or expected_layout None) passes: the op's
    shape checks report it."""
    if expected_layout is None or not isinstance(tensor, torch.Tensor):
        return
    inner = _shapes(kind)[expected_layout]
    if _has_inner(tensor, inner):  # the op's per-call path: no search over the layouts
        return
    try:
        found = layout_of(tensor, kind)
    except ValueError:
        return
    if found != expected_layout:
        dims = ", ".join(map(str, inner))
        raise ValueError(
            f"mxlogits: {name}: expected the {expected_layout} layout [N, {dims}] of this arch, found shape "
            f"{tuple(tensor.shape)}, which looks like the {found} ({', '.join(layout_arches(found))}) layout; "
            f"convert it with mxlogits.to_layout({name}, {kind!r}, {expected_layout!r})"
        )


def fused_views(buffer: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 [pages, PAGE·(D/2 + D/32)] fused page buffer (a page's value bytes, then its scale
    bytes) -> (kv_cache, kv_scale) views of it in `layout`, whose page stride is the fused page.
    Reads only the cached table shapes, so it traces under torch.compile once they are known."""
    if layout not in LAYOUTS:
        raise ValueError(f"mxlogits: layout: expected one of {LAYOUTS}, found {layout!r}")
    values, scales = _shapes("kv_cache")[layout], _shapes("kv_scale")[layout]
    value_bytes, scale_bytes = math.prod(values), math.prod(scales)
    if buffer.dtype != torch.uint8 or buffer.dim() != 2 or buffer.shape[1] != value_bytes + scale_bytes:
        raise ValueError(
            f"mxlogits: buffer: expected uint8 [pages, {value_bytes + scale_bytes}], "
            f"found {buffer.dtype} {tuple(buffer.shape)}"
        )
    pages = buffer.shape[0]
    return buffer[:, :value_bytes].view(pages, *values), buffer[:, value_bytes:].view(pages, *scales)


def page_rows(slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cache slots (page * PAGE + row) -> (pages, rows); traces under torch.compile."""
    page = _shapes("kv_scale")[NATURAL][0]
    return slots // page, slots % page


def _token_index(pages: torch.Tensor, rows: torch.Tensor, kv_cache: torch.Tensor) -> tuple[tuple, tuple, tuple]:
    """Advanced indices of tokens (pages[i], rows[i]) into kv_cache and kv_scale in kv_cache's layout,
    and the shape their values take there: kv_cache[values] is [N, D/2] or [N, D/32, 16], kv_scale[scales]
    [N, D/32], in natural element order."""
    if layout_of(kv_cache, "kv_cache") == NATURAL:
        return (pages, rows), (pages, rows), (-1, kv_cache.shape[-1])
    blocks = _shapes("kv_cache")[PERMUTED][0]
    b = torch.arange(blocks, device=pages.device)
    # One group per page: a token's bytes are those of row `row` of _scale_positions.
    _, _, g, m, c = (t.to(pages.device).view(-1, blocks) for t in _scale_positions(*_shapes("kv_scale")[NATURAL]))
    return (pages[:, None], b, rows[:, None]), (pages[:, None], g[rows], m[rows], c[rows]), (-1, blocks, 16)


def scatter_tokens(
    packed: torch.Tensor,
    scales: torch.Tensor,
    pages: torch.Tensor,
    rows: torch.Tensor,
    kv_cache: torch.Tensor,
    kv_scale: torch.Tensor,
) -> None:
    """Token i (packed [N, D/2], scales [N, D/32]) to page pages[i], row rows[i] of a paged cache
    in either layout (that of kv_cache; write_paged_kv checks both), through views."""
    values, scale_bytes, shape = _token_index(pages, rows, kv_cache)
    kv_cache[values] = packed.reshape(shape)
    kv_scale[scale_bytes] = scales


def gather_tokens(
    pages: torch.Tensor, rows: torch.Tensor, kv_cache: torch.Tensor, kv_scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """scatter_tokens' inverse: (packed [N, D/2], scales [N, D/32]) of tokens (pages[i], rows[i])."""
    values, scale_bytes, _ = _token_index(pages, rows, kv_cache)
    return kv_cache[values].reshape(pages.shape[0], -1), kv_scale[scale_bytes]
