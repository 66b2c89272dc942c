"""mxlogits.deepgemm_compat on every variant of every present arch: DeepGEMM-layout inputs built
byte by byte from the layout notes (fused FP4 pages [blocks, 64, 1, D/2 + 4], int32-packed E8M0
query scales), 1-D and 2-D context_lens (rows of a sequence in any order) at next_n 1, 2 and 6 with
pad sequences, against mx.reference_logits on the natural layout; the metadata as DeepGEMM's int32
[num_sms + 1, 2], copied into a persistent buffer; views without copies; errors; torch.compile."""

from __future__ import annotations

import mxlogits as mx
import pytest
import torch
from mxlogits.integrations import deepgemm as dg
from support.cases import assert_matches
from support.deepgemm import as_int32
from support.params import device_of

H, D, PAGE = 64, 128, 64
HALF = D // 2
PAGE_BYTES = PAGE * (HALF + 4)


def dg_inputs(contexts, next_n, device, *, max_len=None, page_pad=0, seed=0):
    """DeepGEMM-layout inputs and their natural-layout twins. Token t of page p: values at byte
    p * page_stride + t * D/2, scales at p * page_stride + 64 * D/2 + 4 * t (the notes' writer)."""
    g = torch.Generator().manual_seed(seed)
    b = len(contexts)
    width = mx.block_table_width(max_len or max(contexts), device=device)
    num_pages = b * width + 1
    block_table = torch.randperm(num_pages, generator=g)[: b * width].view(b, width).to(torch.int32)
    stride = PAGE_BYTES + page_pad
    storage = torch.randint(0, 256, (num_pages, stride), dtype=torch.uint8, generator=g)  # garbage where unwritten
    natural_kv = torch.zeros(num_pages, PAGE, HALF, dtype=torch.uint8)
    natural_ks = torch.full((num_pages, PAGE, D // 32), 127, dtype=torch.uint8)
    flat = storage.view(-1)
    for seq, ctx in enumerate(contexts):
        values, scales = mx.quantize_mxfp4(torch.randn(ctx, D, generator=g))
        for t in range(ctx):
            page, off = int(block_table[seq, t // PAGE]), t % PAGE
            base = page * stride
            flat[base + off * HALF : base + (off + 1) * HALF] = values[t]
            flat[base + PAGE * HALF + 4 * off : base + PAGE * HALF + 4 * off + 4] = scales[t]
            natural_kv[page, off], natural_ks[page, off] = values[t], scales[t]
    # Sliced on the device: a copy of a padded view to another device would drop the padding.
    kv_cache = storage.to(device)[:, :PAGE_BYTES].view(num_pages, PAGE, 1, HALF + 4)
    q, q_scale = mx.quantize_mxfp4(torch.randn(b * next_n, H, D, generator=g))
    q_sf = as_int32(q_scale).view(b, next_n, H)  # byte i = block i
    weights = torch.randn(b * next_n, H, generator=g)
    to = lambda *ts: [t.to(device) for t in ts]  # noqa: E731
    q8, q_sf, weights_dg, block_table_dg = to(q.view(torch.int8).view(b, next_n, H, HALF), q_sf, weights, block_table)
    return [q8, q_sf, kv_cache, weights_dg, block_table_dg], to(q, q_scale, natural_kv, natural_ks, block_table, weights)


def windows(lens, next_n, two_d):
    """Per-row window ends: the DeepGEMM rule for 1-D lens, the given ends for 2-D ones."""
    if two_d:
        return [e for row in lens for e in row]
    return [c - next_n + 1 + j for c in lens for j in range(next_n)]


@pytest.mark.parametrize("two_d", [False, True], ids=["lens_1d", "lens_2d"])
@pytest.mark.parametrize("next_n", [1, 2, 3, 6])
def test_adapter_matches_reference(variant, next_n, two_d):
    device = device_of(variant)
    if mx.layouts.arch_layout(variant.arch) != "natural":
        natural_layout_refused(variant.arch)
        return
    contexts = [700, 0, 65, 1, 1500]  # a pad sequence (0) and a context shorter than next_n
    max_len = max(contexts) + 3  # a ragged width: cells past every window stay -inf
    dg_args, natural = dg_inputs(contexts, next_n, device, max_len=max_len, page_pad=64)
    q, q_sf, kv_cache, weights, block_table = dg_args
    if two_d:  # each row its own end, in no order within a sequence (DeepGEMM's test draws them at random)
        g = torch.Generator().manual_seed(next_n)
        lens = [[int(torch.randint(0, c + 1, (), generator=g)) for _ in range(next_n)] for c in contexts]
    else:
        lens = contexts
    context_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    num_sms = 7  # a grid that splits long sequences over CTAs and puts several short ones on one
    meta = dg.get_paged_mqa_logits_metadata(context_lens, PAGE, num_sms)
    assert meta.dtype == torch.int32 and meta.shape == (num_sms + 1, 2)
    persistent = torch.full((num_sms + 1, 2), -1, dtype=torch.int32, device=device)
    persistent[: meta.shape[0]] = meta  # what vLLM does with DeepGEMM's metadata
    call = lambda m, clean=False: dg.fp8_fp4_paged_mqa_logits(  # noqa: E731
        (q, q_sf), kv_cache, weights, context_lens, block_table, m, max_len, clean, variant=variant
    )
    out = call(persistent, True)
    ends = torch.tensor(windows(lens, next_n, two_d), dtype=torch.int32)
    rows = torch.arange(len(contexts) * next_n, dtype=torch.int32) // next_n
    ref = mx.reference_logits(*[t.cpu() for t in natural], ends, max_len, row_to_batch=rows)
    assert_matches(out, ref.to(device), variant)
    unclean = call(meta)
    inside = ~torch.isneginf(ref.to(device))
    assert torch.equal(unclean[inside], out[inside])


def test_views_do_not_copy(arch):
    """The op reads the caller's page buffer and query in place: views at the documented byte offsets."""
    device = device_of(arch)
    (q, q_sf, kv_cache, *_), _ = dg_inputs([100], 2, device, page_pad=128)
    values, scales = dg.fused_kv_views(kv_cache, D)
    base = kv_cache.data_ptr()
    assert values.data_ptr() == base and scales.data_ptr() == base + PAGE * HALF
    assert values.stride() == (PAGE_BYTES + 128, HALF, 1) and scales.stride() == (PAGE_BYTES + 128, 4, 1)
    q_rows, q_scale = dg.fp4_q_views(q, q_sf)
    assert q_rows.data_ptr() == q.data_ptr() and q_scale.data_ptr() == q_sf.data_ptr()
    assert q_rows.shape == (2, H, HALF) and q_scale.shape == (2, H, 4)


def test_errors_name_the_argument():
    (q, q_sf, kv_cache, weights, block_table), _ = dg_inputs([100, 50], 2, "cpu")
    lens = torch.tensor([100, 50], dtype=torch.int32)
    meta = dg.get_paged_mqa_logits_metadata(lens, PAGE, 132)
    call = lambda *a, **kw: dg.fp8_fp4_paged_mqa_logits(*a, **kw)  # noqa: E731
    with pytest.raises(ValueError, match="block_kv"):
        dg.get_paged_mqa_logits_metadata(lens, 32, 132)
    with pytest.raises(RuntimeError, match="context_lens: expected a contiguous int32"):
        dg.get_paged_mqa_logits_metadata(lens.view(2, 1).expand(2, 2), PAGE, 132)
    with pytest.raises(RuntimeError, match="context_lens: expected dtype int32"):
        dg.get_paged_mqa_logits_metadata(lens.long(), PAGE, 132)
    with pytest.raises(ValueError, match="num_sms"):
        dg.get_paged_mqa_logits_metadata(lens, PAGE, 0)
    with pytest.raises(NotImplementedError, match="indices"):
        dg.get_paged_mqa_logits_metadata(lens, PAGE, 132, indices=lens)
    with pytest.raises(TypeError, match="schedule_meta"):
        call((q, q_sf), kv_cache, weights, lens, block_table, object(), 100)
    with pytest.raises(RuntimeError, match=r"schedule_meta: expected a contiguous int32 \[num_ctas \+ 1, 2\]"):
        call((q, q_sf), kv_cache, weights, lens, block_table, meta.view(-1), 100)
    with pytest.raises(RuntimeError, match="schedule_meta: expected dtype int32"):
        call((q, q_sf), kv_cache, weights, lens, block_table, meta.long(), 100)
    with pytest.raises(ValueError, match=r"context_lens: expected \[2\] or \[2, 2\]"):
        call((q, q_sf), kv_cache, weights, lens[:1], block_table, meta, 100)
    with pytest.raises(ValueError, match=r"context_lens: expected \[B\] or \[B, next_n=2\], found \(2, 1\)"):
        call((q, q_sf), kv_cache, weights, lens.view(2, 1), block_table, meta, 100)
    short = r"block_table: expected int32 \[2, pages\] \(a row per sequence of q\), found \(1,"
    with pytest.raises(ValueError, match=short):
        call((q, q_sf), kv_cache, weights, lens, block_table[:1], meta, 100)
    with pytest.raises(ValueError, match=r"block_table: expected int32 \[2, pages\].*found \(2, 2, "):
        call((q, q_sf), kv_cache, weights, lens, block_table.view(2, 2, -1), meta, 100)
    with pytest.raises(ValueError, match=r"max_context_len: expected an int in \[0, 2147483647\], found -5"):
        call((q, q_sf), kv_cache, weights, lens, block_table, meta, -5)
    for width, kind in ((100.0, "float"), (True, "bool")):
        with pytest.raises(TypeError, match=f"max_context_len: expected an int, found {kind}"):
            call((q, q_sf), kv_cache, weights, lens, block_table, meta, width)
    with pytest.raises(ValueError, match="q_sf"):
        call((q, None), kv_cache, weights, lens, block_table, meta, 100)
    with pytest.raises(ValueError, match="logits_dtype: expected torch.float32 or torch.bfloat16, found torch.float16"):
        call((q, q_sf), kv_cache, weights, lens, block_table, meta, 100, logits_dtype=torch.float16)
    with pytest.raises(ValueError, match=r"q: expected \(q_fp4, q_sf\).*FP8 queries are not supported"):
        dg.fp8_paged_mqa_logits(q, kv_cache, weights, lens, block_table, meta, 100)
    with pytest.raises(ValueError, match="kv_cache"):
        call((q, q_sf), kv_cache.view(-1, PAGE, 2, (HALF + 4) // 2), weights, lens, block_table, meta, 100)
    with pytest.raises(ValueError, match="kv_cache: expected each page"):
        call((q, q_sf), kv_cache.transpose(0, 1).contiguous().transpose(0, 1), weights, lens, block_table, meta, 100)


def natural_layout_refused(arch: str) -> None:
    """DeepGEMM's FP4 cache and q_sf are laid out naturally: an arch reading another layout refuses them."""
    (q, q_sf, kv_cache, weights, block_table), _ = dg_inputs([100], 1, device_of(arch))
    lens = torch.tensor([100], dtype=torch.int32, device=device_of(arch))
    meta = dg.get_paged_mqa_logits_metadata(lens, PAGE, 132)
    with pytest.raises(ValueError, match=rf"kv_cache: DeepGEMM's FP4 page buffer .* {arch} reads the mfma_permuted"):
        dg.fp8_fp4_paged_mqa_logits((q, q_sf), kv_cache, weights, lens, block_table, meta, 100)


def test_adapter_compiles_fullgraph(arch):
    device = device_of(arch)
    if mx.layouts.arch_layout(arch) != "natural":
        natural_layout_refused(arch)
        return
    (q, q_sf, kv_cache, weights, block_table), _ = dg_inputs([300, 0, 129], 2, device)
    lens = torch.tensor([300, 0, 129], dtype=torch.int32, device=device)
    meta = dg.get_paged_mqa_logits_metadata(lens, PAGE, 132)
    args = ((q, q_sf), kv_cache, weights, lens, block_table, meta, 300, True)
    torch._dynamo.reset()
    got = torch.compile(dg.fp8_fp4_paged_mqa_logits, fullgraph=True, backend="aot_eager")(*args)
    assert torch.equal(got, dg.fp8_fp4_paged_mqa_logits(*args))


def test_quantizers_write_deepgemms_layout(arch):
    """indexer_k_quant_and_cache fills the fused FP4 pages byte for byte as the layout notes' writer does
    (dg_inputs, from quantize_mxfp4); quantize_query packs q_sf as DeepGEMM's int32 (block i in byte i)."""
    device = device_of(arch)
    if mx.layouts.arch_layout(arch) != "natural":
        with pytest.raises(ValueError, match="kv_cache: DeepGEMM's FP4 page buffer"):
            dg.indexer_k_quant_and_cache(torch.randn(2, D, device=device), torch.zeros(1, 64, 1, HALF + 4,
                                         dtype=torch.uint8, device=device), torch.zeros(2, dtype=torch.int64, device=device))  # fmt: skip
        return
    g = torch.Generator().manual_seed(4)
    keys = torch.randn(150, D, generator=g).to(torch.bfloat16)
    slots = torch.randperm(4 * PAGE, generator=g)[:150]
    cache = torch.zeros(4, PAGE, 1, HALF + 4, dtype=torch.uint8, device=device)
    dg.indexer_k_quant_and_cache(keys.to(device), cache, slots.to(device))
    expected = torch.zeros(4, PAGE * (HALF + 4), dtype=torch.uint8)
    values, scales = mx.quantize_mxfp4(keys)
    for i, slot in enumerate(slots.tolist()):
        page, t = divmod(slot, PAGE)
        expected[page, t * HALF : (t + 1) * HALF] = values[i]
        expected[page, PAGE * HALF + 4 * t : PAGE * HALF + 4 * t + 4] = scales[i]
    assert torch.equal(cache.cpu().view(4, -1), expected)
    q = torch.randn(3, 2, H, D, generator=g)
    q_fp4, q_sf = dg.quantize_query(q.to(device))
    codes, q_bytes = mx.quantize_mxfp4(q)
    assert q_fp4.dtype == torch.int8 and torch.equal(q_fp4.cpu().view(torch.uint8), codes)
    assert torch.equal(q_sf.cpu(), as_int32(q_bytes))
    with pytest.raises(ValueError, match="quant_block_size: expected 32"):
        dg.indexer_k_quant_and_cache(keys.to(device), cache, slots.to(device), quant_block_size=128)
    with pytest.raises(ValueError, match="scale_fmt: expected 'ue8m0'"):
        dg.indexer_k_quant_and_cache(keys.to(device), cache, slots.to(device), scale_fmt="fp32")
