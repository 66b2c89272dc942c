"""The gfx950 instructions the host emulation executes, held to AMD's documents on hand-built inputs.
Each expected value follows from the layouts below, transcribed from the CDNA4 ISA reference, never from
the body or the emulation's code:

- v_mfma_scale_f32_32x32x64_f8f6f4 with E2M1 A and B (cbsz = blgp = 4): A[i, k] is item k % 32 of
  lane i + 32 (k // 32) (§7.1.5.1), B[k, j] item k % 32 of lane j + 32 (k // 32) (§7.1.4.1), item e
  in bits [4 (e % 8), +4) of the operand's VGPR e // 8 (§7.1.4), E2M1 in the first 4 of its 8 VGPRs
  (§7.1.5); D[i, j] is in lane j + 32 ((i // 4) % 2), VGPR 4 (i // 8) + i % 4 (§7.1.3.1); the scale of
  A's row i and K block b is byte op_sel_a of lane i + 32 b's scale VGPR, B's column j likewise with
  op_sel_b (§7.2.1); a scale byte e is 2^(e - 127), 255 NaN (§7.2); the scales apply to each block's
  dot product (§7.2).
- v_permlane32_swap_b32: the upper 32 lanes of the first operand trade values with the lower 32 of the
  second (§12.8).
"""

from __future__ import annotations

import numpy as np
import pytest

from .probe import (
    E2M1, EMULATED, ONE, extreme_codes, one_hot_a, one_hot_b, pack_nibbles, random_operands, run, scaled_product,
    unit_scales,
)

pytestmark = EMULATED

IN = np.dtype([("a", "<u4", 8), ("b", "<u4", 8), ("c", "<f4", 16), ("scale_a", "<u4"), ("scale_b", "<u4"),
               ("cbsz", "<i4"), ("blgp", "<i4"), ("opsel_a", "<i4"), ("opsel_b", "<i4")])  # fmt: skip
OUT = np.dtype([("d", "<f4", 16)])
FP4 = 4
ROWS = np.arange(32)


def scale_words(selected: np.ndarray, opsel: int) -> np.ndarray:
    """[cases, 64] bytes -> scale VGPRs holding each in byte `opsel` and 255 (NaN) in the other three,
    so a read of the wrong byte shows."""
    words = np.full(selected.shape, 0xFFFFFFFF, dtype=np.uint32)
    return (words & ~np.uint32(0xFF << (8 * opsel))) | (selected.astype(np.uint32) << (8 * opsel))


def mfma(a, b, sa, sb, c=None, opsel_a=0, opsel_b=0):
    """Executes the instruction on [cases] of A codes [32, 64], B codes [64, 32], scale bytes sa [32, 2]
    (row, block) and sb [32, 2] (column, block), C [32, 32]; returns D [cases, 32, 32] (float32)."""
    cases = a.shape[0]
    lanes = np.zeros((cases, 64), dtype=IN)
    # lane l = 32 kb + r holds row (column) r of K block kb
    lanes["a"][:, :, :4] = pack_nibbles(a.reshape(cases, 32, 2, 32).transpose(0, 2, 1, 3).reshape(cases, 64, 32))
    bt = b.transpose(0, 2, 1)  # [column, k]
    lanes["b"][:, :, :4] = pack_nibbles(bt.reshape(cases, 32, 2, 32).transpose(0, 2, 1, 3).reshape(cases, 64, 32))
    lanes["scale_a"] = scale_words(sa.transpose(0, 2, 1).reshape(cases, 64), opsel_a)
    lanes["scale_b"] = scale_words(sb.transpose(0, 2, 1).reshape(cases, 64), opsel_b)
    lanes["cbsz"] = lanes["blgp"] = FP4
    lanes["opsel_a"], lanes["opsel_b"] = opsel_a, opsel_b
    lane_of, reg_of = d_position()
    if c is not None:
        lanes["c"][:, lane_of, reg_of] = c
    out = run("gfx950", "mfma", lanes, OUT)["d"]
    return out[:, lane_of, reg_of]


