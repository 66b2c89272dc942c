"""mxlogits-gen --isa: compile every instance TU of every hip arch of a rendered generated/ to AMDGPU
assembly (clang's device pass alone: no ROCm, no GPU), report what each kernel was allocated (VGPRs,
AGPRs, SGPRs, LDS, occupancy, scratch) and hold it to the arch record's `isa` entry: the matrix
instructions that must be there and the per-kernel resource limits. Scratch, a spill or a dynamic
stack fails the run: each is memory traffic on the hot path. When the tree has more than one hip
target, one TU holding an instance of each is also built for all of them at once (device passes and
host pass), the fat binary a ROCm build of several targets makes. LDS is the static allocation: what
a body requests dynamically at launch is not the compiler's to see."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .ptxas import JOBS, Unit, demangle, instance_tus, short_name
from .table import ISA_LIMITS

CLANG = "clang++-22"  # Debian's clang-22 (.ci/run installs it); the mnemonics checked are its spelling
SHIM = Path(__file__).with_name("hip_shim.h")  # the HIP API an instance TU uses, for a machine without ROCm
_DESCRIPTOR = re.compile(r"\s*\.amdhsa_kernel\s+(\S+)")
_DIRECTIVE = re.compile(r"\s*\.amdhsa_(group_segment_fixed_size|private_segment_fixed_size|uses_dynamic_stack)\s+(\d+)")
_INFO = re.compile(r";\s*(NumVgprs|NumAgprs|TotalNumSgprs|ScratchSize|Occupancy):\s*(.+?)\s*$")
_LABEL = re.compile(r"(\S+):\s*(;.*)?$")
_METADATA = re.compile(r"^\s*\.amdgpu_metadata\s*$(.*?)^\s*\.end_amdgpu_metadata", re.M | re.S)
_PAIRED = ("-mllvm", "-Xclang", "-Xarch_device", "-Xarch_host")  # flags whose value is the next argument


@dataclass
class Kernel:
    """One kernel of a device pass's assembly: its descriptor, its `; Kernel info` comments, its
    metadata's spill counts, and the instructions of its body."""

    name: str  # mangled
    vgprs: int = 0
    agprs: int = 0  # absent (0) on targets without accumulation registers
    sgprs: int = 0  # TotalNumSgprs: with VCC and the other reserved SGPRs, what occupancy counts
    lds: int = 0  # .amdhsa_group_segment_fixed_size
    occupancy: int = 0  # waves per SIMD
    scratch: int = 0  # bytes per lane: the larger of ScratchSize and the private segment
    dynamic_stack: bool = False
    sgpr_spills: int = 0
    vgpr_spills: int = 0
    instructions: list[str] = field(default_factory=list, repr=False)

    @property
    def clean(self) -> bool:
        return not (self.scratch or self.dynamic_stack or self.sgpr_spills or self.vgpr_spills)


class IsaParseError(ValueError):
    """Assembly this parser cannot read: a symbolic resource count, no kernel descriptor."""


def _int(name: str, key: str, value: str) -> int:
    if not re.fullmatch(r"\d+", value):
        raise IsaParseError(f"{name}: {key}: expected an integer, found {value!r}")
    return int(value)


