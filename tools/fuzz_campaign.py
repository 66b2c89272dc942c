"""A fuzz campaign of plan() and the op on one device's arch; the CI sanitizer job runs it against
the ASan/UBSan build of the cpu module (make sanitize):

    python tools/fuzz_campaign.py [--cases 10000] [--seed N] [--device cpu]
    MXLOGITS_EMULATE=gfx950 python tools/fuzz_campaign.py --cases 300   # an AMD body, through its emulation

Each case is a random plan over random inputs, on a random variant of the device's arch:
- contract-abiding ("legit"): ragged batches, pad rows (row_to_batch -1 or -2**31, extreme empty
  windows), causal, decode and offset windows, windows in any order, starts down to -2**31, random
  grids and weight scales, sometimes the checked mode, sometimes page ids outside the cache (their
  cells must be NaN, and the checked mode must refuse them), sometimes each row's cells written from
  its window start into an out of random width (out_from_start, on the arches that write it): every
  cell is compared with the fp32 reference;
- caller-contract violations (cu_seq_q going back or past total_q, a window on a row of no sequence,
  ends past max_seq_len up to 2**31 - 1): the checked mode must refuse each before writing, and the
  fast path must write nothing outside the windows;
- random raw schedules: forged records and CTA ranges of random int32 launched raw: nothing may be
  written outside the rows' windows.
`out` is a strided view inside a larger buffer of -inf, so a stray write past any edge shows. The
seed and the counts are printed; the exit status is 1 on a mismatch, a stray write or a wrong
verdict of the checked mode. A sanitizer report aborts the process before that."""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from collections import Counter

import mxlogits as mx
import torch
from mxlogits.build import sanitize_enabled
from mxlogits.ops import ops
from mxlogits.synthetic import Scene, make_scene

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
NEG_INF = float("-inf")
PAD = 8  # columns of the buffer left of out


# ---- random inputs ------------------------------------------------------------------------------


def windows_of(rng: random.Random, context: int, rows: int) -> list[tuple[int, int]]:
    """`rows` windows over `context` keys: causal, offset, or in any order (no order is a contract)."""
    if rng.random() < 0.4:
        return [(0, max(context - rows + j + 1, 1)) for j in range(rows)]
    ends = sorted(rng.randint(1, context) for _ in range(rows))
    starts = sorted(rng.randint(0, e - 1) for e in ends)
    if rows and starts[0] == 0 and rng.random() < 0.3:  # a negative start reads from 0
        starts[0] = rng.choice([-1, -rng.randint(1, 10**6), INT32_MIN])
    windows = list(zip(starts, ends))
    if rng.random() < 0.3:
        rng.shuffle(windows)
    return windows


