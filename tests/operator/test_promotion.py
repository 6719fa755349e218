"""Promotion of running opportunistic pods, without a cluster (issue #32 §2): the patch's shape, what the API
server's answers mean (a 422 turns promotion off), detection, and the dispatcher's part (which pods, in what
order, acted on by the runtime's pass). The live test is tests/system/test_promotion_live.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from stowage.operator import admission, promotion
from stowage.operator.dispatcher import Dispatcher, DispatchView, NodeRecord, QueueRecord, RunningPod

from stowage import labels
from stowage.config import StowageSettings
from stowage.kube import api
from stowage.resources import ResourceVector

GATE_ON = ('# HELP kubernetes_feature_enabled [BETA] ...\n'
           'kubernetes_feature_enabled{name="InPlacePodSidecar",stage="ALPHA"} 0\n'
           'kubernetes_feature_enabled{name="InPlacePodVerticalScaling",stage="ALPHA"} 1\n')


def converted(resources: dict[str, Any] | None = None, *, name: str = "p", uid: str = "u1",
              containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A running pod as the webhook converts it (``admission.convert_opportunistic``)."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ns", "labels": {labels.LABEL_QUEUE: "q"}},
           "spec": {"containers": containers or [{"name": "main", "image": "x",
                                                  "resources": resources or {"requests": {"cpu": "2",
                                                                                          "memory": "1Gi"}}}]}}
    out = admission.convert_opportunistic(pod)
    out["metadata"]["uid"] = uid
    out["spec"]["nodeName"] = "n1"
    out["status"] = {"phase": "Running"}
    return out


class Client:
    """The API as promotion sees it: GET a pod, PATCH it (answering ``answer`` when set), Events, /version, /metrics."""

    def __init__(self, pod: dict[str, Any] | None = None, *, minor: str = "30", metrics: str = GATE_ON) -> None:
        self.pod = pod
        self.minor, self.metrics = minor, metrics
        self.patches: list[tuple[str, Any, str]] = []
        self.events: list[dict[str, Any]] = []
        self.answer: api.ApiError | None = None
        self.evict_on_patch = False

    def get(self, path: str, params: Any = None) -> dict[str, Any]:
        if path == "/version":
            return {"major": "1", "minor": self.minor, "gitVersion": f"v1.{self.minor}.0"}
        if self.pod is None:
            raise api.ApiError(404, "NotFound", f"{path} not found")
        return self.pod

    def get_text(self, path: str) -> str:
        if isinstance(self.metrics, Exception):
            raise self.metrics
        return self.metrics

    def patch(self, path: str, body: Any, content_type: str = api.MERGE_PATCH) -> dict[str, Any]:
        if self.answer is not None:
            raise self.answer
        self.patches.append((path, body, content_type))
        if self.pod is None:
            return {}
        if self.evict_on_patch:  # an eviction lands between the promotion's read and this patch
            self.pod = {**self.pod, "metadata": {**self.pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z",
                                                 "resourceVersion": "8"}}
        return self.pod  # the API answers a patch with the object as it now is

    def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        return event


def promoter(client: Client) -> promotion.Promoter:
    p = promotion.Promoter(client, clock=lambda: 1_700_000_000.0)  # type: ignore[arg-type]
    p.detect()
    return p


# --- the patch -------------------------------------------------------------------------------------


def test_one_patch_restores_every_containers_requests_and_makes_the_class_regular() -> None:
    pod = converted(containers=[
        {"name": "main", "image": "x", "resources": {"requests": {"cpu": "2", "memory": "1Gi"},
                                                     "limits": {"memory": "2Gi"}}},
        {"name": "side", "image": "x", "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}}])
    client = Client(pod)
    assert promoter(client).promote("ns/p", "u1", "n1") is promotion.Outcome.PROMOTED
    ((path, body, kind),) = client.patches
    assert path == "/api/v1/namespaces/ns/pods/p" and kind == api.STRATEGIC_MERGE_PATCH
    assert body == {"metadata": {"uid": "u1", "labels": {labels.LABEL_CLASS: "regular"}},
                    "spec": {"containers": [
                        {"name": "main", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
                        {"name": "side", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}
    # only cpu and memory: the extended resource stowage.io/harvested cannot be resized and stays requested
    assert labels.HARVEST_RESOURCE not in json.dumps(body["spec"])
    (event,) = client.events
    assert event["reason"] == "Promoted" and event["type"] == "Normal"
    assert event["involvedObject"]["uid"] == "u1" and "n1" in event["message"]


def test_a_promotion_never_turns_a_pod_guaranteed() -> None:
    # requests = limits on every container would make the pod Guaranteed: the API server refuses a QoS change
    pod = converted({"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}})
    patch = promotion.resize_patch(pod)
    assert patch["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1999m", "memory": "1Gi"}


def test_from_v1_33_the_requests_go_through_the_resize_subresource_then_the_label() -> None:
    client = Client(converted(), minor="33")
    p = promoter(client)
    assert p.support.mode is promotion.Mode.RESIZE
    assert p.promote("ns/p", "u1") is promotion.Outcome.PROMOTED
    (resize, path_r, _), (label, path_l, _) = [(b, p_, k) for p_, b, k in client.patches]
    assert path_r.endswith("/pods/p/resize") and "metadata" not in resize
    assert path_l.endswith("/pods/p") and label["metadata"]["labels"] == {labels.LABEL_CLASS: "regular"}


def test_a_pod_evicted_between_the_read_and_the_resize_does_not_turn_regular() -> None:
    """The eviction's deletionTimestamp shows in the resize's answer: no class patch, the pod leaves opportunistic
    (the node monitor's eviction of it stands), and the class patch otherwise carries the version it read."""
    client = Client(converted(), minor="33")
    client.evict_on_patch = True
    assert promoter(client).promote("ns/p", "u1") is promotion.Outcome.GONE
    assert [path for path, _, _ in client.patches] == ["/api/v1/namespaces/ns/pods/p/resize"]
    fine = Client(converted(), minor="33")
    fine.pod["metadata"]["resourceVersion"] = "7"
    assert promoter(fine).promote("ns/p", "u1") is promotion.Outcome.PROMOTED
    assert fine.patches[-1][1]["metadata"]["resourceVersion"] == "7"  # a change since makes it a 409


@pytest.mark.parametrize("change", ["gone", "other-uid", "regular-already", "finished", "deleting"])
def test_a_pod_that_changed_since_the_decision_is_left_alone(change: str) -> None:
    pod = converted()
    if change == "other-uid":
        pod["metadata"]["uid"] = "u2"
    elif change == "regular-already":
        pod["metadata"]["labels"][labels.LABEL_CLASS] = "regular"
    elif change == "finished":
        pod["status"]["phase"] = "Succeeded"
    elif change == "deleting":
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    client = Client(None if change == "gone" else pod)
    assert promoter(client).promote("ns/p", "u1") is promotion.Outcome.GONE
    assert client.patches == [] and client.events == []


def test_a_pod_converted_without_recorded_requests_is_skipped_for_good() -> None:
    pod = converted()
    del pod["metadata"]["annotations"][labels.ANN_REQUESTS]
    client = Client(pod)
    p = promoter(client)
    assert p.promote("ns/p", "u1") is promotion.Outcome.SKIPPED
    assert p.skipped == {"u1"} and client.patches == [] and p.enabled


# --- the answers -----------------------------------------------------------------------------------


def test_a_422_on_the_first_promotion_turns_promotion_off() -> None:
    client = Client(converted())
    changes: list[bool] = []
    p = promotion.Promoter(client, clock=lambda: 0.0, on_change=changes.append)  # type: ignore[arg-type]
    p.detect()
    client.answer = api.ApiError(422, "Invalid", 'Pod "p" is invalid: spec: Forbidden: pod updates may not change '
                                 "fields other than `spec.containers[*].image`, ...")
    assert p.promote("ns/p", "u1") is promotion.Outcome.OFF
    assert not p.enabled and "may not change fields" in p.support.reason
    assert changes == [True, False]  # the gauge: on at start, off now
    assert p.promote("ns/p", "u1") is promotion.Outcome.OFF  # and it asks no more


def test_after_a_promotion_succeeded_a_422_costs_only_that_pod() -> None:
    client = Client(converted())
    p = promoter(client)
    assert p.promote("ns/p", "u1") is promotion.Outcome.PROMOTED
    client.pod = converted(uid="u2", name="p2")
    client.answer = api.ApiError(422, "Invalid", 'Pod "p2" is invalid: metadata: Invalid value: "Burstable": '
                                 "Pod QoS is immutable")
    assert p.promote("ns/p2", "u2") is promotion.Outcome.SKIPPED
    assert p.enabled and p.skipped == {"u2"}


@pytest.mark.parametrize("error", [api.ApiError(409, "Conflict", "changed"), api.ApiError(500, "Internal", "x"),
                                   api.ApiUnreachable("down")])
def test_a_transient_failure_leaves_the_pod_to_the_next_pass(error: Exception) -> None:
    client = Client(converted())
    p = promoter(client)
    client.answer = error  # type: ignore[assignment]
    assert p.promote("ns/p", "u1") is promotion.Outcome.FAILED
    assert p.enabled and not p.skipped


# --- detection -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("minor", "metrics", "enabled", "why"), [
    ("30", GATE_ON, True, "feature gate InPlacePodVerticalScaling on"),
    ("30", GATE_ON.replace("} 1", "} 0"), False, "InPlacePodVerticalScaling off"),
    ("30", "# nothing\n", False, "not reported"),
    ("30", api.ApiError(403, "Forbidden", "nope"), False, "/metrics could not be read"),
    ("33", api.ApiError(403, "Forbidden", "nope"), True, "resize subresource"),
    ("34+", "", True, "v1.34"),
])
def test_detection_reads_the_version_then_the_feature_gauge(minor: str, metrics: Any, enabled: bool,
                                                            why: str) -> None:
    support = promotion.detect(Client(minor=minor, metrics=metrics))  # type: ignore[arg-type]
    assert support.enabled is enabled and why in support.reason


