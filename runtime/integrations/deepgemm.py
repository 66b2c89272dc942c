"""DeepGEMM's FP4 paged MQA-logits call shape (what vLLM and SGLang call) on mxlogits.

    schedule = get_paged_mqa_logits_metadata(context_lens, 64, num_sms)            # once per step
    logits = fp8_fp4_paged_mqa_logits((q, q_sf), kv_cache, weights, context_lens,   # once per layer
                                      block_table, schedule, max_context_len)

Mapping onto mx.compact_schedule / mx.pa_mqa_logits_compact, all by views (nothing is copied):
- q packed FP4, int8 or uint8 [B, next_n, H, D/2] -> uint8 [B*next_n, H, D/2]; row b*next_n + j.
- q_sf int32 [B, next_n, H], four E8M0 bytes per int32, block i in byte i (little-endian: the
  int32 view of uint8 [.., 4]) -> uint8 [B*next_n, H, D/32].
- kv_cache uint8/int8 [num_blocks, 64, 1, D/2 + 4]: each page holds 64 * D/2 value bytes (token t
  at t * D/2) then 64 * 4 scale bytes (token t at 64 * D/2 + 4t); the [64, 1, D/2 + 4] shape only
  sizes the page, its rows are not tokens. -> kv_cache [num_blocks, 64, D/2] and kv_scale
  [num_blocks, 64, D/32], views with page stride kv_cache.stride(0) (any, e.g. a layer's slice).
- context_lens int32 [B]: row j of sequence b sees KV positions [0, c_b - next_n + 1 + j);
  [B, next_n]: row j sees [0, context_lens[b, j]), in any order within a sequence. A row whose end
  is <= 0 (a pad sequence has c_b = 0) reads nothing. Block table row b.
- schedule_meta: int32 [num_sms + 1, 2] as DeepGEMM's, where each CTA starts (sequence, unit): the
  compact schedule; build it once per step (it does not depend on next_n) and pass it, or a copy of
  it, to every layer.
- weights fp32 [B*next_n, H], block_table int32 [B, >= block_table_width(max_context_len)],
  max_context_len: passed through. Returns fp32 [B*next_n, max_context_len]; clean_logits=True
  fills cells outside the windows with -inf (allowed here with 2-D context_lens too), False leaves
  them uninitialised, as DeepGEMM does.
Not supported (raise): FP8 q (q_sf None), bf16 logits, varlen `indices`, a page size other than
the table's.
"""

from __future__ import annotations

import torch

from ..arch import arch_of
from ..compact import compact_schedule, pa_mqa_logits_compact
from ..layouts import NATURAL, arch_layout
from .indexer import table_shape


