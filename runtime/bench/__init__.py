"""Timing the op, and choosing its compile-time values by timing: `python -m mxlogits bench`.

    cli          the bench command: its arguments, and what it runs with them
    shapes       the tables' shapes and what one call on a shape costs (cells, flops, bytes)
    inputs       random inputs of a shape, drawn on the device
    timing       the device's and the host's time of one call
    limits       the machine's bandwidth and compute peak, the roofline's divisors
    rows         one row: planned, checked against the reference, timed; which variant a table runs
    tables       every row once with each table's summary, or --sweep over grids
    peer         --peer: DeepGEMM's kernels timed and checked on each row's own problem
    report       the printed lines, the summaries, the --json document
    plots        --plot
    origin       what a result was measured on (commit, source hash, device)
    tune         --tune: each combination of an arch's tunables rendered, built and benched
    tune_report  --tune's table and JSON
    tune_yaml    --tune's edit of one instances.yaml row
    indexer      python -m mxlogits.bench.indexer: one indexer decode step and its parts, from CUDA graphs

The op core never imports this package. Names of the old mxlogits.bench module still resolve here,
with a DeprecationWarning, until the next release.
"""

from __future__ import annotations

import importlib
import warnings

# The old mxlogits.bench module's public names -> the module of this package that holds each now.
_MOVED = {
    **dict.fromkeys(("add_arguments", "run"), "cli"),
    **dict.fromkeys(("BenchError", "GUARD_ROWS", "MAX_SETS", "bench_row", "pick_variant",
                     "roofline_seconds", "table_variant"), "rows"),  # fmt: skip
    **dict.fromkeys(("SWEEP_MULTIPLES", "sweep_grids"), "tables"),
    **dict.fromkeys(("HEADER", "summarize", "summary_line"), "report"),
    "plot": "plots",
    "provenance": "origin",
}


def __getattr__(name: str):
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    where = f"{__name__}.{_MOVED[name]}"
    warnings.warn(f"{__name__}.{name} moved to {where}.{name}; the old name works until the next release",
                  DeprecationWarning, stacklevel=2)  # fmt: skip
    return getattr(importlib.import_module(where), name)
