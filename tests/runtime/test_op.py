"""The upstream op test plan on every instance of every arch present (cpu, and the GPU's arch):
corner cases, padded decode, NaN propagation, out-of-window cells, strided out, the fused page
buffer, opcheck, torch.compile."""

from __future__ import annotations

import random
import zlib

import mxlogits as mx
import pytest
import torch
from support.cases import assert_matches, from_window_starts, make_case, make_plan, ops_of, raw_args, reference, run_op
from support.op_cases import causal_rows, corner_cases, far_apart_case
from support.params import device_of
from support.schedule_model import setup_chunks


@pytest.mark.parametrize("name", sorted(corner_cases()))
def test_corner_cases(name, variant):
    """Each case its own fixed seed (crc32 of its name: stable across processes, unlike hash())."""
    contexts, rows = corner_cases()[name]
    case = make_case(contexts, rows, variant, seed=zlib.crc32(name.encode()) % 1000)
    assert_matches(run_op(case, variant, weight_scale=1.5), reference(case, weight_scale=1.5), variant)


def test_long_window_splits_over_many_ctas(variant):
    """One 20,000-token window is cut over the grid: many records, each CTA a fair share of the
    weight (the chunks plus the tile's setup, whose units hold no chunk)."""
    case = make_case([20000], [(0, 0, 20000)], variant)
    p = make_plan(case, variant, num_ctas=64)
    info = p.buffers.cta_info
    counts = info[:, 4]
    chunks, setup = -(-20000 // variant.block_k), setup_chunks(variant)
    assert int((counts > 0).sum()) >= min(64, chunks) - setup
    assert int(counts.max()) <= -(-(chunks + setup) // 64)
    assert_matches(run_op(case, variant, plan=p), reference(case), variant)


def test_windows_in_any_order_within_a_tile(variant):
    """Rows of one sequence whose windows start and end anywhere, in no order (DeepGEMM's 2-D context
    lengths are drawn so): a tile reads the union of its rows' windows and masks each row by its own."""
    rng = random.Random(variant.q_per_block * 1000 + variant.block_k)
    for trial in range(4):
        contexts = [rng.randint(1, 700) for _ in range(4)]
        rows = []
        for b, c in enumerate(contexts):
            for _ in range(rng.randint(1, 9)):
                s, e = sorted((rng.randint(0, c), rng.randint(0, c)))
                rows.append((b, s, e))
        case = make_case(contexts, rows, variant, seed=trial)
        assert_matches(run_op(case, variant), reference(case), variant)


def test_without_local_starts_and_row_to_batch(variant):
    """local_starts=None means 0; row_to_batch=None means the row (q_per_block 1) or the tile's sequence."""
    if variant.q_per_block == 1:
        case = make_case([300, 70, 129], [(0, 0, 300), (1, 0, 70), (2, 0, 129)], variant)
    else:
        case = make_case([300, 70], causal_rows(0, 290, 10) + causal_rows(1, 60, 10), variant)
    out = run_op(case, variant, row_to_batch=False, starts=False)
    assert_matches(out, reference(case, starts=False), variant)


@pytest.mark.parametrize("mtp", [1, 2])
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_atom_padded_decode(variant, mtp, padded):
    """ATOM's decode: contexts (300, 70, 129, 1, 257), padded to 8 sequences; pad rows carry
    row_to_batch -1 and empty windows, and cu_seq_q's tail stays flat."""
    contexts = [300, 70, 129, 1, 257]
    rows = [(b, 0, c - mtp + 1 + j) for b, c in enumerate(contexts) for j in range(mtp)]
    if padded:
        contexts += [0, 0, 0]
        rows += [(-1, 0, 0)] * (3 * mtp)
    case = make_case(contexts, rows, variant)
    if padded:
        assert case.cu_seq_q.tolist()[-4:] == [5 * mtp] * 4
    out = run_op(case, variant)
    ref = reference(case)
    assert_matches(out, ref, variant)
    if padded:
        assert torch.isneginf(out[5 * mtp :]).all(), "pad rows were written"


def test_out_cells_outside_windows_untouched(variant):
    case = make_case([500, 300], [(0, 100, 260), (0, 100, 261), (1, 7, 9), (1, 7, 300)], variant)
    sentinel = torch.full((case.total_q + 2, case.max_seq_len + 50), 12345.0, device=device_of(variant))
    out = run_op(case, variant, out=sentinel.clone())
    inside = torch.zeros_like(out, dtype=torch.bool)
    for r, (s, e) in enumerate(zip(case.local_starts.tolist(), case.local_ends.tolist())):
        inside[r, s:e] = True
    assert (out[~inside] == 12345.0).all()
    assert torch.isfinite(out[inside]).all() and (out[inside] != 12345.0).any()


def test_strided_out(variant):
    case = make_case([700, 400], causal_rows(0, 690, 8) + causal_rows(1, 390, 8), variant)
    base = torch.full((case.total_q, case.max_seq_len + 40), float("-inf"), device=device_of(variant))
    out = base[:, 13 : 13 + case.max_seq_len]
    assert out.stride(0) != out.shape[1]
    run_op(case, variant, out=out)
    assert_matches(out, reference(case), variant)
    assert torch.isneginf(base[:, :13]).all() and torch.isneginf(base[:, 13 + case.max_seq_len :]).all()


def test_bf16_out(variant):
    """out of dtype bf16: each computed cell the fp32 logit rounded to nearest even (NaN stays NaN), the
    others untouched, through a strided out; an arch whose body writes fp32 only refuses it by name."""
    case = make_case([700, 90], causal_rows(0, 690, 8) + causal_rows(1, 80, 8), variant)
    with case.natural() as n:  # one NaN scale byte: a NaN column in row 0's window
        n.kv_scale[int(case.block_tables[0, 1]), 5, 0] = 255
    base = torch.full((case.total_q, case.max_seq_len + 8), float("-inf"), dtype=torch.bfloat16, device=device_of(variant))
    out = base[:, 3 : 3 + case.max_seq_len]
    if "bf16" not in mx.manifest.manifest().arches[variant.arch].out_forms:
        with pytest.raises(RuntimeError, match=r"out: expected dtype float32 \(the \w+ body writes fp32 logits only\), found BFloat16"):
            run_op(case, variant, out=out)
        return
    run_op(case, variant, out=out)
    fp32 = run_op(case, variant)
    assert torch.isnan(fp32).any()
    assert torch.equal(out.float().isnan(), fp32.isnan())
    assert torch.equal(out.nan_to_num(0.0, 1.0, -1.0), fp32.to(torch.bfloat16).nan_to_num(0.0, 1.0, -1.0))
    assert torch.isneginf(base[:, :3]).all() and torch.isneginf(base[:, 3 + case.max_seq_len :]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_out_from_start(variant, dtype):
    """out_from_start (DeepGEMM's compressed logits): row r's cell t at column t - start, each window cut at
    start + out.shape[1], through a strided out, in fp32 and bf16; the other cells untouched; an arch whose
    body writes cell t at column t only refuses it by name."""
    rows = [(0, 37, 300), (0, 100, 180), (0, 0, 64), (0, 650, 690), (1, 5, 90), (1, 60, 61), (1, 70, 70)]
    case = make_case([700, 90], rows, variant)
    width = 150  # row 0's window (263 tokens) is cut at 150
    base = torch.full((case.total_q, width + 8), float("-inf"), dtype=dtype, device=device_of(variant))
    out = base[:, 4 : 4 + width]
    if "from_start" not in mx.manifest.manifest().arches[variant.arch].out_forms:
        with pytest.raises(RuntimeError, match=r"out_from_start: expected False \(the \w+ body writes cell t at column t only\)"):
            run_op(case, variant, out=out.float(), out_from_start=True)  # (a bf16 out is refused first)
        return
    run_op(case, variant, out=out, out_from_start=True)
    full = run_op(case, variant)  # cell t at column t: the same arithmetic
    assert torch.equal(out, from_window_starts(full, case, width).to(dtype))
    assert torch.isneginf(base[:, :4]).all() and torch.isneginf(base[:, 4 + width :]).all()


def test_fused_page_buffer_in_place_equals_separate_tensors(variant):
    case = make_case([640, 200], causal_rows(0, 630, 4) + causal_rows(1, 190, 4), variant)
    assert case.kv_cache.stride(0) == 64 * (64 + 4) and not case.kv_cache.is_contiguous()
    fused = run_op(case, variant)
    case.kv_cache, case.kv_scale = case.kv_cache.contiguous(), case.kv_scale.contiguous()
    separate = run_op(case, variant)
    assert torch.equal(fused, separate)


def test_bf16_weights_and_weight_scale(variant):
    case = make_case([400], causal_rows(0, 390, 8), variant)
    w16 = case.weights.to(torch.bfloat16)
    out = run_op(case, variant, weights=w16, weight_scale=-0.75)
    assert_matches(out, reference(case, weights=w16, weight_scale=-0.75), variant)


def test_power_of_two_weights_scale_the_logits_exactly(variant):
    """Weights scaled by 2^40 or 2^-40 (far outside f16's range) scale every logit by exactly that: sm90's
    mma_head_sum holds each row's weights relative to its largest, a power of two applied after the sum."""
    case = make_case([400], causal_rows(0, 390, 8), variant)
    base = run_op(case, variant)
    for k in (40, -40):
        assert torch.equal(run_op(case, variant, weights=case.weights * 2.0**k), base * 2.0**k), k


def test_weights_spread_over_a_row(variant):
    """One row's heads weighted up to 2^14 apart stay within the instance's bound (sm90's mma_head_sum:
    f16 high and low parts of each weight relative to the row's largest: held to ~2^-25 of it)."""
    case = make_case([400], causal_rows(0, 390, 8), variant)
    spread = 2.0 ** torch.randint(-7, 8, case.weights.shape, generator=torch.Generator().manual_seed(5))
    w = case.weights * spread.to(case.weights.device)
    assert_matches(run_op(case, variant, weights=w), reference(case, weights=w), variant)


def test_infinite_weight_follows_ieee(variant):
    """An infinite weight gives infinities where its head's qk is positive and NaN where it is not (inf * 0)."""
    case = make_case([400], causal_rows(0, 390, 8), variant)
    w = case.weights.clone()
    w[3, 17] = float("inf")
    ref = reference(case, weights=w)
    assert torch.isinf(ref[3]).any() and torch.isnan(ref[3]).any()
    assert_matches(run_op(case, variant, weights=w), ref, variant)


def test_repeated_calls_are_deterministic(variant):
    case = make_case([2000, 900], causal_rows(0, 1990, 8) + causal_rows(1, 890, 8), variant)
    p = make_plan(case, variant)
    assert torch.equal(run_op(case, variant, plan=p), run_op(case, variant, plan=p))


def test_results_do_not_depend_on_the_grid(variant):
    case = make_case([3000, 50], causal_rows(0, 2990, 6) + causal_rows(1, 40, 6), variant)
    outs = [run_op(case, variant, num_ctas=n) for n in (1, 3, 128, 1000)]
    for o in outs[1:]:
        assert_matches(o, reference(case), variant)
        torch.testing.assert_close(o, outs[0], rtol=0, atol=1e-5, equal_nan=True)


# ---- NaN from E8M0 0xFF (docs/semantics.md) -------------------------------------------------


def poisoned_case(variant):
    rows = [(0, 0, 100), (0, 0, 101), (0, 50, 130), (0, 101, 140)]
    return make_case([300], rows, variant, seed=11)


def poison_kv_token(case, token: int) -> None:
    page = int(case.block_tables[0, token // 64])
    with case.natural() as n:
        n.kv_scale[page, token % 64, 2] = 255


@pytest.mark.parametrize("token", [100, 0, 139])
def test_nan_kv_scale_poisons_exactly_its_column(variant, token):
    case = poisoned_case(variant)
    poison_kv_token(case, token)
    out = run_op(case, variant)
    want = torch.zeros_like(out, dtype=torch.bool)
    for r, (s, e) in enumerate(zip(case.local_starts.tolist(), case.local_ends.tolist())):
        want[r, token] = s <= token < e
    assert want.any()
    assert torch.equal(torch.isnan(out), want)
    assert_matches(out, reference(case), variant)


def test_nan_control_token_in_no_window(variant):
    case = poisoned_case(variant)
    poison_kv_token(case, 250)  # stored in a page the sequence owns, read by no window
    out = run_op(case, variant)
    assert not torch.isnan(out).any()
    assert_matches(out, reference(case), variant)


def test_nan_q_scale_poisons_its_row(variant):
    case = poisoned_case(variant)
    with case.natural() as n:
        n.q_scale[2, 17, 1] = 255
    out = run_op(case, variant)
    assert torch.isnan(out[2, 50:130]).all()
    others = torch.ones(out.shape[0], dtype=torch.bool, device=out.device)
    others[2] = False
    assert not torch.isnan(out[others]).any()


@pytest.mark.parametrize("num_ctas", [None, 1])
@pytest.mark.parametrize("side", ["kv", "q"])
def test_scale_blocks_far_apart(variant, side, num_ctas):
    """far_apart_case. On one CTA, every worker of it meets such pages of the same tiles (sm90: each
    math warpgroup switches between the fp8 and the exact path from one page to the next)."""
    case = far_apart_case(variant, side)
    assert_matches(run_op(case, variant, num_ctas=num_ctas), reference(case), variant)


@pytest.mark.parametrize("num_ctas", [None, 1])
def test_exact_path_in_some_tiles(variant, num_ctas):
    """Sequences 0 and 2 have pages the fp8 path cannot hold, 1 and 3 none, and sequence 4's query
    heads need the exact path. On one CTA only some of its tiles need the queries in bf16: sm90
    builds them for just those tiles, so a build left from an earlier tile, or a missing one, shows
    in the logits."""
    contexts = [300, 260, 200, 330, 150]
    rows = [(s, 0, n) for s, n in enumerate(contexts) for _ in range(3)]
    case = make_case(contexts, rows, variant, seed=31)
    with case.natural() as n:
        for seq in (0, 2):
            pages = case.block_tables[seq, 1:(contexts[seq] + 63) // 64:2].long()
            n.kv_scale[pages, :, 0] = (n.kv_scale[pages, :, 1:].amax(dim=-1) + 20).clamp(max=254)
            n.q[3 * seq : 3 * seq + 3, :, :16] = 0
        q4 = slice(12, 15)
        n.q_scale[q4, :, 0] = (n.q_scale[q4, :, 1:].amax(dim=-1) + 20).clamp(max=254)
        n.kv_cache[case.block_tables[4, :3].long(), :, :16] = 0
    assert_matches(run_op(case, variant, num_ctas=num_ctas), reference(case), variant)


# ---- torch.library ---------------------------------------------------------------------------


def test_opcheck(variant):
    case = make_case([300, 200], causal_rows(0, 290, 4) + causal_rows(1, 190, 4), variant)
    p = make_plan(case, variant)
    out = torch.full((case.total_q, case.max_seq_len), float("-inf"), device=device_of(variant))
    ops = ops_of(variant.arch)
    torch.library.opcheck(ops.pa_mqa_logits_mxfp4.default, (), raw_args(case, p, variant, out))
    sched = dict(
        cu_seq_q=case.cu_seq_q,
        local_ends=case.local_ends,
        local_starts=case.local_starts,
        row_to_batch=case.row_to_batch,
        cta_info=p.buffers.cta_info,
        cta_ranges=p.buffers.cta_ranges,
        scratch=p.buffers.scratch,
        num_rows=case.total_q,
        batch=case.batch,
        q_per_block=variant.q_per_block,
        block_k=variant.block_k,
    )
    torch.library.opcheck(ops.build_schedule.default, (), sched)


def test_traces_under_torch_compile(arch):
    variant = mx.default_variant(arch)
    case = make_case([400, 300], [(0, 0, 400), (1, 0, 300)], variant)
    p = make_plan(case, variant)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(q, q_scale, weights, out):
        return (
            mx.pa_mqa_logits_mxfp4(
                q, q_scale, case.kv_cache, case.kv_scale, case.block_tables, weights, p, case.max_seq_len, out=out
            )
            * 2
        )

    out = torch.full((case.total_q, case.max_seq_len), float("-inf"), device=device_of(variant))
    doubled = step(case.q, case.q_scale, case.weights, out)
    assert_matches(out, reference(case), variant)
    assert torch.equal(doubled, out * 2)
