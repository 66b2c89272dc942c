"""The bench's two ways through the tables' rows: each row once, printed as it completes with each
table's summary after it; or --sweep, each row at 1..4 x the SM count CTAs, which is how an
instance's cta_resident is chosen."""

from __future__ import annotations

import itertools
import statistics

import torch

from ..manifest import MqaLogitsVariant, manifest
from .report import HEADER, PEER_HEADER, line, summarize, summary_line
from .rows import bench_row
from .shapes import Shape, count_work

SWEEP_MULTIPLES = (1, 2, 3, 4)  # --sweep grids: k x the SM count


def run_tables(rows: list[tuple[Shape, MqaLogitsVariant]], device, limits, repeats, peer=None) -> list[dict]:
    """Each row once, printed as it completes, then the table's summary. Each row is checked against
    the reference before it is timed on a GPU (where the reference is fast, and large rows find
    what small ones do not: the fp8 path's accumulation error grows with the logits); on the host
    each table's shape with the fewest cells. `peer`: the --peer module, timed on every row too."""
    m = manifest()
    print(HEADER + (PEER_HEADER if peer else ""))
    results = []
    for table, group in itertools.groupby(rows, key=lambda row: row[0].table):
        group = list(group)
        checked = min(group, key=lambda row: count_work(row[0], row[1].q_per_block, m.heads, m.head_dim).cells)
        for row in group:
            guard = device.type == "cuda" or row is checked
            results.append(bench_row(*row, device, limits, repeats, guard=guard, peer=peer))
            print(line(results[-1]), flush=True)
        print(summary_line(table, summarize(results[-len(group):])[table]))
    return results


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return torch.get_num_threads()


def sweep_grids(rows: list[tuple[Shape, MqaLogitsVariant]], device, limits, repeats) -> list[dict]:
    """Each row at k x SMs CTAs; prints the times per row and, per variant, the grid whose
    geometric-mean slowdown against each row's best grid is smallest."""
    sms = _sm_count(device)
    grids = [k * sms for k in SWEEP_MULTIPLES]
    print(f"sweep: grids {grids} (k x {sms} SMs); op µs per grid")
    print(f"{'table':16} {'shape':30} {'variant':14} " + " ".join(f"{g:>9}" for g in grids) + "  best")
    results = []
    for shape, v in rows:
        times = {g: bench_row(shape, v, device, limits, repeats, num_ctas=g)["op_us"] for g in grids}
        best = min(times, key=times.get)
        results.append({"table": shape.table, "shape": shape.label, "variant": v.name, "op_us": times, "best": best})
        per_grid = " ".join(f"{t:9.1f}" for t in times.values())
        print(f"{shape.table:16} {shape.label:30} {v.name:14} {per_grid}  {best}")
    for name in dict.fromkeys(r["variant"] for r in results):
        mine = [r for r in results if r["variant"] == name]
        slowdown = {g: statistics.geometric_mean([r["op_us"][g] / r["op_us"][r["best"]] for r in mine]) for g in grids}
        best = min(slowdown, key=slowdown.get)
        detail = ", ".join(f"{g}: {s:.3f}" for g, s in slowdown.items())
        print(f"{name}: best grid {best} CTAs (cta_resident); geomean slowdown vs each row's best: {detail}")
    return results
