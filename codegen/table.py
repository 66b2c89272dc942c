"""Load and validate instances.yaml.

Every error names the file, line and column, the key, what was expected and what was found, so
a kernel engineer editing the table is pointed at the exact cell to fix. A row the templates
cannot compile is refused here, not by the first JIT build: integers outside int32, an
instance over a budget its arch computes, a flag its compiler rejects, a non-finite tolerance.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import yaml
from yaml.constructor import SafeConstructor

from .flags import rejected_flags
from .layouts import LAYOUTS

SUPPORTED_HEADS = (32, 64)
SUPPORTED_HEAD_DIMS = (64, 128)
SUPPORTED_PAGE_SIZES = (16, 32, 64, 128)
# family -> (target pattern, what it means); the target names the compilation pass of the body.
TARGETS = {
    "host": (r"host", "'host'"),
    "cuda": (r"sm_\d+a?", "sm_<NN> or sm_<NN>a"),
    "hip": (r"gfx[0-9a-f]+", "gfx<NNN>"),
}
FAMILIES = tuple(TARGETS)
SCALE_LAYOUTS = tuple(LAYOUTS)
# What an arch's body may write beyond fp32 cells at column t (KernelArgs out_bf16, out_from_start):
# its traits' WRITES_BF16 / WRITES_FROM_START, and the manifest's for the runtime and the tests.
OUT_FORMS = ("bf16", "from_start")
# The bound of an instance whose products and accumulation are exact in fp32 (docs/semantics.md).
DEFAULT_ATOL = 1e-2
DEFAULT_RTOL = 2e-5
# Every integer of an instance reaches C++ as an `int` (template arguments, constexprs).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Budget `use` expressions: Jinja2 expressions, an undefined name is an error.
_EXPRESSIONS = jinja2.Environment(undefined=jinja2.StrictUndefined)


# Instance columns besides an arch's tunables that `bench --tune` may sweep, with the bounds the loader
# holds them to.
SWEPT_COLUMNS = {"cta_resident": (1, INT32_MAX), "setup_tokens": (0, INT32_MAX)}


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# An arch record's `isa` limits, held by `mxlogits-gen --isa` against every kernel of the device pass:
# key -> (the report's attribute, its column, whether the limit is a minimum).
ISA_LIMITS = {
    "max_vgprs": ("vgprs", "VGPRs", False),
    "max_agprs": ("agprs", "AGPRs", False),
    "max_sgprs": ("sgprs", "SGPRs", False),
    "max_lds_bytes": ("lds", "LDS bytes", False),
    "min_occupancy": ("occupancy", "waves/SIMD", True),
}


# An arch record's `ptxas` limits, held by `mxlogits-gen --ptxas` against every function of the arch's
# instance TUs: key -> {attribute of the report's Function it bounds: what ptxas calls it}.
PTXAS_LIMITS = {
    "max_stack_bytes": {"stack": "bytes stack frame"},
    "max_spill_bytes": {"spill_stores": "bytes spill stores", "spill_loads": "bytes spill loads"},
}


class TableError(ValueError):
    """A defect in instances.yaml, located to file:line."""


@dataclass(frozen=True)
class Table:
    heads: int
    head_dim: int
    page_size: int


@dataclass(frozen=True)
class Tunable:
    """An instance key an arch declares (pipeline stages, warpgroups, ...): an integer in
    [minimum, maximum] that flows into the instance's traits as `static constexpr int <name>`."""

    name: str
    default: int
    minimum: int
    maximum: int


@dataclass(frozen=True)
class Budget:
    """A limit the arch's templates read (`budgets.<name>`) and its body static_asserts each
    instance against. `use`, when given, is what one instance needs: an expression over its
    columns, its tunables, heads, head_dim and page_size, evaluated for every row so that one
    over the limit is refused with its YAML line."""

    name: str
    limit: int
    use: str | None
    line: int = field(compare=False)
    column: int = field(compare=False)


@dataclass(frozen=True)
class Isa:
    """What the device pass of a hip arch must produce (checked by `mxlogits-gen --isa`, not by the
    templates): instructions matching each `expect` regex, and every kernel within `limits`."""

    expect: tuple[str, ...]
    limits: tuple[tuple[str, int], ...]  # (ISA_LIMITS key, value)


