"""The load report (issue #11), run on demand, not in CI (pytest collects only ``test_*.py``)::

    STOWAGE_LOAD_NODES=200 STOWAGE_LOAD_TASKS=5000 \\
        .venv/bin/pytest tests/system/bench_load.py -q -s -p no:cacheprovider

The whole stack (:class:`tests.support.stack.WholeStack`, ``STOWAGE_LOAD_MONITORED`` node monitors, default 8)
on ``STOWAGE_LOAD_NODES`` fake nodes runs :func:`tests.system.load.load_jobs` (``STOWAGE_LOAD_TASKS`` tasks in
``STOWAGE_LOAD_JOBS`` Jobs, default tasks / 25; every ``STOWAGE_LOAD_OPPORTUNISTIC_EVERY``-th Job, default
20th, ``opportunistic: "true"``: it runs only on the monitored nodes), all submitted at once. Reported
(printed, and written as Markdown to ``STOWAGE_LOAD_REPORT``, default ``load-report.md``): makespan and mean
JCT next to ``stowage simulate``'s for the same workload file (preset ``stowage``, every arrival at 0),
release-to-bind p50/p99 (the operator's histogram), the extender's filter latency under the real kube-
scheduler, evictions, lost tasks, each process's CPU seconds during the run and peak RSS (/proc).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stowage import labels
from tests.support.controlplane import ControlPlane
from tests.support.stack import STOWAGE, TaskLedger, WholeStack, metric
from tests.system.load import (
    bind_delays,
    evictions,
    histogram_quantile,
    load_jobs,
    makespan_and_jct,
    opportunistic_pods,
    quantile,
    snapshot_usage,
    submit,
    usage_table,
    write_simulator_workload,
)
from tests.system.workloads import finished_nothing_lost, wide_stack

NODES = int(os.environ.get("STOWAGE_LOAD_NODES", "200"))
TASKS = int(os.environ.get("STOWAGE_LOAD_TASKS", "5000"))
JOBS = int(os.environ.get("STOWAGE_LOAD_JOBS", str(max(TASKS // 25, 1))))
MONITORED = int(os.environ.get("STOWAGE_LOAD_MONITORED", "8"))
OPP_EVERY = int(os.environ.get("STOWAGE_LOAD_OPPORTUNISTIC_EVERY", "20"))
REPORT = Path(os.environ.get("STOWAGE_LOAD_REPORT", "load-report.md"))

pytestmark = pytest.mark.timeout(int(os.environ.get("STOWAGE_LOAD_TIMEOUT_S", "3600")))


@pytest.fixture(scope="module")
def loaded(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WholeStack]:
    with wide_stack(control_plane, tmp_path_factory, "load", nodes=NODES, monitored=MONITORED) as stack:
        yield stack


def simulate(workload: Path, folder: Path) -> dict[str, dict[str, float]]:
    """``stowage simulate`` of the workload file: preset → its numbers (``stowage`` and the kube-default reference)."""
    out = folder / "sim.json"
    subprocess.run([str(STOWAGE), "simulate", "--workload", str(workload), "--policy", "stowage", "--arrivals",
                    "batch", "--no-plots", "--report", str(folder / "sim-report"), "--json", str(out), "--jobs", "1"],
                   check=True, timeout=1800, capture_output=True)
    report = json.loads(out.read_text())
    return {**report["reference_runs"], **report["policies"]}


def test_load_report(loaded: WholeStack, tmp_path: Path) -> None:
    stack = loaded
    jobs = load_jobs(TASKS, JOBS, seed=0, opportunistic_every=OPP_EVERY)
    workload = tmp_path / "load-workload.yaml"
    write_simulator_workload(workload, jobs, NODES, MONITORED)
    with stack.namespace("load") as ns:
        ledger = TaskLedger(stack.api, ns).start()
        try:
            before = snapshot_usage(stack)
            started = time.monotonic()
            submit(stack, ns, jobs)
            problems = finished_nothing_lost(stack, ns, ledger, timeout_s=float(os.environ.get(
                "STOWAGE_LOAD_TIMEOUT_S", "3600")))
            wall = time.monotonic() - started
            after = snapshot_usage(stack)
            finished = stack.jobs(ns)
            operator_text, extender_text = stack.operator_metrics(), stack.extender_metrics()
            delays = bind_delays(stack.pods(ns))
        finally:
            ledger.stop()
    assert stack.prometheus is not None
    monitor_evictions = sum(float(r["value"][1]) for r in
                            stack.prometheus.query(f"sum({labels.METRICS.EVICTIONS_TOTAL})"))
    makespan, jct = makespan_and_jct(finished)
    sim = simulate(workload, tmp_path)
    r2b = labels.METRICS.RELEASE_TO_BIND_SECONDS
    ext = labels.METRICS.EXTENDER_REQUEST_SECONDS
    lines = [
        f"Load run: {NODES} fake nodes ({MONITORED} with node monitors, harvesting), {len(jobs)} Jobs, "
        f"{TASKS} tasks ({sum(j.tasks for j in jobs if j.opportunistic == 'true')} opportunistic), "
        f"queues prod:batch:adhoc = 3:2:1, wall {wall:.0f} s.",
        "",
        f"- lost or duplicated tasks: {len(problems)} ({problems[:3]})",
        f"- release-to-bind (operator histogram, {metric(operator_text, r2b + '_count'):.0f} pods): "
        f"p50 {histogram_quantile(operator_text, r2b, 0.5):.2f} s, "
        f"p99 {histogram_quantile(operator_text, r2b, 0.99):.2f} s",
        *[f"- release-to-bind, {cls} pods (pod creation → PodScheduled, 1 s resolution, {len(v)} pods): "
          f"p50 {quantile(v, 0.5):.0f} s, p99 {quantile(v, 0.99):.0f} s, max {max(v):.0f} s"
          for cls, v in sorted(delays.items())],
        *[f"- extender `{verb}` under kube-scheduler ({metric(extender_text, ext + '_count', {'verb': verb}):.0f} "
          f"requests): p50 {1000 * histogram_quantile(extender_text, ext, 0.5, {'verb': verb}):.1f} ms, "
          f"p99 {1000 * histogram_quantile(extender_text, ext, 0.99, {'verb': verb}):.1f} ms"
          for verb in sorted(set(re.findall(rf'{ext}_count{{verb="(\w+)"}}', extender_text)))],
        f"- evictions: {evictions(finished)} (Job status), {monitor_evictions:.0f} (node monitors); "
        f"opportunistic pods: {opportunistic_pods(ledger.pods())}",
        "",
        "| | cluster run | `stowage simulate`, preset stowage | simulate, kube-default (ref) |",
        "|---|---|---|---|",
        f"| makespan s | {makespan:.0f} | {sim['stowage']['makespan_s']:.0f} | "
        f"{sim.get('kube-default', {}).get('makespan_s', float('nan')):.0f} |",
        f"| mean JCT s | {jct:.0f} | {sim['stowage']['jct_mean_s']:.0f} | "
        f"{sim.get('kube-default', {}).get('jct_mean_s', float('nan')):.0f} |",
        "",
        *usage_table(before, after),
    ]
    text = "\n".join(lines)
    print("\n" + text)
    REPORT.write_text(text + "\n")
    # The workload file beside the report: `stowage simulate --workload <it> --arrivals batch` replays it.
    REPORT.with_name(f"{REPORT.stem}-workload.yaml").write_text(workload.read_text())
    assert problems == []