class Pools:
    """Random MXFP4 keys in a fused page cache and query rows with weights, quantized once: a
    case's sequences take random pages of the cache and its rows random query rows (quantizing
    per case would cost more than the op and the reference together)."""

    PAGES, QUERIES = 16, 256

    def __init__(self, seed: int, device: str):
        pool = make_scene([self.PAGES * 64], [(0, 0, 1)] * self.QUERIES, device, seed=seed)
        self.kv_cache, self.kv_scale = pool.kv_cache, pool.kv_scale
        self.q, self.q_scale, self.weights = pool.q, pool.q_scale, pool.weights

    def scene(self, rng: random.Random, contexts: list[int], rows: list[tuple[int, int, int]], max_seq_len: int):
        """A Scene of the pooled data: make_scene's layout, with pages and query rows drawn at random."""
        device = self.q.device
        page = mx.manifest.manifest().page_size  # kv_cache.shape[1] is not it in the mfma_permuted layout
        width = mx.block_table_width(max_seq_len, device=device)
        table = [[rng.randrange(self.PAGES) for _ in range(-(-c // page))] + [0] * width for c in contexts]
        pick = torch.tensor([rng.randrange(self.QUERIES) for _ in rows], dtype=torch.long, device=device)
        counts = [sum(1 for b, _, _ in rows if b == s) for s in range(len(contexts))]
        i32 = lambda values: torch.tensor(values, dtype=torch.int32, device=device)
        return Scene(
            q=self.q[pick],
            q_scale=self.q_scale[pick],
            kv_cache=self.kv_cache,
            kv_scale=self.kv_scale,
            block_tables=i32([t[:width] for t in table]),
            weights=self.weights[pick],
            cu_seq_q=i32([0, *counts]).cumsum(0).to(torch.int32),
            local_starts=i32([s for _, s, _ in rows]),
            local_ends=i32([e for _, _, e in rows]),
            row_to_batch=i32([b for b, _, _ in rows]),
            max_seq_len=max_seq_len,
        )


def random_scene(rng: random.Random, pools: Pools) -> Scene:
    """A contract-abiding scene: sequences of 0 to 400 keys with 0 to 5 rows each, then pad rows."""
    contexts = [rng.choice([0, 1, rng.randint(1, 70), rng.randint(1, 400)]) for _ in range(rng.randint(1, 6))]
    rows = [(b, s, e) for b, ctx in enumerate(contexts) if ctx for s, e in windows_of(rng, ctx, rng.randint(0, 5))]
    pads = rng.choice([0, 0, 1, 3])
    empty = [(0, 0), (5, 5), (INT32_MAX, INT32_MIN), (100, 3), (INT32_MIN, INT32_MIN)]
    rows += [(-1, *rng.choice(empty)) for _ in range(pads)]
    scene = pools.scene(rng, contexts, rows, max(contexts) + rng.randint(0, 9))
    if pads and rng.random() < 0.5:
        scene.row_to_batch[-pads:] = INT32_MIN
    return scene


def row_to_batch_needed(scene: Scene, variant) -> bool:
    """Whether plan() needs row_to_batch for the scene's meaning: at q_per_block 1 without it, row r
    reads block_tables row r, which only a decode step of one row per sequence, in order, means."""
    identity = scene.total_q == scene.batch and scene.row_to_batch.tolist() == list(range(scene.total_q))
    return variant.q_per_block == 1 and not identity


def plan_of(scene: Scene, variant, rng: random.Random, with_rtb: bool, validate: bool) -> mx.MqaLogitsPlan:
    num_ctas = rng.choice([None, 1, 2, 3, rng.randint(1, 300)])
    buffers = mx.plan_buffers(scene.q.device, scene.total_q, scene.batch, variant, num_ctas=num_ctas)
    return mx.plan(
        scene.cu_seq_q,
        scene.local_ends,
        buffers=buffers,
        local_starts=scene.local_starts,
        row_to_batch=scene.row_to_batch if with_rtb else None,
        validate=validate,
    )


def framed_out(scene: Scene, rng: random.Random, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(buffer, out): out is [total_q + 0..2, max_seq_len + 0..8] (or `width` columns) inside a buffer of
    -inf, PAD columns in from the left and at least one row and PAD columns short of its other edges."""
    rows = scene.total_q + rng.randint(0, 2)
    cols = scene.max_seq_len + rng.randint(0, 8) if width is None else width
    buffer = torch.full((rows + 1, cols + 2 * PAD), NEG_INF, device=scene.q.device)
    return buffer, buffer[:rows, PAD : PAD + cols]


def cells(scene: Scene, max_seq_len: int, width: int | None = None):
    """(row, first token, end token, first column) of each row's written cells: tokens [max(s, 0),
    min(e, max_seq_len)) at their own columns, or (width: out_from_start) cut at s + width, at column t - s."""
    for r, (s, e) in enumerate(zip(scene.local_starts.tolist(), scene.local_ends.tolist())):
        lo, hi = max(s, 0), min(e, max_seq_len) if width is None else min(e, max_seq_len, s + width)
        if lo < hi:
            yield r, lo, hi, lo if width is None else lo - s


def window_mask(buffer: torch.Tensor, scene: Scene, max_seq_len: int, width: int | None = None) -> torch.Tensor:
    """The buffer's cells a launch may write (cells)."""
    mask = torch.zeros(buffer.shape, dtype=torch.bool)
    for r, lo, hi, col in cells(scene, max_seq_len, width):
        mask[r, PAD + col : PAD + col + hi - lo] = True
    return mask


def poison_pages(rng: random.Random, scene: Scene) -> list[tuple[int, int]]:
    """Page ids outside the cache in a few block_tables cells; returns those (sequence, column)."""
    bt, num_pages = scene.block_tables, scene.kv_cache.shape[0]
    cells = [(rng.randrange(bt.shape[0]), rng.randrange(bt.shape[1])) for _ in range(rng.randint(1, 3))]
    for b, col in cells:
        bt[b, col] = rng.choice([num_pages, num_pages + rng.randint(1, 10**6), -1, INT32_MAX, INT32_MIN])
    return cells


def expected(scene: Scene, poisoned: list[tuple[int, int]], shape, weight_scale: float,
             width: int | None = None) -> torch.Tensor:  # fmt: skip
    """The buffer as it should end: -inf, the reference inside the windows (at the columns of cells),
    NaN for the tokens of poisoned pages."""
    page = mx.manifest.manifest().page_size
    table = scene.block_tables.cpu().clone()
    for b, col in poisoned:
        table[b, col] = 0
    rtb = scene.row_to_batch.cpu()
    q, q_scale, kv_cache, kv_scale, _, weights = (t.cpu() for t in scene.inputs())
    ref = mx.reference_logits(
        q, q_scale, kv_cache, kv_scale, table, weights, scene.local_ends.cpu(), scene.max_seq_len,
        local_starts=scene.local_starts.cpu(), row_to_batch=rtb, weight_scale=weight_scale,
    )
    for b, col in poisoned:
        for r in (rtb == b).nonzero().flatten().tolist():
            s = max(int(scene.local_starts[r]), col * page)
            e = min(int(scene.local_ends[r]), (col + 1) * page, scene.max_seq_len)
            if s < e:
                ref[r, s:e] = float("nan")
    want = torch.full(shape, NEG_INF)
    for r, lo, hi, col in cells(scene, scene.max_seq_len, width):
        want[r, PAD + col : PAD + col + hi - lo] = ref[r, lo:hi]
    return want


# ---- verdicts ---------------------------------------------------------------------------------


class Tally:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.failures: list[str] = []

    def fail(self, case: int, what: str) -> None:
        self.failures.append(f"case {case}: {what}")

    def stray(self, case: int, buffer: torch.Tensor, mask: torch.Tensor) -> None:
        """Cells outside the windows that are no longer -inf."""
        written = ~torch.isneginf(buffer.cpu()) & ~mask
        self.counts["cells checked for stray writes"] += int((~mask).sum())
        if written.any():
            self.counts["writes outside windows"] += int(written.sum())
            self.fail(case, f"{int(written.sum())} cells outside the windows written")

    def compare(self, case: int, buffer: torch.Tensor, want: torch.Tensor, variant) -> None:
        got = buffer.cpu()
        inside = ~torch.isneginf(want)
        g, w = got[inside], want[inside]
        atol, rtol = mx.tolerance(variant)
        far = (g - w).abs().nan_to_num(0.0) > atol + rtol * w.abs().nan_to_num(0.0)
        bad = (torch.isnan(g) != torch.isnan(w)) | far
        self.counts["cells compared with the reference"] += int(inside.sum())
        self.counts["NaN cells (pages outside the cache)"] += int(torch.isnan(w).sum())
        if bad.any():
            self.counts["mismatches"] += int(bad.sum())
            self.fail(case, f"{int(bad.sum())} cells differ from the reference")

    def refused(self, case: int, what: str, run) -> None:
        """run() must raise the checked mode's ValueError naming block_tables, a window or cu_seq_q."""
        try:
            run()
        except ValueError as e:
            self.counts["refused by the checked mode"] += 1
            if "mxlogits: " not in str(e):
                self.fail(case, f"{what}: refused with a foreign error: {e}")
            return
        self.fail(case, f"{what}: the checked mode let it through")


# ---- the three kinds of case ------------------------------------------------------------------


def legit_case(case: int, rng: random.Random, variant, pools: Pools, tally: Tally) -> None:
    scene = random_scene(rng, pools)
    with_rtb = row_to_batch_needed(scene, variant) or rng.random() < 0.5
    validate = rng.random() < 0.2
    p = plan_of(scene, variant, rng, with_rtb, validate)
    poisoned = poison_pages(rng, scene) if rng.random() < 0.15 and scene.block_tables.shape[1] else []
    weight_scale = rng.choice([1.0, 1.0, -0.5, 3.0])
    from_start = writes_from_start(variant) and rng.random() < 0.2
    width = rng.randint(1, scene.max_seq_len + 8) if from_start else None
    buffer, out = framed_out(scene, rng, width)
    want = expected(scene, poisoned, buffer.shape, weight_scale, width)
    tally.counts["legit"] += 1
    tally.counts["legit with pages outside the cache"] += bool(poisoned)
    tally.counts["legit from each window start"] += from_start
    # the checked mode judges the windows as given: a cut window (out_from_start) still schedules its pages
    uncut = want if width is None else expected(scene, poisoned, (buffer.shape[0], scene.max_seq_len + 2 * PAD), 1.0)
    reads_poison = bool(torch.isnan(uncut).any())
    launch = lambda: mx.pa_mqa_logits_mxfp4(*scene.inputs(), p, scene.max_seq_len, weight_scale=weight_scale, out=out,
                                            out_from_start=from_start)  # fmt: skip
    if validate and reads_poison:
        tally.refused(case, "a page id outside the cache that a window reads", launch)
        tally.stray(case, buffer, torch.zeros(buffer.shape, dtype=torch.bool))
        return
    launch()
    tally.counts["passed the checked mode"] += validate
    tally.compare(case, buffer, want, variant)
    tally.stray(case, buffer, window_mask(buffer, scene, scene.max_seq_len, width))


def writes_from_start(variant) -> bool:
    """Whether the variant's body writes out_from_start (its arch's out_forms, instances.yaml)."""
    return "from_start" in mx.manifest.manifest().arches[variant.arch].out_forms


def break_contract(rng: random.Random, scene: Scene, variant) -> str | None:
    """Break one caller contract in `scene` (in place); returns what, or None if it has no room."""
    starts, ends = scene.local_starts.tolist(), scene.local_ends.tolist()
    live = [r for r in range(scene.total_q) if ends[r] > max(starts[r], 0)]
    cu = scene.cu_seq_q
    kinds = []
    if variant.q_per_block > 1:
        kinds += ["cu_seq_q past total_q"] + (["cu_seq_q going back"] if cu.numel() > 2 else [])
    if live:
        kinds += ["a window on a row of no sequence", "an end past max_seq_len"]
    if not kinds:
        return None
    kind = rng.choice(kinds)
    if kind == "cu_seq_q past total_q":
        cu[-1] = scene.total_q + rng.randint(1, 50)
    elif kind == "cu_seq_q going back":
        b = rng.randrange(1, cu.numel() - 1)
        cu[b] = cu[b + 1] + rng.randint(1, 5)
    elif kind == "a window on a row of no sequence":
        scene.row_to_batch[rng.choice(live)] = rng.choice([-1, INT32_MIN, scene.batch])
    else:
        scene.local_ends[rng.choice(live)] = rng.choice([scene.max_seq_len + 1, INT32_MAX])
    return kind


def violation_case(case: int, rng: random.Random, variant, pools: Pools, tally: Tally) -> None:
    scene = random_scene(rng, pools)
    kind = break_contract(rng, scene, variant)
    if kind is None:
        return legit_case(case, rng, variant, pools, tally)
    tally.counts["contract violations"] += 1
    with_rtb = kind == "a window on a row of no sequence" or row_to_batch_needed(scene, variant) or rng.random() < 0.5
    buffer, out = framed_out(scene, rng)

    def checked():
        p = plan_of(scene, variant, rng, with_rtb, True)
        mx.pa_mqa_logits_mxfp4(*scene.inputs(), p, scene.max_seq_len, out=out)

    tally.refused(case, kind, checked)
    tally.stray(case, buffer, torch.zeros(buffer.shape, dtype=torch.bool))
    p = plan_of(scene, variant, rng, with_rtb, False)
    mx.pa_mqa_logits_mxfp4(*scene.inputs(), p, scene.max_seq_len, out=out)
    tally.stray(case, buffer, window_mask(buffer, scene, scene.max_seq_len))


def forged_case(case: int, rng: random.Random, variant, pools: Pools, tally: Tally) -> None:
    scene = random_scene(rng, pools)
    p = plan_of(scene, variant, rng, True, False)
    chunks = scene.max_seq_len // variant.block_k + 2

    def field(plausible: int) -> int:
        return rng.choice([plausible, plausible, rng.randint(INT32_MIN, INT32_MAX), INT32_MAX, INT32_MIN, -1])

    records = [
        [
            field(rng.randrange(scene.total_q + 2)),
            field(rng.randint(0, variant.q_per_block + 2)),
            field(rng.randint(-1, scene.batch)),
            field(rng.randrange(chunks)),
            field(rng.randint(0, 4)),
            field(rng.randint(-5, scene.max_seq_len)),
            field(rng.randint(0, scene.max_seq_len + 100)),
        ]
        for _ in range(rng.randint(1, 48))
    ]
    spans = [(field(rng.randint(-2, len(records))), field(rng.randint(0, len(records) + 2))) for _ in range(8)]
    # Each range's first-record copy: record begin's where begin names one, sometimes forged.
    ranges = [
        [b, e, *(records[b] if 0 <= b < len(records) and rng.random() < 0.8 else [field(0) for _ in records[0]])]
        for b, e in spans
    ]
    i32 = lambda v: torch.tensor(v, dtype=torch.int32, device=scene.q.device)
    from_start = writes_from_start(variant) and rng.random() < 0.2
    width = rng.randint(1, scene.max_seq_len + 8) if from_start else None
    buffer, out = framed_out(scene, rng, width)
    ops(variant.arch, scene.q.device).pa_mqa_logits_mxfp4(
        **scene.named_inputs(),
        cta_info=i32(records), cta_ranges=i32(ranges), local_ends=p.local_ends, local_starts=p.local_starts, out=out,
        num_rows=p.num_rows, max_seq_len=scene.max_seq_len, weight_scale=1.0, out_from_start=from_start,
        q_per_block=variant.q_per_block, block_k=variant.block_k,
    )  # fmt: skip
    tally.counts["forged schedules"] += 1
    tally.counts["forged records"] += len(records)
    tally.stray(case, buffer, window_mask(buffer, scene, scene.max_seq_len, width))


# ---- the campaign ---------------------------------------------------------------------------------


def sanitized_module(arch: str, device: str) -> str:
    """The module of `arch` on `device` (a GPU arch on CPU tensors: its host emulation), checked to carry
    ASan when MXLOGITS_SANITIZE=1 asks for it."""
    library = str(mx.built_library(arch, emulated=torch.device(device).type == "cpu" and arch != "cpu"))
    if sanitize_enabled():
        symbols = subprocess.run(["nm", "-D", library], capture_output=True, text=True, check=True).stdout
        if "__asan_" not in symbols or "__ubsan_" not in symbols:
            raise SystemExit(f"fuzz campaign: MXLOGITS_SANITIZE=1 but {library} carries no ASan/UBSan symbols")
    return library


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=None, help="default: from the clock (printed first)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else time.time_ns() % 2**31
    arch = mx.arch_of(args.device)
    print(f"fuzz campaign: seed {seed}, {args.cases} cases on {args.device} (arch {arch})", flush=True)
    print(f"module: {sanitized_module(arch, args.device)}" + (" (ASan + UBSan)" if sanitize_enabled() else ""), flush=True)
    rng, tally, started = random.Random(seed), Tally(), time.monotonic()
    pools = Pools(seed, args.device)
    kinds = [(legit_case, 0.6), (violation_case, 0.25), (forged_case, 0.15)]
    for case in range(args.cases):
        variant = rng.choice(mx.variants(arch))
        run = rng.choices([k for k, _ in kinds], weights=[w for _, w in kinds])[0]
        run(case, rng, variant, pools, tally)
        tally.counts[f"cases of {variant.name}"] += 1
    counts = tally.counts
    for name in ("writes outside windows", "mismatches"):
        counts.setdefault(name, 0)
    print(f"{args.cases} cases in {time.monotonic() - started:.0f} s, seed {seed}:")
    for name, n in sorted(counts.items()):
        print(f"  {name:40} {n}")
    if sanitize_enabled():
        print(f"  {'sanitizer reports':40} 0 (a report aborts the process)")
    for failure in tally.failures[:20]:
        print(f"FAIL {failure}", file=sys.stderr)
    if tally.failures:
        print(f"FAIL: {len(tally.failures)} failing cases; rerun with --seed {seed}", file=sys.stderr)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
