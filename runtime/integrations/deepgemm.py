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
  max_context_len: passed through. Returns [B*next_n, max_context_len] of logits_dtype (fp32 or
  bf16, written by the kernel); clean_logits=True
  fills cells outside the windows with -inf (allowed here with 2-D context_lens too), False leaves
  them uninitialised, as DeepGEMM does.
fp8_fp4_mqa_logits (prefill, non-paged keys) runs on mx.plan / mx.pa_mqa_logits_mxfp4 through a
one-row block table; fp8_paged_mqa_logits and fp8_mqa_logits are the legacy names.
Not supported (raise): FP8 q (q_sf None), varlen `indices`, a page size other than the table's, and
on the AMD arches bf16 and compressed (max_seqlen_k > 0) logits.
"""

from __future__ import annotations

import math

import torch

from ..arch import arch_of
from ..compact import compact_schedule, pa_mqa_logits_compact
from ..layouts import NATURAL, arch_layout
from ..manifest import variant_for_rows
from ..op import pa_mqa_logits_mxfp4
from ..plan import count_arg, plan, plan_buffers
from ..quantize import quantize_into_cache, quantize_rows
from .indexer import hadamard_transform, table_shape


def check_logits_dtype(logits_dtype: torch.dtype) -> None:
    if logits_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"mxlogits: logits_dtype: expected torch.float32 or torch.bfloat16, found {logits_dtype}")


def check_natural(arch: str, name: str) -> None:
    """DeepGEMM's FP4 tensors hold natural-layout scales: refuse an arch that reads another layout."""
    if arch_layout(arch) != NATURAL:
        raise ValueError(
            f"mxlogits: {name}: DeepGEMM's FP4 page buffer and q_sf hold natural-layout scales, and {arch} reads "
            f"the {arch_layout(arch)} layout: lay the cache out with mxlogits.fused_views(buffer, "
            f"{arch_layout(arch)!r}) and call mxlogits.pa_mqa_logits_mxfp4"
        )


def fp4_query(q) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_fp4, q_sf) of DeepGEMM's q argument; FP8 queries (a tensor, or q_sf None) are refused."""
    if isinstance(q, torch.Tensor) or not isinstance(q, tuple | list) or len(q) != 2 or q[1] is None:
        found = type(q).__name__ if not isinstance(q, tuple | list) else f"({', '.join(type(x).__name__ for x in q)})"
        raise ValueError(
            f"mxlogits: q: expected (q_fp4, q_sf), FP4 queries with their int32-packed E8M0 scales, found {found}; "
            f"FP8 queries are not supported"
        )
    return q[0], q[1]


