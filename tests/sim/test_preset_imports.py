"""The simulator's modules form no import cycle (at any depth, imports inside functions included), each imports
on its own in a fresh interpreter, and every preset name makes its preset."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from stowage.sim import presets

SIM = Path(presets.__file__).parent


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The ``stowage.sim`` modules ``path`` imports when it runs: every import statement except those under
    ``if TYPE_CHECKING:`` (type hints only, never executed). ``from package import module`` imports the module
    (its package's ``__init__`` runs before any of its modules, so that edge is no cycle of ours)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hinted = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
              and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
              for stmt in block.body for node in ast.walk(stmt)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in hinted:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("stowage.sim"):
            named = {f"{node.module}.{a.name}" for a in node.names} & modules  # `from stowage.sim import presets`
            found.update(named or {node.module})
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("stowage.sim"))
    return found


def _graph() -> dict[str, set[str]]:
    modules = {"stowage.sim." + ".".join(p.relative_to(SIM).with_suffix("").parts): p for p in SIM.rglob("*.py")}
    modules = {name.removesuffix(".__init__"): p for name, p in modules.items()}
    return {name: {m for m in _runtime_imports(p, set(modules)) if m in modules and m != name}
            for name, p in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_simulator_has_no_import_cycle() -> None:
    graph = _graph()
    assert "stowage.sim.preset" in graph["stowage.sim.packing"]  # the graph sees the imports it must
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", ["stowage.sim.packing", "stowage.sim.baselines", "stowage.sim.presets",
                                    "stowage.sim.preset", "stowage.sim.engine", "stowage.sim.cli"])
def test_a_simulator_module_imports_first(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_every_preset_name_makes_its_preset() -> None:
    assert [presets.make(name).name for name in presets.PRESETS] == list(presets.PRESETS)
