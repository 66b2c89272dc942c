"""python -m mxlogits bench --tune NAME=V1,V2[;NAME2=...]: the compile-time tunables of a variant
(and its cta_resident) chosen by measurement. For each variant and each combination of the values,
instances.yaml is copied with that variant's row changed, validated by the code generator's loader
(the arch's declared ranges), rendered into a temporary generated tree, built (in the normal build
cache, keyed by content) and benched in a subprocess with MXLOGITS_GENERATED_DIR pointing at it.
A combination that does not render, compile or pass the bench's correctness guard is reported and
skipped. The code generator (jinja2, pyyaml) is imported only here, when --tune runs."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

from ..manifest import GENERATED_DIR_ENV, MqaLogitsVariant
from .limits import measure_limits
from .rows import table_variant
from .shapes import DEFAULT_TABLES
from .tune_report import print_report, write_json
from .tune_yaml import RowError, set_instance_keys

ERROR_LINES = 8  # compiler / bench error lines shown for a combination that fails


class TuneError(ValueError):
    """A --tune request that cannot run: bad spec, unknown name or variant, a value out of range."""


@dataclass
class Job:
    """One combination of one variant: its table copy and generated tree, then what happened."""

    variant: str
    tables: tuple[str, ...]
    values: tuple[tuple[str, int], ...]
    current: bool  # the values the table has now
    directory: Path
    # ok | refused by the table | render error | does not compile | wrong results | bench failed
    status: str = "pending"
    detail: str = ""
    table: object = field(default=None, repr=False)  # the loaded, validated instance table
    seconds: dict[str, float] = field(default_factory=dict)  # build, bench
    op_us: dict[str, float] = field(default_factory=dict)  # "table shape" -> median op µs

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.values)


def parse_spec(specs: list[str]) -> dict[str, list[int]]:
    """['stages=8,16;warpgroups=3,4', ...] -> {'stages': [8, 16], 'warpgroups': [3, 4]} (in order)."""
    grid: dict[str, list[int]] = {}
    for item in (part.strip() for spec in specs for part in spec.split(";")):
        if not item:
            continue
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise TuneError(f"--tune: expected NAME=V1,V2,... found {item!r}")
        if name in grid:
            raise TuneError(f"--tune: {name} given twice")
        try:
            ints = [int(v) for v in values.split(",")]
        except ValueError:
            raise TuneError(f"--tune: {name}: expected comma-separated integers, found {values!r}") from None
        if len(set(ints)) != len(ints):
            raise TuneError(f"--tune: {name}: a value repeats in {values!r}")
        grid[name] = ints
    if not grid:
        raise TuneError("--tune: expected NAME=V1,V2,... found nothing")
    return grid


def _codegen():
    """The code generator's loader, renderer and writer; a clear error without jinja2/pyyaml."""
    try:
        from mxlogits_codegen.cli import write
        from mxlogits_codegen.render import RenderError, render_all
        from mxlogits_codegen.table import SWEPT_COLUMNS, TableError, load_table
    except ImportError as e:
        raise TuneError(
            f"--tune renders instance tables with mxlogits_codegen, which needs jinja2 and pyyaml ({e}); "
            f"install them with: pip install 'mxlogits[codegen]'"
        ) from None
    return SimpleNamespace(
        write=write,
        render_all=render_all,
        load_table=load_table,
        RenderError=RenderError,
        TableError=TableError,
        SWEPT_COLUMNS=SWEPT_COLUMNS,
    )


def find_root(given: Path | None) -> Path:
    """The checkout --tune starts from: --tune-root, else the one this package runs from, else the
    current directory or one above it."""
    here = Path(__file__).resolve().parents[2]  # runtime/bench/tune.py -> the checkout
    candidates = [given] if given else [here, Path.cwd(), *Path.cwd().parents]
    for d in candidates:
        if (d / "instances.yaml").is_file() and (d / "templates").is_dir():
            return d
    where = given or f"{here} or {Path.cwd()} and above"
    raise TuneError(f"--tune needs a checkout (instances.yaml and templates/), none in {where}; pass --tune-root")


