"""The package's layering, read from the source: every import (at the top of a module or inside a
function) of every module of ``tapejit`` and ``codegen`` (installed as ``tapejit.codegen``) is an
edge of the import graph. The graph has no cycle, and each folder imports only the folders its
``__init__`` docstring allows (the pipeline's order: core, ad, front end, passes, codegen,
runtime, tools)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path) -> str:
    """The installed module name of a source file (``codegen/x.py`` is ``tapejit.codegen.x``)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "codegen":
        parts = ["tapejit", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def sources() -> dict[str, Path]:
    files = [*ROOT.glob("tapejit/**/*.py"), *ROOT.glob("codegen/**/*.py")]
    return {module_name(p): p for p in files if "__pycache__" not in p.parts}


def imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The tapejit modules ``path`` imports: ``from P import a`` is ``P.a`` when that is a module
    (``from tapejit.ad import autodiff``), else ``P``."""
    mod = module_name(path)
    package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                full = f"{target}.{a.name}"
                out.add(full if full in modules else target)
    return {m for m in out if m in modules and m != mod}


def graph() -> dict[str, set[str]]:
    modules = sources()
    return {m: imports(p, modules) for m, p in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


#: Each layer and the layers it may import (besides itself). A module's layer is the longest
#: prefix of its name listed here. ``tapejit.progress`` (compile-time progress and logging)
#: imports nothing of tapejit and may be imported from anywhere.
ALLOWED = {
    "tapejit.core": set(),
    "tapejit.ad": {"tapejit.core"},
    "tapejit.passes": {"tapejit.core", "tapejit.ad"},
    "tapejit.frontend": {"tapejit.core", "tapejit.ad", "tapejit.passes"},
    "tapejit.codegen": {"tapejit.core"},
    "tapejit.transforms": {"tapejit.core", "tapejit.ad", "tapejit.frontend"},
    "tapejit.pipeline": {"tapejit.core", "tapejit.ad", "tapejit.passes", "tapejit.codegen",
                         "tapejit.transforms"},  # fmt: skip
    "tapejit.runtime": {"tapejit.core", "tapejit.ad", "tapejit.frontend", "tapejit.passes",
                        "tapejit.codegen", "tapejit.transforms", "tapejit.pipeline"},  # fmt: skip
    "tapejit.api": {"tapejit.core", "tapejit.ad", "tapejit.frontend", "tapejit.passes",
                    "tapejit.codegen", "tapejit.transforms", "tapejit.pipeline",
                    "tapejit.runtime"},  # fmt: skip
    "tapejit.vmap": {"tapejit.frontend", "tapejit.api"},
    "tapejit.tools": {"tapejit"},  # anything
    "tapejit": {"tapejit"},  # the package's __init__: the public names
}
ANYWHERE = {"tapejit.progress"}


def layer(module: str) -> str:
    best = ""
    for name in ALLOWED:
        if (module == name or module.startswith(name + ".")) and len(name) > len(best):
            best = name
    return best


def test_every_module_belongs_to_a_layer():
    missing = [m for m in sources() if not layer(m) and m not in ANYWHERE]
    assert not missing, f"modules outside every layer of ALLOWED: {missing}"


def test_each_layer_imports_only_what_it_may():
    bad = []
    for mod, targets in graph().items():
        if mod in ANYWHERE:
            assert not targets, f"{mod} must import nothing of tapejit, imports {sorted(targets)}"
            continue
        mine = layer(mod)
        for t in targets:
            if t in ANYWHERE or layer(t) == mine:
                continue
            if not any(layer(t) == a or a == "tapejit" for a in ALLOWED[mine]):
                bad.append(f"{mod} -> {t}")
    assert not bad, "imports against the layering:\n" + "\n".join(sorted(bad))


def test_the_import_graph_has_no_cycle():
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_each_folder_says_what_it_owns_and_may_import():
    for init in [*ROOT.glob("tapejit/**/__init__.py"), *ROOT.glob("codegen/**/__init__.py")]:
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if init.parent.name == "tapejit":
            continue
        assert len(doc) > 80 and "import" in doc, f"{init.relative_to(ROOT)}: no contract docstring"


@pytest.mark.parametrize(
    "line",
    ["from tapejit.frontend import tracing", "from ..frontend import tracing",
     "from tapejit.frontend.tracing import Tracer", "import tapejit.frontend.tracing"],
)  # fmt: skip
def test_the_layering_check_sees_every_import_form(tmp_path, line):
    """Every spelling of an import of the front end from the IR core is caught."""
    modules = sources()
    src = ROOT / "tapejit" / "core" / "_layering_probe.py"
    try:
        src.write_text(line + "\n")
        assert "tapejit.frontend.tracing" in imports(src, modules)
    finally:
        src.unlink()


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
