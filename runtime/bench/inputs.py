"""Random inputs of a bench shape, generated on the device: packed bytes and E8M0 scales are drawn
directly (no quantization), so 128 x 65,536 tokens take milliseconds on a GPU. Several input sets
share one schedule, so timed calls can rotate through working sets larger than the L2."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from ..manifest import manifest
from ..paged_cache import split_fused_pages
from .shapes import Shape

# E8M0 exponents: a per-row base in [119, 129] and per-block offsets of at most 1, so scales span
# 118..130 (2^-9 .. 2^3) and one row's 32-blocks differ by <= 2, as after a Hadamard rotation.
_BASE, _SPREAD = (119, 129), 1


@dataclass
class InputSet:
    """What differs between rotated copies: the KV pages, the queries and the output."""

    q: torch.Tensor
    q_scale: torch.Tensor
    kv_cache: torch.Tensor
    kv_scale: torch.Tensor
    weights: torch.Tensor
    out: torch.Tensor


@dataclass
class Problem:
    shape: Shape
    block_tables: torch.Tensor
    cu_seq_q: torch.Tensor
    local_ends: torch.Tensor
    local_starts: torch.Tensor | None  # None: every window starts at 0
    row_to_batch: torch.Tensor
    sets: list[InputSet]

    def args(self, i: int) -> tuple[torch.Tensor, ...]:
        """(q, q_scale, kv_cache, kv_scale, block_tables, weights) of set i: the op's leading arguments."""
        s = self.sets[i]
        return s.q, s.q_scale, s.kv_cache, s.kv_scale, self.block_tables, s.weights


def _pages(shape: Shape) -> list[int]:
    page = manifest().page_size
    return [-(-c // page) for c in shape.contexts]


def set_bytes(shape: Shape) -> int:
    """Device memory of one input set."""
    m = manifest()
    page_bytes = m.page_size * (m.head_dim // 2 + m.head_dim // 32)
    row_bytes = m.heads * (m.head_dim // 2 + m.head_dim // 32 + 4)
    return (sum(_pages(shape)) + 1) * page_bytes + shape.total_q * (row_bytes + 4 * shape.max_seq_len)


def random_scales(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """uint8 [n, D/32] E8M0 scales (never 255, the NaN code)."""
    blocks = manifest().head_dim // 32
    base = torch.randint(_BASE[0], _BASE[1] + 1, (n, 1), generator=generator, device=device, dtype=torch.int16)
    offset = torch.randint(-_SPREAD, _SPREAD + 1, (n, blocks), generator=generator, device=device, dtype=torch.int16)
    return (base + offset).to(torch.uint8)


def _input_set(shape: Shape, num_pages: int, generator: torch.Generator, device: torch.device) -> InputSet:
    m = manifest()
    h, t = m.heads, shape.total_q
    buffer = torch.randint(
        0, 256, (num_pages, m.page_size * (m.head_dim // 2 + m.head_dim // 32)), generator=generator, device=device,
        dtype=torch.uint8,
    )  # fmt: skip
    kv_cache, kv_scale = split_fused_pages(buffer)  # the fused layout serving stacks use, in place
    kv_scale.copy_(random_scales(num_pages * m.page_size, generator, device).view(kv_scale.shape))
    q = torch.randint(0, 256, (t, h, m.head_dim // 2), generator=generator, device=device, dtype=torch.uint8)
    q_scale = random_scales(t * h, generator, device).view(t, h, m.head_dim // 32)
    weights = torch.randn((t, h), generator=generator, device=device) / h
    out = torch.empty((t, shape.max_seq_len), device=device)  # only in-window cells are written and read
    return InputSet(q, q_scale, kv_cache, kv_scale, weights, out)


def make_problem(shape: Shape, device: torch.device, num_sets: int, width: int, seed: int = 0) -> Problem:
    """`num_sets` input sets over one block table (sequence b's pages: a slice of a random
    permutation of all pages, plus one spare page) with `width` columns, unused ones 0."""
    pages_of = _pages(shape)
    num_pages = sum(pages_of) + 1
    host = torch.Generator().manual_seed(seed)
    order = torch.randperm(num_pages, generator=host, dtype=torch.int32)
    block_tables = torch.zeros((shape.batch, max(width, max(pages_of))), dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages_of):
        block_tables[b, :n] = order[used : used + n]
        used += n
    generator = torch.Generator(device=device).manual_seed(seed)
    i32 = lambda values: torch.tensor(values, dtype=torch.int32, device=device)
    return Problem(
        shape=shape,
        block_tables=block_tables.to(device),
        cu_seq_q=i32([0, *itertools.accumulate(shape.rows_per_sequence())]),
        local_ends=i32([e for _, _, e in shape.rows]),
        local_starts=i32([s for _, s, _ in shape.rows]) if any(s for _, s, _ in shape.rows) else None,
        row_to_batch=i32([b for b, _, _ in shape.rows]),
        sets=[_input_set(shape, num_pages, generator, device) for _ in range(num_sets)],
    )
