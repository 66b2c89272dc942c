"""mxlogits-gen --ptxas: the parser on ptxas's own text, the verdict on spills and stack frames,
and an end-to-end run on a stub cuda arch rendered from the real shared templates."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from mxlogits_codegen.cli import main as gen_main
from mxlogits_codegen.cubin import code_digests
from mxlogits_codegen.family import device_flags
from mxlogits_codegen.ptxas import early_access, held, parse_ptxas, ptx_entries, short_name
from mxlogits_codegen.table import TableError, load_table
from support.checkout import GENERATED, STUB_ARCHES, TEMPLATES
from support.stubs import render_stub
from support.tables import CPU_ONLY
from support.toolchains import needs_nvcc

SM90 = json.loads((GENERATED / "manifest.json").read_text())["arches"]["sm90"]["ptxas"]  # instances.yaml's
LOGITS = (
    "_ZN8mxlogits4sm9013logits_kernelINS0_6TraitsINS_14InstanceTraitsILi1ELi64ELi132EEENS0_19Tunables_qlen1_kv64EEEEEv"
    "NS_10KernelArgsE"
)
SCHED = "_ZN8mxlogits4sm9015schedule_kernelILi1ELi64EEEvNS_9SchedArgsE"

# Captured from nvcc 13.0 -Xptxas -v (names replaced): an entry with smem and barriers, one
# without smem, and a non-entry function that reports a frame but no registers.
PTXAS_CLEAN = f"""\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '{LOGITS}' for 'sm_90a'
ptxas info    : Function properties for {LOGITS}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 90 registers, used 1 barriers, 8 bytes smem, 528 bytes cmem[0]
ptxas info    : Compile time = 15.733 ms
ptxas info    : Compiling entry function '{SCHED}' for 'sm_90a'
ptxas info    : Function properties for {SCHED}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 440 bytes cmem[0]
ptxas info    : Function properties for _ZN8mxlogits4sm904body6helperEv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""
PTXAS_SPILL = f"""\
ptxas info    : Compiling entry function '{LOGITS}' for 'sm_90a'
ptxas info    : Function properties for {LOGITS}
    856 bytes stack frame, 2040 bytes spill stores, 2044 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 856 bytes cumulative stack size
"""

# ptxas's two ways of saying it had to serialize a kernel's wgmma pipeline (nvcc 13.0, sm_90a).
PTXAS_SERIALIZED = f"""\
ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient \
register resources for the function '{LOGITS}'
ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to wgmma pipeline \
crossing function boundary at a function call in the function '{SCHED}'
ptxas info    : Compiling entry function '{LOGITS}' for 'sm_90a'
ptxas info    : Function properties for {LOGITS}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 94 registers, used 2 barriers
"""

def test_parser_reads_each_kernel():
    logits, sched, helper = parse_ptxas(PTXAS_CLEAN)
    assert (logits.name, logits.entry, logits.registers, logits.smem, logits.stack) == (LOGITS, True, 90, 8, 0)
    assert (sched.registers, sched.smem) == (40, 4096)
    assert (helper.entry, helper.registers, helper.failures(SM90)) == (False, None, [])
    assert all(f.failures(SM90) == [] for f in (logits, sched))


def test_parser_flags_spills_and_stack():
    (f,) = parse_ptxas(PTXAS_SPILL)
    assert (f.registers, f.smem, f.stack, f.spill_stores, f.spill_loads) == (32, 0, 856, 2040, 2044)
    assert f.failures(SM90) == [
        "856 bytes stack frame over max_stack_bytes 0",
        "2040 bytes spill stores over max_spill_bytes 0",
        "2044 bytes spill loads over max_spill_bytes 0",
    ]
    assert f.failures({"limits": {"max_stack_bytes": 856, "max_spill_bytes": 2044}, "refuse": {}}) == []


