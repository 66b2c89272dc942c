"""Property tests of the schedule (SPEC §4) over thousands of random plans, against an
independent model of tiles and chunks written from the spec."""

from __future__ import annotations

import random
from collections import Counter

import mxlogits as mx
import pytest
import torch
from conftest import CPU_VARIANTS, variant_id


def model_tiles(num_rows, batch, qpb, bk, cu, starts, ends, rtb):
    """SPEC §4 tiles: [(row0, rows, batch, start, end, first_chunk, chunks)] of the non-empty ones."""
    if qpb == 1:
        spans = [(r, r + 1, r) for r in range(num_rows)]
    else:
        clamp = [min(max(c, 0), num_rows) for c in cu]
        spans = []
        for b in range(batch):
            lo, hi = clamp[b], clamp[b + 1]
            spans += [(r, min(r + qpb, hi), b) for r in range(lo, hi, qpb)]
    tiles = []
    for r0, r1, seq in spans:
        windows = [(max(starts[r], 0), ends[r]) for r in range(r0, r1) if ends[r] > max(starts[r], 0)]
        if not windows:
            continue
        b = rtb[r0] if rtb is not None else seq
        if not 0 <= b < batch:
            continue
        s, e = min(w[0] for w in windows), max(w[1] for w in windows)
        tiles.append((r0, r1 - r0, b, s, e, s // bk, -(-e // bk) - s // bk))
    return tiles


def random_plan(rng: random.Random, variant):
    qpb = variant.q_per_block
    num_rows = rng.choice([0, 1, 2, rng.randint(1, 40), rng.randint(1, 300)])
    with_rtb = qpb > 1 and rng.random() < 0.5 or qpb == 1 and rng.random() < 0.7
    batch = rng.randint(1, 24) if qpb > 1 or with_rtb else num_rows + rng.randint(0, 3)
    if qpb > 1:
        cuts = sorted(rng.randint(0, num_rows) for _ in range(batch - 1))
        cu = [0, *cuts, num_rows if rng.random() < 0.8 else num_rows + rng.randint(1, 20)]  # may over-claim
    else:
        cu = None
    scale = rng.choice([10, 300, 5000, 40000])
    starts, ends, rtb = [], [], []
    for r in range(num_rows):
        s = rng.randint(0, scale)
        e = s + rng.randint(1, scale) if rng.random() < 0.85 else s - rng.randint(0, 3)  # some empty
        if rng.random() < 0.1:
            s = -rng.randint(1, 5)  # negative starts read from 0
        starts.append(s)
        ends.append(e)
        rtb.append(rng.randint(0, batch - 1) if e > max(s, 0) else rng.choice([-1, 0]))
    num_ctas = rng.choice([None, 1, 2, rng.randint(1, 64), rng.randint(64, 700)])
    return num_rows, batch, cu, starts, ends, (rtb if with_rtb else None), num_ctas


def check_plan(variant, num_rows, batch, cu, starts, ends, rtb, num_ctas):
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)
    use_starts = any(s != 0 for s in starts)
    buffers = mx.plan_buffers("cpu", num_rows, batch, variant, num_ctas=num_ctas)
    n_ctas = buffers.num_ctas
    assert n_ctas == (num_ctas or variant.cta_resident)
    p = mx.plan(
        i32(cu) if cu is not None else None,
        i32(ends),
        buffers=buffers,
        local_starts=i32(starts) if use_starts else None,
        row_to_batch=i32(rtb) if rtb is not None else None,
    )
    seq_batch = len(cu) - 1 if cu is not None else batch
    tiles = model_tiles(
        num_rows,
        seq_batch,
        variant.q_per_block,
        variant.block_k,
        cu,
        starts if use_starts else [0] * num_rows,
        ends,
        rtb,
    )
    records = p.buffers.cta_info.tolist()
    ranges = p.buffers.cta_ranges.tolist()
    total = sum(t[6] for t in tiles)

    # Every in-window chunk of every tile is covered exactly once, by records that name the tile.
    by_row = {t[0]: t for t in tiles}
    covered = Counter()
    owned = set()
    for c, (begin, end) in enumerate(ranges):
        assert 0 <= begin <= end <= len(records)
        load = 0
        for j in range(begin, end):
            owned.add(j)
            row0, rows, b, chunk0, count, s, e = records[j]
            if count == 0:
                continue
            assert row0 in by_row, f"record {j} names row {row0}, which heads no non-empty tile"
            assert (row0, rows, b, s, e) == by_row[row0][:5]
            tile = by_row[row0]
            assert tile[5] <= chunk0 and chunk0 + count <= tile[5] + tile[6]
            assert row0 + rows <= num_rows  # the row guard never has to fire on a real plan
            covered.update((row0, k) for k in range(chunk0, chunk0 + count))
            load += count
        # A fair share for every CTA, however long one window is.
        assert load <= -(-total // n_ctas) + 1
    want = Counter((t[0], k) for t in tiles for k in range(t[5], t[5] + t[6]))
    assert covered == want
    # Slots with nothing to do are empty.
    for j, rec in enumerate(records):
        if j not in owned:
            assert rec[4] == 0, f"record {j} belongs to no CTA but holds chunks"
    assert sum(1 for b, e in ranges if e > b) == min(n_ctas, total) if total else all(b == e for b, e in ranges)


@pytest.mark.parametrize("variant", CPU_VARIANTS, ids=variant_id)
def test_random_plans(variant):
    rng = random.Random(1234 + variant.q_per_block * 10 + variant.block_k)
    for _ in range(600):
        check_plan(variant, *random_plan(rng, variant))


@pytest.mark.parametrize("variant", CPU_VARIANTS, ids=variant_id)
def test_grid_never_runs_out_of_room_to_split(variant):
    """Upstream's grid cliff: rows == cta_resident (or 2 r - 1) with 16 long windows left no
    spare slot. Here the long windows are cut over the whole grid at any row count."""
    r = variant.cta_resident
    for rows in (r, 2 * r - 1, 2 * r):
        ends = [25000 if i % (rows // 16) == 0 else 100 for i in range(rows)]
        cu = list(range(0, rows + 1, 1)) if variant.q_per_block > 1 else None
        check_plan(variant, rows, rows, cu, [0] * rows, ends, list(range(rows)), None)
        buffers = mx.plan_buffers("cpu", rows, rows, variant)
        p = mx.plan(
            torch.tensor(cu, dtype=torch.int32) if cu else None,
            torch.tensor(ends, dtype=torch.int32),
            buffers=buffers,
            row_to_batch=torch.arange(rows, dtype=torch.int32),
        )
        counts = p.buffers.cta_info[:, 4]
        total = int(counts.sum())
        per_cta = [int(counts[b:e].sum()) for b, e in p.buffers.cta_ranges.tolist()]
        assert max(per_cta) <= -(-total // buffers.num_ctas)


def test_identity_cut_reads_no_cu_seq_q_and_schedules_every_row():
    """q_per_block 1: tile t is row t, cu_seq_q is not read (None is fine) and no cu_tiles
    buffer exists; rows past cu_seq_q's total are still scheduled."""
    v = next(v for v in CPU_VARIANTS if v.q_per_block == 1)
    buffers = mx.plan_buffers("cpu", 5, 5, v)
    assert buffers.scratch.numel() == 5 + 1  # the chunk prefix only
    ends = torch.tensor([64, 0, 1, 200, 70], dtype=torch.int32)
    p = mx.plan(None, ends, buffers=buffers)
    rows = {rec[0] for rec in p.buffers.cta_info.tolist() if rec[4] > 0}
    assert rows == {0, 2, 3, 4}


def test_over_claiming_cu_seq_q_is_clamped_to_total_q():
    """Contract 4 broken (cu_seq_q[batch] > total_q): the builder still schedules no row past total_q."""
    v = next(v for v in CPU_VARIANTS if v.q_per_block > 1)
    buffers = mx.plan_buffers("cpu", 10, 2, v)
    p = mx.plan(torch.tensor([0, 6, 14], dtype=torch.int32), torch.full((10,), 500, dtype=torch.int32), buffers=buffers)
    recs = [r for r in p.buffers.cta_info.tolist() if r[4] > 0]
    assert recs and max(r[0] + r[1] for r in recs) == 10
