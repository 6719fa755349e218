"""The operator feeds the estimator and shows its estimates (issue #19), without a cluster.

The Job book turns a Job's pods into the estimator's evidence (``PendingGroup.finished_tasks``, ``finished_mean_s``,
``running_elapsed_s``, ``recurring_key``); the runtime teaches the dispatcher each finished task with its queue,
group and recurring key and observes ``stowage_estimate_ratio{source}``; the Job's ``status.estimate`` shows the
last decision's estimates and changes only when they do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import generate_latest
from stowage.operator import jobs, tasks
from stowage.operator.dispatcher import Dispatcher, DispatchView, NodeRecord, QueueRecord, RunningPod
from stowage.operator.job_writer import JobWriter
from stowage.operator.learning import lessons
from stowage.operator.metrics import OperatorMetrics
from stowage.operator.runtime import OperatorRuntime
from stowage.operator.snapshot import pending_groups

from stowage import labels
from stowage.config import StowageSettings
from stowage.labels import METRICS, PodClass
from stowage.policy import estimates
from stowage.resources import ResourceVector
from tests.operator.test_jobbook import StubClient
from tests.operator.test_tasks import group, job, pod

T0 = 1_735_689_600.0  # 2025-01-01T00:00:00Z, the test Job's creation
KEY = ("ns", "train")


def _stamp(t: float) -> str:
    return jobs.rfc3339(t)


def _owned(p: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    p["metadata"]["ownerReferences"] = [tasks.owner_reference(owner)]
    return p


def succeeded(owner: dict[str, Any], group_name: str, index: int, start: float, end: float,
              attempt: int = 0) -> dict[str, Any]:
    """A task pod that ran from ``start`` to ``end`` (clock seconds) and succeeded."""
    p = _owned(pod(str(owner["metadata"]["name"]), group_name, index, attempt, phase="Succeeded"), owner)
    p["status"]["containerStatuses"] = [{"name": "c", "state": {"terminated": {
        "exitCode": 0, "startedAt": _stamp(start), "finishedAt": _stamp(end)}}}]
    return p


def running(owner: dict[str, Any], group_name: str, index: int, start: float, **kwargs: Any) -> dict[str, Any]:
    """A task pod whose container has run since ``start``."""
    p = _owned(pod(str(owner["metadata"]["name"]), group_name, index, **kwargs), owner)
    p["status"]["containerStatuses"] = [{"name": "c", "state": {"running": {"startedAt": _stamp(start)}}}]
    return p


def _book(clock: float = T0 + 100) -> tuple[jobs.JobBook, StubClient]:
    client = StubClient()
    return jobs.JobBook(OperatorMetrics(), clock=lambda: clock), client


def _writer(book: jobs.JobBook, client: StubClient, clock: float = T0 + 100) -> JobWriter:
    return JobWriter(client, book, OperatorMetrics(), clock=lambda: clock)  # type: ignore[arg-type]


def _groups(book: jobs.JobBook, now: float) -> dict[str, Any]:
    plans = book.plans(lambda _: set(), None)
    return {g.group: g for g in pending_groups(book, plans, now)}


# --- the evidence ----------------------------------------------------------------------------------


def test_pending_groups_carry_the_finished_tasks_the_longest_running_one_and_the_recurring_key() -> None:
    book, _ = _book()
    j = job(group("map", 5, duration=None), group("reduce", 1, duration=None))
    book.upsert_job(j)
    for p in (succeeded(j, "map", 0, T0 + 10, T0 + 20), succeeded(j, "map", 1, T0 + 10, T0 + 40),
              running(j, "map", 2, T0 + 50), running(j, "map", 3, T0 + 30)):
        book.apply_pod_event("ADDED", p)
    got = _groups(book, now=T0 + 100)
    m = got["map"]
    assert (m.finished_tasks, m.finished_mean_s, m.running_elapsed_s) == (2, 20.0, 70.0)  # (10 + 30) / 2; 100 - 30
    assert m.recurring_key == "ns/train"
    assert math.isnan(m.expected_duration_s), "expected_duration_s stays the user's hint only"
    r = got["reduce"]
    assert (r.finished_tasks, math.isnan(r.finished_mean_s), r.running_elapsed_s) == (0, True, 0.0)
    # The clock is the caller's: the same book, later, sees the running task older.
    assert _groups(book, now=T0 + 130)["map"].running_elapsed_s == 100.0


def test_a_succeeded_pod_deleted_since_still_counts_and_a_new_success_moves_the_mean() -> None:
    book, _ = _book()
    j = job(group("map", 4, duration=None))
    book.upsert_job(j)
    first = succeeded(j, "map", 0, T0, T0 + 10)
    book.apply_pod_event("ADDED", first)
    book.apply_pod_event("ADDED", running(j, "map", 1, T0))
    m = _groups(book, T0 + 100)["map"]
    assert (m.finished_tasks, m.finished_mean_s, m.running_elapsed_s) == (1, 10.0, 100.0)
    book.apply_pod_event("MODIFIED", succeeded(j, "map", 1, T0, T0 + 30))
    m = _groups(book, T0 + 100)["map"]
    assert (m.finished_tasks, m.finished_mean_s, m.running_elapsed_s) == (2, 20.0, 0.0)
    book.apply_pod_event("DELETED", first)
    m = _groups(book, T0 + 100)["map"]
    assert (m.finished_tasks, m.finished_mean_s) == (2, 20.0)


def test_pods_that_do_not_run_now_or_belong_to_a_predecessor_are_no_evidence() -> None:
    book, _ = _book()
    j = job(group("map", 6, duration=None))
    book.upsert_job(j)
    stranger = succeeded(j, "map", 0, T0, T0 + 500)
    stranger["metadata"]["ownerReferences"][0]["uid"] = "an-earlier-job-of-the-same-name"
    leaving = running(j, "map", 1, T0, deleting=True)
    disrupted = running(j, "map", 2, T0, disruption="EvictionByEvictionAPI")
    waiting = _owned(pod("train", "map", 3, phase="Pending"), j)  # bound, not started: no containerStatuses
    no_span = _owned(pod("train", "map", 4, phase="Succeeded"), j)  # succeeded, run time unknown
    for p in (stranger, leaving, disrupted, waiting, no_span):
        book.apply_pod_event("ADDED", p)
    m = _groups(book, T0 + 100)["map"]
    assert (m.finished_tasks, math.isnan(m.finished_mean_s), m.running_elapsed_s) == (0, True, 0.0)


def test_a_job_recreated_under_its_name_forgets_its_predecessors_runs() -> None:
    book, _ = _book()
    j = job(group("map", 3, duration=None))
    book.upsert_job(j)
    book.apply_pod_event("ADDED", succeeded(j, "map", 0, T0, T0 + 10))
    assert _groups(book, T0 + 100)["map"].finished_tasks == 1
    book.remove_job(KEY)
    again = job(group("map", 3, duration=None))
    again["metadata"]["uid"] = "job-uid-2"
    book.upsert_job(again)
    assert _groups(book, T0 + 100)["map"].finished_tasks == 0


@pytest.mark.parametrize(("meta", "key"), [
    pytest.param({"name": "etl-42"}, "ns/etl", id="name-without-run-number"),
    pytest.param({"name": "etl-x7k2p", "generateName": "etl-"}, "ns/etl", id="generate-name"),
    pytest.param({"name": "etl-42", "labels": {labels.LABEL_RECURRING: "nightly"}}, "ns/nightly", id="label"),
])
def test_the_recurring_key_is_the_estimators(meta: dict[str, Any], key: str) -> None:
    j = job(group("map", 1))
    j["metadata"].update(meta)
    assert jobs.job_recurring_key(j) == key
    assert key == estimates.recurring_key("ns", meta["name"], meta.get("labels"), meta.get("generateName"))


def test_lessons_name_the_queue_the_group_and_the_recurring_job() -> None:
    book, _ = _book()
    j = job(group("map", 2, duration=None))
    j["metadata"]["labels"] = {labels.LABEL_RECURRING: "nightly"}
    book.upsert_job(j)
    book.apply_pod_event("ADDED", succeeded(j, "map", 0, T0 + 5, T0 + 17))
    plan = book.plans(lambda _: set(), None)[KEY]
    (lesson,) = lessons(book, KEY, plan, {"cpu": 8.0, "memory": 16 * 2**30})
    assert (lesson.duration_s, lesson.queue, lesson.group_key, lesson.group, lesson.recurring_key) == \
        (12.0, "research", "ns/train/map", "map", "ns/nightly")
    assert (lesson.features["framework"], lesson.features["stage"]) == ("research", "map")
    assert lessons(book, KEY, plan, {"cpu": 8.0}) == [], "each task teaches once"


# --- learning and the ratio metric ----------------------------------------------------------------


class RecordingDispatcher:
    """What the runtime calls on the dispatcher: records the lessons, answers a held estimate."""

    def __init__(self, held: tuple[float, str] | None) -> None:
        self.held = held
        self.calls: list[tuple[Any, ...]] = []

    def observe_finished(self, features: Any, durations_s: Sequence[float], *, queue: str, group_key: str,
                         recurring_key: str | None, group: str) -> tuple[float, str] | None:
        self.calls.append((tuple(durations_s), queue, group_key, recurring_key, group))
        return self.held

    def estimates(self) -> dict[str, tuple[float, str]]:
        return {"ns/train/map": (30.0, "phase"), "ns/train/reduce": (5.0, "prior"), "ns/plain-pod": (9.0, "hint")}


def _runtime(dispatcher: Any, clock: float = T0 + 100) -> OperatorRuntime:
    return OperatorRuntime(StowageSettings(), StubClient(), dispatcher=dispatcher, clock=lambda: clock)  # type: ignore[arg-type]


def _ratio(metrics: OperatorMetrics, source: str, what: str = "count") -> float:
    value = metrics.registry.get_sample_value(f"{METRICS.ESTIMATE_RATIO}_{what}", {"source": source})
    assert value is not None, f"no {METRICS.ESTIMATE_RATIO} series for source {source}"
    return value


def test_each_finished_task_teaches_the_dispatcher_and_observes_estimate_over_actual() -> None:
    dispatcher = RecordingDispatcher(held=(30.0, "phase"))
    rt = _runtime(dispatcher)
    j = job(group("map", 3, duration=None))
    rt.jobs.upsert_job(j)
    rt.jobs.apply_pod_event("ADDED", succeeded(j, "map", 0, T0, T0 + 20))
    rt.jobs.apply_pod_event("ADDED", succeeded(j, "map", 1, T0, T0 + 60))
    plan = rt.jobs.plans(lambda _: set(), None)[KEY]
    assert rt.learning.learn(KEY, plan, {"cpu": 8.0}) == 2
    assert sorted(dispatcher.calls) == [((20.0,), "research", "ns/train/map", "ns/train", "map"),
                                        ((60.0,), "research", "ns/train/map", "ns/train", "map")]
    assert _ratio(rt.metrics, "phase") == 2 and _ratio(rt.metrics, "phase", "sum") == pytest.approx(1.5 + 0.5)
    text = generate_latest(rt.metrics.registry).decode()
    assert f'{METRICS.ESTIMATE_RATIO}_bucket{{le="0.5",source="phase"}} 1.0' in text  # 30/60
    assert f'{METRICS.ESTIMATE_RATIO}_bucket{{le="1.25",source="phase"}} 1.0' in text  # 30/20 = 1.5 is above
    for source in estimates.SOURCE_NAMES:  # every source's series exists before its first task
        assert f'{METRICS.ESTIMATE_RATIO}_count{{source="{source}"}}' in text


@pytest.mark.parametrize("held", [None, (math.nan, "prior")])
def test_no_ratio_without_an_estimate_held_for_the_group(held: tuple[float, str] | None) -> None:
    rt = _runtime(RecordingDispatcher(held=held))
    j = job(group("map", 1, duration=None))
    rt.jobs.upsert_job(j)
    rt.jobs.apply_pod_event("ADDED", succeeded(j, "map", 0, T0, T0 + 20))
    assert rt.learning.learn(KEY, rt.jobs.plans(lambda _: set(), None)[KEY], {}) == 1
    assert all(_ratio(rt.metrics, s) == 0 for s in estimates.SOURCE_NAMES)


def test_a_task_that_took_no_time_teaches_but_observes_no_ratio() -> None:
    dispatcher = RecordingDispatcher(held=(30.0, "prior"))
    rt = _runtime(dispatcher)
    j = job(group("map", 1, duration=None))
    rt.jobs.upsert_job(j)
    rt.jobs.apply_pod_event("ADDED", succeeded(j, "map", 0, T0, T0))
    rt.learning.learn(KEY, rt.jobs.plans(lambda _: set(), None)[KEY], {})
    assert len(dispatcher.calls) == 1 and _ratio(rt.metrics, "prior") == 0


def test_the_real_dispatcher_reports_what_it_estimated_at_its_last_decision() -> None:
    """The whole loop on the real Dispatcher: the book's groups → decide → a task finishes → the ratio of the
    estimate that decision held (the queue's prior: no hint, no finished task, no history yet)."""
    now = T0 + 100
    dispatcher = Dispatcher(StowageSettings(), clock=lambda: now)
    rt = _runtime(dispatcher, clock=now)
    j = job(group("map", 3, duration=None))
    rt.jobs.upsert_job(j)
    rt.jobs.apply_pod_event("ADDED", running(j, "map", 0, T0 + 80))
    plans = rt.jobs.plans(lambda _: set(), None)
    view = DispatchView(nodes=[NodeRecord("n1", ResourceVector({"cpu": 8.0, "memory": 16 * 2**30}))], running=[],
                        queues=[QueueRecord("research")], groups=pending_groups(rt.jobs, plans, now))
    dispatcher.decide(view)
    seconds, source = dispatcher.estimates()["ns/train/map"]
    assert source in estimates.SOURCE_NAMES and seconds > 0
    assert rt.learning.job_estimates() == {KEY: {"map": (seconds, source)}}
    rt.jobs.apply_pod_event("MODIFIED", succeeded(j, "map", 0, T0 + 80, T0 + 110))
    rt.learning.learn(KEY, rt.jobs.plans(lambda _: set(), None)[KEY], {"cpu": 8.0, "memory": 16 * 2**30})
    assert _ratio(rt.metrics, source) == 1
    assert _ratio(rt.metrics, source, "sum") == pytest.approx(seconds / 30.0)


def test_job_estimates_group_the_dispatchers_by_job_and_leave_plain_pods_out() -> None:
    rt = _runtime(RecordingDispatcher(held=None))
    assert rt.learning.job_estimates() == {KEY: {"map": (30.0, "phase"), "reduce": (5.0, "prior")}}


# --- the classifier is asked about what it was taught ---------------------------------------------

NODE = NodeRecord("n1", ResourceVector({"cpu": 8.0, "memory": 16 * 2**30}))  # one node: the mean node
MEAN = {"cpu": 8.0, "memory": 16 * 2**30}  # what OperatorRuntime._mean_capacity gives for it


def _finish(rt: OperatorRuntime, j: dict[str, Any], group_name: str, indexes: range, run_s: float) -> None:
    """Tasks ``indexes`` of the Job succeed after ``run_s``; the runtime learns from them (one pass)."""
    key = ("ns", str(j["metadata"]["name"]))
    for i in indexes:
        p = succeeded(j, group_name, i, T0, T0 + run_s)
        p["metadata"]["uid"] = f"{key[1]}-{p['metadata']['uid']}"  # each Job's pods their own (learned once each)
        rt.jobs.apply_pod_event("ADDED", p)
    rt.learning.learn(key, rt.jobs.plans(lambda _: set(), None)[key], MEAN)


def test_the_dispatcher_asks_the_classifier_about_the_features_a_finished_task_taught() -> None:
    """One task of the group finished: the next ones are the same kind of task, so the classifier is asked
    about exactly the features that task taught it (queue, app, stage, progress and the demand bucket)."""
    now = T0 + 100
    dispatcher = Dispatcher(StowageSettings(), clock=lambda: now)
    rt = _runtime(dispatcher, clock=now)
    j = job(group("map", 3, duration=None))
    rt.jobs.upsert_job(j)
    rt.jobs.apply_pod_event("ADDED", succeeded(j, "map", 0, T0, T0 + 12))
    plans = rt.jobs.plans(lambda _: set(), None)
    (lesson,) = lessons(rt.jobs, KEY, plans[KEY], MEAN)
    view = DispatchView(nodes=[NODE], running=[], queues=[QueueRecord("research")],
                        groups=pending_groups(rt.jobs, plans, now))
    a = dispatcher._arrays(view)
    asked = dispatcher.decide_input(view, a, now).features[0]
    assert asked == lesson.features


def test_an_auto_task_its_finished_predecessors_taught_short_spills_onto_harvested_capacity() -> None:
    """The whole-stack spill (tests/system/test_sharing.py, after its first test) without a cluster: the
    classifier learned 60 tasks of Job ``a`` in another queue and 30 of ``b`` in this one (12 s each, learned in
    four progress buckets each), then ``spill-0``'s 6 tasks (3 s): all short. The node is full of regular pods
    but mostly idle, so ``spill-1``'s ``auto`` tasks, the kind ``spill-0`` taught short, run opportunistic."""
    now = T0 + 100
    dispatcher = Dispatcher(StowageSettings(), clock=lambda: now)
    rt = _runtime(dispatcher, clock=now)
    for name, queue, group_name, steps, run_s in (
            ("a", "bulk", "t", (14, 29, 42, 60), 12.0), ("b", "research", "t", (2, 14, 22, 30), 12.0),
            ("spill-0", "research", "w", (1, 6), 3.0)):
        done = job(group(group_name, steps[-1], duration=None), name=name)
        done["spec"]["queue"] = queue
        rt.jobs.upsert_job(done)
        for lo, hi in zip((0, *steps), steps, strict=False):
            _finish(rt, done, group_name, range(lo, hi), run_s)
    assert dispatcher.classifier.class_counts == (96, 0), "every task so far was short"
    rt.jobs.upsert_job(job(group("w", 4, duration=None), name="spill-1"))
    plans = rt.jobs.plans(lambda _: set(), None)
    idle = NodeRecord("n1", NODE.allocatable, usage=ResourceVector({"cpu": 1.0, "memory": 2 * 2**30}))
    view = DispatchView(nodes=[idle], running=[RunningPod("n1", NODE.allocatable, queue="bulk", bound_at_s=0.0)],
                        queues=[QueueRecord("bulk", weight=2.0), QueueRecord("research")],
                        groups=pending_groups(rt.jobs, plans, now))
    releases = dispatcher.decide(view)
    assert [(r.group_key, r.pod_class, r.count) for r in releases] == [("ns/spill-1/w", PodClass.OPPORTUNISTIC, 4)]


# --- status.estimate -------------------------------------------------------------------------------


def _plan_groups(*counts: tuple[str, int, int]) -> tuple[tasks.GroupPlan, ...]:
    return tuple(tasks.GroupPlan(name=n, replicas=p + r, depends_on=(), pending=p, running=r, succeeded=0,
                                 failed=0, evicted=0, exhausted=(), opportunistic_running=0, completed=frozenset())
                 for n, p, r in counts)


def test_estimate_status_rounds_to_two_digits_and_counts_pending_and_running_tasks() -> None:
    groups = _plan_groups(("map", 3, 2), ("reduce", 1, 0))
    status = tasks.estimate_status(groups, {"map": (123.4, "phase"), "reduce": (0.456, "prior")})
    assert status == {"remainingWorkSeconds": 5 * 120.0 + 0.46,
                      "groups": {"map": {"taskSeconds": 120.0, "source": "phase"},
                                 "reduce": {"taskSeconds": 0.46, "source": "prior"}}}


def test_estimate_status_keeps_a_groups_last_estimate_and_drops_what_is_not_the_jobs() -> None:
    groups = _plan_groups(("map", 0, 0), ("reduce", 2, 0))
    old = {"remainingWorkSeconds": 99, "groups": {"map": {"taskSeconds": 40, "source": "hint"},
                                                  "gone": {"taskSeconds": 1, "source": "hint"},
                                                  "reduce": {"taskSeconds": "bad", "source": "hint"}}}
    status = tasks.estimate_status(groups, {"reduce": (7.0, "history"), "other": (1.0, "hint")}, old)
    assert status == {"remainingWorkSeconds": 14.0,
                      "groups": {"map": {"taskSeconds": 40, "source": "hint"},
                                 "reduce": {"taskSeconds": 7.0, "source": "history"}}}
    assert tasks.estimate_status(groups, None, None) is None
    assert tasks.estimate_status(groups, {"reduce": (math.nan, "prior")}, {"groups": "garbage"}) is None


def test_the_status_shows_the_estimate_and_is_written_again_only_when_it_changes() -> None:
    book, client = _book()
    writer = _writer(book, client)
    j = job(group("map", 4, duration=None))
    book.upsert_job(j)
    book.apply_pod_event("ADDED", running(j, "map", 0, T0 + 50))
    plan = book.plans(lambda _: set(), None)[KEY]
    writer.apply(KEY, plan)
    assert len(client.patches) == 1 and "estimate" not in client.patches[0][1]["status"], "nothing estimated yet"
    writer.apply(KEY, plan, {"map": (123.4, "elapsed")})
    assert len(client.patches) == 2
    assert client.patches[-1][1]["status"]["estimate"] == {
        "remainingWorkSeconds": 480.0, "groups": {"map": {"taskSeconds": 120.0, "source": "elapsed"}}}
    writer.apply(KEY, plan, {"map": (124.9, "elapsed")})  # the same to 2 significant digits
    writer.apply(KEY, plan, None)  # no decision held: the written estimate stays
    assert len(client.patches) == 2, "an estimate that did not change is not written again"
    writer.apply(KEY, plan, {"map": (131.0, "elapsed")})
    assert len(client.patches) == 3 and client.patches[-1][1]["status"]["estimate"]["groups"]["map"] == \
        {"taskSeconds": 130.0, "source": "elapsed"}
    # A plan computed from what was written (the next pass) writes nothing new either.
    writer.apply(KEY, book.plans(lambda _: set(), None)[KEY], {"map": (129.0, "elapsed")})
    assert len(client.patches) == 3


def test_the_estimate_read_back_after_a_restart_is_not_written_again() -> None:
    """A new operator starts from the status the API server holds (whole numbers come back as ints)."""
    book, client = _book()
    writer = _writer(book, client)
    j = job(group("map", 2, duration=None))
    book.upsert_job(j)
    first = book.plans(lambda _: set(), None)[KEY]
    writer.apply(KEY, first, {"map": (1234.0, "prior")})
    written = client.patches[-1][1]["status"]
    restarted, client2 = _book()
    again = job(group("map", 2, duration=None), status={**written, "estimate": {
        "remainingWorkSeconds": 2400, "groups": {"map": {"taskSeconds": 1200, "source": "prior"}}}})
    restarted.upsert_job(again)
    _writer(restarted, client2).apply(KEY, restarted.plans(lambda _: set(), None)[KEY], {"map": (1190.0, "prior")})
    assert client2.patches == []
