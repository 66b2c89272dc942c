"""The rooms' walls, read from the sources' imports: the generator (mxlogits_codegen) imports nothing of
the runtime (nor torch), so it runs where torch is absent; the runtime imports the generator only inside
`bench --tune`, the one tool that renders instance tables; the op core imports no bench module (only
the command line, the demo's timing and the old paths' shims do); no module imports a private name of
another; and the runtime's modules import each other without a circle."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from support.checkout import ROOT

PACKAGES = {"mxlogits": ROOT / "runtime", "mxlogits_codegen": ROOT / "codegen"}
# Importers of mxlogits.bench outside it: the command line, the demo (it times its calls with
# bench.timing), and the old module paths kept for one release.
BENCH_USERS = {"mxlogits.__main__", "mxlogits.demo", "mxlogits.bench_timing"}


@dataclass(frozen=True)
class Import:
    importer: str
    module: str  # absolute
    names: tuple[str, ...]  # what `from module import ...` takes; () for `import module`
    in_function: bool


def modules(package: str) -> dict[str, Path]:
    root = PACKAGES[package]
    return {
        ".".join((package, *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"): path
        for path in sorted(root.rglob("*.py"))
    }


def imports_of(name: str, path: Path) -> list[Import]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(name, a.name, (), in_function) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append(Import(name, module, tuple(a.name for a in node.names), in_function))
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return found


ALL = {**modules("mxlogits"), **modules("mxlogits_codegen")}
IMPORTS = [i for name, path in ALL.items() for i in imports_of(name, path)]


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_generator_imports_nothing_of_the_runtime_nor_torch():
    wrong = [i for i in IMPORTS if within(i.importer, "mxlogits_codegen")
             and (within(i.module, "mxlogits") or within(i.module, "torch"))]  # fmt: skip
    assert wrong == []


def test_the_runtime_imports_the_generator_only_inside_bench_tune():
    found = [i for i in IMPORTS if within(i.importer, "mxlogits") and within(i.module, "mxlogits_codegen")]
    assert found and all(i.importer == "mxlogits.bench.tune" and i.in_function for i in found), found


def test_the_op_core_imports_no_bench_module():
    wrong = [i for i in IMPORTS if within(i.module, "mxlogits.bench") and not within(i.importer, "mxlogits.bench")
             and i.importer not in BENCH_USERS]  # fmt: skip
    assert wrong == []
    # and the op's own modules (what serving imports) are among those checked
    assert {"mxlogits.op", "mxlogits.plan", "mxlogits.build", "mxlogits.integrations.indexer"} <= set(ALL)


def test_no_module_imports_a_private_name_of_another():
    wrong = [i for i in IMPORTS if i.module in ALL and any(n.startswith("_") for n in i.names)]
    assert wrong == []


def test_the_runtime_modules_import_each_other_without_a_circle():
    """Every import counts, those inside functions too (bench.py once reached bench_tune that way)."""
    graph: dict[str, set[str]] = {name: set() for name in ALL}
    for i in IMPORTS:
        targets = [i.module] + [f"{i.module}.{n}" for n in i.names]  # `from . import x` names a module
        graph[i.importer] |= {t for t in targets if t in ALL and t != i.importer}
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            assert state.get(nxt) != 1, f"import circle: {' -> '.join(path[path.index(nxt):] + [node, nxt])}"
            if nxt not in state:
                walk(nxt, path + [node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [])
