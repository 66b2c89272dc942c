"""DeepGEMM's FP8 MQA-logits call shape in plain torch, for bench --peer's tests on the host: the paged
kernel (FP8 queries, fused pages of 64 tokens: the e4m3 values, then one fp32 scale per token), its
metadata and the non-paged kernel, with the semantics its test checks
(logits[r, t] = sum_h w[r, h] * relu(q[r, h] . k[t] * sf[t]) inside each row's window)."""

from __future__ import annotations

import torch

__version__ = "fp8-reference"


def _logits(q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """q [H, D], k [T, D] fp32 (scaled), weights [H] -> [T]."""
    return (torch.relu(k @ q.t()) * weights).sum(-1)


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    assert context_lens.dim() == 2 and context_lens.dtype == torch.int32 and block_kv == 64
    return torch.zeros((num_sms + 1, 2), dtype=torch.int32, device=context_lens.device)


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False, indices=None):  # fmt: skip
    b, n, h, d = q.shape
    blocks, page, _, row = kv_cache.shape
    assert q.dtype == torch.float8_e4m3fn and kv_cache.dtype == torch.uint8 and row == d + 4
    flat = kv_cache.view(blocks, page * row)
    values = flat[:, : page * d].view(torch.float8_e4m3fn).view(blocks, page, d).float()
    scales = flat[:, page * d :].contiguous().view(torch.float32).view(blocks, page)
    keys = values * scales[..., None]
    out = torch.full((b * n, max_context_len), float("nan"), device=q.device)
    for i in range(b):
        seq = keys[block_table[i].long()].reshape(-1, d)
        for j in range(n):
            end = int(context_lens[i, j])
            out[i * n + j, :end] = _logits(q[i, j].float(), seq[:end], weights[i * n + j])
    return out


def fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0):
    values, sf = kv
    keys = values.float() * sf[:, None]
    out = torch.full((q.shape[0], values.shape[0]), float("nan"), device=q.device)
    for r in range(q.shape[0]):
        start, end = int(cu_seq_len_k_start[r]), int(cu_seq_len_k_end[r])
        out[r, start:end] = _logits(q[r].float(), keys[start:end], weights[r])
    return out
