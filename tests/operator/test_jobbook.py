"""JobBook (stowage.operator.jobs) without a cluster: a stub client records the writes."""

from __future__ import annotations

from typing import Any

import pytest
from stowage.operator import jobs, tasks
from stowage.operator.job_writer import JobWriter
from stowage.operator.metrics import OperatorMetrics
from stowage.operator.snapshot import pending_groups
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
    book = jobs.JobBook(OperatorMetrics(), clock=lambda: 1_735_689_610.0)
    writer = JobWriter(client, book, OperatorMetrics(), clock=lambda: 1_735_689_610.0)  # type: ignore[arg-type]
    j = job(group("map", 1, max_retries=1))
    key = ("ns", "train")
    book.upsert_job(j)
    failed = _owned(pod("train", "map", 0, phase="Failed"), j)
    book.apply_pod_event("MODIFIED", failed)
    book.apply_pod_event("DELETED", failed)  # gone before any status write
    plan = book.plans(lambda _: set(), None)[key]
    assert plan.releasable == [TaskRef("map", 0, 1)]
    assert plan.status["groups"]["map"]["attempts"] == {"0": {"next": 1, "failed": [0]}}
    writer.apply(key, plan)
    assert client.patches and client.patches[-1][1]["status"]["groups"]["map"]["failed"] == 1
    retry = _owned(pod("train", "map", 0, 1, phase="Failed"), j)
    book.apply_pod_event("MODIFIED", retry)
    final = book.plans(lambda _: set(), None)[key]
    assert final.phase is Phase.FAILED and final.status["groups"]["map"]["failed"] == 2


def test_a_running_pod_deleted_before_any_status_write_spends_no_retry_and_frees_no_name() -> None:
    book = jobs.JobBook(OperatorMetrics(), clock=lambda: 1_735_689_610.0)
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
    book = jobs.JobBook(OperatorMetrics(), clock=lambda: 1_735_689_610.0)
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
    book = jobs.JobBook(OperatorMetrics(), clock=lambda: 1_735_689_610.0)
    writer = JobWriter(client, book, OperatorMetrics(), clock=lambda: 1_735_689_610.0)  # type: ignore[arg-type]
    j = job(group("map", 3))
    key = ("ns", "train")
    book.upsert_job(j)
    evicted = [_owned(pod("train", "map", i, disruption="PreemptionByScheduler", opportunistic=True), j)
               for i in range(2)]
    book.apply_pod_event("MODIFIED", evicted[0])
    plan = book.plans(lambda _: set(), None)[key]
    book.apply_pod_event("MODIFIED", evicted[1])  # between the plan and its write
    writer.apply(key, plan)
    assert client.patches[-1][1]["status"]["groups"]["map"]["evicted"] == 1, "the plan saw one"
    writer.apply(key, book.plans(lambda _: set(), None)[key])
    assert client.patches[-1][1]["status"]["groups"]["map"]["evicted"] == 2


def test_a_failed_plan_written_meanwhile_takes_no_eviction_as_written() -> None:
    """``fail`` writes a status of its own, without the evictions not yet written: they stay to be counted."""
    client = StubClient()
    book = jobs.JobBook(OperatorMetrics(), clock=lambda: 1_735_689_610.0)
    writer = JobWriter(client, book, OperatorMetrics(), clock=lambda: 1_735_689_610.0)  # type: ignore[arg-type]
    j = job(group("map", 3))
    key = ("ns", "train")
    book.upsert_job(j)
    book.apply_pod_event("MODIFIED", _owned(pod("train", "map", 0, disruption="PreemptionByScheduler",
                                                opportunistic=True), j))
    writer.fail(key, "the API server refused a pod")
    writer.apply(key, book.plans(lambda _: set(), None)[key])
    assert client.patches[-1][1]["status"]["groups"]["map"]["evicted"] == 1


# --- one bad Job costs only itself (issue #31) ---------------------------------------------------------


def _malformed(template: Any = None, **group_fields: Any) -> dict[str, Any]:
    g = group("map", 1)
    if template is not None:
        g["template"] = template
    g.update(group_fields)
    return g


@pytest.mark.parametrize(("bad_group", "field"), [
    pytest.param(_malformed({"spec": {"containers": [1]}}), "containers", id="containers-of-numbers"),
    pytest.param(_malformed({"spec": {"containers": "abc"}}), "containers", id="containers-a-string"),
    pytest.param(_malformed({"spec": {"containers": [{"name": "c", "resources": 5}]}}), "resources",
                 id="resources-a-number"),
    pytest.param(_malformed({"metadata": 5, "spec": {"containers": []}}), "template.metadata", id="metadata-5"),
    pytest.param(_malformed({"metadata": {"annotations": {labels.ANN_DISK_BANDWIDTH: "1e9999999"}},
                             "spec": {"containers": []}}), labels.ANN_DISK_BANDWIDTH, id="bandwidth-overflow"),
    pytest.param("not a group", "spec.tasks[0]", id="group-a-string"),
])
def test_a_job_that_cannot_be_read_fails_alone_naming_the_field(bad_group: Any, field: str) -> None:
    """Each of these, admitted without the webhook's checks, raises in planning: it must fail alone."""
    metrics = OperatorMetrics()
    book = jobs.JobBook(metrics, clock=lambda: 1_735_689_610.0)
    bad = job(bad_group, name="poison")
    bad["metadata"]["uid"] = "poison-uid"
    good = job(group("map", 1), name="fine")
    book.upsert_job(bad)
    book.upsert_job(good)
    blocked = lambda j: book.demands.blocked_groups(j, {"research"}, [{"cpu": 8.0, "memory": 32e9}])  # noqa: E731
    plans = book.plans(lambda _: set(), None, blocked)
    assert plans[("ns", "poison")].phase is Phase.FAILED
    message = plans[("ns", "poison")].status["conditions"][0]["message"]
    assert field in message and message.startswith("the Job cannot be planned"), message
    assert plans[("ns", "fine")].phase is Phase.PENDING and plans[("ns", "fine")].releasable
    assert [g.job for g in pending_groups(book, plans, 1_735_689_610.0)] == ["ns/fine"]
    assert metrics.bad_objects.count("job") == 1
    book.plans(lambda _: set(), None, blocked)  # planned again: counted once
    assert metrics.bad_objects.count("job") == 1


