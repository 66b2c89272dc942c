"""Random MXFP4 inputs laid out as a serving stack would: keys scattered over shuffled pages
of a fused page buffer, queries and weights per row, in the layout of the device's arch. Used by the
demo and the tests."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from .arch import arch_of
from .layouts import arch_layout, fused_views, layout_of, to_layout
from .manifest import manifest
from .mxfp4 import quantize_mxfp4
from .paged_cache import fused_kv_cache, write_paged_kv
from .plan import block_table_width

LAID_OUT = ("q_scale", "kv_cache", "kv_scale")  # the tensors whose layout is the arch's


@dataclass
class Scene:
    """One forward's inputs: sequences with a KV context, query rows with windows."""

    q: torch.Tensor
    q_scale: torch.Tensor
    kv_cache: torch.Tensor
    kv_scale: torch.Tensor
    block_tables: torch.Tensor
    weights: torch.Tensor
    cu_seq_q: torch.Tensor
    local_starts: torch.Tensor
    local_ends: torch.Tensor
    row_to_batch: torch.Tensor
    max_seq_len: int

    @property
    def total_q(self) -> int:
        return self.q.shape[0]

    @property
    def batch(self) -> int:
        return self.block_tables.shape[0]

    def named_inputs(self, weights: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """{q, q_scale, kv_cache, kv_scale, block_tables, weights}: the leading arguments of the op
        and of reference_logits, by name."""
        w = self.weights if weights is None else weights
        return dict(q=self.q, q_scale=self.q_scale, kv_cache=self.kv_cache, kv_scale=self.kv_scale,
                    block_tables=self.block_tables, weights=w)  # fmt: skip

    @contextlib.contextmanager
    def natural(self):
        """q, q_scale, kv_cache and kv_scale in the natural layout, to edit by (row, head or token, block)
        whatever the arch's layout; the edits are written back, in place, when the block ends."""
        views = SimpleNamespace(q=self.q, **{k: to_layout(getattr(self, k), k, "natural") for k in LAID_OUT})
        yield views
        for kind in LAID_OUT:
            mine = getattr(self, kind)
            edited = to_layout(getattr(views, kind), kind, layout_of(mine, kind))
            if edited is not mine:
                mine.copy_(edited)

    def inputs(self, weights: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """named_inputs' values, in that order."""
        return tuple(self.named_inputs(weights).values())


def make_scene(
    contexts: list[int],
    rows: list[tuple[int, int, int]],
    device: torch.device | str = "cpu",
    *,
    seed: int = 0,
    max_seq_len: int | None = None,
) -> Scene:
    """Sequence b holds contexts[b] random keys; rows are (sequence, start, end) in row order,
    each sequence's rows contiguous and in sequence order; sequence -1 marks a pad row (after
    every real row, as ATOM pads decode), whose window should be empty. block_tables is wide
    enough for every variant of the device's arch."""
    g = torch.Generator().manual_seed(seed)
    max_seq_len = max([*contexts, 1]) if max_seq_len is None else max_seq_len
    width = block_table_width(max_seq_len, device=device)  # the widest variant of the device's arch
    layout = arch_layout(arch_of(device))
    kv_cache, kv_scale, block_tables = _paged_keys(contexts, device, g, width=width, layout=layout)
    q, q_scale, weights = _queries(len(rows), device, g)
    q_scale = to_layout(q_scale, "q_scale", layout)
    counts = [sum(1 for s, _, _ in rows if s == b) for b in range(len(contexts))]
    i32 = lambda values: torch.tensor(values, dtype=torch.int32, device=device)
    return Scene(
        q=q,
        q_scale=q_scale,
        kv_cache=kv_cache,
        kv_scale=kv_scale,
        block_tables=block_tables,
        weights=weights,
        cu_seq_q=torch.tensor([0, *counts]).cumsum(0).to(torch.int32).to(device),
        local_starts=i32([s for _, s, _ in rows]),
        local_ends=i32([e for _, _, e in rows]),
        row_to_batch=i32([b for b, _, _ in rows]),
        max_seq_len=max_seq_len,
    )


def _paged_keys(
    contexts: list[int],
    device: torch.device | str,
    generator: torch.Generator,
    *,
    width: int,
    layout: str,
    spare_pages: int = 1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(kv_cache, kv_scale, block_tables): sequence b holds contexts[b] random keys in shuffled
    pages of one fused buffer (kv_cache/kv_scale are its views in `layout`); block_tables is int32
    [len(contexts), width], unused columns 0."""
    page, d = manifest().page_size, manifest().head_dim
    pages_of = [-(-c // page) for c in contexts]
    num_pages = sum(pages_of) + spare_pages
    order = torch.randperm(num_pages, generator=generator)
    block_tables = torch.zeros((len(contexts), max(width, max(pages_of, default=0))), dtype=torch.int32)
    buffer, _, _ = fused_kv_cache(num_pages, device)
    kv_cache, kv_scale = fused_views(buffer, layout)
    used = 0
    for b, (ctx, n) in enumerate(zip(contexts, pages_of)):
        block_tables[b, :n] = order[used : used + n]
        used += n
        tokens = torch.arange(ctx)
        slots = block_tables[b, tokens // page].long() * page + tokens % page
        keys = torch.randn((ctx, d), generator=generator)
        packed, scales = quantize_mxfp4(keys.to(device))
        write_paged_kv(packed, scales, slots.to(device), kv_cache, kv_scale)
    return kv_cache, kv_scale, block_tables.to(device)


def _queries(
    num_rows: int, device: torch.device | str, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, q_scale, weights) of `num_rows` rows: random MXFP4 queries, fp32 weights ~ N(0, 1/H)."""
    m = manifest()
    q, q_scale = quantize_mxfp4(torch.randn((num_rows, m.heads, m.head_dim), generator=generator))
    weights = torch.randn((num_rows, m.heads), generator=generator) / m.heads
    return q.to(device), q_scale.to(device), weights.to(device)
