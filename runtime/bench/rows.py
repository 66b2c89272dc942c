"""One bench row: a shape of a table planned and run on one variant and grid, checked against the
fp32 reference before it is timed, with the counts of docs/performance.md and the roofline (roofline time =
max(bytes / BW, flops / PEAK)); and which variant each table runs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from types import ModuleType

import torch

from ..manifest import MqaLogitsVariant, default_variant, fewest_tiles, manifest, resolve_variant, tolerance, variants
from ..op import pa_mqa_logits_mxfp4
from ..plan import block_table_width, plan, plan_buffers
from ..reference import reference_logits
from .inputs import Problem, make_problem, set_bytes
from .limits import Limits
from .peer import peer_row
from .shapes import Shape, Work, count_work, table_rows_per_sequence
from .timing import call_seconds, host_seconds

GUARD_ROWS = 8  # rows of a shape checked against the fp32 reference before it is timed
MAX_SETS = 64  # input sets a timed call rotates through, at most


class BenchError(RuntimeError):
    """The op disagrees with the reference: no timing of a wrong kernel is reported."""


def table_variant(table: str, default: MqaLogitsVariant, own: Sequence[MqaLogitsVariant]) -> MqaLogitsVariant:
    """Of an arch's variants `own`: the one a caller gets for the table's rows per sequence
    (manifest.fewest_tiles, as mxlogits.variant_for), so the bench times what a model runs."""
    return fewest_tiles(table_rows_per_sequence(table), default, own)


def pick_variant(table: str, arch: str, override: str | None) -> MqaLogitsVariant:
    """The table's variant: the override, else table_variant of the arch's compiled variants."""
    if override:
        return resolve_variant(override, arch)
    return table_variant(table, default_variant(arch), variants(arch))


def roofline_seconds(work: Work, limits: Limits) -> float:
    return max(work.bytes / limits.bw, work.flops / limits.peak)


def _num_sets(shape: Shape, work: Work, device: torch.device) -> int:
    """Input sets so that the calls between two uses of one set stream about 2x the L2 through it,
    within a quarter of the free device memory. The host gets one (its caches are not the point)."""
    if device.type != "cuda":
        return 1
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    free, _ = torch.cuda.mem_get_info(device)
    wanted = math.ceil(2 * l2 / max(work.bytes, 1))
    return max(1, min(wanted, MAX_SETS, free // 4 // set_bytes(shape)))


def guard_rows(shape: Shape) -> list[int]:
    """GUARD_ROWS rows spread over the shape: the rows compared with a reference."""
    n = shape.total_q
    return sorted({round(i * (n - 1) / max(GUARD_ROWS - 1, 1)) for i in range(min(GUARD_ROWS, n))})


def _check(problem: Problem, variant: MqaLogitsVariant) -> None:
    """Set 0's output on GUARD_ROWS rows against reference_logits; raises BenchError outside the bound."""
    shape = problem.shape
    rows = torch.tensor(guard_rows(shape), device=problem.local_ends.device)
    s = problem.sets[0]
    ref = reference_logits(
        s.q[rows], s.q_scale[rows], s.kv_cache, s.kv_scale, problem.block_tables, s.weights[rows],
        problem.local_ends[rows], shape.max_seq_len,
        local_starts=None if problem.local_starts is None else problem.local_starts[rows],
        row_to_batch=problem.row_to_batch[rows],
    )  # fmt: skip
    inside = torch.isfinite(ref)
    got, want = s.out[rows][inside], ref[inside]
    atol, rtol = tolerance(variant)
    err = (got - want).abs()
    bad = ~(err <= atol + rtol * want.abs())  # NaN counts as bad
    if bool(bad.any()):
        raise BenchError(
            f"mxlogits bench: {shape.table} {shape.label} ({variant.name}): {int(bad.sum())} of {err.numel()} "
            f"checked cells outside |err| <= {atol:g} + {rtol:g}|ref|, worst error "
            f"{float(err.nan_to_num(math.inf).max()):.3g}; not timing a wrong kernel"
        )


def bench_row(
    shape: Shape,
    variant: MqaLogitsVariant,
    device: torch.device,
    limits: Limits,
    repeats: int,
    *,
    num_ctas: int | None = None,
    guard: bool = False,
    peer: ModuleType | None = None,
) -> dict:
    """Plan and op medians of one shape on one variant and grid, with docs/performance.md's counts;
    with `peer` (bench --peer) the peer's times on the same shape too (peer.peer_row)."""
    m = manifest()
    work = count_work(shape, variant.q_per_block, m.heads, m.head_dim)
    width = block_table_width(shape.max_seq_len, device=device)  # the arch's widest variant
    problem = make_problem(shape, device, _num_sets(shape, work, device), width)
    buffers = plan_buffers(device, shape.total_q, shape.batch, variant, num_ctas=num_ctas)

    def make_plan():
        return plan(
            problem.cu_seq_q,
            problem.local_ends,
            buffers=buffers,
            local_starts=problem.local_starts,
            row_to_batch=problem.row_to_batch,
        )

    plan_seconds = statistics.median(call_seconds([make_plan], device, repeats))
    p = make_plan()
    calls = [
        lambda i=i: pa_mqa_logits_mxfp4(*problem.args(i), p, shape.max_seq_len, out=problem.sets[i].out)
        for i in range(len(problem.sets))
    ]
    if guard:
        calls[0]()
        _check(problem, variant)
    seconds = statistics.median(call_seconds(calls, device, repeats))
    host = host_seconds(calls, device, repeats) if device.type == "cuda" else seconds
    roof = roofline_seconds(work, limits)
    # the timed calls left set 0's output, which the peer is compared with
    theirs = {} if peer is None else peer_row(peer, problem, device, repeats, guard_rows(shape), variant, calls[0])
    return {
        "table": shape.table,
        "shape": shape.label,
        "variant": variant.name,
        "num_ctas": buffers.num_ctas,
        "rows": shape.total_q,
        "seqs": shape.batch,
        "cells": work.cells,
        "flops": work.flops,
        "bytes": work.bytes,
        "input_sets": len(problem.sets),
        "plan_us": plan_seconds * 1e6,
        "op_us": seconds * 1e6,
        "host_us": host * 1e6,
        "tflops": work.flops / seconds / 1e12,
        "tbps": work.bytes / seconds / 1e12,
        "roofline_us": roof * 1e6,
        "roofline_pct": 100 * roof / seconds,
        "checked": guard,
        **theirs,
    }
