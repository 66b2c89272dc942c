"""Two builds' kernels side by side on a GPU: a command run under `ncu` with this checkout's generated/
and with a base revision's, in turn, for several rounds in one process tree on one machine
(docs/performance.md, comparing two builds), each launch's kernel time printed for both.

    python tools/kernel_ab.py BASE [--kernel REGEX] [--rounds 2] [--json PATH] -- COMMAND ...
    python tools/kernel_ab.py f608e67 --kernel logits_kernel -- python tools/compact_timing.py --profile
    python tools/kernel_ab.py DIR ...   (DIR a revision's export: git archive REV generated runtime | tar -x -C DIR)
    python tools/kernel_ab.py DIR --also DIR2 ...   (DIR2's kernels a third side of every round)

BASE's kernels are its committed generated/, taken with `git archive` and loaded through
MXLOGITS_GENERATED_DIR; the runtime and the command are this checkout's, so the two sides may differ
in templates/ and generated/ only (a runtime/ difference is refused: it could not load the other's
module). `--also` adds further sides, each a revision or folder taken as BASE is, so that several candidates
meet the same base in one lease without the base timed once per candidate. Each side's module is built
before it is profiled. Times: `gpu__time_duration` under
`ncu --clock-control none --cache-control all` (every launch after a flush of the caches). `--counters`
adds each launch's warp instructions, issue rate and DRAM read throughput (ncu replays each launch for
them, so a round takes several times longer)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from mxlogits.manifest import GENERATED_DIR_ENV

ROOT = Path(__file__).resolve().parents[1]
METRIC = "gpu__time_duration.sum"
# ncu's units of a duration, long and short (the lent H100s' ncu prints "ns", "us", "ms")
UNITS = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
# --counters: what says whether a kernel is issue- or memory-bound (docs/performance.md), each as its column
# and the scale from ncu's unit to the column's, ncu's prefixes (K, M, G, T) taken off first
COUNTERS = {
    "smsp__inst_executed.sum": ("M warp instructions", {"inst": 1e-6}),
    "smsp__issue_active.avg.pct_of_peak_sustained_active": ("issue active %", {"%": 1.0}),
    "dram__bytes_read.sum.per_second": ("DRAM read TB/s", {"byte/second": 1e-12, "byte/s": 1e-12, "B/s": 1e-12}),
}
PREFIXES = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
RUNTIME_RULE = ("the A/B loads both sides' kernels with this checkout's runtime, so the two may differ in "
                "templates/ and generated/ only")


def unit_scale(unit: str, units: dict[str, float]) -> float | None:
    """The scale from ncu's `unit` to a column's, by `units` (the column's scale of each base unit)."""
    if unit in units:
        return units[unit]
    if unit[:1] in PREFIXES and unit[1:] in units:
        return PREFIXES[unit[:1]] * units[unit[1:]]
    return None


class AbError(Exception):
    pass


def git(root: Path, *args: str) -> bytes:
    result = subprocess.run(["git", "-C", str(root), *args], capture_output=True)
    if result.returncode != 0:
        raise AbError(f"kernel_ab: git {' '.join(args)}: {result.stderr.decode().strip()}")
    return result.stdout


def source_files(tree: Path) -> dict[str, bytes]:
    return {str(f.relative_to(tree)): f.read_bytes() for f in sorted(tree.rglob("*"))
            if f.is_file() and "__pycache__" not in f.parts}


def export_generated(base: str, into: Path, root: Path = ROOT) -> Path:
    """BASE's generated/: a revision's committed one, exported under `into`, or that of a folder holding a
    revision's generated/ and runtime/ (`git archive REV generated runtime | tar -x -C DIR`, for a GPU
    machine that is sent the working tree without its history). Refuses a BASE whose runtime/ differs from
    the checkout's."""
    if Path(base).is_dir():
        tree = Path(base).resolve()  # the command runs in the checkout's root
        if source_files(tree / "runtime") != source_files(root / "runtime"):
            raise AbError(f"kernel_ab: runtime/ differs between {base} and this checkout: {RUNTIME_RULE}")
        return tree / "generated"
    git(root, "rev-parse", "--verify", f"{base}^{{commit}}")
    if subprocess.run(["git", "-C", str(root), "diff", "--quiet", base, "--", "runtime"]).returncode != 0:
        raise AbError(f"kernel_ab: runtime/ differs between {base} and this checkout: {RUNTIME_RULE}")
    with tarfile.open(fileobj=io.BytesIO(git(root, "archive", base, "generated"))) as archive:
        archive.extractall(into, filter="data")
    return into / "generated"


def launches(report: str, counters: bool = False) -> list[tuple[str, dict[str, float]]]:
    """(kernel name, {metric: value}) of each launch in an `ncu --csv` report, in order: its µs under METRIC
    and, with `counters`, each of COUNTERS in its column's unit. ncu writes a row per launch and metric."""
    wanted = {METRIC: UNITS, **({m: units for m, (_, units) in COUNTERS.items()} if counters else {})}
    header, found = None, {}
    for line in report.splitlines():
        if not line.startswith('"'):
            continue
        fields = next(csv.reader(io.StringIO(line)))
        if header is None:
            header = fields
            continue
        row = dict(zip(header, fields))
        metric = row.get("Metric Name")
        if metric not in wanted:
            continue
        unit = row.get("Metric Unit", "")
        scale = wanted[metric].get(unit) if metric == METRIC else unit_scale(unit, wanted[metric])
        if scale is None:
            raise AbError(f"kernel_ab: unknown unit {unit!r} of {metric}")
        name, values = found.setdefault(row["ID"], (row["Kernel Name"], {}))
        values[metric] = float(row["Metric Value"].replace(",", "")) * scale
    for i, (name, values) in found.items():
        missing = sorted(set(wanted) - set(values))
        if missing:
            raise AbError(f"kernel_ab: launch {i} ({short(name)}) has no {', '.join(missing)} in ncu's report")
    return list(found.values())


def profile(command: list[str], kernel: str, env: dict[str, str], counters: bool = False) -> list[tuple[str, dict]]:
    metrics = ",".join([METRIC, *(COUNTERS if counters else ())])
    ncu = ["ncu", "--clock-control", "none", "--cache-control", "all", "--csv", "--metrics", metrics]
    if kernel:
        ncu += ["-k", f"regex:{kernel}"]
    result = subprocess.run([*ncu, *command], capture_output=True, text=True, env=env, cwd=ROOT)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-2000:]  # ncu reports its own errors on stdout
        raise AbError(f"kernel_ab: {' '.join(command)} under ncu failed ({result.returncode}):\n{tail}")
    return launches(result.stdout, counters)


