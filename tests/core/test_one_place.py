"""One fact in one place (issue #34), checked on the source: the float tolerances and the task-group label."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("stowage", "operator", "extender", "node-monitor")
#: The values only ``stowage/policy/tolerances.py`` spells out.
TOLERANCES = {1e-9, 1e-12, 1e-15}


def _product_files() -> list[Path]:
    return sorted(p for folder in PRODUCT for p in (ROOT / folder).rglob("*.py"))


def test_tolerance_literals_live_in_the_tolerances_module_only() -> None:
    found = [f"{p.relative_to(ROOT)}:{node.lineno}" for p in _product_files()
             if p.relative_to(ROOT).as_posix() != "stowage/policy/tolerances.py"
             for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.Constant) and type(node.value) is float and node.value in TOLERANCES]
    assert found == [], "name the tolerance in stowage/policy/tolerances.py and use the name"


def test_the_task_group_label_is_read_by_labels_task_group_only() -> None:
    """Written where pods are rendered; read (``.get(LABEL_TASK_GROUP)``, ``[LABEL_TASK_GROUP]``) only in labels.py."""
    readers = set()
    for p in _product_files():
        for node in ast.walk(ast.parse(p.read_text())):
            read = ((isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                     and node.args and ast.unparse(node.args[0]).endswith("LABEL_TASK_GROUP"))
                    or (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                        and ast.unparse(node.slice).endswith("LABEL_TASK_GROUP")))
            if read:
                readers.add(p.relative_to(ROOT).as_posix())
    assert readers == {"stowage/labels.py"}