@dataclass(frozen=True)
class Ptxas:
    """What ptxas may report of a cuda arch's functions (checked by `mxlogits-gen --ptxas`, not by the
    templates): every function within `limits`, no performance warning matching a `refuse` pattern, and
    every kernel named by `dependents` waiting on the kernel before it (griddepcontrol.wait) before its
    first access to global memory."""

    limits: tuple[tuple[str, int], ...]  # (PTXAS_LIMITS key, value)
    refuse: tuple[tuple[str, str], ...]  # (what the warning means, regex over its text)
    dependents: str | None  # regex over a kernel's demangled name: launched as a programmatic dependent


@dataclass(frozen=True)
class SetupTokens:
    """An arch's default of an instance's setup_tokens, at q_per_block 1 and above."""

    one_row: int
    more_rows: int

    def of(self, q_per_block: int) -> int:
        return self.one_row if q_per_block == 1 else self.more_rows


@dataclass(frozen=True)
class Emulation:
    """How a hip arch's body runs on the host (the emulation build, MXLOGITS_EMULATE=<arch>): the target's
    wave width, which the execution model groups lanes by, and the host compiler's flags. Its CTAs' LDS is
    the arch's budgets.lds_bytes."""

    wave: int
    flags: tuple[str, ...]


@dataclass(frozen=True)
class Arch:
    name: str
    family: str
    target: str
    flags: tuple[str, ...]
    sanitize_flags: tuple[str, ...]  # added to flags by MXLOGITS_SANITIZE=1 (host arches)
    scale_layout: str
    out_forms: tuple[str, ...]  # of OUT_FORMS
    budgets: tuple[Budget, ...]
    tunables: tuple[Tunable, ...]
    setup_tokens: SetupTokens  # what an instance row that names no setup_tokens gets
    isa: Isa | None
    ptxas: Ptxas | None
    emulation: Emulation | None
    line: int = field(compare=False)
    column: int = field(compare=False)

    @property
    def limits(self) -> dict[str, int]:
        return {b.name: b.limit for b in self.budgets}


@dataclass(frozen=True)
class Instance:
    arch: str
    name: str
    q_per_block: int
    block_k: int
    cta_resident: int
    setup_tokens: int  # the schedule's weight of a tile's setup, in tokens of its window (docs/schedule.md)
    default: bool
    atol: float
    rtol: float
    tunables: tuple[tuple[str, int], ...]  # (name, value) of every tunable its arch declares
    line: int = field(compare=False)
    column: int = field(compare=False)


@dataclass(frozen=True)
class InstanceTable:
    path: Path
    table: Table
    arches: tuple[Arch, ...]
    instances: tuple[Instance, ...]

    def instances_of(self, arch: str) -> tuple[Instance, ...]:
        return tuple(i for i in self.instances if i.arch == arch)


