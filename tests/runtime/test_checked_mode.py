"""The checked mode (plan(validate=True), MXLOGITS_VALIDATE=1): what the fast path trusts — the
caller contract, cu_seq_q, every page id a window reads — is checked on the host before any
launch, and each error names the argument, the row and the value. On every arch present."""

from __future__ import annotations

import mxlogits as mx
import pytest
import torch
from support.cases import assert_matches, make_case, reference, run_op
from support.params import device_of, variant_with
from torch.utils._python_dispatch import TorchDispatchMode

NEG_INF = float("-inf")


def i32(values, arch):
    return torch.tensor(values, dtype=torch.int32, device=device_of(arch))


def checked_plan(case, variant, **kwargs):
    buffers = mx.plan_buffers(case.q.device, case.total_q, case.batch, variant)
    args = dict(local_starts=case.local_starts, row_to_batch=case.row_to_batch, validate=True) | kwargs
    return mx.plan(case.cu_seq_q, case.local_ends, buffers=buffers, **args)


def refused_before_launch(arch, variant, total_q, batch, cu, ends, message, **kwargs):
    """plan(validate=True) raises `message` and the fresh buffers were never written."""
    buffers = mx.plan_buffers(device_of(arch), total_q, batch, variant)
    with pytest.raises(ValueError, match=message):
        mx.plan(cu, ends, buffers=buffers, validate=True, **kwargs)
    assert not buffers.cta_info.any() and not buffers.cta_ranges.any() and buffers.plans.value == 0


# ---- at plan(): cu_seq_q and contracts 2, 3 ------------------------------------------------


def test_cu_seq_q_that_goes_back_is_refused(arch):
    v = variant_with(arch, lambda v: v.q_per_block > 1, "q_per_block > 1")
    ends = i32([100] * 8, arch)
    message = r"^mxlogits: cu_seq_q\[2\] = 4: expected >= cu_seq_q\[1\] = 8 \(row offsets of sequences are"
    refused_before_launch(arch, v, 8, 2, i32([0, 8, 4], arch), ends, message)
    refused_before_launch(arch, v, 8, 2, i32([-1, 4, 8], arch), ends, r"cu_seq_q\[0\] = -1: expected a row offset >= 0")


def test_contract_3_cu_seq_q_past_total_q(arch):
    v = variant_with(arch, lambda v: v.q_per_block > 1, "q_per_block > 1")
    message = r"cu_seq_q\[2\] = 12: expected <= total_q = 10 \(caller contract 3"
    refused_before_launch(arch, v, 10, 2, i32([0, 4, 12], arch), i32([50] * 10, arch), message)


def test_contract_2_a_row_of_no_sequence_with_a_window(arch):
    v = variant_with(arch, lambda v: v.q_per_block == 1, "q_per_block 1")
    message = (
        r"row_to_batch\[2\] = -1: expected a sequence in \[0, 3\) for row 2, whose window \[0, 50\) is not empty "
        r"\(caller contract 2"
    )
    rtb = i32([0, 1, -1], arch)
    refused_before_launch(arch, v, 3, 3, None, i32([10, 20, 50], arch), message, row_to_batch=rtb)
    rtb = i32([0, 1, 3], arch)  # past the plan's batch: the builder would drop the row
    refused_before_launch(arch, v, 3, 3, None, i32([10, 20, 50], arch), r"row_to_batch\[2\] = 3", row_to_batch=rtb)
    w = variant_with(arch, lambda v: v.q_per_block > 1, "q_per_block > 1")
    message = r"local_ends\[9\] = 40: row 9 belongs to no sequence of cu_seq_q \(its rows are \[0, 8\)\)"
    refused_before_launch(arch, w, 10, 2, i32([0, 4, 8], arch), i32([5] * 8 + [0, 40], arch), message)


def test_windows_that_go_back_within_a_tile_are_accepted(arch):
    """No order of windows within a tile is a contract (a tile reads their union): the checked mode
    builds the plan and the op computes each row's own window."""
    v = variant_with(arch, lambda v: v.q_per_block > 1, "q_per_block > 1")
    case = make_case([300], [(0, 40, 300), (0, 0, 90), (0, 120, 121)], v)
    out = run_op(case, v, plan=checked_plan(case, v))
    assert_matches(out, reference(case), v)


def test_rows_of_one_tile_must_name_one_sequence(arch):
    v = variant_with(arch, lambda v: v.q_per_block > 1, "q_per_block > 1")
    message = r"row_to_batch\[1\] = 1: expected row_to_batch\[0\] = 0: rows 0 and 1 share a tile"
    rtb = i32([0, 1], arch)
    refused_before_launch(arch, v, 2, 2, i32([0, 2, 2], arch), i32([100, 101], arch), message, row_to_batch=rtb)


def test_the_environment_variable_turns_it_on_and_false_turns_it_off(arch, monkeypatch):
    v = variant_with(arch, lambda v: v.q_per_block > 1, "q_per_block > 1")
    buffers = mx.plan_buffers(device_of(arch), 8, 2, v)
    cu, ends = i32([0, 8, 4], arch), i32([100] * 8, arch)
    mx.plan(cu, ends, buffers=buffers)  # off by default: the builder clamps, nothing raises
    monkeypatch.setenv("MXLOGITS_VALIDATE", "1")
    with pytest.raises(ValueError, match=r"cu_seq_q\[2\] = 4"):
        mx.plan(cu, ends, buffers=buffers)
    mx.plan(cu, ends, buffers=buffers, validate=False)
    with pytest.raises(TypeError, match=r"validate: expected True, False or None, found str"):
        mx.plan(cu, ends, buffers=buffers, validate="yes")


