"""mxlogits-gen --ptxas: compile every instance TU of every cuda arch of a rendered generated/ for
its target alone and report what ptxas allocated per kernel (registers, shared memory, stack,
spills) and a digest of each function's code (cubin.py: equal digests, the same SASS), and hold each
function to its arch record's `ptxas` entry: stack and spill bytes within its limits, none of the
performance warnings it refuses (sm90: a serialized wgmma pipeline), and each kernel it names a
programmatic dependent waiting on the kernel before it before touching global memory (read in the
PTX nvcc keeps). Needs nvcc only, no GPU and no torch headers (instance TUs include none). smem is static shared memory: what a body requests
dynamically at launch is not ptxas's to see."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .cubin import code_digests
from .table import PTXAS_LIMITS

JOBS = 2  # CI runners are small; a GPU body's TU takes most of a core and a few GB
_INSTANCE_TU = re.compile(r"(?P<arch>\w+)/instance_(?P<instance>\w+)\.(cu|hip|cpp)")
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
# A performance warning about one function, e.g. "(C7512) Potential Performance Loss: wgmma.mma_async
# instructions are serialized due to insufficient register resources for the function '...'".
_WARNING = re.compile(r"\((C\d{4})\) (?:Potential Performance Loss: )?(.*?) (?:in|for) the function '([^']+)'")


@dataclass
class Function:
    """ptxas's account of one function; registers and smem are reported for kernels only."""

    name: str  # mangled
    entry: bool = False
    registers: int | None = None
    smem: int = 0
    stack: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    warnings: list[str] = field(default_factory=list)  # "C7512: what ptxas says of it"

    def failures(self, record: dict) -> list[str]:
        """What breaks the arch record's `ptxas` entry (manifest.json's: limits, refuse), or []."""
        out = []
        for key, bounded in PTXAS_LIMITS.items():
            limit = record["limits"].get(key)
            out += [f"{getattr(self, a)} {what} over {key} {limit}" for a, what in bounded.items()
                    if limit is not None and getattr(self, a) > limit]  # fmt: skip
        for warning in self.warnings:
            out += [f"{warning} ({meaning}: refused by instances.yaml's ptxas entry)"
                    for meaning, pattern in record["refuse"].items() if re.search(pattern, warning)]  # fmt: skip
        return out


@dataclass(frozen=True)
class Unit:
    arch: str
    instance: str
    tu: Path
    command: tuple[str, ...]


def parse_ptxas(text: str) -> list[Function]:
    """Functions in the order ptxas reports them, from `-Xptxas -v` output."""
    functions: dict[str, Function] = {}
    entry = current = None
    for line in text.splitlines():
        if m := _WARNING.search(line):
            functions.setdefault(m.group(3), Function(m.group(3))).warnings.append(f"{m.group(1)}: {m.group(2)}")
        elif m := _ENTRY.search(line):
            entry = functions.setdefault(m.group(1), Function(m.group(1)))
            entry.entry = True
        elif m := _PROPERTIES.search(line):
            current = functions.setdefault(m.group(1), Function(m.group(1)))
        elif (m := _FRAME.search(line)) and current is not None:
            current.stack, current.spill_stores, current.spill_loads = map(int, m.groups())
        elif (m := _USED.search(line)) and entry is not None:  # follows the entry being compiled
            entry.registers = int(m.group(1))
            smem = _SMEM.search(line)
            entry.smem = int(smem.group(1)) if smem else 0
    return list(functions.values())


def instance_tus(generated: Path, doc: dict, family: str) -> list[tuple[str, str, Path, dict]]:
    """(arch, instance, TU path, arch record) of every instance TU of `family`'s arches in `doc`
    (generated/manifest.json): what the ptxas and ISA reports compile, one process each."""
    tus = []
    for arch, rec in sorted(doc["arches"].items()):
        if rec["family"] != family:
            continue
        for source in rec["sources"]:
            m = _INSTANCE_TU.fullmatch(source)
            if m is not None and m.group("arch") == arch:
                tus.append((arch, m.group("instance"), generated / source, rec))
    return tus


def _cubin_path(out: Path, arch: str, instance: str) -> Path:
    return out / f"{arch}_{instance}.cubin"


def _keep_dir(out: Path, arch: str, instance: str) -> Path:
    """Where nvcc keeps the unit's intermediate files, its PTX among them."""
    return out / f"{arch}_{instance}.keep"


