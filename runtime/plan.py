"""plan_buffers / plan / block_table_width: the schedule (docs/schedule.md), built by the generated
module on the tensors' device (no host sync, CUDA-graph friendly)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .arch import arch_of, normalize_device
from .manifest import MqaLogitsVariant, manifest, resolve_variant
from .ops import ops
from .validate import CheckedWindows, check_plan, validate_enabled

INT32_MAX = 2**31 - 1


class PlanCount:
    """How many plans were built into one set of buffers. A plan is current while the count is
    the one it was built at: a compare on the host, so no device sync and nothing a CUDA graph
    would have to capture. torch.compile traces neither the count nor the compare (a guard on a
    count would recompile every forward): a plan traced with its op is current by construction."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


@dataclass(frozen=True, eq=False)
class MqaLogitsBuffers:
    """Schedule storage for one pool: allocate once, plan into it every forward."""

    variant: MqaLogitsVariant
    device: torch.device
    total_q: int  # most rows a plan into these buffers may cover
    batch: int  # most sequences
    num_ctas: int  # grid of the logits launch
    cta_info: torch.Tensor  # int32 [max_tiles + num_ctas, abi.h kRecordInts]: schedule records
    cta_ranges: torch.Tensor  # int32 [num_ctas, abi.h kRangeInts]: records of each CTA, and a copy of its first
    scratch: torch.Tensor  # int64: the builder's tile cut and weight prefix
    plans: PlanCount = field(default_factory=PlanCount, repr=False)  # shared by copies: same storage


@dataclass(frozen=True, eq=False)
class MqaLogitsPlan:
    """One forward's schedule: valid for the device, variant and windows it was built from, until
    the next plan() into the same buffers overwrites it."""

    buffers: MqaLogitsBuffers
    num_rows: int
    batch: int
    local_ends: torch.Tensor
    local_starts: torch.Tensor | None
    generation: int | None  # buffers.plans.value once this plan was built; None: built under torch.compile
    checked: CheckedWindows | None = None  # the checked mode's windows; None: the op checks nothing more

    @property
    def variant(self) -> MqaLogitsVariant:
        return self.buffers.variant

    @property
    def device(self) -> torch.device:
        return self.buffers.device

    @property
    def num_ctas(self) -> int:
        return self.buffers.num_ctas

    def check_current(self) -> None:
        """Raise unless this is the newest plan built into its buffers (in eager code)."""
        if self.generation is None or torch.compiler.is_compiling():
            return
        now = self.buffers.plans.value
        if self.generation != now:
            raise ValueError(
                f"mxlogits: plan: expected the newest plan of its buffers, found a stale one (plan {self.generation} "
                f"of these buffers, which now hold plan {now}); a plan is valid until the next plan() into the same "
                f"buffers: use that one, or give each live plan its own plan_buffers()"
            )