def short(name: str) -> str:
    return name if len(name) <= 70 else name[:67] + "..."


def compare(rounds: dict[str, list[list[tuple[str, dict[str, float]]]]]) -> list[dict]:
    """Per launch: its kernel, each side's µs over the rounds (`us`, by side, in the sides' order) and, where
    profiled, each side's counters over the rounds (by their columns); the sides must launch the same kernels."""
    every = [r for side in rounds.values() for r in side]
    counts = {len(r) for r in every}
    if len(counts) != 1:
        raise AbError(f"kernel_ab: the rounds profiled different numbers of launches ({sorted(counts)})")
    first = next(iter(rounds.values()))[0]
    rows = []
    for i in range(counts.pop()):
        names = {r[i][0] for r in every}
        row = {
            "launch": i,
            "kernel": names.pop() if len(names) == 1 else " | ".join(sorted(names)),
            "us": {side: [r[i][1][METRIC] for r in runs] for side, runs in rounds.items()},
        }
        counters = {column: {side: [r[i][1][metric] for r in runs] for side, runs in rounds.items()}
                    for metric, (column, _) in COUNTERS.items() if metric in first[i][1]}
        if counters:
            row["counters"] = counters
        rows.append(row)
    return rows


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """The tool's own arguments and the command after `--` (argparse's REMAINDER would take the options
    given after BASE as part of the command)."""
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def ratios(values: dict[str, list[float]]) -> list[float]:
    """Each side's median over the base's (the first side), for every side after it."""
    sides = list(values.values())
    base = statistics.median(sides[0])
    return [statistics.median(v) / base if base else float("nan") for v in sides[1:]]


