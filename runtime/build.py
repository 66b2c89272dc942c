"""Build the generated module of an arch with ninja, once per content, and load it.

The build directory is keyed by the generated sources' hash, the torch version, the flags,
the host compiler, the device compiler's version and (for host arches built with
-march=native) the host CPU; a file lock makes concurrent first uses build once, and a build
happens in a temporary directory renamed into place, so a killed build never leaves a half
module. MXLOGITS_CACHE_DIR moves the cache; MXLOGITS_JIT=0 turns building off, so a missing
module is an error instead of a compile on the serving path. The sources are checked against the
manifest before a module is built or taken from the cache. MXLOGITS_SANITIZE=1 builds with the
arch record's sanitize_flags too (ASan and UBSan on the host arch), under its own cache key.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import torch

from .manifest import ArchRecord, manifest

CACHE_DIR_ENV = "MXLOGITS_CACHE_DIR"
JIT_ENV = "MXLOGITS_JIT"
SANITIZE_ENV = "MXLOGITS_SANITIZE"
EMULATION_CXX_ENV = "MXLOGITS_EMULATION_CXX"
# The host compiler of an emulation build: clang (the bodies use its vector extensions and builtins).
EMULATION_COMPILERS = ("clang++-22", "clang++")

_lock = threading.Lock()
_loaded: dict[tuple[str, bool], str] = {}  # (arch, emulated) -> op namespace


def cache_dir() -> Path:
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mxlogits"


def jit_enabled() -> bool:
    return os.environ.get(JIT_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def sanitize_enabled() -> bool:
    return os.environ.get(SANITIZE_ENV, "0").strip().lower() in ("1", "true", "yes", "on")


def emulation_compiler() -> str | None:
    """The clang an emulation build uses ($MXLOGITS_EMULATION_CXX, else the first of EMULATION_COMPILERS on
    PATH), or None when there is none."""
    named = os.environ.get(EMULATION_CXX_ENV)
    for candidate in (named,) if named else EMULATION_COMPILERS:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def _emulation_compiler_or_raise(arch: ArchRecord) -> str:
    compiler = emulation_compiler()
    if compiler is None:
        wanted = os.environ.get(EMULATION_CXX_ENV) or " or ".join(EMULATION_COMPILERS)
        raise RuntimeError(
            f"mxlogits: the host emulation of {arch.name}: expected a clang on PATH ({wanted}; Debian: apt-get "
            f"install clang-22), found none; set {EMULATION_CXX_ENV} to use another"
        )
    return compiler


def build_flags(arch: ArchRecord, emulated: bool = False) -> list[str]:
    """The arch's compiler flags, plus its sanitize_flags under MXLOGITS_SANITIZE=1; for its emulation build,
    the emulation record's flags, the macros that select that pass and its header, included first."""
    if emulated:
        header = str(manifest().directory / arch.emulation.header)
        macros = ["-DMXLOGITS_EMULATE", f"-D{arch.emulation.macro}"]
        return [*arch.emulation.flags, "-x", "c++", *macros, "-include", header]
    return [*arch.flags, *(arch.sanitize_flags if sanitize_enabled() else ())]


def _check_sanitizable(arch: ArchRecord) -> None:
    if sanitize_enabled() and not arch.sanitize_flags:
        raise RuntimeError(
            f"mxlogits: {SANITIZE_ENV}=1: expected sanitize_flags in the record of arch {arch.name} "
            f"(instances.yaml), found none; a GPU arch's device code is checked with compute-sanitizer instead: "
            f"unset {SANITIZE_ENV} for it"
        )


