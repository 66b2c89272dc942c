"""The AMD arches' schedule kernel (the shared device builder) under the host emulation: plans whose
scratch is near and past the LDS a workgroup of the arch may allocate launch within it and match the
host builder record for record."""

from __future__ import annotations

import mxlogits as mx
import pytest
import torch
from support.schedule_model import host_twin

from .probe import EMULATED

pytestmark = EMULATED


@pytest.mark.parametrize("rows", [19_000, 25_000], ids=["155KiB", "195KiB"])
@pytest.mark.parametrize("variant", [v for v in mx.variants() if mx.manifest.manifest().arches[v.arch].emulation],
                         ids=lambda v: f"{v.arch}-emulated-{v.name}")
def test_large_plans_fit_the_lds_and_match_the_host_builder(variant, rows):
    """At q_per_block 1 a plan of n rows stages n + 1 scratch entries: 25,000 rows ask for 195 KiB, more
    than gfx950's 160 KiB of LDS a workgroup (a launch the hardware refuses); the builder must stage
    only what fits, and build the plan the host builds."""
    ends = torch.randint(1, 3000, (rows,), generator=torch.Generator().manual_seed(rows), dtype=torch.int32)
    batch = rows if variant.q_per_block == 1 else 64
    cu = torch.linspace(0, rows, batch + 1).round().to(torch.int32)
    seq_of_row = torch.searchsorted(cu[1:], torch.arange(rows, dtype=torch.int32), right=True).to(torch.int32)
    host_variant = host_twin(variant)
    if host_variant is None:
        pytest.skip(f"the cpu arch compiles no twin of {variant.name}")
    plans = []
    for arch, v in ((variant.arch, variant), (None, host_variant)):
        with mx.emulate(arch):
            buffers = mx.plan_buffers("cpu", rows, batch, v, num_ctas=variant.cta_resident)
            plans.append(mx.plan(cu, ends, buffers=buffers, row_to_batch=seq_of_row))
    emulated, host = plans
    assert torch.equal(emulated.buffers.cta_info, host.buffers.cta_info)
    assert torch.equal(emulated.buffers.cta_ranges, host.buffers.cta_ranges)
