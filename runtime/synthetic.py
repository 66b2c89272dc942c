"""Random MXFP4 inputs laid out as a serving stack would: keys scattered over shuffled pages
of a fused page buffer, queries and weights per row. Used by the demo and the tests."""

from __future__ import annotations

import torch

from .manifest import manifest
from .mxfp4 import quantize_mxfp4
from .paged_cache import fused_kv_cache, write_paged_kv


def random_paged_keys(
    contexts: list[int],
    device: torch.device | str,
    generator: torch.Generator,
    *,
    width: int,
    spare_pages: int = 1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(kv_cache, kv_scale, block_tables): sequence b holds contexts[b] random keys in shuffled
    pages of one fused buffer (kv_cache/kv_scale are its views); block_tables is int32
    [len(contexts), width], unused columns 0."""
    page, d = manifest().page_size, manifest().head_dim
    pages_of = [-(-c // page) for c in contexts]
    num_pages = sum(pages_of) + spare_pages
    order = torch.randperm(num_pages, generator=generator)
    block_tables = torch.zeros((len(contexts), max(width, max(pages_of, default=0))), dtype=torch.int32)
    _, kv_cache, kv_scale = fused_kv_cache(num_pages, device)
    used = 0
    for b, (ctx, n) in enumerate(zip(contexts, pages_of)):
        block_tables[b, :n] = order[used:used + n]
        used += n
        tokens = torch.arange(ctx)
        slots = block_tables[b, tokens // page].long() * page + tokens % page
        keys = torch.randn((ctx, d), generator=generator)
        packed, scales = quantize_mxfp4(keys.to(device))
        write_paged_kv(packed, scales, slots.to(device), kv_cache, kv_scale)
    return kv_cache, kv_scale, block_tables.to(device)


def random_queries(
    num_rows: int, device: torch.device | str, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, q_scale, weights) of `num_rows` rows: random MXFP4 queries, fp32 weights ~ N(0, 1/H)."""
    m = manifest()
    q, q_scale = quantize_mxfp4(torch.randn((num_rows, m.heads, m.head_dim), generator=generator))
    weights = torch.randn((num_rows, m.heads), generator=generator) / m.heads
    return q.to(device), q_scale.to(device), weights.to(device)