def _host_cpu() -> str:
    """What -march=native compiles for: the CPU model and its feature flags."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    return " ".join(fields.get(k, "").strip() for k in ("model name", "flags", "Features"))


@functools.cache
def _compiler_version(compiler: str) -> str:
    return subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()


@functools.cache
def device_compiler_version(family: str) -> str:
    """`nvcc --version` / `hipcc --version` of the toolkit torch builds extensions with ('' on the host)."""
    if family == "host":
        return ""
    from torch.utils import cpp_extension

    home, tool = (cpp_extension.CUDA_HOME, "nvcc") if family == "cuda" else (cpp_extension.ROCM_HOME, "hipcc")
    if not home:
        return f"no {tool}"
    try:
        run = subprocess.run([str(Path(home) / "bin" / tool), "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        return f"{tool}: {e}"
    return run.stdout.strip()


def module_name(arch: ArchRecord, emulated: bool = False) -> str:
    """Name of the built module: the arch (and whether it is its emulation) and a hash of everything the
    binary depends on."""
    key = {
        "sources": arch.source_hash,
        "flags": build_flags(arch, emulated),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "cxx": _compiler_version(_emulation_compiler_or_raise(arch)) if emulated else os.environ.get("CXX", ""),
        "device_compiler": "" if emulated else device_compiler_version(arch.family),
        "host": _host_cpu() if emulated or arch.family == "host" else "",
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"mxlogits_{arch.name}{'_emulated' if emulated else ''}_{digest}"


def _verify_sources(arch: ArchRecord, directory: Path) -> None:
    for path, sha in arch.files:
        text = (directory / path).read_bytes()
        if hashlib.sha256(text).hexdigest() != sha:
            raise RuntimeError(
                f"mxlogits: {directory / path} differs from manifest.json: generated files are not edited by hand; "
                f"edit templates/ or instances.yaml and run `mxlogits-gen`"
            )


@contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def _host_compiler(compiler: str | None):
    """$CXX set to `compiler` for the build (torch's extension builder reads it), then restored."""
    if compiler is None:
        yield
        return
    before = os.environ.get("CXX")
    os.environ["CXX"] = compiler
    try:
        yield
    finally:
        if before is None:
            del os.environ["CXX"]
        else:
            os.environ["CXX"] = before


def _compile(arch: ArchRecord, directory: Path, name: str, build_dir: Path, emulated: bool) -> None:
    from torch.utils import cpp_extension

    sources = [str(directory / s) for s in arch.sources]
    flags = build_flags(arch, emulated)
    device_code = arch.family != "host" and not emulated
    what = "host emulation of the" if emulated else "the"
    sanitized = " with sanitizers" if sanitize_enabled() and not emulated else ""
    print(
        f"mxlogits: building {what} {arch.name} kernels{sanitized} (first use of this build: a minute or more), "
        f"cached in {build_dir}",
        file=sys.stderr,
        flush=True,
    )
    with _host_compiler(_emulation_compiler_or_raise(arch) if emulated else None):
        cpp_extension.load(
            name=name,
            sources=sources,
            extra_cflags=["-O3"] if device_code else flags,
            # The device pass comes from the arch's target (an explicit -gencode also keeps torch
            # from adding passes of its own).
            extra_cuda_cflags=flags + list(arch.device_flags) if device_code else None,
            extra_ldflags=None if device_code else flags,  # the compiler driver links -fopenmp's runtime
            extra_include_paths=[str(directory)],
            build_directory=str(build_dir),
            is_python_module=False,
            with_cuda=device_code,
            verbose=False,
        )


def _paths(arch: ArchRecord, emulated: bool) -> tuple[Path, Path]:
    """(module, stamp): the stamp is written after a build succeeded, so a killed link is rebuilt."""
    name = module_name(arch, emulated)
    return cache_dir() / name / f"{name}.so", cache_dir() / name / "complete"


def _record(arch_name: str, emulated: bool) -> ArchRecord:
    arch = manifest().arches[arch_name]
    if emulated and arch.emulation is None:
        raise ValueError(f"mxlogits: arch {arch_name}: expected an arch with an emulation record (instances.yaml), "
                         f"found none: the host emulates {[a.name for a in manifest().arches.values() if a.emulation]}")
    return arch


def cached_library(arch_name: str, emulated: bool = False) -> Path | None:
    """The built module of `arch_name` (its host emulation with `emulated`) in the cache, or None."""
    library, done = _paths(_record(arch_name, emulated), emulated)
    return library if done.is_file() else None


def built_library(arch_name: str, emulated: bool = False) -> Path:
    """Path of the built module of `arch_name` (its host emulation with `emulated`), building it (under a
    file lock) if JIT is on."""
    m = manifest()
    arch = _record(arch_name, emulated)
    if not emulated:
        _check_sanitizable(arch)
    # The cache is keyed by the manifest's hash of the sources, so the files are checked against it
    # before a cached module is taken too: an edited tree would otherwise load the unedited build.
    _verify_sources(arch, m.directory)
    library, done = _paths(arch, emulated)
    if done.is_file():
        return library
    name, build_dir = library.stem, library.parent
    if not jit_enabled():
        raise RuntimeError(
            f"mxlogits: no built {arch_name} module at {library} and {JIT_ENV}=0 forbids building it; "
            f"build ahead of time with `python -m mxlogits build` (JIT on, same {CACHE_DIR_ENV})"
        )
    with _file_lock(cache_dir() / f"{name}.lock"):
        if not done.is_file():
            staging = build_dir.with_name(f"{name}.building")
            shutil.rmtree(staging, ignore_errors=True)  # what a killed build left
            staging.mkdir(parents=True)
            _compile(arch, m.directory, name, staging, emulated)
            (staging / done.name).write_text(f"{library}\n")
            shutil.rmtree(build_dir, ignore_errors=True)  # a module of an older layout without its stamp
            staging.rename(build_dir)
    return library


def load(arch_name: str, emulated: bool = False) -> str:
    """Load the module of `arch_name` (its host emulation with `emulated`) into this process (once) and
    return its op namespace."""
    key = (arch_name, emulated)
    ns = _loaded.get(key)
    if ns is None:
        with _lock:
            ns = _loaded.get(key)
            if ns is None:
                torch.ops.load_library(str(built_library(arch_name, emulated)))
                ns = manifest().arches[arch_name].op_namespace + ("_emulated" if emulated else "")
                _register_fakes(ns)
                _loaded[key] = ns
    return ns


def _register_fakes(namespace: str) -> None:
    """Meta implementations, so the ops trace under torch.compile: an op that returns nothing only
    checks or writes its `(a!)` arguments in place, so its fake does nothing."""
    for op in manifest().ops.values():
        if op.returns == "()":
            torch.library.register_fake(f"{namespace}::{op.name}")(lambda *args, **kwargs: None)
