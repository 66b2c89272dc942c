"""Shared builders: one op call's inputs from (contexts, rows) on a variant's device, the op, the
reference, and the comparison of SPEC §3 (in-window cells within the instance's bound, other
cells untouched). Every op test is parametrised over every instance of the table (GPU ones carry the
gpu mark) and runs on the arches present on this machine: cpu, and the arch of the CUDA/HIP device
when the table has one; the others are reported skipped with the reason.

The suite builds into a cache of its own, never the user's (~/.cache/mxlogits): one directory for
the whole session, which subprocesses inherit, so each module builds once. It is a fresh
temporary directory removed at exit, or $MXLOGITS_TEST_CACHE_DIR when set (kept, to reuse GPU
builds across runs)."""

from __future__ import annotations

import atexit
import dataclasses
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

import mxlogits as mx  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from mxlogits.build import sanitize_enabled  # noqa: E402
from mxlogits.manifest import manifest  # noqa: E402
from mxlogits.synthetic import Scene, make_scene  # noqa: E402


def _gpu_arch() -> str | None:
    """The arch of this machine's GPU, or None without a GPU, when the table has no arch for it, or
    in the sanitizer job (MXLOGITS_SANITIZE=1), which checks the host arch."""
    if not torch.cuda.is_available() or sanitize_enabled():
        return None
    try:
        return mx.arch_of("cuda")
    except RuntimeError:  # a GPU the instance table does not target: its params are left out
        return None


GPU_ARCH = _gpu_arch()
PRESENT_ARCHES = ["cpu"] + ([GPU_ARCH] if GPU_ARCH else [])
TABLE_ARCHES = list(dict.fromkeys(v.arch for v in mx.variants()))  # every arch of the instance table
CPU_VARIANTS = mx.variants("cpu")
GPU_VARIANTS = mx.variants(GPU_ARCH) if GPU_ARCH else ()
PRESENT_VARIANTS = tuple(v for arch in PRESENT_ARCHES for v in mx.variants(arch))


def device_of(variant_or_arch) -> str:
    arch = variant_or_arch if isinstance(variant_or_arch, str) else variant_or_arch.arch
    return "cpu" if arch == "cpu" else "cuda"


def variant_id(v: mx.MqaLogitsVariant) -> str:
    return f"{v.arch}-{v.name}"


def _absent(arch: str) -> str:
    """Why `arch`'s params do not run here."""
    rec = manifest().arches[arch]
    if sanitize_enabled():
        return f"{arch} ({rec.family} {rec.target}): the sanitizer job runs the host arch only"
    here = f"this machine's GPU is {GPU_ARCH}" if GPU_ARCH else "this machine has no GPU of an arch in the table"
    return f"{arch} runs on a {rec.family} {rec.target} GPU only; {here}"


def _marks(arch: str):
    if arch == "cpu":
        return ()
    return (pytest.mark.gpu,) + (() if arch in PRESENT_ARCHES else (pytest.mark.skip(reason=_absent(arch)),))


def variant_params(variants=PRESENT_VARIANTS) -> list:
    """pytest params of `variants`, ids like cpu-qlen1_kv64 / sm90-qlen1_kv64, GPU ones marked gpu and
    those of an arch this machine cannot run skipped with the reason."""
    return [pytest.param(v, id=variant_id(v), marks=_marks(v.arch)) for v in variants]


def arch_params(arches=PRESENT_ARCHES) -> list:
    return [pytest.param(a, id=a, marks=_marks(a)) for a in arches]


# Every instance of the table is a param: those of an arch absent here are reported skipped, so the
# suite that runs on an sm90 or gfx950 machine is visibly the one collected here.
@pytest.fixture(params=variant_params(mx.variants()))
def variant(request) -> mx.MqaLogitsVariant:
    return request.param


@pytest.fixture(params=arch_params(TABLE_ARCHES))
def arch(request) -> str:
    return request.param


def variant_with(arch: str, predicate, what: str) -> mx.MqaLogitsVariant:
    """The first variant of `arch` that satisfies `predicate`; skips (naming `what`) if it has none."""
    found = [v for v in mx.variants(arch) if predicate(v)]
    if not found:
        pytest.skip(f"{arch} compiles no variant with {what}")
    return found[0]


