"""Why a pod waits, written where a user looks (``stowage.operator.holds``): the ``stowage.io/Held`` condition and
Events on held plain pods, the Job's ``Held`` condition, ``stowage_held_pods``.

The write rules run on a recording client (each reason, a change of reason, the rate limit, a release, a deleted
pod); the condition's patch runs once on the real API server, which must keep ``PodScheduled`` beside it.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from prometheus_client import generate_latest
from stowage.operator import holds, jobs, tasks
from stowage.operator.dispatcher import Dispatcher, DispatchView, NodeRecord, PendingGroup, QueueRecord, RunningPod
from stowage.operator.job_writer import JobWriter
from stowage.operator.metrics import OperatorMetrics
from stowage.operator.runtime import GatedPods

from stowage import labels
from stowage.config import StowageSettings
from stowage.kube import api
from stowage.labels import Opportunistic
from stowage.policy import holding
from stowage.resources import ResourceVector
from tests.operator.test_jobbook import StubClient
from tests.operator.test_tasks import group, job
from tests.support.controlplane import ControlPlane

GI = 2.0**30
QUOTA = holding.Hold("quota", "queue 'q' is at its cpu quota: 1/1 in use, a task needs 1")
ROOM = holding.Hold("room", "no node has room for a task: cpu 1 needed, 500m free on n0 (the closest of 2 nodes)")


class Recorder:
    """A client that records condition patches and Events; ``missing`` pods answer 404."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any], str]] = []
        self.events: list[dict[str, Any]] = []
        self.missing: set[str] = set()

    def patch(self, path: str, body: dict[str, Any], content_type: str = api.MERGE_PATCH) -> dict[str, Any]:
        if any(path.endswith(f"/pods/{name}/status") for name in self.missing):
            raise api.ApiError(404, "NotFound", "pods not found")
        self.patches.append((path, body, content_type))
        return {}

    def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        return event

    def conditions(self) -> list[tuple[str, str, str]]:
        return [(c["status"], c["reason"], c["message"]) for _, body, _ in self.patches
                for c in body["status"]["conditions"]]


def gated_pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}}


class Clock:
    def __init__(self) -> None:
        self.t = 1_735_689_600.0

    def __call__(self) -> float:
        return self.t


def test_each_held_pod_gets_its_condition_and_one_event_then_nothing_while_nothing_changes() -> None:
    client, clock = Recorder(), Clock()
    writer = holds.PodHolds(client, clock=clock)  # type: ignore[arg-type]
    writer.set({("ns", "p1"): (QUOTA, gated_pod("p1")), ("ns", "p2"): (QUOTA, gated_pod("p2"))})
    assert writer.flush() == 2
    assert client.conditions() == [("True", "WaitingForQuota", QUOTA.message)] * 2
    path, body, content_type = client.patches[0]
    assert path == "/api/v1/namespaces/ns/pods/p1/status" and content_type == holds.STRATEGIC_MERGE
    assert body["status"]["conditions"][0]["type"] == labels.CONDITION_HELD == "stowage.io/Held"
    assert [(e["reason"], e["message"], e["involvedObject"]["name"]) for e in client.events] == [
        ("WaitingForQuota", QUOTA.message, "p1"), ("WaitingForQuota", QUOTA.message, "p2")]
    clock.t += 5
    writer.set({("ns", "p1"): (QUOTA, gated_pod("p1")), ("ns", "p2"): (QUOTA, gated_pod("p2"))})
    assert writer.flush() == 0  # the same holds: no write


def test_a_new_reason_is_written_at_once_new_numbers_under_the_same_reason_at_most_once_a_minute() -> None:
    client, clock = Recorder(), Clock()
    writer = holds.PodHolds(client, clock=clock)  # type: ignore[arg-type]
    writer.set({("ns", "p1"): (QUOTA, gated_pod("p1"))})
    writer.flush()
    clock.t += 5
    writer.set({("ns", "p1"): (ROOM, gated_pod("p1"))})  # the quota was raised: now it waits for room
    assert writer.flush() == 1
    assert client.conditions()[-1] == ("True", "WaitingForRoom", ROOM.message)
    assert client.events[-1]["reason"] == "WaitingForQuota"  # the Event is rate-limited as the extender's: 1/min
    moved = holding.Hold("room", ROOM.message.replace("500m", "750m"))
    clock.t += 5
    writer.set({("ns", "p1"): (moved, gated_pod("p1"))})
    assert writer.flush() == 0  # only the numbers moved, 5 s after the last write
    clock.t += holds.REFRESH_S
    assert writer.flush() == 1 and client.conditions()[-1][2] == moved.message
    clock.t += holds.REFRESH_S
    writer.set({("ns", "p1"): (QUOTA, gated_pod("p1"))})
    writer.flush()
    assert [e["reason"] for e in client.events] == ["WaitingForQuota", "WaitingForQuota"]


