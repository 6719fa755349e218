"""The import direction DESIGN.md and STYLE.md promise, checked on the source.

import-linter cannot see ``extender/`` etc. (mapped with package-dir, not top-level
folders of ``stowage``), so the contracts are checked here with ``ast`` instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: source folder → import name
PARTS = {
    "stowage/policy": "stowage.policy",
    "stowage/sim": "stowage.sim",
    "extender": "stowage.extender",
    "node-monitor": "stowage.node_monitor",
    "operator": "stowage.operator",
}
POLICY_ALLOWED = (
    "numpy",
    "stowage.policy",
    "stowage.resources",
    "stowage.config",
    "stowage.labels",
    "stowage.model",
    "stowage.errors",
)
STDLIB_IO = ("os", "socket", "subprocess", "time", "logging", "random", "pathlib", "http", "urllib", "asyncio")


def _imports(folder: str) -> list[tuple[str, str]]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(str(path.relative_to(ROOT)), a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((str(path.relative_to(ROOT)), node.module))
    return found


def _is_stdlib_pure(module: str) -> bool:
    import sys

    top = module.split(".")[0]
    return top in sys.stdlib_module_names and top not in STDLIB_IO


def test_policy_imports_only_numpy_and_the_pure_core() -> None:
    bad = [
        (f, m)
        for f, m in _imports("stowage/policy")
        if not (m.startswith(POLICY_ALLOWED) or _is_stdlib_pure(m) or m == "__future__")
    ]
    assert bad == [], "stowage/policy must stay pure (no I/O, clock, logging or adapters)"


@pytest.mark.parametrize("folder", [k for k in PARTS if k != "stowage/policy"])
def test_adapters_never_import_each_other(folder: str) -> None:
    others = tuple(name for f, name in PARTS.items() if f not in (folder, "stowage/policy"))
    bad = [(f, m) for f, m in _imports(folder) if m.startswith(others)]
    assert bad == []


# --- one decision path (issue #19) ---------------------------------------------------------------


def _calls(path: str) -> set[str]:
    """Dotted names called in ``path`` (``dispatch.pack``, ``self.decider.decide``, …)."""
    tree = ast.parse((ROOT / path).read_text(), filename=path)
    return {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}


@pytest.mark.parametrize("path", ["operator/dispatcher.py", "stowage/sim/packing.py"])
def test_the_operator_and_the_simulator_run_the_one_decision_and_no_copy_of_it(path: str) -> None:
    """Both call ``decide.Decider``; neither runs a packing pass, the classifier or job order itself."""
    calls = _calls(path)
    assert "decide.Decider" in calls
    deciding = ("dispatch.pack", "dispatch.job_ranks", "fairness.queue_tiers", "fairness.decayed",
                "remaining_work.remaining_work", "estimates.estimate", "alignment.feasible")
    own = sorted(c for c in calls if c in deciding or c.startswith("ordering.")
                 or c.endswith(("is_short", "FspTracker", ".pack")))
    assert own == [], f"{path} runs part of the decision itself: {own}"


@pytest.mark.parametrize("path", ["operator/dispatcher.py", "stowage/sim/packing.py"])
def test_the_operator_and_the_simulator_build_the_decisions_input_through_the_one_builder(path: str) -> None:
    """Both fill a ``snapshot.PassSnapshot`` and call ``snapshot.build`` (issue #34); neither fills
    ``DecideInput`` or gates the harvestable room and the features itself."""
    calls = _calls(path)
    assert {"snapshot.PassSnapshot", "snapshot.build"} <= calls
    own = sorted(c for c in calls if c.endswith(("DecideInput", "Evidence", "needs_harvestable", "needs_features")))
    assert own == [], f"{path} builds part of the decision's input itself: {own}"


def test_only_the_builder_fills_the_decisions_input() -> None:
    """``DecideInput(...)`` is called in ``stowage/policy/snapshot.py`` and nowhere else in the product."""
    callers = sorted(str(p.relative_to(ROOT)) for folder in ("stowage", "operator", "extender", "node-monitor")
                     for p in (ROOT / folder).rglob("*.py")
                     if any(c.endswith("DecideInput") for c in _calls(str(p.relative_to(ROOT)))))
    assert callers == ["stowage/policy/snapshot.py"]


@pytest.mark.parametrize(("path", "stepper"), [("node-monitor/monitor.py", "contention.step"),
                                                ("stowage/sim/monitor.py", "contention.Nodes")])
def test_the_node_monitor_and_the_simulator_run_the_one_eviction_loop(path: str, stepper: str) -> None:
    """Both step ``stowage.policy.contention`` (``Nodes`` is ``step`` on many nodes, checked against it in
    tests/policy/test_contention.py) and pick victims with ``choose_victims`` against ``thresholds`` (issue #34);
    neither keeps the counter or PRESERVE's window itself."""
    calls = _calls(path)
    assert {stepper, "contention.choose_victims", "contention.thresholds"} <= calls
    source = (ROOT / path).read_text()
    own = [name for name in ("over_counts", "last_relief_s", "block_time_s", "t_preempt") if name in source]
    assert own == [], f"{path} re-implements part of the contention policy: {own}"


def test_only_the_decision_runs_packing_passes() -> None:
    """``dispatch.pack`` is called by ``stowage/policy/decide.py`` and by nothing else in the product (the
    dispatcher benchmark times it alone on the decision's own inputs)."""
    callers = sorted(str(p.relative_to(ROOT)) for folder in ("stowage", "operator", "extender", "node-monitor")
                     for p in (ROOT / folder).rglob("*.py")
                     if p.name != "bench.py" and "dispatch.pack" in _calls(str(p.relative_to(ROOT))))
    assert callers == ["stowage/policy/decide.py"]


def test_the_classifiers_features_are_built_in_the_classifier_only() -> None:
    """The operator's dispatcher, its lessons and the simulator ask ``classifier.task_features`` (issue #34): no
    product module buckets a demand or a progress itself, so what the classifier is asked is what it was taught."""
    builders = sorted(str(p.relative_to(ROOT)) for folder in ("stowage", "operator", "extender", "node-monitor")
                      for p in (ROOT / folder).rglob("*.py")
                      if {c.rsplit(".", 1)[-1] for c in _calls(str(p.relative_to(ROOT)))}
                      & {"bucket_demand", "bucket_progress"})
    assert builders == ["stowage/policy/classifier.py"]

