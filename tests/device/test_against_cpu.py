"""Every device arch present against the cpu arch: the GPU's, and the AMD ones through the host
emulation (ids <arch>-emulated-<variant>): the same random ragged scenes within the device variant's
bound of the fp32 reference with the same NaN and -inf cells, and the device-built schedule (the
shared builder, as a kernel of the arch) bit-exact with the host builder."""

from __future__ import annotations

import random

import mxlogits as mx
import pytest
import torch
from mxlogits.synthetic import make_scene
from support.cases import assert_matches, reference, run_op
from support.params import EMULATED_VARIANTS, GPU_VARIANTS, device_of, emulated_params, unwrap, variant_params
from support.scenes import SCENES, on_cpu, poison_one_key
from support.schedule_model import compare_with_host, host_twin, random_plan

DEVICE_VARIANTS = (*GPU_VARIANTS, *EMULATED_VARIANTS)


@pytest.fixture(params=variant_params(GPU_VARIANTS) + emulated_params(EMULATED_VARIANTS))
def device_variant(request) -> mx.MqaLogitsVariant:
    return unwrap(request)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", sorted(SCENES))
def test_device_arch_agrees_with_cpu_on_random_scenes(device_variant, kind, seed):
    """The device variant and the cpu variant of the same (q_per_block, block_k, setup weight) (else the cpu
    default) both meet the device variant's bound against the fp32 reference, with identical NaN and
    -inf cells."""
    variant = device_variant
    rng = random.Random(1000 * seed + sorted(SCENES).index(kind))
    contexts, rows = SCENES[kind](rng)
    case = make_scene(contexts, rows, device_of(variant), seed=seed)  # block_tables wide enough for its arch
    poison_one_key(case, rng)
    host_variant = host_twin(variant) or mx.default_variant("cpu")
    host = on_cpu(case, host_variant)
    ref = reference(host, weight_scale=0.5)
    assert torch.isnan(ref).any(), "the poisoned key should reach a window"
    out = run_op(case, variant, weight_scale=0.5).cpu()
    with mx.emulate(None):
        out_host = run_op(host, host_variant, weight_scale=0.5)
    assert_matches(out, ref, variant)
    assert_matches(out_host, ref, variant)
    assert torch.equal(torch.isnan(out), torch.isnan(out_host))
    assert torch.equal(torch.isneginf(out), torch.isneginf(out_host))


# ---- the device-built schedule ----------------------------------------------------------------


def test_device_schedule_is_bit_exact_with_the_host_builder(device_variant):
    """At least 2,000 random plans over a GPU's variants, 300 a variant under the emulation, built on the
    device (all launches, one synchronization) and compared record for record with the cpu builder at
    the same grid (or, where the cpu arch has no instance of this shape, with the model of docs/schedule.md)."""
    variant = device_variant
    per_variant = 300 if device_of(variant) == "cpu" else max(700, -(-2000 // len(GPU_VARIANTS)))
    rng = random.Random(77 + variant.q_per_block * 1000 + variant.block_k)
    specs = [random_plan(rng, variant) for _ in range(per_variant)]
    assert compare_with_host(variant, specs, device_of(variant)) == per_variant


def test_large_cut_plans_match_the_host_builder(device_variant):
    """Plans of 2,048 tiles or more cut from sequences are built by the builder's 1,024-thread block
    (sched::kWideFrom): three, with and without row_to_batch, bit-exact with the cpu builder."""
    variant = device_variant
    if variant.q_per_block == 1:
        pytest.skip("q_per_block 1 keeps the 512-thread builder")
    rng = random.Random(4242 + variant.q_per_block)
    specs = [random_plan(rng, variant, num_rows=rng.randint(2048, 2600) * variant.q_per_block) for _ in range(3)]
    assert compare_with_host(variant, specs, device_of(variant)) == len(specs)
