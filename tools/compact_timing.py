"""The compact schedule on a GPU: the device time of its build (DeepGEMM's metadata call) and of the op
on it (one launch) beside the op on a plan (mx.plan + pa_mqa_logits_mxfp4) on the same decode
shapes, same timer, same process; and the CUDA-graph sequence of vLLM and SGLang (schedule copied into
a persistent buffer, op captured on it, replayed with the next step's context lengths) checked against
an eager call.

    python tools/compact_timing.py [--repeats 30] [--shapes 256:8192:1,256:8192:2]
    python tools/compact_timing.py --profile [--shapes ...]   # each shape's calls twice, nothing timed (for ncu)
    python tools/compact_timing.py --shared-pages ...   # every sequence on one sequence's pages: memory taken out

Each time is the median of `repeats` event-timed calls after an L2 flush (mxlogits.bench.timing; the op
on a plan and on the compact schedule alternated call by call, so that neither runs at a hotter clock) and,
for the small shapes, of 200 replays of a CUDA graph holding the call alone."""

from __future__ import annotations

import argparse
import statistics

import mxlogits as mx
import torch
from mxlogits.bench.timing import alternated_medians, call_seconds, capture, replay_us
from mxlogits.synthetic import make_scene

SHAPES = [  # (batch, context, next_n)
    (1, 32768, 1),
    (32, 8192, 1),
    (64, 32768, 1),
    (128, 32768, 1),
    (128, 65536, 1),
    (256, 8192, 1),
    (256, 8192, 2),
    (256, 8192, 6),
    (4096, 8192, 1),
    (4096, 8192, 2),
]


