"""pa_mqa_logits_mxfp4: the operator (docs/semantics.md), dispatched to the module of the tensors' arch."""

from __future__ import annotations

import torch

from .arch import arch_of
from .layouts import arch_layout, check_layout
from .manifest import manifest
from .ops import ops
from .plan import MqaLogitsPlan, count_arg
from .validate import check_launch


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
    out_from_start: bool = False,
) -> torch.Tensor:
    """out[r, t] = sum_h weight_scale * weights[r, h] * maximum(q[r, h] . K[t], 0) for every row r
    of the plan and t in its window [local_starts[r], local_ends[r]); other cells of `out` are
    not written. Without `out`, returns a new [q.shape[0], max_seq_len] fp32 tensor of -inf.
    out_from_start (cpu, sm90; needs `out`): that cell goes to out[r, t - local_starts[r]] instead, and
    a window is cut at local_starts[r] + out.shape[1] (DeepGEMM's compressed logits).

    q [T, H, D/2] and kv_cache [pages, PAGE, D/2] are packed E2M1 (uint8); q_scale [T, H, D/32]
    and kv_scale [pages, PAGE, D/32] E8M0 (uint8); kv_cache/kv_scale may be strided views of one
    fused page buffer. weights [T, H] fp32 or bf16; block_tables int32 [batch, >=
    block_table_width(max_seq_len)]; out fp32 [>= T, >= max_seq_len], last dim contiguous.

    Caller contract (the op cannot check these; docs/contract.md):
    1. windows end at or before out.shape[1] and max_seq_len;
    2. a row of no live sequence has an empty window, and only such a row may have a
       negative row_to_batch;
    3. at q_per_block > 1, cu_seq_q[batch] <= total_q.
    Windows may lie in any order, within a tile too (a tile reads their union).
    Everything else is checked before any launch (and before `out` is allocated) and raises naming
    the argument; a plan built with the checked mode (plan(validate=True) or MXLOGITS_VALIDATE=1)
    also has the contract and every page id its windows read checked here, with one host sync.
    A page id outside [0, num_pages) makes the cells of its tokens NaN, on every arch.
    """
    if not isinstance(plan, MqaLogitsPlan):
        raise TypeError(f"mxlogits: plan: expected an MqaLogitsPlan from plan(), found {type(plan).__name__}")
    plan.check_current()
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
    laid_out = (("q_scale", q_scale), ("kv_cache", kv_cache), ("kv_scale", kv_scale))  # per-arch layouts
    named = (*laid_out, ("block_tables", block_tables), ("weights", weights), ("out", out))
    for name, t in named:
        if t is None and name == "out":
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"mxlogits: {name}: expected a tensor, found {type(t).__name__}")
        if t.device != device:
            raise ValueError(f"mxlogits: {name}: expected a tensor on {device} (that of q), found {t.device}")
    count_arg(max_seq_len, "max_seq_len", 0)
    if not isinstance(out_from_start, bool):
        raise TypeError(f"mxlogits: out_from_start: expected a bool, found {type(out_from_start).__name__}")
    if out_from_start and out is None:
        raise ValueError("mxlogits: out: expected a tensor with out_from_start=True (its width is the caller's), found None")
    if torch.is_grad_enabled():
        for name, t in (("weights", weights), ("out", out)):
            if t is not None and t.requires_grad:
                raise ValueError(
                    f"mxlogits: {name}: expected a tensor that requires no gradient (pa_mqa_logits_mxfp4 has no "
                    f"backward: its logits only select tokens), found requires_grad=True; pass {name}.detach() or "
                    f"call it under torch.no_grad()"
                )
    if block_tables.dim() == 2 and block_tables.shape[0] < plan.batch:
        raise ValueError(
            f"mxlogits: block_tables: expected at least {plan.batch} rows (the plan's batch), "
            f"found shape {tuple(block_tables.shape)}"
        )
    expected = arch_layout(arch)  # refuse a tensor laid out for another arch (docs/semantics.md)
    for name, t in laid_out:
        check_layout(name, t, name, expected)
    v = plan.variant
    module, buffers = ops(arch, device), plan.buffers
    # Each argument by name (the op's schema, manifest.json), written out: a dict passed with ** would
    # cost the per-call path about as much again as the call's own argument handling.
    if out is None or plan.checked is not None:  # every C++ check, before an allocation or a host read
        module.check_logits(
            q=q, q_scale=q_scale, kv_cache=kv_cache, kv_scale=kv_scale, block_tables=block_tables, weights=weights,
            cta_info=buffers.cta_info, cta_ranges=buffers.cta_ranges, local_ends=plan.local_ends,
            local_starts=plan.local_starts, out=out, num_rows=plan.num_rows, max_seq_len=max_seq_len,
            out_from_start=out_from_start, q_per_block=v.q_per_block, block_k=v.block_k,
        )  # fmt: skip
    if plan.checked is not None:
        check_launch(plan.checked, block_tables, kv_cache.shape[0], manifest().page_size, max_seq_len)
    if out is None:
        out = new_out(q.shape[0], max_seq_len, device)
    module.pa_mqa_logits_mxfp4(
        q=q, q_scale=q_scale, kv_cache=kv_cache, kv_scale=kv_scale, block_tables=block_tables, weights=weights,
        cta_info=buffers.cta_info, cta_ranges=buffers.cta_ranges, local_ends=plan.local_ends,
        local_starts=plan.local_starts, out=out, num_rows=plan.num_rows, max_seq_len=max_seq_len,
        weight_scale=float(weight_scale), out_from_start=out_from_start, q_per_block=v.q_per_block,
        block_k=v.block_k,
    )  # fmt: skip
    return out


def new_out(rows: int, max_seq_len: int, device: torch.device) -> torch.Tensor:
    """A new fp32 [rows, max_seq_len] out of -inf; an allocation failure raises naming `out`."""
    try:
        return torch.full((rows, max_seq_len), float("-inf"), dtype=torch.float32, device=device)
    except RuntimeError as e:  # torch.OutOfMemoryError is one
        raise RuntimeError(
            f"mxlogits: out: allocating [{rows}, {max_seq_len}] fp32 ({rows * max_seq_len * 4} bytes) on {device} "
            f"failed: {e}; pass a preallocated out="
        ) from None