# ---- at the op: contract 1 and page ids --------------------------------------------------------


def test_contract_2_a_window_past_max_seq_len(arch):
    v = mx.default_variant(arch)
    case = make_case([300, 700], [(0, 0, 300), (1, 0, 700)], v)
    p = checked_plan(case, v)
    out = torch.full((2, 700), NEG_INF, device=device_of(arch))
    message = r"local_ends\[1\] = 700: expected <= max_seq_len = 600 \(caller contract 1"
    with pytest.raises(ValueError, match=message):
        mx.pa_mqa_logits_mxfp4(*case.inputs(), p, 600, out=out)
    assert torch.isneginf(out).all()


def test_a_page_id_a_window_reads_is_checked_one_no_window_reads_is_not(variant):
    rows = [(0, 0, 300), (1, 10, 650), (1, 10, 700)] if variant.q_per_block > 1 else [(0, 0, 300), (1, 10, 650)]
    case = make_case([300, 700], rows, variant, seed=3)
    p = checked_plan(case, variant)
    num_pages = case.kv_cache.shape[0]
    unread = case.block_tables.clone()
    unread[0, 7] = -1  # tokens 448..511 of sequence 0: past its window
    out = mx.pa_mqa_logits_mxfp4(*case.inputs()[:4], unread, case.weights, p, case.max_seq_len)
    assert_matches(out, reference(case), variant)
    case.block_tables[1, 2] = 10**6
    out = torch.full((case.total_q, case.max_seq_len), NEG_INF, device=device_of(variant))
    message = (
        rf"block_tables\[1, 2\] = 1000000: expected a page id in \[0, {num_pages}\) \(the pages of kv_cache\), "
        r"read by row 1 for tokens \[128, 192\) of its window \[10, 650\)"
    )
    with pytest.raises(ValueError, match=message):
        mx.pa_mqa_logits_mxfp4(*case.inputs(), p, case.max_seq_len, out=out)
    assert torch.isneginf(out).all()


# ---- no false alarms, one synchronization ------------------------------------------------------


def test_contract_abiding_inputs_pass_and_give_the_same_logits(variant):
    contexts = [300, 70, 129, 1, 257, 0, 0]
    rows = [(b, 0, c - 1 + j) for b, c in enumerate(contexts[:5]) for j in range(2)] + [(-1, 0, 0)] * 4
    if variant.q_per_block > 1:
        rows = [(0, 100 + 3 * j, 200 + j) for j in range(6)] + [(1, 37, 40 + j) for j in range(5)]
        contexts = [300, 70]
    case = make_case(contexts, rows, variant, seed=4)
    p = checked_plan(case, variant)
    checked = mx.pa_mqa_logits_mxfp4(*case.inputs(), p, case.max_seq_len)
    assert_matches(checked, reference(case), variant)
    fast = checked_plan(case, variant, validate=False)
    assert torch.equal(mx.pa_mqa_logits_mxfp4(*case.inputs(), fast, case.max_seq_len), checked)


class DeviceToHost(TorchDispatchMode):
    """Counts the device -> host reads (copies to the cpu, scalar reads) of the ops run under it."""

    def __init__(self):
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        src = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if src is not None and src.device.type != "cpu":
            to_host = func is torch.ops.aten._to_copy.default and kwargs.get("device") == torch.device("cpu")
            self.reads += to_host or func is torch.ops.aten._local_scalar_dense.default
        return out


def test_one_synchronization_per_call(arch):
    """On a GPU the fast path reads nothing back; the checked mode reads once in plan() and once in the op."""
    if device_of(arch) == "cpu":
        pytest.skip("the host has nothing to synchronize with")
    v = mx.default_variant(arch)
    case = make_case([300, 700], [(0, 0, 300), (1, 0, 700)], v)

    def reads(validate: bool) -> tuple[int, int]:
        buffers = mx.plan_buffers(case.q.device, case.total_q, case.batch, v)
        with DeviceToHost() as in_plan:
            p = mx.plan(case.cu_seq_q, case.local_ends, buffers=buffers, local_starts=case.local_starts,
                        row_to_batch=case.row_to_batch, validate=validate)
        with DeviceToHost() as in_op:
            mx.pa_mqa_logits_mxfp4(*case.inputs(), p, case.max_seq_len)
        return in_plan.reads, in_op.reads

    assert (reads(False), reads(True)) == ((0, 0), (1, 1))


def test_refused_under_cuda_graph_capture(arch):
    if device_of(arch) == "cpu":
        pytest.skip("CUDA graphs need a CUDA device")
    v = mx.default_variant(arch)
    case = make_case([300, 700], [(0, 0, 300), (1, 0, 700)], v)
    buffers = mx.plan_buffers(case.q.device, 2, 2, v)
    mx.plan(None, case.local_ends, buffers=buffers)  # build and load before capturing
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match=r"validate: the checked mode synchronizes with cuda.*CUDA-graph capture"):
        with torch.cuda.graph(graph):
            mx.plan(None, case.local_ends, buffers=buffers, validate=True)
