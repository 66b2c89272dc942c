"""mxlogits-gen: validation errors located to file:line:column, deterministic output, --check,
--list, incremental writes and deletion of stale files."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from mxlogits_codegen.cli import main as gen_main
from mxlogits_codegen.render import RenderError, render_all
from mxlogits_codegen.table import TableError, load_table
from support.checkout import GENERATED, ROOT, STUB_ARCHES, TEMPLATES
from support.toolchains import needs_nvcc
GOOD = """\
table:
  heads: 64
  head_dim: 128
  page_size: 64
arches:
  - name: cpu
    family: host
    target: host
    flags: [-O3]
    scale_layout: natural
    setup_tokens: {one_row: 512, more_rows: 448}
    budgets:
      scratch_bytes: {limit: 1048576, use: "4 * (q_per_block * heads * (head_dim + 1) + (block_k + 8) * head_dim)"}
instances:
  - {arch: cpu, name: qlen1_kv64, q_per_block: 1, block_k: 64, cta_resident: 8, default: true}
  - {arch: cpu, name: qlen4_kv256, q_per_block: 4, block_k: 256, cta_resident: 8}
"""


def load(tmp_path: Path, text: str):
    path = tmp_path / "instances.yaml"
    path.write_text(text)
    return load_table(path, TEMPLATES)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


ERRORS = {
    # name: (old, new, line marker in the edited text, message pattern)
    "unknown top-level key": (
        "instances:",
        "extra: 1\ninstances:",
        "extra: 1",
        r"\(top level\)\.extra: expected one of .*found unknown key 'extra'",
    ),
    "unknown instance key": (
        "cta_resident: 8, default",
        "cta_resident: 8, warps: 4, default",
        "warps: 4",
        r"instances\[0\]\.warps: expected one of .*found unknown key 'warps'",
    ),
    "unknown arch key": (
        "    target: host",
        "    target: host\n    arch_flags: []",
        "arch_flags",
        r"arches\[0\]\.arch_flags: expected one of .*found unknown key 'arch_flags'",
    ),
    "duplicate key": (
        "block_k: 64, cta",
        "block_k: 64, block_k: 64, cta",
        "block_k: 64, block_k",
        r"instances\[0\]\.block_k: expected each key once, found a duplicate key",
    ),
    "duplicate (arch, name)": (
        "name: qlen4_kv256",
        "name: qlen1_kv64",
        "q_per_block: 4",
        r"instances\.name: expected a unique \(arch, name\), found \('cpu', 'qlen1_kv64'\) again \(first at line 15\)",
    ),
    "no default": (
        ", default: true}",
        "}",
        "- name: cpu",
        r"instances\.default: expected exactly one default instance of arch 'cpu', found none",
    ),
    "two defaults": (
        "cta_resident: 8}",
        "cta_resident: 8, default: true}",
        "- name: cpu",
        r"found 'qlen1_kv64' \(line 15\), 'qlen4_kv256' \(line 16\)",
    ),
    "q_per_block < 1": (
        "q_per_block: 1,",
        "q_per_block: 0,",
        "q_per_block: 0",
        r"instances\[0\]\.q_per_block: expected an integer in \[1, 2147483647\], found 0",
    ),
    "cta_resident < 1": (
        "block_k: 64, cta_resident: 8",
        "block_k: 64, cta_resident: -2",
        "cta_resident: -2",
        r"instances\[0\]\.cta_resident: expected an integer in \[1, 2147483647\], found -2",
    ),
    "block_k not a multiple of the page": (
        "block_k: 64,",
        "block_k: 96,",
        "block_k: 96",
        r"instances\[0\]\.block_k: expected a positive multiple of table\.page_size \(64\) up to 2147483647, found 96",
    ),
    "block_k zero": (
        "block_k: 64,",
        "block_k: 0,",
        "block_k: 0",
        r"instances\[0\]\.block_k: expected a positive multiple",
    ),
    "unsupported heads": ("heads: 64", "heads: 48", "heads: 48", r"table\.heads: expected one of \[32, 64\], found 48"),
    "unsupported head_dim": (
        "head_dim: 128",
        "head_dim: 96",
        "head_dim: 96",
        r"table\.head_dim: expected one of \[64, 128\], found 96",
    ),
    "arch without a body template": (
        "name: cpu\n",
        "name: sm99\n",
        "name: sm99",
        r"arches\[0\]\.name: expected an arch with templates/arch/sm99/traits\.h\.j2, found no such template",
    ),
    "same (q_per_block, block_k) twice": (
        "q_per_block: 4, block_k: 256",
        "q_per_block: 1, block_k: 64",
        "qlen4_kv256",
        r"expected one instance per \(q_per_block, block_k\) of arch 'cpu', found \(1, 64\) in both 'qlen1_kv64' \(line 15\) and 'qlen4_kv256'",
    ),
    "instance of an unknown arch": (
        "{arch: cpu, name: qlen4",
        "{arch: gfx950, name: qlen4",
        "gfx950",
        r"instances\[1\]\.arch: expected one of the arches \['cpu'\], found 'gfx950'",
    ),
    "wrong type": (
        "cta_resident: 8, default: true",
        "cta_resident: '8', default: true",
        "'8'",
        r"instances\[0\]\.cta_resident: expected an integer in \[1, 2147483647\], found '8'",
    ),
    "bool is not an int": (
        "q_per_block: 1,",
        "q_per_block: true,",
        "q_per_block: true",
        r"q_per_block: expected an integer in \[1, 2147483647\], found True",
    ),
    "bad family": (
        "family: host",
        "family: metal",
        "family: metal",
        r"arches\[0\]\.family: expected one of \['host', 'cuda', 'hip'\], found 'metal'",
    ),
    "target of another family": (
        "target: host",
        "target: sm_90a",
        "target: sm_90a",
        r"arches\[0\]\.target: expected a host target \('host'\), found 'sm_90a'",
    ),
    "missing key": (
        "    scale_layout: natural\n",
        "",
        "- name: cpu",
        r"arches\[0\]\.scale_layout: expected this key, found it missing",
    ),
    "bad identifier": (
        "name: qlen1_kv64",
        "name: 1qlen",
        "1qlen",
        r"instances\[0\]\.name: expected a C identifier, found '1qlen'",
    ),
    # Rows the templates cannot compile: refused here, not by the first JIT build.
    "q_per_block past int32": (
        "q_per_block: 1,",
        "q_per_block: 2147483648,",
        "2147483648",
        r"instances\[0\]\.q_per_block: expected an integer in \[1, 2147483647\], found 2147483648",
    ),
    "block_k of 2**40": (
        "block_k: 64,",
        "block_k: 1099511627776,",
        "1099511627776",
        r"instances\[0\]\.block_k: expected a positive multiple of table\.page_size \(64\) up to 2147483647, "
        r"found 1099511627776",
    ),
    "cta_resident of 2**40": (
        "block_k: 64, cta_resident: 8",
        "block_k: 64, cta_resident: 1099511627776",
        "1099511627776",
        r"instances\[0\]\.cta_resident: expected an integer in \[1, 2147483647\], found 1099511627776",
    ),
    "an unknown out form": (
        "    scale_layout: natural\n",
        "    scale_layout: natural\n    out_forms: [bf16, fp8]\n",
        "out_forms",
        r"arches\[0\]\.out_forms\[1\]: expected one of \['bf16', 'from_start'\], found 'fp8'",
    ),
    "an out form twice": (
        "    scale_layout: natural\n",
        "    scale_layout: natural\n    out_forms: [from_start, from_start]\n",
        "out_forms",
        r"arches\[0\]\.out_forms\[1\]: expected each form once, found 'from_start' again",
    ),
    "a negative setup_tokens": (
        "block_k: 64, cta_resident: 8",
        "block_k: 64, cta_resident: 8, setup_tokens: -64",
        "-64",
        r"instances\[0\]\.setup_tokens: expected an integer in \[0, 2147483647\], found -64",
    ),
    "a setup_tokens of 2**40": (
        "block_k: 64, cta_resident: 8",
        "block_k: 64, cta_resident: 8, setup_tokens: 1099511627776",
        "1099511627776",
        r"instances\[0\]\.setup_tokens: expected an integer in \[0, 2147483647\], found 1099511627776",
    ),
    "an instance over the scratch budget": (
        "q_per_block: 4, block_k: 256",
        "q_per_block: 32, block_k: 256",
        "q_per_block: 32",
        r"instances\[1\]: expected an instance within budget scratch_bytes = 1048576 of arch 'cpu' \(line 13\), "
        r"found one that needs 1191936 \(4 \* \(q_per_block",
    ),
    "a budget expression over unknown names": (
        "(block_k + 8) * head_dim)",
        "(block_k + 8) * warps)",
        "scratch_bytes",
        r"arches\[0\]\.budgets\.scratch_bytes\.use: expected an integer expression over \[.*'q_per_block'.*\], "
        r"found .*'warps' is undefined",
    ),
    "a budget past int32": (
        "limit: 1048576",
        "limit: 4294967296",
        "limit: 4294967296",
        r"arches\[0\]\.budgets\.scratch_bytes\.limit: expected an integer in \[1, 2147483647\], found 4294967296",
    ),
    "a tunable past int32": (
        "    target: host\n",
        "    target: host\n    tunables: {stages: {default: 1, min: 1, max: 4294967296}}\n",
        "tunables",
        r"arches\[0\]\.tunables\.stages\.max: expected an integer in \[min \(1\), 2147483647\], found 4294967296",
    ),
    "an infinite atol": (
        "cta_resident: 8, default: true",
        "cta_resident: 8, default: true, atol: .inf",
        ".inf",
        r"instances\[0\]\.atol: expected a finite positive number, found inf",
    ),
    "a NaN rtol": (
        "cta_resident: 8, default: true",
        "cta_resident: 8, default: true, rtol: .nan",
        ".nan",
        r"instances\[0\]\.rtol: expected a finite positive number, found nan",
    ),
    "a flag the host compiler rejects": (
        "flags: [-O3]",
        "flags: [-O3, -fno-such-flag]",
        "-fno-such-flag",
        r"arches\[0\]\.flags\[1\]: expected a flag the host compiler accepts, found '-fno-such-flag': ",
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_validation_error_names_file_line_key_expected_found(tmp_path, case):
    old, new, marker, pattern = ERRORS[case]
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    with pytest.raises(TableError) as err:
        load(tmp_path, text)
    message = str(err.value)
    assert re.match(rf"{re.escape(str(tmp_path / 'instances.yaml'))}:{line_of(text, marker)}:\d+: ", message), message
    assert re.search(pattern, message), message


def test_errors_carry_the_column_of_the_cell(tmp_path):
    text = GOOD.replace("block_k: 64,", "block_k: 96,", 1)
    column = text.splitlines()[line_of(text, "96") - 1].index("96") + 1
    with pytest.raises(TableError, match=rf"instances\.yaml:{line_of(text, '96')}:{column}: instances\[0\]\.block_k"):
        load(tmp_path, text)


def test_yaml_syntax_errors_name_file_line_and_column(tmp_path):
    """Not `<unicode string>`: the table's own path, and where the parser stopped."""
    text = GOOD.replace("    target: host\n", "    target: host\n    flags: [-O3\n", 1)
    with pytest.raises(TableError) as err:
        load(tmp_path, text)
    message = str(err.value)
    assert re.match(rf"{re.escape(str(tmp_path / 'instances.yaml'))}:\d+:\d+: expected valid YAML, found a syntax "
                    rf"error: ", message), message
    assert "<unicode string>" not in message