def fp4_q_views(q_fp4: torch.Tensor, q_sf: torch.Tensor, dims: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """(q [rows, H, D/2], q_scale [rows, H, D/32]) uint8 views of DeepGEMM's FP4 query, int8
    [B, next_n, H, D/2] (dims 4, paged) or [M, H, D/2] (dims 3), and its int32 scales [..., H]."""
    shape = "[B, next_n, H, D/2]" if dims == 4 else "[M, H, D/2]"
    if q_fp4.dim() != dims or q_fp4.dtype not in (torch.int8, torch.uint8):
        raise ValueError(f"mxlogits: q: expected int8 {shape}, found {q_fp4.dtype} {tuple(q_fp4.shape)}")
    *lead, h, half = q_fp4.shape
    if q_sf is None or q_sf.dtype != torch.int32 or tuple(q_sf.shape) != (*lead, h):
        found = None if q_sf is None else f"{q_sf.dtype} {tuple(q_sf.shape)}"
        raise ValueError(f"mxlogits: q_sf: expected int32 {[*lead, h]} (4 x E8M0 per int32), found {found}")
    rows = math.prod(lead)
    scales = q_sf.view(torch.uint8).view(rows, h, 4)[..., : half // 16]
    return q_fp4.view(torch.uint8).view(rows, h, half), scales


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
    """[B*next_n, max_context_len] logits of logits_dtype, fp32 or bf16 (module docstring: the
    mapping). schedule_meta: what get_paged_mqa_logits_metadata built from these context_lens (or a
    copy of it). variant: the instance (default: mxlogits.variant_for(device, next_n))."""
    if indices is not None:
        raise NotImplementedError("mxlogits: indices (DeepGEMM's varlen decode) is not supported")
    check_logits_dtype(logits_dtype)
    if not isinstance(schedule_meta, torch.Tensor):
        raise TypeError(
            "mxlogits: schedule_meta: expected the int32 [num_sms + 1, 2] tensor of get_paged_mqa_logits_metadata "
            f"(mxlogits.integrations.deepgemm), found {type(schedule_meta).__name__}"
        )
    q_fp4, q_sf = fp4_query(q)
    check_natural(arch_of(q_fp4.device), "kv_cache")
    q_rows, q_scale = fp4_q_views(q_fp4, q_sf)
    b, n = q_fp4.shape[:2]
    if not isinstance(context_lens, torch.Tensor) or context_lens.dim() not in (1, 2) or context_lens.shape[0] != b:
        found = tuple(context_lens.shape) if isinstance(context_lens, torch.Tensor) else type(context_lens).__name__
        raise ValueError(f"mxlogits: context_lens: expected [{b}] or [{b}, {n}] (q is [B, next_n, ...]), found {found}")
    # A sequence past the table's rows would read nothing (the op's contract), silently: here it is a caller's slip
    if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 or block_table.shape[0] < b:
        found = tuple(block_table.shape) if isinstance(block_table, torch.Tensor) else type(block_table).__name__
        raise ValueError(f"mxlogits: block_table: expected int32 [{b}, pages] (a row per sequence of q), found {found}")
    count_arg(max_context_len, "max_context_len", 0)  # the logits' width
    values, scales = fused_kv_views(kv_cache, q_fp4.shape[3] * 2)
    out = torch.empty((b * n, max_context_len), dtype=logits_dtype, device=q_fp4.device)
    if clean_logits:
        out.fill_(float("-inf"))
    return pa_mqa_logits_compact(
        q_rows, q_scale, values, scales, block_table, weights, context_lens, schedule_meta, max_context_len,
        next_n=n, variant=variant, out=out,
    )  # fmt: skip


def fp8_fp4_mqa_logits(
    q: tuple[torch.Tensor, torch.Tensor],
    kv: tuple[torch.Tensor, torch.Tensor],
    weights: torch.Tensor,
    cu_seq_len_k_start: torch.Tensor,
    cu_seq_len_k_end: torch.Tensor,
    clean_logits: bool = True,
    max_seqlen_k: int = 0,
    logits_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """DeepGEMM's non-paged MQA logits (prefill): row i of q int8 [M, H, D/2] (scales int32 [M, H])
    over the keys kv int8 [N, D/2] (scales int32 [N], four E8M0 bytes each) at positions
    [cu_seq_len_k_start[i], cu_seq_len_k_end[i]) (int32 [M], ends <= N); returns [M, N] logits of
    logits_dtype (fp32 or bf16), -inf outside the windows with clean_logits, else uninitialised
    there. max_seqlen_k > 0: DeepGEMM's compressed [M, max_seqlen_k] logits instead, row i's key
    ks[i] + j in column j (out_from_start; a window longer than max_seqlen_k is cut there). The keys are
    read as pages of the table's size through a one-row block table (copied into whole pages when N
    is not a multiple of the page size)."""
    check_logits_dtype(logits_dtype)
    if not isinstance(max_seqlen_k, int) or isinstance(max_seqlen_k, bool) or max_seqlen_k < 0:
        raise ValueError(f"mxlogits: max_seqlen_k: expected an int >= 0, found {max_seqlen_k!r}")
    q_fp4, q_sf = fp4_query(q)
    check_natural(arch_of(q_fp4.device), "kv")
    q_rows, q_scale = fp4_q_views(q_fp4, q_sf, dims=3)
    values, scales = key_pages(kv, q_fp4.shape[-1])
    m, n_keys, device = q_rows.shape[0], kv[0].shape[0], q_fp4.device
    variant = variant_for_rows(arch_of(device), m)
    block_table = torch.arange(values.shape[0], dtype=torch.int32, device=device).view(1, -1)
    windows = {"local_starts": cu_seq_len_k_start, "local_ends": cu_seq_len_k_end}
    for name, t in zip(("cu_seq_len_k_start", "cu_seq_len_k_end"), windows.values(), strict=True):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 1 or t.shape[0] != m:
            found = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"mxlogits: {name}: expected int32 [{m}] (one per row of q), found {found}")
    buffers = plan_buffers(device, m, 1, variant)
    cu_seq_q = torch.tensor([0, m], dtype=torch.int32, device=device)
    row_to_batch = torch.zeros(m, dtype=torch.int32, device=device)
    schedule = plan(cu_seq_q, cu_seq_len_k_end, buffers=buffers, local_starts=cu_seq_len_k_start,
                    row_to_batch=row_to_batch)  # fmt: skip
    out = torch.empty((m, max_seqlen_k or n_keys), dtype=logits_dtype, device=device)
    if clean_logits:
        out.fill_(float("-inf"))
    return pa_mqa_logits_mxfp4(q_rows, q_scale, values, scales, block_table, weights, schedule, n_keys, out=out,
                               out_from_start=max_seqlen_k > 0)  # fmt: skip


def key_pages(kv, half: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [pages, PAGE, D/2], scales [pages, PAGE, D/32]) uint8 of DeepGEMM's non-paged keys
    (kv int8 [N, D/2], kv_sf int32 [N]): views when N is a multiple of the page size, else copies
    padded to whole pages (the body reads a page at once)."""
    if not isinstance(kv, tuple | list) or len(kv) != 2 or not all(isinstance(t, torch.Tensor) for t in kv):
        raise ValueError(f"mxlogits: kv: expected (kv_fp4, kv_sf) tensors, found {type(kv).__name__}")
    values, sf = kv
    if values.dim() != 2 or values.dtype not in (torch.int8, torch.uint8) or values.shape[1] != half:
        raise ValueError(f"mxlogits: kv: expected int8 [N, {half}], found {values.dtype} {tuple(values.shape)}")
    n = values.shape[0]
    if sf.dtype != torch.int32 or tuple(sf.shape) != (n,):
        raise ValueError(f"mxlogits: kv_sf: expected int32 [{n}] (4 x E8M0 per int32), found {sf.dtype} {tuple(sf.shape)}")
    page = table_shape()[2]
    pages = -(-n // page)
    values, sf = values.contiguous().view(torch.uint8), sf.contiguous().view(torch.uint8).view(n, 4)
    if n % page:
        values = torch.cat([values, values.new_zeros(pages * page - n, half)])
        sf = torch.cat([sf, sf.new_full((pages * page - n, 4), 127)])
    return values.view(pages, page, half), sf.view(pages, page, 4)[..., : half // 16]


def fp8_paged_mqa_logits(q, *args, **kwargs) -> torch.Tensor:
    """DeepGEMM's legacy name: fp8_fp4_paged_mqa_logits for FP4 queries (q = (q_fp4, q_sf)); FP8
    queries (a plain tensor) raise."""
    return fp8_fp4_paged_mqa_logits(q, *args, **kwargs)


def fp8_mqa_logits(q, *args, **kwargs) -> torch.Tensor:
    """DeepGEMM's legacy name: fp8_fp4_mqa_logits for FP4 queries and keys; FP8 ones raise."""
    return fp8_fp4_mqa_logits(q, *args, **kwargs)


def indexer_k_quant_and_cache(
    k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, quant_block_size: int = 32,
    scale_fmt: str | None = "ue8m0",
) -> None:
    """vLLM's key path for the FP4 cache: k [N, D] (bf16, fp16 or fp32) quantized to MXFP4 and row i
    written to slot_mapping[i] (int64; negative: padding, skipped) of DeepGEMM's fused FP4 page buffer
    kv_cache [blocks, 64, 1, D/2 + 4], in place, in one launch (mx.quantize_into_cache)."""
    if quant_block_size != 32:
        raise ValueError(f"mxlogits: quant_block_size: expected 32 (MXFP4's block), found {quant_block_size}")
    if scale_fmt not in ("ue8m0", None):
        raise ValueError(f"mxlogits: scale_fmt: expected 'ue8m0' (E8M0 scales), found {scale_fmt!r}")
    check_natural(arch_of(k.device), "kv_cache")
    values, scales = fused_kv_views(kv_cache, k.shape[-1])
    quantize_into_cache(k, slot_mapping, values, scales)


def quantize_query(q: torch.Tensor, hadamard: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The query path: q [..., H, D] (bf16, fp16 or fp32), optionally Hadamard-rotated first, as
    DeepGEMM's FP4 query: (int8 [..., H, D/2], int32 [..., H] of the four E8M0 bytes, block i in byte
    i), in one launch besides the rotation (mx.quantize_rows)."""
    if hadamard:
        q = hadamard_transform(q)
    codes, scales = quantize_rows(q)
    if scales.shape[-1] > 4:
        raise ValueError(f"mxlogits: q: expected D <= 128 (four scale bytes an int32), found D = {q.shape[-1]}")
    if scales.shape[-1] < 4:  # the unused bytes as DeepGEMM pads them: scale 1
        scales = torch.cat([scales, scales.new_full((*scales.shape[:-1], 4 - scales.shape[-1]), 127)], dim=-1)
    return codes.view(torch.int8), scales.contiguous().view(torch.int32).squeeze(-1)
