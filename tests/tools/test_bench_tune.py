"""python -m mxlogits bench --tune: the edit of one instance row, the request's checks (before any
build), the failure classification, and one end-to-end run on the host: the cpu arch given a
tunable its traits static_assert on, one combination that does not compile and one that runs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from argparse import Namespace
from types import SimpleNamespace

import pytest
import torch
import yaml
from mxlogits.__main__ import main
from mxlogits.bench.limits import Limits
from mxlogits.bench.shapes import QUICK_SCALE, TABLES
from mxlogits.bench.tune import Job, TuneError, _error_lines, bench, parse_spec, plan_jobs
from mxlogits.bench.tune_yaml import RowError, row_line, set_instance_keys
from mxlogits_codegen.table import SWEPT_COLUMNS, TableError, load_table
from support.checkout import ROOT
from support.processes import python

CPU_TUNABLE = "tunables: {probe: {default: 8, min: 4, max: 8}}"
ASSERT = '  static_assert(Tunables::probe != 5, "probe 5 does not compile");\n'


@pytest.fixture
def root(tmp_path):
    """A checkout whose cpu arch declares `probe` (4..8), which its traits refuse to compile at 5."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "templates", root / "templates")
    text = (ROOT / "instances.yaml").read_text()
    cpu = re.search(r"^( *)- name: cpu\n", text, flags=re.MULTILINE)
    tunable = f"{cpu.group(1)}  {CPU_TUNABLE}\n"
    (root / "instances.yaml").write_text(text[: cpu.end()] + tunable + text[cpu.end() :])
    traits = root / "templates" / "arch" / "cpu" / "traits.h.j2"
    lines = traits.read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("struct Traits"))
    traits.write_text("".join(lines[: at + 1] + [ASSERT] + lines[at + 1 :]))
    return root


def test_one_row_changes_and_nothing_else(tmp_path):
    text = (ROOT / "instances.yaml").read_text()
    new = set_instance_keys(text, "sm90", "qlen2_kv64", {"warpgroups": 4, "stages": 8})
    changed = [(a, b) for a, b in zip(text.splitlines(), new.splitlines()) if a != b]
    assert len(text.splitlines()) == len(new.splitlines()) and len(changed) == 1
    assert row_line(new, "sm90", "qlen2_kv64") == changed[0][1].strip()
    path = tmp_path / "instances.yaml"
    path.write_text(new)
    before, after = load_table(ROOT / "instances.yaml", ROOT / "templates"), load_table(path, ROOT / "templates")
    assert after.arches == before.arches
    for old, inst in zip(before.instances, after.instances):
        if (inst.arch, inst.name) != ("sm90", "qlen2_kv64"):
            assert inst == old
        else:
            assert dict(inst.tunables) == {**dict(old.tunables), "warpgroups": 4, "stages": 8}


FLOW = """instances:  # rows
  - {arch: cpu, name: a,  block_k: 64,  cta_resident: 128, default: true}  # the default
  - {arch: sm90, name: a, block_k: 64, cta_resident: 132, warpgroups: 3}
"""


def test_flow_rows_keep_their_text():
    new = set_instance_keys(FLOW, "sm90", "a", {"warpgroups": 4, "stages": 8, "cta_resident": 264})
    assert new == FLOW.replace("132, warpgroups: 3}", "264, warpgroups: 4, stages: 8}")
    # The same name on another arch is another row; alignment and comments stay.
    new = set_instance_keys(FLOW, "cpu", "a", {"cta_resident": 64, "stages": 8})
    assert new == FLOW.replace("cta_resident: 128, default: true}", "cta_resident: 64, default: true, stages: 8}")


def test_block_style_rows_and_missing_rows():
    text = "instances:\n  - arch: cpu\n    name: a  # comment\n    stages: 2\n  - {arch: cpu, name: b}\n"
    new = set_instance_keys(text, "cpu", "a", {"stages": 4, "warps": 3})
    assert yaml.safe_load(new)["instances"] == [
        {"arch": "cpu", "name": "a", "stages": 4, "warps": 3},
        {"arch": "cpu", "name": "b"},
    ]
    assert "name: a  # comment" in new and row_line(new, "cpu", "a").endswith("warps: 3")
    with pytest.raises(RowError, match="arch 'sm90' and name 'a', found 0"):
        set_instance_keys(text, "sm90", "a", {"stages": 4})


def test_spec_parsing():
    assert parse_spec(["stages=8,16;warpgroups=3,4", "pass_columns=64"]) == {
        "stages": [8, 16],
        "warpgroups": [3, 4],
        "pass_columns": [64],
    }
    for bad, message in [
        ("stages", "NAME=V1,V2"),
        ("stages=8,x", "comma-separated integers"),
        ("stages=8,8", "repeats"),
        ("stages=8;stages=4", "given twice"),
        (";", "found nothing"),
    ]:
        with pytest.raises(TuneError, match=message):
            parse_spec([bad])


def test_error_lines_keep_the_compiler_diagnostics(tmp_path):
    log = (
        "Traceback (most recent call last):\n"
        f"{tmp_path}/generated/cpu/traits.h:14:33: error: static assertion failed: probe 5\n"
        f'{tmp_path}/generated/sm90/body.h(120): error: identifier "x" is undefined\n'
        "RuntimeError: Error building extension 'mxlogits_cpu_0'\n"
    )
    assert _error_lines(log, tmp_path / "generated").splitlines() == [
        "generated/cpu/traits.h:14:33: error: static assertion failed: probe 5",
        'generated/sm90/body.h(120): error: identifier "x" is undefined',
    ]
    assert _error_lines("a\nBenchError: not timing a wrong kernel\n", tmp_path).endswith("wrong kernel")