def fp4_q_views(q_fp4: torch.Tensor, q_sf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q [B*next_n, H, D/2], q_scale [B*next_n, H, D/32]) uint8 views of DeepGEMM's FP4 query."""
    if q_fp4.dim() != 4 or q_fp4.dtype not in (torch.int8, torch.uint8):
        raise ValueError(f"mxlogits: q: expected int8 [B, next_n, H, D/2], found {q_fp4.dtype} {tuple(q_fp4.shape)}")
    b, n, h, half = q_fp4.shape
    if q_sf is None or q_sf.dtype != torch.int32 or tuple(q_sf.shape) != (b, n, h):
        found = None if q_sf is None else f"{q_sf.dtype} {tuple(q_sf.shape)}"
        raise ValueError(f"mxlogits: q_sf: expected int32 [{b}, {n}, {h}] (4 x E8M0 per int32), found {found}")
    scales = q_sf.view(torch.uint8).view(b * n, h, 4)[..., : half // 16]
    return q_fp4.view(torch.uint8).view(b * n, h, half), scales


def fused_kv_views(kv_cache: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(kv_cache [blocks, PAGE, D/2], kv_scale [blocks, PAGE, D/32]) views of DeepGEMM's fused FP4
    page buffer uint8 [blocks, PAGE, 1, D/2 + 4] (values, then 4 scale bytes per token)."""
    half, page = head_dim // 2, table_shape()[2]
    shape = (page, 1, half + 4)
    if kv_cache.dim() != 4 or kv_cache.dtype not in (torch.int8, torch.uint8) or tuple(kv_cache.shape[1:]) != shape:
        raise ValueError(
            f"mxlogits: kv_cache: expected uint8 [num_blocks, {page}, 1, {half + 4}], "
            f"found {kv_cache.dtype} {tuple(kv_cache.shape)}"
        )
    if kv_cache.stride(3) != 1 or kv_cache.stride(1) != half + 4:
        raise ValueError(
            f"mxlogits: kv_cache: expected each page's bytes contiguous (stride(1) == {half + 4}, stride(3) == 1), "
            f"found strides {kv_cache.stride()}"
        )
    blocks = kv_cache.shape[0]
    pages = kv_cache.view(torch.uint8).view(blocks, page * (half + 4))  # page stride kept: a view, no copy
    values = pages[:, : page * half].view(blocks, page, half)
    scales = pages[:, page * half :].view(blocks, page, 4)[..., : head_dim // 32]
    return values, scales


def get_paged_mqa_logits_metadata(
    context_lens: torch.Tensor,
    block_kv: int,
    num_sms: int,
    indices: torch.Tensor | None = None,
) -> torch.Tensor:
    """The step's schedule from context_lens ([B], or [B, next_n]): int32 [num_sms + 1, 2], the shape of
    DeepGEMM's metadata (mxlogits.compact_schedule: where each of num_sms CTAs starts). One launch on
    the current stream, no host sync; a copy into a persistent buffer is as good as the original.
    block_kv must be the table's page size. Build it every step: it depends on context_lens."""
    if indices is not None:
        raise NotImplementedError("mxlogits: indices (DeepGEMM's varlen decode) is not supported")
    if block_kv != table_shape()[2]:
        raise ValueError(f"mxlogits: block_kv: expected the page size {table_shape()[2]}, found {block_kv}")
    return compact_schedule(context_lens, num_sms)


def fp8_fp4_paged_mqa_logits(
    q: tuple[torch.Tensor, torch.Tensor],
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    schedule_meta: torch.Tensor,
    max_context_len: int,
    clean_logits: bool = False,
    logits_dtype: torch.dtype = torch.float32,
    indices: torch.Tensor | None = None,
    *,
    variant=None,
) -> torch.Tensor:
    """fp32 [B*next_n, max_context_len] logits (module docstring: the mapping). schedule_meta: what
    get_paged_mqa_logits_metadata built from these context_lens (or a copy of it). variant: the
    instance (default: mxlogits.variant_for(device, next_n))."""
    if indices is not None:
        raise NotImplementedError("mxlogits: indices (DeepGEMM's varlen decode) is not supported")
    if logits_dtype != torch.float32:
        raise ValueError(f"mxlogits: logits_dtype: only torch.float32 is supported, found {logits_dtype}")
    if not isinstance(schedule_meta, torch.Tensor):
        raise TypeError(
            "mxlogits: schedule_meta: expected the int32 [num_sms + 1, 2] tensor of get_paged_mqa_logits_metadata "
            f"(mxlogits.integrations.deepgemm), found {type(schedule_meta).__name__}"
        )
    q_fp4, q_sf = q
    arch = arch_of(q_fp4.device)
    if arch_layout(arch) != NATURAL:
        raise ValueError(
            f"mxlogits: kv_cache: DeepGEMM's FP4 page buffer and q_sf hold natural-layout scales, and {arch} reads "
            f"the {arch_layout(arch)} layout: lay the cache out with mxlogits.fused_views(buffer, "
            f"{arch_layout(arch)!r}) and call mxlogits.pa_mqa_logits_mxfp4"
        )
    q_rows, q_scale = fp4_q_views(q_fp4, q_sf)
    b, n = q_fp4.shape[:2]
    if not isinstance(context_lens, torch.Tensor) or context_lens.dim() not in (1, 2) or context_lens.shape[0] != b:
        found = tuple(context_lens.shape) if isinstance(context_lens, torch.Tensor) else type(context_lens).__name__
        raise ValueError(f"mxlogits: context_lens: expected [{b}] or [{b}, {n}] (q is [B, next_n, ...]), found {found}")
    values, scales = fused_kv_views(kv_cache, q_fp4.shape[3] * 2)
    out = torch.empty((b * n, max_context_len), dtype=torch.float32, device=q_fp4.device)
    if clean_logits:
        out.fill_(float("-inf"))
    return pa_mqa_logits_compact(
        q_rows, q_scale, values, scales, block_table, weights, context_lens, schedule_meta, max_context_len,
        next_n=n, variant=variant, out=out,
    )  # fmt: skip
