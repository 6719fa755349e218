"""Stock Kubernetes against Stowage on the same workloads (issue #19 part 4), run on demand, not in CI (pytest
collects only ``test_*.py``)::

    STOWAGE_STOCK_WORKLOADS=mixed STOWAGE_STOCK_REPORT=stock-report.md \\
        .venv/bin/pytest tests/system/bench_stock.py -q -s -p no:cacheprovider

Each workload (:mod:`tests.system.stock`: ``mixed``, ``two-queues``, ``recurring``, ``harvest``) runs on the
whole stack's three fake nodes (the ``system`` fixture) as ``batch/v1`` Jobs under a plain kube-scheduler
(started here, stopped by PID), then as Stowage Jobs (``harvest`` also without harvesting: every job
``opportunistic: "false"``), then in ``stowage simulate`` (``kube-default`` for the stock run, ``stowage`` for the
Stowage run, ``stowage-regular`` for the one without harvesting) with every job arriving when the cluster run
submitted it. Beside makespan and mean JCT, what harvesting cost each run, in the cluster (the fake kubelet slows
pods by the simulator's contention model and records what each pod did) and in the simulator: the regular pods'
slowdown, the share of task-seconds on harvested capacity, the opportunistic work lost to evictions, promotions.
For each Stowage arm, the forecast's honesty: each Job's first prediction in its ``status.forecast`` (and the last
one while it was pending) against its actual start and finish, the error of the predicted finish as a fraction of
the actual JCT, median and p90 (``stock.forecast_lines``). Printed, and written as Markdown to
``STOWAGE_STOCK_REPORT`` (default ``stock-report.md``) after each workload, with the workload files beside it
(``<report>-<workload>-<arm>.yaml``) and what each cluster run saw (``<report>-<workload>-<arm>-pods.json``:
submissions, every pod's stamps).

Knobs: ``STOWAGE_STOCK_WORKLOADS`` (comma list, default all), ``STOWAGE_STOCK_ARM_TIMEOUT_S`` (900: one arm),
``STOWAGE_STOCK_TIMEOUT_S`` (7200: the whole module), ``STOWAGE_STOCK_COMMIT`` (the commit to name when the code
does not run from a git checkout). See docs/benchmarks-cluster.md.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.controlplane import REPO, SchedulerHandle
from tests.support.stack import WholeStack
from tests.system import stock

WORKLOADS = stock.chosen(os.environ.get("STOWAGE_STOCK_WORKLOADS"))
REPORT = Path(os.environ.get("STOWAGE_STOCK_REPORT", "stock-report.md"))
ARM_TIMEOUT_S = float(os.environ.get("STOWAGE_STOCK_ARM_TIMEOUT_S", "900"))

pytestmark = pytest.mark.timeout(int(os.environ.get("STOWAGE_STOCK_TIMEOUT_S", "7200")))


def code_version() -> str:
    """The commit the code runs from (and whether the checkout has uncommitted changes)."""
    named = os.environ.get("STOWAGE_STOCK_COMMIT")
    if named:
        return named
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout; set STOWAGE_STOCK_COMMIT)"
    return f"{head}{' + uncommitted changes' if dirty else ''}"


@pytest.fixture(scope="module")
def default_scheduler(system: WholeStack) -> Iterator[SchedulerHandle]:
    """A plain kube-scheduler (profile ``default-scheduler``, every default): what users have without Stowage."""
    handle = system.plane.start_scheduler(None, name="bench-default-scheduler")
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def report(system: WholeStack) -> dict[str, Any]:
    return {"sections": {}, "summary": [], "costs": [], "started": dt.datetime.now(dt.UTC),
            "version": code_version(), "load": [os.getloadavg()[0]]}


def write_report(state: dict[str, Any], stack: WholeStack) -> str:
    cores = len(stack.nodes) * stock.cores_of(stock.ALLOCATABLE["cpu"])
    lines = ["# Stock Kubernetes against Stowage, same workloads", "",
             f"Code {state['version']}, run {state['started']:%Y-%m-%d %H:%M} UTC on {os.cpu_count()} cores "
             f"(load average {', '.join(f'{x:.1f}' for x in state['load'])} at the start of each workload); "
             f"{len(stack.nodes)} fake nodes of {stock.ALLOCATABLE['cpu']} cpu / {stock.ALLOCATABLE['memory']} "
             f"allocatable ({cores:g} cores).", "",
             *stock.summary_table(state["summary"]), "",
             "What harvesting cost, cluster beside the simulator's prediction (regular slowdown: run time ÷ "
             "run-seconds − 1 of the regular pods never opportunistic, mean / p95):", "",
             stock.COST_HEADER, "|---|---|---|---|---|---|---|---|---|---|", *state["costs"], ""]
    for name in WORKLOADS:
        lines += state["sections"].get(name, [])
    text = "\n".join(lines)
    REPORT.write_text(text + "\n")
    return text


@pytest.mark.parametrize("name", WORKLOADS)
def test_stock_against_stowage(name: str, healthy: WholeStack, default_scheduler: SchedulerHandle,
                               report: dict[str, Any], tmp_path: Path) -> None:
    stack = healthy
    workload = stock.WORKLOADS[name]()
    if report["sections"]:
        report["load"].append(os.getloadavg()[0])
    arms: list[tuple[str, type[stock.StockArm] | type[stock.StowageArm], stock.Workload]] = [
        ("stock", stock.StockArm, workload), ("stowage", stock.StowageArm, workload)]
    if workload.without_harvest:
        arms.append(("stowage, no harvest", stock.StowageArm, workload.no_harvest()))
    pairs = []
    for label, arm, variant in arms:
        slug = label.replace(", ", "-").replace(" ", "-")
        run = stock.run_arm(stack, arm, variant, ARM_TIMEOUT_S, prefix=f"bench-{slug}")
        stock.dump(run, REPORT.with_name(f"{REPORT.stem}-{name}-{slug}-pods.json"))
        measured = stock.measure(run, stock.cores_of(stock.ALLOCATABLE["cpu"]))
        path = tmp_path / f"{name}-{slug}.yaml"
        path.write_text(yaml.safe_dump(stock.simulator_workload(variant, measured.arrival, len(stack.nodes)),
                                       sort_keys=False))
        REPORT.with_name(f"{REPORT.stem}-{path.name}").write_text(path.read_text())
        preset = "kube-default" if arm is stock.StockArm else "stowage" if variant is workload else "stowage-regular"
        sim = stock.simulate(path, preset, tmp_path)
        pairs.append(stock.Pair(label, measured, sim))
    cores = len(stack.nodes) * stock.cores_of(stock.ALLOCATABLE["cpu"])
    report["sections"][name] = stock.workload_report(workload, pairs, cores)
    for pair in pairs[1:]:
        report["summary"].append((name, pair.label, stock.headline(pairs[0], pair)))
    report["costs"] += stock.cost_rows(pairs, prefix=f"{name}: ")
    print("\n" + write_report(report, stack))
    assert [p for pair in pairs for p in pair.cluster.problems] == []
