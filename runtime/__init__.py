"""mxlogits: paged MQA logits over an MXFP4 key cache (the lightning-indexer scoring step).

    out[r, t] = sum_h weight_scale * weights[r, h] * maximum(q[r, h] . K[t], 0)

for every row r and KV position t in its window [local_starts[r], local_ends[r]).

Usage, once per pool / forward / layer:

    buffers = mxlogits.plan_buffers(device, total_q, batch)            # variant=None: the arch default
    plan = mxlogits.plan(cu_seq_q, local_ends, buffers=buffers)         # builds the schedule on the device
    out = mxlogits.pa_mqa_logits_mxfp4(q, q_scale, kv_cache, kv_scale, block_tables, weights, plan, max_seq_len)

Caller contract (the op cannot check these):
1. Windows end at or before out.shape[1] and max_seq_len.
2. A row that belongs to no live sequence has an empty window (local_ends <= local_starts);
   only such a row may have a negative row_to_batch. Such rows read and write nothing.
3. At q_per_block > 1, cu_seq_q[batch] <= total_q.
Windows may lie in any order, within a tile too.
Everything else is checked before any launch and raises naming the argument. Cells outside
each row's window are never written.

The variant table comes from generated/manifest.json (instances.yaml); the arch of a device is
probed once per device; each arch's module is built on first use and cached
(MXLOGITS_CACHE_DIR; MXLOGITS_JIT=0 forbids building).
"""

from .arch import arch_of, emulate, emulated_arch
from .build import built_library, cache_dir, jit_enabled
from .compact import compact_schedule, pa_mqa_logits_compact
from .integrations import deepgemm as deepgemm_compat
from .integrations import indexer
from .integrations.indexer import Indexer, IndexerBatch, decode_batch, prefill_batch, variant_for
from .layouts import check_layout, fused_views, from_layout, layout_of, to_layout
from .manifest import MqaLogitsVariant, default_variant, tolerance, variants
from .mxfp4 import dequantize_mxfp4, quantize_mxfp4
from .op import pa_mqa_logits_mxfp4
from .paged_cache import fused_kv_cache, split_fused_pages, write_paged_kv
from .plan import MqaLogitsBuffers, MqaLogitsPlan, block_table_width, plan, plan_buffers
from .quantize import quantize_into_cache, quantize_rows
from .reference import reference_logits

__all__ = [
    "Indexer",
    "IndexerBatch",
    "MqaLogitsBuffers",
    "MqaLogitsPlan",
    "MqaLogitsVariant",
    "arch_of",
    "block_table_width",
    "built_library",
    "cache_dir",
    "check_layout",
    "compact_schedule",
    "decode_batch",
    "deepgemm_compat",
    "default_variant",
    "dequantize_mxfp4",
    "emulate",
    "emulated_arch",
    "from_layout",
    "fused_kv_cache",
    "fused_views",
    "indexer",
    "jit_enabled",
    "layout_of",
    "pa_mqa_logits_compact",
    "pa_mqa_logits_mxfp4",
    "plan",
    "plan_buffers",
    "prefill_batch",
    "quantize_into_cache",
    "quantize_mxfp4",
    "quantize_rows",
    "reference_logits",
    "split_fused_pages",
    "to_layout",
    "tolerance",
    "variant_for",
    "variants",
    "write_paged_kv",
]