def parse_isa(text: str) -> list[Kernel]:
    """Kernels in the order their descriptors appear in `text`, the `-S` output of a device pass."""
    kernels: dict[str, Kernel] = {}
    lines = text.splitlines()
    current: Kernel | None = None  # the descriptor whose `; Kernel info:` block follows it
    in_info = False
    for line in lines:
        if m := _DESCRIPTOR.match(line):
            current = kernels.setdefault(m.group(1), Kernel(m.group(1)))
        elif current is not None and (m := _DIRECTIVE.match(line)):
            key, value = m.group(1), int(m.group(2))
            if key == "group_segment_fixed_size":
                current.lds = value
            elif key == "private_segment_fixed_size":
                current.scratch = max(current.scratch, value)
            else:
                current.dynamic_stack = bool(value)
        elif line.startswith("; Kernel info:"):
            in_info = current is not None
        elif line.startswith(";") and in_info and (m := _INFO.match(line)):
            key, value = m.group(1), _int(current.name, m.group(1), m.group(2))
            if key == "NumVgprs":
                current.vgprs = value
            elif key == "NumAgprs":
                current.agprs = value
            elif key == "TotalNumSgprs":
                current.sgprs = value
            elif key == "ScratchSize":
                current.scratch = max(current.scratch, value)
            else:
                current.occupancy = value
        elif not line.startswith(";"):
            in_info = False
    body: Kernel | None = None
    for line in lines:  # instructions between a kernel's label and the end of its function
        if (m := _LABEL.match(line)) and m.group(1) in kernels:
            body = kernels[m.group(1)]
        elif body is not None and line.startswith(".Lfunc_end"):
            body = None
        elif body is not None and line[:1] == "\t" and line[1:2].isalpha():
            body.instructions.append(line.split(";", 1)[0].strip())
    for meta in _METADATA.findall(text):
        for k in (yaml.safe_load(meta) or {}).get("amdhsa.kernels", []):
            if k.get(".name") in kernels:
                kernels[k[".name"]].sgpr_spills = int(k.get(".sgpr_spill_count", 0))
                kernels[k[".name"]].vgpr_spills = int(k.get(".vgpr_spill_count", 0))
    if not kernels:
        raise IsaParseError("no .amdhsa_kernel descriptor: not the assembly of a device pass")
    missing = [k.name for k in kernels.values() if k.occupancy == 0]
    if missing:
        raise IsaParseError(f"{missing[0]}: no '; Kernel info:' block with its Occupancy")
    return list(kernels.values())


def _hip_command(clang: str, generated: Path, tu: Path, *, offload: list[str], flags, tail) -> tuple:
    return (clang, "-x", "hip", *offload, "-nogpuinc", "-nogpulib", *flags, "-include", str(SHIM),
            "-I", str(generated), str(tu), *tail)  # fmt: skip


def instance_units(generated: Path, doc: dict, clang: str) -> list[Unit]:
    """One device-only compile to assembly per instance TU of every hip arch of `doc` (manifest.json)."""
    return [
        Unit(arch, instance, tu, _hip_command(
            clang, generated, tu, offload=rec["device_flags"], flags=rec["flags"],
            tail=("--cuda-device-only", "-S", "-o", "-"),
        ))  # fmt: skip
        for arch, instance, tu, rec in instance_tus(generated, doc, "hip")
    ]


def flag_units(flags: list[str]) -> list[tuple[str, ...]]:
    """['-O3', '-mllvm', '-x=1'] -> [('-O3',), ('-mllvm', '-x=1')]: a flag with its separate value."""
    out, i = [], 0
    while i < len(flags):
        n = 2 if flags[i] in _PAIRED and i + 1 < len(flags) else 1
        out.append(tuple(flags[i : i + n]))
        i += n
    return out


def combined_unit(generated: Path, doc: dict, clang: str, workdir: Path) -> Unit | None:
    """One TU including the default instance of every hip arch, built for all their targets at once
    (device passes and the host pass, bundled into one object) with the union of their flags; None
    with fewer than two hip targets."""
    hip = {a: r for a, r in sorted(doc["arches"].items()) if r["family"] == "hip"}
    if len({r["target"] for r in hip.values()}) < 2:
        return None
    defaults = {i["arch"]: i["name"] for i in doc["instances"] if i["default"] and i["arch"] in hip}
    includes = [f"{a}/instance_{defaults[a]}.hip" for a in hip]
    tu = workdir / "combined.hip"
    tu.write_text("".join(f'#include "{p}"\n' for p in includes))
    flags: list[tuple[str, ...]] = []
    for rec in hip.values():
        flags += [u for u in flag_units(rec["flags"]) if u not in flags]
    by_target = sorted(hip.values(), key=lambda r: r["target"])
    offload = list(dict.fromkeys(f for rec in by_target for f in rec["device_flags"]))  # one pass per target
    command = _hip_command(
        clang, generated, tu, offload=offload, flags=[f for u in flags for f in u],
        tail=("-c", "-o", str(workdir / "combined.o")),
    )  # fmt: skip
    return Unit("+".join(hip), " + ".join(f"{a} {defaults[a]}" for a in hip), tu, command)