# --- the dispatcher's part ---------------------------------------------------------------------------

GI = 2**30


def view(*running: RunningPod, node_cpu: float = 4.0) -> DispatchView:
    node = NodeRecord("n1", ResourceVector({"cpu": node_cpu, "memory": 16 * GI}))
    return DispatchView(nodes=[node], running=list(running), queues=[QueueRecord("q")], groups=[])


def opp(key: str, cpu: float, started: float | None, queue: str | None = "q") -> RunningPod:
    return RunningPod(node="n1", demand=ResourceVector({"cpu": cpu, "memory": GI}), queue=queue, opportunistic=True,
                      bound_at_s=0.0, started_at_s=started, key=key, uid=key.upper())


def regular(cpu: float) -> RunningPod:
    return RunningPod(node="n1", demand=ResourceVector({"cpu": cpu, "memory": GI}), queue="q", key="ns/r", uid="R")


def test_the_dispatcher_promotes_the_oldest_that_fit_and_only_when_asked() -> None:
    d = Dispatcher(StowageSettings(), clock=lambda: 100.0)
    pods = [opp("ns/new", 1.0, 50.0), opp("ns/old", 2.0, 10.0), opp("ns/big", 3.0, 5.0),
            opp("ns/outside", 0.5, 1.0, queue=None)]
    v = view(regular(1.0), *pods)
    d.decide(v)
    assert d.promoted == []  # promotion off (promote None): the cluster cannot resize
    d.promote = lambda p: True
    d.decide(v)
    # 3 cores of regular room: "big" (oldest, 3 cores) fits alone; a pod outside every queue is never asked about
    assert [p.key for p in d.promoted] == ["ns/big"]
    d.promote = lambda p: p.uid != "NS/BIG"  # skipped for good (e.g. no recorded requests)
    d.decide(v)
    assert [p.key for p in d.promoted] == ["ns/old", "ns/new"]


