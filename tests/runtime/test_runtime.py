"""The runtime: build cache and its lock, the JIT switch, refusal of hand-edited generated
files, package data in a non-editable install, the arch probe, and what the runtime imports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import mxlogits as mx
import pytest
import torch
from mxlogits.build import build_flags, built_library, module_name
from mxlogits.manifest import manifest, variant_for_rows
from support.checkout import ROOT
from support.processes import python

LOAD = "import mxlogits; b = mxlogits.plan_buffers('cpu', 3, 3); print(mxlogits.built_library('cpu'))"


def test_concurrent_first_use_builds_once_then_jit_off_uses_the_cache(tmp_path):
    cache = tmp_path / "cache"
    env = {"MXLOGITS_CACHE_DIR": str(cache)}
    procs = [python(LOAD, env=env, background=True) for _ in range(2)]
    results = [p.communicate(timeout=600) + (p.returncode,) for p in procs]
    assert [rc for _, _, rc in results] == [0, 0], results
    assert sum(err.count("mxlogits: building the cpu kernels") for _, err, _ in results) == 1
    libraries = sorted(cache.rglob("*.so"))
    assert len(libraries) == 1 and all(out.strip() == str(libraries[0]) for out, _, _ in results)
    # A production process with JIT off loads the prebuilt module and never compiles.
    off = python(LOAD, env={**env, "MXLOGITS_JIT": "0"})
    assert "building" not in off.stderr and off.stdout.strip() == str(libraries[0])


def test_jit_off_without_a_build_is_a_clear_error(tmp_path):
    env = {"MXLOGITS_CACHE_DIR": str(tmp_path / "empty"), "MXLOGITS_JIT": "0"}
    result = python(LOAD, env=env, check=False)
    assert result.returncode != 0
    assert "no built cpu module at" in result.stderr and "MXLOGITS_JIT=0 forbids building it" in result.stderr
    assert "python -m mxlogits build" in result.stderr
    assert not list((tmp_path / "empty").rglob("*.so"))


def test_hand_edited_generated_files_are_refused(tmp_path):
    generated = tmp_path / "generated"
    shutil.copytree(ROOT / "generated", generated)
    body = generated / "cpu" / "body.h"
    body.write_text(body.read_text().replace("TOKEN_GROUP", "TOKEN_GROUP ", 1))
    env = {"MXLOGITS_GENERATED_DIR": str(generated), "MXLOGITS_CACHE_DIR": str(tmp_path / "cache")}
    result = python(LOAD, env=env, check=False)
    assert result.returncode != 0
    assert f"{body} differs from manifest.json" in result.stderr and "mxlogits-gen" in result.stderr


def test_runtime_imports_neither_jinja2_nor_yaml():
    code = (
        "import sys, mxlogits; mxlogits.plan_buffers('cpu', 2, 2); mxlogits.block_table_width(100, device='cpu');"
        "print(sorted(m for m in ('jinja2', 'yaml', 'mxlogits_codegen') if m in sys.modules))"
    )
    assert python(code).stdout.strip() == "[]"


def test_block_table_width_of_explicit_variants_needs_no_device_and_no_build(tmp_path):
    env = {"MXLOGITS_CACHE_DIR": str(tmp_path / "empty"), "MXLOGITS_JIT": "0", "CUDA_VISIBLE_DEVICES": ""}
    code = (
        "import mxlogits as mx; v = {x.name: x for x in mx.variants('cpu')};"
        "print([mx.block_table_width(n, v[k]) for k in ('qlen1_kv64', 'qlen1_kv256') for n in (0, 1000, 1025)])"
    )
    assert python(code, env=env).stdout.strip() == "[0, 16, 17, 0, 16, 17]"


def test_arch_probe():
    assert mx.arch_of("cpu") == "cpu"
    assert (
        mx.arch.arch_of(mx.arch.normalize_device("cpu")) == "cpu"
        and mx.arch._arch_by_device[torch.device("cpu")] == "cpu"
    )
    table = re.escape(str(sorted(mx.manifest.manifest().arches)))  # ['cpu', ...]: every arch of the table
    with pytest.raises(RuntimeError, match=rf"no arch runs on device type 'meta'; the table has {table}"):
        mx.arch_of("meta")


def test_rocm_probe_reads_gcn_arch_name_once_per_device(monkeypatch):
    """On a ROCm torch a device's arch is its gcnArchName without the feature suffixes, probed once per
    device and cached; an arch the table lacks raises naming what the table has."""
    names = {0: "gfx950:sramecc+:xnack-", 1: "gfx1250", 2: "gfx942:sramecc+:xnack-"}
    probed = []

    def properties(dev):
        probed.append(dev.index)
        return type("Props", (), {"gcnArchName": names[dev.index]})()

    monkeypatch.setattr(torch.version, "hip", "7.0.0", raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(mx.arch, "_arch_by_device", {})
    assert [mx.arch_of(f"cuda:{i}") for i in (0, 0, 1, 1)] == ["gfx950", "gfx950", "gfx1250", "gfx1250"]
    assert probed == [0, 1]
    assert mx.arch_of(torch.device("cuda", 1)) == "gfx1250" and probed == [0, 1]  # a tensor's device: cached
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert mx.arch_of(torch.device("cuda")) == "gfx950"  # no index: the current device's
    with pytest.raises(RuntimeError, match=r"cuda:2 is hip gfx942, which no arch of the instance table targets.*gfx950 "):
        mx.arch_of("cuda:2")


def test_default_and_tolerance_come_from_the_manifest():
    doc = json.loads((ROOT / "generated" / "manifest.json").read_text())
    for rec in doc["instances"]:
        v = mx.MqaLogitsVariant(rec["name"], rec["q_per_block"], rec["block_k"], rec["cta_resident"], rec["arch"])
        assert v in mx.variants(rec["arch"])
        assert mx.tolerance(v) == (rec["atol"], rec["rtol"])
        assert (mx.default_variant(rec["arch"]) == v) == rec["default"]


@pytest.mark.parametrize("arch", sorted(manifest().arches))
def test_rows_per_sequence_take_the_fewest_tiles(arch):
    """variant_for_rows: the fewest tiles a sequence (each reads its keys once), the smallest q_per_block
    among those, the default among equal q_per_block. Checked against every q_per_block the arch has."""
    own = mx.variants(arch)
    sizes = sorted({v.q_per_block for v in own})
    for n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 16384]:
        v = variant_for_rows(arch, n)
        tiles = {q: -(-max(n, 1) // q) for q in sizes}
        assert tiles[v.q_per_block] == min(tiles.values()), (n, v)
        assert v.q_per_block == min(q for q in sizes if tiles[q] == tiles[v.q_per_block]), (n, v)
        default = mx.default_variant(arch)
        assert v == default or default.q_per_block != v.q_per_block, (n, v)
        if v != default:
            assert v.block_k == min(u.block_k for u in own if u.q_per_block == v.q_per_block), (n, v)
    if {1, 2, 4} <= set(sizes):  # sm90: next_n 3 is one 4-row tile, not 2 + 1
        assert [variant_for_rows(arch, n).q_per_block for n in (1, 2, 3, 4, 6)] == [1, 2, 4, 4, 4]


def test_non_editable_install_finds_generated_sources_as_package_data(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("mxlogits-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in json.loads((ROOT / "generated" / "manifest.json").read_text())["arches"]["cpu"]["files"]:
        assert f"mxlogits/generated/{path}" in names
    assert "mxlogits/generated/manifest.json" in names and "mxlogits_codegen/cli.py" in names
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    code = (
        "import mxlogits, mxlogits.demo as d; from mxlogits.manifest import manifest;"
        "r = d.run_case('t', d.make_scene([300], [(0, 0, 300)], 'cpu'), None, __import__('torch').device('cpu'), 1);"
        "print(mxlogits.__file__); print(manifest().directory); print(r['ok'])"
    )
    out = python(code, env={"PYTHONPATH": str(site)}, cwd=tmp_path).stdout.split()
    assert out[0].startswith(str(site)) and out[1] == str(site / "mxlogits" / "generated") and out[2] == "True"


def test_cpu_module_runs_on_torchs_openmp_pool():
    """at::parallel_for expands in our TUs: without -fopenmp it silently runs serially."""
    if "OpenMP" not in __import__("torch").__config__.parallel_info():
        pytest.skip("this torch's intra-op pool is not OpenMP")
    symbols = subprocess.run(
        ["nm", "-D", "--undefined-only", str(mx.built_library("cpu"))], capture_output=True, text=True, check=True
    ).stdout
    assert "GOMP_parallel" in symbols


def test_the_suite_builds_into_a_cache_of_its_own():
    """Not the user's ~/.cache/mxlogits: a temporary directory of the session (or the one
    MXLOGITS_TEST_CACHE_DIR names), which the module of this test run lies in."""
    user_cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mxlogits"
    assert mx.cache_dir() != user_cache
    if not os.environ.get("MXLOGITS_TEST_CACHE_DIR"):
        assert mx.cache_dir().resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
    assert mx.built_library("cpu").resolve().is_relative_to(mx.cache_dir().resolve())


def test_sanitize_adds_the_arch_flags_under_a_cache_key_of_its_own(monkeypatch):
    cpu = manifest().arches["cpu"]
    monkeypatch.delenv("MXLOGITS_SANITIZE", raising=False)
    plain = module_name(cpu)
    assert build_flags(cpu) == list(cpu.flags)
    monkeypatch.setenv("MXLOGITS_SANITIZE", "1")
    assert build_flags(cpu) == [*cpu.flags, *cpu.sanitize_flags]
    assert "-fsanitize=address,undefined" in cpu.sanitize_flags
    assert module_name(cpu) != plain
    for arch in (a for a in manifest().arches.values() if not a.sanitize_flags):  # a GPU arch: compute-sanitizer
        with pytest.raises(RuntimeError, match=rf"MXLOGITS_SANITIZE=1: expected sanitize_flags in the record of "
                                               rf"arch {arch.name}"):
            built_library(arch.name)
