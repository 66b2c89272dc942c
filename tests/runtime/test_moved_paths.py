"""Modules that moved keep their old paths for one release: importing one warns (DeprecationWarning)
and gives the module at its new path, the same object; the old mxlogits.bench module's names resolve
in the bench package; `python -m mxlogits.indexer_bench` still runs. The package's own attributes
(mx.indexer, mx.deepgemm_compat) are the new modules and warn of nothing."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import mxlogits as mx
import pytest

MOVED = {
    "mxlogits.indexer": "mxlogits.integrations.indexer",
    "mxlogits.deepgemm_compat": "mxlogits.integrations.deepgemm",
    "mxlogits.indexer_bench": "mxlogits.bench.indexer",
    "mxlogits.bench_shapes": "mxlogits.bench.shapes",
    "mxlogits.bench_inputs": "mxlogits.bench.inputs",
    "mxlogits.bench_tune": "mxlogits.bench.tune",
    "mxlogits.bench_tune_report": "mxlogits.bench.tune_report",
    "mxlogits.bench_tune_yaml": "mxlogits.bench.tune_yaml",
}


@pytest.mark.parametrize("old, new", MOVED.items())
def test_an_old_path_warns_and_is_the_new_module(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"^{old} moved to {new}; the old path works until the next release"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_bench_timing_names_went_to_two_modules(monkeypatch):
    from mxlogits.bench import limits, timing

    monkeypatch.delitem(sys.modules, "mxlogits.bench_timing", raising=False)
    with pytest.warns(DeprecationWarning, match="mxlogits.bench_timing moved to mxlogits.bench.timing and"):
        old = importlib.import_module("mxlogits.bench_timing")
    assert (old.call_seconds, old.host_seconds) == (timing.call_seconds, timing.host_seconds)
    assert (old.Limits, old.measure_limits) == (limits.Limits, limits.measure_limits)


@pytest.mark.parametrize("name, where", [("bench_row", "rows"), ("run", "cli"), ("sweep_grids", "tables"),
                                         ("summary_line", "report"), ("plot", "plots"), ("provenance", "origin")])
def test_the_old_bench_modules_names_resolve_with_a_warning(name, where):
    import mxlogits.bench

    with pytest.warns(DeprecationWarning, match=rf"mxlogits\.bench\.{name} moved to mxlogits\.bench\.{where}\.{name}"):
        found = getattr(mxlogits.bench, name)
    assert found is getattr(importlib.import_module(f"mxlogits.bench.{where}"), name)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        mxlogits.bench.nothing  # noqa: B018


def test_the_package_attributes_are_the_new_modules_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mx.indexer is importlib.import_module("mxlogits.integrations.indexer")
        assert mx.deepgemm_compat is importlib.import_module("mxlogits.integrations.deepgemm")
        assert mx.Indexer is mx.indexer.Indexer and mx.decode_batch is mx.indexer.decode_batch


def test_the_old_indexer_bench_command_runs_and_says_it_moved():
    argv = [sys.executable, "-m", "mxlogits.indexer_bench", "--device", "cpu", "--context", "300", "--iters", "1",
            "--repeats", "1"]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    assert "indexer decode step on cpu" in run.stdout and "whole step (one graph)" in run.stdout
    assert "DeprecationWarning: mxlogits.indexer_bench moved to mxlogits.bench.indexer" in run.stderr
