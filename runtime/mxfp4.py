"""MXFP4 (OCP Microscaling v1.0) in pure torch: E2M1 elements, two per byte (element 2i in
the low nibble), one E8M0 scale per 32 consecutive elements; scale byte 255 is NaN."""

from __future__ import annotations

import math

import torch

BLOCK = 32
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring E2M1 magnitudes, and whether a tie there rounds up (to the upper
# neighbour, whose code is even).
_MIDPOINTS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))


def _e2m1_table(device) -> torch.Tensor:
    mags = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)
    return torch.cat([mags, -mags])


def e8m0_to_float(e: torch.Tensor) -> torch.Tensor:
    """2^(e - 127) in fp32 (e = 0 is the subnormal 2^-127), NaN for 255."""
    table = torch.tensor([math.ldexp(1.0, i - 127) for i in range(255)] + [math.nan], dtype=torch.float32)
    return table.to(e.device)[e.to(torch.long)]


def quantize_mxfp4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] float -> (packed uint8 [..., D/2], scales uint8 [..., D/32]).

    Per 32-block: X = floor(log2(amax)) - 2 clamped to [-127, 127] (amax 0 gives e 0); elements
    are x / 2^X rounded half-to-even onto the E2M1 grid, saturating at 6. A block holding a NaN
    or an infinity gets the NaN scale 255.
    """
    if not x.is_floating_point():
        raise TypeError(f"quantize_mxfp4: x: expected a floating tensor, found {x.dtype}")
    d = x.shape[-1]
    if d % BLOCK:
        raise ValueError(f"quantize_mxfp4: x: expected a last dim that is a multiple of {BLOCK}, found {d}")
    # Python-float constants only (no lookup tensor copied to the device), so the quantizer
    # captures in a CUDA graph and traces under torch.compile.
    blocks = x.to(torch.float64).reshape(*x.shape[:-1], d // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    finite = torch.isfinite(amax)
    exp = (torch.floor(torch.log2(torch.where(finite & (amax > 0), amax, 1.0))) - 2).clamp(-127, 127)
    exp = torch.where(amax > 0, exp, -127.0)
    scaled = blocks / torch.exp2(exp)
    mag = scaled.abs()
    code = torch.zeros_like(mag, dtype=torch.uint8)
    for mid, tie_up in _MIDPOINTS:  # code = midpoints passed; a tie goes to the even neighbour
        code += (mag >= mid) if tie_up else (mag > mid)
    code = torch.where(scaled < 0, code + 8, code)  # sign bit; -0.0 keeps code 0
    code = torch.where(torch.isfinite(scaled), code, 0).reshape(*x.shape[:-1], d // 2, 2)
    scales = torch.where(finite, exp + 127, 255.0).to(torch.uint8).squeeze(-1)
    return code[..., 0] | (code[..., 1] << 4), scales


def dequantize_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(packed uint8 [..., D/2], scales uint8 [..., D/32]) -> fp32 [..., D], exactly."""
    if packed.dtype != torch.uint8 or scales.dtype != torch.uint8:
        raise TypeError(f"dequantize_mxfp4: expected uint8 packed and scales, found {packed.dtype} and {scales.dtype}")
    d = packed.shape[-1] * 2
    if scales.shape[:-1] != packed.shape[:-1] or scales.shape[-1] * BLOCK != d:
        raise ValueError(
            f"dequantize_mxfp4: scales: expected shape {(*packed.shape[:-1], d // BLOCK)} for packed "
            f"{tuple(packed.shape)}, found {tuple(scales.shape)}"
        )
    table = _e2m1_table(packed.device)
    codes = torch.stack([packed & 15, packed >> 4], dim=-1).reshape(*packed.shape[:-1], d)
    values = table[codes.to(torch.long)]
    scale = e8m0_to_float(scales).repeat_interleave(BLOCK, dim=-1)
    return values * scale