def decode_case(batch: int, context: int, next_n: int, device: str, seed: int = 0, shared_pages: bool = False):
    """`batch` sequences of 1/2 to 1 `context` tokens, `next_n` rows each, windows ending at the context.
    With `shared_pages` every sequence reads the first pages of one sequence's table, the only keys made
    (a few MB, held in L2 after the first touch): the same schedule and work with memory taken out."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(context // 2, context + 1, (batch,), generator=g).tolist()
    rows = [(b, 0, c - next_n + 1 + j) for b, c in enumerate(lens) for j in range(next_n)]
    keys = [max(lens)] + [0] * (batch - 1) if shared_pages else lens
    case = make_scene(keys, rows, device, seed=seed)
    if shared_pages:
        case.block_tables[:] = case.block_tables[0]
    return case, torch.tensor(lens, dtype=torch.int32, device=device)


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """`B:CTX:NEXT_N,...` (e.g. 256:8192:2) as (batch, context, next_n) triples."""
    shapes = []
    for item in text.split(","):
        fields = item.split(":")
        if len(fields) != 3 or not all(f.isdigit() and int(f) > 0 for f in fields):
            raise argparse.ArgumentTypeError(f"expected B:CTX:NEXT_N of positive integers, found {item!r}")
        shapes.append(tuple(int(f) for f in fields))
    return shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--shapes", type=parse_shapes, default=SHAPES,
                        help="B:CTX:NEXT_N,... (default: the decode shapes above, B=4,096 included)")
    parser.add_argument("--profile", action="store_true",
                        help="one schedule build, plan and op of each kind per shape, nothing timed (for ncu)")
    parser.add_argument("--shared-pages", action="store_true",
                        help="every sequence reads one sequence's pages (L2-resident): the kernels with memory taken out")
    args = parser.parse_args()
    if args.profile:
        profile(args.shapes, args.shared_pages)
        return
    device = torch.device("cuda")
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    replay_us(lambda: torch.cuda._sleep(0), device)  # the first graph of a process replays slower: not this one
    floor = replay_us(lambda: torch.cuda._sleep(0), device)  # a graph of one empty kernel: the timer's floor
    print(f"{torch.cuda.get_device_name(device)}, {sms} SMs; a graph of one empty kernel replays in {floor:.1f} µs")
    print("| B | ctx | next_n | variant | metadata µs (graph) | plan µs (graph) | op on plan µs | op on compact µs | ratio |"
          " op on plan, graph µs | op on compact, graph µs | op on plan, bf16 out µs |")
    print("|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for batch, context, next_n in args.shapes:
        case, lens = decode_case(batch, context, next_n, "cuda", shared_pages=args.shared_pages)
        variant = mx.variant_for(device, next_n)
        meta = mx.compact_schedule(lens, sms)
        buffers = mx.plan_buffers(device, batch * next_n, batch, variant)
        plan = mx.plan(case.cu_seq_q, case.local_ends, buffers=buffers, row_to_batch=case.row_to_batch)
        inputs = list(case.named_inputs().values())
        out_plan = torch.full((batch * next_n, case.max_seq_len), float("-inf"), device=device)
        out_compact = out_plan.clone()
        on_plan = lambda: mx.pa_mqa_logits_mxfp4(*inputs, plan, case.max_seq_len, out=out_plan)  # noqa: E731
        on_compact = lambda: mx.pa_mqa_logits_compact(  # noqa: E731
            *inputs, lens, meta, case.max_seq_len, next_n=next_n, variant=variant, out=out_compact
        )
        out_bf16 = out_plan.to(torch.bfloat16)
        on_plan_bf16 = lambda: mx.pa_mqa_logits_mxfp4(*inputs, plan, case.max_seq_len, out=out_bf16)  # noqa: E731
        on_plan()
        on_compact()
        on_plan_bf16()
        torch.cuda.synchronize()
        assert torch.equal(out_bf16.nan_to_num(0, 1, -1), out_plan.to(torch.bfloat16).nan_to_num(0, 1, -1))
        assert torch.equal(out_plan.isnan(), out_compact.isnan())
        diff = (out_plan - out_compact).abs().nan_to_num(0.0).max().item()
        plan_us, compact_us = (s * 1e6 for s in alternated_medians([on_plan, on_compact], device, args.repeats))
        bf16_us = statistics.median(call_seconds([on_plan_bf16], device, args.repeats)) * 1e6
        meta_graph = replay_us(lambda: mx.compact_schedule(lens, sms, out=meta), device)
        spare = mx.plan_buffers(device, batch * next_n, batch, variant)  # the op's plan stays current
        plan_graph = replay_us(
            lambda: mx.plan(case.cu_seq_q, case.local_ends, buffers=spare, row_to_batch=case.row_to_batch), device
        )
        small = plan_us < 60
        plan_op_graph = f"{replay_us(on_plan, device):.1f}" if small else ""
        compact_op_graph = f"{replay_us(on_compact, device):.1f}" if small else ""
        print(f"| {batch} | {context} | {next_n} | {variant.name} | {meta_graph:.1f} | {plan_graph:.1f} | "
              f"{plan_us:.1f} | {compact_us:.1f} | {compact_us / plan_us:.3f} | {plan_op_graph} | {compact_op_graph} | "
              f"{bf16_us:.1f} |"
              f"  max |plan - compact| {diff:.2e}")  # fmt: skip
        del case, plan, buffers, spare, out_plan, out_compact, out_bf16
        torch.cuda.empty_cache()
    graph_sequence(device, sms)


def profile(shapes: list[tuple[int, int, int]], shared_pages: bool = False) -> None:
    """Each shape's calls once, after a warm-up call, for a profiler's kernel durations."""
    device = torch.device("cuda")
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    for batch, context, next_n in shapes:
        case, lens = decode_case(batch, context, next_n, "cuda", shared_pages=shared_pages)
        variant = mx.variant_for(device, next_n)
        buffers = mx.plan_buffers(device, batch * next_n, batch, variant)
        inputs = list(case.named_inputs().values())
        for _ in range(2):
            meta = mx.compact_schedule(lens, sms)
            plan = mx.plan(case.cu_seq_q, case.local_ends, buffers=buffers, row_to_batch=case.row_to_batch)
            mx.pa_mqa_logits_mxfp4(*inputs, plan, case.max_seq_len)
            mx.pa_mqa_logits_compact(*inputs, lens, meta, case.max_seq_len, next_n=next_n, variant=variant)
        torch.cuda.synchronize()


def graph_sequence(device: torch.device, sms: int) -> None:
    """vLLM's and SGLang's sequence: persistent context_lens and schedule buffers, the op captured on
    them, each step's schedule copied in (vLLM: buf[: m.shape[0]] = m; SGLang: buf.copy_(m)), replayed."""
    batch, next_n = 64, 2
    case, lens = decode_case(batch, 20000, next_n, "cuda", seed=1)
    inputs = list(case.named_inputs().values())
    lens_buf = lens.clone()
    meta_buf = torch.zeros((sms + 1, 2), dtype=torch.int32, device=device)
    out = torch.full((batch * next_n, case.max_seq_len), float("-inf"), device=device)
    step = lambda: mx.pa_mqa_logits_compact(  # noqa: E731
        *inputs, lens_buf, meta_buf, case.max_seq_len, next_n=next_n, out=out
    )
    meta_buf[:] = mx.compact_schedule(lens, sms)
    replay, _ = capture(step, device)
    g = torch.Generator().manual_seed(3)
    for trial in range(5):
        new = torch.randint(0, 20001, (batch,), generator=g, dtype=torch.int32).to(device)
        lens_buf.copy_(new)
        meta = mx.compact_schedule(new, sms)
        if trial % 2:
            meta_buf[: meta.shape[0]] = meta
        else:
            meta_buf.copy_(meta)
        out.fill_(float("-inf"))
        replay()
        eager = mx.pa_mqa_logits_compact(*inputs, new, meta, case.max_seq_len, next_n=next_n)
        torch.cuda.synchronize()
        assert torch.equal(out.isneginf(), eager.isneginf()), trial
        assert torch.equal(out.nan_to_num(0, 0, 0), eager.nan_to_num(0, 0, 0)), trial
    print("graph replay with a persistent schedule buffer and new context lengths: 5 steps, bit-exact with eager")


if __name__ == "__main__":
    main()
