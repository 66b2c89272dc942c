"""pa_mqa_logits_mxfp4: the operator (SPEC §3), dispatched to the module of the tensors' arch."""

from __future__ import annotations

import torch

from .arch import arch_of
from .build import ops
from .plan import MqaLogitsPlan


def pa_mqa_logits_mxfp4(
    q: torch.Tensor,
    q_scale: torch.Tensor,
    kv_cache: torch.Tensor,
    kv_scale: torch.Tensor,
    block_tables: torch.Tensor,
    weights: torch.Tensor,
    plan: MqaLogitsPlan,
    max_seq_len: int,
    *,
    weight_scale: float = 1.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """out[r, t] = sum_h weight_scale * weights[r, h] * maximum(q[r, h] . K[t], 0) for every row r
    of the plan and t in its window [local_starts[r], local_ends[r]); other cells of `out` are
    not written. Without `out`, returns a new [q.shape[0], max_seq_len] fp32 tensor of -inf.

    q [T, H, D/2] and kv_cache [pages, PAGE, D/2] are packed E2M1 (uint8); q_scale [T, H, D/32]
    and kv_scale [pages, PAGE, D/32] E8M0 (uint8); kv_cache/kv_scale may be strided views of one
    fused page buffer. weights [T, H] fp32 or bf16; block_tables int32 [batch, >=
    block_table_width(max_seq_len)]; out fp32 [>= T, >= max_seq_len], last dim contiguous.

    Caller contract (the op cannot check these; see the README):
    1. within a tile (q_per_block rows of one sequence) windows are non-decreasing in row;
    2. windows end at or before out.shape[1] and max_seq_len;
    3. a row of no live sequence has an empty window, and only such a row may have a
       negative row_to_batch;
    4. at q_per_block > 1, cu_seq_q[batch] <= total_q.
    Everything else is checked before any launch and raises naming the argument.
    """
    if not isinstance(plan, MqaLogitsPlan):
        raise TypeError(f"mxlogits: plan: expected an MqaLogitsPlan from plan(), found {type(plan).__name__}")
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"mxlogits: q: expected a tensor, found {type(q).__name__}")
    device = q.device
    if plan.device != device:
        raise ValueError(
            f"mxlogits: plan: the plan was built for {plan.device} and this launch is on {device}; "
            f"a plan is per forward and per device"
        )
    arch = arch_of(device)
    if plan.variant.arch != arch:
        raise ValueError(f"mxlogits: plan: built for arch {plan.variant.arch}, but {device} runs {arch}")
    named = {
        "q_scale": q_scale,
        "kv_cache": kv_cache,
        "kv_scale": kv_scale,
        "block_tables": block_tables,
        "weights": weights,
        "out": out,
    }
    for name, t in named.items():
        if t is None and name == "out":
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"mxlogits: {name}: expected a tensor, found {type(t).__name__}")
        if t.device != device:
            raise ValueError(f"mxlogits: {name}: expected a tensor on {device} (that of q), found {t.device}")
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int):
        raise TypeError(f"mxlogits: max_seq_len: expected an int, found {type(max_seq_len).__name__}")
    if block_tables.dim() == 2 and block_tables.shape[0] < plan.batch:
        raise ValueError(
            f"mxlogits: block_tables: expected at least {plan.batch} rows (the plan's batch), "
            f"found shape {tuple(block_tables.shape)}"
        )
    if out is None:
        out = torch.full((q.shape[0], max_seq_len), float("-inf"), dtype=torch.float32, device=device)
    v = plan.variant
    ops(arch).pa_mqa_logits_mxfp4(
        q,
        q_scale,
        kv_cache,
        kv_scale,
        block_tables,
        weights,
        plan.buffers.cta_info,
        plan.buffers.cta_ranges,
        plan.local_ends,
        plan.local_starts,
        out,
        plan.num_rows,
        max_seq_len,
        float(weight_scale),
        v.q_per_block,
        v.block_k,
    )
    return out
