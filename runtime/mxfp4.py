"""MXFP4 (OCP Microscaling v1.0) in pure torch: E2M1 elements, two per byte (element 2i in
the low nibble), one E8M0 scale per 32 consecutive elements; scale byte 255 is NaN."""

from __future__ import annotations

import math

import torch

BLOCK = 32
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring E2M1 magnitudes; a tie rounds to the even code.
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_TIE_ROUNDS_UP = (False, True, False, True, False, True, False)  # upper neighbour's code is even


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
    blocks = x.to(torch.float64).reshape(*x.shape[:-1], d // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=-1)
    finite = torch.isfinite(amax)
    safe = torch.where(finite & (amax > 0), amax, torch.ones_like(amax))
    exp = (torch.floor(torch.log2(safe)) - 2).clamp(-127, 127)
    exp = torch.where(amax > 0, exp, torch.full_like(exp, -127))
    scaled = blocks / torch.exp2(exp).unsqueeze(-1)
    mag = scaled.abs()
    mids = torch.tensor(_MIDPOINTS, dtype=torch.float64, device=x.device)
    code = torch.bucketize(mag, mids, right=False)  # index of the first midpoint >= mag
    tie_up = torch.tensor(_TIE_ROUNDS_UP, device=x.device)
    at_mid = (code < len(_MIDPOINTS)) & (mag == mids[code.clamp(max=len(_MIDPOINTS) - 1)])
    code = code + (at_mid & tie_up[code.clamp(max=len(_MIDPOINTS) - 1)]).to(code.dtype)
    code = code.clamp(max=7) | torch.where(scaled < 0, 8, 0)  # sign bit; -0.0 keeps code 0
    code = torch.where(torch.isfinite(scaled), code, torch.zeros_like(code))
    scales = torch.where(finite, exp + 127, torch.full_like(exp, 255)).to(torch.uint8)
    nibbles = code.to(torch.uint8).reshape(*x.shape[:-1], d // 2, 2)
    packed = nibbles[..., 0] | (nibbles[..., 1] << 4)
    return packed, scales


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
