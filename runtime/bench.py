"""python -m mxlogits bench: PERF.md's tables on this device, each row as µs, TFLOP/s, TB/s and % of
roofline (roofline time / measured time, roofline time = max(bytes / BW, flops / PEAK)).
--sweep times each row at grids of 1..4 x the SM count instead: how cta_resident is chosen. --tune
rebuilds a variant at each combination of its arch's compile-time tunables and benches each (bench_tune)."""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from .arch import arch_of, normalize_device
from .bench_inputs import Problem, make_problem, set_bytes
from .bench_shapes import QUICK_SCALE, TABLES, Shape, Work, count_work
from .bench_timing import Limits, call_seconds, host_seconds, measure_limits
from .manifest import MqaLogitsVariant, default_variant, manifest, resolve_variant, tolerance, variants
from .op import pa_mqa_logits_mxfp4
from .plan import block_table_width, plan, plan_buffers
from .reference import reference_logits

# table -> q_per_block of the variant it runs (None: the arch default), when present in the arch.
TABLE_Q_PER_BLOCK = {
    "decode_mtp1": None,
    "decode_mtp2": 2,
    "decode_mtp4": 4,
    "prefill_causal": 4,
    "prefill_fresh": 4,
    "prefill_chunked": 4,
}
GUARD_ROWS = 8  # rows of a shape checked against the fp32 reference before it is timed
MAX_SETS = 64  # input sets a timed call rotates through, at most
SWEEP_MULTIPLES = (1, 2, 3, 4)  # --sweep grids: k x the SM count


class BenchError(RuntimeError):
    """The op disagrees with the reference: no timing of a wrong kernel is reported."""


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--tables", help=f"comma-separated subset of {','.join(TABLES)} (default: all)")
    ap.add_argument("--variant", help="run every table on this variant instead of the table's own")
    ap.add_argument(
        "--quick",
        action=argparse.BooleanOptionalAction,
        help=f"divide token counts and prefill rows by {QUICK_SCALE} (default: on for cpu, off on a GPU)",
    )
    ap.add_argument("--repeats", type=int, help="timed calls per row, median reported (default: 30 on a GPU, 3 on cpu)")
    ap.add_argument("--bw", type=float, help="memory bandwidth in TB/s instead of measuring it")
    ap.add_argument("--peak", type=float, help="compute peak in TFLOP/s instead of measuring it")
    ap.add_argument("--json", type=Path, help="write every result and the run's metadata here")
    ap.add_argument("--plot", type=Path, help="draw %% of roofline per table here (needs matplotlib: mxlogits[bench])")
    ap.add_argument("--sweep", action="store_true", help="time each row at 1..4 x SMs CTAs; print the best grid")
    ap.add_argument(
        "--tune",
        action="append",
        metavar="NAME=V1,V2[;NAME2=...]",
        help="rebuild the variant(s) (--variant: comma-separated, default: those the tables use) at every "
        "combination of these values of the arch's tunables (or cta_resident), bench each, print the best; "
        "repeatable. Needs jinja2 and pyyaml (mxlogits[codegen]) and a checkout",
    )
    ap.add_argument("--tune-root", type=Path, help="checkout whose instances.yaml and templates/ --tune starts from")


def table_variant(table: str, default: MqaLogitsVariant, own: Sequence[MqaLogitsVariant]) -> MqaLogitsVariant:
    """Of an arch's variants `own`: the one with the table's q_per_block (the default when it has that
    q_per_block, else the smallest block_k), else the default."""
    want = TABLE_Q_PER_BLOCK[table]
    if want is None or default.q_per_block == want:
        return default
    matching = [v for v in own if v.q_per_block == want]
    return min(matching, key=lambda v: v.block_k) if matching else default


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


def _check(problem: Problem, variant: MqaLogitsVariant) -> None:
    """Set 0's output on GUARD_ROWS rows against reference_logits; raises BenchError outside the bound."""
    shape = problem.shape
    n = shape.total_q
    idx = sorted({round(i * (n - 1) / max(GUARD_ROWS - 1, 1)) for i in range(min(GUARD_ROWS, n))})
    rows = torch.tensor(idx, device=problem.local_ends.device)
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
) -> dict:
    """Plan and op medians of one shape on one variant and grid, with PERF.md's counts."""
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
    }


HEADER = (
    f"{'table':16} {'shape':30} {'variant':14} {'ctas':>5} {'plan µs':>9} {'op µs':>10} {'host µs':>8} {'TFLOP/s':>8} "
    f"{'TB/s':>6} {'% roof':>7}"
)


def _line(r: dict) -> str:
    return (
        f"{r['table']:16} {r['shape']:30} {r['variant']:14} {r['num_ctas']:5} {r['plan_us']:9.1f} {r['op_us']:10.1f} "
        f"{r['host_us']:8.1f} {r['tflops']:8.2f} {r['tbps']:6.3f} {r['roofline_pct']:7.2f}"
        + ("  (checked)" if r["checked"] else "")
    )


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


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
            "roofline_pct_geomean": _geomean(pct),
            "roofline_pct_max": max(pct),
            "op_us_total": op_us,
            "roofline_pct_table": 100 * sum(r["roofline_us"] for r in mine) / op_us,
        }
    return out


def summary_line(table: str, s: dict) -> str:
    """The printed line of one table's `summarize` entry."""
    return (
        f"{table}: {s['rows']} rows, % of roofline min {s['roofline_pct_min']:.2f} geomean "
        f"{s['roofline_pct_geomean']:.2f} max {s['roofline_pct_max']:.2f}, of the whole table "
        f"{s['roofline_pct_table']:.2f}; op total {s['op_us_total']:.1f} µs"
    )


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
        slowdown = {g: _geomean([r["op_us"][g] / r["op_us"][r["best"]] for r in mine]) for g in grids}
        best = min(slowdown, key=slowdown.get)
        detail = ", ".join(f"{g}: {s:.3f}" for g, s in slowdown.items())
        print(f"{name}: best grid {best} CTAs (cta_resident); geomean slowdown vs each row's best: {detail}")
    return results


