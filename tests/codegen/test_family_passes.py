"""The family guard keeps a body's device code on its own compilation pass only, so one TU builds for
several targets (a fat binary) and the launch functions exist on the host pass: the real sm90 instance
compiles with an sm_80, a plain sm_90 (no wgmma there) and its own sm_90a pass in one nvcc command. The
GPU arches' host TUs (launcher, bindings), which only the GPU machine builds, are syntax-checked here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.checkout import GENERATED, ROOT
from support.stubs import render_stub
from support.tables import CPU_TABLE_HEAD
from support.toolchains import needs_nvcc


def nvcc(tu: Path, *gencodes: str, tmp_path: Path) -> subprocess.CompletedProcess:
    cmd = ["nvcc", "-c", "-o", str(tmp_path / "tu.o"), "-x", "cu", str(tu), f"-I{GENERATED}", "-std=c++17", "-O1"]
    cmd += [f"-gencode=arch=compute_{g},code=sm_{g}" for g in gencodes]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@needs_nvcc
def test_sm90_instance_builds_a_fat_binary_whose_other_passes_are_stubs(tmp_path):
    tu = GENERATED / "sm90" / "instance_qlen1_kv64.cu"
    run = nvcc(tu, "80", "90", "90a", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]


@needs_nvcc
def test_without_the_feature_guard_a_plain_sm90_pass_rejects_the_body(tmp_path):
    """The control: the same body with its guard reduced to __CUDA_ARCH__ == 900 fails on plain sm_90,
    so the passing build above is the guard's doing."""
    copy = tmp_path / "generated"
    shutil.copytree(GENERATED, copy)
    body = copy / "sm90" / "body.h"
    text = body.read_text()
    assert "defined(__CUDA_ARCH_FEAT_SM90_ALL)" in text
    body.write_text(text.replace(" && defined(__CUDA_ARCH_FEAT_SM90_ALL)", ""))
    cmd = ["nvcc", "-c", "-o", str(tmp_path / "tu.o"), "-x", "cu", str(copy / "sm90" / "instance_qlen1_kv64.cu"),
           f"-I{copy}", "-std=c++17", "-O1", "-gencode=arch=compute_90,code=sm_90"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode != 0 and "wgmma" in (run.stdout + run.stderr)


HIP_TABLE = CPU_TABLE_HEAD + """\
  - name: stubhip
    family: hip
    target: gfx950
    flags: [-O3]
    scale_layout: natural
    setup_tokens: {one_row: 512, more_rows: 448}
instances:
  - {arch: cpu, name: qlen1_kv64, q_per_block: 1, block_k: 64, cta_resident: 8, default: true}
  - {arch: stubhip, name: qlen1_kv64, q_per_block: 1, block_k: 64, cta_resident: 8, default: true}
  - {arch: stubhip, name: qlen4_kv64, q_per_block: 4, block_k: 64, cta_resident: 8}
"""
CLANG = shutil.which("clang++-22") or shutil.which("clang++")


@pytest.mark.toolchain
@pytest.mark.skipif(CLANG is None, reason="no clang with HIP support installed")
@pytest.mark.parametrize("side", ["--cuda-device-only", "--cuda-host-only"])
def test_stub_hip_arch_compiles_on_its_device_pass_and_the_host_pass(tmp_path, side):
    """A hip arch rendered from the shared templates: the schedule driver and launch plumbing build for
    gfx950 and for the host (no ROCm here: a shim declares the runtime API)."""
    generated = render_stub(tmp_path, HIP_TABLE)
    shim = ROOT / "codegen" / "hip_shim.h"
    for tu in sorted((generated / "stubhip").glob("instance_*.hip")):
        cmd = [CLANG, "-x", "hip", "--offload-arch=gfx950", side, "-nogpuinc", "-nogpulib", "-std=c++17", "-O2",
               "-S", "-o", "-", "-include", str(shim), f"-I{generated}", str(tu)]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        # The device pass holds the guarded schedule driver (its block barriers); the host pass only launches.
        assert ("s_barrier" in run.stdout) == (side == "--cuda-device-only")


# ---- the GPU arches' host TUs ----------------------------------------------------------------

CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"


def gpu_host_tus(generated: Path) -> list[Path]:
    """The host C++ of every GPU arch's module (launcher, bindings): compiled only where the module
    builds, on the GPU machine."""
    arches = json.loads((generated / "manifest.json").read_text())["arches"]
    return [generated / src for arch in arches.values() if arch["family"] != "host"
            for src in arch["sources"] if src.endswith(".cpp")]


def syntax_check(tus: list[Path], generated: Path, tmp_path: Path) -> dict[Path, subprocess.CompletedProcess]:
    """g++ -fsyntax-only of each TU against the installed torch's headers and the CUDA toolkit's, all
    at once. The CPU wheel lacks one header its CUDA build generates (c10/cuda/impl/cuda_cmake_macros.h,
    build macros only): an empty stand-in takes its place."""
    from torch.utils.cpp_extension import include_paths

    stub = tmp_path / "stub" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    stub.parent.mkdir(parents=True, exist_ok=True)
    stub.write_text("#pragma once\n")
    includes = [f"-I{generated}", "-isystem", str(tmp_path / "stub")]
    for d in (*include_paths(), str(CUDA_INCLUDE)):
        includes += ["-isystem", d]
    procs = {tu: subprocess.Popen(["g++", "-fsyntax-only", "-std=c++17", *includes, str(tu)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for tu in tus}
    runs = {}
    for tu, p in procs.items():
        out, err = p.communicate(timeout=600)  # reads the pipes to the end before the exit status
        runs[tu] = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    return runs


def needs_host_headers(test):
    """The test compiles the GPU arches' host TUs: a toolchain test (the CUDA toolkit's headers)."""
    skip = pytest.mark.skipif(shutil.which("g++") is None or not (CUDA_INCLUDE / "cuda_runtime_api.h").exists(),
                              reason="needs g++ and the CUDA toolkit's headers")  # fmt: skip
    return pytest.mark.toolchain(skip(test))


@needs_host_headers
def test_gpu_host_tus_compile_against_torch_headers(tmp_path):
    """Every GPU arch's launcher and bindings, syntax-checked here: a member of an arch's traits that the
    shared launcher reads and the arch lacks, or any other host-side mismatch, fails in CI instead of on
    the GPU machine's first build."""
    tus = gpu_host_tus(GENERATED)
    assert {tu.parent.name for tu in tus} >= {"sm90", "gfx950", "gfx1250"}
    for tu, run in syntax_check(tus, GENERATED, tmp_path).items():
        assert run.returncode == 0, f"{tu}: {run.stderr[-3000:]}"


@needs_host_headers
def test_a_trait_missing_from_an_arch_fails_the_host_check(tmp_path):
    """The control: sm90's traits without Q_ALIGN and Q_SCALE_ALIGN (what a9d1256 committed) fail the
    check above, naming them."""
    copy = tmp_path / "generated"
    shutil.copytree(GENERATED, copy)
    traits = copy / "sm90" / "traits.h"
    lines = traits.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if "Q_SCALE_ALIGN" not in ln]
    assert len(kept) == len(lines) - 1
    traits.write_text("".join(kept))
    run = syntax_check([copy / "sm90" / "launcher.cpp"], copy, tmp_path)[copy / "sm90" / "launcher.cpp"]
    assert run.returncode != 0 and "Q_ALIGN" in run.stderr and "Q_SCALE_ALIGN" in run.stderr
