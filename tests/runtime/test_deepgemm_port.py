"""DeepGEMM's MQA-logits tests (tests/test_attention.py at 54e2261: test_paged_mqa_logits, and
test_mqa_logits for the non-paged prefill entry), ported to mxlogits.deepgemm_compat and run by their
own criteria.

Its inputs, as it makes them: bf16 queries and keys drawn from a normal distribution and quantized to
FP4 by DeepGEMM's rule (one power-of-two scale per 32 elements, the smallest at or above amax / 6;
codes by strict thresholds, ties to the smaller magnitude); the key pages packed as its cache
([blocks, 64, 1, D/2 + 4]: the page's values, then one int32 of scale bytes per token); query scales
as int32 [B, next_n, H]; 2-D context lengths drawn uniformly in [0, ctx] with the last row's set to
ctx; block tables exactly max(ceil(ctx / 64)) wide, filled from one permutation of exactly the blocks
the sequences need; max_model_len their width in tokens; clean_logits False; fp32 or bf16 logits.

Its criteria, on each row's valid cells (positions below its context length; the others zeroed): 20
calls bitwise identical; calc_diff = 1 - 2 sum(xy) / sum(x^2 + y^2) (float64) below 0.02 against the
reference on the bf16 inputs (each head's dot product rounded to bf16, relu, weights, summed in fp32),
and below 5e-6 (3e-5 with bf16 logits) against the reference on the dequantized inputs.

The non-paged test: rows i of q [S, H, D/2] over keys [SKV, D/2] at [ks[i], ke[i]), ks = 0 and ke[i] =
i + SKV - S, or its context-parallel pattern (two half-chunks of rows at far-apart ends); clean_logits
True: the -inf cells exactly the reference's; the same diff criteria (its reference an fp32 einsum of
the bf16 inputs). And its compressed form (max_seqlen_k = max(ke - ks), clean_logits False): [S,
max_seqlen_k], row i's valid columns [0, ke[i] - ks[i]) compared 20 times, then laid back at [ks, ke)
of an -inf [S, SKV] and held to the same criteria.

Sizes: its own (paged: batch 256 and 4096, avg_kv 8,192 and 65,536 but not 4096 x 65,536, next_n 1, 2
and 6; non-paged: S 2,048 and 8,192, SKV 8,192 and 65,536) with MXLOGITS_DEEPGEMM_SIZES=full, on the GPU's
arch only; reduced ones otherwise (CI)."""

from __future__ import annotations

import os

import mxlogits as mx
import pytest
import torch
from mxlogits.integrations import deepgemm as dg
from support.deepgemm import as_int32, calc_diff, dg_fp4
from support.params import PRESENT_ARCHES, arch_params, device_of

H, D, PAGE = 64, 128, 64
FULL = os.environ.get("MXLOGITS_DEEPGEMM_SIZES") == "full"
BATCHES, AVG_KV = ((256, 4096), (8192, 65536)) if FULL else ((3, 9), (150, 700))
# Its own sizes are a GPU's: on the CPU one case would take hours
ARCHES = [a for a in PRESENT_ARCHES if device_of(a) != "cpu"] if FULL else PRESENT_ARCHES


def make_step(batch: int, next_n: int, avg_kv: int, device: str, seed: int):
    g = torch.Generator(device="cpu").manual_seed(seed)
    ctx = torch.randint(int(0.7 * avg_kv), int(1.3 * avg_kv), (batch,), generator=g, dtype=torch.int32)
    blocks = (ctx + PAGE - 1) // PAGE
    width, total = int(blocks.max()), int(blocks.sum())
    pool = torch.randperm(total, generator=g, dtype=torch.int32)
    table = torch.zeros(batch, width, dtype=torch.int32)
    offsets = torch.cumsum(blocks, 0) - blocks
    for b in range(batch):
        table[b, : blocks[b]] = pool[offsets[b] : offsets[b] + blocks[b]]
    lens = ((ctx[:, None] + 1).float() * torch.rand(batch, next_n, generator=g)).int()
    lens[:, -1] = ctx
    q = torch.randn(batch, next_n, H, D, generator=g).to(device, torch.bfloat16)
    kv = torch.randn(total, PAGE, D, generator=g).to(device, torch.bfloat16)
    weights = torch.randn(batch * next_n, H, generator=g).to(device)
    return q, kv, weights, lens.to(device), table.to(device), width * PAGE


