"""The suite's fixtures: `variant` (every instance of the table) and `arch` (every arch of it), GPU ones
marked gpu and skipped with the reason where this machine cannot run them. The builders the tests
share are in support/ (importing it first points the build cache at the suite's own)."""

from __future__ import annotations

import mxlogits as mx
import pytest
from support.params import (
    EMULATED_ARCHES,
    EMULATED_VARIANTS,
    TABLE_ARCHES,
    arch_params,
    emulated_params,
    unwrap,
    variant_params,
)


# Every instance of the table is a param: those of an arch absent here are reported skipped, so the
# suite that runs on an sm90 or gfx950 machine is visibly the one collected here; the AMD ones also
# run here through the host emulation.
@pytest.fixture(params=variant_params(mx.variants()) + emulated_params(EMULATED_VARIANTS))
def variant(request) -> mx.MqaLogitsVariant:
    return unwrap(request)


@pytest.fixture(params=arch_params(TABLE_ARCHES) + emulated_params(EMULATED_ARCHES))
def arch(request) -> str:
    return unwrap(request)