def test_the_runtime_promotes_before_it_releases_and_counts_it() -> None:
    from stowage.operator.runtime import OperatorRuntime

    client = Client(converted(name="old", uid="NS/OLD"))
    rt = OperatorRuntime(StowageSettings(), client, dispatcher=Dispatcher(StowageSettings()),  # type: ignore[arg-type]
                         clock=lambda: 100.0)
    assert rt.detect_promotion()
    assert rt.metrics.registry.get_sample_value(labels.METRICS.PROMOTION_ENABLED) == 1
    assert rt._promote([opp("ns/old", 2.0, 10.0)], 100.0) == 1
    assert rt.metrics.registry.get_sample_value(labels.METRICS.PROMOTIONS_TOTAL) == 1
    assert "NS/OLD" in rt.cache.promoting  # counts as regular until the cache shows it so
    client.answer = api.ApiError(422, "Invalid", "pod updates may not change fields other than ...")
    client.pod = converted(name="new", uid="NS/NEW")
    assert rt._promote([opp("ns/new", 1.0, 50.0)], 101.0) == 0
    assert rt.dispatcher.promote is None  # off for the rest of the operator's life
    assert rt.metrics.registry.get_sample_value(labels.METRICS.PROMOTION_ENABLED) == 0


def test_an_operator_that_cannot_tell_runs_without_promotion() -> None:
    from stowage.operator.runtime import OperatorRuntime

    class Broken(Client):
        def get(self, path: str, params: Any = None) -> dict[str, Any]:
            raise RuntimeError("no")

    rt = OperatorRuntime(StowageSettings(), Broken(), dispatcher=Dispatcher(StowageSettings()))  # type: ignore[arg-type]
    assert not rt.detect_promotion()
    assert rt.dispatcher.promote is None
    assert rt.metrics.registry.get_sample_value(labels.METRICS.PROMOTION_ENABLED) == 0


