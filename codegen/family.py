"""How each compiler family builds and registers an arch: its dispatch key, the suffix of a TU holding
device code, the preprocessor guard of its compilation pass and the device-compiler flags that select
that pass. Arches of one family differ only in their record; the build (through manifest.json), the
ptxas report and the ISA report all compile the pass these flags name."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .table import Arch


@dataclass(frozen=True)
class Family:
    name: str  # host | cuda | hip
    dispatch_key: str  # torch dispatch key of the tensors the arch runs on
    body_suffix: str  # source suffix of a TU holding device code
    guard: str  # preprocessor test true on the passes that compile the body: `target`'s, and its emulation's
    gpu: bool  # device code in kernels, launched on a stream
    device_flags: tuple[str, ...]  # device-compiler flags selecting the pass of `target`
    device: str  # preprocessor test true only on the compilation pass of `target`
    emulation: str | None  # preprocessor test true only on the host emulation build of the arch (hip arches)


def emulation_macro(arch: Arch) -> str:
    """The macro the host emulation build of `arch` defines (with MXLOGITS_EMULATE)."""
    return f"MXLOGITS_EMULATE_{arch.name.upper()}"


def device_flags(family: str, target: str) -> list[str]:
    """sm_90a -> ["-gencode=arch=compute_90a,code=sm_90a"] (cuda), gfx950 -> ["--offload-arch=gfx950"]
    (hip), [] for the host. An "a" target keeps its suffix on both sides: compute_90a unlocks wgmma."""
    if family == "host":
        return []
    if family == "cuda":
        m = re.fullmatch(r"sm_(\d+a?)", target)
        if m is None:
            raise ValueError(f"mxlogits-gen: cuda target: expected sm_<NN> or sm_<NN>a, found {target!r}")
        return [f"-gencode=arch=compute_{m.group(1)},code=sm_{m.group(1)}"]
    if family == "hip":
        return [f"--offload-arch={target}"]
    raise ValueError(f"mxlogits-gen: family: expected host, cuda or hip, found {family!r}")


def family(arch: Arch) -> Family:
    flags = tuple(device_flags(arch.family, arch.target))
    if arch.family == "host":
        guard = "!defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)"
        return Family("host", "CPU", "cpp", guard, False, flags, guard, None)
    if arch.family == "cuda":
        sm, a = re.fullmatch(r"sm_(\d+)(a?)", arch.target).groups()
        # An "a" target (sm_90a) unlocks instructions of that exact chip (wgmma, setmaxnreg): its
        # body must not be compiled on a plain sm_90 pass, which nvcc tells apart by this macro.
        feature = f" && defined(__CUDA_ARCH_FEAT_SM{sm}_ALL)" if a else ""
        guard = f"defined(__CUDA_ARCH__) && __CUDA_ARCH__ == {int(sm) * 10}{feature}"
        return Family("cuda", "CUDA", "cu", guard, True, flags, guard, None)
    device = f"defined(__HIP_DEVICE_COMPILE__) && defined(__{arch.target}__)"
    if arch.emulation is None:
        return Family("hip", "CUDA", "hip", device, True, flags, device, None)
    emulation = f"defined({emulation_macro(arch)})"
    return Family("hip", "CUDA", "hip", f"({device}) || {emulation}", True, flags, device, emulation)