def test_unknown_budget_keys_are_refused(tmp_path):
    """A budget no template reads would be ignored: refused at its YAML line."""
    text = GOOD.replace("    budgets:\n", "    budgets:\n      scratch_byte: 1000\n", 1)
    with pytest.raises(TableError) as err:
        render_all(load(tmp_path, text), TEMPLATES)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'instances.yaml'}:{line_of(text, 'scratch_byte:')}:7: "), message
    assert (
        "budgets.scratch_byte (arch 'cpu'): expected a budget the cpu templates read (['scratch_bytes']), found "
        "unknown key 'scratch_byte'"
    ) in message


@needs_nvcc
def test_a_flag_nvcc_rejects_is_refused(tmp_path):
    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES, templates)
    shutil.copytree(STUB_ARCHES / "stubcuda", templates / "arch" / "stubcuda")
    stub = (
        "  - {name: stubcuda, family: cuda, target: sm_90a, flags: [-O3, --no-such-nvcc-flag], "
        "scale_layout: natural, setup_tokens: {one_row: 512, more_rows: 448}, budgets: {max_registers: 32}}\n"
        "instances:\n"
        "  - {arch: stubcuda, name: clean, q_per_block: 1, block_k: 64, cta_resident: 8, default: true}\n"
    )
    with pytest.raises(TableError, match=r"flags\[1\]: expected a flag the cuda compiler accepts, found "
                                         r"'--no-such-nvcc-flag'"):
        load_table(_write(tmp_path, GOOD.replace("instances:\n", stub, 1)), templates)


