"""Bad input raises naming the argument, what was expected and what was found, before any
launch (out untouched) and before anything is allocated; the kernels drop records a plan could
not have produced, and a page id outside the cache gives NaN cells on every arch. The launcher
checks are shared templates, so every check runs on every arch present (messages of the C++
checks start with "mxlogits[<arch>]")."""

from __future__ import annotations

import dataclasses
import math
import re

import mxlogits as mx
import pytest
import torch
from mxlogits.manifest import manifest
from support.cases import (
    assert_matches,
    cta_ranges_of,
    first_rows,
    make_case,
    make_plan,
    ops_of,
    raw_args,
    reference,
    run_op,
)
from support.params import device_of, variant_with

NEG_INF = float("-inf")


def decode_case(rows: int = 10, variant=None):
    return make_case([200 + 13 * i for i in range(rows)], [(i, 0, 200 + 13 * i) for i in range(rows)], variant)


# ---- row counts ------------------------------------------------------------------------------


@pytest.mark.parametrize("short", ["local_ends", "local_starts", "row_to_batch"])
def test_plan_raises_on_short_per_row_arrays(variant, short):
    case = decode_case(10, variant)
    arrays = dict(local_ends=case.local_ends, local_starts=case.local_starts, row_to_batch=case.row_to_batch)
    arrays[short] = arrays[short][:7]
    buffers = mx.plan_buffers(device_of(variant), 10, 10, variant)
    message = rf"^mxlogits\[{variant.arch}\] .*{short}: expected at least 10 entries .*found 7"
    with pytest.raises(RuntimeError, match=message):
        mx.plan(case.cu_seq_q, arrays.pop("local_ends"), buffers=buffers, **arrays)


def test_plan_raises_on_more_rows_than_the_buffers_hold(arch):
    buffers = mx.plan_buffers(device_of(arch), 10, 10)
    with pytest.raises(ValueError, match=r"total_q: these buffers were sized for total_q <= 10, found 14"):
        mx.plan(None, torch.zeros(14, dtype=torch.int32, device=device_of(arch)), buffers=buffers, total_q=14)


def test_plan_raises_on_more_sequences_than_the_buffers_hold(arch):
    v = variant_with(arch, lambda v: v.q_per_block > 1, "q_per_block > 1")
    dev = device_of(arch)
    buffers = mx.plan_buffers(dev, 10, 2, v)
    ends = torch.zeros(10, dtype=torch.int32, device=dev)
    with pytest.raises(ValueError, match=r"cu_seq_q: these buffers were sized for batch <= 2"):
        mx.plan(torch.tensor([0, 2, 4, 10], dtype=torch.int32, device=dev), ends, buffers=buffers)
    with pytest.raises(ValueError, match=r"cu_seq_q: expected an int32 \[batch \+ 1\] tensor"):
        mx.plan(None, ends, buffers=buffers)


def test_identity_cut_without_row_to_batch_needs_a_sequence_per_row(arch):
    v = variant_with(arch, lambda v: v.q_per_block == 1, "q_per_block 1")
    buffers = mx.plan_buffers(device_of(arch), 10, 4, v)
    with pytest.raises(
        RuntimeError, match=r"batch: expected a value in \[10, .*row r reads block_tables row r.*found 4"
    ):
        mx.plan(None, torch.zeros(10, dtype=torch.int32, device=device_of(arch)), buffers=buffers)


@pytest.mark.parametrize("short", ["q", "q_scale", "weights", "out"])
def test_launch_raises_on_row_count_mismatch(variant, short):
    """A 14-row plan against 10-row tensors raises before any launch and writes nothing."""
    case14, case10 = decode_case(14, variant), decode_case(10, variant)
    p = make_plan(case14, variant)
    out = torch.full((14, case14.max_seq_len), NEG_INF, device=device_of(variant))
    tensors = dict(q=case14.q, q_scale=case14.q_scale, weights=case14.weights, out=out)
    tensors[short] = out[:10] if short == "out" else getattr(case10, short)
    with pytest.raises(
        RuntimeError, match=rf"{short}: expected at least 14 rows \(the plan's num_rows\), found shape \[10,"
    ):
        mx.pa_mqa_logits_mxfp4(
            tensors["q"],
            tensors["q_scale"],
            case14.kv_cache,
            case14.kv_scale,
            case14.block_tables,
            tensors["weights"],
            p,
            case14.max_seq_len,
            out=tensors["out"],
        )
    assert torch.isneginf(out).all()


