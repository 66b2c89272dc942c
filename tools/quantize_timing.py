"""The device MXFP4 quantizers on a GPU against the bytes roofline: mx.quantize_rows (the query path)
and mx.quantize_into_cache (the key path, into a fused page buffer at random slots; as many keys as the
query rows hold values, so both paths move the same bytes), each checked
bit-exact with quantize_mxfp4, then timed as the bench times a call (L2 flushed, events around the call
alone, median of `repeats`) beside the measured copy bandwidth.

    python tools/quantize_timing.py [--repeats 30]

Bytes per call: the input read (2 per bf16 value) plus the codes and scales written (0.5 + 1/32 per
value); the key path also reads its int64 slots."""

from __future__ import annotations

import argparse
import statistics

import mxlogits as mx
import torch
from mxlogits.bench.limits import measure_limits
from mxlogits.bench.timing import call_seconds

H, D = 64, 128


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    device = torch.device("cuda")
    bw = measure_limits(device, peak=1.0).bw  # the bandwidth alone
    print(f"{torch.cuda.get_device_name(device)}: copy bandwidth {bw / 1e12:.3f} TB/s")
    print("| path | tokens | values | µs | GB/s | % of bandwidth |")
    print("|---|--:|--:|--:|--:|--:|")
    g = torch.Generator(device="cuda").manual_seed(0)
    for tokens in (64, 1024, 4096, 16384):
        q = torch.randn(tokens, H, D, device=device, generator=g).to(torch.bfloat16)
        codes, scales = mx.quantize_rows(q)
        ref = mx.quantize_mxfp4(q)
        assert torch.equal(codes, ref[0]) and torch.equal(scales, ref[1])
        t = statistics.median(call_seconds([lambda: mx.quantize_rows(q)], device, args.repeats))
        nbytes = q.numel() * (2 + 0.5 + 1 / 32)
        print(f"| query (quantize_rows) | {tokens} | {q.numel()} | {t * 1e6:.1f} | {nbytes / t / 1e9:.0f} | "
              f"{100 * nbytes / t / bw:.1f} |")
        k = q.reshape(-1, D)  # as many keys as the queries hold values: a prefill's keys at the larger sizes
        pages = -(-k.shape[0] // 64) * 2
        # Random slots: each key's 4 scale bytes alone in their 32-byte sector (written as a partial sector);
        # in order: a prefill filling its pages, the scales of neighbouring keys sharing sectors.
        for order, slots in (("random slots", torch.randperm(pages * 64, device=device, generator=g)[: k.shape[0]]),
                             ("slots in order", torch.arange(k.shape[0], device=device))):  # fmt: skip
            buffer, kv_cache, kv_scale = mx.fused_kv_cache(pages, device)
            mx.quantize_into_cache(k, slots, kv_cache, kv_scale)
            ref_buffer, ref_kv, ref_ks = mx.fused_kv_cache(pages, device)
            mx.write_paged_kv(*mx.quantize_mxfp4(k), slots, ref_kv, ref_ks)
            assert torch.equal(buffer, ref_buffer)
            t = statistics.median(call_seconds([lambda: mx.quantize_into_cache(k, slots, kv_cache, kv_scale)], device,
                                               args.repeats))  # fmt: skip
            nbytes = k.numel() * (2 + 0.5 + 1 / 32) + k.shape[0] * 8
            print(f"| key (quantize_into_cache, {order}) | {k.shape[0]} | {k.numel()} | {t * 1e6:.1f} | "
                  f"{nbytes / t / 1e9:.0f} | {100 * nbytes / t / bw:.1f} |")

if __name__ == "__main__":
    main()