def test_parser_flags_a_serialized_wgmma_pipeline():
    logits, sched = parse_ptxas(PTXAS_SERIALIZED)
    assert (logits.name, logits.registers, logits.stack) == (LOGITS, 94, 0)
    assert logits.warnings == [
        "C7512: wgmma.mma_async instructions are serialized due to insufficient register resources"
    ]
    assert sched.warnings[0].startswith("C7510: wgmma.mma_async instructions are serialized due to wgmma pipeline")
    assert logits.failures(SM90) and sched.failures(SM90)
    assert "(serialized wgmma: refused by instances.yaml's ptxas entry)" in logits.failures(SM90)[0]
    assert all(f.failures(SM90) == [] for f in parse_ptxas(PTXAS_CLEAN))
    assert logits.failures({"limits": {}, "refuse": {}}) == []  # an arch whose record refuses none


def test_the_summary_says_what_the_record_holds():
    assert held(SM90) == (
        "no spills, no stack frames, no serialized wgmma, dependents wait before touching global memory"
    )
    assert held({"limits": {"max_stack_bytes": 64}, "refuse": {}}) == "stack frames of at most 64 bytes"
    assert held({"limits": {}, "refuse": {}}) == "nothing held"


# The head of a dependent kernel's PTX as nvcc 13.0 writes it (sm_90a), the wait in its first block.
PTX_WAITS = """\
\tld.param.u64 \t%rd1, [_Z1kPi_param_0];
\tmov.u32 \t%r1, %tid.x;
\tmbarrier.init.shared.b64 \t[%r2], 1;
\tst.shared.u32 \t[%r3], %r1;
\tgriddepcontrol.wait;
\tld.global.nc.u32 \t%r4, [%rd1];
\t@%p1 bra \t$L__BB0_2;
"""


@pytest.mark.parametrize(
    "body, why",
    [
        (PTX_WAITS, None),
        (PTX_WAITS.replace("\tgriddepcontrol.wait;\n", ""), "no griddepcontrol.wait"),
        (PTX_WAITS.replace("\tgriddepcontrol.wait;\n", "").replace("[%rd1];\n", "[%rd1];\n\tgriddepcontrol.wait;\n"),
         "`ld.global.nc.u32` before griddepcontrol.wait"),
        ("\tst.u64 \t[%rd2], %rd3;\n" + PTX_WAITS, "`st.u64` before griddepcontrol.wait"),  # generic: may be global
        ("\t@%p2 red.global.add.u32 \t[%rd2], 1;\n" + PTX_WAITS, "`red.global.add.u32` before"),
        ("\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r5], [%rd1], 64, [%r2];\n" + PTX_WAITS,
         "`cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes` before"),
        ("\t@%p1 bra \t$L__BB0_1;\n$L__BB0_1:\n" + PTX_WAITS,
         "griddepcontrol.wait after `@%p1 bra`: not in the first block"),
    ],
)
def test_a_dependent_waits_in_its_first_block_before_global_memory(body, why):
    found = early_access(body)
    assert found == why if why is None else found.startswith(why)


def test_ptx_entries_split_the_module_by_kernel():
    ptx = f".version 8.8\n.visible .entry _Z1av(\n)\n{{\n{PTX_WAITS}}}\n.visible .entry _Z1bv(\n)\n{{\n\tret;\n}}\n"
    entries = ptx_entries(ptx)
    assert list(entries) == ["_Z1av", "_Z1bv"]
    assert early_access(entries["_Z1av"]) is None and early_access(entries["_Z1bv"]) == "no griddepcontrol.wait"


def test_short_name_drops_return_type_parameters_and_namespaces():
    demangled = (
        "void mxlogits::sm90::logits_kernel<mxlogits::sm90::Traits<mxlogits::InstanceTraits<1, 64, 132>, "
        "mxlogits::sm90::Tunables_qlen1_kv64> >(mxlogits::KernelArgs)"
    )
    assert short_name(demangled) == "logits_kernel<Traits<InstanceTraits<1,64,132>,Tunables_qlen1_kv64>>"
    assert short_name("void mxlogits::sm90::schedule_kernel<4, 64>(mxlogits::SchedArgs)") == "schedule_kernel<4,64>"
    assert short_name("x" * 100, width=20) == "x" * 17 + "..."


