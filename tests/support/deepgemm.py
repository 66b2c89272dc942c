"""DeepGEMM's input conventions for the ported tests: its FP4 quantization rule, its int32 packing of
E8M0 scale bytes, and its calc_diff."""

from __future__ import annotations

import torch
from mxlogits.bench.peer import calc_diff  # noqa: F401  (DeepGEMM's metric, written once: bench --peer's)

# the thresholds a scaled value must exceed to take each next E2M1 code (0.5, 1, 1.5, 2, 3, 4, 6)
THRESHOLDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def dg_fp4(x: torch.Tensor, chunk: int = 1 << 20) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepGEMM's FP4 quantization of rows x [..., D]: (packed codes uint8 [..., D/2], E8M0 bytes uint8
    [..., D/32]), `chunk` rows at a time (the batch-4096 cache fits an 80 GB card so)."""
    rows = x.reshape(-1, x.shape[-1])
    packed = torch.empty((rows.shape[0], rows.shape[1] // 2), dtype=torch.uint8, device=x.device)
    biased = torch.empty((rows.shape[0], rows.shape[1] // 32), dtype=torch.uint8, device=x.device)
    for i in range(0, rows.shape[0], chunk):
        packed[i : i + chunk], biased[i : i + chunk] = _dg_fp4_rows(rows[i : i + chunk])
    return packed.view(*x.shape[:-1], -1), biased.view(*x.shape[:-1], -1)


def _dg_fp4_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    blocks = x.float().unflatten(-1, (-1, 32))
    amax = blocks.abs().amax(-1).clamp(min=1e-4)
    biased = (torch.ceil(torch.log2(amax / 6.0)) + 127).clamp(1, 254)
    scale = torch.exp2(biased - 127)[..., None]
    y = blocks / scale
    code = sum((y.abs() > t).to(torch.uint8) for t in THRESHOLDS)
    code = torch.where((y < 0) & (code > 0), code + 8, code).flatten(-2)
    packed = code[..., 0::2] | (code[..., 1::2] << 4)
    return packed, biased.to(torch.uint8)


def as_int32(scale_bytes: torch.Tensor) -> torch.Tensor:
    """E8M0 bytes [..., 4] as DeepGEMM's int32 (byte i in bits 8i..8i+7), by arithmetic: an oracle
    independent of the adapter's int32 views."""
    packed = sum(scale_bytes[..., i].to(torch.int64) << (8 * i) for i in range(4))
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)

