"""200 fake nodes in CI (issue #11): a few hundred tasks across three queues all complete, none lost, none
run twice, on the whole stack (every component from the chart).

Node monitors run on the first three nodes only (``WholeStack(monitored_nodes=3)``): one per node would be
200 Python processes on a 2-core CI machine. The other 197 nodes run regular work; opportunistic pods may
only land on the three that harvest. The workload is :func:`tests.system.load.load_jobs` (the load report's,
smaller, its tasks running half as long: 5–15 s); ``STOWAGE_SCALE_TASKS`` changes its size. The regular work
is done within a minute. The `"true"` Jobs' tasks take regular room first (UBIS Alg. 1) and harvest only when
none holds them; whatever runs opportunistic runs on the three harvesting nodes only (asserted).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from stowage import labels
from tests.support.controlplane import ControlPlane
from tests.support.stack import TaskLedger, WholeStack
from tests.system.load import load_jobs, makespan_and_jct, submit
from tests.system.workloads import finished_nothing_lost, wide_stack

pytestmark = pytest.mark.timeout(900)

NODES, MONITORED = 200, 3
TASKS = int(os.environ.get("STOWAGE_SCALE_TASKS", "400"))
RUN_S = (5, 10, 15)  # the load report's 10/20/30 s halved: the same Jobs, the same shapes


@pytest.fixture(scope="module")
def wide(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WholeStack]:
    with wide_stack(control_plane, tmp_path_factory, "scale", nodes=NODES, monitored=MONITORED) as stack:
        yield stack


def test_200_nodes_a_few_hundred_tasks_across_queues_all_complete_none_lost(wide: WholeStack) -> None:
    stack = wide
    jobs = load_jobs(TASKS, jobs=max(TASKS // 16, 1), seed=1, run_s=RUN_S)
    with stack.namespace("scale") as ns:
        ledger = TaskLedger(stack.api, ns).start()
        try:
            submit(stack, ns, jobs)
            problems = finished_nothing_lost(stack, ns, ledger, timeout_s=600)
            finished = stack.jobs(ns)
        finally:
            ledger.stop()
        assert problems == []
        assert len(finished) == len(jobs)
        pods = ledger.pods()
        assert sum(1 for p in pods if p["phase"] == "Succeeded") == TASKS
        used = {p["node"] for p in pods if p["node"]}
        harvesting = set(stack.nodes[:MONITORED])
        opportunistic_on = {p["node"] for p in pods if p["node"]
                            and p["labels"].get(labels.LABEL_CLASS) == "opportunistic"}
        assert opportunistic_on <= harvesting, opportunistic_on - harvesting
        # The work spread over the cluster: more nodes used than the three monitored ones could give.
        assert len(used) > 3 * MONITORED, sorted(used)
        makespan, jct = makespan_and_jct(finished)
        print(f"scale: {NODES} nodes, {len(jobs)} jobs, {TASKS} tasks on {len(used)} nodes; makespan {makespan:.0f}s, "
              f"mean JCT {jct:.0f}s; {len(opportunistic_on)} nodes ran opportunistic pods")