def test_good_table_and_invalid_yaml(tmp_path):
    table = load(tmp_path, GOOD)
    assert [i.name for i in table.instances] == ["qlen1_kv64", "qlen4_kv256"]
    with pytest.raises(TableError, match=r"instances\.yaml:18:1: expected valid YAML, found a syntax error"):
        load(tmp_path, GOOD + "  - {arch: [\n")


def test_output_is_deterministic_and_independent_of_row_order(tmp_path):
    a = render_all(load(tmp_path, GOOD), TEMPLATES)
    assert a == render_all(load(tmp_path, GOOD), TEMPLATES)
    lines = GOOD.splitlines(keepends=True)
    swapped = "".join(lines[:-2] + [lines[-1], lines[-2]])
    assert swapped != GOOD and render_all(load(tmp_path, swapped), TEMPLATES) == a


def test_every_generated_file_says_do_not_edit(tmp_path):
    files = render_all(load(tmp_path, GOOD), TEMPLATES)
    for path, text in files.items():
        first = text.splitlines()[0] if not path.endswith(".json") else text.splitlines()[1]
        assert "Do not edit" in first, path


def test_undefined_template_names_are_errors(tmp_path):
    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES, templates)
    body = templates / "arch" / "cpu" / "body.h.j2"
    body.write_text(body.read_text() + "{{ no_such_name }}\n")
    with pytest.raises(RenderError, match=r"templates/arch/cpu/body\.h\.j2.*generated/cpu/body\.h.*no_such_name"):
        render_all(load_table(_write(tmp_path, GOOD), templates), templates)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "instances.yaml"
    path.write_text(text)
    return path


