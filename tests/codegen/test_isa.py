"""mxlogits-gen --isa: the parser on clang's own assembly, the arch record's `isa` entry in the loader,
the verdicts (scratch, a limit passed, an expected instruction missing, a compile error) on a stub hip
arch rendered from the real shared templates, and the real AMD arches of instances.yaml: every
instance within its record, and one TU holding both built for both targets."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from mxlogits_codegen.cli import main as gen_main
from mxlogits_codegen.isa import CLANG, flag_units, kernel_name, parse_isa, report
from mxlogits_codegen.table import TableError, load_table
from support.checkout import GENERATED, STUB_ARCHES, TEMPLATES
from support.stubs import render_stub
from support.tables import CPU_ONLY, CPU_TABLE_HEAD
from support.toolchains import needs_clang

LOGITS = (
    "_ZN8mxlogits7stubisa13logits_kernelINS0_6TraitsINS_14InstanceTraitsILi2ELi64ELi8EEENS0_7TunablesEEEEEv"
    "NS_10KernelArgsE"
)
SCHED = "_ZN8mxlogits7stubisa15schedule_kernelILi2ELi64EEEvNS_9SchedArgsE"

# Captured from clang 22.1.8 -x hip --offload-arch=gfx950 --cuda-device-only -S (the stubisa arch below,
# trimmed to the lines the parser reads and their neighbours): a kernel with scratch and one fp4 MFMA,
# then a clean one whose metadata reports spills, and a non-kernel function's info block that must not
# be taken for either.
ASM = f"""\
{LOGITS}: ; @{LOGITS}
; %bb.0:
\ts_load_dwordx2 s[4:5], s[0:1], 0x10
\tscratch_store_dwordx4 off, v[12:15], s9
\tv_mfma_scale_f32_32x32x64_f8f6f4 v[2:17], v[4:7], v[8:11], 0, v1, v2 op_sel_hi:[0,0,0] cbsz:4 blgp:4
\ts_endpgm
\t.section\t.rodata,"a",@progbits
\t.amdhsa_kernel {LOGITS}
\t\t.amdhsa_group_segment_fixed_size 0
\t\t.amdhsa_private_segment_fixed_size 2064
\t\t.amdhsa_uses_dynamic_stack 0
\t\t.amdhsa_next_free_vgpr 52
\t\t.amdhsa_next_free_sgpr 19
\t\t.amdhsa_accum_offset 52
\t.end_amdhsa_kernel
.Lfunc_end1:
; Kernel info:
; codeLenInByte = 636
; TotalNumSgprs: 25
; NumVgprs: 52
; NumAgprs: 0
; TotalNumVgprs: 52
; ScratchSize: 2064
; LDSByteSize: 0 bytes/workgroup (compile time only)
; Occupancy: 8
; COMPUTE_PGM_RSRC2:SCRATCH_EN: 1
{SCHED}: ; @{SCHED}
\ts_barrier
\ts_endpgm
\t.amdhsa_kernel {SCHED}
\t\t.amdhsa_group_segment_fixed_size 4096
\t\t.amdhsa_private_segment_fixed_size 0
\t\t.amdhsa_uses_dynamic_stack 0
\t.end_amdhsa_kernel
.Lfunc_end0:
; Kernel info:
; TotalNumSgprs: 84
; NumVgprs: 38
; NumAgprs: 4
; ScratchSize: 0
; Occupancy: 7
\t.text
helper: ; @helper
\tv_mfma_scale_f32_32x32x64_f8f6f4 v[2:17], v[4:7], v[8:11], 0, v1, v2 op_sel_hi:[0,0,0] cbsz:4 blgp:4
.Lfunc_end2:
; Function info:
; NumVgprs: 200
; ScratchSize: 16
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .name:           {SCHED}
    .sgpr_spill_count: 2
    .vgpr_spill_count: 5
  - .name:           {LOGITS}
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
...

