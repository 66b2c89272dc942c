"""reference_logits: the operator of docs/semantics.md evaluated in fp32 with plain torch ops, row by row."""

from __future__ import annotations

import torch

from .layouts import from_layout
from .mxfp4 import dequantize_mxfp4


def _row_batches(num_rows: int, row_to_batch, cu_seq_q, device) -> torch.Tensor:
    rows = torch.arange(num_rows, device=device)
    if row_to_batch is not None:
        return row_to_batch[:num_rows].long()
    if cu_seq_q is not None:
        return torch.searchsorted(cu_seq_q.long(), rows, right=True) - 1
    return rows


def reference_logits(
    q: torch.Tensor,
    q_scale: torch.Tensor,
    kv_cache: torch.Tensor,
    kv_scale: torch.Tensor,
    block_tables: torch.Tensor,
    weights: torch.Tensor,
    local_ends: torch.Tensor,
    max_seq_len: int,
    *,
    local_starts: torch.Tensor | None = None,
    row_to_batch: torch.Tensor | None = None,
    cu_seq_q: torch.Tensor | None = None,
    weight_scale: float = 1.0,
    num_rows: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """out[r, t] = sum_h weight_scale * weights[r, h] * maximum(dot(Q[r, h], K[t]), 0) for t in
    [local_starts[r], local_ends[r]) clipped to [0, max_seq_len); other cells stay as given
    (-inf in a new `out`). Either layout of docs/semantics.md. The sequence of row r is row_to_batch[r], else the
    sequence of cu_seq_q holding r, else r; a row whose sequence is not a row of block_tables
    produces nothing, as in the kernels."""
    q_scale, kv_cache, kv_scale = (  # rank 4: the mfma_permuted layout
        from_layout(t, k) if t.dim() == 4 else t
        for t, k in ((q_scale, "q_scale"), (kv_cache, "kv_cache"), (kv_scale, "kv_scale"))
    )
    page = kv_cache.shape[1]
    n = q.shape[0] if num_rows is None else num_rows
    if out is None:
        out = torch.full((q.shape[0], max_seq_len), float("-inf"), dtype=torch.float32, device=q.device)
    qf = dequantize_mxfp4(q[:n], q_scale[:n])
    w = weights[:n].float() * weight_scale
    batches = _row_batches(n, row_to_batch, cu_seq_q, q.device).tolist()
    starts = [0] * n if local_starts is None else local_starts[:n].tolist()
    ends = [min(e, max_seq_len) for e in local_ends[:n].tolist()]
    reach: dict[int, int] = {}  # per sequence, the furthest token a row reads
    for b, e in zip(batches, ends, strict=True):
        reach[b] = max(reach.get(b, 0), e)
    zero = torch.zeros((), device=q.device)
    keys_of = None  # (sequence, its keys in fp32): rows come grouped by sequence, one dequantization each
    for r in range(n):
        s, e, b = max(starts[r], 0), ends[r], batches[r]
        if e <= s or not 0 <= b < block_tables.shape[0]:
            continue
        if keys_of is None or keys_of[0] != b:  # only the pages the sequence's rows read: the cache may be large
            pages = block_tables[b, : -(-reach[b] // page)].long()
            keys_of = (b, dequantize_mxfp4(kv_cache[pages], kv_scale[pages]).flatten(0, 1))
        keys = keys_of[1][s:e]
        dots = qf[r] @ keys.T  # [H, tokens]
        out[r, s:e] = (w[r, :, None] * torch.maximum(dots, zero)).sum(0)
    return out
