"""The floors hold: a folder imports only from the floors below it, the agent never reaches chamber/ or simulator/,
no module imports itself back through another (issue 20: "no import cycle anywhere"), no module is over 600 lines.

Read from the source with ast, so an import inside a function counts as much as one at the top: a late import
hides a cycle from Python at import time, not from a reader."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ["firmware_bridge", "simulator", "chamber", "calibration", "protocols", "agent", "bench_cli"]
MAX_LINES = 600
OVER_THE_LIMIT: set[str] = set()  # bench_cli.py was the last (1,417 lines); now parsing and rendering only


def _modules() -> dict[str, Path]:
    found = {}
    for top in FLOORS:
        paths = [ROOT / f"{top}.py"] if top == "bench_cli" else sorted((ROOT / top).rglob("*.py"))
        for p in paths:
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = p
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return _imports(_modules())


def _floor(module: str) -> int:
    return FLOORS.index(module.split(".")[0])


def test_every_import_goes_down_the_floors(graph):
    upward = sorted((m, d) for m, deps in graph.items() for d in deps if _floor(d) > _floor(m))
    assert upward == []


def test_the_agent_reaches_no_chamber_or_simulator_module(graph):
    reached = sorted((m, d) for m, deps in graph.items() if m.startswith("agent")
                     for d in deps if d.split(".")[0] in ("chamber", "simulator"))
    assert reached == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), ignoring a package's edge to its own
    submodules (an __init__ that re-exports them is not a cycle a reader walks)."""
    edges = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_anywhere(graph):
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"agent": {"agent.loop"}, "agent.loop": {"agent"}}) == []  # package re-export


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules().values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert set(long) <= OVER_THE_LIMIT, long
