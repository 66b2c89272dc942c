"""Writing MXFP4 keys into a paged cache: separate value/scale tensors, or the fused page
buffer of vLLM and DeepGEMM (per page: PAGE rows of D/2 value bytes, then PAGE rows of D/32
scale bytes), used in place through strided views."""

from __future__ import annotations

import torch

from .layouts import NATURAL, fused_views, layout_of, page_rows, scatter_tokens
from .manifest import manifest


def split_fused_pages(buffer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 [pages, PAGE * (D/2 + D/32)] -> (kv_cache [pages, PAGE, D/2], kv_scale [pages, PAGE, D/32]),
    both views of `buffer` whose page stride is the fused page."""
    return fused_views(buffer, NATURAL)


def fused_kv_cache(
    num_pages: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A zeroed fused page buffer and its (kv_cache, kv_scale) views."""
    m = manifest()
    buffer = torch.zeros(
        (num_pages, m.page_size * (m.head_dim // 2 + m.head_dim // 32)), dtype=torch.uint8, device=device
    )
    return (buffer, *split_fused_pages(buffer))


def write_paged_kv(
    packed: torch.Tensor,
    scales: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    kv_scale: torch.Tensor,
) -> None:
    """Token i (packed [N, D/2], scales [N, D/32]) goes to page slot_mapping[i] // PAGE, row
    slot_mapping[i] % PAGE; negative slots (padding) are skipped. Writes through views, so a
    fused buffer's views are filled in place; kv_cache/kv_scale in either layout (docs/semantics.md,
    layouts.fused_views). Checks slot bounds (one host sync on a GPU)."""
    m = manifest()
    n = packed.shape[0] if packed.dim() == 2 else -1
    for name, t, width in (("packed", packed, m.head_dim // 2), ("scales", scales, m.head_dim // 32)):
        if t.dtype != torch.uint8 or t.dim() != 2 or t.shape != (n, width):
            raise ValueError(
                f"mxlogits: {name}: expected uint8 [{n if n >= 0 else 'N'}, {width}], found {t.dtype} {tuple(t.shape)}"
            )
    if slot_mapping.dim() != 1 or slot_mapping.numel() != n or slot_mapping.is_floating_point():
        raise ValueError(
            f"mxlogits: slot_mapping: expected an integer [{n}] tensor, found {slot_mapping.dtype} {tuple(slot_mapping.shape)}"
        )
    if kv_cache.shape[:1] != kv_scale.shape[:1] or not _same_layout(kv_cache, kv_scale):
        raise ValueError(
            f"mxlogits: kv_cache/kv_scale: expected [pages, {m.page_size}, ...] (or the mfma_permuted layout of "
            f"both) with equal pages, found {tuple(kv_cache.shape)} and {tuple(kv_scale.shape)}"
        )
    capacity = kv_cache.shape[0] * m.page_size
    live = slot_mapping >= 0
    slots = slot_mapping[live].long()
    if slots.numel() and int(slots.max()) >= capacity:
        raise ValueError(
            f"mxlogits: slot_mapping: expected slots < {capacity} (pages x PAGE), found {int(slots.max())}"
        )
    pages, rows = page_rows(slots)
    scatter_tokens(packed[live], scales[live], pages, rows, kv_cache, kv_scale)


def _same_layout(kv_cache: torch.Tensor, kv_scale: torch.Tensor) -> bool:
    try:
        return layout_of(kv_cache, "kv_cache") == layout_of(kv_scale, "kv_scale")
    except ValueError:
        return False