def count_arg(value, name: str, minimum: int) -> int:
    """`value` as an int in [minimum, INT32_MAX] (what every count of the ABI is), else raise naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"mxlogits: {name}: expected an int, found {type(value).__name__}")
    if not minimum <= value <= INT32_MAX:
        raise ValueError(f"mxlogits: {name}: expected an int in [{minimum}, {INT32_MAX}], found {value}")
    return value


def plan_buffers(
    device: torch.device | str | int,
    total_q: int,
    batch: int,
    variant: str | MqaLogitsVariant | None = None,
    num_ctas: int | None = None,
) -> MqaLogitsBuffers:
    """Allocate the schedule storage for up to `total_q` rows in `batch` sequences.

    `variant`: a name, an MqaLogitsVariant or None (the arch's default). `num_ctas`: the grid
    of the logits launch (default: on a GPU the CTAs the device holds at once, one wave over all
    its SMs; on the host, the variant's cta_resident). Builds the arch's module on first use.
    """
    count_arg(total_q, "total_q", 0)
    count_arg(batch, "batch", 0)
    if num_ctas is not None:
        count_arg(num_ctas, "num_ctas", 1)
    dev = normalize_device(device)
    v = resolve_variant(variant, arch_of(dev))
    sizes = ops(v.arch, dev).schedule_sizes(
        device=dev, num_rows=total_q, batch=batch, q_per_block=v.q_per_block, block_k=v.block_k, num_ctas=num_ctas or 0
    )
    ctas, records, scratch_len, _, record_ints, range_ints = sizes  # the row widths: the module's ABI
    try:
        cta_info = torch.zeros((records, record_ints), dtype=torch.int32, device=dev)
        cta_ranges = torch.zeros((ctas, range_ints), dtype=torch.int32, device=dev)
        scratch = torch.zeros((scratch_len,), dtype=torch.int64, device=dev)
    except RuntimeError as e:  # torch.OutOfMemoryError is one
        size = (records * record_ints + ctas * range_ints) * 4 + scratch_len * 8
        raise RuntimeError(
            f"mxlogits: plan_buffers: the schedule of total_q={total_q}, batch={batch} with {ctas} CTAs needs "
            f"{size} bytes on {dev} ({records} records), which could not be allocated: {e}"
        ) from None
    return MqaLogitsBuffers(v, dev, total_q, batch, ctas, cta_info, cta_ranges, scratch)


def plan(
    cu_seq_q: torch.Tensor | None,
    local_ends: torch.Tensor,
    *,
    buffers: MqaLogitsBuffers,
    total_q: int | None = None,
    local_starts: torch.Tensor | None = None,
    row_to_batch: torch.Tensor | None = None,
    validate: bool | None = None,
) -> MqaLogitsPlan:
    """Build this forward's schedule into `buffers` (one launch at q_per_block 1). The plan is
    valid until the next plan() into the same buffers; the op refuses an older one.

    cu_seq_q     int32 [batch + 1] row offsets of each sequence; read only at q_per_block > 1,
                 where its length sets this forward's batch (at most the buffers' batch).
    local_ends   int32 [>= total_q]: row r reads KV positions [local_starts[r], local_ends[r]).
    total_q      rows scheduled (default: the buffers' total_q); at q_per_block 1 every one of
                 them is scheduled, so rows outside any live sequence need empty windows.
    local_starts int32 [>= total_q], or None for 0.
    row_to_batch int32 [>= total_q]: block_tables row of each row (a tile uses its first row's);
                 None: the row index at q_per_block 1, the tile's sequence above.
    validate     the checked mode (None: on when MXLOGITS_VALIDATE=1): before the launch, one host sync
                 checks the caller contract and cu_seq_q, and the op given this plan checks every page
                 id its windows read; each error names the row, the argument and the value.
    """
    if validate is not None and not isinstance(validate, bool):
        raise TypeError(f"mxlogits: validate: expected True, False or None, found {type(validate).__name__}")
    if not isinstance(buffers, MqaLogitsBuffers):
        raise TypeError(
            f"mxlogits: buffers: expected MqaLogitsBuffers from plan_buffers(), found {type(buffers).__name__}"
        )
    v = buffers.variant
    num_rows = buffers.total_q if total_q is None else count_arg(total_q, "total_q", 0)
    if num_rows > buffers.total_q:
        raise ValueError(
            f"mxlogits: total_q: these buffers were sized for total_q <= {buffers.total_q}, found {num_rows}; "
            f"allocate larger ones with plan_buffers()"
        )
    batch = buffers.batch
    if v.q_per_block > 1:
        if not isinstance(cu_seq_q, torch.Tensor) or cu_seq_q.dim() != 1:
            raise ValueError(
                f"mxlogits: cu_seq_q: expected an int32 [batch + 1] tensor ({v.name} cuts tiles by sequence), "
                f"found {cu_seq_q if cu_seq_q is None else tuple(cu_seq_q.shape)}"
            )
        batch = cu_seq_q.numel() - 1
        if not 0 <= batch <= buffers.batch:
            raise ValueError(
                f"mxlogits: cu_seq_q: these buffers were sized for batch <= {buffers.batch} ({buffers.batch + 1} "
                f"offsets), found {cu_seq_q.numel()} offsets"
            )
    tensors = {
        "cu_seq_q": cu_seq_q if v.q_per_block > 1 else None,
        "local_ends": local_ends,
        "local_starts": local_starts,
        "row_to_batch": row_to_batch,
    }
    for name, t in tensors.items():
        if t is not None and (not isinstance(t, torch.Tensor) or t.device != buffers.device):
            where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(
                f"mxlogits: {name}: expected a tensor on {buffers.device} (the buffers' device), found {where}"
            )
    schedule = dict(
        cu_seq_q=tensors["cu_seq_q"],
        local_ends=local_ends,
        local_starts=local_starts,
        row_to_batch=row_to_batch,
        cta_info=buffers.cta_info,
        cta_ranges=buffers.cta_ranges,
        scratch=buffers.scratch,
        num_rows=num_rows,
        batch=batch,
        q_per_block=v.q_per_block,
        block_k=v.block_k,
    )
    checked = None
    if validate_enabled() if validate is None else validate:
        # the checks the builder makes, so the host reads valid tensors
        ops(v.arch, buffers.device).check_schedule(**schedule)
        checked = check_plan(
            v.q_per_block, num_rows, batch, tensors["cu_seq_q"], local_ends, local_starts, row_to_batch
        )
    ops(v.arch, buffers.device).build_schedule(**schedule)
    generation = None
    if not torch.compiler.is_compiling():
        buffers.plans.value += 1
        generation = buffers.plans.value
    return MqaLogitsPlan(buffers, num_rows, batch, local_ends, local_starts, generation, checked)


def block_table_width(
    max_seq_len: int,
    variant: str | MqaLogitsVariant | None = None,
    *,
    device: torch.device | str | int | None = None,
) -> int:
    """Columns block_tables needs for windows ending at or before `max_seq_len`: ceil(max_seq_len /
    page_size), what serving stacks allocate, for every variant (no CTA reads a page past its rows'
    windows). Pure arithmetic: no device probe, no build; `variant` and `device` are accepted for the
    callers of the earlier, per-variant rule and change nothing."""
    count_arg(max_seq_len, "max_seq_len", 0)
    del variant, device
    return -(-max_seq_len // manifest().page_size)