def test_a_released_pod_gets_its_condition_false_once_and_a_deleted_one_is_forgotten() -> None:
    client, clock = Recorder(), Clock()
    writer = holds.PodHolds(client, clock=clock)  # type: ignore[arg-type]
    writer.set({("ns", "p1"): (QUOTA, gated_pod("p1")), ("ns", "p2"): (QUOTA, gated_pod("p2"))})
    writer.flush()
    client.missing.add("p2")
    writer.set({})
    assert writer.flush() == 2
    assert client.conditions()[-1] == ("False", "Released", "released by the dispatcher")
    assert writer.flush() == 0 and writer.pending() == []


def test_after_a_restart_a_pod_already_showing_its_hold_is_not_written_again() -> None:
    client, clock = Recorder(), Clock()
    writer = holds.PodHolds(client, clock=clock)  # type: ignore[arg-type]
    shown = {**gated_pod("p1"), "status": {"conditions": [
        {"type": labels.CONDITION_HELD, "status": "True", "reason": "WaitingForQuota", "message": QUOTA.message}]}}
    writer.set({("ns", "p1"): (QUOTA, shown), ("ns", "p2"): (QUOTA, gated_pod("p2"))})
    assert writer.flush() == 1 and client.patches[0][0].endswith("/pods/p2/status")
    writer.set({})  # both released: p1 too, though this operator never wrote it
    assert writer.flush() == 2


def test_a_backlog_is_written_in_batches_newest_reasons_first() -> None:
    client, clock = Recorder(), Clock()
    writer = holds.PodHolds(client, clock=clock)  # type: ignore[arg-type]
    writer.set({("ns", f"p{i}"): (QUOTA, gated_pod(f"p{i}")) for i in range(250)})
    assert [writer.flush() for _ in range(4)] == [100, 100, 50, 0]
    assert len(client.patches) == 250


def test_the_job_condition_counts_held_tasks_by_reason_and_names_each_group() -> None:
    held = holds.job_held([("map", 2, QUOTA), ("reduce", 1, ROOM), ("done", 0, ROOM)])
    assert held == ("WaitingForQuota", f"3 task(s) held (2 for quota, 1 for room). group 'map': {QUOTA.message}; "
                                       f"group 'reduce': {ROOM.message}")
    assert holds.job_held([("map", 0, QUOTA)]) is None


def test_job_status_says_held_while_held_and_not_held_after() -> None:
    client = StubClient()
    book = jobs.JobBook(OperatorMetrics(), clock=lambda: 1_735_689_610.0)
    writer = JobWriter(client, book, OperatorMetrics(), clock=lambda: 1_735_689_610.0)  # type: ignore[arg-type]
    book.upsert_job(job(group("map", 3)))
    key = ("ns", "train")
    plan = book.plans(lambda _: set(), None)[key]
    writer.apply(key, plan, None, ("WaitingForQuota", "3 task(s) held (3 for quota). group 'map': ..."))
    held = [c for c in client.patches[-1][1]["status"]["conditions"] if c["type"] == tasks.HELD]
    assert [(c["status"], c["reason"]) for c in held] == [("True", "WaitingForQuota")]
    writes = len(client.patches)
    writer.apply(key, plan, None, ("WaitingForQuota", "3 task(s) held (3 for quota). group 'map': ..."))
    assert len(client.patches) == writes  # unchanged: no write
    writer.apply(key, plan, None, None)
    held = [c for c in client.patches[-1][1]["status"]["conditions"] if c["type"] == tasks.HELD]
    assert [(c["status"], c["reason"]) for c in held] == [("False", "NotHeld")]


def _view(quota_cpu: float, running_cpu: float) -> DispatchView:
    node = NodeRecord("n0", ResourceVector({"cpu": 4.0, "memory": 16 * GI}), True, None, None, math.inf)
    pods = [PendingGroup(key=f"ns/p{i}", queue="q", demand=ResourceVector({"cpu": 1.0, "memory": GI}), releasable=1,
                         group=f"p{i}", intent=Opportunistic.FALSE, arrival_s=0.0, remaining_tasks=1)
            for i in range(2)]
    return DispatchView(nodes=[node], running=[RunningPod("n0", ResourceVector({"cpu": running_cpu, "memory": GI}),
                                                          "q")],
                        queues=[QueueRecord("q", quota={"cpu": quota_cpu})], groups=pods)


