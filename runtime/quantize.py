"""MXFP4 quantization by the arch's module (templates/common/quant.h.j2): one launch, no host sync,
graph-safe, bit-exact with quantize_mxfp4 (the pure-torch rule of mxfp4.py), for the rows of a tensor
or straight into the pages of a paged cache at its slots."""

from __future__ import annotations

import torch

from .arch import arch_of
from .compact import instance_of
from .ops import ops


def _module(x: torch.Tensor):
    """The ops of x's arch and the (q_per_block, block_k) of the instance TU to run in: the default's."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"mxlogits: x: expected a tensor, found {type(x).__name__}")
    arch = arch_of(x.device)
    return ops(arch, x.device), instance_of(arch, None, 1)[:2]


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] fp32, bf16 or fp16 (D a multiple of 32) -> (packed uint8 [..., D/2], scales uint8
    [..., D/32]), as quantize_mxfp4 returns them. x is read in place when its leading dims flatten to
    rows (else a contiguous copy is made)."""
    module, (qpb, bk) = _module(x)
    if x.dim() < 1:
        raise ValueError(f"mxlogits: x: expected [..., D], found shape {tuple(x.shape)}")
    d = x.shape[-1]
    rows = x.reshape(-1, d)
    codes = torch.empty((*x.shape[:-1], d // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((*x.shape[:-1], max(d // 32, 1)), dtype=torch.uint8, device=x.device)
    module.quantize_mxfp4_rows(
        x=rows, codes=codes.view(-1, d // 2), scales=scales.view(-1, scales.shape[-1]), q_per_block=qpb, block_k=bk
    )
    return codes, scales


def quantize_into_cache(
    x: torch.Tensor, slot_mapping: torch.Tensor, kv_cache: torch.Tensor, kv_scale: torch.Tensor
) -> None:
    """Quantize the rows of x [N, D] (D the table's head_dim) and write row i to page
    slot_mapping[i] // PAGE, row slot_mapping[i] % PAGE of kv_cache [pages, PAGE, D/2] and kv_scale
    [pages, PAGE, D/32] (the natural layout; any page stride, so the two views of a fused page buffer
    work in place). slot_mapping int64 [N]; a negative slot (padding) and a slot past the cache are
    skipped on the device (the checked path, write_paged_kv, raises for the latter with a host sync)."""
    module, (qpb, bk) = _module(x)
    module.quantize_mxfp4_cache(
        x=x, slot_mapping=slot_mapping, kv_cache=kv_cache, kv_scale=kv_scale, q_per_block=qpb, block_k=bk
    )
