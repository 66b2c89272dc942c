"""Shared builders: one op call's inputs from (contexts, rows) on a variant's device, the op, the
reference, and the comparison of docs/semantics.md (in-window cells within the instance's bound,
other cells untouched)."""

from __future__ import annotations

import dataclasses

import mxlogits as mx
import torch
from mxlogits.synthetic import Scene, make_scene

from .params import device_of


def ops_of(arch: str):
    """torch.ops.mxlogits_<arch> (_emulated while the test emulates it), the raw ops of the arch's module
    (loaded, built on first use)."""
    return getattr(torch.ops, mx.build.load(arch, emulated=arch != "cpu" and device_of(arch) == "cpu"))


def raw_args(case: Scene, p: mx.MqaLogitsPlan, variant, out, **override) -> dict:
    """The raw op's (torch.ops.mxlogits_<arch>.pa_mqa_logits_mxfp4) arguments for `case` and its plan
    `p`, by name; `override` replaces any of them."""
    args = dict(
        **case.named_inputs(),
        cta_info=p.buffers.cta_info,
        cta_ranges=p.buffers.cta_ranges,
        local_ends=p.local_ends,
        local_starts=p.local_starts,
        out=out,
        num_rows=p.num_rows,
        max_seq_len=case.max_seq_len,
        weight_scale=1.0,
        out_from_start=False,
        q_per_block=variant.q_per_block,
        block_k=variant.block_k,
    )
    args.update(override)
    return args


def make_case(contexts, rows, variant=None, *, seed: int = 0, max_seq_len: int | None = None) -> Scene:
    """A Scene on the device of `variant` (cpu for None); see mxlogits.synthetic.make_scene."""
    device = "cpu" if variant is None else device_of(variant)
    return make_scene(contexts, rows, device, seed=seed, max_seq_len=max_seq_len)


def decode_scene(lens: list, next_n: int, two_d: bool, device: str, seed: int = 0) -> Scene:
    """A decode step as DeepGEMM's context_lens state it: row b * next_n + j reads [0, end) of sequence b,
    end = lens[b][j] (two_d) or lens[b] - next_n + 1 + j."""
    ends = [e for row in lens for e in row] if two_d else [c - next_n + 1 + j for c in lens for j in range(next_n)]
    contexts = [max([*(row if two_d else [row]), 1]) for row in lens]
    rows = [(r // next_n, 0, max(e, 0)) for r, e in enumerate(ends)]
    return make_scene(contexts, rows, device, seed=seed)


def first_rows(case: Scene, n: int) -> Scene:
    """The case's first n query rows (own copies of q, q_scale, weights), its keys unchanged: the
    tensors a launch of a plan built for more rows is handed."""
    return dataclasses.replace(
        case,
        q=case.q[:n].clone(),
        q_scale=case.q_scale[:n].clone(),
        weights=case.weights[:n].clone(),
        local_ends=case.local_ends[:n],
        local_starts=case.local_starts[:n],
        row_to_batch=case.row_to_batch[:n],
    )


def cta_ranges_of(spans, records: torch.Tensor) -> torch.Tensor:
    """cta_ranges (int32 [len(spans), 2 + record width]) of hand-written (begin, end) spans over
    `records` (a plan's cta_info rows): each row carries a copy of record begin, as the builder writes it,
    zeros when the span is empty or begin is outside records."""
    rows = []
    for begin, end in spans:
        inside = begin < end and 0 <= begin < records.shape[0]
        first = records[begin].tolist() if inside else [0] * records.shape[1]
        rows.append([begin, end, *first])
    return torch.tensor(rows, dtype=torch.int32, device=records.device)


def make_plan(case: Scene, variant, *, num_ctas=None, row_to_batch=True, starts=True) -> mx.MqaLogitsPlan:
    buffers = mx.plan_buffers(case.q.device, case.total_q, case.batch, variant, num_ctas=num_ctas)
    return mx.plan(
        case.cu_seq_q,
        case.local_ends,
        buffers=buffers,
        local_starts=case.local_starts if starts else None,
        row_to_batch=case.row_to_batch if row_to_batch else None,
    )


def run_op(case: Scene, variant, *, out=None, weight_scale=1.0, plan=None, weights=None, out_from_start=False,
           **plan_kwargs) -> torch.Tensor:  # fmt: skip
    plan = plan or make_plan(case, variant, **plan_kwargs)
    return mx.pa_mqa_logits_mxfp4(
        *case.inputs(weights),
        plan,
        case.max_seq_len,
        weight_scale=weight_scale,
        out=out,
        out_from_start=out_from_start,
    )


def from_window_starts(full: torch.Tensor, case: Scene, width: int) -> torch.Tensor:
    """What out_from_start writes into an out of `width` columns (-inf elsewhere), from the op's logits
    at their token columns `full`: row r's cells t of its window, cut at start + width, at column t - start."""
    want = torch.full((full.shape[0], width), float("-inf"), dtype=full.dtype, device=full.device)
    for r, (s, e) in enumerate(zip(case.local_starts.tolist(), case.local_ends.tolist())):
        lo, hi = max(s, 0), min(e, case.max_seq_len, s + width)
        if lo < hi:
            want[r, lo - s : hi - s] = full[r, lo:hi]
    return want


def reference(case: Scene, *, weight_scale=1.0, starts=True, weights=None) -> torch.Tensor:
    """mx.reference_logits evaluated on the CPU (fp32), returned on the case's device."""
    cpu = [t.cpu() for t in case.inputs(weights)]
    ref = mx.reference_logits(
        *cpu,
        case.local_ends.cpu(),
        case.max_seq_len,
        local_starts=case.local_starts.cpu() if starts else None,
        row_to_batch=case.row_to_batch.cpu(),
        weight_scale=weight_scale,
    )
    return ref.to(case.q.device)


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
