"""Arch-declared tunables: an arch record names extra integer instance keys with a default and a range;
instances may set them, they reach the instance's traits, and anything else still fails with file:line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mxlogits_codegen.render import render_all
from mxlogits_codegen.table import TableError, load_table
from support.checkout import TEMPLATES
from support.tables import CPU_TABLE_HEAD
TABLE = CPU_TABLE_HEAD + """\
    tunables:
      stages: {default: 4, min: 2, max: 8}
instances:
  - {arch: cpu, name: qlen1_kv64, q_per_block: 1, block_k: 64, cta_resident: 8, default: true}
  - {arch: cpu, name: qlen4_kv64, q_per_block: 4, block_k: 64, cta_resident: 8, stages: 6}
"""


def load(tmp_path: Path, text: str):
    path = tmp_path / "instances.yaml"
    path.write_text(text)
    return load_table(path, TEMPLATES)


def test_values_and_defaults_reach_the_traits_and_the_manifest(tmp_path):
    table = load(tmp_path, TABLE)
    files = render_all(table, TEMPLATES)
    entry = files["cpu/entry.h"]
    for name, value in (("qlen1_kv64", 4), ("qlen4_kv64", 6)):
        block = entry.split(f"struct Tunables_{name} {{")[1].split("};")[0]
        assert f"static constexpr int stages = {value};" in block
        assert "Traits<InstanceTraits<" in entry and f"Tunables_{name}>;" in entry
    manifest = json.loads(files["manifest.json"])
    assert manifest["arches"]["cpu"]["tunables"] == ["stages"]
    assert {i["name"]: i["tunables"] for i in manifest["instances"]} == {
        "qlen1_kv64": {"stages": 4},
        "qlen4_kv64": {"stages": 6},
    }


def test_setup_tokens_defaults_by_rows_and_reaches_the_traits_and_the_manifest(tmp_path):
    """A row's schedule weight of a tile's setup: 512 tokens at q_per_block 1 and 448 above unless the
    row names one; the traits take it in chunks of block_k (the launcher's SchedArgs::setup_chunks)."""
    named = TABLE.replace("cta_resident: 8, stages: 6}", "cta_resident: 8, stages: 6, setup_tokens: 100}")
    table = load(tmp_path, named)
    assert {i.name: i.setup_tokens for i in table.instances} == {"qlen1_kv64": 512, "qlen4_kv64": 100}
    assert {i.name: i.setup_tokens for i in load(tmp_path, TABLE).instances} == {"qlen1_kv64": 512, "qlen4_kv64": 448}
    files = render_all(table, TEMPLATES)
    assert "Traits<InstanceTraits<1, 64, 8, 512>, Tunables_qlen1_kv64>" in files["cpu/entry.h"]
    assert "Traits<InstanceTraits<4, 64, 8, 100>, Tunables_qlen4_kv64>" in files["cpu/entry.h"]
    assert "a.setup_chunks = T::SETUP_CHUNKS;" in files["cpu/launcher.cpp"]
    manifest = json.loads(files["manifest.json"])
    assert {i["name"]: i["setup_tokens"] for i in manifest["instances"]} == {"qlen1_kv64": 512, "qlen4_kv64": 100}


@pytest.mark.parametrize(
    ("old", "new", "line", "message"),
    [
        ("stages: 6}", "stagez: 6}", 14, r"instances\[1\]\.stagez: expected one of .*'stages'.*found unknown key 'stagez'"),
        ("stages: 6}", "stages: 9}", 14, r"instances\[1\]\.stages: expected an integer in \[2, 8\], found 9"),
        ("stages: 6}", "stages: 2.5}", 14, r"instances\[1\]\.stages: expected an integer in \[2, 8\], found 2\.5"),
        ("default: 4, min: 2", "default: 1, min: 2", 11, r"tunables\.stages\.default: expected an integer in \[2, 8\]"),
        ("min: 2, max: 8", "min: 2, max: 1", 11, r"stages\.max: expected an integer in \[min \(2\), .*found 1"),
        ("      stages: {", "      block_k: {", 11, r"tunables\.block_k: expected a name that is not an instance column"),
        ("{default: 4, min: 2, max: 8}", "{default: 4, min: 2}", 11, r"tunables\.stages\.max: expected this key"),
    ],
)
def test_bad_tunables_name_the_file_line_key_expected_and_found(tmp_path, old, new, line, message):
    text = TABLE.replace(old, new, 1)
    assert text != TABLE
    with pytest.raises(TableError, match=message) as err:
        load(tmp_path, text)
    assert re.match(rf"{re.escape(str(tmp_path / 'instances.yaml'))}:{line}:\d+: ", str(err.value)), err.value


def test_an_arch_without_tunables_refuses_the_key(tmp_path):
    text = TABLE.replace("    tunables:\n      stages: {default: 4, min: 2, max: 8}\n", "")
    message = r":12:\d+: instances\[1\]\.stages: expected one of .*found unknown key 'stages'"
    with pytest.raises(TableError, match=message):
        load(tmp_path, text)


def test_setup_tokens_defaults_are_the_arch_records(tmp_path):
    """An instance row naming no setup_tokens takes its arch's default pair: no arch-neutral number."""
    own = TABLE.replace("setup_tokens: {one_row: 512, more_rows: 448}", "setup_tokens: {one_row: 300, more_rows: 200}")
    assert {i.name: i.setup_tokens for i in load(tmp_path, own).instances} == {"qlen1_kv64": 300, "qlen4_kv64": 200}
    with pytest.raises(TableError, match=r":3:5: arches\[0\]\.setup_tokens: expected this key, found it missing"):
        load(tmp_path, TABLE.replace("    setup_tokens: {one_row: 512, more_rows: 448}\n", ""))
    with pytest.raises(TableError, match=r":8:45: arches\[0\]\.setup_tokens\.more_rows: expected an integer in \[0, "):
        load(tmp_path, TABLE.replace("more_rows: 448", "more_rows: -1"))
