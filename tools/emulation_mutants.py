"""Mutation evidence for the host emulation of the AMD bodies: each mutant changes one fact a body or
its emulated instructions rest on (a lane map of each atom, the op_sel byte of the scales, the row
guard, the chunk loop bound, a tensor-copy descriptor field, a permlane swap), renders the mutated
templates into a temporary generated tree, and runs the emulated tests of that arch against it
(MXLOGITS_GENERATED_DIR). A mutant no test fails is a missing test.

    python tools/emulation_mutants.py [--only NAME ...]

Prints, per mutant, how many tests failed and how many ran, one pytest process a test file, and the
files whose process died (a read far outside a tensor can fault the host); exit status 1 when a
mutant survives. Each mutant builds its arch's emulation module once (a minute on 2 cores) and runs
that arch's emulated tests (a few minutes)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    arch: str  # whose emulated tests run
    template: str  # under templates/
    old: str | tuple[str, ...]  # text found exactly once (each, when several)
    new: str | tuple[str, ...]

    def edits(self) -> list[tuple[str, str]]:
        return list(zip(*(((x,) if isinstance(x, str) else x) for x in (self.old, self.new))))


MUTANTS = (
    Mutant("gfx950 atom: accumulator row map", "gfx950", "arch/gfx950/atom.h.j2",
           "return 8 * (i / 4) + 4 * (lane / kN) + i % 4;", "return 4 * (i / 4) + 8 * (lane / kN) + i % 4;"),
    Mutant("gfx950 atom: A row map", "gfx950", "arch/gfx950/atom.h.j2",
           "MXL_HD constexpr int a_row(int lane) { return lane % kM; }",
           "MXL_HD constexpr int a_row(int lane) { return (lane + 1) % kM; }"),
    Mutant("gfx1250 atom: operand K block (contiguous K halves)", "gfx1250", "arch/gfx1250/atom.h.j2",
           "return 2 * ((v % 8) / 4) + lane / 16; }", "return (v % 8) / 4 + 2 * (lane / 16); }"),
    Mutant("gfx1250 atom: accumulator row map", "gfx1250", "arch/gfx1250/atom.h.j2",
           "return 16 * (i / 8) + 8 * (lane / 16) + i % 8; }", "return 16 * (i / 8) + i % 8; }"),
    Mutant("gfx950 op_sel of the query scale bytes", "gfx950", "arch/gfx950/operands.h.j2",
           "MXL_HD constexpr int q_scale_select(int mi, int kt) { return kt * kMTiles + mi; }",
           "MXL_HD constexpr int q_scale_select(int mi, int kt) { return mi * kKTiles + kt; }"),
    Mutant("gfx1250 scale select of B", "gfx1250", "arch/gfx1250/body.h.j2",
           "const atom::Accumulator d = atom::mma<U>(", "const atom::Accumulator d = atom::mma<0>("),
    Mutant("row guard (records: rows past the plan's)", "gfx950", "common/records.h.j2",
           ("r.row_id < 0 || r.row_id >= a.num_rows ||",
            "lesser(lesser(r.row_count, QPB), int64_t(a.num_rows) - r.row_id)"),
           ("r.row_id < 0 ||", "lesser(r.row_count, QPB)")),
    Mutant("gfx1250 row guard (waves past the tile's rows)", "gfx1250", "arch/gfx1250/body.h.j2",
           "const bool live = wave < span.rows;", "const bool live = wave < T::Q_PER_BLOCK;"),
    Mutant("gfx950 chunk loop bound (a record's pages)", "gfx950", "arch/gfx950/body.h.j2",
           "int32_t((span.hi - 1) / kPageSize) + 1 - first", "int32_t((span.hi - 1) / kPageSize) - first"),
    Mutant("gfx1250 chunk loop bound (a record's pages)", "gfx1250", "arch/gfx1250/body.h.j2",
           "for (int64_t i = 0; i < pages; ++i) {", "for (int64_t i = 0; i + 1 < pages; ++i) {"),
    Mutant("TDM descriptor: pad amount", "gfx1250", "arch/gfx1250/tdm.h.j2",
           "(lds::kPadBytes / 4 - 1) << 25", "(lds::kPadBytes / 4) << 25"),
    Mutant("TDM descriptor: tile rows", "gfx1250", "arch/gfx1250/tdm.h.j2",
           "rows, dwords, 0u, 0u} };", "rows - 1, dwords, 0u, 0u} };"),
    Mutant("gfx950 permlane32 swap: the halves traded", "gfx950", "arch/gfx950/xlane.h.j2",
           "      out[l + 32]->x = in[l]->y;\n      out[l]->y = in[l + 32]->x;",
           "      out[l + 32]->x = in[l + 32]->y;\n      out[l]->y = in[l]->x;"),
    Mutant("gfx1250 permlane16 swap: the halves summed", "gfx1250", "arch/gfx1250/xlane.h.j2",
           "return __builtin_bit_cast(float, r.vdst) + __builtin_bit_cast(float, r.vsrc);",
           "return __builtin_bit_cast(float, r.vdst) + __builtin_bit_cast(float, r.vdst);"),
)


def selection(arch: str) -> str:
    """pytest -k of the tests that run `arch`'s emulated code: the op suite's emulated params, its
    instruction tests and the atom's lane-map tests."""
    return f"({arch} and emulated) or {arch}_instructions or {arch}_atom"


