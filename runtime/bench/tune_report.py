"""bench --tune's output: per variant, one table of combination -> geometric mean and per-row op µs
(best marked), and the JSON document of every combination."""

from __future__ import annotations

import datetime
import json
import statistics
from pathlib import Path

import torch

from .origin import device_name, provenance
from .tune_yaml import row_line

COLUMN = 9  # width of a µs column


def _rows(ok: list) -> tuple[list[str], list[str]]:
    """(every row any combination ran, in order; the rows every one ran): a tuned cta_resident
    changes decode_mtp1's grid-cliff rows, which only the rows all share compare."""
    keys = list(dict.fromkeys(k for j in ok for k in j.op_us))
    return keys, [k for k in keys if all(k in j.op_us for j in ok)]


def summarize(jobs: list) -> dict[str, dict]:
    """Per variant: its jobs, rows, common rows, each ok job's geomean over the common rows, the best."""
    out = {}
    for name in dict.fromkeys(j.variant for j in jobs):
        mine = [j for j in jobs if j.variant == name]
        ok = [j for j in mine if j.status == "ok"]
        keys, common = _rows(ok)
        geomean = {id(j): statistics.geometric_mean([j.op_us[k] for k in common]) for j in ok} if common else {}
        best = min(ok, key=lambda j: geomean[id(j)]) if geomean else None
        out[name] = {"jobs": mine, "rows": keys, "common": common, "geomean": geomean, "best": best}
    return out


def _label(job) -> str:
    return job.label + (" (current)" if job.current else "")


def print_report(jobs: list, arch: str) -> dict[str, object]:
    """Print each variant's table; returns {variant: its best job, or None when none ran}."""
    best = {}
    for name, s in summarize(jobs).items():
        mine, rows, common, geomean, top = s["jobs"], s["rows"], s["common"], s["geomean"], s["best"]
        best[name] = top
        print(f"\ntune {name} ({arch}) on {','.join(mine[0].tables)}: op µs per row, geomean over the rows "
              f"every combination ran ({len(common)} of {len(rows)})")  # fmt: skip
        if not any(j.current for j in mine):
            print("  (the table's own values are not among these combinations)")
        for i, key in enumerate(rows):
            print(f"  r{i + 1:<3} {key}" + ("" if key in common else "  (not in every combination's run)"))
        width = max(len("combination"), *(len(_label(j)) for j in mine))
        cols = " ".join(f"{f'r{i + 1}':>{COLUMN}}" for i in range(len(rows)))
        print(f"{'combination':{width}} {'geomean':>{COLUMN}} {'vs best':>8} {cols}")
        for job in mine:
            if job.status != "ok":
                first = job.detail.splitlines()[0] if job.detail else ""
                print(f"{_label(job):{width}} {job.status}: {first}")
                for more in job.detail.splitlines()[1:]:
                    print(f"{'':{width}}   {more}")
                continue
            g = geomean.get(id(job), float("nan"))
            ratio = g / geomean[id(top)] if top else float("nan")
            per_row = " ".join(f"{job.op_us[k]:{COLUMN}.1f}" if k in job.op_us else f"{'-':>{COLUMN}}" for k in rows)
            print(f"{_label(job):{width}} {g:{COLUMN}.1f} {ratio:8.3f} {per_row}" + ("  <- best" if job is top else ""))
        if top is None:
            print(f"no combination of {name} ran: nothing to choose")
            continue
        text = (top.directory / "instances.yaml").read_text()
        print(f"best for {name}: {_label(top)}; its row in instances.yaml:\n  {row_line(text, arch, name)}")
    return best


def write_json(path: Path, jobs: list, arch: str, device: torch.device, grid: dict, limits, args) -> None:
    variants = []
    for name, s in summarize(jobs).items():
        top = s["best"]
        combos = [
            {
                "values": dict(j.values),
                "current": j.current,
                "status": j.status,
                "detail": j.detail,
                "seconds": j.seconds,
                "op_us": j.op_us,
                "geomean_us": s["geomean"].get(id(j)),
                "best": j is top,
            }
            for j in s["jobs"]
        ]
        variants.append({
            "variant": name,
            "tables": list(s["jobs"][0].tables),
            "rows": s["rows"],
            "common_rows": s["common"],
            "best": dict(top.values) if top else None,
            "combinations": combos,
        })  # fmt: skip
    doc = {
        "device": device_name(device),
        "device_type": device.type,
        "arch": arch,
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **provenance(arch),
        "tune": grid,
        "quick": args.quick,
        "repeats": args.repeats,
        "bw_tbps": limits.bw / 1e12,
        "peak_tflops": limits.peak / 1e12,
        "variants": variants,
    }
    Path(path).write_text(json.dumps(doc, indent=2) + "\n")
