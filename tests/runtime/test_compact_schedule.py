"""The compact schedule (docs/schedule.md) on every present arch and through each AMD arch's emulation
(which runs the GPU build and logits kernels): the build's int32 [num_ctas + 1, 2] bit-exact with a
model of the split written from the docs; the logits of pa_mqa_logits_compact within each variant's
bound of the fp32 reference for decode steps of next_n 1 to 6, 1-D and 2-D context lengths (rows of a
sequence in any order), pad sequences and grids of 1 to 300 CTAs; a schedule copied into a persistent
buffer; a forged schedule reads nothing outside the windows; errors name the argument."""

from __future__ import annotations

import random

import mxlogits as mx
import pytest
import torch
from mxlogits.compact import instance_of
from mxlogits.ops import ops
from support.cases import assert_matches, decode_scene, reference
from support.params import (
    EMULATED_ARCHES,
    EMULATED_VARIANTS,
    PRESENT_ARCHES,
    PRESENT_VARIANTS,
    arch_params,
    device_of,
    emulated_params,
    unwrap,
    variant_params,
)

PAGE = 64


@pytest.fixture(params=arch_params(PRESENT_ARCHES) + emulated_params(EMULATED_ARCHES))
def any_arch(request) -> str:
    return unwrap(request)


@pytest.fixture(params=variant_params(PRESENT_VARIANTS) + emulated_params(EMULATED_VARIANTS))
def any_variant(request) -> mx.MqaLogitsVariant:
    return unwrap(request)


def model_meta(lens: list, two_d: bool, num_ctas: int, rows: int, setup: int) -> list[list[int]]:
    """docs/schedule.md's compact split: sequence b weighs setup + the pages of its longest window (0
    without one), CTA c starts at unit floor(c * total / num_ctas): (sequence, unit within it); rows
    past num_ctas hold the end (batch, 0), or (0, 0) when there is no work."""
    pages = [-(-max([*(row if two_d else [row]), 0]) // PAGE) for row in lens]
    weights = [p + setup if p > 0 else 0 for p in pages]
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    total = prefix[-1]
    meta = []
    for c in range(rows):
        if c >= num_ctas or total == 0:
            meta.append([len(lens) if total else 0, 0])
            continue
        g = c * total // num_ctas
        b = max(i for i in range(len(lens)) if prefix[i] <= g and weights[i] > 0)
        meta.append([b, g - prefix[b]])
    return meta


def random_lens(rng: random.Random, batch: int, next_n: int, two_d: bool, longest: int) -> list:
    def one() -> int:
        return rng.choice([0, rng.randint(0, 70), rng.randint(0, longest)])

    return [[one() for _ in range(next_n)] if two_d else one() for _ in range(batch)]


def test_build_matches_the_model(any_arch):
    """200 random steps a (emulated) arch, the build called with the grid it splits over."""
    arch = any_arch
    device = torch.device(device_of(arch))
    module = ops(arch, device)
    rng = random.Random(5)
    for trial in range(200):
        two_d, next_n = rng.random() < 0.5, rng.randint(1, 6)
        batch = 5000 if trial == 0 else rng.randint(0, 300)  # 5000: more sequences than the GPU build stages
        lens = random_lens(rng, batch, next_n, two_d, rng.choice([300, 5000, 70000]))
        rows = rng.randint(2, 300)
        num_ctas = rng.randint(1, rows - 1)
        qpb, bk, setup = instance_of(arch, None, next_n)
        context_lens = torch.tensor(lens, dtype=torch.int32).reshape(len(lens), *([next_n] if two_d else []))
        meta = torch.full((rows, 2), -7, dtype=torch.int32, device=device)
        module.build_compact_schedule(
            context_lens=context_lens.to(device), schedule_meta=meta, next_n=next_n, num_ctas=num_ctas,
            setup_pages=setup, q_per_block=qpb, block_k=bk,
        )  # fmt: skip
        assert meta.cpu().tolist() == model_meta(lens, two_d, num_ctas, rows, setup), (lens, num_ctas)


@pytest.mark.parametrize("seed", range(4))
def test_compact_logits_match_reference(any_variant, seed):
    variant = any_variant
    device = device_of(variant)
    rng = random.Random(100 * seed + variant.q_per_block * 10 + variant.block_k)
    two_d, next_n = seed % 2 == 1, [1, 2, 3, 6][seed]
    lens = random_lens(rng, rng.randint(1, 12), next_n, two_d, 1500)
    case = decode_scene(lens, next_n, two_d, device, seed)
    context_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    num_sms = 7000 if seed == 3 else rng.choice([1, 3, 16, 132])  # 7000: meta rows far past the split's CTAs
    meta = mx.compact_schedule(context_lens, num_sms)
    persistent = torch.empty((num_sms + 1, 2), dtype=torch.int32, device=device)
    persistent.copy_(meta)  # SGLang's copy into its graph buffer
    out = mx.pa_mqa_logits_compact(
        *case.named_inputs().values(), context_lens, persistent, case.max_seq_len, next_n=next_n, variant=variant
    )
    assert_matches(out, reference(case), variant)


def test_forged_schedule_writes_nothing_outside_the_windows(any_arch):
    """A schedule of other context lengths, or of garbage, gives wrong logits at worst: no cell outside
    a window is written and no read leaves the tensors (the sanitizer job runs this file too)."""
    arch = any_arch
    device = device_of(arch)
    lens = [300, 0, 129, 5]
    case = decode_scene(lens, 2, False, device, 0)
    context_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    ref = reference(case)
    g = torch.Generator().manual_seed(1)
    forged = [
        mx.compact_schedule(torch.tensor([9000, 9000, 9000, 9000], dtype=torch.int32, device=device), 8),
        torch.randint(-(2**31), 2**31 - 1, (9, 2), generator=g, dtype=torch.int64).to(torch.int32).to(device),
        torch.randint(-3, 12, (9, 2), generator=g, dtype=torch.int32).to(device),
    ]
    for meta in forged:
        out = mx.pa_mqa_logits_compact(*case.named_inputs().values(), context_lens, meta, case.max_seq_len, next_n=2)
        outside = torch.isneginf(ref)
        assert torch.isneginf(out[outside]).all()


def test_errors_name_the_argument():
    device = "cpu"
    lens = torch.tensor([100, 50], dtype=torch.int32)
    case = decode_scene([100, 50], 1, False, device, 0)
    meta = mx.compact_schedule(lens, 4)
    call = lambda **kw: mx.pa_mqa_logits_compact(  # noqa: E731
        *case.named_inputs().values(), kw.pop("lens", lens), kw.pop("meta", meta), 100, **kw
    )
    with pytest.raises(ValueError, match="num_sms"):
        mx.compact_schedule(lens, 0)
    with pytest.raises(RuntimeError, match=r"schedule_meta: expected a contiguous int32 \[num_ctas \+ 1, 2\] tensor "
                                           r"with num_ctas >= 1, found shape \[1, 2\]"):  # fmt: skip
        call(meta=meta[:1])
    with pytest.raises(RuntimeError, match="context_lens: expected dtype int32, found Long"):
        call(lens=lens.long())
    with pytest.raises(ValueError, match="next_n"):
        call(next_n=0)
    with pytest.raises(RuntimeError, match=r"q: expected at least 4 rows \(the plan's num_rows\)"):
        call(next_n=2)
