"""What the test suite and the GPU tools (tools/memcheck_cases.py, tools/racecheck_schedule.py) share:

    checkout        the checkout's paths (templates, generated tree, stub arches)
    params          the arches and variants present here, as pytest params (GPU ones marked gpu)
    cases           one op call's inputs, the op, the reference, and the comparison of docs/semantics.md
    op_cases        the op corner cases and the exact path's scenes (tests/runtime/test_op.py, the memcheck tool)
    schedule_model  the schedule written independently of the builder, and random plans
    tables          the head of the small instance tables the codegen tests build on
    stubs           the real templates plus stub arches, rendered from such a table
    toolchains      the marks of a test that runs nvcc or clang++-22
    processes       Python in a fresh process with a given environment

Importing this package points the build cache at the suite's own, never the user's
(~/.cache/mxlogits): one directory per session, which subprocesses inherit, so each module builds
once; a fresh temporary directory removed at exit, or $MXLOGITS_TEST_CACHE_DIR when set (kept, to
reuse GPU builds across runs). tests/ is on sys.path (pyproject's pytest `pythonpath`; the tools add it)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def _session_cache() -> str:
    kept = os.environ.get("MXLOGITS_TEST_CACHE_DIR")
    if kept:
        return kept
    fresh = tempfile.mkdtemp(prefix="mxlogits-test-cache-")
    atexit.register(shutil.rmtree, fresh, ignore_errors=True)
    return fresh


os.environ["MXLOGITS_CACHE_DIR"] = _session_cache()  # before mxlogits builds anything
