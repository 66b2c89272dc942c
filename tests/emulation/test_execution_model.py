"""The host emulation's execution model holds a body to what a wave can do: every lane of a wave at the
same wave operation, none of them gone, scalar operands the same on every lane, LDS within the CTA's;
and the barrier orders LDS between waves. Each broken rule stops the launch with an error naming it."""

from __future__ import annotations

import numpy as np
import pytest
from mxlogits.manifest import manifest

from .probe import EMULATED, run_raw

pytestmark = EMULATED

ARCHES = [a for a, rec in manifest().arches.items() if rec.emulation]


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize(
    ("case", "message"),
    [
        (0, r"CTA 0: wave 0: its lanes diverge at a wave operation: lane 0 waits at v_readfirstlane_b32, lane \d+ at "
            r"v_readlane_b32"),
        (1, r"wave 0: its lanes diverge at a wave operation: lane 0 waits at its end \(exited\), lane 1 at "
            r"v_readfirstlane_b32"),
        (2, r"v_readlane_b32 lane select: expected an operand every lane of the wave agrees on \(a scalar register\), "
            r"found lane 1's differing from lane 0's"),
        (3, r"LDS: 1048576 bytes of static objects and 0 of the launch's dynamic LDS exceed the CTA's \d+"),
    ],
    ids=["divergent", "exited_lane", "scalar_operand", "lds_overflow"],
)
def test_a_broken_rule_stops_the_launch_naming_it(arch, case, message):
    with pytest.raises(RuntimeError, match=message):
        run_raw(arch, "model", case, b"")


@pytest.mark.parametrize("arch", ARCHES)
def test_the_barrier_orders_lds_between_waves(arch):
    wave = manifest().arches[arch].emulation.wave
    read = np.frombuffer(run_raw(arch, "model", 4, b""), dtype=np.int32)
    threads = np.arange(2 * wave)
    np.testing.assert_array_equal(read, 1000 + (threads + wave) % (2 * wave))
