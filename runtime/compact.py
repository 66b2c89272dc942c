"""The compact schedule (docs/schedule.md, "The compact schedule"): the step's split as one int32
[num_ctas + 1, 2] tensor, DeepGEMM's metadata shape, for decode steps of sequences with next_n rows
each whose windows start at 0. Built in one launch from the context lengths, before the instance is
known; the op's CTAs read their work off it. Plain tensors throughout: the schedule can be copied into any
persistent buffer, and a CUDA graph captured on that buffer replays with the schedule of each step."""

from __future__ import annotations

import torch

from .arch import arch_of
from .manifest import MqaLogitsVariant, default_variant, manifest, resolve_variant, variant_for_rows
from .op import new_out
from .ops import ops
from .plan import count_arg


@torch.compiler.assume_constant_result  # a constant to torch.compile, which cannot trace the manifest's read
def instance_of(arch: str, variant: str | MqaLogitsVariant | None, rows: int) -> tuple[int, int, int]:
    """(q_per_block, block_k, setup_pages) of `variant` (None: the instance for `rows` rows a sequence,
    variant_for's rule). setup_pages, a sequence's setup weight in the compact split, is the arch
    default's setup_tokens in pages: the split is built before the instance is known."""
    m = manifest()
    v = variant_for_rows(arch, rows) if variant is None else resolve_variant(variant, arch)
    return v.q_per_block, v.block_k, -(-m.setup_tokens[default_variant(arch)] // m.page_size)


def rows_per_sequence(context_lens: torch.Tensor, next_n: int | None) -> int:
    """next_n of a call: context_lens.shape[1] when 2-D (a given next_n must agree), else next_n or 1."""
    if not isinstance(context_lens, torch.Tensor):
        raise TypeError(f"mxlogits: context_lens: expected an int32 tensor, found {type(context_lens).__name__}")
    if context_lens.dim() == 2:
        if next_n not in (None, context_lens.shape[1]):
            raise ValueError(
                f"mxlogits: context_lens: expected [B] or [B, next_n={next_n}], found {tuple(context_lens.shape)}"
            )
        return context_lens.shape[1]
    return count_arg(1 if next_n is None else next_n, "next_n", 1)


def compact_schedule(
    context_lens: torch.Tensor,
    num_ctas: int,
    *,
    next_n: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """int32 [num_ctas + 1, 2]: where each of num_ctas CTAs starts (sequence, unit), for windows
    [0, context_lens[b] - next_n + 1 + j) of row j of sequence b (context_lens [B]), or
    [0, context_lens[b, j]) ([B, next_n], in any order within a sequence). One launch on the current
    stream, no host sync. The split spreads over at most the CTAs the device holds at once; rows past
    them repeat the end (their CTAs do nothing). `out`: an int32 [num_ctas + 1, 2] tensor to build into."""
    count_arg(num_ctas, "num_sms", 1)
    n = rows_per_sequence(context_lens, next_n)
    device = context_lens.device
    arch = arch_of(device)
    qpb, bk, setup = instance_of(arch, None, n)
    module = ops(arch, device)
    batch = context_lens.shape[0] if context_lens.dim() >= 1 else 0
    ctas = module.schedule_sizes(device=device, num_rows=batch * n, batch=batch, q_per_block=qpb, block_k=bk, num_ctas=0)[0]
    if out is None:
        out = torch.empty((num_ctas + 1, 2), dtype=torch.int32, device=device)
    module.build_compact_schedule(
        context_lens=context_lens, schedule_meta=out, next_n=n, num_ctas=min(num_ctas, ctas), setup_pages=setup,
        q_per_block=qpb, block_k=bk,
    )  # fmt: skip
    return out


def pa_mqa_logits_compact(
    q: torch.Tensor,
    q_scale: torch.Tensor,
    kv_cache: torch.Tensor,
    kv_scale: torch.Tensor,
    block_tables: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    schedule: torch.Tensor,
    max_seq_len: int,
    *,
    next_n: int | None = None,
    variant: str | MqaLogitsVariant | None = None,
    weight_scale: float = 1.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """pa_mqa_logits_mxfp4 (same tensors, same semantics) on a compact schedule built by
    compact_schedule from these context_lens: rows b * next_n + j, block_tables row b. One launch,
    whose CTAs take their records from the schedule; every argument is checked before it. Without
    `out`, a new [B * next_n, max_seq_len] fp32 tensor of -inf. variant: the instance (default: the
    one that takes next_n rows in the fewest tiles, as mxlogits.variant_for)."""
    n = rows_per_sequence(context_lens, next_n)
    count_arg(max_seq_len, "max_seq_len", 0)
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"mxlogits: q: expected a tensor, found {type(q).__name__}")
    device = q.device
    arch = arch_of(device)
    qpb, bk, setup = instance_of(arch, variant, n)
    module = ops(arch, device)
    if out is None:
        module.check_compact_logits(
            q=q, q_scale=q_scale, kv_cache=kv_cache, kv_scale=kv_scale, block_tables=block_tables,
            weights=weights, context_lens=context_lens, schedule_meta=schedule, out=None, next_n=n,
            setup_pages=setup, max_seq_len=max_seq_len, q_per_block=qpb, block_k=bk,
        )  # fmt: skip
        out = new_out(context_lens.shape[0] * n, max_seq_len, device)
    module.pa_mqa_logits_compact(
        q=q, q_scale=q_scale, kv_cache=kv_cache, kv_scale=kv_scale, block_tables=block_tables, weights=weights,
        context_lens=context_lens, schedule_meta=schedule, out=out, next_n=n, setup_pages=setup,
        max_seq_len=max_seq_len, weight_scale=float(weight_scale), q_per_block=qpb, block_k=bk,
    )  # fmt: skip
    return out
