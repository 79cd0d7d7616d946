"""The package's layers point down: no module imports one that imports it back, directly or
around a loop, and no package (analysis, rules, render, ...) does either. Every import counts,
also those inside functions and under TYPE_CHECKING: a lazy import is still a dependency. No
module is over 600 lines but the probe script, and no function over 100. LAYERS is the order of the
packages, top to bottom: each imports only from the layers below its own, so a new package (or a
new import that points up) fails here until its place is decided. This is the import graph issue 25
asked for, read with the standard library: `python -m pytest tests/test_layers.py -q`."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "vastprobe"
MAX_LINES = 600
MAX_FUNCTION_LINES = 100

#: The packages (and top-level modules), top to bottom. A layer imports only from layers below it.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(f"vastprobe.{name}" for name in layer.split())
    for layer in (
        "__main__",
        "cli",
        "commands",
        "render completion",  # what a command shows; shell completion, imported only when a shell asks
        "fanout rounds",  # the fan-out over a fleet; a watch's rounds
        "pipeline",  # target -> capture -> snapshot -> report
        "report",  # the stage after the rules: a host's report, a run's reports read together
        "rules",
        "analysis",
        "parsers",
        "capture history transport",
        "model probe targets notices",
        "clock eventloop fileio jsonnumbers rule_options units untrusted workers",  # the leaves
    )
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports(path: Path, known: set[str]) -> set[str]:
    """The vastprobe modules `path` imports (a name imported from a package that is a module of its
    own counts as that module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in known:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            out.update(subs or {node.module})
    return out


def package_of(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), or a node importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
            if len(comp) > 1 or v in graph.get(v, ()):
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def graph_of(edges: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for a, b in edges:
        if a != b:
            g.setdefault(a, set()).add(b)
    return g


def module_edges() -> list[tuple[str, str]]:
    mods = modules()
    known = set(mods)
    # a package's face (its __init__) is not a layer of its own: `import vastprobe.model` is a use of model
    return [(a, b) for a, p in mods.items() for b in imports(p, known) if b != "vastprobe"]


def test_no_module_imports_around_a_loop() -> None:
    assert cycles(graph_of(module_edges())) == []


def test_no_package_imports_around_a_loop() -> None:
    edges = [(package_of(a), package_of(b)) for a, b in module_edges()]
    assert cycles(graph_of(edges)) == []


def layer_of(package: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if package in layer), None)


def test_every_package_has_its_layer() -> None:
    packages = {package_of(m) for m in modules()} - {"vastprobe"}
    assert sorted(p for p in packages if layer_of(p) is None) == []


def test_each_layer_imports_only_from_below() -> None:
    up = sorted(
        f"{a} -> {b}"
        for a, b in module_edges()
        if package_of(a) != package_of(b) and (layer_of(package_of(a)) or 0) >= (layer_of(package_of(b)) or 0)
    )
    assert up == []


def test_the_layer_check_can_fail() -> None:
    assert layer_of("vastprobe.report") is not None and layer_of("vastprobe.rules") is not None
    assert layer_of("vastprobe.report") < layer_of("vastprobe.rules")  # type: ignore[operator]
    assert layer_of("vastprobe.nowhere") is None


def test_no_function_is_over_100_lines() -> None:
    long = {
        f"{module_name(p)}:{node.lineno} {node.name}": n
        for p in ROOT.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(), str(p)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES
    }
    assert long == {}


def test_no_module_is_over_600_lines() -> None:
    long = {module_name(p): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_cli_only_builds_the_app() -> None:
    assert len((ROOT / "cli.py").read_text().splitlines()) < 300


def test_a_loop_is_found() -> None:
    """The check can fail: a loop of three, and a package importing itself back through another."""
    assert cycles(graph_of([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])) == [["a", "b", "c"]]
    assert cycles(graph_of([("x", "y")])) == []
