"""tools/plan_timing.py on the host: the windows it builds from a bench shape are that shape's (rows per
sequence, starts, ends, sequences), and its timer plans them; CI has no GPU, so this keeps the tool
from drifting from the bench's shapes unseen."""

from __future__ import annotations

import importlib.util

import mxlogits as mx
import pytest
import torch
from mxlogits.bench.shapes import TABLES
from support.checkout import ROOT


def load_tool():
    spec = importlib.util.spec_from_file_location("plan_timing", ROOT / "tools" / "plan_timing.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


@pytest.mark.parametrize("table", ["decode_mtp2", "prefill_causal", "deepgemm_next6"])
def test_windows_are_the_shapes_and_plan(table):
    tool = load_tool()
    device = torch.device("cpu")
    variant = mx.variant_for(device, 4 if table.startswith("prefill") else 2)
    shape = TABLES[table](16, 8)[-1]
    w = tool.windows(shape, device)
    cu = w["cu_seq_q"].tolist()
    assert cu[0] == 0 and cu[-1] == shape.total_q
    assert [cu[b + 1] - cu[b] for b in range(shape.batch)] == shape.rows_per_sequence()
    assert list(zip(w["row_to_batch"].tolist(), w["local_starts"].tolist(), w["local_ends"].tolist())) == list(shape.rows)
    assert tool.plan_us(shape, variant, device, 2) > 0


def test_profile_plans_every_shape_twice():
    """--profile (the A/B's command): each shape of the tables planned twice, nothing timed."""
    tool = load_tool()
    device = torch.device("cpu")
    shapes = len(list(tool.table_plans("decode_mtp2,deepgemm_next6", device)))
    assert shapes == len(TABLES["decode_mtp2"](1, 8)) + len(TABLES["deepgemm_next6"](1, 8))
    assert tool.profile("decode_mtp2", device) == 2 * len(TABLES["decode_mtp2"](1, 8))
