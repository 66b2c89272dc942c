"""The schedule of docs/schedule.md written independently of the builder: the tile model, the expectations every plan's
records must meet, and random plan specs. Shared by tests/runtime/test_schedule.py,
tests/device/test_gpu.py and tools/racecheck_schedule.py."""

from __future__ import annotations

import random
from collections import Counter

import mxlogits as mx
import torch
from mxlogits.manifest import manifest


def model_tiles(num_rows, batch, qpb, bk, cu, starts, ends, rtb):
    """The tiles of docs/schedule.md: [(row0, rows, batch, start, end, first_chunk, chunks)] of the non-empty ones."""
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


def random_plan(rng: random.Random, variant, num_rows: int | None = None):
    """(num_rows, batch, cu, starts, ends, rtb, num_ctas): a random, contract-abiding plan input
    for `variant`'s q_per_block (of `num_rows` rows when given), with empty windows, negative starts,
    pad rows and over-claiming cu_seq_q tails."""
    qpb = variant.q_per_block
    if num_rows is None:
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


def build_plan(variant, device, num_rows, batch, cu, starts, ends, rtb, num_ctas) -> mx.MqaLogitsPlan:
    """mx.plan of a random_plan spec on `device` (local_starts passed only when some start is non-zero)."""
    i32 = lambda v: torch.tensor(v, dtype=torch.int32, device=device)
    buffers = mx.plan_buffers(device, num_rows, batch, variant, num_ctas=num_ctas)
    return mx.plan(
        i32(cu) if cu is not None else None,
        i32(ends),
        buffers=buffers,
        local_starts=i32(starts) if any(s != 0 for s in starts) else None,
        row_to_batch=i32(rtb) if rtb is not None else None,
    )


def setup_chunks(variant) -> int:
    """docs/schedule.md: a tile's setup weighs as much as the instance's setup_tokens of its window."""
    return -(-manifest().setup_tokens[variant] // variant.block_k)


def total_weight(variant, tiles) -> int:
    """Units the split divides: every non-empty tile's chunks plus its setup."""
    return sum(t[6] + setup_chunks(variant) for t in tiles)


def check_records(variant, num_ctas, records, ranges, num_rows, batch, cu, starts, ends, rtb) -> None:
    """Assert that the schedule (records, ranges: lists of int rows) is one docs/schedule.md allows for the
    spec: every in-window chunk of every tile covered exactly once by records naming the tile,
    a fair share of the weight per CTA, empty slots empty, each range carrying its first record."""
    seq_batch = len(cu) - 1 if cu is not None else batch
    tiles = model_tiles(num_rows, seq_batch, variant.q_per_block, variant.block_k, cu, starts, ends, rtb)
    total = total_weight(variant, tiles)

    by_row = {t[0]: t for t in tiles}
    covered = Counter()
    owned = set()
    for c, (begin, end, *first) in enumerate(ranges):
        assert 0 <= begin <= end <= len(records)
        assert first == (records[begin] if end > begin else [0] * len(first)), f"CTA {c}: first record {first}"
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
            # A record starting at its tile's first chunk carries the tile's setup units too.
            load += count + (setup_chunks(variant) if chunk0 == tile[5] else 0)
        # A fair share for every CTA, however long one window is (a setup may sit in the share
        # of the CTA before the one taking the tile's first chunk).
        assert load <= -(-total // num_ctas) + setup_chunks(variant) + 1
    want = Counter((t[0], k) for t in tiles for k in range(t[5], t[5] + t[6]))
    assert covered == want
    # Slots with nothing to do are empty.
    for j, rec in enumerate(records):
        if j not in owned:
            assert rec[4] == 0, f"record {j} belongs to no CTA but holds chunks"
    spans = [(b, e) for b, e, *_ in ranges]
    assert sum(1 for b, e in spans if e > b) == min(num_ctas, total) if total else all(b == e for b, e in spans)


def host_twin(variant) -> mx.MqaLogitsVariant | None:
    """The cpu variant with `variant`'s (q_per_block, block_k) and setup weight, whose host builder
    must produce bit-identical records at the same grid; None if the cpu arch compiles none."""
    key = (variant.q_per_block, variant.block_k, setup_chunks(variant))
    return next((v for v in mx.variants("cpu") if (v.q_per_block, v.block_k, setup_chunks(v)) == key), None)


def compare_with_host(variant, specs, device="cuda") -> int:
    """Build every spec on `device` with `variant` (all launches first, one synchronization), then
    check each schedule: bit-exact against the cpu builder of host_twin(variant) at the same grid,
    or, without a twin, against check_records. Returns how many plans were compared."""
    twin = host_twin(variant)
    specs = [(*spec[:-1], spec[-1] or variant.cta_resident) for spec in specs]  # one grid for both builders
    plans = [build_plan(variant, device, *spec) for spec in specs]
    info = torch.cat([p.buffers.cta_info for p in plans]).cpu()  # one synchronization
    ranges = torch.cat([p.buffers.cta_ranges for p in plans]).cpu()
    if twin is None:
        i = r = 0
        for spec, p in zip(specs, plans):
            n_info, n_ranges = p.buffers.cta_info.shape[0], p.buffers.cta_ranges.shape[0]
            assert n_ranges == spec[-1]
            records, cta_ranges = info[i : i + n_info].tolist(), ranges[r : r + n_ranges].tolist()
            check_records(variant, n_ranges, records, cta_ranges, *spec[:-1])
            i, r = i + n_info, r + n_ranges
        return len(plans)
    with mx.emulate(None):  # the cpu arch's builder, also while the test emulates an AMD arch
        host = [build_plan(twin, "cpu", *spec) for spec in specs]
    if torch.equal(info, torch.cat([p.buffers.cta_info for p in host])) and torch.equal(
        ranges, torch.cat([p.buffers.cta_ranges for p in host])
    ):
        return len(plans)
    for k, (spec, p, h) in enumerate(zip(specs, plans, host)):  # name the first plan that differs
        what = f"plan {k} of {variant.name} (num_rows {spec[0]}, batch {spec[1]}, num_ctas {spec[-1]})"
        assert p.buffers.cta_info.shape == h.buffers.cta_info.shape, f"{what}: cta_info shapes differ"
        assert torch.equal(p.buffers.cta_info.cpu(), h.buffers.cta_info), f"{what}: cta_info differs"
        assert torch.equal(p.buffers.cta_ranges.cpu(), h.buffers.cta_ranges), f"{what}: cta_ranges differs"
    raise AssertionError("concatenated schedules differ, but no single plan does")
