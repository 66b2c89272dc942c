"""bench --peer on the host, against tests/support/fp8_peer (DeepGEMM's FP8 call shape in torch): the
peer runs the row's own problem (its logits agree with the op's on the paged and the non-paged path),
a shape the peer refuses is reported on its row, and a peer that is not installed is a clear error."""

from __future__ import annotations

import types

import mxlogits as mx
import pytest
import torch
from mxlogits.__main__ import main
from mxlogits.bench import peer, report, rows
from mxlogits.bench.limits import Limits
from mxlogits.bench.shapes import TABLES, Shape, _decode, _prefill

from tests.support import fp8_peer

CPU, LIMITS = torch.device("cpu"), Limits(1e9, 1e9, "")
DECODE = _decode("decode_mtp2", "three", [100, 70, 130], 2)
PREFILL = _prefill("prefill_chunked", "two", [40, 10], [8, 6])


def test_decode_shapes_are_recognised_by_their_windows():
    assert peer.decode_next_n(DECODE) == 2
    assert peer.decode_next_n(_decode("decode_mtp1", "one", [5, 9], 1)) == 1
    assert peer.decode_next_n(PREFILL) is None  # rows grow one a row: not DeepGEMM's paged decode
    uneven = Shape("decode_mtp2", "uneven", (9, 9), ((0, 0, 8), (0, 0, 9), (1, 0, 9)))
    assert peer.decode_next_n(uneven) is None
    for shape in TABLES["deepgemm_next6"](16, 132):
        assert peer.decode_next_n(shape) == 6


@pytest.mark.parametrize("shape", [DECODE, PREFILL], ids=["paged", "non-paged"])
def test_the_peer_computes_the_rows_own_logits(shape):
    v = rows.pick_variant(shape.table, "cpu", None)
    r = rows.bench_row(shape, v, CPU, LIMITS, 1, peer=fp8_peer)
    # FP8 keys round the MXFP4 values (3 mantissa bits, a per-token scale): close, not equal
    assert 0 < r["peer_diff"] < peer.AGREE / 10
    assert r["peer_op_us"] > 0 and (r["peer_meta_us"] is None) == (shape is PREFILL)
    assert ("compact_op_us" in r) == (shape is DECODE)  # the adapter's path, timed where DeepGEMM's is paged
    if shape is DECODE:  # alternated with the op on the plan: their ratio, printed
        assert r["compact_over_plan"] > 0 and f"{r['compact_over_plan']:.3f}" in report.line(r)
    assert f"{r['peer_op_us'] / r['op_us']:7.2f}" in report.line(r)
    summary = report.summarize([r])[shape.table]
    assert summary["peer_rows"] == 1 and summary["speedup_geomean"] == pytest.approx(r["peer_op_us"] / r["op_us"])


def test_a_shape_the_peer_refuses_is_reported_on_its_row():
    def refuse(*args, **kwargs):
        # DeepGEMM names the header of a failed assert by its build tree's path: the row keeps the file name
        raise RuntimeError("Assertion error (/root/DeepGEMM/csrc/apis/../jit_kernels/impls/attention.hpp:301): "
                           "next_n == 1 or next_n == 2\nstack")

    refusing = types.SimpleNamespace(**{**vars(fp8_peer), "fp8_paged_mqa_logits": refuse})
    r = rows.bench_row(DECODE, mx.default_variant("cpu"), CPU, LIMITS, 1, peer=refusing)
    assert r["peer_error"] == "Assertion error (attention.hpp:301): next_n == 1 or next_n == 2"
    assert "peer_op_us" not in r and "peer: Assertion error" in report.line(r)
    assert "peer_rows" not in report.summarize([r])[DECODE.table]


def test_a_missing_peer_is_a_clear_error(capsys):
    assert main(["bench", "--device", "cpu", "--quick", "--tables", "decode_mtp1", "--peer", "deepgemm"]) == 2
    err = capsys.readouterr().err
    assert "--peer deepgemm: cannot import deep_gemm" in err and "tools/build_deepgemm.sh" in err
    assert main(["bench", "--device", "cpu", "--peer", "deepgemm", "--sweep"]) == 2
    assert "no --tune or --sweep with it" in capsys.readouterr().err
