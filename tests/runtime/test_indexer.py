"""mxlogits.indexer on every variant of every present arch: chunked prefill then decode at MTP 1
and 2 with pad rows, checked against a pure-torch indexer on the same quantized inputs (dense
per-sequence keys, no pages, no schedule); its in-graph pieces against the package's own
(quantizer, cache writer) and the Hadamard matrix; torch.compile(fullgraph=True) against eager;
the README's model example."""

from __future__ import annotations

import re

import mxlogits as mx
import pytest
import torch
from mxlogits.integrations import indexer as ix
from support.checkout import ROOT
from support.params import device_of

HIDDEN, MAX_LEN, TOPK = 128, 1024, 96
NEG_INF = float("-inf")


class TorchIndexer:
    """The same step in plain torch: keys kept dense per sequence, fp32 logits over each causal window."""

    def __init__(self, model: ix.Indexer, batch: int):
        self.model, self.keys = model, torch.zeros(batch, MAX_LEN, model.dim)

    def step(self, x, positions, seqs):
        """fp32 logits over [0, position + 1) of each row (empty for a pad row)."""
        q, q_scale, k, w = (t.cpu() for t in self.model.project(x))
        k, k_scale = mx.quantize_mxfp4(k)  # the rule the cache write must follow
        live = [r for r, p in enumerate(positions) if p >= 0]
        self.keys[[seqs[r] for r in live], [positions[r] for r in live]] = mx.dequantize_mxfp4(k, k_scale)[live]
        queries = mx.dequantize_mxfp4(q, q_scale)
        out = []
        for r, (p, b) in enumerate(zip(positions, seqs)):
            dots = queries[r] @ self.keys[b, : max(p + 1, 0)].T  # [H, window]
            out.append((w[r, :, None] * self.model.weight_scale * dots.clamp(min=0)).sum(0))
        return out


def assert_step_matches(idx, logits, ref_rows, k, variant):
    """Logits within the instance's bound in each window and -inf outside; the top-k of each row
    is the reference's up to ties: every position clearly above the k-th best value is chosen,
    none clearly below it, in descending order of our logits, then -1."""
    atol, rtol = mx.tolerance(variant)
    idx, logits = idx.cpu(), logits.cpu()
    assert idx.shape == (len(ref_rows), k) and idx.dtype == torch.int32
    for r, ref in enumerate(ref_rows):
        n, window = min(k, ref.numel()), ref.numel()
        got = logits[r, :window]
        assert (got - ref).abs().le(atol + rtol * ref.abs()).all(), f"row {r}: logits off"
        assert torch.isneginf(logits[r, window:]).all(), f"row {r}: cells past the window written"
        assert (idx[r, n:] == -1).all(), f"row {r}: expected -1 after {n} positions"
        chosen = idx[r, :n].long()
        assert chosen.unique().numel() == n and ((0 <= chosen) & (chosen < window)).all()
        if n == 0:
            continue
        kth = ref.topk(n).values[-1]
        tol = 2 * (atol + rtol * kth.abs())
        assert (ref[chosen] >= kth - tol).all(), f"row {r}: chose a position clearly below the top {n}"
        must = torch.nonzero(ref > kth + tol).flatten()
        assert torch.isin(must, chosen).all(), f"row {r}: missed a position clearly in the top {n}"
        assert (logits[r, chosen].diff() <= 0).all(), f"row {r}: not in descending order"


def make_model(device, batch, *, seed=0, topk=TOPK):
    """An indexer and block tables giving each sequence its own shuffled pages."""
    width = mx.block_table_width(MAX_LEN, device=device)
    model = ix.random_indexer(HIDDEN, batch * width + 1, device, topk=topk, seed=seed)
    pages = torch.randperm(batch * width, generator=torch.Generator().manual_seed(seed))
    return model, pages.view(batch, width).to(torch.int32).to(device)


