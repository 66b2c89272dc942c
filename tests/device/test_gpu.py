"""GPU-only behaviour, on every variant of the GPU's arch: CUDA-graph capture and replay of plan + op,
page ids outside the cache (NaN cells instead of a raise), launches on the caller's current stream,
and a default grid of one wave of the device. Skipped where no GPU arch of the instance table
is present. Agreement with the cpu arch and the device-built schedule: test_against_cpu.py."""

from __future__ import annotations

import json
import random
import shutil

import mxlogits as mx
import pytest
import torch
from mxlogits.synthetic import Scene, make_scene
from mxlogits_codegen.cli import main as gen_main
from support.cases import assert_matches, make_case, reference, run_op
from support.params import GPU_ARCH, GPU_VARIANTS, variant_params
from support.checkout import ROOT
from support.processes import python

pytestmark = pytest.mark.gpu
if GPU_ARCH is None:
    pytest.skip("no GPU arch of the instance table on this machine", allow_module_level=True)

DEVICE = "cuda"
GPU_PARAMS = variant_params(GPU_VARIANTS)
NEG_INF = float("-inf")


# ---- CUDA graphs ------------------------------------------------------------------------------

T, B, L, PAGES = 16, 6, 2048, 6 * 32 + 1  # rows, sequences, max_seq_len, pages of the static cache


def graph_scene(kind: str, seed: int) -> Scene:
    """A host scene of exactly T rows and B sequences (pad rows: row_to_batch -1, empty windows)."""
    rng = random.Random(seed)
    ctx = lambda lo=64: rng.randint(lo, L)
    if kind == "decode_mtp2":  # 5 live sequences x 2 rows, 6 pad rows
        contexts = [ctx() for _ in range(5)] + [0]
        rows = [(b, 0, c - 1 + j) for b, c in enumerate(contexts[:5]) for j in range(2)] + [(-1, 0, 0)] * 6
    elif kind == "prefill":  # two causal chunks of 8 rows
        prefixes = [rng.randint(0, L - 8) for _ in range(2)]
        contexts = [p + 8 for p in prefixes] + [0] * 4
        rows = [(b, 0, p + j + 1) for b, p in enumerate(prefixes) for j in range(8)]
    elif kind == "offsets":  # 4 sequences x 3 sliding windows, 4 pad rows
        contexts = [ctx(600) for _ in range(4)] + [0, 0]
        rows = [(b, 100 * j + b, c - 200 + 50 * j) for b, c in enumerate(contexts[:4]) for j in range(3)]
        rows += [(-1, 5, 5)] * 4
    else:  # decode_mtp1 over all six sequences, some with several rows
        contexts = [ctx() for _ in range(6)]
        counts = [3, 3, 3, 3, 2, 2]
        rows = [(b, 0, contexts[b] - n + 1 + j) for b, n in enumerate(counts) for j in range(n)]
    assert len(rows) == T and len(contexts) == B
    return make_scene(contexts, rows, "cpu", seed=seed, max_seq_len=L)