\t.end_amdgpu_metadata
"""


def test_parser_reads_each_kernel():
    logits, sched = parse_isa(ASM)
    assert (logits.name, logits.vgprs, logits.agprs, logits.sgprs, logits.lds, logits.occupancy) == (
        LOGITS, 52, 0, 25, 0, 8)  # fmt: skip
    assert (logits.scratch, logits.sgpr_spills, logits.vgpr_spills, logits.dynamic_stack) == (2064, 0, 0, False)
    assert [i.split()[0] for i in logits.instructions] == [
        "s_load_dwordx2", "scratch_store_dwordx4", "v_mfma_scale_f32_32x32x64_f8f6f4", "s_endpgm"]  # fmt: skip
    assert logits.instructions[2].endswith("cbsz:4 blgp:4") and not logits.clean
    assert (sched.vgprs, sched.agprs, sched.sgprs, sched.lds, sched.occupancy, sched.scratch) == (38, 4, 84, 4096, 7, 0)
    assert (sched.sgpr_spills, sched.vgpr_spills, sched.instructions) == (2, 5, ["s_barrier", "s_endpgm"])
    assert not sched.clean  # spills alone fail, scratch or not


def test_parser_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="no .amdhsa_kernel"):
        parse_isa("\ts_endpgm\n")
    with pytest.raises(ValueError, match="NumVgprs: expected an integer, found 'max"):
        parse_isa(ASM.replace("; NumVgprs: 52", "; NumVgprs: max(52, helper.num_vgpr)"))
    with pytest.raises(ValueError, match="no '; Kernel info:' block"):
        parse_isa(ASM.replace("; Occupancy: 7\n", ""))


def test_kernel_name_and_flag_units():
    assert kernel_name("void mxlogits::gfx950::logits_kernel<mxlogits::gfx950::Traits<X> >(mxlogits::KernelArgs)") == (
        "logits_kernel")  # fmt: skip
    assert flag_units(["-O3", "-mllvm", "-enable-post-misched=1", "-ffast-math"]) == [
        ("-O3",), ("-mllvm", "-enable-post-misched=1"), ("-ffast-math",)]  # fmt: skip


STUB = CPU_TABLE_HEAD + """\
  - name: stubisa
    family: hip
    target: gfx950
    flags: [-O3, -std=c++17]
    scale_layout: natural
    isa:
      expect: ['^v_mfma_scale_f32_32x32x64_f8f6f4 .*\\bcbsz:4 blgp:4\\b']
      max_vgprs: 128  # the fp32 quantize kernel takes 97 (its 32 values and their codes)
      max_agprs: 0
      max_sgprs: 96
      max_lds_bytes: 8192
      min_occupancy: 4
    setup_tokens: {one_row: 512, more_rows: 448}
instances:
  - {arch: cpu, name: qlen1_kv64, q_per_block: 1, block_k: 64, cta_resident: 8, default: true}
  - {arch: stubisa, name: clean, q_per_block: 1, block_k: 64, cta_resident: 8, default: true}
