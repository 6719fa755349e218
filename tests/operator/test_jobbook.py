"""JobBook (stowage.operator.jobs) without a cluster: a stub client records the writes."""

from __future__ import annotations

from typing import Any

from stowage.operator import jobs, tasks
from stowage.operator.metrics import OperatorMetrics
from stowage.operator.tasks import Phase, TaskRef

from stowage import labels
from tests.operator.test_tasks import group, job, pod


class StubClient:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def patch(self, path: str, body: dict[str, Any]) -> None:
        self.patches.append((path, body))

    def delete(self, path: str) -> None:
        raise AssertionError(f"nothing is deleted here: {path}")

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        pass


def _owned(p: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    p["metadata"]["ownerReferences"] = [tasks.owner_reference(owner)]
    p["metadata"]["labels"][labels.LABEL_QUEUE] = "research"
    return p


def test_a_failed_pod_deleted_before_its_failure_is_written_still_spends_its_retry() -> None:
    client = StubClient()
    book = jobs.JobBook(client, OperatorMetrics(), clock=lambda: 1_735_689_610.0)  # type: ignore[arg-type]
    j = job(group("map", 1, max_retries=1))
    key = ("ns", "train")
    book.upsert_job(j)
    failed = _owned(pod("train", "map", 0, phase="Failed"), j)
    book.apply_pod_event("MODIFIED", failed)
    book.apply_pod_event("DELETED", failed)  # gone before any status write
    plan = book.plans(lambda _: set(), None)[key]
    assert plan.releasable == [TaskRef("map", 0, 1)]
    assert plan.status["groups"]["map"]["attempts"] == {"0": {"next": 1, "failed": [0]}}
    book.apply(key, plan)
    assert client.patches and client.patches[-1][1]["status"]["groups"]["map"]["failed"] == 1
    retry = _owned(pod("train", "map", 0, 1, phase="Failed"), j)
    book.apply_pod_event("MODIFIED", retry)
    final = book.plans(lambda _: set(), None)[key]
    assert final.phase is Phase.FAILED and final.status["groups"]["map"]["failed"] == 2


def test_a_running_pod_deleted_before_any_status_write_spends_no_retry_and_frees_no_name() -> None:
    book = jobs.JobBook(StubClient(), OperatorMetrics(), clock=lambda: 1_735_689_610.0)  # type: ignore[arg-type]
    j = job(group("map", 1, max_retries=0))
    book.upsert_job(j)
    running = _owned(pod("train", "map", 0), j)
    book.apply_pod_event("MODIFIED", running)
    book.apply_pod_event("DELETED", running)
    plan = book.plans(lambda _: set(), None)[("ns", "train")]
    assert plan.releasable == [TaskRef("map", 0, 1)] and plan.status["groups"]["map"]["failed"] == 0


def test_a_release_whose_pod_came_and_went_between_two_passes_is_not_in_flight() -> None:
    """The runtime counts a released name in flight until the book shows it (``pod_names``). A pod created, run
    and deleted between two passes was never in the book's live pods: it must still end the flight, or the task
    waits IN_FLIGHT_TTL_S for its next attempt (seen live under load: 120 s with no pod)."""
    book = jobs.JobBook(StubClient(), OperatorMetrics(), clock=lambda: 1_735_689_610.0)  # type: ignore[arg-type]
    j = job(group("map", 1, max_retries=0))
    book.upsert_job(j)
    key = ("ns", "train")
    released = {tasks.pod_name("train", "map", 0, 0)}
    running = _owned(pod("train", "map", 0), j)
    book.apply_pod_event("ADDED", running)
    book.apply_pod_event("DELETED", running)
    flying = released - book.pod_names(key)
    assert flying == set()
    plan = book.plans(lambda _: flying, None)[key]
    assert plan.releasable == [TaskRef("map", 0, 1)]


def test_an_eviction_seen_between_the_plan_and_its_status_write_is_counted_in_the_next_write() -> None:
    """The informer thread counts an eviction whenever its event comes; the loop plans, then writes. An eviction
    counted after the plan is not in that plan's status, so its write must not take it as written (seen live: five
    pods evicted within 0.7 s, ``status.groups.w.evicted`` 4)."""
    client = StubClient()
    book = jobs.JobBook(client, OperatorMetrics(), clock=lambda: 1_735_689_610.0)  # type: ignore[arg-type]
    j = job(group("map", 3))
    key = ("ns", "train")
    book.upsert_job(j)
    evicted = [_owned(pod("train", "map", i, disruption="PreemptionByScheduler", opportunistic=True), j)
               for i in range(2)]
    book.apply_pod_event("MODIFIED", evicted[0])
    plan = book.plans(lambda _: set(), None)[key]
    book.apply_pod_event("MODIFIED", evicted[1])  # between the plan and its write
    book.apply(key, plan)
    assert client.patches[-1][1]["status"]["groups"]["map"]["evicted"] == 1, "the plan saw one"
    book.apply(key, book.plans(lambda _: set(), None)[key])
    assert client.patches[-1][1]["status"]["groups"]["map"]["evicted"] == 2


def test_a_failed_plan_written_meanwhile_takes_no_eviction_as_written() -> None:
    """``fail`` writes a status of its own, without the evictions not yet written: they stay to be counted."""
    client = StubClient()
    book = jobs.JobBook(client, OperatorMetrics(), clock=lambda: 1_735_689_610.0)  # type: ignore[arg-type]
    j = job(group("map", 3))
    key = ("ns", "train")
    book.upsert_job(j)
    book.apply_pod_event("MODIFIED", _owned(pod("train", "map", 0, disruption="PreemptionByScheduler",
                                                opportunistic=True), j))
    book.fail(key, "the API server refused a pod")
    book.apply(key, book.plans(lambda _: set(), None)[key])
    assert client.patches[-1][1]["status"]["groups"]["map"]["evicted"] == 1