def pack_pages(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """DeepGEMM's FP4 cache: per page its 64 tokens' values, then their 64 int32 scale words."""
    blocks = codes.shape[0]
    flat = torch.cat([codes.reshape(blocks, -1), scales.reshape(blocks, -1)], dim=1)
    return flat.view(blocks, PAGE, 1, D // 2 + 4)


def reference_bf16(q, kv, weights, lens, table) -> torch.Tensor:
    """DeepGEMM's reference on the bf16 inputs: each head's dot product in bf16, then fp32."""
    batch, next_n = q.shape[:2]
    out = torch.zeros(batch * next_n, table.shape[1] * PAGE, device=q.device)
    ctx = lens[:, -1].tolist()
    for b in range(batch):
        keys = kv[table[b, : -(-ctx[b] // PAGE)].long()].reshape(-1, D)[: ctx[b]]
        scores = torch.matmul(q[b].transpose(0, 1), keys.T).float()  # [H, next_n, ctx] from bf16
        rows = slice(b * next_n, (b + 1) * next_n)
        out[rows, : ctx[b]] = (scores.relu() * weights[rows].T[..., None]).sum(0)
    return out


def valid_cells(lens: torch.Tensor, width: int) -> torch.Tensor:
    return torch.arange(width, device=lens.device)[None, :] < lens.reshape(-1, 1)


@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("next_n", [1, 2, 6])
@pytest.mark.parametrize("avg_kv", AVG_KV)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("arch", arch_params(ARCHES))
def test_paged_mqa_logits(arch, batch, avg_kv, next_n, logits_dtype):
    if batch * avg_kv > 32 * 1024 * 1024:
        pytest.skip("DeepGEMM's test leaves out batch x avg_kv above 32 Mi tokens")
    device = device_of(arch)
    q, kv, weights, lens, table, max_model_len = make_step(batch, next_n, avg_kv, device, seed=batch + next_n)
    q_codes, q_bytes = dg_fp4(q)
    kv_codes, kv_bytes = dg_fp4(kv)
    q_sf = as_int32(q_bytes)
    kv_cache = pack_pages(kv_codes, kv_bytes)
    schedule = dg.get_paged_mqa_logits_metadata(lens, PAGE, 132)
    call = lambda: dg.fp8_fp4_paged_mqa_logits(  # noqa: E731
        (q_codes.view(torch.int8), q_sf), kv_cache, weights, lens, table, schedule, max_model_len,
        clean_logits=False, logits_dtype=logits_dtype,
    )  # fmt: skip
    valid = valid_cells(lens, max_model_len)
    logits = call()
    assert logits.dtype == logits_dtype and logits.shape == (batch * next_n, max_model_len)
    logits = logits.float().masked_fill(~valid, 0)
    for _ in range(20):
        assert torch.equal(call().float().masked_fill(~valid, 0), logits)

    ref = reference_bf16(q, kv, weights, lens, table).masked_fill(~valid, 0)
    assert calc_diff(logits, ref) < 0.02
    rows = torch.arange(batch * next_n, device=device) // next_n
    simulated = mx.reference_logits(
        q_codes.view(batch * next_n, H, D // 2), q_bytes.view(batch * next_n, H, D // 32), kv_codes, kv_bytes,
        table, weights, lens.reshape(-1), max_model_len, row_to_batch=rows,
    ).masked_fill(~valid, 0)  # fmt: skip
    assert calc_diff(logits, simulated) < (3e-5 if logits_dtype == torch.bfloat16 else 5e-6)


PREFILL = ((2048, 8192), (2048, 65536), (8192, 8192), (8192, 65536)) if FULL else ((48, 240), (64, 256))


def key_windows(seq_len: int, seq_len_kv: int, context_parallel: bool, device: str):
    """DeepGEMM's ks, ke: causal rows ending at i + SKV - S, or its context-parallel split of rows."""
    ks = torch.zeros(seq_len, dtype=torch.int32)
    if not context_parallel:
        return ks.to(device), (torch.arange(seq_len, dtype=torch.int32) + seq_len_kv - seq_len).to(device)
    chunk, cp_size = seq_len // 2, seq_len_kv // seq_len
    cp_id = cp_size // 3
    i = torch.arange(chunk, dtype=torch.int32)
    ke = torch.cat([cp_id * chunk + i, (2 * cp_size - 1 - cp_id) * chunk + i])
    return ks.to(device), ke.to(device)


@pytest.mark.parametrize("compressed", [False, True], ids=["full", "compressed"])
@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("context_parallel", [False, True], ids=["causal", "cp"])
@pytest.mark.parametrize("seq_len, seq_len_kv", PREFILL)
@pytest.mark.parametrize("arch", arch_params(ARCHES))
def test_mqa_logits(arch, seq_len, seq_len_kv, context_parallel, logits_dtype, compressed):
    device = device_of(arch)
    g = torch.Generator().manual_seed(seq_len + seq_len_kv)
    q = torch.randn(seq_len, H, D, generator=g).to(device, torch.bfloat16)
    kv = torch.randn(seq_len_kv, D, generator=g).to(device, torch.bfloat16)
    weights = torch.randn(seq_len, H, generator=g).to(device)
    ks, ke = key_windows(seq_len, seq_len_kv, context_parallel, device)
    q_codes, q_bytes = dg_fp4(q)
    kv_codes, kv_bytes = dg_fp4(kv)
    max_seqlen_k = int((ke - ks).max()) if compressed else 0
    call = lambda: dg.fp8_fp4_mqa_logits(  # noqa: E731
        (q_codes.view(torch.int8), as_int32(q_bytes)), (kv_codes.view(torch.int8), as_int32(kv_bytes)), weights,
        ks, ke, clean_logits=not compressed, max_seqlen_k=max_seqlen_k, logits_dtype=logits_dtype,
    )  # fmt: skip
    logits = call()
    assert logits.dtype == logits_dtype and logits.shape == (seq_len, max_seqlen_k or seq_len_kv)
    logits = logits.float()
    if compressed:  # its valid columns compared, then laid back at [ks, ke) of an -inf [S, SKV]
        mine = torch.arange(max_seqlen_k, device=device)[None, :] < (ke - ks)[:, None]
        logits = logits.masked_fill(~mine, 0)
        for _ in range(20):
            assert torch.equal(call().float().masked_fill(~mine, 0), logits)
        full = torch.full((seq_len, seq_len_kv), float("-inf"), device=device)
        for i in range(seq_len):
            full[i, ks[i] : ke[i]] = logits[i, : ke[i] - ks[i]]
        logits = full
    else:
        for _ in range(20):
            assert torch.equal(call().float(), logits)
    t = torch.arange(seq_len_kv, device=device)
    inside = (t[None, :] >= ks[:, None]) & (t[None, :] < ke[:, None])
    assert torch.equal(torch.isneginf(logits), ~inside)  # the reference's -inf cells, exactly
    ref = torch.cat([  # its fp32 einsum of the bf16 inputs, 256 rows at a time (the whole of it needs 137 GB)
        (torch.einsum("mhd,nd->hmn", q[i : i + 256].float(), kv.float()).relu() * weights[i : i + 256].T[..., None]).sum(0)
        for i in range(0, seq_len, 256)
    ]).masked_fill(~inside, 0)
    logits = logits.masked_fill(~inside, 0)
    assert calc_diff(logits, ref) < 0.02
    pages = -(-seq_len_kv // PAGE)
    pad = pages * PAGE - seq_len_kv
    kv_pages = torch.cat([kv_codes, kv_codes.new_zeros(pad, D // 2)]).view(pages, PAGE, D // 2)
    kv_scales = torch.cat([kv_bytes, kv_bytes.new_full((pad, D // 32), 127)]).view(pages, PAGE, D // 32)
    table = torch.arange(pages, dtype=torch.int32, device=device)[None]
    simulated = mx.reference_logits(
        q_codes, q_bytes, kv_pages, kv_scales, table, weights, ke, seq_len_kv, local_starts=ks,
        row_to_batch=torch.zeros(seq_len, dtype=torch.int32, device=device),
    ).masked_fill(~inside, 0)  # fmt: skip
    assert calc_diff(logits, simulated) < (3e-5 if logits_dtype == torch.bfloat16 else 5e-6)
