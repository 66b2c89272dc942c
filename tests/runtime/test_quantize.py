"""The device MXFP4 quantizer (mx.quantize_rows, mx.quantize_into_cache) on every present arch and through
each AMD arch's emulation (the GPU kernel on the host): bit-exact with quantize_mxfp4 on random rows of
every input dtype over 140 binades, on ties at every midpoint, subnormals, signed zeros, tiny negatives,
the largest values and blocks holding NaN or infinities; the cache path writes exactly the slots given
(padding and slots past the cache skipped) through the views of a fused page buffer; errors name the
argument."""

from __future__ import annotations

import mxlogits as mx
import pytest
import torch
from support.params import EMULATED_ARCHES, PRESENT_ARCHES, arch_params, device_of, emulated_params, unwrap

D = 128
MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


@pytest.fixture(params=arch_params(PRESENT_ARCHES) + emulated_params(EMULATED_ARCHES))
def any_arch(request) -> str:
    return unwrap(request)


def hard_rows(g: torch.Generator) -> torch.Tensor:
    """Rows (fp32, [n, D]) at the quantizer's edges; each block of 32 is one case."""
    rows = [torch.randn(64, D, generator=g) * torch.exp2(torch.randint(-130, 120, (64, 1), generator=g).float())]
    ties = torch.tensor(MIDPOINTS + tuple(-m for m in MIDPOINTS) + (6.0, 4.0, 3.0, 0.5), dtype=torch.float32)
    block = torch.cat([ties, torch.full((32 - ties.numel(),), 0.125)])  # amax 6: X = 0, ties on the grid as given
    rows.append(torch.stack([block * 2.0**e for e in (-120, -3, 0, 7, 100)]).repeat(1, D // 32))
    special = torch.zeros(8, D)
    special[0, 3] = float("nan")
    special[1, 40] = float("inf")
    special[2, 70] = -float("inf")
    special[2, 71] = 3.0e38
    special[3, :32] = -0.0
    special[4, :32] = torch.tensor(1.0e-45).repeat(32) * torch.arange(32)  # subnormals
    special[5, :32] = -1.0e-40
    special[5, 0] = 1.0e30  # tiny negatives beside a large amax
    special[6, :] = 3.4028234e38
    special[7, 0], special[7, 1], special[7, 2] = float("nan"), 7.0, 0.01  # 0.01: code 0 at X = -2, 7 at -127
    rows.append(special)
    return torch.cat(rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_rows_bit_exact_with_the_reference(any_arch, dtype):
    g = torch.Generator().manual_seed(7)
    x = hard_rows(g).to(dtype)
    codes, scales = mx.quantize_rows(x.to(device_of(any_arch)))
    ref_codes, ref_scales = mx.quantize_mxfp4(x)
    assert torch.equal(codes.cpu(), ref_codes) and torch.equal(scales.cpu(), ref_scales)
    padded = torch.zeros(x.shape[0], D + 1, dtype=dtype)
    padded[:, 1:] = x  # rows one value off 16-byte alignment: the unaligned loads
    c2, s2 = mx.quantize_rows(padded.to(device_of(any_arch))[:, 1:])
    assert torch.equal(c2.cpu(), ref_codes) and torch.equal(s2.cpu(), ref_scales)
    q = x[:72].view(2, 9, 4, D)  # leading dims kept; a strided view of rows copied
    c3, s3 = mx.quantize_rows(q[:, :, 1].to(device_of(any_arch)))
    assert torch.equal(c3.cpu(), ref_codes[:72].view(2, 9, 4, D // 2)[:, :, 1])
    assert torch.equal(s3.cpu(), ref_scales[:72].view(2, 9, 4, D // 32)[:, :, 1])


def test_into_cache_writes_exactly_its_slots(any_arch):
    device = device_of(any_arch)
    if mx.layouts.arch_layout(any_arch) != "natural":
        buffer, kv, ks = mx.fused_kv_cache(4, device)
        with pytest.raises(RuntimeError, match="kv_cache: expected shape"):
            mx.quantize_into_cache(torch.randn(2, D, device=device), torch.tensor([0, 1], device=device),
                                   *mx.fused_views(buffer, mx.layouts.arch_layout(any_arch)))  # fmt: skip
        return
    g = torch.Generator().manual_seed(3)
    pages = 6
    buffer, kv_cache, kv_scale = mx.fused_kv_cache(pages, device)
    buffer.copy_(torch.randint(0, 256, buffer.shape, generator=g, dtype=torch.uint8))
    before = buffer.clone()
    x = torch.randn(40, D, generator=g).to(torch.bfloat16)
    slots = torch.randperm(pages * 64, generator=g)[:40]
    slots[3], slots[7], slots[11] = -1, pages * 64, pages * 64 + 5  # padding, and two past the cache
    mx.quantize_into_cache(x.to(device), slots.to(device), kv_cache, kv_scale)
    ref = before.cpu()
    ref_kv, ref_ks = mx.split_fused_pages(ref)
    live = (slots >= 0) & (slots < pages * 64)
    codes, scales = mx.quantize_mxfp4(x[live])
    mx.write_paged_kv(codes, scales, slots[live], ref_kv, ref_ks)
    assert torch.equal(buffer.cpu(), ref)


def test_errors_name_the_argument():
    x = torch.randn(4, D)
    _, kv, ks = mx.fused_kv_cache(2)
    with pytest.raises(RuntimeError, match=r"x: expected \[rows, D\] with D a positive multiple of 32"):
        mx.quantize_rows(torch.randn(4, 48))
    with pytest.raises(RuntimeError, match="x: expected dtype float32, bfloat16 or float16, found Int"):
        mx.quantize_rows(torch.ones(4, D, dtype=torch.int32))
    with pytest.raises(RuntimeError, match=r"slot_mapping: expected dtype int64, found Int"):
        mx.quantize_into_cache(x, torch.zeros(4, dtype=torch.int32), kv, ks)
    with pytest.raises(RuntimeError, match=r"slot_mapping: expected a contiguous int64 \[4\] tensor"):
        mx.quantize_into_cache(x, torch.zeros(3, dtype=torch.int64), kv, ks)
    with pytest.raises(RuntimeError, match=r"x: expected \[N, 128\] \(the table's head_dim\)"):
        mx.quantize_into_cache(torch.randn(4, 64), torch.zeros(4, dtype=torch.int64), kv, ks)
    with pytest.raises(RuntimeError, match="kv_scale: expected 2 pages"):
        mx.quantize_into_cache(x, torch.zeros(4, dtype=torch.int64), kv, ks[:1])