def _compile(unit: Unit) -> subprocess.CompletedProcess:
    return subprocess.run(unit.command, capture_output=True, text=True, check=False)


def _bundle_problems(clang: str, unit: Unit, doc: dict) -> list[str]:
    """What the combined object lacks: a device image per target, each arch's launch functions."""
    tools = Path(os.path.realpath(clang)).parent
    obj = unit.command[-1]
    fatbin = f"{obj}.hip_fatbin"  # the device images, bundled into a section of the host object
    subprocess.run([str(tools / "llvm-objcopy"), f"--dump-section=.hip_fatbin={fatbin}", obj, os.devnull],
                   capture_output=True, check=False)  # fmt: skip
    listed = subprocess.run([str(tools / "clang-offload-bundler"), "--list", "--type=o", f"--input={fatbin}"],
                            capture_output=True, text=True, check=False).stdout.split()  # fmt: skip
    symbols = subprocess.run([str(tools / "llvm-nm"), "--demangle", "--defined-only", obj],
                             capture_output=True, text=True, check=False).stdout  # fmt: skip
    problems = []
    for arch, rec in sorted(doc["arches"].items()):
        if rec["family"] != "hip":
            continue
        if not any(b.endswith(f"--{rec['target']}") for b in listed):
            problems.append(f"no {rec['target']} device image in the bundle (it lists {listed})")
        if f"mxlogits::{arch}::launch_logits<" not in symbols:
            problems.append(f"no host launch_logits of {arch} defined")
    return problems


def kernel_name(demangled: str) -> str:
    """'void mxlogits::gfx950::logits_kernel<mxlogits::gfx950::Traits<...> >(mxlogits::KernelArgs)' ->
    'logits_kernel': the template arguments are the instance's, which its own column names."""
    return short_name(demangled, width=10**6).split("<", 1)[0]


def _kernel_failures(kernel: Kernel, limits: dict[str, int]) -> list[str]:
    """Scratch, spills, a dynamic stack, and each of the arch record's `isa` limits the kernel passes."""
    out = [f"{kernel.scratch} bytes of scratch per lane"] * bool(kernel.scratch)
    out += [f"{kernel.sgpr_spills} SGPRs spilled (to VGPR lanes)"] * bool(kernel.sgpr_spills)
    out += [f"{kernel.vgpr_spills} VGPRs spilled"] * bool(kernel.vgpr_spills)
    out += ["a dynamic stack"] * kernel.dynamic_stack
    for key, (attr, label, at_least) in ISA_LIMITS.items():
        if key not in limits:
            continue
        have, limit = getattr(kernel, attr), limits[key]
        if (have < limit) if at_least else (have > limit):
            out.append(f"{label} {have} {'below' if at_least else 'over'} {key} {limit} (instances.yaml: isa)")
    return out


def _print_table(rows: list[tuple[Unit, Kernel]], names: dict[str, str], spec: dict) -> None:
    print(f"{'arch':8} {'instance':12} {'kernel':16} {'VGPRs':>5} {'AGPRs':>5} {'SGPRs':>5} {'LDS':>6} "
          f"{'waves/SIMD':>10} {'scratch':>7} {'spills s/v':>10} {'matrix ops':>10}")  # fmt: skip
    for u, k in rows:
        matrix = sum(any(re.search(p, i) for p in spec[u.arch]["expect"]) for i in k.instructions)
        print(f"{u.arch:8} {u.instance:12} {kernel_name(names[k.name]):16} {k.vgprs:5} {k.agprs:5} {k.sgprs:5} "
              f"{k.lds:6} {k.occupancy:10} {k.scratch:7} {f'{k.sgpr_spills}/{k.vgpr_spills}':>10} {matrix:10}")


