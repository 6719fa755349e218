"""The dispatch loop's health and its answers to the API (issue #31) without a cluster: readiness and the pass
counters, a standby that never saves, a forbidden pod create that backs off and lets the queue move on."""

from __future__ import annotations

from typing import Any

import pytest
from stowage.operator.dispatcher import Dispatcher
from stowage.operator.runtime import REFUSAL_BACKOFF_S, OperatorRuntime
from stowage.operator.tasks import TaskRef

from stowage import labels
from stowage.config import StowageSettings
from stowage.kube import api
from stowage.kube.informer import Informer
from tests.operator.test_tasks import group, job

T0 = 1_735_689_600.0


class StubClient:
    """Records every write; pod creates answer ``create_error`` when set."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []
        self.events: list[dict[str, Any]] = []
        self.create_error: api.ApiError | None = None

    def get(self, path: str, params: Any = None) -> dict[str, Any]:
        raise api.ApiError(404, "NotFound", path)

    def list(self, path: str, params: Any = None, **_: Any) -> tuple[list[dict[str, Any]], str]:
        return [], "1"

    def patch(self, path: str, body: Any, content_type: str = api.MERGE_PATCH) -> dict[str, Any]:
        self.writes.append(("patch", path))
        return {}

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/pods") and self.create_error is not None:
            raise self.create_error
        self.writes.append(("create", path))
        return body

    def delete(self, path: str, body: Any = None) -> dict[str, Any]:
        self.writes.append(("delete", path))
        return {}

    def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        return event


def informer(name: str, synced: bool = True) -> Informer:
    """A real, unstarted Informer: its health is what readiness reads (synced, not failing to list or watch)."""
    made = Informer(StubClient(), "/api/v1/nodes", name=name, on_replace=lambda items: None,  # type: ignore[arg-type]
                    on_event=lambda kind, obj: None)
    if synced:
        made.synced.set()
    return made


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _runtime(client: StubClient, clock: Clock | None = None, **kwargs: Any) -> OperatorRuntime:
    settings = StowageSettings()
    return OperatorRuntime(settings, client, dispatcher=Dispatcher(settings), clock=clock or Clock(),  # type: ignore[arg-type]
                           **kwargs)


def test_readiness_waits_for_the_informers_and_a_complete_pass_and_says_why() -> None:
    rt = _runtime(StubClient())
    ok, text = rt.readiness()
    assert not ok and "informers not started" in text
    rt._informers = [informer("nodes"), informer("bound-pods", synced=False)]  # type: ignore[list-item]
    ok, text = rt.readiness()
    assert not ok and "informer bound-pods: not synced yet" in text
    rt._informers[1].synced.set()
    ok, text = rt.readiness()
    assert not ok and "no pass completed yet" in text
    assert rt.run_pass() and rt.readiness()[0]
    assert rt.metrics.registry.get_sample_value(labels.METRICS.LAST_PASS_AGE) < 60
    failing = rt._informers[1]
    failing._failing_since, failing.last_error = failing._clock() - 2 * failing.stale_after_s, "ApiError: 503"
    ok, text = rt.readiness()
    assert not ok and "informer bound-pods: failing to list or watch" in text and "503" in text


def test_a_pass_that_fails_is_counted_by_its_stage_and_readiness_fails_once_stale(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rt = _runtime(StubClient(), pass_stale_after_s=0.0)
    rt._informers = [informer("nodes")]  # type: ignore[list-item]

    def broken(view: Any) -> Any:
        raise RuntimeError("the decision failed")

    monkeypatch.setattr(rt.dispatcher, "decide", broken)
    assert not rt.run_pass()
    assert rt.metrics.registry.get_sample_value(f"{labels.METRICS.PASS_ERRORS_TOTAL}", {"stage": "decide"}) == 1
    assert rt.metrics.registry.get_sample_value(f"{labels.METRICS.PASS_ERRORS_TOTAL}", {"stage": "plan"}) == 0
    ok, text = rt.readiness()
    assert not ok and "last error: decide: RuntimeError: the decision failed" in text


def test_a_standby_that_never_acted_saves_nothing_when_it_stops() -> None:
    client = StubClient()
    rt = _runtime(client, acting=lambda: False)
    rt._informers = [informer("nodes")]  # type: ignore[list-item]
    assert rt.run_pass() and rt.readiness()[0], "a standby's idle pass is a complete pass"
    rt.stop()
    assert not [w for w in client.writes if "configmaps" in w[1]], client.writes


def test_a_leader_saves_when_it_stops() -> None:
    client = StubClient()
    rt = _runtime(client)
    rt._informers = [informer("nodes")]  # type: ignore[list-item]
    rt.run_pass()
    client.writes.clear()
    rt.stop()
    assert [w for w in client.writes if "configmaps" in w[1]], "the acting replica's state is written on the way out"


def test_a_forbidden_pod_create_backs_off_says_why_and_leaves_the_queue_to_the_others() -> None:
    client, clock = StubClient(), Clock()
    rt = _runtime(client, clock)
    quota, other = job(group("map", 1), name="quota"), job(group("map", 1), name="other")
    other["metadata"]["uid"] = "other-uid"
    for j in (quota, other):
        rt.jobs.upsert_job(j)
    key = ("ns", "quota")
    client.create_error = api.ApiError(403, "Forbidden", 'pods "quota-map-0" is forbidden: exceeded quota: pods=0')
    assert not rt.writer.create_task(key, quota, TaskRef("map", 0, 0), labels.PodClass.REGULAR)
    held = rt.writer.held_for(key, clock.now)
    assert held is not None and held[0] == "PodCreateForbidden" and "exceeded quota" in held[1]
    assert [e["reason"] for e in client.events] == ["PodCreateForbidden"]
    plans = rt.jobs.plans(lambda _: set(), None)
    assert [g.job for g in rt.build_view(plans, clock.now).groups] == ["ns/other"], "the others go first"

    clock.now += REFUSAL_BACKOFF_S[0] + 1  # the backoff ran out: tried again, refused again, waits twice as long
    assert [g.job for g in rt.build_view(plans, clock.now).groups] == ["ns/quota", "ns/other"]
    rt.writer.create_task(key, quota, TaskRef("map", 0, 0), labels.PodClass.REGULAR)
    assert rt.writer.refused[key].until == pytest.approx(clock.now + 2 * REFUSAL_BACKOFF_S[0])
    assert len(client.events) == 2

    client.create_error = None  # the quota was raised
    clock.now += 2 * REFUSAL_BACKOFF_S[0] + 1
    assert rt.writer.create_task(key, quota, TaskRef("map", 0, 0), labels.PodClass.REGULAR)
    assert rt.writer.held_for(key, clock.now) is None


def test_a_deleted_job_clears_its_refusal() -> None:
    client, clock = StubClient(), Clock()
    rt = _runtime(client, clock)
    quota = job(group("map", 1), name="quota")
    rt.jobs.upsert_job(quota)
    client.create_error = api.ApiError(403, "Forbidden", "forbidden")
    rt.writer.create_task(("ns", "quota"), quota, TaskRef("map", 0, 0), labels.PodClass.REGULAR)
    rt.jobs.remove_job(("ns", "quota"))
    assert rt.writer.held_for(("ns", "quota"), clock.now) is None and not rt.writer.refused


def test_a_bound_pod_the_model_reads_in_part_gets_one_warning_event() -> None:
    client = StubClient()
    rt = _runtime(client)
    rt._informers = [informer("nodes")]  # type: ignore[list-item]
    pod = {"metadata": {"name": "web", "namespace": "team", "uid": "u-web",
                        "annotations": {labels.ANN_DISK_BANDWIDTH: "1e9999999"}},
           "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
           "status": {"phase": "Running"}}
    rt.cluster.replace_pods([pod])
    assert rt.run_pass() and rt.run_pass()
    (event,) = [e for e in client.events if e["reason"] == "InvalidStowageLabels"]
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "team",
                                       "uid": "u-web"}
    assert labels.ANN_DISK_BANDWIDTH in event["message"] and event["type"] == "Warning"
    assert rt.metrics.bad_objects.count("pod") == 1