def _targets(args, table, arch: str) -> list[tuple[object, tuple[str, ...]]]:
    """(instance row, tables it runs) per variant to tune: --variant's, else those the tables use."""
    rows = table.instances_of(arch)
    if not rows:
        raise TuneError(f"{table.path} has no instances of arch {arch!r}")
    own = [MqaLogitsVariant(i.name, i.q_per_block, i.block_k, i.cta_resident, i.arch) for i in rows]
    by_name = {i.name: i for i in rows}
    tables = tuple(args.tables.split(",") if args.tables else DEFAULT_TABLES)
    if args.variant:
        names = [n.strip() for n in args.variant.split(",") if n.strip()]
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise TuneError(f"--variant: unknown {unknown} for {arch}; {table.path} has {sorted(by_name)}")
        return [(by_name[n], tables) for n in dict.fromkeys(names)]
    default = next(v for v, i in zip(own, rows) if i.default)
    used: dict[str, list[str]] = {}
    for t in tables:
        used.setdefault(table_variant(t, default, own).name, []).append(t)
    return [(by_name[n], tuple(ts)) for n, ts in used.items()]


def plan_jobs(args, cg, root: Path, arch: str, grid: dict[str, list[int]], tmp: Path) -> list[Job]:
    """Every (variant, combination) as an instances.yaml under `tmp`, loaded by the code generator.
    A value outside the arch's declared range makes the request wrong: TuneError with the loader's
    message. A combination in range that the loader still refuses (a budget its arch computes per
    row) is a job with status `refused by the table`, like one that does not compile."""
    base_path = root / "instances.yaml"
    try:
        base = cg.load_table(base_path, root / "templates")
    except cg.TableError as e:
        raise TuneError(str(e)) from None
    record = next((a for a in base.arches if a.name == arch), None)
    if record is None:
        raise TuneError(f"{base_path} has no arch {arch!r}")
    ranges = {**cg.SWEPT_COLUMNS, **{t.name: (t.minimum, t.maximum) for t in record.tunables}}
    unknown = [n for n in grid if n not in ranges]
    if unknown:
        fixed = " nor ".join(cg.SWEPT_COLUMNS)
        raise TuneError(f"--tune: {unknown}: neither {fixed} nor a tunable {arch} declares; it can set {list(ranges)}")
    text = base_path.read_text()
    jobs = []
    for inst, tables in _targets(args, base, arch):
        now = {**{k: getattr(inst, k) for k in cg.SWEPT_COLUMNS}, **dict(inst.tunables)}
        for k, combo in enumerate(itertools.product(*grid.values())):
            values = tuple(zip(grid, combo))
            job = Job(inst.name, tables, values, all(now[n] == v for n, v in values), tmp / inst.name / str(k))
            job.directory.mkdir(parents=True)
            path = job.directory / "instances.yaml"
            try:
                path.write_text(set_instance_keys(text, arch, inst.name, dict(values)))
                job.table = cg.load_table(path, root / "templates")
            except RowError as e:
                raise TuneError(f"--tune {job.label}: {e}") from None
            except cg.TableError as e:
                message = str(e).replace(str(path), str(base_path))
                if any(not ranges[n][0] <= v <= ranges[n][1] for n, v in values):
                    raise TuneError(f"--tune {job.label} ({inst.name}): {message}") from None
                job.status, job.detail = "refused by the table", message
            jobs.append(job)
    return jobs


# A compiler's diagnostic: gcc/clang `file:14:33: error: ...`, nvcc `file(14): error: ...`, ptxas.
_DIAGNOSTIC = re.compile(r"(:\d+(:\d+)?: |\(\d+\): )(fatal )?error|^ptxas (fatal|error)")


def _error_lines(text: str, generated: Path) -> str:
    """The compiler's error lines, else the output's last lines (the traceback's message)."""
    lines = [ln.strip().replace(f"{generated}/", "generated/") for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if _DIAGNOSTIC.search(ln)]
    return "\n".join(ln[:300] for ln in list(dict.fromkeys(errors or lines))[-ERROR_LINES:])


