"""python -m mxlogits bench on the host: docs/performance.md's counts on a hand-computed case, the tables' shapes,
the variant choice, the correctness guard, and a quick run that writes its JSON."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import time

import mxlogits as mx
import pytest
import torch
from mxlogits.__main__ import main
from mxlogits.bench import plots, rows, tables, timing
from mxlogits.bench.limits import Limits
from mxlogits.bench.shapes import TABLES, Shape, Work, count_work
from mxlogits.manifest import manifest, variant_for_rows

# Two sequences: three rows over a 10-token context, then a row and an empty row over 5 tokens.
HAND = Shape("t", "hand", (10, 5), ((0, 0, 8), (0, 0, 9), (0, 2, 10), (1, 0, 5), (1, 3, 3)))


def test_counts_match_a_hand_computation():
    # H=2, D=64: one D row is 32 value bytes + 2 scale bytes = 34 bytes; cells 8 + 9 + 8 + 5 + 0 = 30.
    # q_per_block 2: tiles {r0, r1} union [0, 9), {r2} [2, 10), {r3, r4} [0, 5) (r4 is empty) -> 22 KV tokens.
    assert count_work(HAND, 2, heads=2, head_dim=64) == Work(
        cells=30, flops=2 * 2 * 64 * 30, bytes=34 * 22 + 34 * 2 * 5 + 4 * 2 * 5 + 4 * 30
    )
    # q_per_block 1: every row is a tile -> 8 + 9 + 8 + 5 KV tokens.
    assert count_work(HAND, 1, heads=2, head_dim=64).bytes == 34 * 30 + 34 * 2 * 5 + 4 * 2 * 5 + 4 * 30
    # D = 128: docs/performance.md's 68 bytes per KV token and per (row, head).
    assert count_work(HAND, 1, heads=64, head_dim=128).bytes == 68 * 30 + 68 * 64 * 5 + 4 * 64 * 5 + 4 * 30


def test_roofline_is_the_slower_of_memory_and_compute():
    limits = Limits(bw=4e12, peak=1e15, source="")
    assert rows.roofline_seconds(Work(cells=0, flops=10**12, bytes=8 * 10**12), limits) == 2.0  # memory-bound
    assert rows.roofline_seconds(Work(cells=0, flops=3 * 10**15, bytes=4 * 10**12), limits) == 3.0  # compute-bound


def test_tables_have_perf_md_shapes():
    mtp1 = TABLES["decode_mtp1"](1, 132)
    pairs = [(s.batch, sum(c == 25_000 for c in s.contexts)) for s in mtp1 if s.label.startswith("seqs")]
    assert pairs == [(1, 1), (8, 8), (32, 32), (128, 128), (32, 4), (128, 16), (132, 16), (263, 16)]
    uniform = [(s.batch, s.max_seq_len) for s in mtp1 if s.label.startswith("B=")]
    assert uniform == [(b, c) for b in (1, 32, 128) for c in (8192, 32768, 65536)]
    assert all(s.total_q == s.batch and all(e == s.contexts[b] for b, _, e in s.rows) for s in mtp1)
    (mtp4,) = [s for s in TABLES["decode_mtp4"](1, 132) if s.label == "seqs=32 long=4"]
    assert [e for b, _, e in mtp4.rows if b == 0] == [mtp4.contexts[0] - 4 + 1 + j for j in range(4)]
    for shape in TABLES["prefill_causal"](1, 132):
        counts = shape.rows_per_sequence()
        assert shape.total_q == 16_384 and min(counts) >= 800 and list(shape.contexts) == counts
    fresh = [(s.batch, s.max_seq_len) for s in TABLES["prefill_fresh"](1, 132)]
    assert fresh == [(1, 16_384), (2, 8192), (4, 4096)]
    for shape in TABLES["prefill_chunked"](1, 132):
        assert shape.rows_per_sequence() == [2048] * shape.batch
        assert [e for b, _, e in shape.rows if b == 0] == list(range(25_001, 27_049))


def test_variant_choice_per_table():
    default = mx.default_variant("cpu")
    assert rows.pick_variant("decode_mtp1", "cpu", None) == default
    # cpu has no q_per_block 2: a sequence's two rows as one 4-row tile, as mxlogits.variant_for gives them
    assert rows.pick_variant("decode_mtp2", "cpu", None) == mx.variant_for("cpu", 2)
    assert mx.variant_for("cpu", 2).q_per_block == 4
    for table, arch in itertools.product(TABLES, manifest().arches):  # what a model with the table's rows gets
        n = max(TABLES[table](1, 132)[0].rows_per_sequence())
        assert rows.pick_variant(table, arch, None) == variant_for_rows(arch, n), (table, arch)
    sm90 = [rows.pick_variant(t, "sm90", None).q_per_block for t in ("decode_mtp1", "decode_mtp2", "deepgemm_next6")]
    assert sm90 == [1, 2, 4]
    grouped = rows.pick_variant("prefill_fresh", "cpu", None)
    assert grouped.q_per_block == 4
    assert grouped.block_k == min(v.block_k for v in mx.variants("cpu") if v.q_per_block == 4)
    assert rows.pick_variant("decode_mtp4", "cpu", "qlen4_kv256").name == "qlen4_kv256"
    with pytest.raises(ValueError, match="unknown variant"):
        rows.pick_variant("decode_mtp1", "cpu", "nope")


def test_guard_refuses_to_time_a_wrong_kernel(monkeypatch):
    shape = TABLES["decode_mtp1"](16, 8)[0]
    monkeypatch.setattr(rows, "pa_mqa_logits_mxfp4", lambda *args, out, **kwargs: out.zero_())
    limits = Limits(1e9, 1e9, "")
    with pytest.raises(rows.BenchError, match="outside .* not timing a wrong kernel"):
        rows.bench_row(shape, mx.default_variant("cpu"), torch.device("cpu"), limits, 1, guard=True)


@pytest.mark.parametrize("device, checked_per_table", [("cpu", 1), ("cuda", None)])
def test_every_gpu_row_is_checked_before_it_is_timed(monkeypatch, capsys, device, checked_per_table):
    # On a GPU the reference is fast and large rows show errors small ones do not (the fp8 path's
    # accumulation): every row is checked; on the host, each table's row with the fewest cells.
    guards = []

    def fake_row(shape, variant, dev, limits, repeats, *, guard, peer=None):
        guards.append((shape.table, guard))
        return {"table": shape.table, "shape": shape.label, "variant": variant.name, "num_ctas": 1, "plan_us": 1.0,
                "op_us": 1.0, "host_us": 1.0, "tflops": 1.0, "tbps": 1.0, "roofline_us": 0.01, "roofline_pct": 1.0,
                "checked": guard}  # fmt: skip

    monkeypatch.setattr(tables, "bench_row", fake_row)
    v = mx.default_variant("cpu")
    rows = [(shape, v) for table in ("decode_mtp1", "decode_mtp4") for shape in TABLES[table](16, 8)]
    tables.run_tables(rows, torch.device(device), Limits(1e9, 1e9, ""), 1)
    capsys.readouterr()
    for table in ("decode_mtp1", "decode_mtp4"):
        flags = [g for t, g in guards if t == table]
        assert sum(flags) == (checked_per_table or len(flags)) and len(flags) > 1


def test_quick_run_writes_json(tmp_path):
    path = tmp_path / "out.json"
    args = ["bench", "--device", "cpu", "--quick", "--tables", "decode_mtp1", "--json", str(path)]
    result = subprocess.run(
        [sys.executable, "-m", "mxlogits", *args], capture_output=True, text=True, timeout=90, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "quick: token counts and prefill rows are divided by 16" in result.stdout
    doc = json.loads(path.read_text())
    for key in ("device", "torch", "bw_tbps", "peak_tflops", "limits_source", "date", "git_commit", "summary"):
        assert key in doc
    assert doc["source_hash"] == manifest().arches["cpu"].source_hash  # the code that ran, git or not
    assert doc["quick"] and doc["torch"] == torch.__version__ and doc["device_type"] == "cpu"
    expected = TABLES["decode_mtp1"](16, mx.default_variant("cpu").cta_resident)
    assert [r["shape"] for r in doc["results"]] == [s.label for s in expected]
    assert sum(r["checked"] for r in doc["results"]) == 1
    bw, peak = doc["bw_tbps"] * 1e12, doc["peak_tflops"] * 1e12
    for r in doc["results"]:
        assert r["table"] == "decode_mtp1" and r["variant"] == mx.default_variant("cpu").name
        assert math.isclose(r["roofline_us"], max(r["bytes"] / bw, r["flops"] / peak) * 1e6, rel_tol=1e-9)
        assert math.isclose(r["roofline_pct"], 100 * r["roofline_us"] / r["op_us"], rel_tol=1e-9)
        assert math.isclose(r["tflops"], r["flops"] / r["op_us"] / 1e6, rel_tol=1e-9)
        assert math.isclose(r["tbps"], r["bytes"] / r["op_us"] / 1e6, rel_tol=1e-9)
        assert r["host_us"] > 0 and r["plan_us"] > 0
        assert r["host_us"] == r["op_us"]  # on the host a call is synchronous: timed once, not twice
    summary = doc["summary"]["decode_mtp1"]
    assert summary["rows"] == len(expected)
    op_us = sum(r["op_us"] for r in doc["results"])
    assert math.isclose(summary["op_us_total"], op_us, rel_tol=1e-9)
    roofline_us = sum(r["roofline_us"] for r in doc["results"])
    assert math.isclose(summary["roofline_pct_table"], 100 * roofline_us / op_us, rel_tol=1e-9)
    assert summary["roofline_pct_min"] <= summary["roofline_pct_table"] <= summary["roofline_pct_max"]


def test_unknown_table_and_missing_matplotlib_are_clear_errors(capsys, tmp_path, monkeypatch):
    for argv in (["--help"], ["bench", "--help"]):  # help texts are %-formatted by argparse
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
    assert main(["bench", "--device", "cpu", "--tables", "decode"]) == 2
    assert "unknown ['decode']" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed: importing it raises
    assert main(["bench", "--device", "cpu", "--plot", str(tmp_path / "p.png")]) == 2
    assert "pip install 'mxlogits[bench]'" in capsys.readouterr().err


def test_plot_gives_each_table_room_for_its_rows(tmp_path):
    """--plot: one panel per table, each as tall as its rows need (17 decode MTP 1 rows once
    overlapped their labels in a panel the size of the 3-row ones)."""
    from PIL import Image  # matplotlib's own dependency; matplotlib is in the test extra

    results = [{"table": f"t{t}", "shape": f"row {i}", "variant": "v", "roofline_pct": 5.0 * (i + 1)}
               for t, n in enumerate((17, 3)) for i in range(n)]  # fmt: skip
    plots.plot(results, tmp_path / "p.png")
    image = Image.open(tmp_path / "p.png").convert("L")
    width, height = image.size
    pixels = image.load()
    # An axes frame's top and bottom edges are the only rows that are dark across most of the width.
    edges = [y for y in range(height) if sum(pixels[x, y] < 80 for x in range(width)) > 0.6 * width]
    frames = [y for i, y in enumerate(edges) if i == 0 or y - edges[i - 1] > 2]  # one per line
    assert len(frames) == 4, frames
    first, second = frames[1] - frames[0], frames[3] - frames[2]
    assert first > 2.5 * second


def test_host_timing_is_each_calls_wall_time(monkeypatch):
    """On the host call_seconds times each call alone, after one untimed call of each (GPU timing,
    the L2 flush and host_seconds run on the H200: bench/RESULTS.md)."""
    calls = []
    monkeypatch.setattr(timing.time, "perf_counter", lambda: float(len(calls)))
    cpu = torch.device("cpu")
    assert timing.call_seconds([lambda: calls.append(1), lambda: calls.append(1)], cpu, 3) == [1.0, 1.0, 1.0]
    assert len(calls) == 2 + 3  # one untimed call each first


def test_alternated_medians_time_each_call_in_turn():
    """Two calls timed in turn, each once untimed first: each median is its own call's."""
    order = []

    def fast():
        order.append("fast")

    def slow():
        order.append("slow")
        time.sleep(0.002)

    fast_s, slow_s = timing.alternated_medians([fast, slow], torch.device("cpu"), 5)
    assert order == ["fast", "slow"] * 6
    assert slow_s >= 0.002 > fast_s
