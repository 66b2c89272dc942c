"""mxlogits-gen: regenerate generated/ from instances.yaml and templates/.

mxlogits-gen            write what changed, delete generated files no instance produces any more
mxlogits-gen --check    exit 1 with a diff if generated/ is stale (CI)
mxlogits-gen --list     print the files it would write
mxlogits-gen --ptxas    compile generated/'s cuda instance TUs, report registers/smem/spills (CI)
mxlogits-gen --isa      compile generated/'s hip instance TUs to AMDGPU ISA, report and check resources (CI)
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

from .render import RenderError, is_generated, render_all
from .table import TableError, load_table


def _find_root(start: Path) -> Path:
    for d in (start, *start.parents):
        if (d / "instances.yaml").is_file() and (d / "templates").is_dir():
            return d
    raise SystemExit(f"mxlogits-gen: no instances.yaml with templates/ beside it in {start} or above; pass --root")


def _existing(out: Path) -> dict[str, str]:
    if not out.is_dir():
        return {}
    return {
        p.relative_to(out).as_posix(): p.read_bytes().decode("utf-8", errors="replace")
        for p in sorted(out.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _listed(have: dict[str, str]) -> set[str]:
    """The files the output tree's manifest.json (the previous run's) lists."""
    try:
        doc = json.loads(have.get("manifest.json", ""))
        return {"manifest.json", *(path for arch in doc["arches"].values() for path in arch["files"])}
    except (ValueError, KeyError, TypeError, AttributeError):
        return set()


def foreign_files(out: Path) -> list[str]:
    """Files under `out` that mxlogits-gen did not write: neither carrying its header nor listed by
    the manifest there. It refuses to write into a tree that holds any."""
    have = _existing(out)
    listed = _listed(have)
    return [path for path, text in have.items() if path not in listed and not is_generated(text)]


def stale_report(out: Path, want: dict[str, str]) -> list[str]:
    """Unified diff lines between generated/ on disk and what the table renders to."""
    have = _existing(out)
    lines: list[str] = []
    for path in sorted(set(have) | set(want)):
        old, new = have.get(path), want.get(path)
        if old == new:
            continue
        lines += difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            fromfile=f"generated/{path}" if old is not None else "/dev/null",
            tofile=f"generated/{path}" if new is not None else "/dev/null",
        )
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
    return lines


def write(out: Path, want: dict[str, str]) -> tuple[list[str], list[str]]:
    """Write changed files, delete generated files nothing renders; returns (written, deleted).
    The caller has checked that `out` holds no foreign_files()."""
    have = _existing(out)
    written, deleted = [], []
    for path, text in sorted(want.items()):
        if have.get(path) != text:
            target = out / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            written.append(path)
    for path in sorted(set(have) - set(want)):
        (out / path).unlink()
        deleted.append(path)
        for d in (out / path).parents:  # directories the deletions emptied, up to out
            if d == out or any(d.iterdir()):
                break
            d.rmdir()
    return written, deleted


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mxlogits-gen", description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, help="checkout holding instances.yaml, templates/, generated/")
    ap.add_argument("--yaml", type=Path, help="instance table (default: ROOT/instances.yaml)")
    ap.add_argument("--templates", type=Path, help="template tree (default: ROOT/templates)")
    ap.add_argument("--out", type=Path, help="output tree (default: ROOT/generated)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 with a diff if the output is stale")
    mode.add_argument("--list", action="store_true", help="print the files it would write, write nothing")
    mode.add_argument(
        "--ptxas",
        action="store_true",
        help="compile the output tree's cuda instance TUs with nvcc and report ptxas resources and a digest "
        "of the code per kernel; exit 1 on a function outside its arch record's ptxas limits (sm90: a spill, "
        "a stack frame, a serialized wgmma), 2 on a compile error",
    )
    mode.add_argument(
        "--isa",
        action="store_true",
        help="compile the output tree's hip instance TUs to AMDGPU ISA with clang++-22 (device pass, no ROCm) "
        "and report resources per kernel; exit 1 on scratch, a spill, a missing expected instruction or a "
        "kernel over its arch record's isa limits, 2 on a compile error",
    )
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)

    if args.ptxas or args.isa:  # reads the rendered tree as it is; --check is what verifies it is current
        from . import isa, ptxas

        return (ptxas if args.ptxas else isa).report(args.out or (args.root or _find_root(Path.cwd())) / "generated")
    root = args.root or _find_root(Path.cwd())
    yaml_path = args.yaml or root / "instances.yaml"
    templates = args.templates or root / "templates"
    out = args.out or root / "generated"
    try:
        want = render_all(load_table(yaml_path, templates), templates)
    except (TableError, RenderError) as e:
        print(f"mxlogits-gen: {e}", file=sys.stderr)
        return 2
    if out.exists() and not out.is_dir():
        print(f"mxlogits-gen: --out {out}: expected a directory, found a file", file=sys.stderr)
        return 2

    if args.list:
        for path in sorted(want):
            print(out / path)
        return 0
    if args.check:
        diff = stale_report(out, want)
        if diff:
            sys.stdout.writelines(diff)
            print(f"\nmxlogits-gen: {out} is stale against {yaml_path} and {templates}.", file=sys.stderr)
            fix = " ".join(["mxlogits-gen", *(a for a in argv if a != "--check")])
            print(f"Fix: {fix}   (then commit generated/)", file=sys.stderr)
            return 1
        print(f"mxlogits-gen: {out} is up to date ({len(want)} files)")
        return 0
    foreign = foreign_files(out)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        print(
            f"mxlogits-gen: --out {out}: expected a directory holding only files mxlogits-gen wrote (its header, or "
            f"listed in its manifest.json), found {len(foreign)} other file(s): {shown}; nothing was written or "
            f"deleted: move them, or pick another --out",
            file=sys.stderr,
        )
        return 2
    written, deleted = write(out, want)
    for path in written:
        print(f"wrote   generated/{path}")
    for path in deleted:
        print(f"deleted generated/{path}")
    if not written and not deleted:
        print(f"mxlogits-gen: {out} is up to date ({len(want)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
