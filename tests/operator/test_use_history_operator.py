"""The operator's bandwidth history (``policy.use_estimates``' HISTORY row): a finished pod's sustained use, as
Prometheus showed it, teaches the recurring history; the next run's pending and running tasks are packed by it."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from stowage.operator.dispatch_arrays import view_arrays
from stowage.operator.dispatcher import Dispatcher, DispatchView, NodeRecord, PendingGroup, QueueRecord, RunningPod
from stowage.operator.learning import lessons
from stowage.operator.runtime import OperatorRuntime

from stowage import labels
from stowage.config import StowageSettings
from stowage.policy import estimates
from stowage.resources import ResourceVector
from tests.operator.test_estimates_operator import KEY, T0, _book, succeeded
from tests.operator.test_jobbook import StubClient
from tests.operator.test_tasks import group, job

MI = float(1 << 20)
S = StowageSettings()


def _disk_job(name: str = "train") -> dict[str, Any]:
    g = group("map", 2, duration=None)
    g["template"]["metadata"]["annotations"] = {labels.ANN_DISK_BANDWIDTH: "80Mi"}
    j = job(g, name=name)
    j["metadata"]["labels"] = {labels.LABEL_RECURRING: "nightly"}
    return j


@pytest.mark.parametrize(("seen", "used"), [
    ({"disk": 20 * MI}, {"disk": 0.25}),
    ({"disk": 20 * MI, "network": 5 * MI}, {"disk": 0.25}),  # declares no network: nothing to learn of it
    ({"disk": float("nan")}, None),
    (None, None),  # a pod Prometheus has no samples of
])
def test_a_lesson_carries_the_pods_use_as_a_fraction_of_its_declaration(seen: dict[str, float] | None,
                                                                        used: dict[str, float] | None) -> None:
    book, _ = _book()
    j = _disk_job()
    book.upsert_job(j)
    p = succeeded(j, "map", 0, T0 + 5, T0 + 65)
    book.apply_pod_event("ADDED", p)
    asked: list[tuple[str, str]] = []

    def use_peak(key: tuple[str, str]) -> dict[str, float] | None:
        asked.append(key)
        return seen

    (lesson,) = lessons(book, KEY, book.plans(lambda _: set(), None)[KEY], {"cpu": 8.0}, use_peak)
    assert asked == [("ns", p["metadata"]["name"])]
    assert lesson.used == (pytest.approx(used) if used else None)


def test_the_runtime_teaches_the_dispatchers_recurring_history_the_use() -> None:
    dispatcher = Dispatcher(S)
    rt = OperatorRuntime(S, StubClient(), dispatcher=dispatcher, clock=lambda: T0 + 100)  # type: ignore[arg-type]
    rt.learning.use_peak = lambda key: {"disk": 20 * MI}
    j = _disk_job()
    rt.jobs.upsert_job(j)
    rt.jobs.apply_pod_event("ADDED", succeeded(j, "map", 0, T0 + 5, T0 + 65))
    assert rt.learning.learn(KEY, rt.jobs.plans(lambda _: set(), None)[KEY], {"cpu": 8.0}) == 1
    assert dispatcher.decider.history.use("ns/nightly", "map") == pytest.approx({"disk": 0.25})
    saved = dispatcher.state_dict()
    again = Dispatcher(S)
    again.load_state(saved)
    assert again.decider.history.use("ns/nightly", "map") == pytest.approx({"disk": 0.25}), "kept across restarts"


def test_the_next_runs_tasks_are_packed_by_the_history_until_their_own_use_is_seen() -> None:
    history = estimates.RecurringHistory(S.estimates)
    history.observe_use("ns/nightly", "map", {"disk": 0.25})
    demand = ResourceVector({"cpu": 1.0, "disk": 80 * MI})
    pending = PendingGroup(key="ns/run2/map", queue="q", demand=demand, releasable=1, namespace="ns",
                           job="ns/run2", group="map", recurring_key="ns/nightly")
    view = DispatchView(
        nodes=[NodeRecord(name="n1", allocatable=ResourceVector({"cpu": 8.0, "disk": 100 * MI}))],
        running=[RunningPod(node="n1", demand=demand, queue="q", job="ns/run2", group="map"),
                 RunningPod(node="n1", demand=demand, queue="q", job="ns/other", group="map")],
        queues=[QueueRecord(name="q")], groups=[pending])
    disk = view_arrays(view, S.estimates).resources.index("disk")
    without = view_arrays(view, S.estimates)
    assert without.estimated is not None and without.estimated[0, disk] == 80 * MI
    a = view_arrays(view, S.estimates, history)
    assert a.estimated is not None and a.estimated[0, disk] == pytest.approx(25 * MI)  # 0.25 × 80 × 1.25
    # the running task of the same Job reserves by the history too; one of a Job with no pending group, declared
    assert a.reg_bandwidth is not None and a.reg_bandwidth[0, disk] == pytest.approx(25 * MI + 80 * MI)
    seen = dataclasses.replace(pending, use_peak={"disk": 40 * MI})
    b = view_arrays(DispatchView(nodes=view.nodes, running=[], queues=view.queues, groups=[seen]), S.estimates,
                    history)
    assert b.estimated is not None and np.isclose(b.estimated[0, disk], 50 * MI), "its own use seen wins"
