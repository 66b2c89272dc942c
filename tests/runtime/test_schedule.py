"""Property tests of the schedule (docs/schedule.md) over thousands of random plans, against an
independent model of tiles and chunks written from the spec (schedule_model.py), on every
variant of every arch present."""

from __future__ import annotations

import random

import mxlogits as mx
import torch
from support.params import device_of, variant_with
from support.schedule_model import build_plan, check_records, random_plan, setup_chunks


def check_plan(variant, num_rows, batch, cu, starts, ends, rtb, num_ctas):
    """Build the plan on the variant's device and check its records against the model."""
    p = build_plan(variant, device_of(variant), num_rows, batch, cu, starts, ends, rtb, num_ctas)
    n_ctas = p.buffers.num_ctas
    assert n_ctas == (num_ctas or variant.cta_resident)
    records, ranges = p.buffers.cta_info.tolist(), p.buffers.cta_ranges.tolist()
    check_records(variant, n_ctas, records, ranges, num_rows, batch, cu, starts, ends, rtb)
    return p


def test_random_plans(variant):
    rng = random.Random(1234 + variant.q_per_block * 10 + variant.block_k)
    for _ in range(600):
        check_plan(variant, *random_plan(rng, variant))


def test_setup_weight_places_the_split(variant):
    """The split divides exactly the units docs/schedule.md names: a tile of one chunk, then one
    of 40, over 5 CTAs; each CTA's chunks of the long tile are its units past both tiles' setups
    (the weight differs by q_per_block, so a builder with the wrong one moves every cut)."""
    q, bk, setup, n = variant.q_per_block, variant.block_k, setup_chunks(variant), 5
    long_chunks = 40
    rows = 2 * q
    ends = [bk] * q + [long_chunks * bk] * q
    cu = [0, q, 2 * q] if q > 1 else None
    p = check_plan(variant, rows, 2, cu, [0] * rows, ends, None, n)
    total = (1 + setup) + (long_chunks + setup)
    first = [c * (total // n) + c * (total % n) // n for c in range(n + 1)]
    records = p.buffers.cta_info.tolist()
    for c, (begin, end, *_) in enumerate(p.buffers.cta_ranges.tolist()):
        got = sum(r[4] for r in records[begin:end] if r[0] == q)
        want = max(0, first[c + 1] - max(first[c], 1 + 2 * setup))
        assert got == want, f"CTA {c}: {got} chunks of the long tile, the units say {want}"


def test_grid_never_runs_out_of_room_to_split(variant):
    """Upstream's grid cliff: rows == cta_resident (or 2 r - 1) with 16 long windows left no
    spare slot. Here the long windows are cut over the whole grid at any row count."""
    r = variant.cta_resident
    for rows in (r, 2 * r - 1, 2 * r):
        ends = [25000 if i % (rows // 16) == 0 else 100 for i in range(rows)]
        cu = list(range(0, rows + 1, 1)) if variant.q_per_block > 1 else None
        p = check_plan(variant, rows, rows, cu, [0] * rows, ends, list(range(rows)), None)
        counts = p.buffers.cta_info[:, 4]
        total = int(counts.sum()) + rows * setup_chunks(variant)
        per_cta = [int(counts[b:e].sum()) for b, e, *_ in p.buffers.cta_ranges.tolist()]
        assert max(per_cta) <= -(-total // p.buffers.num_ctas)


def test_identity_cut_reads_no_cu_seq_q_and_schedules_every_row(arch):
    """q_per_block 1: tile t is row t, cu_seq_q is not read (None is fine) and no cu_tiles
    buffer exists; rows past cu_seq_q's total are still scheduled."""
    v = variant_with(arch, lambda v: v.q_per_block == 1, "q_per_block 1")
    buffers = mx.plan_buffers(device_of(arch), 5, 5, v)
    assert buffers.scratch.numel() == (5 + 1) + (buffers.num_ctas + 1) + buffers.num_ctas  # weight prefix, CTA table
    ends = torch.tensor([64, 0, 1, 200, 70], dtype=torch.int32, device=device_of(arch))
    p = mx.plan(None, ends, buffers=buffers)
    rows = {rec[0] for rec in p.buffers.cta_info.tolist() if rec[4] > 0}
    assert rows == {0, 2, 3, 4}


def test_over_claiming_cu_seq_q_is_clamped_to_total_q(arch):
    """Contract 3 broken (cu_seq_q[batch] > total_q): the builder still schedules no row past total_q."""
    v = variant_with(arch, lambda v: v.q_per_block > 1, "q_per_block > 1")
    dev = device_of(arch)
    buffers = mx.plan_buffers(dev, 10, 2, v)
    cu = torch.tensor([0, 6, 14], dtype=torch.int32, device=dev)
    p = mx.plan(cu, torch.full((10,), 500, dtype=torch.int32, device=dev), buffers=buffers)
    recs = [r for r in p.buffers.cta_info.tolist() if r[4] > 0]
    assert recs and max(r[0] + r[1] for r in recs) == 10
