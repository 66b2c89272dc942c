"""The device-compiler flags that select an arch's compilation pass. One function, imported by the
build (mxlogits.build) and by the resource report (mxlogits_codegen.ptxas), so both compile the
same pass; free of jinja2, yaml and torch."""

from __future__ import annotations

import re


def device_flags(family: str, target: str) -> list[str]:
    """sm_90a -> ["-gencode=arch=compute_90a,code=sm_90a"] (cuda), gfx950 -> ["--offload-arch=gfx950"]
    (hip), [] for the host. An "a" target keeps its suffix on both sides: compute_90a unlocks wgmma."""
    if family == "host":
        return []
    if family == "cuda":
        m = re.fullmatch(r"sm_(\d+a?)", target)
        if m is None:
            raise ValueError(f"mxlogits: cuda target: expected sm_<NN> or sm_<NN>a, found {target!r}")
        return [f"-gencode=arch=compute_{m.group(1)},code=sm_{m.group(1)}"]
    if family == "hip":
        return [f"--offload-arch={target}"]
    raise ValueError(f"mxlogits: family: expected host, cuda or hip, found {family!r}")