def test_the_dispatcher_keeps_each_held_groups_reason_and_it_changes_with_its_cause() -> None:
    dispatcher = Dispatcher(StowageSettings(), clock=lambda: 100.0)
    assert dispatcher.decide(_view(quota_cpu=1.0, running_cpu=1.0)) == []
    assert {k: h.reason for k, h in dispatcher.holds.items()} == {"ns/p0": "quota", "ns/p1": "quota"}
    assert dispatcher.holds["ns/p0"].message == "queue 'q' is at its cpu quota: 1/1 in use, a task needs 1"
    assert dispatcher.decide(_view(quota_cpu=10.0, running_cpu=3.5)) == []  # quota raised, the node full
    assert {h.reason for h in dispatcher.holds.values()} == {"room"}
    assert len(dispatcher.decide(_view(quota_cpu=10.0, running_cpu=1.0))) == 2  # room: both released
    assert dispatcher.holds == {}


def test_held_pods_gauge_has_every_reason_of_every_queue() -> None:
    metrics = OperatorMetrics()
    metrics.publish_holds({("q", "quota"): 2}, ["q", "other"])
    text = generate_latest(metrics.registry).decode()
    assert 'stowage_held_pods{queue="q",reason="quota"} 2.0' in text
    for queue in ("q", "other"):
        for reason in holding.REASONS:
            assert f'stowage_held_pods{{queue="{queue}",reason="{reason}"}}' in text


def test_the_condition_patch_on_the_real_api_server_keeps_pod_scheduled(control_plane: ControlPlane) -> None:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs the test's own control plane")
    client = api.KubeClient(api.load_config(control_plane.kubeconfig))
    ns = f"holds-{uuid.uuid4().hex[:6]}"
    client.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        pod = client.create(f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "held"},
            "spec": {"schedulerName": "nobody", "schedulingGates": [{"name": labels.GATE_ADMISSION}],
                     "containers": [{"name": "main", "image": "busybox"}]}})
        # What kube-scheduler writes on a gated pod; ours must sit beside it.
        client.patch(f"/api/v1/namespaces/{ns}/pods/held/status", {"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
             "message": "Scheduling is blocked due to non-empty scheduling gates"}]}}, holds.STRATEGIC_MERGE)
        writer = holds.PodHolds(client)
        writer.set({(ns, "held"): (QUOTA, pod)})
        assert writer.flush() == 1
        stored = client.get(f"/api/v1/namespaces/{ns}/pods/held")
        conditions = {c["type"]: c for c in stored["status"]["conditions"]}
        assert conditions["PodScheduled"]["reason"] == "SchedulingGated"
        held = conditions[labels.CONDITION_HELD]
        assert (held["status"], held["reason"], held["message"]) == ("True", "WaitingForQuota", QUOTA.message)
        events = client.get(f"/api/v1/namespaces/{ns}/events")["items"]
        assert [(e["reason"], e["message"]) for e in events] == [("WaitingForQuota", QUOTA.message)]
    finally:
        client.delete(f"/api/v1/namespaces/{ns}")


def test_our_own_condition_on_a_gated_pod_triggers_no_dispatch_pass() -> None:
    pokes: list[int] = []
    gated = GatedPods(lambda _ns: True)
    gated.on_change = lambda: pokes.append(1)
    pod = {"metadata": {"name": "p1", "namespace": "ns", "labels": {labels.LABEL_QUEUE: "q"}},
           "spec": {"schedulingGates": [{"name": labels.GATE_ADMISSION}], "containers": [{"name": "main"}]}}
    gated.apply_event("ADDED", pod)
    with_condition = {**pod, "status": {"conditions": [{"type": labels.CONDITION_HELD, "status": "True"}]}}
    gated.apply_event("MODIFIED", with_condition)
    assert len(pokes) == 1 and gated.pods() == [with_condition]  # cached, but no pass for it
    gated.apply_event("MODIFIED", {**with_condition, "spec": {"containers": [{"name": "main"}]}})  # released
    gated.apply_event("MODIFIED", {**with_condition, "spec": {"containers": [{"name": "main"}]}})  # Released written
    assert len(pokes) == 2 and gated.pods() == []