def test_launch_raises_when_block_tables_has_fewer_rows_than_the_plan(arch):
    v = mx.default_variant(arch)
    case = decode_case(10, v)
    p = make_plan(case, v)
    with pytest.raises(ValueError, match=r"block_tables: expected at least 10 rows \(the plan's batch\)"):
        mx.pa_mqa_logits_mxfp4(
            case.q, case.q_scale, case.kv_cache, case.kv_scale, case.block_tables[:6], case.weights, p, case.max_seq_len
        )


# ---- the kernel row guard --------------------------------------------------------------------


def test_kernel_row_guard_through_a_raw_launch(variant):
    """A schedule built for n rows (14, or enough that a tile starts past row 10) launched raw with
    num_rows 10 drops rows 10..n-1: rows 0..9 are right and nothing past the 10-row tensors is touched."""
    n = max(14, 2 * variant.q_per_block + 4)
    rows = (
        [(0, 0, 300 + 9 * i) for i in range(n)]
        if variant.q_per_block > 1
        else [(i, 0, 300 + 9 * i) for i in range(n)]
    )
    contexts = [304 + 9 * n] if variant.q_per_block > 1 else [300 + 9 * i for i in range(n)]
    case = make_case(contexts, rows, variant)
    p = make_plan(case, variant)
    assert any(r[4] > 0 and r[0] >= 10 for r in p.buffers.cta_info.tolist())
    small = first_rows(case, 10)
    out = torch.full((10, case.max_seq_len), NEG_INF, device=device_of(variant))
    ops = ops_of(variant.arch)
    ops.pa_mqa_logits_mxfp4(**raw_args(small, p, variant, out, num_rows=10))
    assert_matches(out, reference(small), variant)
    with pytest.raises(RuntimeError, match=rf"q: expected at least {n} rows"):
        ops.pa_mqa_logits_mxfp4(**raw_args(small, p, variant, out, num_rows=n))


def test_kernel_drops_records_no_plan_produces(arch):
    """Hand-written records with a bad row, a bad sequence, or chunks past max_seq_len touch nothing."""
    v = mx.default_variant(arch)
    case = decode_case(4, v)
    p = make_plan(case, v)
    forged = torch.tensor(
        [
            [7, 1, 0, 0, 1, 0, 64],  # row past num_rows
            [0, 1, 99, 0, 1, 0, 64],  # sequence past block_tables
            [1, 1, 1, 50, 3, 0, 10**6],  # chunks past max_seq_len
            [2, 1, -1, 0, 1, 0, 64],
        ],  # negative sequence
        dtype=torch.int32,
        device=device_of(arch),
    )
    ranges = cta_ranges_of([(0, 4)], forged)
    out = torch.full((4, case.max_seq_len), NEG_INF, device=device_of(arch))
    ops_of(arch).pa_mqa_logits_mxfp4(**raw_args(case, p, v, out, cta_info=forged, cta_ranges=ranges, num_rows=4))
    assert torch.isneginf(out).all()


@pytest.mark.parametrize("bad", ["num_pages", "-1", "int32_max", "int32_min"])
def test_page_id_outside_the_cache_gives_nan_cells_on_every_arch(variant, bad):
    """One behaviour everywhere, and no launch that fails halfway through out: the in-window
    cells of the bad page's tokens are NaN, every other cell is what the reference gives."""
    rows = [(0, 0, 300), (1, 10, 650), (1, 10, 700), (1, 130, 700), (2, 0, 130)]
    if variant.q_per_block == 1:
        rows = rows[:2] + rows[4:]  # one row per sequence: a decode step
    case = make_case([300, 700, 130], rows, variant, seed=5)
    want = reference(case)
    page = {"num_pages": case.kv_cache.shape[0], "-1": -1, "int32_max": 2**31 - 1, "int32_min": -(2**31)}[bad]
    case.block_tables[1, 2] = page  # tokens 128..191 of sequence 1
    out = run_op(case, variant)
    for r, (b, s, e) in enumerate(rows):
        if b == 1:
            want[r, max(s, 128) : min(e, 192)] = float("nan")
    assert torch.isnan(want).any()
    assert_matches(out, want, variant)


# ---- arguments -------------------------------------------------------------------------------


