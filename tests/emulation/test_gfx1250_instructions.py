"""The gfx1250 instructions the host emulation executes, held to AMD's documents on hand-built inputs.
Each expected value follows from the layouts below, transcribed from the CDNA5 ISA reference, never from
the body or the emulation's code:

- v_wmma_scale_f32_32x16x128_f4 (§7.12.2, §7.12.6.2): A (32 x 128) is two 16 x 128 matrices, rows
  0-15 in VGPRs 0-7 and rows 16-31 in VGPRs 8-15; in each, lane l holds row l % 16, VGPRs 0-3 hold
  K 0-31 on lanes 0-15 and K 32-63 on lanes 16-31, VGPRs 4-7 the same plus 64, eight elements to a
  VGPR, K = 8v in bits [3:0]. B (128 x 16) is laid out the same with N for M. D (32 x 16 f32): VGPR i of
  lane l holds row 8 (l // 16) + i % 8 (+ 16 for i >= 8), column l % 16. Scales: A's row r block j is
  byte j of lane r's scale VGPR (the select unused at 32 rows); B's column n block j is byte j of lane
  n (select 0) or 16 + n (select 1); E8M0, 255 NaN.
- v_permlane16_swap_b32: lanes 0-15 of the second operand trade values with lanes 16-31 of the first.
- tensor_load_to_lds (§10.11): the descriptor fields of Tables 62 and 63; element (x, y) of the tile
  read from global + size (x + y stride), zero outside the tensor's extents, written packed from the LDS
  address with pad_amount + 1 dwords skipped each time 8 << pad_interval bytes have been written.

The aiter hardware test of this WMMA (op_tests/opus/device/test_wmma_scale.cu) reads A and B as one
contiguous 64-element K half per lane half. That reading agrees with the ISA's wherever it cannot be
told apart (uniform scales, the same permutation of K on A and B), and the tests below show where it
can: the emulation follows the ISA.
"""

from __future__ import annotations

import numpy as np
import pytest

from .probe import (
    EMULATED, ONE, extreme_codes, one_hot_a, one_hot_b, pack_nibbles, random_operands, run, run_raw, scaled_product,
    unit_scales,
)

pytestmark = EMULATED

IN = np.dtype([("a", "<u4", 16), ("b", "<u4", 8), ("c", "<f4", 16), ("a_scale", "<u4"), ("b_scale", "<u4"),
               ("c_mod", "<i4"), ("a_sel", "<i4"), ("a_fmt", "<i4"), ("b_sel", "<i4"), ("b_fmt", "<i4")])  # fmt: skip
OUT = np.dtype([("d", "<f4", 16)])
LANES = np.arange(32)