def provenance(arch: str) -> dict:
    """What a result was measured on: the checkout's commit (None outside git; a device copy's
    .git may be stale) and the hash of the generated sources the arch's module was built from,
    which names the code exactly wherever it runs."""
    return {"git_commit": _git_commit(), "source_hash": manifest().arches[arch].source_hash}


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"],
                                capture_output=True, text=True, check=False)  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=False)  # fmt: skip
    except OSError:
        return None
    if commit.returncode != 0:
        return None
    return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        return next(line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables: dict[str, list[dict]] = {}
    for r in results:
        tables.setdefault(r["table"], []).append(r)
    # Each panel as tall as its rows plus its title and axis, so a 17-row table's labels do not overlap.
    heights = [len(mine) + 2.5 for mine in tables.values()]
    fig, axes = plt.subplots(len(tables), 1, figsize=(10, 0.3 * sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})  # fmt: skip
    for ax, (table, mine) in zip(axes[:, 0], tables.items()):
        ax.barh([r["shape"] for r in mine], [r["roofline_pct"] for r in mine])
        ax.invert_yaxis()
        ax.set_title(f"{table} ({mine[0]['variant']})", fontsize=9)
        ax.set_xlim(0, 1.05 * max(100, *(r["roofline_pct"] for r in mine)))  # 100% is the same place in each
        ax.set_xlabel("% of roofline")
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path)


def _argument_error(args: argparse.Namespace) -> str | None:
    unknown = [t for t in args.tables.split(",") if t not in TABLES] if args.tables else []
    if unknown:
        return f"--tables: unknown {unknown}; the tables are {list(TABLES)}"
    if args.repeats is not None and args.repeats < 1:
        return f"--repeats: expected >= 1, found {args.repeats}"
    if args.plot and args.sweep:
        return "--plot draws the tables' rows, which --sweep does not produce"
    if args.tune and (args.sweep or args.plot):
        return "--tune runs one bench per combination and prints its own table: no --sweep or --plot with it"
    if args.tune_root and not args.tune:
        return "--tune-root is where --tune starts from: give --tune too"
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return "--plot needs matplotlib: pip install 'mxlogits[bench]'"
    return None


def run(args: argparse.Namespace, device: torch.device) -> int:
    """The bench command on `device` (whose arch is in the table); returns the exit status."""
    error = _argument_error(args)
    if error:
        print(f"mxlogits bench: {error}", file=sys.stderr)
        return 2
    device = normalize_device(device)
    arch = arch_of(device)
    if args.tune:
        from .bench_tune import run_tune  # imports the code generator (jinja2, pyyaml) when it runs

        return run_tune(args, device, arch)
    quick = device.type != "cuda" if args.quick is None else args.quick
    scale = QUICK_SCALE if quick else 1
    repeats = args.repeats or (30 if device.type == "cuda" else 3)
    limits = measure_limits(device, args.bw * 1e12 if args.bw else None, args.peak * 1e12 if args.peak else None)
    print(f"mxlogits bench on {device} ({_device_name(device)}), arch {arch}, torch {torch.__version__}")
    print(f"limits: {limits.bw / 1e12:.3f} TB/s, {limits.peak / 1e12:.1f} TFLOP/s ({limits.source})")
    if quick:
        print(f"quick: token counts and prefill rows are divided by {scale}; these are not PERF.md's shapes")
    timer = "CUDA events around the op launch alone" if device.type == "cuda" else "wall clock around the op call"
    print(f"timing: median of {repeats} calls after a warm-up, {timer}; plan timed separately")
    rows = []
    for table in args.tables.split(",") if args.tables else TABLES:
        v = pick_variant(table, arch, args.variant)
        rows += [(shape, v) for shape in TABLES[table](scale, v.cta_resident)]
    try:
        if args.sweep:
            results, sweep = [], sweep_grids(rows, device, limits, repeats)
        else:
            results, sweep = _run_tables(rows, device, limits, repeats), None
    except BenchError as e:
        print(e, file=sys.stderr)
        return 1
    if args.json:
        doc = {
            "device": _device_name(device),
            "device_type": device.type,
            "arch": arch,
            "torch": torch.__version__,
            "bw_tbps": limits.bw / 1e12,
            "peak_tflops": limits.peak / 1e12,
            "limits_source": limits.source,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **provenance(arch),
            "quick": quick,
            "scale": scale,
            "repeats": repeats,
            "results": results,
            "summary": summarize(results),
            "sweep": sweep,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.plot:
        plot(results, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _run_tables(rows: list[tuple[Shape, MqaLogitsVariant]], device, limits, repeats) -> list[dict]:
    """Each row once, printed as it completes, then the table's summary. Each row is checked against
    the reference before it is timed on a GPU (where the reference is fast, and large rows find
    what small ones do not: the fp8 path's accumulation error grows with the logits); on the host
    each table's shape with the fewest cells."""
    m = manifest()
    print(HEADER)
    results = []
    for table, group in itertools.groupby(rows, key=lambda row: row[0].table):
        group = list(group)
        checked = min(group, key=lambda row: count_work(row[0], row[1].q_per_block, m.heads, m.head_dim).cells)
        for row in group:
            guard = device.type == "cuda" or row is checked
            results.append(bench_row(*row, device, limits, repeats, guard=guard))
            print(_line(results[-1]), flush=True)
        print(summary_line(table, summarize(results[-len(group):])[table]))
    return results