class _Reader:
    """Typed access to YAML nodes that remembers where each value came from."""

    def __init__(self, path: Path):
        self.path = path

    def where(self, node: yaml.Node) -> str:
        return f"{self.path}:{node.start_mark.line + 1}:{node.start_mark.column + 1}"

    def error(self, node: yaml.Node, key: str, expected: str, found: object) -> TableError:
        return TableError(f"{self.where(node)}: {key}: expected {expected}, found {found}")

    def value(self, node: yaml.Node):
        return SafeConstructor().construct_object(node, deep=True)

    def mapping(self, node: yaml.Node, key: str, allowed: tuple[str, ...], required: tuple[str, ...]):
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, key, "a mapping", self._describe(node))
        out: dict[str, yaml.Node] = {}
        for knode, vnode in node.value:
            name = self.value(knode)
            if not isinstance(name, str):
                raise self.error(knode, key, "string keys", repr(name))
            if name not in allowed:
                raise self.error(knode, f"{key}.{name}", f"one of {sorted(allowed)}", f"unknown key {name!r}")
            if name in out:
                raise self.error(knode, f"{key}.{name}", "each key once", "a duplicate key")
            out[name] = vnode
        for name in required:
            if name not in out:
                raise self.error(node, f"{key}.{name}", "this key", "it missing")
        return out

    def sequence(self, node: yaml.Node, key: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, key, "a list", self._describe(node))
        return list(node.value)

    def integer(self, node: yaml.Node, key: str, expected: str, ok) -> int:
        v = self.value(node)
        if type(v) is not int or not ok(v):
            raise self.error(node, key, expected, repr(v))
        return v

    def number(self, node: yaml.Node, key: str) -> float:
        v = self.value(node)
        if type(v) not in (int, float) or not (math.isfinite(v) and v > 0):
            raise self.error(node, key, "a finite positive number", repr(v))
        return float(v)

    def string(self, node: yaml.Node, key: str, expected: str = "a non-empty string", choices=None) -> str:
        v = self.value(node)
        if not isinstance(v, str) or not v or (choices is not None and v not in choices):
            raise self.error(node, key, expected, repr(v))
        return v

    def regex(self, node: yaml.Node, key: str, expected: str) -> str:
        pattern = self.string(node, key, expected)
        try:
            re.compile(pattern)
        except re.error as err:
            raise self.error(node, key, "a valid regular expression", f"{pattern!r}: {err}") from None
        return pattern

    def identifier(self, node: yaml.Node, key: str) -> str:
        v = self.value(node)
        if not isinstance(v, str) or not _IDENTIFIER.match(v):
            raise self.error(node, key, "a C identifier", repr(v))
        return v

    def boolean(self, node: yaml.Node, key: str) -> bool:
        v = self.value(node)
        if type(v) is not bool:
            raise self.error(node, key, "true or false", repr(v))
        return v

    @staticmethod
    def _describe(node: yaml.Node) -> str:
        if isinstance(node, yaml.ScalarNode):
            return repr(node.value)
        return "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"


def _table(r: _Reader, node: yaml.Node) -> Table:
    m = r.mapping(node, "table", ("heads", "head_dim", "page_size"), ("heads", "head_dim", "page_size"))
    return Table(
        heads=r.integer(m["heads"], "table.heads", f"one of {list(SUPPORTED_HEADS)}", lambda v: v in SUPPORTED_HEADS),
        head_dim=r.integer(
            m["head_dim"], "table.head_dim", f"one of {list(SUPPORTED_HEAD_DIMS)}", lambda v: v in SUPPORTED_HEAD_DIMS
        ),
        page_size=r.integer(
            m["page_size"],
            "table.page_size",
            f"one of {list(SUPPORTED_PAGE_SIZES)}",
            lambda v: v in SUPPORTED_PAGE_SIZES,
        ),
    )


def _arch(r: _Reader, node: yaml.Node, i: int, templates: Path) -> Arch:
    key = f"arches[{i}]"
    keys = ("name", "family", "target", "flags", "scale_layout", "setup_tokens")
    m = r.mapping(node, key, keys + ("out_forms", "budgets", "sanitize_flags", "tunables", "isa", "ptxas", "emulation"),
                  keys)  # fmt: skip
    name = r.identifier(m["name"], f"{key}.name")
    for part in ("traits.h.j2", "body.h.j2"):
        if not (templates / "arch" / name / part).is_file():
            raise r.error(
                m["name"], f"{key}.name", f"an arch with templates/arch/{name}/{part}", f"no such template for {name!r}"
            )
    fam = r.string(m["family"], f"{key}.family", f"one of {list(FAMILIES)}", FAMILIES)
    pattern, meaning = TARGETS[fam]
    target = r.string(m["target"], f"{key}.target")
    if not re.fullmatch(pattern, target):
        raise r.error(m["target"], f"{key}.target", f"a {fam} target ({meaning})", repr(target))
    flags = _flags(r, m["flags"], f"{key}.flags", fam, ())
    sanitize = _flags(r, m["sanitize_flags"], f"{key}.sanitize_flags", fam, flags) if "sanitize_flags" in m else ()
    tunables = _tunables(r, m["tunables"], f"{key}.tunables") if "tunables" in m else ()
    if "isa" in m and fam != "hip":
        raise r.error(m["isa"], f"{key}.isa", "isa limits on a hip arch only (its device pass is what --isa reads)",
                      f"them on a {fam} arch")
    if "ptxas" in m and fam != "cuda":
        raise r.error(m["ptxas"], f"{key}.ptxas", "ptxas limits on a cuda arch only (ptxas compiles its pass)",
                      f"them on a {fam} arch")
    if "emulation" in m and fam != "hip":
        raise r.error(m["emulation"], f"{key}.emulation", "an emulation record on a hip arch only (the host "
                      "emulation runs AMD bodies)", f"one on a {fam} arch")
    if "emulation" in m and "lds_bytes" not in [r.value(k) for k, _ in getattr(m.get("budgets"), "value", ())]:
        raise r.error(m["emulation"], f"{key}.emulation", "an arch with budgets.lds_bytes (the LDS of its "
                      "emulated CTAs)", "none")
    return Arch(
        name=name,
        family=fam,
        target=target,
        flags=flags,
        sanitize_flags=sanitize,
        scale_layout=r.string(m["scale_layout"], f"{key}.scale_layout", f"one of {list(SCALE_LAYOUTS)}", SCALE_LAYOUTS),
        out_forms=_out_forms(r, m["out_forms"], f"{key}.out_forms") if "out_forms" in m else (),
        budgets=_budgets(r, m["budgets"], f"{key}.budgets", tunables) if "budgets" in m else (),
        tunables=tunables,
        setup_tokens=_setup_tokens(r, m["setup_tokens"], f"{key}.setup_tokens"),
        isa=_isa(r, m["isa"], f"{key}.isa") if "isa" in m else None,
        ptxas=_ptxas(r, m["ptxas"], f"{key}.ptxas") if "ptxas" in m else None,
        emulation=_emulation(r, m["emulation"], f"{key}.emulation") if "emulation" in m else None,
        line=node.start_mark.line + 1,
        column=node.start_mark.column + 1,
    )


