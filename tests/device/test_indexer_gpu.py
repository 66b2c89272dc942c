"""The indexer's decode step on the GPU's arch: captured in one CUDA graph (metadata, plan,
projections, cache write, logits, top-k) and replayed with changing contexts, block tables and
pad rows, it gives eager's top-k, logits and cache bytes; the bench script captures each part.
(test_indexer.py runs the rest, inductor included, on this arch too.) Skipped without a GPU arch."""

from __future__ import annotations

import random

import mxlogits as mx
import pytest
import torch
from mxlogits.bench.indexer import capture
from mxlogits.integrations import indexer as ix
from support.params import GPU_ARCH

pytestmark = pytest.mark.gpu
if GPU_ARCH is None:
    pytest.skip("no GPU arch of the instance table on this machine", allow_module_level=True)

DEVICE, HIDDEN, BATCH, MAX_LEN = "cuda", 256, 8, 4096


@pytest.mark.parametrize("next_n", [1, 2, 3])
def test_decode_step_cuda_graph_replays_like_eager(next_n):
    width = mx.block_table_width(MAX_LEN, device=DEVICE)
    pages = BATCH * width + 1
    graphed, eager = (ix.random_indexer(HIDDEN, pages, DEVICE, topk=512, seed=3) for _ in range(2))
    history = torch.randint(0, 256, graphed.kv_buffer.shape, dtype=torch.uint8, device=DEVICE)
    for model in (graphed, eager):  # the same random keys, finite scales, in both caches
        model.kv_buffer.copy_(history)
        model.kv_views()[1].clamp_(118, 130)
    variant = ix.variant_for(DEVICE, next_n)
    graph_buffers, eager_buffers = (mx.plan_buffers(DEVICE, BATCH * next_n, BATCH, variant) for _ in range(2))
    # The graph's inputs: static tensors whose contents change between replays (all pads at capture).
    x = torch.zeros(BATCH * next_n, HIDDEN, device=DEVICE)
    lens = torch.zeros(BATCH, dtype=torch.int32, device=DEVICE)
    block_tables = torch.zeros(BATCH, width, dtype=torch.int32, device=DEVICE)

    def step(model, buffers):
        return model(x, ix.decode_batch(lens, block_tables, next_n, buffers, MAX_LEN), return_logits=True)

    replay, (idx, logits) = capture(lambda: step(graphed, graph_buffers), torch.device(DEVICE))
    assert torch.equal(graphed.kv_buffer, eager.kv_buffer), "an all-pad step wrote the cache"
    rng = random.Random(next_n)
    contexts = [[0] * BATCH, [MAX_LEN] * BATCH]
    contexts += [[rng.choice([0, rng.randint(next_n, MAX_LEN)]) for _ in range(BATCH)] for _ in range(4)]
    for ctx in contexts:
        lens.copy_(torch.tensor(ctx, dtype=torch.int32))
        block_tables.copy_(torch.randperm(pages - 1)[: BATCH * width].view(BATCH, width))
        x.copy_(torch.randn(x.shape))
        replay()
        want_idx, want_logits = step(eager, eager_buffers)
        assert torch.equal(idx, want_idx), f"top-k differs for contexts {ctx}"
        assert torch.equal(logits, want_logits), f"logits differ for contexts {ctx}"  # finite scales: no NaN
        assert torch.equal(graphed.kv_buffer, eager.kv_buffer), f"cache differs for contexts {ctx}"
        expected = [min(c - next_n + 1 + j, 512) if c else 0 for c in ctx for j in range(next_n)]
        assert (idx >= 0).sum(1).tolist() == expected


def test_bench_script_captures_every_part(capsys):
    from mxlogits.bench import indexer as indexer_bench

    args = ["--batch", "4", "--context", "4096", "--iters", "3", "--repeats", "1", "--hidden", "512", "--q-lora", "256"]
    assert indexer_bench.main(args) == 0
    out = capsys.readouterr().out
    assert "whole step (one graph)" in out and "GB/s" in out
