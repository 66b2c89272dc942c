"""python -m mxlogits bench: the performance tables (docs/performance.md) on this device, each row as
µs, TFLOP/s, TB/s and % of roofline; --sweep times each row at grids of 1..4 x the SM count instead (how cta_resident is
chosen); --tune rebuilds a variant at each combination of its arch's compile-time tunables and
benches each (tune.py). This module holds the command's arguments and what it does with them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ..arch import arch_of, normalize_device
from .limits import measure_limits
from .origin import device_name
from .report import write_json
from .rows import BenchError, pick_variant
from .peer import PEERS, PeerUnavailable, load_peer, peer_version
from .shapes import DEFAULT_TABLES, QUICK_SCALE, TABLES
from .tables import run_tables, sweep_grids


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--tables",
        help=f"comma-separated subset of {','.join(TABLES)} (default: {','.join(DEFAULT_TABLES)}; the deepgemm_* "
        "tables are the shapes of DeepGEMM's paged test)",
    )
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
    ap.add_argument(
        "--peer",
        choices=sorted(PEERS),
        help="time the peer's kernels on every row too, same process and timer, and print its time over the op's "
        "(deepgemm: DeepGEMM's FP8 kernels, built from source: docs/performance.md)",
    )


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
    if args.peer and (args.tune or args.sweep):
        return "--peer times the tables' rows beside the peer: no --tune or --sweep with it"
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
        from .tune import run_tune  # imports the code generator (jinja2, pyyaml) when it runs

        return run_tune(args, device, arch)
    try:
        peer = load_peer(args.peer) if args.peer else None
    except PeerUnavailable as e:
        print(e, file=sys.stderr)
        return 2
    quick = device.type != "cuda" if args.quick is None else args.quick
    scale = QUICK_SCALE if quick else 1
    repeats = args.repeats or (30 if device.type == "cuda" else 3)
    limits = measure_limits(device, args.bw * 1e12 if args.bw else None, args.peak * 1e12 if args.peak else None)
    print(f"mxlogits bench on {device} ({device_name(device)}), arch {arch}, torch {torch.__version__}")
    print(f"limits: {limits.bw / 1e12:.3f} TB/s, {limits.peak / 1e12:.1f} TFLOP/s ({limits.source})")
    if quick:
        print(f"quick: token counts and prefill rows are divided by {scale}; these are not the tables' shapes of docs/performance.md")
    timer = "CUDA events around the op launch alone" if device.type == "cuda" else "wall clock around the op call"
    print(f"timing: median of {repeats} calls after a warm-up, {timer}; plan timed separately")
    if peer:
        print(f"peer: {peer_version(peer)}, timed on each row by the same timer; speedup = its µs / the op's")
    rows = []
    for table in args.tables.split(",") if args.tables else DEFAULT_TABLES:
        v = pick_variant(table, arch, args.variant)
        rows += [(shape, v) for shape in TABLES[table](scale, v.cta_resident)]
    try:
        if args.sweep:
            results, sweep = [], sweep_grids(rows, device, limits, repeats)
        else:
            results, sweep = run_tables(rows, device, limits, repeats, peer), None
    except BenchError as e:
        print(e, file=sys.stderr)
        return 1
    if args.json:
        run_info = {"quick": quick, "scale": scale, "repeats": repeats, "peer": args.peer and peer_version(peer)}
        write_json(args.json, device, arch, limits, run_info, results, sweep)
        print(f"wrote {args.json}")
    if args.plot:
        from .plots import plot  # imports matplotlib

        plot(results, args.plot)
        print(f"wrote {args.plot}")
    return 0