def test_device_flags_select_one_pass_per_family():
    assert device_flags("cuda", "sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert device_flags("cuda", "sm_80") == ["-gencode=arch=compute_80,code=sm_80"]
    assert device_flags("hip", "gfx950") == ["--offload-arch=gfx950"]
    assert device_flags("host", "host") == []
    with pytest.raises(ValueError, match="sm_<NN>"):
        device_flags("cuda", "gfx950")


STUB_ARCH = """\
  - name: stubcuda
    family: cuda
    target: sm_90a
    flags: [-O3]
    scale_layout: natural
    setup_tokens: {one_row: 512, more_rows: 448}
    budgets: {max_registers: 32}
    ptxas: {max_stack_bytes: 0, max_spill_bytes: 0}
instances:
"""
TABLE = CPU_ONLY.replace("instances:\n", STUB_ARCH) + (
    "  - {arch: stubcuda, name: clean, q_per_block: 1, block_k: 64, cta_resident: 8, default: true}\n"
)
SPILLING = "  - {arch: stubcuda, name: spill, q_per_block: 8, block_k: 64, cta_resident: 8}\n"


@needs_nvcc
def test_clean_stub_arch_reports_every_kernel(tmp_path, capsys):
    generated = render_stub(tmp_path, TABLE)
    assert gen_main(["--ptxas", "--out", str(generated)]) == 0
    out = capsys.readouterr().out
    assert "stubcuda   clean" in out and "logits_kernel<Traits<InstanceTraits<1,64,8,512>" in out
    assert "schedule_kernel<1,64,7680l,512>" in out and "no spills, no stack frames" in out
    assert "qlen1_kv64" not in out  # the host arch has no ptxas pass
    kernels = [line for line in out.splitlines() if line.startswith("stubcuda")]
    assert len(kernels) == 6 and all(re.fullmatch(r"[0-9a-f]{12}", line.split()[-1]) for line in kernels)


KERNELS = """\
__global__ void scale(float* x, float s) { x[threadIdx.x] *= s; }
__global__ void shift(float* x, float s) { x[threadIdx.x] += s; }
"""


def cubin_of(tmp: Path, name: str, source: str) -> bytes:
    cu = tmp / f"{name}.cu"
    cu.write_text(source)
    cmd = ["nvcc", "-cubin", "-o", str(tmp / f"{name}.cubin"), str(cu), "-O3", "-lineinfo",
           *device_flags("cuda", "sm_90a")]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return (tmp / f"{name}.cubin").read_bytes()


@needs_nvcc
def test_code_digests_follow_the_instructions_not_the_lines(tmp_path):
    base = code_digests(cubin_of(tmp_path, "base", KERNELS))
    assert sorted(base) == ["_Z5scalePff", "_Z5shiftPff"]
    moved = code_digests(cubin_of(tmp_path, "moved", "// a comment\n\n\n" + KERNELS))  # every line moves
    assert moved == base
    changed = code_digests(cubin_of(tmp_path, "changed", KERNELS.replace("+= s", "-= s")))
    assert changed["_Z5scalePff"] == base["_Z5scalePff"] and changed["_Z5shiftPff"] != base["_Z5shiftPff"]


def test_code_digests_refuse_what_is_not_a_cubin():
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF"):
        code_digests(b"#include <cuda.h>\n")


@needs_nvcc
def test_spilling_instance_fails_and_is_named(tmp_path, capsys):
    generated = render_stub(tmp_path, TABLE + SPILLING)
    assert gen_main(["--ptxas", "--out", str(generated)]) == 1
    captured = capsys.readouterr()
    assert "stubcuda   spill" in captured.out
    (failure,) = captured.err.strip().splitlines()
    assert failure.startswith("mxlogits-gen: stubcuda spill: void mxlogits::stubcuda::logits_kernel<")
    assert "bytes spill stores" in failure


@needs_nvcc
def test_a_dependent_that_does_not_wait_fails_and_is_named(tmp_path, capsys):
    """The stub's logits kernel has no griddepcontrol.wait: named a dependent, the report fails on it alone."""
    table = TABLE.replace("max_spill_bytes: 0}", "max_spill_bytes: 0, dependents: 'logits_kernel<'}")
    generated = render_stub(tmp_path, table)
    assert gen_main(["--ptxas", "--out", str(generated)]) == 1
    (failure,) = capsys.readouterr().err.strip().splitlines()
    assert failure.startswith("mxlogits-gen: stubcuda clean: void mxlogits::stubcuda::logits_kernel<")
    assert failure.endswith("may access global memory before the kernel it follows ends: no griddepcontrol.wait")


@needs_nvcc
def test_an_arch_without_a_ptxas_entry_is_held_to_nothing(tmp_path, capsys):
    table = (TABLE + SPILLING).replace("    ptxas: {max_stack_bytes: 0, max_spill_bytes: 0}\n", "")
    generated = render_stub(tmp_path, table)
    assert gen_main(["--ptxas", "--out", str(generated)]) == 0
    out = capsys.readouterr().out
    assert "arch stubcuda has no ptxas entry: nothing held beyond compiling" in out and "stubcuda   spill" in out


@pytest.mark.parametrize(
    "edit, message",
    [
        (("max_spill_bytes: 0}", "max_spill_bytes: -1}"),
         ":17:50: arches[1].ptxas.max_spill_bytes: expected an integer in [0, "),
        (("max_spill_bytes: 0}", "max_spills: 0}"),
         ":17:33: arches[1].ptxas.max_spills: expected one of ['dependents', 'max_spill_bytes', "),
        (("max_spill_bytes: 0}", "refuse: {slow: '(C75'}}"),
         ":17:48: arches[1].ptxas.refuse.slow: expected a valid regular "),
        (("max_spill_bytes: 0}", "dependents: 'logits_kernel<('}"),
         ":17:45: arches[1].ptxas.dependents: expected a valid regular "),
        (("family: cuda\n    target: sm_90a", "family: hip\n    target: gfx950"),
         ":17:12: arches[1].ptxas: expected ptxas limits on a cuda arch only"),
    ],
)
def test_the_loader_places_a_bad_ptxas_entry(tmp_path, edit, message):
    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES, templates)
    shutil.copytree(STUB_ARCHES / "stubcuda", templates / "arch" / "stubcuda")
    (tmp_path / "instances.yaml").write_text(TABLE.replace(*edit))
    with pytest.raises(TableError) as e:
        load_table(tmp_path / "instances.yaml", templates)
    assert message in str(e.value)


@needs_nvcc
def test_compile_error_exits_2_with_the_compiler_output(tmp_path, capsys):
    generated = render_stub(tmp_path, TABLE)
    (generated / "stubcuda" / "instance_clean.cu").write_text("#include <c10/util/Exception.h>\n")
    assert gen_main(["--ptxas", "--out", str(generated)]) == 2
    err = capsys.readouterr().err
    assert "instance_clean.cu does not compile" in err and "c10/util/Exception.h" in err
    assert "must not include torch headers" in err


def test_no_cuda_arch_is_not_an_error(tmp_path, capsys, monkeypatch):
    generated = render_stub(tmp_path, CPU_ONLY)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc needed when there is nothing to compile
    assert gen_main(["--ptxas", "--out", str(generated)]) == 0
    assert "no cuda arch" in capsys.readouterr().out