def checkout(tmp_path: Path, text: str = GOOD) -> Path:
    """A minimal checkout: instances.yaml, templates/, generated/ written by the generator."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "instances.yaml").write_text(text)
    shutil.copytree(TEMPLATES, root / "templates")
    assert gen_main(["--root", str(root)]) == 0
    return root


def test_check_passes_when_fresh_and_list_writes_nothing(tmp_path, capsys):
    root = checkout(tmp_path)
    assert gen_main(["--root", str(root), "--check"]) == 0
    before = {p: p.stat().st_mtime_ns for p in (root / "generated").rglob("*")}
    capsys.readouterr()
    assert gen_main(["--root", str(root), "--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert str(root / "generated" / "manifest.json") in listed
    assert str(root / "generated" / "cpu" / "instance_qlen4_kv256.cpp") in listed
    assert before == {p: p.stat().st_mtime_ns for p in (root / "generated").rglob("*")}


@pytest.mark.parametrize("damage", ["stale", "missing", "extra"])
def test_check_catches_stale_missing_and_extra_files(tmp_path, capsys, damage):
    root = checkout(tmp_path)
    gen = root / "generated"
    if damage == "stale":
        body = gen / "cpu" / "body.h"
        body.write_text(body.read_text().replace("kHeadGroup = 16", "kHeadGroup = 8"))
        mark = "generated/cpu/body.h"
    elif damage == "missing":
        (gen / "cpu" / "launcher.cpp").unlink()
        mark = "+++ generated/cpu/launcher.cpp"
    else:  # a generated file of an instance since removed
        (gen / "cpu" / "instance_qlen2_kv64.cpp").write_text((gen / "cpu" / "instance_qlen1_kv64.cpp").read_text())
        mark = "--- generated/cpu/instance_qlen2_kv64.cpp"
    capsys.readouterr()
    assert gen_main(["--root", str(root), "--check"]) == 1
    captured = capsys.readouterr()
    assert mark in captured.out
    assert f"Fix: mxlogits-gen --root {root}" in captured.err
    assert gen_main(["--root", str(root)]) == 0
    assert gen_main(["--root", str(root), "--check"]) == 0


def test_writes_only_changed_files_and_deletes_removed_instances(tmp_path, capsys):
    root = checkout(tmp_path)
    gen = root / "generated"
    stamp = {p: p.stat().st_mtime_ns for p in gen.rglob("*") if p.is_file()}
    (root / "instances.yaml").write_text(
        GOOD.replace("  - {arch: cpu, name: qlen4_kv256, q_per_block: 4, block_k: 256, cta_resident: 8}\n", "")
    )
    capsys.readouterr()
    assert gen_main(["--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "deleted generated/cpu/instance_qlen4_kv256.cpp" in out
    assert not (gen / "cpu" / "instance_qlen4_kv256.cpp").exists()
    untouched = gen / "common" / "sched.h"
    assert untouched.stat().st_mtime_ns == stamp[untouched] and "sched.h" not in out
    assert "wrote   generated/manifest.json" in out


def test_foreign_files_in_the_output_directory_are_refused_not_deleted(tmp_path, capsys):
    """`--out` at a folder of notes, or at templates/: nothing is written and nothing deleted."""
    root = checkout(tmp_path)
    notes = tmp_path / "notes"
    (notes / "deep").mkdir(parents=True)
    (notes / "todo.txt").write_text("buy milk\n")
    (notes / "deep" / "plan.md").write_text("# plan\n")
    (notes / "empty").mkdir()
    templates_before = {p: p.read_bytes() for p in (root / "templates").rglob("*") if p.is_file()}
    for out, named in ((notes, "found 2 other file(s): deep/plan.md, todo.txt;"), (root / "templates", "body.h.j2")):
        capsys.readouterr()
        assert gen_main(["--root", str(root), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"--out {out}: expected a directory holding only files mxlogits-gen wrote" in err
        assert named in err and "nothing was written or deleted" in err
    assert sorted(p.relative_to(notes).as_posix() for p in notes.rglob("*")) == [
        "deep",
        "deep/plan.md",
        "empty",
        "todo.txt",
    ]
    assert {p: p.read_bytes() for p in (root / "templates").rglob("*") if p.is_file()} == templates_before


def test_a_file_the_previous_manifest_lists_is_deleted_even_without_its_header(tmp_path, capsys):
    root = checkout(tmp_path)
    tu = root / "generated" / "cpu" / "instance_qlen4_kv256.cpp"
    tu.write_text("// hand-edited, header gone\n")  # still listed by generated/manifest.json
    (root / "instances.yaml").write_text(
        GOOD.replace("  - {arch: cpu, name: qlen4_kv256, q_per_block: 4, block_k: 256, cta_resident: 8}\n", "")
    )
    capsys.readouterr()
    assert gen_main(["--root", str(root)]) == 0
    assert "deleted generated/cpu/instance_qlen4_kv256.cpp" in capsys.readouterr().out and not tu.exists()


def test_a_missing_table_is_an_error_not_a_traceback(tmp_path, capsys):
    root = checkout(tmp_path)
    missing = tmp_path / "nope.yaml"
    assert gen_main(["--root", str(root), "--yaml", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mxlogits-gen: {missing}: expected a readable instance table") and "Traceback" not in err


def test_committed_generated_tree_is_fresh():
    assert gen_main(["--root", str(ROOT), "--check"]) == 0


def test_cli_reports_table_errors(tmp_path, capsys):
    root = checkout(tmp_path)
    (root / "instances.yaml").write_text(GOOD.replace("q_per_block: 1,", "q_per_block: 0,"))
    assert gen_main(["--root", str(root), "--check"]) == 2
    assert "instances[0].q_per_block: expected an integer in [1, 2147483647], found 0" in capsys.readouterr().err


def _fields(header: str, struct: str) -> list[str]:
    body = re.search(rf"struct {struct} {{(.*?)\n}};", header, flags=re.S).group(1)
    return re.findall(r"^\s+[\w:<>\* ]+?[\s\*](\w+);", body, flags=re.M)


def test_every_abi_field_is_read():
    """Kernel arguments and CTA records carry no field the arch bodies ignore (each body's parts, the
    files its templates/arch/<name>/ renders, or the records.h every body includes); the schedule
    arguments none the builder ignores, the compact schedule's none its build ignores."""
    generated = GENERATED
    abi = (generated / "common" / "abi.h").read_text()
    sched = (generated / "common" / "sched.h").read_text()
    shared = (generated / "common" / "records.h").read_text()
    assert len(_fields(abi, "KernelArgs")) == 33 and len(_fields(abi, "CtaRecord")) == 7
    for arch in json.loads((generated / "manifest.json").read_text())["arches"]:
        body = (generated / arch / "body.h").read_text()
        assert '#include "common/records.h"' in body, f"{arch} body does not use the shared record guards"
        parts = sorted((TEMPLATES / "arch" / arch).glob("*.j2"))
        body = "".join((generated / arch / part.name[:-3]).read_text() for part in parts) + shared
        for field in _fields(abi, "KernelArgs") + _fields(abi, "CtaRecord"):
            assert re.search(rf"\.{field}\b", body), f"{arch} body never reads {field}"
    for field in _fields(abi, "SchedArgs"):
        assert re.search(rf"\.{field}\b", sched), f"the schedule builder never reads {field}"
    sched += (generated / "common" / "sched_device.h").read_text()
    for field in _fields(abi, "CompactArgs"):
        assert re.search(rf"\.{field}\b", sched), f"the compact schedule never reads {field}"


