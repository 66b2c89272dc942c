"""A DeepSeek-V3.2-style lightning-indexer step on mxlogits, as model code would write it.

Per layer (`Indexer.forward`): index queries [T, H, D] and one key head [T, D] from the hidden
states (optionally Hadamard-rotated, as the model does before quantizing), both quantized to
MXFP4; this step's keys written into the paged cache through the slot mapping; per-head weights
from a projection; logits over each row's causal window from `pa_mqa_logits_mxfp4`; the top-k
positions per row, -1 in unused slots.

Per forward (`decode_batch` / `prefill_batch`): the slot mapping, the windows and the op's
schedule, shared by every layer. The decode builder and the layer step make no host sync and
have no data-dependent shapes, so a decode step traces with torch.compile(fullgraph=True) and
captures in one CUDA graph. RoPE and the key norm of the real model live in the caller's
projections (they do not touch the op); `IndexerBatch.positions` gives the positions they need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..arch import arch_of
from ..layouts import NATURAL, arch_layout, fused_views, gather_tokens, page_rows, scatter_tokens, to_layout
from ..manifest import MqaLogitsVariant, manifest, variant_for_rows
from ..quantize import quantize_into_cache, quantize_rows
from ..op import pa_mqa_logits_mxfp4
from ..paged_cache import fused_kv_cache
from ..plan import MqaLogitsBuffers, MqaLogitsPlan, plan


@torch.compiler.assume_constant_result  # a constant to torch.compile, which cannot trace the file read
def table_shape() -> tuple[int, int, int]:
    """(H, D, PAGE) of the instance table."""
    m = manifest()
    return m.heads, m.head_dim, m.page_size


_SYLVESTER: dict[tuple[int, torch.device, torch.dtype], torch.Tensor] = {}


def hadamard_transform(x: torch.Tensor) -> torch.Tensor:
    """x @ H_d / sqrt(d) along the last dim (H_d the Sylvester Hadamard matrix, d a power of two): one
    matrix product (a butterfly is log2(d) passes of small launches, most of a decode step's
    projection time). The normalized matrix is built once per (d, device, dtype) and kept."""
    d = x.shape[-1]
    if d & (d - 1):
        raise ValueError(f"mxlogits: hadamard_transform: expected a power-of-two last dim, found {d}")
    key = (d, x.device, x.dtype)
    if key not in _SYLVESTER:
        h = torch.ones(1, 1, dtype=torch.float64)
        while h.shape[0] < d:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)])
        _SYLVESTER[key] = (h * d**-0.5).to(x.device, x.dtype)
    return x @ _SYLVESTER[key]


def write_kv_in_graph(
    packed: torch.Tensor,
    scales: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    kv_scale: torch.Tensor,
) -> None:
    """mx.write_paged_kv without its host sync and its data-dependent shapes, in either layout: rows
    with a negative slot (pad rows) are not skipped but rewrite the bytes the first live row writes,
    to the same slot (or, when no row is live, slot 0's own bytes), so they change nothing. Slots must
    lie in the cache (an out-of-range slot is an index error, on a GPU a device-side assert)."""
    live = slot_mapping >= 0
    first = torch.argmax(live.to(torch.int32), dim=0, keepdim=True)  # first live row, else 0
    src = torch.where(live, torch.arange(live.numel(), device=live.device), first)
    slots = slot_mapping[src].long().clamp(min=0)
    keep = ~live[first]  # [1]: no live row, so every row rewrites slot 0 as it is
    pages, rows = page_rows(slots)
    old_packed, old_scales = gather_tokens(pages, rows, kv_cache, kv_scale)
    new_packed, new_scales = torch.where(keep, old_packed, packed[src]), torch.where(keep, old_scales, scales[src])
    scatter_tokens(new_packed, new_scales, pages, rows, kv_cache, kv_scale)


def variant_for(device: torch.device | str, rows_per_sequence: int) -> MqaLogitsVariant:
    """The instance for a forward whose sequences have about `rows_per_sequence` query rows (next_n at
    decode, the chunk length at prefill): manifest.variant_for_rows on the device's arch."""
    return variant_for_rows(arch_of(device), rows_per_sequence)


@dataclass(frozen=True, eq=False)
class IndexerBatch:
    """One forward's metadata, shared by every indexer layer."""

    positions: torch.Tensor  # int64 [T]: position of each row's token in its sequence; < 0 for a pad row
    slot_mapping: torch.Tensor  # int64 [T]: page * PAGE + offset of each row's key; -1 for a pad row
    block_tables: torch.Tensor  # int32 [batch, >= block_table_width(max_seq_len, variant)]
    plan: MqaLogitsPlan  # windows [0, positions + 1): each row sees its own token and the ones before
    max_seq_len: int  # width of the logits; every context must be <= it (caller contract 1)

    @property
    def local_ends(self) -> torch.Tensor:
        return self.plan.local_ends


def _batch(positions, row_to_batch, cu_seq_q, block_tables, buffers, max_seq_len) -> IndexerBatch:
    page = table_shape()[2]
    live = positions >= 0
    pos = positions.clamp(min=0)
    pages = block_tables[row_to_batch.clamp(min=0), pos // page].long()
    slot_mapping = torch.where(live, pages * page + pos % page, -1)
    local_ends = (positions + 1).clamp(min=0).to(torch.int32)  # a pad row's window is empty
    schedule = plan(
        cu_seq_q,
        local_ends,
        buffers=buffers,
        total_q=positions.numel(),
        row_to_batch=row_to_batch.to(torch.int32),
    )
    return IndexerBatch(positions, slot_mapping, block_tables, schedule, max_seq_len)


def decode_batch(
    context_lens: torch.Tensor, block_tables: torch.Tensor, next_n: int, buffers: MqaLogitsBuffers, max_seq_len: int
) -> IndexerBatch:
    """Decode (MTP next_n): rows b * next_n + j, the token at position context_lens[b] - next_n + j
    of sequence b; context_lens [B] counts this step's tokens; a pad sequence has 0 (its rows write
    nothing and select nothing). Device-side only: no host sync, fixed shapes (CUDA-graph safe).
    `buffers` from plan_buffers(device, B * next_n, B, variant_for(device, next_n))."""
    batch = context_lens.shape[0]
    device = context_lens.device
    rows = torch.arange(batch * next_n, device=device)
    seqs = rows // next_n
    positions = context_lens.long()[seqs] - next_n + rows % next_n
    cu_seq_q = (torch.arange(batch + 1, device=device) * next_n).to(torch.int32)
    return _batch(positions, seqs, cu_seq_q, block_tables, buffers, max_seq_len)


def prefill_batch(
    prefix_lens: list[int], new_lens: list[int], block_tables: torch.Tensor, buffers: MqaLogitsBuffers, max_seq_len: int
) -> IndexerBatch:
    """Chunked prefill: sequence b has prefix_lens[b] tokens cached and new_lens[b] new ones, its
    rows in sequence order. Built on the host (lists), like a serving stack's prefill metadata."""
    device = block_tables.device
    positions = [p + j for p, n in zip(prefix_lens, new_lens) for j in range(n)]
    seq = [b for b, n in enumerate(new_lens) for _ in range(n)]
    cu_seq_q = torch.tensor([0, *new_lens], device=device).cumsum(0).to(torch.int32)
    as_long = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
    return _batch(as_long(positions), as_long(seq), cu_seq_q, block_tables, buffers, max_seq_len)


def select_topk(logits: torch.Tensor, local_ends: torch.Tensor, k: int) -> torch.Tensor:
    """int32 [T, k]: each row's min(k, window) best positions in descending logit order, then -1.
    Cells outside a window are -inf, so a sorted top-k ranks every window cell before them."""
    n = min(k, logits.shape[1])
    idx = torch.topk(logits, n, dim=1).indices
    idx = torch.where(idx < local_ends[:, None], idx, -1).to(torch.int32)
    return F.pad(idx, (0, k - n), value=-1) if n < k else idx


class Indexer(torch.nn.Module):
    """One layer's lightning indexer over a fused MXFP4 page buffer (mx.fused_kv_cache's).

    wq [H*D, q_in]: index queries from `qr` (DeepSeek-V3.2: the q-LoRA latent) or from x;
    wk [D, hidden]: the key head; w_weights [H, hidden]: per-head weights, scaled by
    H^-1/2 * D^-1/2 as the model does. forward returns int32 [T, topk] positions per row.
    """

    def __init__(self, wq, wk, w_weights, kv_buffer: torch.Tensor, *, topk: int = 2048, hadamard: bool = True):
        super().__init__()
        self.heads, self.dim, self.page = table_shape()
        self.topk, self.hadamard = topk, hadamard
        page_bytes = self.page * (self.dim // 2 + self.dim // 32)
        hidden = wk.shape[-1]  # wk and w_weights both read x
        for name, w, shape in (
            ("wq", wq, (self.heads * self.dim, wq.shape[-1])),
            ("wk", wk, (self.dim, hidden)),
            ("w_weights", w_weights, (self.heads, hidden)),
        ):
            if tuple(w.shape) != shape:
                raise ValueError(f"mxlogits: Indexer: {name}: expected {list(shape)}, found {list(w.shape)}")
        if kv_buffer.dtype != torch.uint8 or kv_buffer.dim() != 2 or kv_buffer.shape[1] != page_bytes:
            raise ValueError(
                f"mxlogits: Indexer: kv_buffer: expected uint8 [pages, {page_bytes}] (mx.fused_kv_cache), "
                f"found {kv_buffer.dtype} {tuple(kv_buffer.shape)}"
            )
        self.register_buffer("wq", wq)
        self.register_buffer("wk", wk)
        self.register_buffer("w_weights", w_weights)
        self.register_buffer("kv_buffer", kv_buffer, persistent=False)  # the cache: state, not weights
        arch_layout(arch_of(kv_buffer.device))  # known before any torch.compile trace of kv_views
        self.weight_scale = (self.heads * self.dim) ** -0.5

    def kv_views(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(kv_cache, kv_scale): views of the fused buffer in the layout its device's arch reads."""
        return fused_views(self.kv_buffer, arch_layout(arch_of(self.kv_buffer.device)))

    def project(self, x: torch.Tensor, qr: torch.Tensor | None = None):
        """(q, q_scale, k, weights): MXFP4 queries [T, H, D/2] with their E8M0 scales, the keys [T, D]
        in fp32 (rotated when the model rotates; write_cache quantizes them), fp32 weights [T, H]."""
        q = F.linear(x if qr is None else qr, self.wq).float().view(-1, self.heads, self.dim)
        k = F.linear(x, self.wk).float()
        if self.hadamard:
            q, k = hadamard_transform(q), hadamard_transform(k)
        return (*quantize_rows(q), k, F.linear(x, self.w_weights).float())

    def write_cache(self, k: torch.Tensor, batch: IndexerBatch) -> None:
        """Quantize the keys k [T, D] and write row i at batch.slot_mapping[i] (pad rows skipped): one
        launch into a natural-layout cache; quantize, then gather and scatter into another layout."""
        if arch_layout(arch_of(self.kv_buffer.device)) == NATURAL:
            quantize_into_cache(k, batch.slot_mapping, *self.kv_views())
        else:
            write_kv_in_graph(*quantize_rows(k), batch.slot_mapping, *self.kv_views())

    def logits(self, q, q_scale, weights, batch: IndexerBatch) -> torch.Tensor:
        """fp32 [T, max_seq_len]: the op over each row's window, -inf elsewhere. q_scale in either layout
        (project's is natural): it reaches the op in the layout of the cache's arch."""
        kv_cache, kv_scale = self.kv_views()
        return pa_mqa_logits_mxfp4(
            q,
            to_layout(q_scale, "q_scale", arch_layout(arch_of(self.kv_buffer.device))),
            kv_cache,
            kv_scale,
            batch.block_tables,
            weights,
            batch.plan,
            batch.max_seq_len,
            weight_scale=self.weight_scale,
        )

    def forward(self, x: torch.Tensor, batch: IndexerBatch, qr: torch.Tensor | None = None, return_logits=False):
        q, q_scale, k, weights = self.project(x, qr)
        self.write_cache(k, batch)  # before the logits: a row sees its own token
        logits = self.logits(q, q_scale, weights, batch)
        idx = select_topk(logits, batch.local_ends, self.topk)
        return (idx, logits) if return_logits else idx


def random_indexer(
    hidden: int, num_pages: int, device, *, dtype=torch.float32, q_in: int | None = None, seed: int = 0, **kwargs
) -> Indexer:
    """An Indexer with random projections (inputs ~ N(0, 1) give q, k ~ N(0, 1)) and a zeroed cache of
    `num_pages` pages; wq reads `q_in` features (default `hidden`)."""
    g = torch.Generator().manual_seed(seed)
    heads, dim, _ = table_shape()
    w = lambda rows, cols: (torch.randn(rows, cols, generator=g) / math.sqrt(cols)).to(device, dtype)  # noqa: E731
    wq, wk, w_weights = w(heads * dim, q_in or hidden), w(dim, hidden), w(heads, hidden)
    return Indexer(wq, wk, w_weights, fused_kv_cache(num_pages, device)[0], **kwargs)