class StaticInputs:
    """The graph's input tensors on the GPU; load() copies a host scene into them."""

    def __init__(self, variant):
        m = mx.manifest.manifest()
        dev = DEVICE
        u8 = dict(dtype=torch.uint8, device=dev)
        i32 = dict(dtype=torch.int32, device=dev)
        self.q = torch.zeros((T, m.heads, m.head_dim // 2), **u8)
        self.q_scale = torch.zeros((T, m.heads, m.head_dim // 32), **u8)
        self.weights = torch.zeros((T, m.heads), dtype=torch.float32, device=dev)
        _, self.kv_cache, self.kv_scale = mx.fused_kv_cache(PAGES, dev)
        self.block_tables = torch.zeros((B, mx.block_table_width(L, variant)), **i32)
        self.cu_seq_q = torch.zeros(B + 1, **i32)
        self.local_starts, self.local_ends, self.row_to_batch = (torch.zeros(T, **i32) for _ in range(3))
        self.out = torch.full((T, L), NEG_INF, device=dev)
        self.buffers = mx.plan_buffers(dev, T, B, variant)

    def load(self, scene: Scene) -> None:
        for name in ("q", "q_scale", "weights", "cu_seq_q", "local_starts", "local_ends", "row_to_batch"):
            getattr(self, name).copy_(getattr(scene, name))
        pages = scene.kv_cache.shape[0]
        assert pages <= PAGES
        self.kv_cache[:pages].copy_(scene.kv_cache)
        self.kv_scale[:pages].copy_(scene.kv_scale)
        self.kv_scale[pages:].fill_(255)  # pages no table names: NaN if anything read them
        cols = min(self.block_tables.shape[1], scene.block_tables.shape[1])
        self.block_tables.zero_()
        self.block_tables[:, :cols].copy_(scene.block_tables[:, :cols])

    def step(self) -> None:
        """What one forward does: refill out, plan, run the layer's op into out."""
        self.out.fill_(NEG_INF)
        p = mx.plan(
            self.cu_seq_q,
            self.local_ends,
            buffers=self.buffers,
            local_starts=self.local_starts,
            row_to_batch=self.row_to_batch,
        )
        mx.pa_mqa_logits_mxfp4(
            self.q, self.q_scale, self.kv_cache, self.kv_scale, self.block_tables, self.weights, p, L, out=self.out
        )


@pytest.mark.parametrize("variant", GPU_PARAMS)
def test_plan_and_op_replay_in_one_cuda_graph(variant):
    """plan + op captured once; each replay after copying in new windows, row_to_batch (pad rows
    -1 with empty windows), keys, queries and weights matches the reference of that scene."""
    static = StaticInputs(variant)
    static.load(graph_scene("decode_mtp2", 0))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (and build, load) off the default stream, as torch requires
        for _ in range(2):
            static.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static.step()
    replays = [("prefill", 1), ("offsets", 2), ("decode_mtp1", 3), ("decode_mtp2", 4), ("offsets", 5), ("prefill", 6)]
    previous = None
    for kind, seed in replays:
        scene = graph_scene(kind, seed)
        static.load(scene)
        graph.replay()
        torch.cuda.synchronize()
        out = static.out.cpu()
        assert_matches(out, reference(scene), variant)
        assert previous is None or not torch.equal(out, previous), "replay did not recompute"
        previous = out


# ---- page ids outside the cache ---------------------------------------------------------------


@pytest.mark.parametrize("bad", ["num_pages", "num_pages+1000", "-1", "int32_max", "int32_min"])
@pytest.mark.parametrize("variant", GPU_PARAMS)
def test_page_id_outside_the_cache_gives_nan_cells_not_a_fault(variant, bad):
    """No raise (as on the cpu arch: test_checks.py): the in-window cells of the
    bad page's tokens are NaN, every other in-window cell matches the reference, cells outside
    the windows stay -inf. A bad id in a column no window reads (inside a chunk's last pages)
    changes nothing."""
    rows = [(0, 0, 300), (1, 10, 650), (1, 10, 700), (1, 130, 700), (2, 0, 130)]
    case = make_case([300, 700, 130], rows, variant, seed=5)
    want = reference(case)
    num_pages = case.kv_cache.shape[0]
    page = {"num_pages": num_pages, "num_pages+1000": num_pages + 1000, "-1": -1}.get(bad)
    page = page if page is not None else (2**31 - 1 if bad == "int32_max" else -(2**31))
    case.block_tables[1, 2] = page  # tokens 128..191 of sequence 1, read by rows 1..3
    case.block_tables[2, 3] = page  # tokens 192..255 of sequence 2: past row 4's window
    out = run_op(case, variant)
    torch.cuda.synchronize()
    for r, (b, s, e) in enumerate(rows):
        if b == 1:
            want[r, max(s, 128) : min(e, 192)] = float("nan")
    assert int(torch.isnan(want).sum()) == 64 + 64 + 62
    assert_matches(out, want, variant)


# ---- streams ----------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", GPU_PARAMS)
def test_plan_and_op_run_on_the_current_stream(variant):
    """Under `with torch.cuda.stream(s)`, the plan and the op go to s: their inputs are only
    written on s, behind a ~50 ms sleep, so work sent to the default (or legacy) stream would
    read zeroed queries and empty windows and the result would differ."""
    contexts = [1500, 900, 2200, 64]
    rows = [(b, 0, c - 1 + j) for b, c in enumerate(contexts) for j in range(2)]
    case = make_case(contexts, rows, variant, seed=9)
    want = reference(case)
    q, ends = case.q.clone(), case.local_ends.clone()
    case.q.zero_()
    case.local_ends.zero_()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(100_000_000)
        case.q.copy_(q)
        case.local_ends.copy_(ends)
        out = run_op(case, variant)
    stream.synchronize()
    assert_matches(out, want, variant)


def test_default_grid_is_one_wave_of_the_device(tmp_path):
    """Without num_ctas a plan's grid is the CTAs the device holds at once (the logits kernel's
    occupancy times the SMs), whatever the instance's cta_resident: every SM of any part gets work and
    none a second wave. Each shipped instance gets the SM count (one 640-thread CTA per SM); a rebuilt
    module whose instance asks for 8 CTAs gets the same, and its op still agrees with the reference."""
    if GPU_ARCH != "sm90":
        pytest.skip("the one-CTA-per-SM occupancy below is sm90's")
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    for v in GPU_VARIANTS:
        assert mx.plan_buffers("cuda", 8, 2, v).num_ctas == sms, v.name
        assert mx.plan_buffers("cuda", 8, 2, v, num_ctas=3 * sms).num_ctas == 3 * sms, v.name  # named: as given

    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(ROOT / "templates", repo / "templates")
    lines = (ROOT / "instances.yaml").read_text().splitlines(keepends=True)
    kept = [line for line in lines if "arch: sm90, name: qlen2" not in line and "arch: sm90, name: qlen4" not in line]
    text = "".join(kept)
    old = "{arch: sm90, name: qlen1_kv64, q_per_block: 1, block_k: 64, cta_resident: 132,"
    assert old in text and len(kept) == len(lines) - 2
    (repo / "instances.yaml").write_text(text.replace(old, old.replace("132", "8")))
    assert gen_main(["--root", str(repo)]) == 0

    code = """
import json, torch, mxlogits as mx, mxlogits.demo as d
rows = [(0, 0, 500 + j + 1) for j in range(7)] + [(1, 0, 200 + j + 1) for j in range(5)]
r = d.run_case('decode', d.make_scene([507, 205], rows, 'cuda'), 'qlen1_kv64', torch.device('cuda'), 1)
v = {x.name: x for x in mx.variants('sm90')}['qlen1_kv64']
print(json.dumps({'resident': v.cta_resident, 'grid': mx.plan_buffers('cuda', 12, 2, v).num_ctas, 'ok': r['ok']}))
"""
    out = python(code, env={"MXLOGITS_GENERATED_DIR": str(repo / "generated")}).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"resident": 8, "grid": sms, "ok": True}