def test_manifest_layouts_are_the_launchers_shape_checks_evaluated():
    """Each layout's inner shapes are written once (codegen/layouts.py, C++ over abi.h's constants): the
    launcher checks them as written, manifest.json carries their values for the runtime."""
    generated = GENERATED
    doc = json.loads((generated / "manifest.json").read_text())
    t = doc["table"]
    h, d, page, blocks = t["heads"], t["head_dim"], t["page_size"], t["head_dim"] // 32
    assert doc["layouts"] == {
        "natural": {"q_scale": [h, blocks], "kv_cache": [page, d // 2], "kv_scale": [page, blocks]},
        "mfma_permuted": {
            "q_scale": [2, 32, d // 64 * (h // 32)],
            "kv_cache": [blocks, page, 16],
            "kv_scale": [2, 32, d // 64 * (page // 32)],
        },
    }
    for arch, rec in doc["arches"].items():
        launcher = (generated / arch / "launcher.cpp").read_text()
        wanted = {"natural": "kPageSize, kRowScales", "mfma_permuted": "2, 32, kHeadDim / 64 * (kPageSize / 32)"}
        assert f'c.inner(in.kv_scale, "kv_scale", {{ {wanted[rec["scale_layout"]]} }}, false);' in launcher, arch


def test_op_signatures_come_from_one_table():
    """codegen/ops.py states each op once: the launcher's declarations and definitions, the schema
    strings of bindings.cpp and manifest.json's op list all read it."""
    from mxlogits_codegen.ops import OPS

    generated = GENERATED
    doc = json.loads((generated / "manifest.json").read_text())
    assert doc["ops"] == {
        op.name: {"schema": op.schema, "args": [a.name for a in op.args], "returns": op.returns} for op in OPS
    }
    for arch in doc["arches"]:
        bindings = (generated / arch / "bindings.cpp").read_text()
        schemas = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', bindings))  # adjacent literals joined, as C++ does
        header = (generated / arch / "launcher.h").read_text()
        source = (generated / arch / "launcher.cpp").read_text()
        for op in OPS:
            assert op.schema in schemas, (arch, op.name)
            assert f"\n{op.signature()};\n" in header and f"\n{op.signature()} {{\n" in source, (arch, op.name)
            registered = f'm.impl("{op.name}", &mxlogits::{arch}::{op.name});' in bindings
            assert registered == op.dispatched, (arch, op.name)
