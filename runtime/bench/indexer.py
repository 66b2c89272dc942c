"""Time of one indexer decode step from CUDA-graph replay, and of its parts:

    python -m mxlogits.bench.indexer                  # B=64, context 32,768, MTP 1, top-2048 (GPU)
    python -m mxlogits.bench.indexer --next-n 2 --variant qlen2_kv64

The whole step (metadata + plan, projections + Hadamard + MXFP4, cache write, logits, top-k) is
captured in one CUDA graph; each part is captured alone on the inputs the step produced. Each graph
is timed with CUDA events around --iters back-to-back replays (median of --repeats), so a small part
may run from a warm L2 that the whole step does not give it. On the CPU (no graphs) it times eager
calls on small shapes: a smoke test of this script, not a measurement.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ..integrations.indexer import decode_batch, random_indexer, select_topk, variant_for
from ..plan import block_table_width, plan_buffers
from .timing import capture

GPU_DEFAULTS = {"batch": 64, "context": 32768, "hidden": 7168, "q_lora": 1536, "iters": 200}
CPU_DEFAULTS = {"batch": 2, "context": 1024, "hidden": 256, "q_lora": 128, "iters": 3}


def time_us(run, device: torch.device, iters: int, repeats: int) -> float:
    """Median over `repeats` of the mean µs of `iters` back-to-back calls of `run`."""
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                run()
            stop.record()
            stop.synchronize()
            samples.append(start.elapsed_time(stop) * 1e3 / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                run()
            samples.append((time.perf_counter() - t0) * 1e6 / iters)
    return statistics.median(samples)


def run(args) -> list[tuple[str, float]]:
    device = torch.device(args.device)
    b, n, ctx = args.batch, args.next_n, args.context
    variant = args.variant or variant_for(device, n)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator(device).manual_seed(0)
    # One plan's buffers per use: a plan is current until the next plan() into its buffers.
    plan_only, parts, whole = (plan_buffers(device, b * n, b, variant) for _ in range(3))
    width = block_table_width(ctx, parts.variant)
    model = random_indexer(args.hidden, b * width + 1, device, dtype=dtype, q_in=args.q_lora, topk=args.topk)
    model.kv_buffer.copy_(torch.randint(0, 256, model.kv_buffer.shape, generator=g, device=device))
    _, kv_scale = model.kv_views()
    kv_scale.copy_(torch.randint(118, 128, kv_scale.shape, generator=g, device=device))  # finite scales
    pages = torch.randperm(b * width, generator=g, device=device).to(torch.int32)
    block_tables = pages.view(b, width)
    lens = torch.full((b,), ctx, dtype=torch.int32, device=device)
    x = torch.randn(b * n, args.hidden, generator=g, device=device).to(dtype)
    qr = torch.randn(b * n, args.q_lora, generator=g, device=device).to(dtype)

    # The parts in step order, each on what the previous one produced.
    rows = []
    replay, _ = capture(lambda: decode_batch(lens, block_tables, n, plan_only, ctx), device)
    rows.append(("metadata + plan", replay))
    batch = decode_batch(lens, block_tables, n, parts, ctx)
    replay, (q, q_scale, k, weights) = capture(lambda: model.project(x, qr), device)
    rows.append(("projections + Hadamard + q MXFP4", replay))
    replay, _ = capture(lambda: model.write_cache(k, batch), device)
    rows.append(("k MXFP4 into the cache", replay))
    replay, logits = capture(lambda: model.logits(q, q_scale, weights, batch), device)
    rows.append(("logits (op, with its -inf fill)", replay))
    replay, _ = capture(lambda: select_topk(logits, batch.local_ends, args.topk), device)
    rows.append((f"top-{args.topk} (sorted, -1 masking)", replay))
    replay, _ = capture(lambda: model(x, decode_batch(lens, block_tables, n, whole, ctx), qr), device)
    rows.append(("whole step (one graph)", replay))
    return [(name, time_us(replay, device, args.iters, args.repeats)) for name, replay in rows]


def report(args, times: list[tuple[str, float]]) -> str:
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (eager, no graphs: smoke test)"
    variant = args.variant or variant_for(device, args.next_n).name
    step = times[-1][1]
    kv_bytes = args.batch * args.context * 68  # 64 value + 4 scale bytes per key, each read at least once
    lines = [
        f"indexer decode step on {name}: variant {variant}, B={args.batch}, next_n={args.next_n}, "
        f"context {args.context}, top-{args.topk}, hidden {args.hidden}, q_lora {args.q_lora}",
        f"{'part':36} {'us/step':>10} {'of step':>8}",
    ]
    for part, us in times[:-1]:
        lines.append(f"{part:36} {us:10.1f} {100 * us / step:7.1f}%")
    lines.append(f"{'sum of the parts':36} {sum(us for _, us in times[:-1]):10.1f}")
    lines.append(f"{times[-1][0]:36} {step:10.1f} {100.0:7.1f}%")
    logits_us = times[3][1]
    lines.append(f"logits read {kv_bytes / 1e6:.1f} MB of keys: {kv_bytes / logits_us / 1e3:.1f} GB/s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mxlogits.bench.indexer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--context", type=int, help="tokens of every sequence, this step's included")
    ap.add_argument("--next-n", type=int, default=1, help="query rows per sequence (MTP)")
    ap.add_argument("--topk", type=int, default=2048)
    ap.add_argument("--hidden", type=int, help="model width (keys and weights read it)")
    ap.add_argument("--q-lora", type=int, help="width the index queries are projected from")
    ap.add_argument("--variant", help="instance name (default: variant_for(device, next_n))")
    ap.add_argument("--iters", type=int, help="replays per timing")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    defaults = GPU_DEFAULTS if torch.device(args.device).type == "cuda" else CPU_DEFAULTS
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    with torch.no_grad():
        print(report(args, run(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