"""
SCRATCH = "  - {arch: stubisa, name: scratch, q_per_block: 2, block_k: 64, cta_resident: 8}\n"


def run_isa(generated: Path, capsys) -> tuple[int, str, str]:
    rc = gen_main(["--isa", "--out", str(generated)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@needs_clang
def test_clean_stub_arch_reports_every_kernel(tmp_path, capsys):
    rc, out, err = run_isa(render_stub(tmp_path, STUB), capsys)
    assert rc == 0, err
    listed = [line.split() for line in out.splitlines() if line.startswith("stubisa ")]
    rows = {r[2]: r for r in listed}
    assert sorted(rows) == ["compact_build_kernel", "logits_kernel", "quantize_kernel", "schedule_kernel"]
    assert len(listed) == 6  # a quantize kernel per input dtype
    assert all(r[1] == "clean" for r in rows.values())
    assert rows["schedule_kernel"][-1] == "0" and int(rows["logits_kernel"][-1]) >= 1  # the fp4 MFMA is the logits kernel's
    assert "qlen1_kv64" not in out and "within the arch records' isa limits" in out  # no host arch row


@needs_clang
def test_scratch_fails_and_is_named(tmp_path, capsys):
    rc, out, err = run_isa(render_stub(tmp_path, STUB + SCRATCH), capsys)
    assert rc == 1
    assert "stubisa  scratch " in out
    (failure,) = err.strip().splitlines()
    assert failure.startswith("mxlogits-gen: stubisa scratch: void mxlogits::stubisa::logits_kernel<")
    assert failure.endswith(" bytes of scratch per lane")


@needs_clang
@pytest.mark.parametrize(
    "limit, message",
    [
        ("max_vgprs: 128", r"VGPRs \d+ over max_vgprs 16"),  # the counts are the compiler's
        ("max_sgprs: 96", r"SGPRs \d+ over max_sgprs 16"),
        ("max_lds_bytes: 8192", "LDS bytes 4096 over max_lds_bytes 16"),
        ("min_occupancy: 4", r"waves/SIMD \d+ below min_occupancy 16"),
    ],
)
def test_a_kernel_over_its_arch_limit_fails(tmp_path, capsys, limit, message):
    key = limit.split(":")[0]
    rc, _, err = run_isa(render_stub(tmp_path, STUB.replace(limit, f"{key}: 16")), capsys)
    assert rc == 1
    assert re.search(rf"stubisa clean: void mxlogits::stubisa::schedule_kernel<1, 64, \d+l, 512>\(mxlogits::SchedArgs, int\): {message}", err)
    assert re.search(rf"{message} \(instances.yaml: isa\)", err)


@needs_clang
def test_a_missing_expected_instruction_fails(tmp_path, capsys):
    wmma = STUB.replace("'^v_mfma_scale_f32_32x32x64_f8f6f4 .*\\bcbsz:4 blgp:4\\b'", "v_wmma_scale_f32_32x16x128_f4")
    rc, _, err = run_isa(render_stub(tmp_path, wmma), capsys)
    assert rc == 1
    assert err.strip() == (
        "mxlogits-gen: stubisa clean: no instruction matches isa.expect 'v_wmma_scale_f32_32x16x128_f4'")
    fp8 = STUB.replace("cbsz:4 blgp:4", "cbsz:0 blgp:0")  # the MFMA is there, but not on fp4 operands
    rc, _, err = run_isa(render_stub(tmp_path / "fp8", fp8), capsys)
    assert rc == 1 and "no instruction matches isa.expect" in err


@needs_clang
def test_compile_error_exits_2_with_the_compiler_output(tmp_path, capsys):
    generated = render_stub(tmp_path, STUB)
    (generated / "stubisa" / "instance_clean.hip").write_text("#include <hip/hip_runtime.h>\n")
    rc, _, err = run_isa(generated, capsys)
    assert rc == 2
    assert "instance_clean.hip does not compile" in err and "hip/hip_runtime.h" in err


def test_without_clang_the_check_is_skipped_with_a_message(tmp_path, capsys, monkeypatch):
    generated = render_stub(tmp_path, STUB)
    monkeypatch.setenv("PATH", str(tmp_path))
    rc, out, err = run_isa(generated, capsys)
    assert rc == 0 and out == ""
    assert f"--isa skipped: {CLANG} is not on PATH" in err


def test_no_hip_arch_is_not_an_error(tmp_path, capsys):
    rc, out, _ = run_isa(render_stub(tmp_path, CPU_ONLY), capsys)
    assert rc == 0 and "no hip arch" in out


@pytest.mark.parametrize(
    "edit, message",
    [
        (("max_vgprs: 128", "max_vgprs: -1"), ":17:18: arches[1].isa.max_vgprs: expected an integer in [0, "),
        (("min_occupancy: 4", "min_occupancy: 0"), ":21:22: arches[1].isa.min_occupancy: expected an integer in [1, "),
        (("max_agprs: 0", "max_spills: 0"), ":18:7: arches[1].isa.max_spills: expected one of ['expect', 'max_agprs'"),
        (("'^v_mfma", "'(v_mfma"), ":16:16: arches[1].isa.expect[0]: expected a valid regular expression"),
        (("family: hip\n    target: gfx950", "family: cuda\n    target: sm_90a"),
         ":16:7: arches[1].isa: expected isa limits on a hip arch only"),
    ],
)
def test_the_loader_places_a_bad_isa_entry(tmp_path, edit, message):
    (tmp_path / "instances.yaml").write_text(STUB.replace(*edit))
    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES, templates)
    shutil.copytree(STUB_ARCHES / "stubisa", templates / "arch" / "stubisa")
    with pytest.raises(TableError) as e:
        load_table(tmp_path / "instances.yaml", templates)
    assert message in str(e.value)


@pytest.fixture(scope="session")
def real_isa():
    """One --isa run over the checkout's generated/ (each TU compiled once for every test below)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = report(GENERATED)
    return rc, out.getvalue(), err.getvalue()


HIP_ARCHES = sorted(a for a, rec in json.loads((GENERATED / "manifest.json").read_text())["arches"].items()
                    if rec["family"] == "hip")  # fmt: skip


@needs_clang
def test_real_amd_instances_are_within_their_records(real_isa):
    rc, out, err = real_isa
    assert rc == 0, err
    doc = json.loads((GENERATED / "manifest.json").read_text())
    for inst in doc["instances"]:
        if inst["arch"] in HIP_ARCHES:
            rows = [line.split() for line in out.splitlines() if line.split()[:2] == [inst["arch"], inst["name"]]]
            widths = 2 if inst["q_per_block"] > 1 else 1  # the builder's 1,024-thread block cuts tiles only
            kernels = ["compact_build_kernel"] + ["logits_kernel"] * 2 + ["quantize_kernel"] * 3 + ["schedule_kernel"] * widths
            assert sorted(r[2] for r in rows) == kernels, (inst, out)
    for arch in HIP_ARCHES:
        assert doc["arches"][arch]["isa"]["expect"] and doc["arches"][arch]["isa"]["limits"], arch


@needs_clang
@pytest.mark.skipif(len(HIP_ARCHES) < 2, reason="fewer than two hip arches in instances.yaml")
def test_one_tu_holding_both_amd_arches_builds_for_both_targets(real_isa):
    rc, out, err = real_isa
    assert rc == 0, err
    targets = " ".join(f"--offload-arch={a}" for a in HIP_ARCHES)
    assert f"builds with {targets} (device passes and host pass)" in out