def test_argument_errors_name_argument_expected_and_found(arch):
    v = mx.default_variant(arch)
    case = decode_case(3, v)
    p = make_plan(case, v)
    shapes = manifest().layouts[manifest().arches[arch].scale_layout]  # [rows, 64, 4] in the natural layout
    q_scale, kv_cache = (", ".join(map(str, shapes[k])) for k in ("q_scale", "kv_cache"))
    half = ", ".join(map(str, (shapes["q_scale"][0] // 2, *shapes["q_scale"][1:])))
    bad = {
        "q": (case.q.float(), r"q: expected dtype uint8 or float4_e2m1fn_x2, found Float"),
        "q_scale": (
            case.q_scale[:, : shapes["q_scale"][0] // 2],
            rf"q_scale: expected shape \[rows, {q_scale}\] with contiguous inner dims, found shape \[3, {half}\]",
        ),
        "kv_cache": (case.kv_cache.transpose(-1, -2), rf"kv_cache: expected shape \[rows, {kv_cache}\]"),
        "kv_scale": (case.kv_scale[:-1], r"kv_scale: expected \d+ pages \(those of kv_cache\), found \d+"),
        "weights": (case.weights.double(), r"weights: expected dtype float32 or bfloat16, found Double"),
        "block_tables": (case.block_tables.long(), r"block_tables: expected dtype int32, found Long"),
    }
    out = torch.full((3, case.max_seq_len), NEG_INF, device=device_of(arch))
    for name, (value, message) in bad.items():
        args = case.named_inputs() | {name: value}
        with pytest.raises(RuntimeError, match=rf"^mxlogits\[{arch}\] .*{message}"):
            mx.pa_mqa_logits_mxfp4(**args, plan=p, max_seq_len=case.max_seq_len, out=out)
    assert torch.isneginf(out).all()


def misaligned(t: torch.Tensor, offset: int) -> torch.Tensor:
    """A copy of t (same shape and dtype, contiguous) whose data starts `offset` bytes past a
    64-byte boundary."""
    n = t.numel() * t.element_size()
    raw = torch.empty(n + 128, dtype=torch.uint8, device=t.device)
    start = (-raw.data_ptr()) % 64 + offset
    moved = raw[start : start + n].view(t.dtype).view(t.shape)
    moved.copy_(t)
    assert moved.data_ptr() % 64 == offset
    return moved


@pytest.mark.parametrize("name", ["q", "q_scale"])
def test_queries_at_any_address_run_or_are_refused(arch, name):
    """q and q_scale one byte past an aligned address: an arch that reads them with wide loads
    refuses the tensor by name before the launch (out untouched), never a misaligned access;
    an arch that reads them at any address computes the same logits (the cpu arch always)."""
    v = mx.default_variant(arch)
    case = decode_case(3, v)
    p = make_plan(case, v)
    moved = dataclasses.replace(case, **{name: misaligned(getattr(case, name), 1)})
    out = torch.full((3, case.max_seq_len), NEG_INF, device=device_of(arch))
    try:
        run_op(moved, v, plan=p, out=out)
    except RuntimeError as e:
        assert arch != "cpu", e
        assert re.match(
            rf"^mxlogits\[{arch}\] .*{name}: expected a data pointer that is a multiple of \d+ bytes, found address % \d+ = 1",
            str(e),
        ), e
        assert torch.isneginf(out).all()
        return
    assert_matches(out, reference(case), v)


def test_out_and_block_tables_bounds(arch):
    v = max(mx.variants(arch), key=lambda v: v.block_k)  # the widest chunk: block_tables padding matters most
    case = decode_case(3, v)
    p = make_plan(case, v)
    L, dev = case.max_seq_len, device_of(arch)
    with pytest.raises(RuntimeError, match=rf"out: expected at least max_seq_len={L} columns, found {L - 1}"):
        run_op(case, v, plan=p, out=torch.empty(3, L - 1, device=dev))
    with pytest.raises(RuntimeError, match=r"out: expected a 2-D tensor with a contiguous last dim"):
        run_op(case, v, plan=p, out=torch.empty(L, 3, device=dev).t())
    width = mx.block_table_width(L, v)
    case.block_tables = case.block_tables[:, : width - 1]
    with pytest.raises(
        RuntimeError,
        match=rf"block_tables: expected at least {width} columns \(block_table_width\(max_seq_len={L}\): one per "
        rf"page of 64 tokens\)",
    ):
        run_op(case, v, plan=p)


def test_block_table_width_agrees_with_the_launcher(variant):
    """The Python sizing helper and the C++ check are the same arithmetic: width passes, width - 1 raises."""
    v = variant
    for L in (1, 63, 64, 65, 255, 256, 257, 1000):
        case = make_case([L], [(0, 0, L)], v, max_seq_len=L)
        width = mx.block_table_width(L, v)
        assert width == -(-L // 64)  # what serving stacks allocate, whatever block_k
        p = make_plan(case, v)
        full = case.block_tables
        case.block_tables = full[:, :width].contiguous()
        assert_matches(run_op(case, v, plan=p), reference(case), v)
        case.block_tables = full[:, : width - 1].contiguous()
        with pytest.raises(RuntimeError, match="block_tables: expected at least"):
            run_op(case, v, plan=p)


def test_devices_must_match(arch):
    v = mx.default_variant(arch)
    case = decode_case(2, v)
    p = make_plan(case, v)
    dev = re.escape(str(case.q.device))  # cpu, cuda:0
    with pytest.raises(ValueError, match=rf"weights: expected a tensor on {dev} \(that of q\), found meta"):
        mx.pa_mqa_logits_mxfp4(
            *case.inputs(case.weights.to("meta")),
            p,
            case.max_seq_len,
        )
    with pytest.raises(ValueError, match=rf"the plan was built for {dev} and this launch is on meta"):
        mx.pa_mqa_logits_mxfp4(
            case.q.to("meta"),
            case.q_scale,
            case.kv_cache,
            case.kv_scale,
            case.block_tables,
            case.weights,
            p,
            case.max_seq_len,
        )
    message = rf"local_ends: expected a tensor on {dev} \(the buffers' device\), found meta"
    with pytest.raises(ValueError, match=message):
        mx.plan(case.cu_seq_q, case.local_ends.to("meta"), buffers=p.buffers)
    if device_of(arch) != "cpu":  # a GPU plan fed host windows, and a GPU launch with a host block table
        with pytest.raises(ValueError, match=rf"local_ends: expected a tensor on {dev} .*found cpu"):
            mx.plan(case.cu_seq_q, case.local_ends.cpu(), buffers=p.buffers)
        args = case.named_inputs() | {"block_tables": case.block_tables.cpu()}
        with pytest.raises(ValueError, match=rf"block_tables: expected a tensor on {dev} \(that of q\), found cpu"):
            mx.pa_mqa_logits_mxfp4(**args, plan=p, max_seq_len=case.max_seq_len)


def test_int64_windows_are_refused_not_converted(arch):
    dev = device_of(arch)
    buffers = mx.plan_buffers(dev, 3, 3)
    cu = torch.arange(4, dtype=torch.int32, device=dev)  # read only by a default of q_per_block > 1
    with pytest.raises(RuntimeError, match=r"local_ends: expected dtype int32, found Long"):
        mx.plan(cu, torch.zeros(3, dtype=torch.int64, device=dev), buffers=buffers)


# ---- variants, arches, plans -----------------------------------------------------------------


def test_unknown_and_foreign_variants_are_refused(arch):
    dev = device_of(arch)
    with pytest.raises(ValueError, match=rf"unknown variant 'qlen3_kv64' for {arch}; available: \["):
        mx.plan_buffers(dev, 4, 4, "qlen3_kv64")
    other = "gfx950" if arch != "gfx950" else "sm90"
    foreign = mx.MqaLogitsVariant("qlen1_kv64", 1, 64, 128, other)
    with pytest.raises(ValueError, match=rf"variant 'qlen1_kv64' was compiled for {other}, not {arch}"):
        mx.plan_buffers(dev, 4, 4, foreign)
    hand_built = dataclasses.replace(mx.default_variant(arch), cta_resident=7)
    with pytest.raises(ValueError, match=rf"is not an instance {arch} compiled"):
        mx.plan_buffers(dev, 4, 4, hand_built)
    with pytest.raises(TypeError, match=r"variant: expected a name, an MqaLogitsVariant or None, found int"):
        mx.plan_buffers(dev, 4, 4, 3)


def test_plans_and_buffers_of_another_arch_are_refused(arch):
    v = mx.default_variant(arch)
    case = decode_case(2, v)
    p = make_plan(case, v)
    other = "sm90" if arch != "sm90" else "gfx950"
    foreign = dataclasses.replace(p.buffers, variant=dataclasses.replace(p.variant, arch=other))
    dev = re.escape(str(case.q.device))
    with pytest.raises(ValueError, match=rf"plan: built for arch {other}, but {dev} runs {arch}"):
        mx.pa_mqa_logits_mxfp4(
            *case.inputs(),
            dataclasses.replace(p, buffers=foreign),
            case.max_seq_len,
        )
    with pytest.raises(TypeError, match=r"plan: expected an MqaLogitsPlan"):
        mx.pa_mqa_logits_mxfp4(
            *case.inputs(),
            p.buffers,
            case.max_seq_len,
        )
    with pytest.raises(TypeError, match=r"buffers: expected MqaLogitsBuffers"):
        mx.plan(None, case.local_ends, buffers=p)


def test_raw_launch_with_an_uncompiled_shape_lists_the_instances(arch):
    v = mx.default_variant(arch)
    case = decode_case(2, v)
    p = make_plan(case, v)
    out = torch.full((2, case.max_seq_len), NEG_INF, device=device_of(arch))
    compiled = {(w.q_per_block, w.block_k) for w in mx.variants(arch)}
    qpb, bk = next(s for s in ((2, 128), (3, 192), (8, 512)) if s not in compiled)
    with pytest.raises(RuntimeError) as raised:
        ops_of(arch).pa_mqa_logits_mxfp4(**raw_args(case, p, v, out, q_per_block=qpb, block_k=bk))
    message = str(raised.value)
    assert re.search(rf"mxlogits\[{arch}\]: no instance with \(q_per_block, block_k\) = \({qpb}, {bk}\)", message)
    for w in mx.variants(arch):  # every compiled instance is listed, in whatever order
        assert f"{w.name} ({w.q_per_block}, {w.block_k})" in message, (w, message)
    assert torch.isneginf(out).all()


def test_numbers_are_checked(arch):
    dev = device_of(arch)
    with pytest.raises(ValueError, match=r"total_q: expected an int in \[0, 2147483647\], found -1"):
        mx.plan_buffers(dev, -1, 2)
    with pytest.raises(TypeError, match=r"batch: expected an int, found float"):
        mx.plan_buffers(dev, 2, 2.0)
    with pytest.raises(ValueError, match=r"num_ctas: expected an int in \[1, 2147483647\], found 0"):
        mx.plan_buffers(dev, 2, 2, num_ctas=0)
    with pytest.raises(ValueError, match=r"batch: expected an int in \[0, 2147483647\], found 9223372036854775808"):
        mx.plan_buffers(dev, 2, 2**63)
    v = mx.default_variant(arch)
    case = decode_case(2, v)
    p = make_plan(case, v)
    with pytest.raises(TypeError, match=r"max_seq_len: expected an int, found float"):
        mx.pa_mqa_logits_mxfp4(
            case.q, case.q_scale, case.kv_cache, case.kv_scale, case.block_tables, case.weights, p, 300.0
        )


# ---- nothing allocated before it is checked --------------------------------------------------


@pytest.fixture
def allocations(monkeypatch):
    """The shapes torch.full and torch.zeros were asked for (and allocated) during the test."""
    asked = []
    for name in ("full", "zeros"):
        real = getattr(torch, name)

        def spy(size, *args, _real=real, **kwargs):
            asked.append(tuple(size))
            return _real(size, *args, **kwargs)

        monkeypatch.setattr(torch, name, spy)
    return asked


@pytest.mark.parametrize(
    "max_seq_len, error, message",
    [
        (2**31 - 1, RuntimeError, r"block_tables: expected at least 33554432 columns"),
        (2**31, ValueError, r"max_seq_len: expected an int in \[0, 2147483647\], found 2147483648"),
        (-5, ValueError, r"max_seq_len: expected an int in \[0, 2147483647\], found -5"),
    ],
)
def test_without_out_every_check_comes_before_the_allocation(arch, allocations, max_seq_len, error, message):
    """Upstream allocated and filled a 16 GiB out before the width check rejected the call."""
    v = mx.default_variant(arch)
    case = decode_case(2, v)
    p = make_plan(case, v)
    allocations.clear()
    with pytest.raises(error, match=message):
        mx.pa_mqa_logits_mxfp4(*case.inputs(), p, max_seq_len)
    assert allocations == []


def test_without_out_a_bad_tensor_raises_before_the_allocation(arch, allocations):
    v = mx.default_variant(arch)
    case = decode_case(2, v)
    p = make_plan(case, v)
    allocations.clear()
    with pytest.raises(RuntimeError, match=rf"^mxlogits\[{arch}\] pa_mqa_logits_mxfp4: q_scale: expected dtype"):
        mx.pa_mqa_logits_mxfp4(case.q, case.q.float(), *case.inputs()[2:], p, case.max_seq_len)
    assert allocations == []


def test_a_failed_allocation_raises_ours_naming_the_arguments(arch, monkeypatch):
    """plan_buffers(total_q=2**31 - 200) needs 60 GB of records: where that cannot be allocated the
    error names the arguments and the size, not only torch's allocator."""
    real = torch.zeros

    def no_memory(size, *args, **kwargs):
        if math.prod(size) > 10**9:
            raise torch.OutOfMemoryError("simulated: out of memory")
        return real(size, *args, **kwargs)

    monkeypatch.setattr(torch, "zeros", no_memory)
    with pytest.raises(
        RuntimeError,
        match=r"plan_buffers: the schedule of total_q=2147483448, batch=1 with 1 CTAs needs \d+ bytes on .* "
        r"which could not be allocated: simulated: out of memory",
    ):
        mx.plan_buffers(device_of(arch), 2**31 - 200, 1, num_ctas=1)


# ---- plans, outputs, gradients ---------------------------------------------------------------


def test_a_plan_is_refused_once_its_buffers_are_planned_again(arch):
    """Both plans share one set of buffers: the second overwrote the first's schedule."""
    v = mx.default_variant(arch)
    first, second = decode_case(4, v), make_case([70] * 4, [(i, 0, 70) for i in range(4)], v)
    buffers = mx.plan_buffers(device_of(arch), 4, 4, v)
    p1 = mx.plan(first.cu_seq_q, first.local_ends, buffers=buffers, local_starts=first.local_starts)
    p2 = mx.plan(second.cu_seq_q, second.local_ends, buffers=buffers, local_starts=second.local_starts)
    out = torch.full((4, first.max_seq_len), NEG_INF, device=device_of(arch))
    with pytest.raises(ValueError, match=r"plan: expected the newest plan of its buffers, found a stale one \(plan 1 "
                                         r"of these buffers, which now hold plan 2\)"):
        mx.pa_mqa_logits_mxfp4(*first.inputs(), p1, first.max_seq_len, out=out)
    assert torch.isneginf(out).all()
    assert_matches(run_op(second, v, plan=p2), reference(second), v)


@pytest.mark.parametrize("shared", ["q", "kv_cache", "kv_scale", "weights", "block_tables"])
def test_out_overlapping_an_input_is_refused(arch, shared):
    """out and one input laid out from the same byte of one buffer: refused, nothing written."""
    v = mx.default_variant(arch)
    case = decode_case(3, v)
    p = make_plan(case, v)
    inputs = case.named_inputs()
    t = inputs[shared]
    out_bytes = 3 * case.max_seq_len * 4
    arena = torch.zeros(max(t.numel() * t.element_size(), out_bytes), dtype=torch.uint8, device=device_of(arch))
    inputs[shared] = arena[: t.numel() * t.element_size()].view(t.dtype).view(t.shape)
    inputs[shared].copy_(t)
    out = arena[:out_bytes].view(torch.float32).view(3, case.max_seq_len)
    before = arena.clone()
    with pytest.raises(RuntimeError, match=rf"out: expected memory disjoint from {shared} \(an input of the op\), "
                                           rf"found \d+ bytes in common"):
        mx.pa_mqa_logits_mxfp4(**inputs, plan=p, max_seq_len=case.max_seq_len, out=out)
    assert torch.equal(arena, before)


def test_a_gradient_is_refused_not_dropped(arch):
    v = mx.default_variant(arch)
    case = decode_case(2, v)
    p = make_plan(case, v)
    weights = case.weights.clone().requires_grad_()
    with pytest.raises(ValueError, match=r"weights: expected a tensor that requires no gradient .*no backward"):
        mx.pa_mqa_logits_mxfp4(*case.inputs(weights), p, case.max_seq_len)
    with torch.no_grad():
        out = mx.pa_mqa_logits_mxfp4(*case.inputs(weights), p, case.max_seq_len)
    assert_matches(out, reference(case), v)