def table(rows: list[dict], sides: list[str], key: str, label: str, fmt: str, unit: str = "") -> list[str]:
    """One markdown table: a line per launch (per launch and counter when key is "counters"): each side's
    values over the rounds, then each side's median over the base's."""
    lines = [f"| launch | {label} | " + " | ".join(f"{s}{unit}" for s in sides) + " | " +
             " | ".join(f"{s} / base (medians)" for s in sides[1:]) + " |",
             "|--:|---|" + "--:|" * (2 * len(sides) - 1)]
    for r in rows:
        groups = r[key].items() if key == "counters" else [(short(r["kernel"]), r[key])]
        for name, values in groups:
            cells = [" ".join(format(x, fmt) for x in values[s]) for s in sides]
            lines.append(f"| {r['launch']} | {name} | " + " | ".join(cells) + " | " +
                         " | ".join(f"{x:.3f}" for x in ratios(values)) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the revision whose generated/ is the base side, or a folder exported from one")
    parser.add_argument("--also", action="append", default=[], metavar="BASE",
                        help="another revision or exported folder, timed as a further side in each round (repeatable)")
    parser.add_argument("--kernel", default="", help="ncu's kernel-name regex (default: every kernel)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="each side in turn (base, this checkout, each --also), this many times")
    parser.add_argument("--json", type=Path, help="write every launch's times here")
    parser.add_argument("--counters", action="store_true",
                        help="also each launch's warp instructions, issue rate and DRAM read throughput")
    parser.usage = ("kernel_ab.py [-h] [--also BASE] [--kernel KERNEL] [--rounds ROUNDS] [--json JSON] [--counters] "
                    "base -- COMMAND ...")
    own, command = split_command(sys.argv[1:])
    args = parser.parse_args(own)
    try:
        if not command:
            raise AbError("kernel_ab: no command: give it after --")
        if args.rounds < 1:
            raise AbError(f"kernel_ab: --rounds: expected at least 1, found {args.rounds}")
        taken = [args.base, "base", "head"]
        if len(set(args.also)) != len(args.also) or set(args.also) & set(taken):
            raise AbError(f"kernel_ab: --also: expected sides other than the base and each other, found "
                          f"{' '.join(args.also)} beside base {args.base}")
        if shutil.which("ncu") is None:
            raise AbError("kernel_ab: ncu (Nsight Compute) not found: the A/B needs a GPU machine with it")
        with tempfile.TemporaryDirectory(prefix="kernel_ab_") as tmp:
            def exported(rev: str, i: int) -> dict[str, str]:
                return {**os.environ, GENERATED_DIR_ENV: str(export_generated(rev, Path(tmp) / str(i)))}

            sides = {"base": exported(args.base, 0),
                     "head": {k: v for k, v in os.environ.items() if k != GENERATED_DIR_ENV},
                     **{rev: exported(rev, i) for i, rev in enumerate(args.also, 1)}}
            build = "import mxlogits as mx; mx.plan_buffers('cuda', 1, 1)"  # this arch's module, outside ncu
            for env in sides.values():
                subprocess.run([sys.executable, "-c", build], env=env, cwd=ROOT, check=True)
            rounds = {side: [] for side in sides}
            for _ in range(args.rounds):
                for side, env in sides.items():
                    rounds[side].append(profile(command, args.kernel, env, args.counters))
            rows = compare(rounds)
    except (AbError, subprocess.CalledProcessError) as e:
        print(e, file=sys.stderr)
        return 2
    names = list(rounds)
    print(f"base {args.base} | head: this checkout" + "".join(f" | {s}" for s in args.also) +
          f"; µs per round; {' '.join(command)}")
    print("\n".join(table(rows, names, "us", "kernel", ".2f", " µs")))
    if args.counters:
        print()
        print("\n".join(table(rows, names, "counters", "counter", ".3g")))
    if args.json:
        args.json.write_text(json.dumps({"base": args.base, "also": args.also, "command": command, "launches": rows},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