def test_a_job_a_later_step_cannot_handle_fails_at_the_next_plan_and_a_new_spec_starts_afresh() -> None:
    book = jobs.JobBook(OperatorMetrics(), clock=lambda: 1_735_689_610.0)
    j = job(group("map", 1))
    key = ("ns", "train")
    book.upsert_job(j)
    assert book.plans(lambda _: set(), None)[key].phase is Phase.PENDING
    book.break_job(key, OverflowError("int too large to convert to float"))
    failed = book.plans(lambda _: set(), None)[key]
    assert failed.phase is Phase.FAILED
    assert "OverflowError: int too large" in failed.status["conditions"][0]["message"]
    fixed = job(group("map", 2))
    fixed["metadata"]["generation"] = 2
    book.upsert_job(fixed)
    assert book.plans(lambda _: set(), None)[key].phase is Phase.PENDING


def test_a_job_recreated_under_its_name_plans_with_its_own_pods_not_its_predecessors() -> None:
    """``kubectl delete sjob train; kubectl apply -f train.yaml`` before the old pods are collected: the new Job
    runs its tasks; the old pods (owned by the old uid) are not its own."""
    book = jobs.JobBook(OperatorMetrics(), clock=lambda: 1_735_689_610.0)
    key = ("ns", "train")
    old = job(group("map", 2))
    book.upsert_job(old)
    for i in range(2):
        book.apply_pod_event("MODIFIED", _owned(pod("train", "map", i, phase="Succeeded"), old))
    assert book.plans(lambda _: set(), None)[key].phase is Phase.SUCCEEDED
    book.remove_job(key)
    new = job(group("map", 2))
    new["metadata"]["uid"] = "new-uid"
    book.upsert_job(new)
    plan = book.plans(lambda _: set(), None)[key]
    assert plan.phase is Phase.PENDING
    assert plan.releasable == [TaskRef("map", 0, 0), TaskRef("map", 1, 0)]


def test_jobs_deleted_while_standing_by_are_forgotten_and_newer_ones_kept() -> None:
    book = jobs.JobBook(OperatorMetrics(), clock=lambda: 1_735_689_610.0)
    kept, deleted, recreated = job(group("a"), name="kept"), job(group("a"), name="deleted"), job(group("a"), name="re")
    for j in (kept, deleted, recreated):
        book.upsert_job(j)
    before = book.job_uids()
    newer = job(group("a"), name="newer")  # its event came after the snapshot, and after the list was read
    book.upsert_job(newer)
    again = job(group("a"), name="re")
    again["metadata"]["uid"] = "second-uid"  # deleted and created again: the book has the new one
    book.upsert_job(again)
    gone = book.forget_missing(before, [kept])
    assert gone == [("ns", "deleted")]
    assert sorted(book.job_keys()) == [("ns", "kept"), ("ns", "newer"), ("ns", "re")]


def test_the_learned_uids_stay_bounded_in_a_burst_of_finishes() -> None:
    learned = jobs.LearnedTasks(window_s=600, max_uids=100)
    for i in range(1000):  # 1000 tasks finishing within one second: all inside the window
        learned.add(f"u{i}", 1000.0 + i / 1000)
    assert len(learned.state()["uids"]) <= 100
    assert not learned.fresh("u999", 1000.999) and not learned.fresh("u0", 1000.0), "none taught twice"
    assert learned.fresh("new", 1001.5)


def test_a_huge_expected_duration_stored_before_the_schema_bound_is_taken_at_the_bound() -> None:
    """Duration × tasks used to overflow to +inf, which remaining work mapped to 0: the Job jumped the SRTF queue."""
    from stowage.operator import crd

    book = jobs.JobBook(OperatorMetrics(), clock=lambda: 1_735_689_610.0)
    huge = job(group("map", 64, duration=1e308), name="huge")
    book.upsert_job(huge)
    plans = book.plans(lambda _: set(), {"cpu": 8.0, "memory": 32e9})
    (pending,) = pending_groups(book, plans, 1_735_689_610.0)
    assert pending.expected_duration_s == crd.MAX_EXPECTED_DURATION_S
    assert 0 < plans[("ns", "huge")].status["remainingWork"] < float("inf")


def test_a_jobs_cached_demand_goes_with_the_job() -> None:
    book = jobs.JobBook(OperatorMetrics(), clock=lambda: 1_735_689_610.0)
    first = job(group("map", 1))
    book.upsert_job(first)
    assert book.demands.task_demand(first, "map") is not None
    again = job(group("map", 1, cpu="2"))
    again["metadata"]["uid"] = "second-uid"  # deleted and created again under its name
    book.upsert_job(again)
    assert book.demands.task_demand(again, "map")["cpu"] == 2.0
    book.remove_job(("ns", "train"))
    assert book.demands._demand == {}, "a cluster that runs a Job a minute would otherwise keep every Job's demand"
