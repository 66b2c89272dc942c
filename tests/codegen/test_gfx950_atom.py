"""The gfx950 atom's lane maps and the body's operand addressing (generated/gfx950/atom.h and
operands.h, compiled on the host with g++ and printed), checked against the MFMA's shapes and
against the permuted layout of docs/semantics.md as runtime/layouts.py builds it: every lane reads the value
bytes and the scale byte of the same (row, 32-element block), and the reads of one query row and
of one page cover each byte exactly once. CPU only; no AMD GPU is needed."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter

import mxlogits as mx
import pytest
import torch
from support.checkout import GENERATED

CXX = shutil.which("g++") or shutil.which("clang++")

M = mx.manifest.manifest()
H, D, PAGE = M.heads, M.head_dim, M.page_size
BLOCKS = D // 32  # scale blocks (bytes) of a D row
LANES = 64

PRINT_MAPS = r"""
#include <cstdio>
#include "gfx950/operands.h"
using namespace mxlogits::gfx950;
int main() {
  std::printf("{\"tiles\": [%d, %d, %d], \"scale_bytes\": [%d, %d], \"lanes\": [", operands::kMTiles,
              operands::kNTiles, operands::kKTiles, operands::kQScaleBytes, operands::kKvScaleBytes);
  for (int l = 0; l < atom::kLanes; ++l) {
    std::printf("%s{\"a\": [%d, %d], \"b\": [%d, %d], \"ak\": [", l ? ", " : "", atom::a_row(l), atom::a_block(l),
                atom::b_col(l), atom::b_block(l));
    for (int e = 0; e < atom::kBlock; ++e) std::printf("%s[%d, %d]", e ? ", " : "", atom::a_k(l, e), atom::b_k(l, e));
    std::printf("], \"acc\": [");
    for (int i = 0; i < atom::kAccRegs; ++i) std::printf("%s[%d, %d]", i ? ", " : "", atom::acc_row(l, i), atom::acc_col(l));
    std::printf("], \"q\": [");
    for (int mi = 0; mi < operands::kMTiles; ++mi)
      for (int kt = 0; kt < operands::kKTiles; ++kt)
        std::printf("%s[%d, %d, %d, %d, %d, %d]", mi + kt ? ", " : "", mi, kt, operands::q_offset(mi, kt, l),
                    operands::head_of(mi, l), operands::a_scale_block(kt, l),
                    operands::q_scale_offset(l) + operands::q_scale_select(mi, kt));
    std::printf("], \"kv\": [");
    for (int nt = 0; nt < operands::kNTiles; ++nt)
      for (int kt = 0; kt < operands::kKTiles; ++kt)
        std::printf("%s[%d, %d, %d, %d, %d, %d]", nt + kt ? ", " : "", nt, kt, operands::kv_offset(nt, kt, l),
                    operands::token_of(nt, l), operands::b_scale_block(kt, l),
                    operands::kv_scale_offset(l) + operands::kv_scale_select(nt, kt));
    std::printf("], \"cells\": [");
    for (int mi = 0; mi < operands::kMTiles; ++mi)
      for (int nt = 0; nt < operands::kNTiles; ++nt)
        for (int i = 0; i < atom::kAccRegs; ++i)
          std::printf("%s[%d, %d, %d]", mi + nt + i ? ", " : "", nt, operands::acc_head(mi, l, i), operands::acc_token(nt, l));
    std::printf("]}");
  }
  std::printf("]}\n");
}
"""


@pytest.fixture(scope="module")
def maps(tmp_path_factory) -> dict:
    if CXX is None:
        pytest.skip("no host C++ compiler")
    work = tmp_path_factory.mktemp("gfx950_maps")
    (work / "maps.cpp").write_text(PRINT_MAPS)
    exe = work / "maps"
    build = subprocess.run([CXX, "-std=c++17", "-O0", f"-I{GENERATED}", "-o", str(exe), str(work / "maps.cpp")],
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(run.stdout)


def exactly_once(items) -> Counter:
    counts = Counter(items)
    assert set(counts.values()) == {1}, [k for k, v in counts.items() if v != 1][:8]
    return counts


def test_atom_maps_tile_the_instruction(maps):
    """A is 32 rows x 64 k, B 64 k x 32 columns, D 32 x 32: each element held by exactly one (lane,
    slot), and each lane's 32 elements are one scale block (the block of its scale byte)."""
    lanes = maps["lanes"]
    a = exactly_once((lane["a"][0], k) for lane in lanes for k, _ in lane["ak"])
    b = exactly_once((lane["b"][0], k) for lane in lanes for _, k in lane["ak"])
    assert set(a) == {(r, k) for r in range(32) for k in range(64)} and set(b) == set(a)
    for lane in lanes:
        assert {k // 32 for k, _ in lane["ak"]} == {lane["a"][1]} and {k // 32 for _, k in lane["ak"]} == {lane["b"][1]}
    acc = exactly_once(tuple(cell) for lane in lanes for cell in lane["acc"])
    assert set(acc) == {(r, c) for r in range(32) for c in range(32)}


def test_query_row_reads_match_the_layouts(maps):
    """A query row: value fragments address the natural q (16 bytes of head h, block b) and the
    scale bytes the mfma_permuted q_scale, as mxlogits.to_layout lays it out, for the same (h, b)."""
    assert maps["tiles"] == [H // 32, PAGE // 32, D // 64] and maps["scale_bytes"][0] == (D // 64) * (H // 32)
    code = torch.arange(H * BLOCKS, dtype=torch.int32).reshape(1, H, BLOCKS)  # code h * BLOCKS + b
    permuted = mx.to_layout(code, "q_scale", "mfma_permuted").flatten().tolist()
    values, scales = [], []
    for lane in maps["lanes"]:
        for _mi, _kt, offset, head, block, scale_at in lane["q"]:
            assert offset == head * (D // 2) + block * 16  # natural q: [H, D/2]
            values.extend(range(offset, offset + 16))
            assert permuted[scale_at] == head * BLOCKS + block
            scales.append(scale_at)
    assert set(exactly_once(values)) == set(range(H * D // 2))
    assert set(exactly_once(scales)) == set(range(H * BLOCKS))


def test_page_reads_match_the_layouts(maps):
    """A KV page: each lane's 16 value bytes and its scale byte, read at the body's offsets from the
    mfma_permuted kv_cache and kv_scale that mxlogits.to_layout builds, are those of one token and
    block, the same for both; the page's bytes are read exactly once."""
    value_code = torch.arange(PAGE * D // 2, dtype=torch.int32).reshape(1, PAGE, D // 2)  # token * D/2 + byte
    values = mx.to_layout(value_code, "kv_cache", "mfma_permuted").flatten().tolist()
    scale_code = torch.arange(PAGE * BLOCKS, dtype=torch.int32).reshape(1, PAGE, BLOCKS)  # token * BLOCKS + b
    scales = mx.to_layout(scale_code, "kv_scale", "mfma_permuted").flatten().tolist()
    read_values, read_scales = [], []
    for lane in maps["lanes"]:
        for _nt, _kt, offset, token, block, scale_at in lane["kv"]:
            assert values[offset : offset + 16] == [token * (D // 2) + block * 16 + j for j in range(16)]
            assert scales[scale_at] == token * BLOCKS + block
            read_values.extend(range(offset, offset + 16))
            read_scales.append(scale_at)
    assert set(exactly_once(read_values)) == set(range(PAGE * D // 2))
    assert set(exactly_once(read_scales)) == set(range(PAGE * BLOCKS))


def test_accumulators_fold_to_one_token_per_lane(maps):
    """The accumulators of a page cover (head, token) exactly once; lane l and lane l ^ 32 hold the
    same tokens and together every head, so the swap of lane halves (xlane::swap_halves: lane l < 32
    keeps token tile 0, lane l >= 32 tile 1) leaves every head of token l on lane l."""
    lanes = maps["lanes"]
    exactly_once((head, token) for lane in lanes for _nt, head, token in lane["cells"])
    for l in range(LANES):
        tile = l // 32
        mine = {(h, t) for nt, h, t in lanes[l]["cells"] if nt == tile}
        partner = {(h, t) for nt, h, t in lanes[l ^ 32]["cells"] if nt == tile}
        assert {t for _, t in mine | partner} == {l}
        assert sorted(h for h, _ in mine | partner) == list(range(H))