def k_of(lane, vgpr, nibble, contiguous_halves=False):
    """The K of nibble `nibble` of VGPR `vgpr` (0-7 within a 16-row half) on `lane`: the ISA's reading, or
    the aiter test's (each lane half one contiguous K half)."""
    if contiguous_halves:
        return 64 * (lane // 16) + 8 * vgpr + nibble
    return 32 * (2 * (vgpr // 4) + lane // 16) + 8 * (vgpr % 4) + nibble


def operand_vgprs(m, contiguous_halves=False):
    """[cases, rows (<= 16 per half), 128] codes of a 16-row half -> [cases, 32 lanes, 8] VGPRs."""
    lanes = np.arange(32)[:, None, None]
    vgprs = np.arange(8)[None, :, None]
    nibbles = np.arange(8)[None, None, :]
    k = k_of(lanes, vgprs, nibbles, contiguous_halves)  # [32, 8, 8]
    rows = np.broadcast_to(lanes % 16, k.shape)
    return pack_nibbles(m[:, rows, k].reshape(m.shape[0], 32, 64))


def wmma(a, b, sa, sb, c=None, b_sel=0, contiguous_halves=False):
    """Executes the instruction on [cases] of A codes [32, 128], B codes [128, 16], scale bytes sa [32, 4]
    and sb [16, 4]; returns D [cases, 32, 16]."""
    cases = a.shape[0]
    lanes = np.zeros((cases, 32), dtype=IN)
    lanes["a"][:, :, :8] = operand_vgprs(a[:, :16], contiguous_halves)
    lanes["a"][:, :, 8:] = operand_vgprs(a[:, 16:], contiguous_halves)
    lanes["b"] = operand_vgprs(b.transpose(0, 2, 1), contiguous_halves)
    lanes["a_scale"] = (sa.astype(np.uint32) << (8 * np.arange(4, dtype=np.uint32))).sum(-1, dtype=np.uint32)
    words = (sb.astype(np.uint32) << (8 * np.arange(4, dtype=np.uint32))).sum(-1, dtype=np.uint32)
    lanes["b_scale"] = 0xFFFFFFFF  # NaN scales on the lanes the select leaves out
    lanes["b_scale"][:, 16 * b_sel : 16 * b_sel + 16] = words
    lanes["b_sel"] = b_sel
    lane_of, reg_of = d_position()
    if c is not None:
        lanes["c"][:, lane_of, reg_of] = c
    return run("gfx1250", "wmma", lanes, OUT)["d"][:, lane_of, reg_of]


def d_position():
    """[32, 16] lane and VGPR of D[r, n]."""
    r, n = np.meshgrid(LANES, np.arange(16), indexing="ij")
    return n + 16 * ((r % 16) // 8), 8 * (r // 16) + r % 8


@pytest.mark.parametrize("one_hot", [one_hot_a, one_hot_b], ids=["a", "b"])
def test_one_hot_per_lane_and_register(one_hot):
    """Every nibble of every VGPR of every lane of A (B) alone at 1.0, against a B (A) that picks its k."""
    a, b, want = one_hot(32, 128, 16)
    np.testing.assert_array_equal(wmma(a, b, *unit_scales(a.shape[0], 32, 128, 16)), want)


@pytest.mark.parametrize("lane", [0, 15, 16, 31])
def test_k_order_across_the_lane_halves(lane):
    """Nibble 0 of VGPR 0 on `lane` is K 0 on lanes 0-15 and K 32 on lanes 16-31 (the ISA), not K 64 (the
    contiguous-half reading): with B's K row 32 (or 0) alone set, only the ISA's K lights D's row."""
    k_isa, k_halves = k_of(lane, 0, 0), k_of(lane, 0, 0, contiguous_halves=True)
    assert (k_isa, k_halves) == ((0, 0) if lane < 16 else (32, 64))
    a = np.zeros((1, 32, 128), dtype=np.int64)
    a[0, lane % 16, k_isa] = ONE
    b = np.zeros((1, 128, 16), dtype=np.int64)
    b[0, k_isa, :] = ONE
    d = wmma(a, b, *unit_scales(1, 32, 128, 16))
    assert (d[0, lane % 16] == 1.0).all() and np.count_nonzero(d) == 16


def test_the_two_k_readings_differ_only_under_block_scales():
    """Packed by the contiguous-half reading, the same A and B give the ISA's product under uniform scales
    (the K permutation cancels, as in aiter's test) and a different one once the blocks' scales differ."""
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 16, (1, 32, 128)), rng.integers(0, 16, (1, 128, 16))
    uniform = unit_scales(1, 32, 128, 16)
    assert np.array_equal(wmma(a, b, *uniform, contiguous_halves=True), scaled_product(a, b, *uniform))
    sa, sb = rng.integers(120, 134, (1, 32, 4)), rng.integers(120, 134, (1, 16, 4))
    assert np.array_equal(wmma(a, b, sa, sb), scaled_product(a, b, sa, sb))
    assert not np.array_equal(wmma(a, b, sa, sb, contiguous_halves=True), scaled_product(a, b, sa, sb))


@pytest.mark.parametrize("b_sel", [0, 1])
def test_scale_bytes_and_b_select(b_sel):
    """Every block's byte distinct per row and column; the lanes B's select leaves out hold NaN scales."""
    rng = np.random.default_rng(b_sel)
    a, b = rng.integers(0, 16, (1, 32, 128)), rng.integers(0, 16, (1, 128, 16))
    sa, sb = rng.integers(116, 139, (1, 32, 4)), rng.integers(116, 139, (1, 16, 4))
    np.testing.assert_array_equal(wmma(a, b, sa, sb, b_sel=b_sel), scaled_product(a, b, sa, sb))


def test_nan_scale_poisons_exactly_its_dot_products():
    rng = np.random.default_rng(7)
    a, b = rng.integers(0, 16, (1, 32, 128)), rng.integers(0, 16, (1, 128, 16))
    sa, sb = unit_scales(1, 32, 128, 16)
    sa, sb = sa.copy(), sb.copy()
    sa[0, 20, 3] = 255
    sb[0, 9, 1] = 255
    d = wmma(a, b, sa, sb)
    nan = np.zeros((32, 16), dtype=bool)
    nan[20, :] = nan[:, 9] = True
    np.testing.assert_array_equal(np.isnan(d[0]), nan)


def test_fp4_codes_at_plus_minus_zero_and_six():
    a, b, want = extreme_codes(32, 128, 16)
    d = wmma(a, b, *unit_scales(a.shape[0], 32, 128, 16))
    assert (d == want[:, None, None]).all()


def test_random_operands_scales_and_accumulator():
    a, b, sa, sb, c = random_operands(11, 16, 32, 128, 16)
    np.testing.assert_array_equal(wmma(a, b, sa, sb, c, b_sel=1), scaled_product(a, b, sa, sb, c))


def test_permlane16_swap():
    """vdst[l] = l, vsrc[l] = 100 + l: afterwards vsrc[0..15] holds vdst[16..31] and vdst[16..31] holds vsrc[0..15]."""
    lanes = np.zeros((1, 32), dtype=[("vdst", "<u4"), ("vsrc", "<u4")])
    lanes["vdst"], lanes["vsrc"] = LANES, 100 + LANES
    out = run("gfx1250", "permlane16_swap", lanes, lanes.dtype)[0]
    low, high = np.arange(16), np.arange(16, 32)
    np.testing.assert_array_equal(out["vdst"][low], low)
    np.testing.assert_array_equal(out["vdst"][high], 100 + low)
    np.testing.assert_array_equal(out["vsrc"][low], high)
    np.testing.assert_array_equal(out["vsrc"][high], 100 + high)


# ---- tensor data mover ---------------------------------------------------------------------------


def descriptor(*, lds=0, global_offset=0, size_log2=2, pad=None, dim0, dim1, tile0, tile1, stride0):
    """The 12 dwords of a two-group descriptor (CDNA5 ISA Tables 62, 63); pad = (interval enc, amount enc)."""
    g0 = [1, lds, global_offset & 0xFFFFFFFF, (global_offset >> 32) | (2 << 30)]
    bits = size_log2 << 16
    if pad:
        bits |= 1 << 20 | pad[0] << 22 | pad[1] << 25
    words = np.zeros(8, dtype=np.uint64)
    fields = [(0, 32, bits), (48, 32, dim0), (80, 32, dim1), (112, 16, tile0), (128, 16, tile1), (160, 48, stride0)]
    value = 0
    for lo, width, v in fields:
        value |= (v & ((1 << width) - 1)) << lo
    g1 = [(value >> (32 * i)) & 0xFFFFFFFF for i in range(8)]
    return np.array(g0 + g1, dtype=np.uint32)


def tdm_expected(global_bytes, *, lds=0, size=4, pad=None, dim0, dim1, tile0, tile1, stride0, lds_bytes):
    """The LDS image (0xFF where nothing was written) of the copy, by the ISA's pseudocode."""
    out = bytearray(b"\xff" * lds_bytes)
    to, stored = lds, 0
    for y in range(tile1):
        for x in range(tile0):
            src = size * (x + y * stride0)
            out[to : to + size] = global_bytes[src : src + size] if x < dim0 and y < dim1 else bytes(size)
            to += size
            stored += size
            if pad and (stored >> 3) >= (1 << pad[0]):
                stored, to = 0, to + 4 * (pad[1] + 1)
    return bytes(out)


def tensor_copy(desc, global_bytes, lds_bytes):
    return run_raw("gfx1250", "tensor_copy", lds_bytes, desc.tobytes() + global_bytes)


def test_tdm_tile_of_a_strided_page_with_padding():
    """A 5 x 24-dword tile of a tensor with rows 40 dwords apart, only 20 x 4 of it inside the tensor, into
    LDS at 64 with 16 bytes of padding every 64: the padding falls mid-row, outside the tensor is zero."""
    rng = np.random.default_rng(0)
    global_bytes = rng.integers(0, 256, 4 * 40 * 6, dtype=np.uint8).tobytes()
    geometry = dict(dim0=20, dim1=4, tile0=24, tile1=5, stride0=40)
    desc = descriptor(lds=64, pad=(3, 3), **geometry)
    got = tensor_copy(desc, global_bytes, 1024)
    assert got == tdm_expected(global_bytes, lds=64, pad=(3, 3), lds_bytes=1024, **geometry)
    plain = tensor_copy(descriptor(lds=64, **geometry), global_bytes, 1024)
    assert plain == tdm_expected(global_bytes, lds=64, lds_bytes=1024, **geometry) and plain != got


def test_tdm_one_wrong_bit_gives_a_wrong_tile():
    """Each field of the descriptor changed by one bit (data size, padding interval and amount, extents,
    tile, stride) changes the tile in LDS."""
    rng = np.random.default_rng(1)
    global_bytes = rng.integers(0, 256, 4 * 40 * 6, dtype=np.uint8).tobytes()
    geometry = dict(dim0=20, dim1=4, tile0=24, tile1=5, stride0=40)
    base = tensor_copy(descriptor(pad=(3, 3), **geometry), global_bytes, 1024)
    for bit in (16, 22, 25, 48, 80, 112, 128, 160):
        desc = descriptor(pad=(3, 3), **geometry)
        desc[4 + bit // 32] ^= np.uint32(1 << (bit % 32))
        assert tensor_copy(desc, global_bytes, 1024) != base, bit


@pytest.mark.parametrize("pad", [False, True])
def test_the_bodys_descriptor_lays_a_page_out_as_its_lds_reads_expect(pad):
    """describe<Pad> of a 16-row slice of 64-byte token rows: row t at byte t * 64 + (t * 64 // 128) * 16
    with padding (lds.h's row_offset, what the B fragments read), packed without."""
    raw = run_raw("gfx1250", "describe", int(pad), np.array([0], "<u4").tobytes() + np.array([0], "<u8").tobytes()
                  + np.array([16, 16], "<u4").tobytes())  # fmt: skip
    desc = np.frombuffer(raw, dtype=np.uint32)
    rng = np.random.default_rng(2)
    global_bytes = rng.integers(0, 256, 16 * 64, dtype=np.uint8).tobytes()
    got = tensor_copy(desc, global_bytes, 2048)
    for t in range(16):
        at = t * 64 + (t * 64 // 128) * 16 if pad else t * 64
        assert got[at : at + 64] == global_bytes[64 * t : 64 * t + 64], t