_PTX_ENTRY = re.compile(r"^\.(?:visible |weak )?\.entry (\S+)\(", re.M)
# A memory instruction outside the state spaces a kernel owns or that nothing before it writes (kernel
# parameters, shared, local, constant): what a dependent may not run before its wait.
_PTX_MEMORY = re.compile(r"^\s*(?:@!?%p\d+\s+)?((?:ld|st|atom|red|cp|prefetch|prefetchu|multimem)\.\S*)", re.M)
_OWN_SPACES = re.compile(r"^(?:ld|st|atom|red)\.(?:param|shared|local|const)\b|^cp\.async\.bulk\.tensor\.\w+\.shared")
_PTX_BRANCH = re.compile(r"^\s*(?:\$\w+:|(?:@!?%p\d+\s+)?(?:bra|ret|exit)\b)", re.M)


def ptx_entries(ptx: str) -> dict[str, str]:
    """Each kernel's PTX body, by its mangled name."""
    starts = [(m.group(1), m.end()) for m in _PTX_ENTRY.finditer(ptx)]
    ends = [m.start() for m in _PTX_ENTRY.finditer(ptx)][1:] + [len(ptx)]
    return {name: ptx[start:end] for (name, start), end in zip(starts, ends)}


def early_access(body: str) -> str | None:
    """Why a dependent kernel's PTX body may touch global memory before the kernel it follows has finished,
    or None: griddepcontrol.wait must sit in its first block (no label or branch before it), before its
    first load or store outside its own state spaces."""
    wait = body.find("griddepcontrol.wait")
    if wait < 0:
        return "no griddepcontrol.wait"
    if branch := _PTX_BRANCH.search(body, 0, wait):
        return f"griddepcontrol.wait after `{branch.group(0).strip()}`: not in the first block"
    for m in _PTX_MEMORY.finditer(body, 0, wait):
        if not _OWN_SPACES.match(m.group(1)):
            return f"`{m.group(1)}` before griddepcontrol.wait"
    return None


def instance_units(generated: Path, doc: dict, nvcc: str, out: Path) -> list[Unit]:
    """One compile per instance TU of every cuda arch of `doc`, its target's cubin into `out`."""
    return [
        Unit(arch, instance, tu, (
            nvcc, "-cubin", "-o", str(_cubin_path(out, arch, instance)),
            "-keep", "-keep-dir", str(_keep_dir(out, arch, instance)), "-x", "cu", str(tu), "-I", str(generated),
            *rec["flags"], *rec["device_flags"], "-Xptxas", "-v",
        ))  # fmt: skip
        for arch, instance, tu, rec in instance_tus(generated, doc, "cuda")
    ]


def demangle(names: list[str]) -> dict[str, str]:
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {n: n for n in names}
    out = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True, check=False).stdout
    lines = out.splitlines()
    return dict(zip(names, lines)) if len(lines) == len(names) else {n: n for n in names}


def short_name(demangled: str, width: int = 72) -> str:
    """'void mxlogits::sm90::logits_kernel<mxlogits::sm90::Traits<...> >(mxlogits::KernelArgs)'
    -> 'logits_kernel<Traits<...>>': no return type, parameters or mxlogits namespaces."""
    s = re.sub(r"^void ", "", demangled)
    depth = 0
    for i, ch in enumerate(s):  # cut the parameter list: the first '(' outside template arguments
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0 and not s.startswith("(anonymous", i):
            s = s[:i]
            break
    s = re.sub(r"\bmxlogits::(\w+::)*|\(anonymous namespace\)::", "", s)
    s = s.replace(", ", ",").replace(" >", ">")
    return s if len(s) <= width else s[: width - 3] + "..."


def _compile(unit: Unit) -> subprocess.CompletedProcess:
    return subprocess.run(unit.command, capture_output=True, text=True, check=False)


def _dependent_failures(record: dict, demangled: str, body: str | None) -> list[str]:
    """The record's `dependents` rule broken by one function, or []."""
    pattern = record.get("dependents")
    if not pattern or body is None or not re.search(pattern, demangled):
        return []
    why = early_access(body)
    return [f"launched as a programmatic dependent, it may access global memory before the kernel it follows "
            f"ends: {why}"] if why else []  # fmt: skip


