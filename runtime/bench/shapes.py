"""The shapes of the benchmark tables, and what one call on a shape costs as docs/performance.md
counts it (cells, flops, bytes: the roofline's inputs)."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from functools import partial

LONG, SHORT = 25_000, 100  # tokens of a "long" and a "short" decode context
PREFILL_ROWS, MIN_PREFILL_ROWS = 16_384, 800
CHUNK_PREFIX, CHUNK_NEW = 25_000, 2_048
QUICK_SCALE = 16  # --quick divides token counts and prefill row counts by this


@dataclass(frozen=True)
class Shape:
    """One bench row: sequences with a KV context and query rows with windows."""

    table: str
    label: str
    contexts: tuple[int, ...]  # KV tokens of each sequence
    rows: tuple[tuple[int, int, int], ...]  # (sequence, start, end), grouped by sequence, in order

    @property
    def total_q(self) -> int:
        return len(self.rows)

    @property
    def batch(self) -> int:
        return len(self.contexts)

    @property
    def max_seq_len(self) -> int:
        return max(self.contexts)

    def rows_per_sequence(self) -> list[int]:
        counts = [0] * self.batch
        for b, _, _ in self.rows:
            counts[b] += 1
        return counts


@dataclass(frozen=True)
class Work:
    cells: int  # logits produced: sum of window lengths
    flops: int  # 2 * H * D per cell
    bytes: int  # KV once per tile, q + scales, weights, logits written


def count_work(shape: Shape, q_per_block: int, heads: int, head_dim: int) -> Work:
    """docs/performance.md's count. A tile (q_per_block consecutive rows of one sequence) reads the union of
    its rows' windows once; row_bytes (68 at D = 128) is one D row of E2M1 values plus E8M0 scales."""
    row_bytes = head_dim // 2 + head_dim // 32
    cells = sum(max(0, e - s) for _, s, e in shape.rows)
    kv_tokens = 0
    for _, seq_rows in itertools.groupby(shape.rows, key=lambda r: r[0]):
        seq_rows = list(seq_rows)
        for i in range(0, len(seq_rows), q_per_block):
            live = [(s, e) for _, s, e in seq_rows[i : i + q_per_block] if e > s]
            if live:
                kv_tokens += max(e for _, e in live) - min(s for s, _ in live)
    t = shape.total_q
    nbytes = row_bytes * kv_tokens + row_bytes * heads * t + 4 * heads * t + 4 * cells
    return Work(cells=cells, flops=2 * heads * head_dim * cells, bytes=nbytes)


def _decode(table: str, label: str, contexts: list[int], mtp: int) -> Shape:
    """mtp rows per sequence sharing its KV; row j sees the causal window [0, ctx - mtp + 1 + j)."""
    rows = tuple((b, 0, ctx - mtp + 1 + j) for b, ctx in enumerate(contexts) for j in range(mtp))
    return Shape(table, label, tuple(contexts), rows)


