"""Launches for compute-sanitizer's memcheck, on every variant of the GPU's arch:

    compute-sanitizer --tool memcheck python tools/memcheck_cases.py

Legitimate cases (checked against the fp32 reference; a mismatch is a FAIL and exit status 1):
the op corner cases of tests/support/op_cases.py (also written from each window start into a
narrow out, out_from_start), the exact path's scenes on one CTA, and a raw launch of a schedule
planned for more rows than the q/out tensors hold (num_rows smaller than the plan: the kernel drops
the records past it).
Hostile cases (memcheck's verdict is what matters; they must still leave every cell outside the
rows' windows untouched, docs/semantics.md, else FAIL): a schedule built by another variant, and forged
records (random int32, huge and negative) with random CTA ranges. The op on compact schedules, legitimate
(checked) and forged (hostile). Without a GPU arch of the
instance table this prints "no GPU arch present" and exits 0."""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the suite's support package

import mxlogits as mx  # noqa: E402
import torch  # noqa: E402
from support.cases import (  # noqa: E402
    assert_matches, decode_scene, first_rows, from_window_starts, make_case, make_plan, ops_of, reference, run_op,
)  # fmt: skip
from support.op_cases import corner_cases as op_corner_cases  # noqa: E402
from support.op_cases import far_apart_case  # noqa: E402
from support.params import GPU_ARCH, GPU_VARIANTS  # noqa: E402

INT32 = (-(2**31), 2**31)
DEVICE = "cuda"
failures = 0


