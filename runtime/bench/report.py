"""The bench's printed table and its summaries: one line per row (µs, TFLOP/s, TB/s, % of roofline),
per table the spread of % of roofline and the table's own, read as one workload; the --json document."""

from __future__ import annotations

import datetime
import json
import statistics
from pathlib import Path

import torch

from .limits import Limits
from .origin import device_name, provenance

HEADER = (
    f"{'table':16} {'shape':30} {'variant':14} {'ctas':>5} {'plan µs':>9} {'op µs':>10} {'host µs':>8} "
    f"{'TFLOP/s':>8} {'TB/s':>6} {'% roof':>7}"
)

# --peer's columns: on the paged path the op through the DeepGEMM adapter's schedule (its metadata µs,
# and its logits' time over the op's on a plan, the two alternated); the peer's metadata and logits
# medians, its time over the op's (> 1: the op is faster), and calc_diff of its logits against the op's
PEER_HEADER = f" {'cmeta µs':>8} {'compact/plan':>12} {'peer meta':>9} {'peer µs':>10} {'speedup':>7} {'diff':>7}"


def _us(value: float | None, width: int) -> str:
    return f"{'-' if value is None else f'{value:.1f}':>{width}}"


def _peer_columns(r: dict) -> str:
    if "peer_error" not in r and "peer_op_us" not in r:
        return ""
    ratio = r.get("compact_over_plan")
    ours = f" {_us(r.get('compact_meta_us'), 8)} {'-' if ratio is None else f'{ratio:.3f}':>12}"
    if "peer_error" in r:
        return f"{ours}  peer: {r['peer_error']}"
    return (
        f"{ours} {_us(r['peer_meta_us'], 9)} {r['peer_op_us']:10.1f} {r['peer_op_us'] / r['op_us']:7.2f} "
        f"{r['peer_diff']:7.1e}"
    )


def line(r: dict) -> str:
    """The printed line of one bench_row result."""
    return (
        f"{r['table']:16} {r['shape']:30} {r['variant']:14} {r['num_ctas']:5} {r['plan_us']:9.1f} {r['op_us']:10.1f} "
        f"{r['host_us']:8.1f} {r['tflops']:8.2f} {r['tbps']:6.3f} {r['roofline_pct']:7.2f}"
        + _peer_columns(r)
        + ("  (checked)" if r["checked"] else "")
    )


def summarize(results: list[dict]) -> dict:
    """Per table: rows, % of roofline min / geometric mean / max, total op µs, and the table's own %
    of roofline (its rows' roofline µs over their op µs, one call of each row: the table read as
    one workload)."""
    out = {}
    for table in dict.fromkeys(r["table"] for r in results):
        mine = [r for r in results if r["table"] == table]
        pct = [r["roofline_pct"] for r in mine]
        op_us = sum(r["op_us"] for r in mine)
        out[table] = {
            "rows": len(pct),
            "roofline_pct_min": min(pct),
            "roofline_pct_geomean": statistics.geometric_mean(pct),
            "roofline_pct_max": max(pct),
            "op_us_total": op_us,
            "roofline_pct_table": 100 * sum(r["roofline_us"] for r in mine) / op_us,
        }
        timed = [r for r in mine if "peer_op_us" in r]
        if timed:
            out[table]["peer_rows"] = len(timed)
            out[table]["peer_faster_rows"] = sum(r["peer_op_us"] < r["op_us"] for r in timed)
            out[table]["speedup_geomean"] = statistics.geometric_mean([r["peer_op_us"] / r["op_us"] for r in timed])
    return out


def summary_line(table: str, s: dict) -> str:
    """The printed line of one table's `summarize` entry."""
    return (
        f"{table}: {s['rows']} rows, % of roofline min {s['roofline_pct_min']:.2f} geomean "
        f"{s['roofline_pct_geomean']:.2f} max {s['roofline_pct_max']:.2f}, of the whole table "
        f"{s['roofline_pct_table']:.2f}; op total {s['op_us_total']:.1f} µs"
        + (
            f"; against the peer on {s['peer_rows']} rows: speedup geomean {s['speedup_geomean']:.2f}, "
            f"peer faster on {s['peer_faster_rows']}"
            if "peer_rows" in s
            else ""
        )
    )


def write_json(path: Path, device: torch.device, arch: str, limits: Limits, run: dict, results: list[dict],
               sweep: list[dict] | None) -> None:  # fmt: skip
    """Every result and the run's metadata (`run`: quick, scale, repeats), with what it was measured on."""
    doc = {
        "device": device_name(device),
        "device_type": device.type,
        "arch": arch,
        "torch": torch.__version__,
        "bw_tbps": limits.bw / 1e12,
        "peak_tflops": limits.peak / 1e12,
        "limits_source": limits.source,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **provenance(arch),
        **run,
        "results": results,
        "summary": summarize(results),
        "sweep": sweep,
    }
    Path(path).write_text(json.dumps(doc, indent=2) + "\n")