def report(generated: Path) -> int:
    """Print the resource table; 0 within the arch records, 1 scratch, a spill, a limit passed, an
    expected instruction missing or an incomplete two-target object, 2 a compile error or unreadable
    assembly."""
    doc = json.loads((generated / "manifest.json").read_text())
    if not any(a["family"] == "hip" for a in doc["arches"].values()):
        print(f"mxlogits-gen: no hip arch in {generated / 'manifest.json'}; nothing to compile to ISA")
        return 0
    clang = shutil.which(CLANG)
    if clang is None:
        print(f"mxlogits-gen: --isa skipped: {CLANG} is not on PATH (Debian: apt-get install clang-22 lld-22; "
              ".ci/run installs them)", file=sys.stderr)  # fmt: skip
        return 0
    with tempfile.TemporaryDirectory(prefix="mxlogits-isa-") as work:
        units = instance_units(generated, doc, clang)
        combined = combined_unit(generated, doc, clang, Path(work))
        compiles = units + ([combined] if combined else [])
        with ThreadPoolExecutor(JOBS) as pool:
            results = list(pool.map(_compile, compiles))
        bundle = _bundle_problems(clang, combined, doc) if combined and results[-1].returncode == 0 else []
    failed = [(u, r) for u, r in zip(compiles, results) if r.returncode != 0]
    for u, r in failed:
        print(f"mxlogits-gen: {u.tu} does not compile:\n$ {' '.join(u.command)}\n{r.stderr}", file=sys.stderr)
    if failed:
        return 2
    rows: list[tuple[Unit, Kernel]] = []
    for u, r in zip(units, results):
        try:
            rows += [(u, k) for k in parse_isa(r.stdout)]
        except IsaParseError as e:
            print(f"mxlogits-gen: {u.arch} {u.instance}: unreadable assembly: {e}", file=sys.stderr)
            return 2
    spec = {a: rec.get("isa") or {"expect": [], "limits": {}} for a, rec in doc["arches"].items()}
    for arch in sorted({u.arch for u in units if not doc["arches"][u.arch].get("isa")}):
        print(f"mxlogits-gen: arch {arch} has no isa entry: no expected instructions, no limits beyond no scratch")
    names = demangle(sorted({k.name for _, k in rows}))
    _print_table(rows, names, spec)
    failures = [
        f"{u.arch} {u.instance}: {names[k.name]}: {what}"
        for u, k in rows
        for what in _kernel_failures(k, spec[u.arch]["limits"])
    ]
    for u in units:
        body = [i for unit, k in rows if unit is u for i in k.instructions]
        failures += [
            f"{u.arch} {u.instance}: no instruction matches isa.expect {pattern!r}"
            for pattern in spec[u.arch]["expect"]
            if not any(re.search(pattern, i) for i in body)
        ]
    failures += [f"combined build of {combined.instance}: {problem}" for problem in bundle]
    if combined and not bundle:
        targets = " ".join(a for a in combined.command if a.startswith("--offload-arch="))
        print(f"mxlogits-gen: one TU holding {combined.instance} builds with {targets} (device passes and host pass)")
    for f in failures:
        print(f"mxlogits-gen: {f}", file=sys.stderr)
    if failures:
        return 1
    print(f"mxlogits-gen: {len(rows)} kernels in {len(units)} hip instance TUs: expected instructions present, "
          "no scratch, no spills, within the arch records' isa limits")  # fmt: skip
    return 0
