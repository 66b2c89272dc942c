"""Shared builders: one op call's inputs from (contexts, rows), the op, the reference, and the
comparison of SPEC §3 (in-window cells within the instance's bound, other cells untouched)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import mxlogits as mx
from mxlogits.synthetic import random_paged_keys, random_queries

CPU_VARIANTS = mx.variants("cpu")


def variant_id(v: mx.MqaLogitsVariant) -> str:
    return v.name


@pytest.fixture(params=CPU_VARIANTS, ids=variant_id)
def variant(request) -> mx.MqaLogitsVariant:
    return request.param


@dataclass
class Case:
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


def make_case(contexts: list[int], rows: list[tuple[int, int, int]], *, seed: int = 0, max_seq_len: int | None = None) -> Case:
    """rows: (sequence, start, end) in row order, each sequence's rows contiguous and in
    sequence order; sequence -1 marks a pad row (after every real row, ATOM style)."""
    g = torch.Generator().manual_seed(seed)
    max_seq_len = max([*contexts, 1]) if max_seq_len is None else max_seq_len
    width = max(mx.block_table_width(max_seq_len, v) for v in CPU_VARIANTS)
    kv_cache, kv_scale, block_tables = random_paged_keys(contexts, "cpu", g, width=width)
    q, q_scale, weights = random_queries(len(rows), "cpu", g)
    counts = [sum(1 for s, _, _ in rows if s == b) for b in range(len(contexts))]
    cu = torch.tensor([0] + counts).cumsum(0).to(torch.int32)
    return Case(
        q=q, q_scale=q_scale, kv_cache=kv_cache, kv_scale=kv_scale, block_tables=block_tables, weights=weights,
        cu_seq_q=cu,
        local_starts=torch.tensor([s for _, s, _ in rows], dtype=torch.int32),
        local_ends=torch.tensor([e for _, _, e in rows], dtype=torch.int32),
        row_to_batch=torch.tensor([b for b, _, _ in rows], dtype=torch.int32),
        max_seq_len=max_seq_len,
    )


def make_plan(case: Case, variant, *, num_ctas=None, row_to_batch=True, starts=True) -> mx.MqaLogitsPlan:
    buffers = mx.plan_buffers("cpu", case.total_q, case.batch, variant, num_ctas=num_ctas)
    return mx.plan(case.cu_seq_q, case.local_ends, buffers=buffers,
                   local_starts=case.local_starts if starts else None,
                   row_to_batch=case.row_to_batch if row_to_batch else None)


def run_op(case: Case, variant, *, out=None, weight_scale=1.0, plan=None, weights=None, **plan_kwargs) -> torch.Tensor:
    plan = plan or make_plan(case, variant, **plan_kwargs)
    return mx.pa_mqa_logits_mxfp4(case.q, case.q_scale, case.kv_cache, case.kv_scale, case.block_tables,
                                  case.weights if weights is None else weights, plan, case.max_seq_len,
                                  weight_scale=weight_scale, out=out)


def reference(case: Case, *, weight_scale=1.0, starts=True, weights=None) -> torch.Tensor:
    return mx.reference_logits(case.q, case.q_scale, case.kv_cache, case.kv_scale, case.block_tables,
                               case.weights if weights is None else weights, case.local_ends, case.max_seq_len,
                               local_starts=case.local_starts if starts else None, row_to_batch=case.row_to_batch,
                               weight_scale=weight_scale)


def assert_matches(out: torch.Tensor, ref: torch.Tensor, variant) -> None:
    """Cells the reference computed agree within the instance's bound (NaN where it is NaN);
    every other cell is exactly as the reference left it."""
    assert out.shape == ref.shape
    atol, rtol = mx.tolerance(variant)
    computed = ~torch.isneginf(ref)
    assert torch.equal(out[~computed], ref[~computed]), "cells outside every window were written"
    assert torch.equal(torch.isnan(out[computed]), torch.isnan(ref[computed])), "NaN cells differ"
    o, r = out[computed].nan_to_num(0.0), ref[computed].nan_to_num(0.0)
    err = (o - r).abs()
    bad = err > atol + rtol * r.abs()
    assert not bad.any(), f"{int(bad.sum())} cells outside the bound; worst error {float(err.max()):.3g}"