def report(ok: bool, what: str, detail: str = "") -> None:
    global failures
    failures += not ok
    print(f"{'PASS' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)


def checked(what: str, fn) -> None:
    try:
        fn()
    except (AssertionError, RuntimeError) as e:
        report(False, what, str(e).splitlines()[0] if str(e) else type(e).__name__)
    else:
        report(True, what)


def neg_inf(case, rows=None) -> torch.Tensor:
    return torch.full((rows or case.total_q, case.max_seq_len), float("-inf"), device=DEVICE)


def raw_launch(case, variant, out, cta_info, cta_ranges, num_rows) -> None:
    """torch.ops.mxlogits_<arch>.pa_mqa_logits_mxfp4 with a schedule of the caller's choosing."""
    ops_of(variant.arch).pa_mqa_logits_mxfp4(
        **case.named_inputs(),
        cta_info=cta_info,
        cta_ranges=cta_ranges,
        local_ends=case.local_ends,
        local_starts=case.local_starts,
        out=out,
        num_rows=num_rows,
        max_seq_len=case.max_seq_len,
        weight_scale=1.0,
        out_from_start=False,
        q_per_block=variant.q_per_block,
        block_k=variant.block_k,
    )
    if out.is_cuda:
        torch.cuda.synchronize()  # memcheck reports land on this case


def assert_outside_windows_untouched(case, out) -> None:
    inside = torch.zeros(out.shape, dtype=torch.bool)
    for r, (s, e) in enumerate(zip(case.local_starts.tolist(), case.local_ends.tolist())):
        inside[r, max(s, 0) : max(e, 0)] = True
    written = int((out.cpu()[~inside] != float("-inf")).sum())
    assert written == 0, f"{written} cells outside the windows were written"


def corner_cases(v) -> None:
    for name, (contexts, rows) in sorted(op_corner_cases().items()):
        case = make_case(contexts, rows, v, seed=zlib.crc32(name.encode()) % 1000)

        def run():
            assert_matches(run_op(case, v, weight_scale=1.5), reference(case, weight_scale=1.5), v)

        checked(f"{v.arch}/{v.name} corner case {name}", run)


def from_start_cases(v) -> None:
    """The corner cases with each row's cells from its window start, into an out of 100 columns inside
    a wider -inf buffer: the cut windows land in place, nothing lands beside them."""
    for name, (contexts, rows) in sorted(op_corner_cases().items()):
        case = make_case(contexts, rows, v, seed=zlib.crc32(name.encode()) % 1000)
        width = 100

        def run():
            buffer = torch.full((case.total_q, width + 16), float("-inf"), device=DEVICE)
            run_op(case, v, out=buffer[:, 8 : 8 + width], out_from_start=True)
            want = torch.full_like(buffer, float("-inf"))
            want[:, 8 : 8 + width] = from_window_starts(run_op(case, v), case, width)
            assert torch.equal(buffer.nan_to_num(0.0, 1.0, -1.0), want.nan_to_num(0.0, 1.0, -1.0)), "cells differ"

        checked(f"{v.arch}/{v.name} corner case {name} from each window start", run)


def exact_path_one_cta(v) -> None:
    """far_apart_case on one CTA: its workers all take exact-path pages of the same tiles."""
    for side in ("kv", "q"):
        case = far_apart_case(v, side)

        def run():
            assert_matches(run_op(case, v, num_ctas=1), reference(case), v)

        checked(f"{v.arch}/{v.name} exact path ({side} side) on one CTA", run)


def row_guard(v) -> None:
    """A schedule planned for 14 rows launched against 10-row q/out with num_rows 10."""
    if v.q_per_block > 1:
        contexts, rows = [430], [(0, 0, 300 + 9 * i) for i in range(14)]
    else:
        contexts, rows = [300 + 9 * i for i in range(14)], [(i, 0, 300 + 9 * i) for i in range(14)]
    case = make_case(contexts, rows, v)
    p = make_plan(case, v)
    assert any(r[4] > 0 and r[0] >= 10 for r in p.buffers.cta_info.tolist()), "no record past row 10 to drop"
    small = first_rows(case, 10)
    out = neg_inf(small)

    def run():
        raw_launch(small, v, out, p.buffers.cta_info, p.buffers.cta_ranges, 10)
        assert_matches(out, reference(small), v)

    checked(f"{v.arch}/{v.name} schedule for 14 rows, launch of 10", run)


def foreign_schedule(v) -> None:
    rows = [(0, 0, 2500 - 3 + j) for j in range(4)] + [(1, 5, 700), (2, 0, 64)]
    case = make_case([2500, 700, 64], rows, v)
    for w in GPU_VARIANTS:
        if (w.q_per_block, w.block_k) == (v.q_per_block, v.block_k):
            continue
        p = make_plan(case, w)
        out = neg_inf(case)

        def run():
            raw_launch(case, v, out, p.buffers.cta_info, p.buffers.cta_ranges, case.total_q)
            assert_outside_windows_untouched(case, out)

        checked(f"{v.arch}/{v.name} hostile: launch of a {w.name} schedule", run)


def forged_records(v, trials: int = 6) -> None:
    rows = [(0, 100, 1800 - 3 + j) for j in range(4)] + [(1, 0, 300), (2, 7, 90)]
    case = make_case([1800, 300, 90], rows, v)
    g = torch.Generator().manual_seed(1234)
    rand = lambda lo, hi, shape: torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(torch.int32)
    # Each field of a record (abi.h CtaRecord) near its meaningful values: some records do work.
    near = [(-2, case.total_q + 2), (-1, 6), (-2, case.batch + 2), (-3, 40), (-2, 40), (-100, 2000), (-100, 2000)]
    for t in range(trials):
        n_rec, n_cta = int(rand(1, 400, ())), int(rand(1, 300, ()))
        plausible = torch.stack([rand(lo, hi, (n_rec,)) for lo, hi in near], dim=1)
        info = torch.where(rand(0, 2, (n_rec, 1)).bool(), rand(*INT32, (n_rec, len(near))), plausible)
        wild_ranges = rand(0, 4, (n_cta, 1)) == 0
        spans = torch.where(wild_ranges, rand(*INT32, (n_cta, 2)), rand(-5, n_rec + 5, (n_cta, 2)))
        # The first-record copy: record begin's where begin names one, else forged too.
        named = (spans[:, :1] >= 0) & (spans[:, :1] < n_rec)
        copied = info[spans[:, 0].clamp(0, n_rec - 1).long()]
        first = torch.where(named & ~wild_ranges, copied, rand(*INT32, (n_cta, len(near))))
        info, ranges = info.to(DEVICE), torch.cat([spans, first], dim=1).to(DEVICE)
        out = neg_inf(case)

        def run():
            raw_launch(case, v, out, info, ranges, case.total_q)
            assert_outside_windows_untouched(case, out)

        checked(f"{v.arch}/{v.name} hostile: forged records, trial {t} ({n_rec} records, {n_cta} CTAs)", run)


def compact_cases(v) -> None:
    """The op on compact schedules (DeepGEMM's metadata shape), whose logits launch writes its CTAs' records
    into its workspace first: 1-D and 2-D context_lens at next_n 1, 2 and 6, on 3 and 132 CTAs, checked
    against the reference; then forged schedules (hostile: no cell outside a window written)."""
    for next_n, two_d in ((1, False), (2, False), (2, True), (6, False), (6, True)):
        g = torch.Generator().manual_seed(next_n * 2 + two_d)
        lens = torch.randint(0, 1500, (5, next_n) if two_d else (5,), generator=g, dtype=torch.int32)
        case = decode_scene(lens.tolist(), next_n, two_d, DEVICE, seed=next_n)
        context_lens = lens.to(DEVICE)
        for num_sms in (3, 132):

            def run():
                meta = mx.compact_schedule(context_lens, num_sms)
                out = mx.pa_mqa_logits_compact(*case.named_inputs().values(), context_lens, meta, case.max_seq_len,
                                               next_n=next_n, variant=v.name)  # fmt: skip
                torch.cuda.synchronize()
                assert_matches(out, reference(case), v)

            checked(f"{v.arch}/{v.name} compact schedule, next_n {next_n}{' 2-D' if two_d else ''}, {num_sms} CTAs", run)
    g = torch.Generator().manual_seed(7)
    case = decode_scene([300, 1, 129, 5], 2, False, DEVICE)
    context_lens = torch.tensor([300, 1, 129, 5], dtype=torch.int32, device=DEVICE)
    for t, meta in enumerate([
        torch.randint(-(2**31), 2**31 - 1, (9, 2), generator=g, dtype=torch.int64).to(torch.int32),
        torch.randint(-3, 12, (9, 2), generator=g, dtype=torch.int32),
    ]):

        def run():
            out = mx.pa_mqa_logits_compact(*case.named_inputs().values(), context_lens, meta.to(DEVICE),
                                           case.max_seq_len, next_n=2, variant=v.name)  # fmt: skip
            torch.cuda.synchronize()
            assert_outside_windows_untouched(case, out)

        checked(f"{v.arch}/{v.name} hostile: forged compact schedule, trial {t}", run)


def main() -> int:
    if GPU_ARCH is None:
        print("no GPU arch present")
        return 0
    print(f"memcheck cases on {torch.cuda.get_device_name()} (arch {GPU_ARCH}): {[v.name for v in GPU_VARIANTS]}")
    for v in GPU_VARIANTS:
        corner_cases(v)
        from_start_cases(v)
        exact_path_one_cta(v)
        row_guard(v)
        foreign_schedule(v)
        forged_records(v)
        compact_cases(v)
    print(f"{failures} failure(s)" if failures else "all cases passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