def d_position():
    """[32, 32] lane and VGPR of D[i, j]."""
    i, j = np.meshgrid(ROWS, ROWS, indexing="ij")
    return j + 32 * ((i // 4) % 2), 4 * (i // 8) + i % 4


@pytest.mark.parametrize("one_hot", [one_hot_a, one_hot_b], ids=["a", "b"])
def test_one_hot_per_lane_and_register(one_hot):
    """Every nibble of every VGPR of every lane of A (B) alone at 1.0, against a B (A) that picks its k."""
    a, b, want = one_hot(32, 64, 32)
    np.testing.assert_array_equal(mfma(a, b, *unit_scales(a.shape[0], 32, 64, 32)), want)


@pytest.mark.parametrize("block", [0, 1])
def test_identity_block_places_b_in_d(block):
    """A is the identity on K block `block`: D[i, j] = B[32 block + i, j], so every (lane, VGPR) of D is
    checked against the documented placement."""
    rng = np.random.default_rng(block)
    a = np.zeros((1, 32, 64), dtype=np.int64)
    a[0, ROWS, 32 * block + ROWS] = ONE
    b = rng.integers(0, 16, (1, 64, 32))
    d = mfma(a, b, *unit_scales(1, 32, 64, 32))
    np.testing.assert_array_equal(d[0], E2M1[b[0, 32 * block : 32 * block + 32]].astype(np.float32))


@pytest.mark.parametrize("opsel_a", range(4))
@pytest.mark.parametrize("opsel_b", range(4))
def test_each_scale_byte_selected_alone(opsel_a, opsel_b):
    """Each lane's scale bytes: the selected one per (row or column, block), NaN in the three others."""
    rng = np.random.default_rng(4 * opsel_a + opsel_b)
    a, b = rng.integers(0, 16, (1, 32, 64)), rng.integers(0, 16, (1, 64, 32))
    sa, sb = rng.integers(118, 137, (1, 32, 2)), rng.integers(118, 137, (1, 32, 2))
    d = mfma(a, b, sa, sb, opsel_a=opsel_a, opsel_b=opsel_b)
    np.testing.assert_array_equal(d, scaled_product(a, b, sa, sb))


def test_nan_scale_poisons_exactly_its_dot_products():
    """E8M0 255 on A's row 5 of block 1 and on B's column 8 of block 0: NaN exactly on row 5 and column 8."""
    rng = np.random.default_rng(9)
    a, b = rng.integers(0, 16, (1, 32, 64)), rng.integers(0, 16, (1, 64, 32))
    sa, sb = np.full((1, 32, 2), 127), np.full((1, 32, 2), 127)
    sa[0, 5, 1] = 255
    sb[0, 8, 0] = 255
    d = mfma(a, b, sa, sb)
    nan = np.zeros((32, 32), dtype=bool)
    nan[5, :] = nan[:, 8] = True
    np.testing.assert_array_equal(np.isnan(d[0]), nan)
    finite = scaled_product(a, b, np.full_like(sa, 127), np.full_like(sb, 127))[0]
    np.testing.assert_array_equal(d[0][~nan], finite[~nan])


def test_fp4_codes_at_plus_minus_zero_and_six():
    a, b, want = extreme_codes(32, 64, 32)
    d = mfma(a, b, *unit_scales(a.shape[0], 32, 64, 32))
    assert (d == want[:, None, None]).all()


def test_random_operands_scales_and_accumulator():
    a, b, sa, sb, c = random_operands(1, 16, 32, 64, 32)
    np.testing.assert_array_equal(mfma(a, b, sa, sb, c), scaled_product(a, b, sa, sb, c))


def test_permlane32_swap():
    """x[l] = l, y[l] = 100 + l: afterwards x[32..63] holds y[0..31] and y[0..31] holds x[32..63]."""
    lanes = np.zeros((1, 64), dtype=[("x", "<u4"), ("y", "<u4")])
    lanes["x"], lanes["y"] = np.arange(64), 100 + np.arange(64)
    out = run("gfx950", "permlane32_swap", lanes, lanes.dtype)[0]
    low, high = np.arange(32), np.arange(32, 64)
    np.testing.assert_array_equal(out["x"][low], low)
    np.testing.assert_array_equal(out["x"][high], 100 + low)
    np.testing.assert_array_equal(out["y"][low], high)
    np.testing.assert_array_equal(out["y"][high], 100 + high)
