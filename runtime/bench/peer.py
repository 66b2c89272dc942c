"""bench --peer deepgemm: DeepGEMM's FP8 MQA-logits kernels, what serving stacks run for this step
today, timed on each bench row's shape in the same process with the same timer as the op
(timing.call_seconds: CUDA events, an L2 flush before each call), and checked to compute the same
logits as the op.

Decode tables go through its paged kernel (fp8_fp4_paged_mqa_logits with FP8 queries) and its
metadata; prefill tables through its non-paged kernel (fp8_fp4_mqa_logits) over the sequences' keys
laid end to end, which is what vLLM calls for prefill. The FP8 inputs are input set 0's MXFP4
values, dequantized and cast as DeepGEMM's own test casts them: keys to e4m3 with a per-token fp32
scale of amax / 448, queries to e4m3 as they are. DeepGEMM is built from source (docs/performance.md);
nothing of it is part of this package."""

from __future__ import annotations

import importlib
import itertools
import re
import statistics
from collections.abc import Callable
from types import ModuleType

import torch

from ..compact import compact_schedule, pa_mqa_logits_compact
from ..mxfp4 import dequantize_mxfp4
from .inputs import Problem
from .shapes import Shape
from .timing import alternated_medians, call_seconds

PEERS = {"deepgemm": "deep_gemm"}  # --peer name -> the module it imports
AGREE = 0.02  # calc_diff bound between the peer's logits and the op's: DeepGEMM's test's own for FP8
FP8_MAX = 448.0
_CHUNK = 1 << 18  # tokens dequantized at once (128 MB of fp32 at D = 128)


class PeerUnavailable(RuntimeError):
    """The peer named by --peer cannot be imported."""


def load_peer(name: str) -> ModuleType:
    try:
        return importlib.import_module(PEERS[name])
    except ImportError as e:
        raise PeerUnavailable(
            f"mxlogits bench: --peer {name}: cannot import {PEERS[name]} ({e}); build it from a source snapshot "
            f"with tools/build_deepgemm.sh and put the snapshot on PYTHONPATH (docs/performance.md)"
        ) from e