def _out_forms(r: _Reader, node: yaml.Node, key: str) -> tuple[str, ...]:
    """`out_forms: [bf16, from_start]`, each at most once."""
    forms = []
    for j, f in enumerate(r.sequence(node, key)):
        form = r.string(f, f"{key}[{j}]", f"one of {list(OUT_FORMS)}", OUT_FORMS)
        if form in forms:
            raise r.error(f, f"{key}[{j}]", "each form once", f"{form!r} again")
        forms.append(form)
    return tuple(forms)


def _isa(r: _Reader, node: yaml.Node, key: str) -> Isa:
    """`isa: {expect: [regex, ...], max_vgprs: N, ..., min_occupancy: N}`, every key optional."""
    m = r.mapping(node, key, ("expect",) + tuple(ISA_LIMITS), ())
    expect = []
    for j, e in enumerate(r.sequence(m["expect"], f"{key}.expect") if "expect" in m else ()):
        expect.append(r.regex(e, f"{key}.expect[{j}]", "a regular expression over one instruction line"))
    limits = []
    for name, (_, _, at_least) in ISA_LIMITS.items():
        if name in m:
            low = 1 if at_least else 0  # a maximum may be 0 (no AGPRs); a minimum occupancy is a wave or more
            limits.append((name, r.integer(m[name], f"{key}.{name}", f"an integer in [{low}, {INT32_MAX}]",
                                           lambda v, low=low: low <= v <= INT32_MAX)))  # fmt: skip
    return Isa(tuple(expect), tuple(limits))


def _ptxas(r: _Reader, node: yaml.Node, key: str) -> Ptxas:
    """`ptxas: {max_stack_bytes: N, max_spill_bytes: N, refuse: {meaning: regex, ...}, dependents: regex}`,
    every key optional."""
    m = r.mapping(node, key, ("refuse", "dependents") + tuple(PTXAS_LIMITS), ())
    limits = tuple(
        (name, r.integer(m[name], f"{key}.{name}", f"an integer in [0, {INT32_MAX}]", lambda v: 0 <= v <= INT32_MAX))
        for name in PTXAS_LIMITS
        if name in m
    )
    refuse = []
    if "refuse" in m:
        if not isinstance(m["refuse"], yaml.MappingNode):
            raise r.error(m["refuse"], f"{key}.refuse", "a mapping of meaning: regex", r._describe(m["refuse"]))
        for knode, vnode in m["refuse"].value:
            meaning = r.string(knode, f"{key}.refuse", "what the warning means, as a non-empty string")
            if meaning in dict(refuse):
                raise r.error(knode, f"{key}.refuse.{meaning}", "each meaning once", "a duplicate key")
            refuse.append((meaning, r.regex(vnode, f"{key}.refuse.{meaning}", "a regular expression over a warning")))
    dependents = r.regex(m["dependents"], f"{key}.dependents", "a regular expression over a kernel's name") \
        if "dependents" in m else None  # fmt: skip
    return Ptxas(limits, tuple(refuse), dependents)


