"""tools/compact_timing.py on the host: its --shapes option reads B:CTX:NEXT_N triples and names a bad
one, and its decode case is the shape it names (rows per sequence, windows ending at each context).
CI has no GPU, so this keeps the tool that times the op on DeepGEMM's metadata from drifting unseen."""

from __future__ import annotations

import argparse
import importlib.util

import pytest
import torch
from mxlogits.manifest import manifest
from support.checkout import ROOT


def load_tool():
    spec = importlib.util.spec_from_file_location("compact_timing", ROOT / "tools" / "compact_timing.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_shapes_option():
    tool = load_tool()
    assert tool.parse_shapes("256:8192:2") == [(256, 8192, 2)]
    assert tool.parse_shapes("1:32768:1,256:8192:6") == [(1, 32768, 1), (256, 8192, 6)]
    for bad in ("256:8192", "256:8192:0", "a:1:1", "1:2:3:4", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="B:CTX:NEXT_N"):
            tool.parse_shapes(bad)


def test_decode_case_is_the_shape():
    tool = load_tool()
    case, lens = tool.decode_case(5, 256, 2, "cpu")
    assert lens.shape == (5,) and all(128 <= n <= 256 for n in lens.tolist())
    assert case.row_to_batch.tolist() == [b for b in range(5) for _ in range(2)]
    assert case.local_ends.tolist() == [n - 1 + j for n in lens.tolist() for j in range(2)]


def test_shared_pages_case():
    """--shared-pages: the same lengths and rows, every sequence's table the first sequence's, keys made for
    the longest sequence only."""
    tool = load_tool()
    case, lens = tool.decode_case(5, 256, 2, "cpu")
    shared, shared_lens = tool.decode_case(5, 256, 2, "cpu", shared_pages=True)
    assert shared_lens.tolist() == lens.tolist()
    assert torch.equal(shared.local_ends, case.local_ends) and torch.equal(shared.row_to_batch, case.row_to_batch)
    assert all(torch.equal(row, shared.block_tables[0]) for row in shared.block_tables)
    page = manifest().page_size
    assert shared.kv_cache.shape[0] < case.kv_cache.shape[0]
    assert shared.kv_cache.shape[0] == -(-max(lens.tolist()) // page) + 1  # the longest's pages and a spare