def test_a_dry_run_says_what_it_would_patch_once_and_writes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    client = Client(converted())
    p = promotion.Promoter(client, dry_run=True, clock=lambda: 0.0)  # type: ignore[arg-type]
    p.detect()
    with caplog.at_level("INFO", logger="stowage.operator.promotion"):
        assert p.promote("ns/p", "u1") is promotion.Outcome.SKIPPED
    assert client.patches == [] and client.events == [] and p.skipped == {"u1"}
    assert "would promote ns/p" in caplog.text and '"cpu": "2"' in caplog.text


def test_an_unreachable_api_server_at_start_is_asked_again() -> None:
    unreachable = promotion.detect(Client(metrics=api.ApiUnreachable("down")))  # type: ignore[arg-type]
    assert not unreachable.enabled and not unreachable.settled
    forbidden = promotion.detect(Client(metrics=api.ApiError(403, "Forbidden", "no")))  # type: ignore[arg-type]
    assert not forbidden.enabled and forbidden.settled  # the chart's RBAC is missing: no use asking again
    client = Client(converted(), metrics=api.ApiUnreachable("down"))  # type: ignore[arg-type]
    p = promoter(client)
    assert not p.enabled
    client.metrics = GATE_ON
    assert p.detect().enabled


def test_from_v1_33_a_missing_resize_subresource_turns_promotion_off() -> None:
    class NoResize(Client):
        def patch(self, path: str, body: Any, content_type: str = api.MERGE_PATCH) -> dict[str, Any]:
            if path.endswith("/resize"):
                raise api.ApiError(404, "NotFound", "the server could not find the requested resource")
            return super().patch(path, body, content_type)

    client = NoResize(converted(), minor="33")
    p = promoter(client)
    assert p.promote("ns/p", "u1") is promotion.Outcome.OFF
    assert not p.enabled and "pods/resize" in p.support.reason and client.patches == []

    class GoneMeanwhile(NoResize):
        reads = 0

        def get(self, path: str, params: Any = None) -> dict[str, Any]:
            if path.endswith("/pods/p"):
                self.reads += 1
                if self.reads > 1:  # deleted between the read and the resize
                    raise api.ApiError(404, "NotFound", 'pods "p" not found')
            return super().get(path, params)

    client = GoneMeanwhile(converted(), minor="33")
    p = promoter(client)
    assert p.promote("ns/p", "u1") is promotion.Outcome.GONE and p.enabled


def test_a_pod_converted_by_hand_is_promoted_to_its_stated_demand() -> None:
    # manifests/examples/opportunistic-pod.yaml's form: requests 0, a memory limit, the demand stated. Converted
    # again by the webhook, its requests record nothing for cpu: the demand fills it (the room the decision counted).
    import yaml

    from tests.support.controlplane import REPO

    example = REPO / "manifests" / "examples" / "opportunistic-pod.yaml"
    (pod,) = [d for d in yaml.safe_load_all(example.read_text()) if d["kind"] == "Pod"]
    out = admission.convert_opportunistic(pod)
    recorded = json.loads(out["metadata"]["annotations"][labels.ANN_REQUESTS])
    assert all("cpu" not in r for r in recorded.values())  # its 0 is the conversion's, not a request
    requests = promotion.resize_patch(out)["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": "1", "memory": "2Gi"}


def test_the_demand_fills_only_what_no_container_recorded() -> None:
    pod = converted(containers=[{"name": "a", "image": "x", "resources": {"requests": {"memory": "1Gi"}}},
                                {"name": "b", "image": "x", "resources": {"limits": {"cpu": "1"}}}])
    pod["metadata"]["annotations"][labels.ANN_DEMAND] = json.dumps({"cpu": "3", "memory": "1Gi"})
    targets = {c["name"]: c["resources"]["requests"] for c in promotion.resize_patch(pod)["spec"]["containers"]}
    # cpu was recorded for b (its limit): restored as recorded, the demand does not add to it
    assert targets == {"a": {"memory": "1Gi"}, "b": {"cpu": "1"}}