def _setup_tokens(r: _Reader, node: yaml.Node, key: str) -> SetupTokens:
    """`setup_tokens: {one_row: N, more_rows: N}`: the default at q_per_block 1 and above."""
    m = r.mapping(node, key, ("one_row", "more_rows"), ("one_row", "more_rows"))
    low, high = SWEPT_COLUMNS["setup_tokens"]
    return SetupTokens(*(
        r.integer(m[name], f"{key}.{name}", f"an integer in [{low}, {high}]", lambda v: low <= v <= high)
        for name in ("one_row", "more_rows")
    ))  # fmt: skip


def _emulation(r: _Reader, node: yaml.Node, key: str) -> Emulation:
    """`emulation: {wave: 32 | 64, flags: [...]}`: the host build of a hip arch's body."""
    m = r.mapping(node, key, ("wave", "flags"), ("wave", "flags"))
    return Emulation(
        wave=r.integer(m["wave"], f"{key}.wave", "32 or 64 (lanes of a wave)", lambda v: v in (32, 64)),
        flags=tuple(r.string(f, f"{key}.flags[{j}]") for j, f in enumerate(r.sequence(m["flags"], f"{key}.flags"))),
    )


def _flags(r: _Reader, node: yaml.Node, key: str, family: str, base: tuple[str, ...]) -> tuple[str, ...]:
    """A list of compiler flags the family's compiler accepts (after `base`), when that compiler is here."""
    nodes = r.sequence(node, key)
    flags = tuple(r.string(f, f"{key}[{j}]") for j, f in enumerate(nodes))
    complaint = rejected_flags(family, base + flags)
    if complaint is None:
        return flags
    for j, f in enumerate(nodes):  # name the first flag the compiler rejects on its own
        alone = rejected_flags(family, base + (flags[j],))
        if alone is not None:
            raise r.error(f, f"{key}[{j}]", f"a flag the {family} compiler accepts", f"{flags[j]!r}: {alone}")
    raise r.error(node, key, f"flags the {family} compiler accepts together", complaint)


_INSTANCE_NAMES = ("q_per_block", "block_k", "cta_resident", "heads", "head_dim", "page_size")


def _budgets(r: _Reader, node: yaml.Node, key: str, tunables: tuple[Tunable, ...]) -> tuple[Budget, ...]:
    """`budgets: {name: limit}` or `{name: {limit: N, use: "expression"}}`."""
    if not isinstance(node, yaml.MappingNode):
        raise r.error(node, key, "a mapping of name: positive integer or {limit, use}", r._describe(node))
    positive = f"an integer in [1, {INT32_MAX}]"
    out: list[Budget] = []
    for knode, vnode in node.value:
        name = r.identifier(knode, key)
        bkey = f"{key}.{name}"
        if name in (b.name for b in out):
            raise r.error(knode, bkey, "each budget once", "a duplicate key")
        use = None
        if isinstance(vnode, yaml.MappingNode):
            m = r.mapping(vnode, bkey, ("limit", "use"), ("limit",))
            limit = r.integer(m["limit"], f"{bkey}.limit", positive, lambda v: 1 <= v <= INT32_MAX)
            if "use" in m:
                use = r.string(m["use"], f"{bkey}.use", "an expression string")
                names = _INSTANCE_NAMES + tuple(t.name for t in tunables)
                _evaluate(r, m["use"], f"{bkey}.use", use, dict.fromkeys(names, 1))
        else:
            limit = r.integer(vnode, bkey, f"{positive} or {{limit, use}}", lambda v: 1 <= v <= INT32_MAX)
        out.append(Budget(name, limit, use, knode.start_mark.line + 1, knode.start_mark.column + 1))
    return tuple(sorted(out, key=lambda b: b.name))