def _long_short(table: str, seqs: int, n_long: int, mtp: int, scale: int, note: str = "") -> Shape:
    long = set(random.Random(f"{seqs},{n_long}").sample(range(seqs), n_long))  # spread, reproducibly
    contexts = [(LONG if b in long else SHORT) // scale for b in range(seqs)]
    return _decode(table, f"seqs={seqs} long={n_long}{note}", contexts, mtp)


def decode_mtp1(scale: int, cta_resident: int) -> list[Shape]:
    """(seqs, n_long) pairs, the grid cliff at cta_resident (a full grid, then one CTA short of two),
    and uniform contexts."""
    pairs = [(1, 1), (8, 8), (32, 32), (128, 128), (32, 4), (128, 16)]
    shapes = [_long_short("decode_mtp1", s, n, 1, scale) for s, n in pairs]
    for seqs in (cta_resident, 2 * cta_resident - 1):
        if (seqs, 16) not in pairs:
            shapes.append(_long_short("decode_mtp1", seqs, min(16, seqs), 1, scale, " (grid cliff)"))
    for b, ctx in itertools.product((1, 32, 128), (8192, 32768, 65536)):
        shapes.append(_decode("decode_mtp1", f"B={b} ctx={ctx // scale}", [ctx // scale] * b, 1))
    return shapes


def decode_mtp(mtp: int, scale: int, cta_resident: int) -> list[Shape]:
    return [_long_short(f"decode_mtp{mtp}", s, n, mtp, scale) for s, n in ((32, 32), (128, 128), (32, 4))]


def _prefill(table: str, label: str, prefixes: list[int], new: list[int]) -> Shape:
    """Row j of sequence b sees [0, prefixes[b] + j + 1): causal after its prefix."""
    rows = tuple((b, 0, p + j + 1) for b, (p, n) in enumerate(zip(prefixes, new)) for j in range(n))
    return Shape(table, label, tuple(p + n for p, n in zip(prefixes, new)), rows)


def prefill_causal(scale: int, cta_resident: int) -> list[Shape]:
    """PREFILL_ROWS rows over bs sequences of ragged lengths (each >= MIN_PREFILL_ROWS), causal from 0."""
    total, least = PREFILL_ROWS // scale, MIN_PREFILL_ROWS // scale
    shapes = []
    for bs in (1, 2, 4, 8):
        cuts = sorted(random.Random(bs).sample(range(total - bs * least + 1), bs - 1))
        spare = [hi - lo for lo, hi in zip([0, *cuts], [*cuts, total - bs * least])]
        shapes.append(_prefill("prefill_causal", f"bs={bs} rows={total}", [0] * bs, [least + s for s in spare]))
    return shapes


def prefill_fresh(scale: int, cta_resident: int) -> list[Shape]:
    return [
        _prefill("prefill_fresh", f"bs={bs} len={n // scale}", [0] * bs, [n // scale] * bs)
        for bs, n in ((1, 16384), (2, 8192), (4, 4096))
    ]


def prefill_chunked(scale: int, cta_resident: int) -> list[Shape]:
    prefix, new = CHUNK_PREFIX // scale, CHUNK_NEW // scale
    return [
        _prefill("prefill_chunked", f"bs={bs} prefix={prefix} new={new}", [prefix] * bs, [new] * bs) for bs in (1, 2, 4)
    ]


DEEPGEMM_POOL = 32 << 20  # DeepGEMM's test skips batch x average context above this many tokens


def deepgemm_test(next_n: int, scale: int, cta_resident: int) -> list[Shape]:
    """The shapes of DeepGEMM's paged MQA-logits test (its tests/test_attention.py): batch 256 and 4,096,
    average context 8,192 and 65,536 where batch x average <= 32 Mi tokens, each context drawn uniformly
    from [0.7, 1.3) x the average; decode with next_n rows a sequence."""
    shapes = []
    for batch, avg in itertools.product((256, 4096), (8192, 65536)):
        if batch * avg > DEEPGEMM_POOL:
            continue
        draw = random.Random(f"{batch},{avg}")
        contexts = [max(next_n, draw.randrange(int(0.7 * avg), int(1.3 * avg)) // scale) for _ in range(batch // scale)]
        shapes.append(_decode(f"deepgemm_next{next_n}", f"B={batch // scale} avg={avg // scale}", contexts, next_n))
    return shapes


# table -> shapes(scale, cta_resident), in docs/performance.md's order.
TABLES = {
    "decode_mtp1": decode_mtp1,
    "decode_mtp2": partial(decode_mtp, 2),
    "decode_mtp4": partial(decode_mtp, 4),
    "prefill_causal": prefill_causal,
    "prefill_fresh": prefill_fresh,
    "prefill_chunked": prefill_chunked,
    "deepgemm_next1": partial(deepgemm_test, 1),
    "deepgemm_next2": partial(deepgemm_test, 2),
    "deepgemm_next6": partial(deepgemm_test, 6),
}
# what bench runs without --tables: the performance tables (the deepgemm_* ones are named to run)
DEFAULT_TABLES = tuple(t for t in TABLES if not t.startswith("deepgemm"))


def table_rows_per_sequence(table: str) -> int:
    """A sequence's query rows in the table's full-size shapes (the most of its first shape): what its variant
    is chosen by, as a model chooses by next_n or the chunk length (the grid, 132, places only the cliff rows)."""
    return max(TABLES[table](1, 132)[0].rows_per_sequence())
