"""The op cases the suite and tools/memcheck_cases.py both run: the corner cases (ragged batches,
offset starts, tile edges, tiny and random windows) and the scale blocks far apart that need the
exact path."""

from __future__ import annotations

import random

from mxlogits.synthetic import Scene

from .cases import make_case


def causal_rows(seq: int, prefix: int, new: int, start: int = 0) -> list[tuple[int, int, int]]:
    return [(seq, start, prefix + j + 1) for j in range(new)]


def corner_cases() -> dict[str, tuple[list[int], list[tuple[int, int, int]]]]:
    rng = random.Random(7)
    cases = {
        "ragged_2b": ([700, 333], causal_rows(0, 690, 10) + causal_rows(1, 330, 3)),
        "ragged_3b": ([129, 64, 1000], causal_rows(0, 120, 9) + causal_rows(1, 60, 4) + causal_rows(2, 993, 7)),
        "offset_starts": (
            [900, 500],
            [(0, 100 + 3 * j, 800 + j) for j in range(6)] + [(1, 37, 400 + j) for j in range(5)],
        ),
        "long_2b": ([3000, 2500], causal_rows(0, 2990, 5) + causal_rows(1, 2497, 3)),
        "mixed_long": ([2600, 90, 1900, 1], [(0, 0, 2600), (1, 0, 90), (2, 0, 1900), (3, 0, 1)]),
        "offset_long": ([3100, 2800], [(0, 1234, 3100), (0, 1234, 3100), (1, 65, 2799), (1, 66, 2800)]),
        "tiny_windows": (
            [300, 200],
            [(0, s, s + n) for s, n in ((0, 1), (63, 1), (64, 2), (200, 3))]
            + [(1, s, s + 1) for s in (0, 1, 127, 128, 199)],
        ),
        "tile_edges": ([1100], [(0, 0, e) for e in (63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 1024)]),
        "start_sweep_mod_128": ([600], [(0, s, s + 100 + (s % 7)) for s in range(128)]),
    }
    cases["start_sweep_mod_128"] = ([600], sorted(cases["start_sweep_mod_128"][1], key=lambda r: (r[1], r[2])))
    random_rows = sorted((0, s, s + rng.randint(1, 300)) for s in sorted(rng.sample(range(1500), 40)))
    cases["random_windows"] = ([1800], random_rows)
    return cases


def far_apart_case(variant, side: str) -> Scene:
    """Tokens (side kv, on every other page) or query heads (side q) whose block 0 is scaled 2^20
    above the other three, against zeros in block 0 of the other operand: every logit comes from
    the small blocks alone, so a path that cannot hold that spread (sm90's fp8 operands, exact to
    2^13) must give way to an exact one for just those pages or tiles."""
    rows = [(0, 0, 600), (0, 37, 500), (0, 64, 600), (0, 100, 580), (0, 5, 600), (0, 300, 600)]
    case = make_case([600], rows, variant, seed=23)
    pages = case.block_tables[0, :10].long()
    with case.natural() as n:
        if side == "kv":
            odd = pages[1::2]
            n.kv_scale[odd, :, 0] = (n.kv_scale[odd, :, 1:].amax(dim=-1) + 20).clamp(max=254)
            n.q[:, :, :16] = 0
        else:
            n.q_scale[:, :, 0] = (n.q_scale[:, :, 1:].amax(dim=-1) + 20).clamp(max=254)
            n.kv_cache[pages, :, :16] = 0
    return case
