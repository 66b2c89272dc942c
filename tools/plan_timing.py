"""The plan stage on a GPU: the device time of mx.plan() on every shape of the bench tables (each the median of
`repeats` event-timed calls after an L2 flush, bench's protocol), and the plan + op pair of one decode row
replayed from one CUDA graph.

    python tools/plan_timing.py [--tables decode_mtp1,prefill_causal] [--repeats 30]
    python tools/plan_timing.py --profile [--tables ...]   # each shape's plan twice, nothing timed (for ncu)

Only the windows are built (no KV cache), so every table, the deepgemm_* ones included, runs in seconds."""

from __future__ import annotations

import argparse
import statistics

import mxlogits as mx
import torch
from mxlogits.arch import arch_of
from mxlogits.bench.rows import pick_variant
from mxlogits.bench.shapes import TABLES, Shape
from mxlogits.bench.timing import call_seconds, replay_us
from mxlogits.synthetic import make_scene

GRAPH_ROW = (1, 32_768)  # (batch, context) of the decode row whose plan + op replay from one graph


def windows(shape: Shape, device: torch.device) -> dict:
    rows = torch.tensor(shape.rows, dtype=torch.int32)
    counts = torch.tensor(shape.rows_per_sequence(), dtype=torch.int64)
    cu = torch.zeros(shape.batch + 1, dtype=torch.int32)
    cu[1:] = counts.cumsum(0).to(torch.int32)
    return {
        "cu_seq_q": cu.to(device),
        "local_ends": rows[:, 2].contiguous().to(device),
        "local_starts": rows[:, 1].contiguous().to(device),
        "row_to_batch": rows[:, 0].contiguous().to(device),
    }


def plan_of(w: dict, buffers) -> mx.MqaLogitsPlan:
    """mx.plan() of these windows into these buffers."""
    return mx.plan(w["cu_seq_q"], w["local_ends"], buffers=buffers, local_starts=w["local_starts"],
                   row_to_batch=w["row_to_batch"])


def planned(shape: Shape, variant, device: torch.device):
    """A callable building this shape's plan into buffers of its own."""
    w = windows(shape, device)
    buffers = mx.plan_buffers(device, shape.total_q, shape.batch, variant)
    return lambda: plan_of(w, buffers)


def plan_us(shape: Shape, variant, device: torch.device, repeats: int) -> float:
    return statistics.median(call_seconds([planned(shape, variant, device)], device, repeats)) * 1e6


def table_plans(tables: str, device: torch.device):
    """(table, shape, variant) of each shape of these tables, the variant the bench runs it on."""
    for table in tables.split(","):
        variant = pick_variant(table, arch_of(device), None)
        for shape in TABLES[table](1, mx.plan_buffers(device, 1, 1, variant).num_ctas):
            yield table, shape, variant


def profile(tables: str, device: torch.device) -> int:
    """Each shape's plan built twice (the second for a profiler's kernel time), nothing timed; the count of plans."""
    count = 0
    for _, shape, variant in table_plans(tables, device):
        build = planned(shape, variant, device)
        for _ in range(2):
            build()
            count += 1
    return count


def graph_pair_us(device: torch.device, replays: int = 200) -> float:
    """Median µs of one replay of a graph holding plan() and the op of GRAPH_ROW (MTP 1)."""
    batch, context = GRAPH_ROW
    case = make_scene([context] * batch, [(b, 0, context) for b in range(batch)], device)
    variant = mx.variant_for(device, 1)
    buffers = mx.plan_buffers(device, batch, batch, variant)
    inputs = list(case.named_inputs().values())
    out = torch.full((batch, case.max_seq_len), float("-inf"), device=device)

    def step():
        p = mx.plan(case.cu_seq_q, case.local_ends, buffers=buffers, row_to_batch=case.row_to_batch)
        mx.pa_mqa_logits_mxfp4(*inputs, p, case.max_seq_len, out=out)

    return replay_us(step, device, replays)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--profile", action="store_true",
                        help="each shape's plan twice, nothing timed and no graph (for ncu: tools/kernel_ab.py)")
    args = parser.parse_args()
    device = torch.device("cuda")
    if args.profile:
        profile(args.tables, device)
        torch.cuda.synchronize()
        return
    print(f"{torch.cuda.get_device_name(device)}")
    print("| table | shape | variant | rows | plan µs |")
    print("|---|---|---|--:|--:|")
    for table, shape, variant in table_plans(args.tables, device):
        print(f"| {table} | {shape.label} | {variant.name} | {shape.total_q} | "
              f"{plan_us(shape, variant, device, args.repeats):.1f} |", flush=True)
    print(f"plan + op of B={GRAPH_ROW[0]}, ctx {GRAPH_ROW[1]} (MTP 1) from one CUDA graph: {graph_pair_us(device):.1f} µs")


if __name__ == "__main__":
    main()
