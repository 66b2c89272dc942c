"""Shared builders: one op call's inputs from (contexts, rows), the op, the reference, and the
comparison of SPEC §3 (in-window cells within the instance's bound, other cells untouched)."""

from __future__ import annotations

import mxlogits as mx
import pytest
import torch
from mxlogits.synthetic import Scene
from mxlogits.synthetic import make_scene as make_case  # noqa: F401  (cpu is its default device)

CPU_VARIANTS = mx.variants("cpu")


def variant_id(v: mx.MqaLogitsVariant) -> str:
    return v.name


@pytest.fixture(params=CPU_VARIANTS, ids=variant_id)
def variant(request) -> mx.MqaLogitsVariant:
    return request.param


def make_plan(case: Scene, variant, *, num_ctas=None, row_to_batch=True, starts=True) -> mx.MqaLogitsPlan:
    buffers = mx.plan_buffers("cpu", case.total_q, case.batch, variant, num_ctas=num_ctas)
    return mx.plan(
        case.cu_seq_q,
        case.local_ends,
        buffers=buffers,
        local_starts=case.local_starts if starts else None,
        row_to_batch=case.row_to_batch if row_to_batch else None,
    )


def run_op(case: Scene, variant, *, out=None, weight_scale=1.0, plan=None, weights=None, **plan_kwargs) -> torch.Tensor:
    plan = plan or make_plan(case, variant, **plan_kwargs)
    return mx.pa_mqa_logits_mxfp4(
        *case.inputs(weights),
        plan,
        case.max_seq_len,
        weight_scale=weight_scale,
        out=out,
    )


def reference(case: Scene, *, weight_scale=1.0, starts=True, weights=None) -> torch.Tensor:
    return mx.reference_logits(
        *case.inputs(weights),
        case.local_ends,
        case.max_seq_len,
        local_starts=case.local_starts if starts else None,
        row_to_batch=case.row_to_batch,
        weight_scale=weight_scale,
    )


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
