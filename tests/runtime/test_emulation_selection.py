"""Which arch CPU tensors run: the cpu arch, or an AMD arch through its host emulation, chosen by
MXLOGITS_EMULATE or, winning over it, mxlogits.emulate(); anything else raises naming where it came
from. Nothing is built: the choice is the arch probe's."""

from __future__ import annotations

import re

import mxlogits as mx
import pytest

EMULABLE = sorted(a for a, rec in mx.manifest.manifest().arches.items() if rec.emulation)


def test_cpu_tensors_run_the_cpu_arch_by_default(monkeypatch):
    monkeypatch.delenv("MXLOGITS_EMULATE", raising=False)
    assert mx.arch_of("cpu") == "cpu" and mx.emulated_arch() is None


@pytest.mark.parametrize("arch", EMULABLE)
def test_the_environment_and_the_context_choose_the_emulated_arch(monkeypatch, arch):
    monkeypatch.setenv("MXLOGITS_EMULATE", arch)
    assert mx.arch_of("cpu") == arch
    other = next(a for a in EMULABLE if a != arch)
    with mx.emulate(other):
        assert mx.arch_of("cpu") == other
        with mx.emulate(None):
            assert mx.arch_of("cpu") == "cpu"
        assert mx.arch_of("cpu") == other
    assert mx.arch_of("cpu") == arch


@pytest.mark.parametrize("name", ["sm90", "cpu", "gfx942"])
def test_an_arch_the_host_does_not_emulate_is_refused(monkeypatch, name):
    monkeypatch.setenv("MXLOGITS_EMULATE", name)
    expected = rf"expected an arch the host emulation runs \({re.escape(str(EMULABLE))}\), found '{name}'"
    with pytest.raises(ValueError, match=rf"MXLOGITS_EMULATE: {expected}"):
        mx.arch_of("cpu")
    monkeypatch.delenv("MXLOGITS_EMULATE")
    with pytest.raises(ValueError, match=rf"emulate: {expected}"):
        with mx.emulate(name):
            pass