def _evaluate(r: _Reader, node: yaml.Node, key: str, use: str, names: dict[str, int]) -> int:
    """The integer value of the budget expression `use` (at `node`) with `names` bound."""
    try:
        value = _EXPRESSIONS.compile_expression(use)(**names)
    except (jinja2.TemplateError, ArithmeticError, TypeError) as e:
        raise r.error(node, key, f"an integer expression over {sorted(names)}", f"{use!r}: {e}") from None
    if type(value) is not int:
        raise r.error(node, key, "an expression with an integer value", f"{use!r} = {value!r}")
    return value


_RESERVED_KEYS = ("arch", "name", "q_per_block", "block_k", "cta_resident", "setup_tokens", "default", "atol", "rtol")


def _tunables(r: _Reader, node: yaml.Node, key: str) -> tuple[Tunable, ...]:
    """`tunables: {stages: {default: 4, min: 1, max: 16}, ...}`: integer instance keys of this arch."""
    if not isinstance(node, yaml.MappingNode):
        raise r.error(node, key, "a mapping of name: {default, min, max}", r._describe(node))
    out = []
    for knode, vnode in node.value:
        name = r.identifier(knode, key)
        if name in _RESERVED_KEYS or name in (t.name for t in out):
            raise r.error(knode, f"{key}.{name}", "a name that is not an instance column nor declared twice", repr(name))
        m = r.mapping(vnode, f"{key}.{name}", ("default", "min", "max"), ("default", "min", "max"))
        int32 = f"an integer in [{INT32_MIN}, {INT32_MAX}]"
        lo = r.integer(m["min"], f"{key}.{name}.min", int32, lambda v: INT32_MIN <= v <= INT32_MAX)
        hi = r.integer(m["max"], f"{key}.{name}.max", f"an integer in [min ({lo}), {INT32_MAX}]",
                       lambda v: lo <= v <= INT32_MAX)
        default = r.integer(m["default"], f"{key}.{name}.default", f"an integer in [{lo}, {hi}]", lambda v: lo <= v <= hi)
        out.append(Tunable(name, default, lo, hi))
    return tuple(out)


def _instance(r: _Reader, node: yaml.Node, i: int, table: Table, arches: dict[str, Arch]) -> Instance:
    key = f"instances[{i}]"
    required = ("arch", "name", "q_per_block", "block_k", "cta_resident")
    if not isinstance(node, yaml.MappingNode):
        raise r.error(node, key, "a mapping", r._describe(node))
    arch_node = next((v for k, v in node.value if r.value(k) == "arch"), None)
    if arch_node is None:
        raise r.error(node, f"{key}.arch", "this key", "it missing")
    arch = r.string(arch_node, f"{key}.arch", f"one of the arches {sorted(arches)}", arches)
    declared = arches[arch].tunables
    optional = ("setup_tokens", "default", "atol", "rtol")
    m = r.mapping(node, key, required + optional + tuple(t.name for t in declared), required)
    tunables = tuple(
        (
            t.name,
            r.integer(m[t.name], f"{key}.{t.name}", f"an integer in [{t.minimum}, {t.maximum}]",
                      lambda v, t=t: t.minimum <= v <= t.maximum)
            if t.name in m
            else t.default,
        )
        for t in declared
    )
    page = table.page_size
    count = f"an integer in [1, {INT32_MAX}]"

    def swept(column: str) -> int:
        low, high = SWEPT_COLUMNS[column]
        return r.integer(m[column], f"{key}.{column}", f"an integer in [{low}, {high}]", lambda v: low <= v <= high)

    name = r.identifier(m["name"], f"{key}.name")  # checked in the row's order: name, then q_per_block
    q_per_block = r.integer(m["q_per_block"], f"{key}.q_per_block", count, lambda v: 1 <= v <= INT32_MAX)
    inst = Instance(
        arch=arch,
        name=name,
        q_per_block=q_per_block,
        block_k=r.integer(
            m["block_k"],
            f"{key}.block_k",
            f"a positive multiple of table.page_size ({page}) up to {INT32_MAX}",
            lambda v: 0 < v <= INT32_MAX and v % page == 0,
        ),
        cta_resident=swept("cta_resident"),
        setup_tokens=swept("setup_tokens") if "setup_tokens" in m else arches[arch].setup_tokens.of(q_per_block),
        default=r.boolean(m["default"], f"{key}.default") if "default" in m else False,
        atol=r.number(m["atol"], f"{key}.atol") if "atol" in m else DEFAULT_ATOL,
        rtol=r.number(m["rtol"], f"{key}.rtol") if "rtol" in m else DEFAULT_RTOL,
        tunables=tunables,
        line=node.start_mark.line + 1,
        column=node.start_mark.column + 1,
    )
    _within_budgets(r, node, key, inst, table, arches[arch])
    return inst