def _run(job: Job, argv: list[str], step: str) -> subprocess.CompletedProcess:
    start = time.perf_counter()
    env = {**os.environ, GENERATED_DIR_ENV: str(job.directory / "generated")}
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    job.seconds[step] = time.perf_counter() - start
    (job.directory / f"{step}.log").write_text(result.stdout + result.stderr)
    return result


def build(job: Job, arch: str) -> None:
    code = "import sys, mxlogits.build as b; print(b.built_library(sys.argv[1]))"
    result = _run(job, [sys.executable, "-c", code, arch], "build")
    if result.returncode != 0:
        job.status = "does not compile"
        job.detail = _error_lines(result.stderr + result.stdout, job.directory / "generated")


def bench(job: Job, args, device: torch.device, limits) -> None:
    out = job.directory / "bench.json"
    argv = [sys.executable, "-m", "mxlogits", "bench", "--device", str(device), "--tables", ",".join(job.tables)]
    argv += ["--variant", job.variant, "--json", str(out), "--bw", repr(limits.bw / 1e12)]
    argv += ["--peak", repr(limits.peak / 1e12)]
    if args.quick is not None:
        argv.append("--quick" if args.quick else "--no-quick")
    if args.repeats:
        argv += ["--repeats", str(args.repeats)]
    result = _run(job, argv, "bench")
    if result.returncode != 0:
        wrong = "not timing a wrong kernel" in result.stderr
        job.status = "wrong results" if wrong else "bench failed"
        job.detail = _error_lines(result.stderr + result.stdout, job.directory / "generated")
        return
    job.status = "ok"
    job.op_us = {f"{r['table']} {r['shape']}": r["op_us"] for r in json.loads(out.read_text())["results"]}


def _build_workers(n: int) -> int:
    """Concurrent module builds: ninja already spreads one build over its ~6 TUs."""
    return max(1, min(n, (os.cpu_count() or 1) // 6))


def run_tune(args, device: torch.device, arch: str) -> int:
    """The --tune mode of the bench command; returns the exit status (2: the request is wrong,
    1: a variant had no combination that ran)."""
    with tempfile.TemporaryDirectory(prefix="mxlogits-tune-") as tmp:
        try:
            grid = parse_spec(args.tune)
            cg = _codegen()
            root = find_root(args.tune_root)
            jobs = plan_jobs(args, cg, root, arch, grid, Path(tmp))
        except TuneError as e:
            print(f"mxlogits bench: {e}", file=sys.stderr)
            return 2
        limits = measure_limits(device, args.bw * 1e12 if args.bw else None, args.peak * 1e12 if args.peak else None)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the measurement's buffers: the benches run in other processes
        print(f"mxlogits bench --tune on {device}, arch {arch}, from {root / 'instances.yaml'}")
        print(f"limits for every combination: {limits.bw / 1e12:.3f} TB/s, {limits.peak / 1e12:.1f} TFLOP/s")
        names = list(dict.fromkeys(j.variant for j in jobs))
        spec = "; ".join(f"{k}={','.join(map(str, v))}" for k, v in grid.items())
        print(f"{len(jobs)} combinations: {spec} for each of {', '.join(names)}")
        for job in (j for j in jobs if j.status == "pending"):
            try:
                cg.write(job.directory / "generated", cg.render_all(job.table, root / "templates"))
            except (cg.RenderError, cg.TableError) as e:
                job.status, job.detail = "render error", str(e)
        todo = [j for j in jobs if j.status == "pending"]
        with ThreadPoolExecutor(_build_workers(len(todo))) as pool:
            builds = {pool.submit(build, job, arch): job for job in todo}
            for done in as_completed(builds):
                job = builds[done]
                done.result()
                state = job.status if job.status != "pending" else "built"
                print(f"  build {job.variant} {job.label}: {state} ({job.seconds['build']:.0f} s)", flush=True)
        for job in (j for j in jobs if j.status == "pending"):
            bench(job, args, device, limits)
            print(f"  bench {job.variant} {job.label}: {job.status} ({job.seconds['bench']:.0f} s)", flush=True)
        best = print_report(jobs, arch)
        if args.json:
            write_json(args.json, jobs, arch, device, grid, limits, args)
            print(f"wrote {args.json}")
    return 0 if all(best.values()) else 1
