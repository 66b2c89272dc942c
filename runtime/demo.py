"""The main job: a realistic decode step and a small causal prefill through the op on the
present device, checked against the fp32 reference (python -m mxlogits demo)."""

from __future__ import annotations

import statistics

import torch

from .arch import arch_of
from .bench.timing import call_seconds
from .manifest import default_variant, manifest, tolerance, variants
from .op import pa_mqa_logits_mxfp4
from .plan import plan, plan_buffers
from .reference import reference_logits
from .synthetic import Scene, make_scene


def _timed(fn, device: torch.device, repeats: int) -> float:
    """Median seconds of `fn` after one warm-up call."""
    return statistics.median(call_seconds([fn], device, repeats))


def run_case(title: str, scene: Scene, variant, device: torch.device, repeats: int = 5) -> dict:
    buffers = plan_buffers(device, scene.total_q, scene.batch, variant)
    v = buffers.variant

    def make_plan():
        return plan(
            scene.cu_seq_q,
            scene.local_ends,
            buffers=buffers,
            local_starts=scene.local_starts,
            row_to_batch=scene.row_to_batch,
        )

    plan_seconds = _timed(make_plan, device, repeats)
    p = make_plan()
    out = torch.full((scene.total_q, scene.max_seq_len), float("-inf"), device=device)

    def launch():
        pa_mqa_logits_mxfp4(
            *scene.inputs(),
            p,
            scene.max_seq_len,
            out=out,
        )

    seconds = _timed(launch, device, repeats)
    ref = reference_logits(
        *scene.inputs(),
        scene.local_ends,
        scene.max_seq_len,
        local_starts=scene.local_starts,
        row_to_batch=scene.row_to_batch,
    )
    inside = torch.isfinite(ref)
    atol, rtol = tolerance(v)
    err = (out - ref).abs()[inside]
    bound_ratio = float((err / (atol + rtol * ref.abs()[inside])).max()) if err.numel() else 0.0
    untouched = bool(torch.equal(out[~inside], ref[~inside]))
    overlaps = []
    for r, (s, e) in enumerate(zip(scene.local_starts.tolist(), scene.local_ends.tolist())):
        k = min(2048, e - s)
        if k <= 0:
            continue
        got = set(out[r, s:e].topk(k).indices.tolist())
        want = set(ref[r, s:e].topk(k).indices.tolist())
        overlaps.append(len(got & want) / k)
    cells = int(inside.sum())
    flops = 2 * manifest().heads * manifest().head_dim * cells
    return {
        "title": title,
        "variant": v,
        "rows": scene.total_q,
        "seqs": scene.batch,
        "cells": cells,
        "seconds": seconds,
        "plan_seconds": plan_seconds,
        "gflops": flops / seconds / 1e9,
        "mcells": cells / seconds / 1e6,
        "max_err": float(err.max()) if err.numel() else 0.0,
        "bound_ratio": bound_ratio,
        "untouched": untouched,
        "overlap_min": min(overlaps),
        "overlap_mean": sum(overlaps) / len(overlaps),
        "ok": bound_ratio <= 1.0 and untouched,
    }


def decode_scene(device, seed: int = 1) -> Scene:
    """32 sequences at MTP 1, contexts between 1K and 8K tokens."""
    g = torch.Generator().manual_seed(seed)
    contexts = torch.randint(1024, 8193, (32,), generator=g).tolist()
    return make_scene(contexts, [(b, 0, c) for b, c in enumerate(contexts)], device, seed=seed)


def prefill_scene(device, seed: int = 2) -> Scene:
    """Causal prefill of 2 x 256 new rows after 1K and 1.5K-token prefixes."""
    prefixes, new = [1024, 1536], 256
    rows = [(b, 0, p + j + 1) for b, p in enumerate(prefixes) for j in range(new)]
    return make_scene([p + new for p in prefixes], rows, device, seed=seed)


def demo(device: torch.device) -> bool:
    arch = arch_of(device)
    how = f"arch {arch} through the host emulation" if device.type == "cpu" and arch != "cpu" else f"arch {arch}"
    print(f"mxlogits demo on {device} ({how}, {torch.get_num_threads()} host threads)")
    grouped = [v for v in variants(arch) if v.q_per_block > 1]
    cases = [
        ("decode MTP=1", decode_scene(device), default_variant(arch)),
        (
            "causal prefill",
            prefill_scene(device),
            min(grouped, key=lambda v: (v.block_k, v.q_per_block)) if grouped else default_variant(arch),
        ),
    ]
    ok = True
    print(
        f"{'case':16} {'variant':12} {'rows':>5} {'seqs':>4} {'cells':>9} {'plan':>9} {'op':>9} {'Mcells/s':>8} "
        f"{'GFLOP/s':>8} {'max err':>9} {'err/bound':>9} {'top-2048':>13}"
    )
    for title, scene, variant in cases:
        r = run_case(title, scene, variant, device)
        ok &= r["ok"]
        print(
            f"{title:16} {r['variant'].name:12} {r['rows']:5} {r['seqs']:4} {r['cells']:9} "
            f"{r['plan_seconds'] * 1e3:7.3f}ms {r['seconds'] * 1e3:7.2f}ms {r['mcells']:8.2f} {r['gflops']:8.1f} "
            f"{r['max_err']:9.2e} {r['bound_ratio']:9.1e} "
            f"{r['overlap_min']:6.4f}/{r['overlap_mean']:6.4f}"
            + ("" if r["untouched"] else "  CELLS OUTSIDE WINDOWS WRITTEN")
        )
    print("top-2048: min/mean per-row overlap of the top min(2048, window) positions with the reference")
    print("PASS: every in-window cell within the instance's bound, no cell outside a window written" if ok else "FAIL")
    return ok