def held(record: dict) -> str:
    """What an arch record's `ptxas` entry holds its functions to, in words: 'no spills, no stack frames,
    no serialized wgmma' for sm90's."""
    limits = record["limits"]
    words = {"max_spill_bytes": ("no spills", "spills of at most {} bytes"),
             "max_stack_bytes": ("no stack frames", "stack frames of at most {} bytes")}  # fmt: skip
    said = [none if limits[key] == 0 else some.format(limits[key]) for key, (none, some) in words.items()
            if key in limits]  # fmt: skip
    waits = ["dependents wait before touching global memory"] if record.get("dependents") else []
    return ", ".join(said + [f"no {meaning}" for meaning in record["refuse"]] + waits) or "nothing held"


def report(generated: Path) -> int:
    """Print the resource table; 0 clean, 1 a function outside its arch record's ptxas entry, 2 a compile
    error or no nvcc."""
    doc = json.loads((generated / "manifest.json").read_text())
    if not any(a["family"] == "cuda" for a in doc["arches"].values()):
        print(f"mxlogits-gen: no cuda arch in {generated / 'manifest.json'}; nothing for ptxas to report")
        return 0
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("mxlogits-gen: --ptxas needs nvcc on PATH (the CUDA toolkit); none found", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mxlogits-ptxas-") as tmp:
        out = Path(tmp)
        units = instance_units(generated, doc, nvcc, out)
        for u in units:
            _keep_dir(out, u.arch, u.instance).mkdir()
        with ThreadPoolExecutor(JOBS) as pool:
            results = list(pool.map(_compile, units))
        codes = {
            u: code_digests(_cubin_path(out, u.arch, u.instance).read_bytes())
            for u, r in zip(units, results)
            if r.returncode == 0
        }
        ptx = {
            u: ptx_entries((_keep_dir(out, u.arch, u.instance) / f"{u.tu.stem}.ptx").read_text())
            for u, r in zip(units, results)
            if r.returncode == 0
        }
    failed = [(u, r) for u, r in zip(units, results) if r.returncode != 0]
    for u, r in failed:
        print(f"mxlogits-gen: {u.tu} does not compile:\n$ {' '.join(u.command)}\n{r.stdout}{r.stderr}", file=sys.stderr)
        if re.search(r"\b(ATen|c10|torch)/", r.stderr):
            print("  (instance TUs must not include torch headers: they compile with nvcc alone)", file=sys.stderr)
    if failed:
        return 2
    rows = [(u, f) for u, r in zip(units, results) for f in parse_ptxas(r.stdout + r.stderr)]
    names = demangle(sorted({f.name for _, f in rows}))
    print(f"{'arch':10} {'instance':16} {'kernel':72} {'regs':>5} {'smem':>7} {'stack':>6} {'spills st/ld':>13}  code")
    for u, f in rows:
        regs = "-" if f.registers is None else str(f.registers)
        spills = f"{f.spill_stores}/{f.spill_loads}"
        kernel = short_name(names[f.name])
        code = codes[u].get(f.name, "-")
        print(f"{u.arch:10} {u.instance:16} {kernel:72} {regs:>5} {f.smem:7} {f.stack:6} {spills:>13}  {code}")
    records = {a: rec["ptxas"] or {"limits": {}, "refuse": {}} for a, rec in doc["arches"].items()}
    for arch in sorted({u.arch for u in units if not doc["arches"][u.arch]["ptxas"]}):
        print(f"mxlogits-gen: arch {arch} has no ptxas entry: nothing held beyond compiling")
    dirty = [
        (u, f, f.failures(records[u.arch]) + _dependent_failures(records[u.arch], names[f.name], ptx[u].get(f.name)))
        for u, f in rows
    ]
    dirty = [(u, f, why) for u, f, why in dirty if why]
    for u, f, why in dirty:
        print(f"mxlogits-gen: {u.arch} {u.instance}: {names[f.name]}: {'; '.join(why)}", file=sys.stderr)
    if dirty:
        return 1
    arches = sorted({u.arch for u in units})
    phrases = {held(records[a]) for a in arches}
    summary = phrases.pop() if len(phrases) == 1 else "; ".join(f"{a}: {held(records[a])}" for a in arches)
    print(f"mxlogits-gen: {len(rows)} functions in {len(units)} instance TUs: {summary}")
    return 0