def run(mutant: Mutant, work: Path) -> tuple[int, int, list[str]]:
    """(failed, ran, test files whose process died) of the mutant's arch's emulated tests against the
    mutated tree, one pytest process a test file (a read far outside a tensor can fault the host)."""
    templates = work / "templates"
    shutil.copytree(ROOT / "templates", templates)
    path = templates / mutant.template
    text = path.read_text()
    for old, new in mutant.edits():
        if text.count(old) != 1:
            raise SystemExit(f"{mutant.name}: expected {old!r} once in templates/{mutant.template}, "
                             f"found it {text.count(old)} times")  # fmt: skip
        text = text.replace(old, new)
    path.write_text(text)
    generated = work / "generated"
    gen = [sys.executable, "-m", "mxlogits_codegen", "--root", str(ROOT), "--templates", str(templates), "--out",
           str(generated)]  # fmt: skip
    subprocess.run(gen, check=True, capture_output=True)
    # One build cache for the mutant's processes: each emulation module builds once.
    env = dict(os.environ, MXLOGITS_GENERATED_DIR=str(generated), MXLOGITS_TEST_CACHE_DIR=str(work / "cache"))
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", selection(mutant.arch)]
    listed = subprocess.run([*pytest, "--collect-only", "tests"], cwd=ROOT, env=env, capture_output=True, text=True)
    files = sorted({line.split("::")[0] for line in listed.stdout.splitlines() if "::" in line})
    failed = ran = 0
    died = []
    for f in files:
        done = subprocess.run([*pytest, f], cwd=ROOT, env=env, capture_output=True, text=True)
        tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        failed += sum(int(n) for n in re.findall(r"(\d+) (?:failed|error)", tail))
        ran += sum(int(n) for n in re.findall(r"(\d+) (?:failed|error|passed)", tail))
        if done.returncode not in (0, 1, 5):  # 5: nothing selected in the file
            died.append(Path(f).name)
    return failed, ran, died


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="names (substrings) of the mutants to run")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.only or any(o in m.name for o in args.only)]
    survivors = 0
    print(f"{'mutant':52} {'failed':>7} {'ran':>5}  test files whose process died")
    for m in chosen:
        with tempfile.TemporaryDirectory(prefix="mxlogits-mutant-") as work:
            failed, ran, died = run(m, Path(work))
        survivors += not failed and not died
        verdict = "SURVIVED" if not failed and not died else ", ".join(died)
        print(f"{m.name:52} {failed:7} {ran:5}  {verdict}", flush=True)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