def test_indexer_matches_torch_indexer(variant):
    """Prefill in two chunks (a sequence with no new tokens in the second), then decode at MTP 1
    and 2 with a pad sequence; windows both shorter and longer than k."""
    device = device_of(variant)
    model, block_tables = make_model(device, batch=4)
    twin = TorchIndexer(model, 4)
    g = torch.Generator().manual_seed(1)
    lens = [0, 0, 0, 0]

    def run(batch, positions, seqs):
        x = torch.randn(len(positions), HIDDEN, generator=g).to(device)
        idx, logits = model(x, batch, return_logits=True)
        assert_step_matches(idx, logits, twin.step(x, positions, seqs), TOPK, variant)

    for new in ([120, 30, 70, 0], [100, 0, 40, 0]):
        buffers = mx.plan_buffers(device, sum(new), 4, variant)
        batch = ix.prefill_batch(lens, new, block_tables, buffers, MAX_LEN)
        positions = [p + j for p, n in zip(lens, new) for j in range(n)]
        run(batch, positions, [b for b, n in enumerate(new) for _ in range(n)])
        lens = [p + n for p, n in zip(lens, new)]
    for next_n in (1, 2, 2):
        lens = [c + next_n for c in lens[:3]] + [0]  # sequence 3 is a pad slot of the decode batch
        buffers = mx.plan_buffers(device, 4 * next_n, 4, variant)
        context_lens = torch.tensor(lens, dtype=torch.int32, device=device)
        batch = ix.decode_batch(context_lens, block_tables, next_n, buffers, MAX_LEN)
        positions = [c - next_n + j if c else -1 for c in lens for j in range(next_n)]
        run(batch, positions, [b for b in range(4) for _ in range(next_n)])


def test_default_topk_pads_short_windows(arch):
    """k = 2048 by default: windows shorter than that give their whole window, then -1."""
    device = device_of(arch)
    model, block_tables = make_model(device, batch=2, topk=2048)
    lens = torch.tensor([300, 5], dtype=torch.int32, device=device)
    buffers = mx.plan_buffers(device, 2, 2, ix.variant_for(device, 1))
    idx = model(torch.randn(2, HIDDEN, device=device), ix.decode_batch(lens, block_tables, 1, buffers, MAX_LEN))
    assert idx.shape == (2, 2048)
    assert [int((row >= 0).sum()) for row in idx] == [300, 5]
    assert sorted(idx[1, :5].tolist()) == [0, 1, 2, 3, 4]


def test_quantizer_on_the_device_is_the_host_rule(arch):
    """mx.quantize_mxfp4 (which the indexer runs inside its graph) gives the host's bytes on the device: ties
    at every midpoint, saturation, zeros, -0.0, NaN, inf, exponents at both clamps, random rows."""
    if arch == "cpu":
        pytest.skip("the host is the reference")
    device = device_of(arch)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0])
    x = torch.randn(40, 4, 128) * torch.logspace(-6, 6, 40)[:, None, None]
    x[0, 0] = torch.cat([mids, -mids, mids * 0.999, mids * 1.001]).repeat(4) * 2.0**-3
    x[1, 0, :32] = 0.0
    x[1, 0, 32:64] = -0.0
    x[1, 1, 5], x[1, 2, 7], x[1, 3, 9] = float("nan"), float("inf"), float("-inf")
    x[2, 0], x[2, 1] = 1e-45, 3e38
    x[2, 2, :32] = torch.linspace(-7, 7, 32)  # beyond 6 saturates
    packed, scales = mx.quantize_mxfp4(x.to(device))
    ref_packed, ref_scales = mx.quantize_mxfp4(x)
    assert torch.equal(packed.cpu(), ref_packed) and torch.equal(scales.cpu(), ref_scales)


def test_hadamard_is_the_normalized_sylvester_matrix():
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < 128:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)])
    x = torch.randn(3, 5, 128, dtype=torch.float64)
    assert torch.allclose(ix.hadamard_transform(x), x @ h / 128**0.5)
    assert torch.allclose(ix.hadamard_transform(ix.hadamard_transform(x)), x)  # orthonormal and symmetric
    with pytest.raises(ValueError, match="power-of-two"):
        ix.hadamard_transform(torch.zeros(96))