def peer_version(peer: ModuleType) -> str:
    """What was timed: the module's name and version (DeepGEMM's carries its commit when built from git)."""
    return f"{peer.__name__} {getattr(peer, '__version__', '(no version)')}"


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """DeepGEMM's test metric: 1 - 2<x, y> / (|x|^2 + |y|^2); 0 for equal tensors."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    return 0.0 if denominator == 0 else float(1 - 2 * (x * y).sum() / denominator)


def decode_next_n(shape: Shape) -> int | None:
    """next_n when every sequence has the same number of rows, row j seeing [0, ctx - next_n + 1 + j)
    (DeepGEMM's paged decode), else None."""
    counts = set(shape.rows_per_sequence())
    if len(counts) != 1:
        return None
    (n,) = counts
    i = 0
    for b, ctx in enumerate(shape.contexts):
        for j in range(n):
            if shape.rows[i] != (b, 0, ctx - n + 1 + j):
                return None
            i += 1
    return n


def fp8_keys(values: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4 keys (uint8 [..., D/2], [..., D/32]) -> (e4m3 [..., D], fp32 [...] per-token scales)."""
    flat_v, flat_s = values.reshape(-1, values.shape[-1]), scales.reshape(-1, scales.shape[-1])
    codes = torch.empty((flat_v.shape[0], 2 * flat_v.shape[1]), dtype=torch.float8_e4m3fn, device=values.device)
    sf = torch.empty(flat_v.shape[0], dtype=torch.float32, device=values.device)
    for i in range(0, flat_v.shape[0], _CHUNK):
        x = dequantize_mxfp4(flat_v[i : i + _CHUNK], flat_s[i : i + _CHUNK])
        sf[i : i + _CHUNK] = x.abs().amax(dim=-1).clamp(min=1e-4) / FP8_MAX
        codes[i : i + _CHUNK] = (x / sf[i : i + _CHUNK, None]).to(torch.float8_e4m3fn)
    return codes.view(*values.shape[:-1], -1), sf.view(values.shape[:-1])


def _paged_call(dg: ModuleType, problem: Problem, next_n: int, num_sms: int):
    """(metadata call, logits call) of DeepGEMM's paged kernel on set 0 of a decode shape."""
    s, shape = problem.sets[0], problem.shape
    pages, page, half = s.kv_cache.shape
    codes, sf = fp8_keys(s.kv_cache, s.kv_scale)
    fused = torch.empty((pages, page * (2 * half + 4)), dtype=torch.uint8, device=codes.device)
    fused[:, : page * 2 * half] = codes.view(torch.uint8).view(pages, -1)
    fused[:, page * 2 * half :] = sf.view(torch.uint8).view(pages, -1)
    fused = fused.view(pages, page, 1, 2 * half + 4)
    q = dequantize_mxfp4(s.q, s.q_scale).to(torch.float8_e4m3fn)
    q = q.view(shape.batch, next_n, *q.shape[1:])
    context_lens = problem.local_ends.view(shape.batch, next_n)  # row j's end: DeepGEMM's 2-D form

    def meta():
        return dg.get_paged_mqa_logits_metadata(context_lens, page, num_sms)

    schedule = meta()

    def logits():
        return dg.fp8_paged_mqa_logits(q, fused, s.weights, context_lens, problem.block_tables, schedule,
                                       shape.max_seq_len, clean_logits=False)  # fmt: skip

    return meta, logits


def _flat_call(dg: ModuleType, problem: Problem):
    """DeepGEMM's non-paged kernel on set 0: each sequence's keys end to end, row windows shifted."""
    s, shape = problem.sets[0], problem.shape
    page = s.kv_cache.shape[1]
    tables = problem.block_tables.tolist()
    token_rows = []
    for b, ctx in enumerate(shape.contexts):
        ids = torch.tensor(tables[b][: -(-ctx // page)], device=s.kv_cache.device, dtype=torch.long)
        token_rows.append((ids[:, None] * page + torch.arange(page, device=ids.device)).flatten()[:ctx])
    tokens = torch.cat(token_rows)
    values = s.kv_cache.reshape(-1, s.kv_cache.shape[-1])[tokens]
    kv = fp8_keys(values, s.kv_scale.reshape(-1, s.kv_scale.shape[-1])[tokens])
    offsets = [0, *itertools.accumulate(shape.contexts)]
    ks = torch.tensor([offsets[b] + st for b, st, _ in shape.rows], dtype=torch.int32, device=tokens.device)
    ke = torch.tensor([offsets[b] + e for b, _, e in shape.rows], dtype=torch.int32, device=tokens.device)
    q = dequantize_mxfp4(s.q, s.q_scale).to(torch.float8_e4m3fn)

    def logits():
        return dg.fp8_mqa_logits(q, kv, s.weights, ks, ke, clean_logits=False)

    return logits, ks


def _agreement(out: torch.Tensor, problem: Problem, rows: list[int], shift: torch.Tensor | None) -> float:
    """calc_diff of the peer's in-window cells of `rows` against the op's (set 0's out); `shift`: the
    peer's column of each row's window start (non-paged keys laid end to end), None when columns match."""
    mine, theirs = [], []
    for r in rows:
        _, start, end = problem.shape.rows[r]
        col = start if shift is None else int(shift[r])
        mine.append(problem.sets[0].out[r, start:end])
        theirs.append(out[r, col : col + end - start].float())
    return calc_diff(torch.cat(theirs), torch.cat(mine))


def _compact_us(problem: Problem, next_n: int, num_sms: int, variant, device: torch.device, repeats: int,
                on_plan: Callable[[], object]) -> dict:  # fmt: skip
    """The op as the DeepGEMM adapter runs it, on set 0: compact_schedule (DeepGEMM's metadata shape)
    and pa_mqa_logits_compact, each timed as the peer is, the latter alternated call by call with the op
    on set 0's plan (`on_plan`), so that their ratio is not one of clocks; its logits must equal the plan
    path's."""
    s, shape = problem.sets[0], problem.shape
    lens = problem.local_ends.view(shape.batch, next_n)
    out = torch.empty_like(s.out)

    def meta():
        return compact_schedule(lens, num_sms)

    schedule = meta()

    def logits():
        return pa_mqa_logits_compact(s.q, s.q_scale, s.kv_cache, s.kv_scale, problem.block_tables, s.weights, lens,
                                     schedule, shape.max_seq_len, variant=variant, out=out)  # fmt: skip

    plan_s, compact_s = alternated_medians([on_plan, logits], device, repeats)
    timing = {
        "compact_meta_us": statistics.median(call_seconds([meta], device, repeats)) * 1e6,
        "compact_op_us": compact_s * 1e6,
        "compact_over_plan": compact_s / plan_s,
    }
    for r in range(0, shape.total_q, max(1, shape.total_q // 8)):
        end = shape.rows[r][2]
        if not torch.equal(out[r, :end], s.out[r, :end]):
            raise AssertionError(f"{shape.label}: row {r}: the op on the compact schedule differs from the op on a plan")
    return timing


def refusal(e: BaseException) -> str:
    """A peer's refusal in one short line: its message's first line, source paths cut to their file name
    (DeepGEMM's asserts name the header they sit in by its build directory's path)."""
    text = str(e).strip()
    if not text:
        return type(e).__name__
    return re.sub(r"[^\s():]*/([^/\s():]+:\d+)", r"\1", text.splitlines()[0])[:120]


def peer_row(dg: ModuleType, problem: Problem, device: torch.device, repeats: int, rows: list[int], variant,
             on_plan: Callable[[], object]) -> dict:  # fmt: skip
    """The peer's medians on the row's shape (metadata and logits; metadata only on the paged path)
    and its agreement with the op on `rows` (the op's set 0 output must be current); on the paged path
    the op through the adapter's schedule too (_compact_us, against `on_plan`, the op on set 0's plan).
    A shape the peer refuses gives its message under peer_error."""
    num_sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
    next_n = decode_next_n(problem.shape) if problem.shape.table.startswith(("decode", "deepgemm")) else None
    ours = {} if next_n is None else _compact_us(problem, next_n, num_sms, variant, device, repeats, on_plan)
    try:
        if next_n is not None:
            meta, logits = _paged_call(dg, problem, next_n, num_sms)
            meta_us, shift = statistics.median(call_seconds([meta], device, repeats)) * 1e6, None
        else:
            logits, shift = _flat_call(dg, problem)
            meta_us = None
        op_us = statistics.median(call_seconds([logits], device, repeats)) * 1e6
        diff = _agreement(logits(), problem, rows, shift)
    except (RuntimeError, AssertionError) as e:  # DeepGEMM's host asserts raise RuntimeError
        return {**ours, "peer_error": refusal(e)}
    return {**ours, "peer_meta_us": meta_us, "peer_op_us": op_us, "peer_diff": diff}
