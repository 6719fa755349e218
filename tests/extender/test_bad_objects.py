"""One bad object costs only itself (issue #31, defect 2): the caches, the informers and the extender's readiness.

A pod annotated ``stowage.io/disk-bandwidth: "1e9999999"`` (or with a 400-digit integer in
``stowage.io/demand``) in any namespace must cost only itself: were ``ClusterModel.replace_pods`` to raise
part-way through the list, the pod informer would relist forever, never sync after a restart, and ``/readyz``
would stay 503 (or, with the pod created after the sync, 200 on a model that no longer follows the cluster).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import kmock
import pytest
from kubernetes import client
from stowage.extender.server import ExtenderRuntime

from stowage.config import StowageSettings
from stowage.kube import cluster as cluster_module
from stowage.kube.api import ApiError
from stowage.kube.cluster import ClusterModel
from stowage.kube.informer import Backoff, Informer
from stowage.labels import ANN_DEMAND, ANN_DISK_BANDWIDTH
from tests.extender.objects import node, opportunistic_pod, regular_pod
from tests.support.kube import gone_once, kube_emulator, wait_until
from tests.support.serving import serving

pytestmark = pytest.mark.timeout(90)

POISON_BANDWIDTH = {ANN_DISK_BANDWIDTH: "1e9999999"}
POISON_DEMAND = {ANN_DEMAND: '{"cpu": 1' + "0" * 400 + "}"}


def cpu_requested(model: ClusterModel, name: str) -> float:
    view = model.view([name])
    return float(view.regular_requests[0][view.resources.index("cpu")])


# --- the model -----------------------------------------------------------------------------------


def test_a_relist_with_bad_pods_keeps_every_other_pod_and_counts_each_bad_one_once(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="stowage.kube.cluster")
    model = ClusterModel()
    model.replace_nodes([node("n1")])
    shapeless = regular_pod("shapeless-0", node_name="n1")
    shapeless["spec"]["containers"] = "abc"
    unreadable = regular_pod("unreadable-0", node_name="n1")
    unreadable["status"]["conditions"] = 5  # not shaped like a pod: left out
    pods = [
        regular_pod("good-0", cpu="1", node_name="n1"),
        regular_pod("bandwidth-0", cpu="2", node_name="n1", annotations=POISON_BANDWIDTH),
        opportunistic_pod("demand-0", node_name="n1", annotations=POISON_DEMAND),
        shapeless,
        unreadable,
        regular_pod("good-1", cpu="4", node_name="n1"),
    ]
    for _ in range(3):  # relists see the same objects: logged and counted once
        model.replace_pods(pods)

    assert model.pods_synced.is_set()
    assert model.pod("uid-good-0") is not None and model.pod("uid-good-1") is not None
    bandwidth = model.pod("uid-bandwidth-0")
    assert bandwidth is not None and ANN_DISK_BANDWIDTH in (bandwidth.problem or "")
    demand = model.pod("uid-demand-0")  # unreadable labels: counted as regular, at its requests (0 cpu)
    assert demand is not None and not demand.opportunistic and ANN_DEMAND in (demand.problem or "")
    assert model.pod("uid-shapeless-0") is not None  # demand unreadable: kept, at zero
    assert model.pod("uid-unreadable-0") is None
    assert cpu_requested(model, "n1") == 1 + 2 + 0 + 0 + 4

    bad = model.bad_objects()["pod"]
    assert set(bad) == {"uid-bandwidth-0", "uid-demand-0", "uid-shapeless-0", "uid-unreadable-0"}
    assert bad["uid-unreadable-0"].startswith("left out: status.conditions")
    assert bad["uid-bandwidth-0"].startswith("recorded without the values it cannot read: ")
    assert model.bad_objects_total == {"pod": 4, "node": 0}
    warnings = [r.getMessage() for r in caplog.records if r.name == "stowage.kube.cluster"]
    assert len(warnings) == 4 and any(w.startswith("pod batch/unreadable-0: left out") for w in warnings)

    model.replace_pods(pods[:3])  # the others are gone: no longer bad now, still counted as seen
    assert set(model.bad_objects()["pod"]) == {"uid-bandwidth-0", "uid-demand-0"}
    assert model.bad_objects_total["pod"] == 4


def test_watch_events_of_bad_pods_cost_only_those_pods() -> None:
    model = ClusterModel()
    model.replace_nodes([node("n1")])
    model.replace_pods([regular_pod("a-0", cpu="3", node_name="n1")])
    broken = regular_pod("a-0", cpu="3", node_name="n1")
    broken["metadata"]["labels"] = ["not", "a", "map"]
    model.apply_pod_event("MODIFIED", broken)  # it was readable: now it is left out, its cpu released
    assert model.pod("uid-a-0") is None and cpu_requested(model, "n1") == 0
    model.apply_pod_event("ADDED", regular_pod("b-0", cpu="2", node_name="n1", annotations=POISON_BANDWIDTH))
    assert cpu_requested(model, "n1") == 2
    model.apply_pod_event("MODIFIED", regular_pod("a-0", cpu="3", node_name="n1"))  # fixed
    assert cpu_requested(model, "n1") == 5
    assert set(model.bad_objects()["pod"]) == {"uid-b-0"}
    model.apply_pod_event("DELETED", regular_pod("b-0", node_name="n1"))
    assert model.bad_objects()["pod"] == {}
    assert model.bad_objects_total["pod"] == 2


def test_a_parsing_bug_on_one_pod_is_logged_with_its_traceback_and_costs_only_that_pod(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    real = cluster_module.pod_record

    def buggy(pod: dict[str, Any], seen_at_s: float) -> Any:
        if pod["metadata"]["name"] == "bug-0":
            raise KeyError("a bug")
        return real(pod, seen_at_s)

    monkeypatch.setattr(cluster_module, "pod_record", buggy)
    model = ClusterModel()
    model.replace_nodes([node("n1")])
    model.replace_pods([regular_pod("bug-0", node_name="n1"), regular_pod("ok-0", cpu="1", node_name="n1")])
    assert model.pod("uid-ok-0") is not None and model.pod("uid-bug-0") is None
    assert model.bad_objects()["pod"]["uid-bug-0"] == "left out: KeyError('a bug')"
    [record] = [r for r in caplog.records if "bug-0" in r.getMessage()]
    assert record.levelno == logging.WARNING and record.exc_info is not None


def test_bad_nodes_are_left_out_or_kept_without_what_cannot_be_read() -> None:
    model = ClusterModel()
    nameless = node("x")
    nameless["metadata"]["name"] = ""
    shapeless = node("n3")
    shapeless["status"] = 5
    model.replace_nodes([node("n1"), node("n2", disk_bandwidth="1e9999999"), nameless, shapeless])
    assert sorted(model.node_names()) == ["n1", "n2"]
    assert model.view(["n2"]).capacity[0][0] == 16.0  # its cpu counts; the unreadable bandwidth reads as 0
    assert set(model.bad_objects()["node"]) == {"n2", "", "n3"}
    model.apply_node_event("MODIFIED", shapeless)
    model.apply_node_event("MODIFIED", {**node("n1"), "status": "broken"})  # n1 can no longer be read: dropped
    assert model.node_names() == ["n2"]
    model.apply_node_event("MODIFIED", node("n1"))
    assert sorted(model.node_names()) == ["n1", "n2"]
    assert model.bad_objects_total["node"] == 4


# --- the informer --------------------------------------------------------------------------------


def fast_backoff() -> Backoff:
    return Backoff(base_s=0.01, cap_s=0.05, rng=random.Random(1))


def test_an_event_callback_that_raises_costs_one_event_and_the_watch_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="stowage.kube.informer")
    seen: list[str] = []

    def on_event(kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name.startswith("poison"):
            raise OverflowError("int too large to convert to float")
        seen.append(name)

    with kube_emulator() as cluster:
        core = client.CoreV1Api(cluster.api)
        informer = Informer(cluster.client, "/api/v1/pods", name="pods", on_replace=lambda _: None,
                            on_event=on_event, backoff=fast_backoff()).start()
        try:
            wait_until(informer.synced.is_set)
            for name in ("a-0", "poison-0", "b-0"):
                core.create_namespaced_pod("batch", regular_pod(name))
            core.patch_namespaced_pod("poison-0", "batch", {"metadata": {"labels": {"again": "yes"}}})
            core.create_namespaced_pod("batch", regular_pod("c-0"))
            wait_until(lambda: "c-0" in seen)
        finally:
            informer.stop()
    assert {"a-0", "b-0", "c-0"} <= set(seen)
    assert informer.relists == 1 and informer.last_error is None  # never relisted over it
    assert informer.callback_errors >= 2 and informer.healthy()
    failures = [r for r in caplog.records if "event of uid-poison-0 not applied" in r.getMessage()]
    assert [r.levelno for r in failures][:1] == [logging.WARNING]
    assert {r.levelno for r in failures[1:]} <= {logging.DEBUG}  # once per object at WARNING


class _FlakyApi:
    """A client whose lists and watches fail while ``failing`` is set; a healthy watch idles until interrupted."""

    def __init__(self) -> None:
        self.failing = False

    def _check(self) -> None:
        if self.failing:
            raise ApiError(503, "ServiceUnavailable", "the API server is down")

    def list(self, path: str, params: Any, **_: Any) -> tuple[list[dict[str, Any]], str]:
        self._check()
        return [], "1"

    def watch(self, path: str, params: Any, version: str | None, timeout_s: float) -> _IdleStream:
        return _IdleStream(self)


class _IdleStream:
    def __init__(self, api: _FlakyApi) -> None:
        self._api, self._stop = api, threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while not self._stop.wait(0.01):
            self._api._check()
        yield from ()

    def interrupt(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self._stop.set()


def test_an_informer_is_unhealthy_once_it_has_failed_for_longer_than_its_limit_and_healthy_again_after() -> None:
    api, now = _FlakyApi(), [1000.0]
    informer = Informer(api, "/api/v1/pods", name="pods", on_replace=lambda _: None,  # type: ignore[arg-type]
                        on_event=lambda *_: None, backoff=fast_backoff(), stale_after_s=60.0,
                        clock=lambda: now[0])
    assert informer.unhealthy() == "not synced yet"
    informer.start()
    try:
        wait_until(informer.synced.is_set)
        assert informer.healthy()
        api.failing = True
        wait_until(lambda: informer.failing_for_s(now[0] + 1) > 0)
        now[0] += 60.0
        assert informer.healthy() and informer.synced.is_set()  # failing, but not longer than the limit yet
        now[0] += 1.0
        why = informer.unhealthy()
        assert not informer.healthy() and why is not None
        assert why.startswith("failing to list or watch for 61s (limit 60s): ApiError") and "503" in why
        api.failing = False
        wait_until(informer.healthy)  # the next list succeeds: progress
        assert informer.failing_for_s() == 0.0
    finally:
        informer.stop()
    assert informer.relists >= 2


def test_a_list_the_consumer_cannot_take_is_retried_and_makes_the_informer_unhealthy() -> None:
    now = [0.0]
    calls = []

    def on_replace(items: list[dict[str, Any]]) -> None:
        calls.append(len(items))
        raise TypeError("consumer bug")

    informer = Informer(_FlakyApi(), "/api/v1/pods", name="pods", on_replace=on_replace,  # type: ignore[arg-type]
                        on_event=lambda *_: None, backoff=fast_backoff(), stale_after_s=5.0, clock=lambda: now[0])
    informer.start()
    try:
        wait_until(lambda: len(calls) >= 3)
    finally:
        informer.stop()
    now[0] = 6.0
    assert not informer.synced.is_set()
    assert informer.unhealthy() == (
        "failing to list or watch for 6s (limit 5s): CallbackFailed: on_replace failed: TypeError: consumer bug")


# --- the extender --------------------------------------------------------------------------------


def api_node(name: str, cpu: str = "16") -> dict[str, Any]:
    """A node the typed client accepts (its models require every nodeInfo field; we send none)."""
    obj = node(name, cpu=cpu)
    del obj["status"]["nodeInfo"]
    return obj


def test_the_extender_gets_ready_with_bad_pods_in_the_cluster_and_counts_them_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """Without per-object isolation this times out: the first pod list raises InvalidOperation in replace_pods."""
    caplog.set_level(logging.WARNING, logger="stowage.kube.cluster")
    with kube_emulator() as cluster:
        core = client.CoreV1Api(cluster.api)
        core.create_node(api_node("n1"))
        core.create_namespaced_pod("batch", regular_pod("good-0", cpu="1", node_name="n1"))
        core.create_namespaced_pod("batch", regular_pod("bw-0", cpu="2", node_name="n1", annotations=POISON_BANDWIDTH))
        core.create_namespaced_pod("batch", opportunistic_pod("dm-0", node_name="n1", annotations=POISON_DEMAND))
        core.create_namespaced_pod("batch", regular_pod("good-1", cpu="4", node_name="n1"))
        gone_once(cluster, "pods")  # the first watch expires: the pods are listed twice
        runtime = ExtenderRuntime(StowageSettings(), cluster.client, prometheus_url=None)
        with runtime, serving(runtime.app) as url, httpx.Client(timeout=10.0) as http:
            wait_until(lambda: http.get(f"{url}/readyz").status_code == 200, 30)
            pods_informer = next(i for i in runtime.informers if i.name == "pods")
            wait_until(lambda: pods_informer.relists >= 2, 30)
            model = runtime.model
            assert all(model.pod(f"uid-{name}") is not None for name in ("good-0", "good-1", "bw-0", "dm-0"))
            assert cpu_requested(model, "n1") == 1 + 2 + 0 + 4
            ready = http.get(f"{url}/readyz").json()
            assert ready["status"] == "ready" and ready["unhealthy"] == {}
            assert ready["bad_objects"] == {"pod": 2, "node": 0}
            metrics = http.get(f"{url}/metrics").text
            assert 'stowage_bad_objects_total{kind="pod"} 2.0' in metrics
            assert 'stowage_bad_objects_total{kind="node"} 0.0' in metrics

            core.create_namespaced_pod("batch", regular_pod("late-0", cpu="8", node_name="n1",
                                                            annotations=POISON_BANDWIDTH))
            core.create_namespaced_pod("batch", regular_pod("after-0", cpu="1", node_name="n1"))
            wait_until(lambda: model.pod("uid-after-0") is not None, 30)  # the watch went on past the bad pod
            assert model.bad_objects_total["pod"] == 3
            assert http.get(f"{url}/readyz").status_code == 200
    logged = [r.getMessage() for r in caplog.records if r.name == "stowage.kube.cluster"]
    assert sorted(m.split(":")[0] for m in logged) == ["pod batch/bw-0", "pod batch/dm-0", "pod batch/late-0"]


def test_readyz_names_the_informer_that_keeps_failing_and_why() -> None:
    """/readyz looks past the first sync: a cache that cannot list makes it fail, saying which and why."""
    with kube_emulator() as cluster:
        core = client.CoreV1Api(cluster.api)
        core.create_node(api_node("n1"))
        cluster.call(lambda: cluster.emulator[kmock.action.LIST, kmock.resource("", "v1", "pods")] << 503)
        runtime = ExtenderRuntime(StowageSettings(), cluster.client, prometheus_url=None,
                                  informer_stale_after_s=0.2)
        with runtime, serving(runtime.app) as url, httpx.Client(timeout=10.0) as http:

            def pods_failing() -> bool:  # first "not synced yet (last error: ...)", then past the limit
                why = http.get(f"{url}/readyz").json()["unhealthy"].get("pods", "")
                return why.startswith("failing to list or watch for ")

            wait_until(pods_failing, 30)
            answer = http.get(f"{url}/readyz")
            body = answer.json()
            assert answer.status_code == 503 and body["status"] == "not ready"
            assert body["waiting_for"] == ["pods"]
            assert "(limit 0.2s): ApiError: HTTP 503" in body["unhealthy"]["pods"]
            # The nodes cache follows the cluster; Queues (no CRD here: 404) never decide readiness.
            assert set(body["unhealthy"]) == {"pods"}
            assert json.dumps(body)  # plain JSON
