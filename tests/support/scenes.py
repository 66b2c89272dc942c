"""Random ragged scenes (decode at MTP 1, 2 and 4 with pad sequences, causal prefill chunks, sliding
windows) and moving a scene to the cpu arch, for the tests that hold a device arch to it."""

from __future__ import annotations

import dataclasses

import mxlogits as mx
import torch
from mxlogits.layouts import from_layout
from mxlogits.synthetic import LAID_OUT, Scene


def pad_columns(block_tables: torch.Tensor, width: int) -> torch.Tensor:
    """block_tables with at least `width` columns (extra columns page 0, read by no window)."""
    extra = width - block_tables.shape[1]
    return torch.nn.functional.pad(block_tables, (0, extra)) if extra > 0 else block_tables


def on_cpu(case: Scene, variant) -> Scene:
    """The same scene on the host in the natural layout (the cpu arch's), block_tables wide enough for
    `variant`."""
    moved = {f.name: getattr(case, f.name).cpu() for f in dataclasses.fields(case) if f.name != "max_seq_len"}
    moved.update({kind: from_layout(moved[kind], kind) for kind in LAID_OUT})
    moved["block_tables"] = pad_columns(moved["block_tables"], mx.block_table_width(case.max_seq_len, variant))
    return dataclasses.replace(case, **moved)


# ---- random ragged scenes ---------------------------------------------------------------------


def decode_rows(rng, mtp: int, live: int, pads: int):
    contexts = [rng.randint(mtp, 4000) for _ in range(live)]
    rows = [(b, 0, c - mtp + 1 + j) for b, c in enumerate(contexts) for j in range(mtp)]
    return contexts + [0] * pads, rows + [(-1, 0, 0)] * (pads * mtp)


def prefill_rows(rng, seqs: int):
    contexts, rows = [], []
    for b in range(seqs):
        prefix, new = rng.randint(0, 3000), rng.randint(1, 24)
        contexts.append(prefix + new)
        rows += [(b, 0, prefix + j + 1) for j in range(new)]
    return contexts, rows


def offset_rows(rng, seqs: int):
    """Sliding windows: starts and ends non-decreasing within each sequence."""
    contexts, rows = [], []
    for b in range(seqs):
        n = rng.randint(1, 12)
        ends = sorted(rng.randint(1, 3500) for _ in range(n))
        starts = sorted(rng.randint(0, e - 1) for e in ends)  # the k-th smallest is still < ends[k]
        contexts.append(ends[-1] + rng.randint(0, 100))
        rows += [(b, s, e) for s, e in zip(starts, ends)]
    return contexts, rows


SCENES = {
    "decode_mtp1": lambda rng: decode_rows(rng, 1, rng.randint(1, 12), rng.randint(0, 4)),
    "decode_mtp2": lambda rng: decode_rows(rng, 2, rng.randint(1, 8), rng.randint(1, 4)),
    "decode_mtp4": lambda rng: decode_rows(rng, 4, rng.randint(1, 6), rng.randint(1, 3)),
    "causal_prefill": lambda rng: prefill_rows(rng, rng.randint(1, 4)),
    "offset_windows": lambda rng: offset_rows(rng, rng.randint(1, 5)),
}


def poison_one_key(case: Scene, rng) -> None:
    """E8M0 0xFF on one key that some window reads: its column is NaN in every window holding it."""
    starts, ends, seqs = case.local_starts.tolist(), case.local_ends.tolist(), case.row_to_batch.tolist()
    r = rng.choice([r for r in range(case.total_q) if ends[r] > max(starts[r], 0)])
    token = rng.randrange(max(starts[r], 0), ends[r])
    with case.natural() as n:
        n.kv_scale[int(case.block_tables[seqs[r], token // 64]), token % 64, rng.randrange(4)] = 255