def _within_budgets(r: _Reader, node: yaml.Node, key: str, inst: Instance, table: Table, arch: Arch) -> None:
    names = dict(
        q_per_block=inst.q_per_block,
        block_k=inst.block_k,
        cta_resident=inst.cta_resident,
        heads=table.heads,
        head_dim=table.head_dim,
        page_size=table.page_size,
        **dict(inst.tunables),
    )
    for b in arch.budgets:
        if b.use is None:
            continue
        need = _evaluate(r, node, key, b.use, names)
        if need > b.limit:
            raise r.error(
                node,
                key,
                f"an instance within budget {b.name} = {b.limit} of arch {arch.name!r} (line {b.line})",
                f"one that needs {need} ({b.use})",
            )


def _cross_checks(path: Path, arches: tuple[Arch, ...], instances: tuple[Instance, ...]) -> None:
    seen_arch: dict[str, Arch] = {}
    for a in arches:
        if a.name in seen_arch:
            raise TableError(
                f"{path}:{a.line}:{a.column}: arches.name: expected a unique arch name, "
                f"found {a.name!r} again (first at line {seen_arch[a.name].line})"
            )
        seen_arch[a.name] = a
    by_name: dict[tuple[str, str], Instance] = {}
    by_shape: dict[tuple[str, int, int], Instance] = {}
    for inst in instances:
        first = by_name.setdefault((inst.arch, inst.name), inst)
        if first is not inst:
            raise TableError(
                f"{path}:{inst.line}:{inst.column}: instances.name: expected a unique (arch, name), "
                f"found ({inst.arch!r}, {inst.name!r}) again (first at line {first.line})"
            )
        first = by_shape.setdefault((inst.arch, inst.q_per_block, inst.block_k), inst)
        if first is not inst:
            raise TableError(
                f"{path}:{inst.line}:{inst.column}: instances.(q_per_block, block_k): expected one instance per "
                f"(q_per_block, block_k) of arch {inst.arch!r}, found ({inst.q_per_block}, {inst.block_k}) "
                f"in both {first.name!r} (line {first.line}) and {inst.name!r}"
            )
    for a in arches:
        defaults = [i for i in instances if i.arch == a.name and i.default]
        if len(defaults) != 1:
            found = ", ".join(f"{i.name!r} (line {i.line})" for i in defaults) or "none"
            raise TableError(
                f"{path}:{a.line}:{a.column}: instances.default: expected exactly one default instance of arch "
                f"{a.name!r}, found {found}"
            )


def load_table(path: Path, templates: Path) -> InstanceTable:
    """Parse and validate `path`; `templates` is where each arch's body must exist."""
    path = Path(path)
    r = _Reader(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TableError(f"{path}: expected a readable instance table (UTF-8 YAML), found: {e}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        what = " ".join(part for part in (e.context, e.problem) if part)
        raise TableError(f"{where}: expected valid YAML, found a syntax error: {what}") from None
    except yaml.YAMLError as e:
        raise TableError(f"{path}: expected valid YAML, found: {e}") from None
    if root is None:
        raise TableError(
            f"{path}:1:1: (top level): expected a mapping with table, arches, instances, found an empty file"
        )
    top = r.mapping(root, "(top level)", ("table", "arches", "instances"), ("table", "arches", "instances"))
    table = _table(r, top["table"])
    arches = tuple(_arch(r, n, i, Path(templates)) for i, n in enumerate(r.sequence(top["arches"], "arches")))
    by_name = {a.name: a for a in arches}
    instances = tuple(
        _instance(r, n, i, table, by_name) for i, n in enumerate(r.sequence(top["instances"], "instances"))
    )
    _cross_checks(path, arches, instances)
    return InstanceTable(path=path, table=table, arches=arches, instances=instances)