def test_a_wrong_kernel_is_reported_not_timed(tmp_path, monkeypatch):
    job = Job("qlen1_kv64", ("decode_mtp1",), (("probe", 8),), True, tmp_path)
    failed = subprocess.CompletedProcess([], 1, "", "mxlogits bench: ... not timing a wrong kernel\n")
    monkeypatch.setattr("mxlogits.bench.tune._run", lambda *args: failed)
    args = Namespace(quick=True, repeats=1)
    bench(job, args, torch.device("cpu"), Limits(1e9, 1e9, ""))
    assert job.status == "wrong results" and "wrong kernel" in job.detail and not job.op_us


def test_bad_requests_fail_before_anything_is_built(root, capsys):
    def error(*tune, extra=()):
        argv = ["bench", "--device", "cpu", "--tune-root", str(root), *extra]
        for spec in tune:
            argv += ["--tune", spec]
        assert main(argv) == 2
        return capsys.readouterr().err

    message = error("probe=4,9")  # the loader's range check, located in the table --tune started from
    assert f"--tune probe=9 (qlen1_kv64): {root / 'instances.yaml'}:" in message
    assert "instances[0].probe: expected an integer in [4, 8], found 9" in message  # the arch's declared range
    assert "['stages']: neither cta_resident nor setup_tokens nor a tunable cpu declares" in error("stages=4")
    assert "unknown ['nope'] for cpu" in error("probe=4", extra=["--variant", "nope"])
    message = error("cta_resident=0")
    assert "--tune cta_resident=0 (qlen1_kv64)" in message and "instances[0].cta_resident" in message
    assert "no --sweep or --plot" in error("probe=4", extra=["--sweep"])


def test_a_combination_the_table_refuses_in_range_is_skipped(root, tmp_path):
    def load(path, templates):  # as a budget computed per row would refuse probe=6
        if any("name: qlen1_kv64," in ln and "probe: 6}" in ln for ln in path.read_text().splitlines()):
            raise TableError(f"{path}:58:3: instances[0]: expected scratch_bytes <= 1048576, found 2000000")
        return load_table(path, templates)

    cg = SimpleNamespace(load_table=load, TableError=TableError, SWEPT_COLUMNS=SWEPT_COLUMNS)
    args = Namespace(tables="decode_mtp1,prefill_fresh", variant=None)
    jobs = plan_jobs(args, cg, root, "cpu", {"probe": [6, 8]}, tmp_path / "jobs")
    assert [(j.variant, j.label, j.status) for j in jobs] == [
        ("qlen1_kv64", "probe=6", "refused by the table"),
        ("qlen1_kv64", "probe=8", "pending"),
        ("qlen4_kv64", "probe=6", "pending"),
        ("qlen4_kv64", "probe=8", "pending"),
    ]
    assert jobs[0].detail.startswith(f"{root / 'instances.yaml'}:58:3: ") and jobs[0].table is None
    assert jobs[1].current and not jobs[0].current and dict(jobs[1].table.instances[0].tunables) == {"probe": 8}
    assert [j.tables for j in jobs] == [("decode_mtp1",)] * 2 + [("prefill_fresh",)] * 2


def test_tune_runs_each_combination_and_skips_one_that_does_not_compile(root, tmp_path):
    out = tmp_path / "tune.json"
    argv = ["bench", "--device", "cpu", "--quick", "--repeats", "1", "--tables", "decode_mtp2", "--tune", "probe=5,8"]
    argv += ["--tune-root", str(root), "--json", str(out)]
    env = {"MXLOGITS_CACHE_DIR": str(tmp_path / "cache")}
    result = python(f"import sys; from mxlogits.__main__ import main; sys.exit(main({argv!r}))", env=env)
    lines = result.stdout.splitlines()
    (failed,) = [ln for ln in lines if ln.startswith("probe=5 ")]
    assert "does not compile" in failed and "probe 5 does not compile" in result.stdout
    (best,) = [ln for ln in lines if ln.startswith("probe=8 (current)")]
    assert best.endswith("<- best")
    after = next(i for i, ln in enumerate(lines) if ln.startswith("best for qlen4_kv64: probe=8 (current)"))
    row = next(ln for ln in (root / "instances.yaml").read_text().splitlines() if "arch: cpu, name: qlen4_kv64," in ln)
    assert lines[after + 1].strip() == row.strip().replace("}", ", probe: 8}")
    doc = json.loads(out.read_text())
    (tuned,) = doc["variants"]
    assert tuned["variant"] == "qlen4_kv64" and tuned["best"] == {"probe": 8}  # cpu has no q_per_block 2: one 4-row tile
    statuses = {c["values"]["probe"]: c["status"] for c in tuned["combinations"]}
    assert statuses == {5: "does not compile", 8: "ok"}
    shapes = [f"decode_mtp2 {s.label}" for s in TABLES["decode_mtp2"](QUICK_SCALE, 128)]
    assert tuned["rows"] == tuned["common_rows"] == shapes
    assert list(tuned["combinations"][1]["op_us"]) == shapes


def test_tune_imports_the_generator_only_when_it_runs(tmp_path):
    code = (
        "import sys, mxlogits.__main__, mxlogits.bench.tune;"
        "print(sorted(m for m in ('jinja2', 'yaml', 'mxlogits_codegen') if m in sys.modules));"
        "sys.modules['jinja2'] = None;"
        "sys.exit(mxlogits.__main__.main(['bench', '--device', 'cpu', '--tune', 'cta_resident=64']))"
    )
    result = python(code, check=False)
    assert result.stdout.strip() == "[]"
    assert result.returncode == 2 and "pip install 'mxlogits[codegen]'" in result.stderr
