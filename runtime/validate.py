"""The checked mode (MXLOGITS_VALIDATE=1, or plan(validate=True)): on the host, with one
synchronization per call, everything the fast path trusts — the caller contract of docs/contract.md,
cu_seq_q non-decreasing, every page id a window reads — checked before any launch. Each error
names the argument, the row and the value. For a caller chasing a bug: it syncs, so it is off by
default and refused under CUDA-graph capture."""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

import torch

VALIDATE_ENV = "MXLOGITS_VALIDATE"


def validate_enabled() -> bool:
    return os.environ.get(VALIDATE_ENV, "0").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class CheckedWindows:
    """The rows a plan schedules with a non-empty window, on the host (int64 vectors): what the
    op checks against max_seq_len and block_tables."""

    rows: torch.Tensor
    starts: torch.Tensor  # clamped at 0: a negative start reads from 0
    ends: torch.Tensor
    seqs: torch.Tensor  # block_tables row the row reads


def _refuse_capture(device: torch.device) -> None:
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise ValueError(
            f"mxlogits: validate: the checked mode synchronizes with {device}, which CUDA-graph capture forbids; "
            f"capture with validate=False (and {VALIDATE_ENV} unset), check the same inputs outside the graph"
        )


def _host(tensors: dict[str, torch.Tensor | None], n: dict[str, int]) -> dict[str, list[int] | None]:
    """The first n[name] entries of each tensor on the host, in one synchronization."""
    present = {name: t[: n[name]] for name, t in tensors.items() if t is not None}
    if not present:
        return dict.fromkeys(tensors)
    flat = torch.cat([t.to(torch.int64) for t in present.values()]).cpu().tolist()
    out: dict[str, list[int] | None] = dict.fromkeys(tensors)
    i = 0
    for name, t in present.items():
        out[name] = flat[i : i + t.numel()]
        i += t.numel()
    return out


def _cu_seq_q(cu: list[int], num_rows: int) -> None:
    if cu[0] < 0:
        raise ValueError(f"mxlogits: cu_seq_q[0] = {cu[0]}: expected a row offset >= 0")
    for b in range(1, len(cu)):
        if cu[b] < cu[b - 1]:
            raise ValueError(
                f"mxlogits: cu_seq_q[{b}] = {cu[b]}: expected >= cu_seq_q[{b - 1}] = {cu[b - 1]} "
                f"(row offsets of sequences are non-decreasing)"
            )
    if cu[-1] > num_rows:
        raise ValueError(
            f"mxlogits: cu_seq_q[{len(cu) - 1}] = {cu[-1]}: expected <= total_q = {num_rows} "
            f"(caller contract 3: the sequences' rows are rows of the plan)"
        )


def _window(starts: list[int] | None, ends: list[int], r: int) -> str:
    return f"[{starts[r] if starts else 0}, {ends[r]})"


def check_plan(
    q_per_block: int,
    num_rows: int,
    batch: int,
    cu_seq_q: torch.Tensor | None,
    local_ends: torch.Tensor,
    local_starts: torch.Tensor | None,
    row_to_batch: torch.Tensor | None,
) -> CheckedWindows:
    """Contracts 2 and 3 and cu_seq_q of a plan's inputs (already shape-checked); returns the
    windows the op checks against its own inputs."""
    _refuse_capture(local_ends.device)
    cut = q_per_block > 1
    host = _host(
        {"cu_seq_q": cu_seq_q if cut else None, "local_ends": local_ends, "local_starts": local_starts,
         "row_to_batch": row_to_batch},
        {"cu_seq_q": batch + 1, "local_ends": num_rows, "local_starts": num_rows, "row_to_batch": num_rows},
    )
    cu, ends, starts, rtb = host["cu_seq_q"], host["local_ends"], host["local_starts"], host["row_to_batch"]
    if cut:
        _cu_seq_q(cu, num_rows)
    checked: list[tuple[int, int, int, int]] = []
    for r in range(num_rows):
        start = max(starts[r], 0) if starts else 0
        if ends[r] <= start:
            continue
        if cut:
            if not cu[0] <= r < cu[-1]:
                raise ValueError(
                    f"mxlogits: local_ends[{r}] = {ends[r]}: row {r} belongs to no sequence of cu_seq_q (its rows are "
                    f"[{cu[0]}, {cu[-1]})), so its window must be empty (caller contract 2), found "
                    f"{_window(starts, ends, r)}"
                )
            owner = bisect.bisect_right(cu, r) - 1  # the sequence holding row r
            first = cu[owner] + (r - cu[owner]) // q_per_block * q_per_block
        else:
            owner = first = r
        seq = rtb[first] if rtb else owner
        if rtb and rtb[r] != seq:
            raise ValueError(
                f"mxlogits: row_to_batch[{r}] = {rtb[r]}: expected row_to_batch[{first}] = {seq}: rows {first} and "
                f"{r} share a tile (q_per_block {q_per_block}), which reads the keys of its first row's sequence"
            )
        if not 0 <= seq < batch:
            where = f"row_to_batch[{r}] = {seq}" if rtb else f"row {r}"
            raise ValueError(
                f"mxlogits: {where}: expected a sequence in [0, {batch}) for row {r}, whose window "
                f"{_window(starts, ends, r)} is not empty (caller contract 2: only a row with an empty window may "
                f"belong to no sequence)"
            )
        checked.append((r, start, ends[r], seq))
    columns = torch.tensor(checked, dtype=torch.int64).reshape(-1, 4).T
    return CheckedWindows(*columns)


def check_launch(
    windows: CheckedWindows, block_tables: torch.Tensor, num_pages: int, page_size: int, max_seq_len: int
) -> None:
    """Contract 1 and every page id a window reads (block_tables already shape-checked)."""
    _refuse_capture(block_tables.device)
    late = (windows.ends > max_seq_len).nonzero()
    if late.numel():
        i = int(late[0])
        raise ValueError(
            f"mxlogits: local_ends[{int(windows.rows[i])}] = {int(windows.ends[i])}: expected <= max_seq_len = "
            f"{max_seq_len} (caller contract 1: windows end at or before max_seq_len)"
        )
    if windows.rows.numel() == 0:
        return
    table = block_tables.cpu()  # the one synchronization
    first, last = windows.starts // page_size, (windows.ends - 1) // page_size
    # Columns each sequence's windows read: +1 at a window's first column, -1 past its last.
    seqs_used = int(windows.seqs.max()) + 1
    marks = torch.zeros((seqs_used, table.shape[1] + 1), dtype=torch.int64)
    width = marks.shape[1]
    marks.view(-1).index_add_(0, windows.seqs * width + first, torch.ones_like(first))
    marks.view(-1).index_add_(0, windows.seqs * width + last + 1, -torch.ones_like(first))
    read = marks.cumsum(1)[:, :-1] > 0
    ids = table[:seqs_used].to(torch.int64)
    bad = (read & ((ids < 0) | (ids >= num_pages))).nonzero()
    if bad.numel() == 0:
        return
    b, col = (int(v) for v in bad[0])
    i = int(((windows.seqs == b) & (first <= col) & (last >= col)).nonzero()[0])
    raise ValueError(
        f"mxlogits: block_tables[{b}, {col}] = {int(ids[b, col])}: expected a page id in [0, {num_pages}) (the pages "
        f"of kv_cache), read by row {int(windows.rows[i])} for tokens [{col * page_size}, {(col + 1) * page_size}) "
        f"of its window [{int(windows.starts[i])}, {int(windows.ends[i])})"
    )
