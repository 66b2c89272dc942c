"""The gfx1250 atom's lane maps (generated/gfx1250/atom.h) and the LDS fragment reads built on them
(lds.h), compiled on the host with g++ and printed: every operand element, scale and accumulator
cell sits in exactly one (lane, register) place, A and B share one k arrangement, each four VGPRs
of a lane hold exactly one E8M0 block (the hardware applies scale byte j to k block j), the
accumulator is two 16x16 f32 tiles stacked along M, and the fragments read from a padded LDS page
hold the tokens and bytes the maps name. No GPU: the instruction itself is checked by mxlogits-gen --isa."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter

import pytest
from support.checkout import GENERATED

GXX = shutil.which("g++")

PROBE = r"""
#include <cstdio>
#include "gfx1250/lds.h"

using namespace mxlogits;
using namespace mxlogits::gfx1250;

// The stand-in page: byte b of token t's row, scale byte j of token t (the test computes the same).
static uint8_t value_byte(int t, int b) { return uint8_t((t * 131 + b * 17 + 5) & 0xFF); }
static uint8_t scale_byte(int t, int j) { return uint8_t((t * 29 + j * 7 + 1) & 0xFF); }

int main() {
  for (int l = 0; l < atom::kLanes; ++l) {
    for (int v = 0; v < 16; ++v) {
      for (int e = 0; e < 8; ++e)
        std::printf("A %d %d %d %d %d\n", l, v, e, atom::a_row(l, v), atom::operand_k(l, v, e));
      std::printf("Y %d %d %d\n", l, v, atom::operand_byte(l, v));
    }
    for (int v = 0; v < 8; ++v)
      for (int e = 0; e < 8; ++e) std::printf("B %d %d %d %d %d\n", l, v, e, atom::b_col(l), atom::operand_k(l, v, e));
    for (int i = 0; i < 16; ++i) std::printf("D %d %d %d %d\n", l, i, atom::acc_row(l, i), atom::acc_col(l));
    std::printf("S %d %d %d %d\n", l, atom::a_scale_row(l), atom::b_scale_sel(l), atom::b_scale_col(l));
  }
  static lds::Stage stage;
  for (int t = 0; t < kPageSize; ++t) {
    std::printf("R %d %d\n", t, lds::row_offset(t));
    for (int b = 0; b < kRowBytes; ++b) stage.values[lds::row_offset(t) + b] = value_byte(t, b);
    for (int j = 0; j < kRowScales; ++j) stage.scales[t * kRowScales + j] = scale_byte(t, j);
  }
  std::printf("P %d %d %d %d\n", kPageSize, kRowBytes, lds::kValueBytes, int(sizeof(lds::Stage)));
  for (int l = 0; l < atom::kLanes; ++l) {
    for (int nt = 0; nt < kPageSize / 16; ++nt) {
      const atom::BFragment f = lds::b_fragment(stage, nt, l);
      for (int v = 0; v < 8; ++v) std::printf("F %d %d %d %u\n", nt, l, v, f.v[v]);
    }
    for (int pair = 0; pair < kPageSize / 32; ++pair)
      std::printf("C %d %d %u\n", pair, l, lds::b_scales(stage, pair, l));
  }
}
"""


def value_byte(t: int, b: int) -> int:
    return (t * 131 + b * 17 + 5) & 0xFF


def scale_byte(t: int, j: int) -> int:
    return (t * 29 + j * 7 + 1) & 0xFF


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict[str, list[tuple[int, ...]]]:
    if GXX is None:
        pytest.skip("g++ is not installed")
    if not (GENERATED / "gfx1250" / "atom.h").exists():
        pytest.skip("the table has no gfx1250 arch")
    work = tmp_path_factory.mktemp("gfx1250_atom")
    (work / "probe.cpp").write_text(PROBE)
    command = [GXX, "-std=c++17", "-O1", f"-I{GENERATED}", "-o", str(work / "probe"), str(work / "probe.cpp")]
    build = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr[-3000:]
    out = subprocess.run([str(work / "probe")], capture_output=True, text=True, timeout=60, check=True).stdout
    rows: dict[str, list[tuple[int, ...]]] = {}
    for line in out.splitlines():
        tag, *values = line.split()
        rows.setdefault(tag, []).append(tuple(int(v) for v in values))
    return rows


def test_a_holds_every_row_and_k_once(probe):
    cells = Counter((row, k) for _, _, _, row, k in probe["A"])
    assert set(cells) == {(r, k) for r in range(32) for k in range(128)} and set(cells.values()) == {1}


def test_b_holds_every_column_and_k_once(probe):
    cells = Counter((col, k) for _, _, _, col, k in probe["B"])
    assert set(cells) == {(n, k) for n in range(16) for k in range(128)} and set(cells.values()) == {1}


def test_a_is_two_b_shaped_halves_stacked_along_m(probe):
    """A VGPR v + 8 holds the k of B VGPR v for rows 16 higher: the one k arrangement both operands share."""
    a = {(lane, v, e): (row, k) for lane, v, e, row, k in probe["A"]}
    b = {(lane, v, e): (col, k) for lane, v, e, col, k in probe["B"]}
    for (lane, v, e), (col, k) in b.items():
        assert a[lane, v, e] == (col, k)
        assert a[lane, v + 8, e] == (col + 16, k)


def test_each_four_vgprs_of_a_lane_are_one_scale_block_in_memory_order(probe):
    """VGPRs 4i .. 4i + 3 of lane l hold all 32 k of block 2i + l / 16 (the hardware applies scale byte j
    to block j), as 16 consecutive bytes of the row with element 2i in the low nibble."""
    held: dict[tuple[int, int], list[int]] = {}
    for lane, v, e, _, k in probe["A"]:
        held.setdefault((lane, v), []).append(k)
    for lane in range(32):
        for m_half in range(2):
            for i in range(2):
                ks = [k for v in range(8 * m_half + 4 * i, 8 * m_half + 4 * i + 4) for k in held[lane, v]]
                block = 2 * i + lane // 16
                assert ks == list(range(32 * block, 32 * block + 32)), (lane, m_half, i)
    for lane, v, byte in probe["Y"]:
        assert held[lane, v] == list(range(2 * byte, 2 * byte + 8))
        assert byte % 16 == 4 * (v % 4)  # a block starts 16-byte aligned


def test_accumulator_is_two_16x16_tiles(probe):
    cells = Counter((row, col) for _, _, row, col in probe["D"])
    assert set(cells) == {(r, n) for r in range(32) for n in range(16)} and set(cells.values()) == {1}
    for lane, i, row, col in probe["D"]:
        assert col == lane % 16 and row // 16 == i // 8 and row % 16 == 8 * (lane // 16) + i % 8


def test_scale_lanes(probe):
    """A: lane r carries row r's four E8M0 bytes; B: select s reads lanes 16 s .. 16 s + 15, column = lane % 16."""
    assert sorted(r for _, r, _, _ in probe["S"]) == list(range(32))
    selected = Counter((sel, col) for _, _, sel, col in probe["S"])
    assert selected == Counter({(s, n): 1 for s in range(2) for n in range(16)})
    assert all(sel == lane // 16 for lane, _, sel, _ in probe["S"])


def test_lds_rows_are_padded_and_16_byte_aligned(probe):
    (page, row_bytes, value_bytes, stage_bytes), = probe["P"]
    offsets = [o for _, o in sorted(probe["R"])]
    spans = [range(o, o + row_bytes) for o in offsets]
    assert all(o % 16 == 0 for o in offsets)
    assert len({b for s in spans for b in s}) == page * row_bytes  # no overlap
    assert offsets == [t * row_bytes + (t * row_bytes // 128) * 16 for t in range(page)]
    assert value_bytes == page * row_bytes + page * row_bytes // 128 * 16
    assert stage_bytes == value_bytes + page * 4


def test_b_fragments_read_from_lds_hold_what_the_maps_name(probe):
    b = {(lane, v, e): (col, k) for lane, v, e, col, k in probe["B"]}
    for nt, lane, v, word in probe["F"]:
        for e in range(8):
            col, k = b[lane, v, e]
            byte = value_byte(16 * nt + col, k // 2)
            assert (word >> (4 * e)) & 0xF == (byte >> (4 * (k % 2))) & 0xF, (nt, lane, v, e)


def test_b_scales_read_from_lds_are_each_lanes_token(probe):
    sel = {lane: (s, col) for lane, _, s, col in probe["S"]}
    for pair, lane, word in probe["C"]:
        s, col = sel[lane]
        token = 16 * (2 * pair + s) + col
        assert word == sum(scale_byte(token, j) << (8 * j) for j in range(4)), (pair, lane)