def ops_of(arch: str):
    """torch.ops.mxlogits_<arch>, the raw ops of the arch's module (loaded, built on first use)."""
    mx.build.load(arch)
    return getattr(torch.ops, f"mxlogits_{arch}")


def make_case(contexts, rows, variant=None, *, seed: int = 0, max_seq_len: int | None = None) -> Scene:
    """A Scene on the device of `variant` (cpu for None); see mxlogits.synthetic.make_scene."""
    device = "cpu" if variant is None else device_of(variant)
    return make_scene(contexts, rows, device, seed=seed, max_seq_len=max_seq_len)


def first_rows(case: Scene, n: int) -> Scene:
    """The case's first n query rows (own copies of q, q_scale, weights), its keys unchanged: the
    tensors a launch of a plan built for more rows is handed."""
    return dataclasses.replace(
        case,
        q=case.q[:n].clone(),
        q_scale=case.q_scale[:n].clone(),
        weights=case.weights[:n].clone(),
        local_ends=case.local_ends[:n],
        local_starts=case.local_starts[:n],
        row_to_batch=case.row_to_batch[:n],
    )


def cta_ranges_of(spans, records: torch.Tensor) -> torch.Tensor:
    """cta_ranges (int32 [len(spans), 2 + record width]) of hand-written (begin, end) spans over
    `records` (a plan's cta_info rows): each row carries a copy of record begin, as the builder writes it,
    zeros when the span is empty or begin is outside records."""
    rows = []
    for begin, end in spans:
        inside = begin < end and 0 <= begin < records.shape[0]
        first = records[begin].tolist() if inside else [0] * records.shape[1]
        rows.append([begin, end, *first])
    return torch.tensor(rows, dtype=torch.int32, device=records.device)


def make_plan(case: Scene, variant, *, num_ctas=None, row_to_batch=True, starts=True) -> mx.MqaLogitsPlan:
    buffers = mx.plan_buffers(case.q.device, case.total_q, case.batch, variant, num_ctas=num_ctas)
    return mx.plan(
        case.cu_seq_q,
        case.local_ends,
        buffers=buffers,
        local_starts=case.local_starts if starts else None,
        row_to_batch=case.row_to_batch if row_to_batch else None,
    )


def run_op(case: Scene, variant, *, out=None, weight_scale=1.0, plan=None, weights=None, **plan_kwargs) -> torch.Tensor:
    plan = plan or make_plan(case, variant, **plan_kwargs)
    return mx.pa_mqa_logits_mxfp4(
        *case.inputs(weights),
        plan,
        case.max_seq_len,
        weight_scale=weight_scale,
        out=out,
    )


def reference(case: Scene, *, weight_scale=1.0, starts=True, weights=None) -> torch.Tensor:
    """mx.reference_logits evaluated on the CPU (fp32), returned on the case's device."""
    cpu = [t.cpu() for t in case.inputs(weights)]
    ref = mx.reference_logits(
        *cpu,
        case.local_ends.cpu(),
        case.max_seq_len,
        local_starts=case.local_starts.cpu() if starts else None,
        row_to_batch=case.row_to_batch.cpu(),
        weight_scale=weight_scale,
    )
    return ref.to(case.q.device)


def assert_matches(out: torch.Tensor, ref: torch.Tensor, variant) -> None:
    """Cells the reference computed agree within the instance's bound (NaN where it is NaN);
    every other cell is exactly as the reference left it."""
    assert out.shape == ref.shape
    atol, rtol = mx.tolerance(variant)
    computed = ~torch.isneginf(ref)
    assert torch.equal(out[~computed], ref[~computed]), "cells outside every window were written"
    assert torch.equal(torch.isnan(out[computed]), torch.isnan(ref[computed])), "NaN cells differ"
    o, r = out[computed].nan_to_num(0.0), ref[computed].nan_to_num(0.0)
    err = (o - r).abs()
    bad = err > atol + rtol * r.abs()
    assert not bad.any(), f"{int(bad.sum())} cells outside the bound; worst error {float(err.max()):.3g}"
