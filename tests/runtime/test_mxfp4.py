"""MXFP4 quantization (docs/semantics.md), dequantization and the paged-cache writer."""

from __future__ import annotations

import math

import mxlogits as mx
import pytest
import torch

GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def one_block(values, pad=0.0):
    return torch.tensor(values + [pad] * (32 - len(values)), dtype=torch.float32)


def test_grid_values_round_trip_exactly():
    x = one_block(GRID + [-v for v in GRID[1:]])  # amax 6: X = floor(log2 6) - 2 = 0
    packed, scales = mx.quantize_mxfp4(x)
    assert scales.tolist() == [127]
    assert torch.equal(mx.dequantize_mxfp4(packed, scales), x)


def test_ties_round_half_to_even_and_saturate():
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.9, -0.75, -5.0]
    packed, scales = mx.quantize_mxfp4(one_block(mids, pad=0.0))
    assert scales.tolist() == [127]  # amax 7.9
    got = mx.dequantize_mxfp4(packed, scales)[: len(mids)].tolist()
    assert got == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -1.0, -4.0]


def test_scale_rule():
    x = torch.zeros(4, 32)
    x[0, 0] = 1.0  # floor(log2 1) - 2 = -2  -> e 125
    x[1, 5] = -48.0  # floor(log2 48) = 5     -> e 130, element 48 / 8 = 6
    x[2, 0] = 2.0**-140  # clamps to X = -127 -> e 0
    packed, scales = mx.quantize_mxfp4(x.reshape(128))
    assert scales.tolist() == [125, 130, 0, 0]  # block 3: amax 0 -> e 0
    y = mx.dequantize_mxfp4(packed, scales).reshape(4, 32)
    assert y[0, 0] == 1.0 and y[1, 5] == -48.0 and (y[3] == 0).all()


def test_nibble_order_low_is_even_element():
    x = one_block([1.0, 6.0], pad=0.0)  # codes 2 and 7 at X = 0
    packed, _ = mx.quantize_mxfp4(x)
    assert packed[0].item() == 2 | (7 << 4)


def test_e8m0_decoding():
    e = torch.tensor([0, 1, 127, 254, 255], dtype=torch.uint8)
    v = mx.mxfp4.e8m0_to_float(e)
    assert v[:4].tolist() == [math.ldexp(1, -127), math.ldexp(1, -126), 1.0, math.ldexp(1, 127)]
    assert math.isnan(v[4].item())


def test_nan_scale_and_nonfinite_input():
    packed, scales = mx.quantize_mxfp4(one_block([1.0, float("nan")]))
    assert scales.tolist() == [255]
    assert torch.isnan(mx.dequantize_mxfp4(packed, scales)).all()


def test_random_rows_round_to_a_neighbouring_grid_point():
    """|x / 2^X| < 8: half the widest grid step (4 -> 6) is 2^X, saturation above 6 costs < 2 * 2^X."""
    x = torch.randn(64, 128) * torch.logspace(-3, 3, 64)[:, None]
    y = mx.dequantize_mxfp4(*mx.quantize_mxfp4(x))
    blocks = x.abs().reshape(64, 4, 32)
    unit = 2.0 ** (torch.floor(torch.log2(blocks.amax(-1, keepdim=True))) - 2)
    err = (y - x).abs().reshape(64, 4, 32)
    assert (err <= torch.where(blocks > 6 * unit, 2 * unit, unit)).all()


def test_shape_errors():
    with pytest.raises(ValueError, match=r"last dim that is a multiple of 32, found 48"):
        mx.quantize_mxfp4(torch.zeros(48))
    with pytest.raises(ValueError, match=r"scales: expected shape \(2, 2\)"):
        mx.dequantize_mxfp4(torch.zeros(2, 32, dtype=torch.uint8), torch.zeros(2, 3, dtype=torch.uint8))


def test_fused_buffer_views_share_storage():
    buffer, kv_cache, kv_scale = mx.fused_kv_cache(3)
    assert kv_cache.shape == (3, 64, 64) and kv_scale.shape == (3, 64, 4)
    assert kv_cache.stride(0) == kv_scale.stride(0) == 64 * 68
    kv_cache[1, 2, 3] = 7
    kv_scale[2, 63, 3] = 9
    assert buffer[1, 2 * 64 + 3] == 7 and buffer[2, 4096 + 63 * 4 + 3] == 9


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "separate"])
def test_paged_writer_scatters_slots_and_skips_padding(fused):
    if fused:
        _, kv_cache, kv_scale = mx.fused_kv_cache(4)
    else:
        kv_cache, kv_scale = torch.zeros(4, 64, 64, dtype=torch.uint8), torch.zeros(4, 64, 4, dtype=torch.uint8)
    keys = torch.randn(5, 128)
    packed, scales = mx.quantize_mxfp4(keys)
    slots = torch.tensor([0, 70, -1, 255, 130])
    mx.write_paged_kv(packed, scales, slots, kv_cache, kv_scale)
    for i, s in enumerate(slots.tolist()):
        if s >= 0:
            assert torch.equal(kv_cache[s // 64, s % 64], packed[i])
            assert torch.equal(kv_scale[s // 64, s % 64], scales[i])
    assert int((kv_cache != 0).any(-1).sum()) == 4
    with pytest.raises(ValueError, match=r"slot_mapping: expected slots < 256 \(pages x PAGE\), found 256"):
        mx.write_paged_kv(packed[:1], scales[:1], torch.tensor([256]), kv_cache, kv_scale)
