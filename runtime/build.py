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

_lock = threading.Lock()
_loaded: dict[str, str] = {}  # arch -> op namespace


def cache_dir() -> Path:
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mxlogits"


def jit_enabled() -> bool:
    return os.environ.get(JIT_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def sanitize_enabled() -> bool:
    return os.environ.get(SANITIZE_ENV, "0").strip().lower() in ("1", "true", "yes", "on")


def build_flags(arch: ArchRecord) -> list[str]:
    """The arch's compiler flags, plus its sanitize_flags under MXLOGITS_SANITIZE=1."""
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


def module_name(arch: ArchRecord) -> str:
    """Name of the built module: the arch and a hash of everything the binary depends on."""
    key = {
        "sources": arch.source_hash,
        "flags": build_flags(arch),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "cxx": os.environ.get("CXX", ""),
        "device_compiler": device_compiler_version(arch.family),
        "host": _host_cpu() if arch.family == "host" else "",
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"mxlogits_{arch.name}_{digest}"


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


def _compile(arch: ArchRecord, directory: Path, name: str, build_dir: Path) -> None:
    from torch.utils import cpp_extension

    sources = [str(directory / s) for s in arch.sources]
    flags = build_flags(arch)
    device_code = arch.family != "host"
    sanitized = " with sanitizers" if sanitize_enabled() else ""
    print(
        f"mxlogits: building the {arch.name} kernels{sanitized} (first use of this build: a minute or more), "
        f"cached in {build_dir}",
        file=sys.stderr,
        flush=True,
    )
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


def _paths(arch: ArchRecord) -> tuple[Path, Path]:
    """(module, stamp): the stamp is written after a build succeeded, so a killed link is rebuilt."""
    name = module_name(arch)
    return cache_dir() / name / f"{name}.so", cache_dir() / name / "complete"


def cached_library(arch_name: str) -> Path | None:
    """The built module of `arch_name` in the cache, or None."""
    library, done = _paths(manifest().arches[arch_name])
    return library if done.is_file() else None


def built_library(arch_name: str) -> Path:
    """Path of the built module of `arch_name`, building it (under a file lock) if JIT is on."""
    m = manifest()
    arch = m.arches[arch_name]
    _check_sanitizable(arch)
    # The cache is keyed by the manifest's hash of the sources, so the files are checked against it
    # before a cached module is taken too: an edited tree would otherwise load the unedited build.
    _verify_sources(arch, m.directory)
    library, done = _paths(arch)
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
            _compile(arch, m.directory, name, staging)
            (staging / done.name).write_text(f"{library}\n")
            shutil.rmtree(build_dir, ignore_errors=True)  # a module of an older layout without its stamp
            staging.rename(build_dir)
    return library


def load(arch_name: str) -> str:
    """Load the module of `arch_name` into this process (once) and return its op namespace."""
    ns = _loaded.get(arch_name)
    if ns is None:
        with _lock:
            ns = _loaded.get(arch_name)
            if ns is None:
                torch.ops.load_library(str(built_library(arch_name)))
                ns = manifest().arches[arch_name].op_namespace
                _register_fakes(ns)
                _loaded[arch_name] = ns
    return ns


def _register_fakes(namespace: str) -> None:
    """Meta implementations, so the ops trace under torch.compile: an op that returns nothing only
    checks or writes its `(a!)` arguments in place, so its fake does nothing."""
    for op in manifest().ops.values():
        if op.returns == "()":
            torch.library.register_fake(f"{namespace}::{op.name}")(lambda *args, **kwargs: None)