@pytest.mark.parametrize("layout", ["natural", "mfma_permuted"])
@pytest.mark.parametrize(
    "slots", [[5, -1, 130, -1, 64], [-1, -1, 7, 3], [-1, -1, -1]], ids=["mixed", "pads_first", "all_pads"]
)
def test_in_graph_cache_write_is_write_paged_kv(arch, slots, layout):
    """Pad slots change nothing, wherever they are, also when no row is live; in either layout."""
    device = device_of(arch)
    g = torch.Generator().manual_seed(len(slots))
    buffer = torch.randint(0, 256, (4, 64 * 68), dtype=torch.uint8, generator=g).to(device)
    packed, scales = mx.quantize_mxfp4(torch.randn(len(slots), 128, generator=g).to(device))
    slot_mapping = torch.tensor(slots, device=device)
    ours, ref = buffer.clone(), buffer.clone()
    ix.write_kv_in_graph(packed, scales, slot_mapping, *mx.fused_views(ours, layout))
    mx.write_paged_kv(packed, scales, slot_mapping, *mx.fused_views(ref, layout))
    assert torch.equal(ours, ref)


def _compile_backends(arch: str) -> list[str]:
    # aot_eager checks the trace (fullgraph: no graph break around the op); inductor also generates code.
    return ["aot_eager", "inductor"] if arch == "cpu" else ["inductor"]


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")  # raised inside torch's inductor
def test_decode_step_compiles_fullgraph(arch):
    """A decode step (batch metadata, projections, cache write, plan, logits, top-k) under
    torch.compile(fullgraph=True) gives eager's indices, logits and cache, step after step."""
    device, next_n = device_of(arch), 2
    variant = ix.variant_for(device, next_n)
    for backend in _compile_backends(arch):
        torch._dynamo.reset()
        eager, block_tables = make_model(device, batch=3)
        compiled, _ = make_model(device, batch=3)
        buffers = [mx.plan_buffers(device, 3 * next_n, 3, variant) for _ in range(2)]

        def step(model, buffers, x, lens):
            return model(x, ix.decode_batch(lens, block_tables, next_n, buffers, MAX_LEN), return_logits=True)

        compiled_step = torch.compile(step, fullgraph=True, backend=backend)
        g = torch.Generator().manual_seed(2)
        for lens in ([2, 700, 0], [4, 702, 0], [0, 704, 2]):
            x = torch.randn(3 * next_n, HIDDEN, generator=g).to(device)
            lens = torch.tensor(lens, dtype=torch.int32, device=device)
            want = step(eager, buffers[0], x, lens)
            got = compiled_step(compiled, buffers[1], x, lens)
            assert torch.equal(got[0], want[0]), f"{backend}: top-k differs"
            assert torch.equal(got[1], want[1]), f"{backend}: logits differ"
            assert torch.equal(compiled.kv_buffer, eager.kv_buffer), f"{backend}: cache differs"
        assert (eager.kv_buffer != 0).any()


def test_compiled_decode_step_does_not_recompile(arch):
    """A serving loop compiles its decode step once: new contexts, pad rows and block tables are
    data, not guards (a guard on a Python value that changes every step recompiles every step)."""
    device = device_of(arch)
    model, block_tables = make_model(device, batch=3)
    buffers = mx.plan_buffers(device, 3, 3, ix.variant_for(device, 1))

    def step(x, lens, block_tables):
        return model(x, ix.decode_batch(lens, block_tables, 1, buffers, MAX_LEN))

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    x = torch.randn(3, HIDDEN, device=device)
    compiled(x, torch.tensor([5, 9, 0], dtype=torch.int32, device=device), block_tables)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for lens in ([6, 0, 1], [0, 0, 0], [700, 64, 65]):
            lens = torch.tensor(lens, dtype=torch.int32, device=device)
            compiled(x, lens, block_tables.roll(1, 0))


def test_bench_script_prints_its_table(capsys):
    """python -m mxlogits.bench.indexer, on the CPU (eager calls, small shapes): every part and the step."""
    from mxlogits.bench import indexer as indexer_bench

    assert indexer_bench.main(["--device", "cpu", "--context", "300", "--iters", "1", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    for part in ("metadata + plan", "projections", "into the cache", "logits", "top-2048", "whole step"):
        assert part in out


def test_readme_model_example_runs(capsys):
    """The README's "Using mxlogits in a model" examples, the indexer and the vLLM-style DeepGEMM calls
    (```py blocks: test_readme runs the ```python one)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Using mxlogits in a model", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```py\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "top-k per row: [101, 102, 151, 152, 0, 0]" in out
    assert "decode, finite logits per row: [299, 300, 69, 70]" in out
    assert "prefill, finite logits per row: [297, 298, 299, 300]" in out
