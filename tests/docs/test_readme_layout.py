"""README's layout section names every module of the policy core, the operator, the extender and the node
monitor, one line each, and no module that is not there (issue #34): a newcomer finds in one hop where job order,
duration estimates, harvestable room and eviction are decided."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["stowage/policy", "operator", "extender", "node-monitor"]


def layout(readme: str) -> str:
    start = readme.index("\n## Layout\n")
    end = readme.find("\n## ", start + 1)
    return readme[start:] if end < 0 else readme[start:end]


def listed(section: str) -> dict[str, list[str]]:
    """Each package's modules as its ``### …: `package/`…`` subsection lists them (``- `name.py`: …``)."""
    out: dict[str, list[str]] = {}
    for part in re.split(r"^### ", section, flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        package = re.search(r"`([\w./-]+)/`", heading)
        if package:
            out[package.group(1)] = re.findall(r"^- `([\w]+\.py)`: \S", body, flags=re.M)
    return out


def modules(package: str) -> set[str]:
    return {p.name for p in (ROOT / package).glob("*.py") if p.name != "__init__.py"}


SECTION = layout((ROOT / "README.md").read_text())


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_is_named_once_and_nothing_else(package: str) -> None:
    named = listed(SECTION).get(package)
    assert named is not None, f"README's layout has no subsection for `{package}/`"
    assert sorted(named) == sorted(set(named)), f"{package}: named twice: {named}"
    assert set(named) - modules(package) == set(), f"{package}: README names modules that do not exist"
    assert modules(package) - set(named) == set(), f"{package}: modules missing from README's layout"


@pytest.mark.parametrize(("decision", "module"), [
    ("job order", "stowage/policy/ordering.py"),
    ("duration estimates", "stowage/policy/estimates.py"),
    ("harvestable room", "stowage/policy/harvest.py"),
    ("eviction", "stowage/policy/contention.py"),
])
def test_each_decision_points_to_the_module_that_makes_it(decision: str, module: str) -> None:
    rows = [line for line in SECTION.splitlines() if line.startswith("| ") and decision in line]
    assert rows and module in rows[0], f"README's layout: no row for {decision!r} naming {module}"
    assert (ROOT / module).exists()


def test_the_check_catches_a_missing_and_an_invented_module() -> None:
    section = "\n## Layout\n\n### The operator: `operator/`\n\n- `cli.py`: runs it.\n- `nowhere.py`: gone.\n"
    named = set(listed(section)["operator"])
    assert "nowhere.py" in named - modules("operator")
    assert "runtime.py" in modules("operator") - named


def test_the_command_table_names_every_benchmark() -> None:
    from stowage.bench import BENCHMARKS

    readme = (ROOT / "README.md").read_text()
    (row,) = [line for line in readme.splitlines() if line.startswith("| benchmarks |")]
    named = re.search(r"`stowage bench ([^`]+)`", row)
    assert named, row
    assert sorted(named.group(1).split("\\|")) == sorted(BENCHMARKS)
