"""The operator's entry points, stated once: each op's name, its arguments (schema type, which ones
it writes) and its return. From this table the launcher's declarations and definitions take their
parameter lists, bindings.cpp its schema strings, and manifest.json the op list the runtime registers
fake implementations from and calls by argument name. Adding an argument touches this table and the
code that uses it."""

from __future__ import annotations

from dataclasses import dataclass

# schema type -> C++ parameter type of the launcher function
CPP_TYPES = {
    "Tensor": "const at::Tensor&",
    "Tensor?": "const std::optional<at::Tensor>&",
    "int": "int64_t",
    "float": "double",
    "bool": "bool",
    "Device": "c10::Device",
}
CPP_RETURNS = {"()": "void", "int[]": "std::vector<int64_t>"}
WIDTH = 120  # the generated C++'s column limit


@dataclass(frozen=True)
class Arg:
    name: str
    type: str  # schema type, a key of CPP_TYPES
    writes: str = ""  # alias set of a tensor the op writes in place ("a" -> Tensor(a!)), "" when read only

    @property
    def schema(self) -> str:
        written = f"({self.writes}!)" if self.writes else ""
        return f"{self.type}{written} {self.name}"

    @property
    def cpp(self) -> str:
        return f"{CPP_TYPES[self.type]} {self.name}"


@dataclass(frozen=True)
class Op:
    name: str
    args: tuple[Arg, ...]
    returns: str  # schema return, a key of CPP_RETURNS
    # True: one kernel per dispatch key (the arch's tensors); False: one function for every key, an
    # op that takes no tensor (schedule_sizes: a device)
    dispatched: bool = True

    @property
    def schema(self) -> str:
        return f"{self.name}({', '.join(a.schema for a in self.args)}) -> {self.returns}"

    def signature(self) -> str:
        """The C++ declarator `ret name(params)`, the parameters wrapped at WIDTH under the first one."""
        head = f"{CPP_RETURNS[self.returns]} {self.name}("
        pieces = [f"{a.cpp}," for a in self.args[:-1]] + [f"{self.args[-1].cpp})"]
        lines = [head + pieces[0]]
        for piece in pieces[1:]:
            if len(lines[-1]) + 1 + len(piece) <= WIDTH - 2:  # room for the ";" or " {" that follows
                lines[-1] += " " + piece
            else:
                lines.append(" " * len(head) + piece)
        return "\n".join(lines)

    def schema_literal(self, indent: int) -> str:
        """The schema as adjacent C++ string literals, one a line at `indent` columns, wrapped at WIDTH
        between arguments."""
        args = [a.schema for a in self.args]
        pieces = [f"{self.name}({args[0]},", *(f"{a}," for a in args[1:-1]), f"{args[-1]}) -> {self.returns}"]
        lines = [pieces[0]]
        for piece in pieces[1:]:
            if indent + len(lines[-1]) + len(piece) + 4 <= WIDTH - 2:  # quotes, the space, and ");" after it
                lines[-1] += " " + piece
            else:
                lines[-1] += " "
                lines.append(piece)
        return f"\n{' ' * indent}".join(f'"{line}"' for line in lines)


def _args(spec: str, writes: dict[str, str] | None = None) -> tuple[Arg, ...]:
    """'Tensor? cu_seq_q, int batch' -> Args; `writes` names the tensors written, with their alias set."""
    out = []
    for item in spec.split(","):
        kind, name = item.split()
        out.append(Arg(name, kind, (writes or {}).get(name, "")))
    return tuple(out)


_SCHEDULE = (
    "Tensor? cu_seq_q, Tensor local_ends, Tensor? local_starts, Tensor? row_to_batch, Tensor cta_info, "
    "Tensor cta_ranges, Tensor scratch, int num_rows, int batch, int q_per_block, int block_k"
)
_LOGITS_INPUTS = (
    "Tensor q, Tensor q_scale, Tensor kv_cache, Tensor kv_scale, Tensor block_tables, Tensor weights, Tensor cta_info, "
    "Tensor cta_ranges, Tensor local_ends, Tensor? local_starts"
)

OPS = (
    Op(
        "schedule_sizes",
        _args("Device device, int num_rows, int batch, int q_per_block, int block_k, int num_ctas"),
        "int[]",
        dispatched=False,
    ),
    Op("build_schedule", _args(_SCHEDULE, {"cta_info": "a", "cta_ranges": "b", "scratch": "c"}), "()"),
    Op("check_schedule", _args(_SCHEDULE), "()"),  # build_schedule's checks alone: it writes nothing
    Op(
        "pa_mqa_logits_mxfp4",
        _args(f"{_LOGITS_INPUTS}, Tensor out, int num_rows, int max_seq_len, float weight_scale, "
              "bool out_from_start, int q_per_block, int block_k", {"out": "a"}),  # fmt: skip
        "()",
    ),
    Op(
        "quantize_mxfp4_rows",
        _args("Tensor x, Tensor codes, Tensor scales, int q_per_block, int block_k", {"codes": "a", "scales": "b"}),
        "()",
    ),
    Op(
        "quantize_mxfp4_cache",
        _args("Tensor x, Tensor slot_mapping, Tensor kv_cache, Tensor kv_scale, int q_per_block, int block_k",
              {"kv_cache": "a", "kv_scale": "b"}),  # fmt: skip
        "()",
    ),
    Op(
        "build_compact_schedule",
        _args("Tensor context_lens, Tensor schedule_meta, int next_n, int num_ctas, int setup_pages, int q_per_block, "
              "int block_k",
              {"schedule_meta": "a"}),  # fmt: skip
        "()",
    ),
    Op(
        "pa_mqa_logits_compact",
        _args("Tensor q, Tensor q_scale, Tensor kv_cache, Tensor kv_scale, Tensor block_tables, Tensor weights, "
              "Tensor context_lens, Tensor schedule_meta, Tensor out, int next_n, int setup_pages, int max_seq_len, "
              "float weight_scale, int q_per_block, int block_k", {"out": "a"}),  # fmt: skip
        "()",
    ),
    Op(
        "check_compact_logits",
        _args("Tensor q, Tensor q_scale, Tensor kv_cache, Tensor kv_scale, Tensor block_tables, Tensor weights, "
              "Tensor context_lens, Tensor schedule_meta, Tensor? out, int next_n, int setup_pages, int max_seq_len, "
              "int q_per_block, int block_k"),  # fmt: skip
        "()",
    ),
    # pa_mqa_logits_mxfp4's checks alone; out may be absent (the checks made before allocating it)
    Op(
        "check_logits",
        _args(f"{_LOGITS_INPUTS}, Tensor? out, int num_rows, int max_seq_len, bool out_from_start, int q_per_block, "
              "int block_k"),
        "()",
    ),
)
BY_NAME = {op.name: op for op in OPS}


def manifest_ops() -> dict[str, dict]:
    """manifest.json's op list: each op's schema, its argument names in order and its return."""
    return {op.name: {"schema": op.schema, "args": [a.name for a in op.args], "returns": op.returns} for op in OPS}
