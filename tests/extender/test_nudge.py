"""Nudges (extender/nudge.py): which pods are held, when they are patched, once per recovery, errors counted.

Three levels: :class:`PodNudges` alone with a recording patch and a hand-driven clock; the served app (real
HTTP on loopback) holding and releasing pods as its filter answers; the assembled runtime patching a pod in
the kmock emulator once the utilization snapshot turns fresh, with ``stowage_extender_nudges_total``.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from kubernetes import client
from stowage.extender.nudge import MAX_NODES, PodNudges, fresh_nodes
from stowage.extender.server import ExtenderRuntime

from stowage.config import StowageSettings
from stowage.kube.api import ApiError, ApiUnreachable
from stowage.labels import ANN_NUDGED_AT
from stowage.prom import UtilizationSnapshot
from tests.extender.conftest import Clock, WorldFactory
from tests.extender.objects import extender_args, node, opportunistic_pod, regular_pod
from tests.support.kube import kube_emulator, wait_until
from tests.support.serving import serving
from tests.support.stack import metric

pytestmark = pytest.mark.timeout(60)

GI = 2**30
IDLE = {"usage": {"cpu": 1.0, "memory": 1 * GI}}


def snapshot(ages: dict[str, float]) -> UtilizationSnapshot:
    """Samples of idle nodes, each ``ages[node]`` seconds old (the limit is 30 s)."""
    return UtilizationSnapshot.from_nodes({n: IDLE for n in ages}, age_s=ages)


class Recorder:
    """A ``patch`` that records its calls and raises what it is told to, once per entry of ``errors``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.errors: dict[str, Exception] = {}

    def __call__(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.calls.append((namespace, name, body))
        if name in self.errors:
            raise self.errors.pop(name)

    @property
    def names(self) -> list[str]:
        return [name for _, name, _ in self.calls]


def nudges(patch: Recorder, feed: list[UtilizationSnapshot], clock: Clock | None = None, **kwargs: Any) -> tuple[
        PodNudges, list[str]]:
    """A :class:`PodNudges` over ``feed[-1]`` (append to move the snapshot on), not started; and its outcomes."""
    outcomes: list[str] = []
    made = PodNudges(patch, lambda: feed[-1], stale_after_s=30.0, clock=clock or Clock(0.0), wall=lambda: 1714557600.5,
                     on_outcome=outcomes.append, **kwargs)
    return made, outcomes


def pod(name: str, uid: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "batch", "uid": uid or f"uid-{name}"}}


def drain(made: PodNudges, last: UtilizationSnapshot | None = None) -> UtilizationSnapshot | None:
    """Run the worker's turns until nothing is pending (as its thread would, without the waits)."""
    while True:
        last, sent = made.step(last)
        if not sent:
            return last


# --- PodNudges alone ------------------------------------------------------------------------------------


def test_fresh_nodes_follows_the_staleness_rule_and_an_unavailable_snapshot_has_none() -> None:
    assert fresh_nodes(snapshot({"n1": 1.0, "n2": 30.0, "n3": 31.0}), 30.0) == {"n1", "n2"}
    assert fresh_nodes(UtilizationSnapshot.unavailable("connection refused"), 30.0) == frozenset()


def test_only_pods_whose_nodes_have_fresh_samples_again_are_patched_with_the_annotation_and_their_uid() -> None:
    patch = Recorder()
    feed = [UtilizationSnapshot.unavailable("Prometheus down")]
    made, outcomes = nudges(patch, feed)
    made.hold("uid-a", pod("a"), ["n1", "n2"])
    made.hold("uid-b", pod("b"), ["n3"])
    last = drain(made)
    assert patch.calls == [] and len(made.held()) == 2  # nothing fresh yet

    feed.append(snapshot({"n1": 1.0, "n2": 1.0, "n3": 45.0}))  # n3's monitor is still silent
    drain(made, last)

    stamp = "2024-05-01T10:00:00.500000Z"
    assert patch.calls == [("batch", "a", {"metadata": {"uid": "uid-a", "annotations": {ANN_NUDGED_AT: stamp}}})]
    assert outcomes == ["patched"]
    assert [p.name for p in made.held()] == ["b"]


def test_a_pod_is_nudged_once_per_recovery_and_again_only_when_held_again_after_the_interval() -> None:
    patch, clock = Recorder(), Clock(0.0)
    feed = [snapshot({"n1": 45.0})]
    made, _ = nudges(patch, feed, clock, min_interval_s=10.0)
    made.hold("uid-a", pod("a"), ["n1"])
    last = drain(made)
    feed.append(snapshot({"n1": 1.0}))
    last = drain(made, last)
    assert patch.names == ["a"]

    feed.append(snapshot({"n1": 1.0}))  # later refreshes of the same recovery: the pod is no longer held
    last = drain(made, last)
    assert patch.names == ["a"]

    # Rejected for samples again right away (n1 flapped): held, but not patched within the interval ...
    made.hold("uid-a", pod("a"), ["n1"])
    feed.append(snapshot({"n1": 1.0}))
    last = drain(made, last)
    assert patch.names == ["a"] and [p.name for p in made.held()] == ["a"]
    # ... and at the first fresh snapshot after it.
    clock.now += 10.0
    feed.append(snapshot({"n1": 1.0}))
    drain(made, last)
    assert patch.names == ["a", "a"] and made.held() == []


def test_released_and_bound_pods_are_not_patched() -> None:
    patch = Recorder()
    feed = [UtilizationSnapshot.unavailable("Prometheus down")]
    made, outcomes = nudges(patch, feed, is_bound=lambda key: key == "uid-bound")
    for name in ("released", "bound", "held"):
        made.hold(f"uid-{name}", pod(name), ["n1"])
    made.release("uid-released")
    last = drain(made)
    feed.append(snapshot({"n1": 1.0}))
    drain(made, last)
    assert patch.names == ["held"] and outcomes == ["patched"]
    assert made.held() == []


def test_errors_are_counted_logged_and_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    patch = Recorder()
    patch.errors = {
        "deleted": ApiError(404, "NotFound", 'pods "deleted" not found'),
        "replaced": ApiError(409, "Conflict", "Precondition failed: UID in precondition: uid-replaced"),
        "forbidden": ApiError(403, "Forbidden", "cannot patch resource pods"),
        "unreachable": ApiUnreachable("connection refused"),
        "bug": RuntimeError("boom"),
    }
    feed = [UtilizationSnapshot.unavailable("Prometheus down")]
    made, outcomes = nudges(patch, feed)
    for name in (*patch.errors, "fine"):
        made.hold(f"uid-{name}", pod(name), ["n1"])
    last = drain(made)
    feed.append(snapshot({"n1": 1.0}))
    with caplog.at_level(logging.DEBUG, logger="stowage.extender.nudge"):
        drain(made, last)

    assert dict(zip(patch.names, outcomes, strict=True)) == {
        "deleted": "gone", "replaced": "gone", "forbidden": "failed", "unreachable": "failed", "bug": "failed",
        "fine": "patched"}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "forbidden" in warnings[0].getMessage()  # one warning a minute, the rest DEBUG
    assert made.held() == []  # not retried: a failed pod waits for kube-scheduler's own retry


def test_the_held_table_is_bounded_and_counts_what_it_forgets() -> None:
    patch = Recorder()
    made, outcomes = nudges(patch, [UtilizationSnapshot.unavailable("down")], max_held=3)
    for i in range(5):
        made.hold(f"uid-{i}", pod(str(i)), ["n1"])
    assert [p.name for p in made.held()] == ["2", "3", "4"] and outcomes == ["dropped", "dropped"]
    made.hold("uid-x", pod("x"), [f"n{i}" for i in range(1000)])
    assert len(made.held()[-1].nodes) == MAX_NODES


def test_without_a_patch_nothing_is_held() -> None:
    made = PodNudges(None)
    made.hold("uid-a", pod("a"), ["n1"])
    assert made.held() == [] and made.start() is made
    made.stop()


def test_the_worker_thread_patches_every_due_pod_and_survives_a_broken_feed() -> None:
    patch = Recorder()
    feed = [UtilizationSnapshot.unavailable("down")]
    broken = {"on": True}

    def current() -> UtilizationSnapshot:
        if broken["on"]:
            raise RuntimeError("feed broken")
        return feed[-1]

    made = PodNudges(patch, current, qps=50.0, poll_s=0.01)
    for i in range(5):
        made.hold(f"uid-{i}", pod(str(i)), ["n1"])
    made.start()
    try:
        broken["on"] = False
        feed.append(snapshot({"n1": 1.0}))
        wait_until(lambda: len(patch.calls) == 5, 10)
    finally:
        made.stop()
    assert sorted(patch.names) == ["0", "1", "2", "3", "4"]


# --- the served app: which pods its filter holds ----------------------------------------------------------


NODES = [node("n1"), node("n2")]


def test_the_filter_holds_opportunistic_pods_rejected_for_samples_and_only_those(make_world: WorldFactory) -> None:
    world = make_world(NODES, nudges=True)
    assert world.nudges is not None
    world.samples({"n1": IDLE, "n2": IDLE}, age_s=45.0)  # both stale
    held = opportunistic_pod("held-0", memory="1Gi")
    assert world.post("filter", extender_args(held, NODES, cache=True)).json()["NodeNames"] == []
    world.post("filter", extender_args(regular_pod("reg-0"), NODES, cache=True))
    assert [(p.name, p.namespace, p.uid, p.nodes) for p in world.nudges.held()] == [
        ("held-0", "batch", "uid-held-0", frozenset({"n1", "n2"}))]
    assert world.nudged == []  # nothing fresh: nothing to nudge

    world.samples({"n1": IDLE, "n2": IDLE}, age_s=1.0)
    wait_until(lambda: bool(world.nudged), 10)  # off the request path, on the worker thread
    assert [(ns, name) for ns, name, _ in world.nudged] == [("batch", "held-0")]
    assert world.nudges.held() == []
    # Rejected for capacity, not samples: a nudge would not help it.
    body = world.post("filter", extender_args(opportunistic_pod("huge-0", memory="15Gi"), NODES, cache=True)).json()
    assert body["NodeNames"] == [] and world.nudges.held() == []


def test_a_pod_the_filter_places_is_released(make_world: WorldFactory) -> None:
    world = make_world(NODES, nudges=True)
    assert world.nudges is not None
    world.samples({"n1": IDLE, "n2": IDLE}, age_s={"n1": 45.0, "n2": 45.0})
    world.nudges.stop()  # hold still: no worker turns in between
    pod_ = opportunistic_pod("later-0", memory="1Gi")
    world.post("filter", extender_args(pod_, NODES, cache=True))
    assert [p.name for p in world.nudges.held()] == ["later-0"]
    world.samples({"n1": IDLE, "n2": IDLE}, age_s={"n1": 45.0, "n2": 1.0})
    assert world.post("filter", extender_args(pod_, NODES, cache=True)).json()["NodeNames"] == ["n2"]
    assert world.nudges.held() == []


# --- the runtime against kmock: a real PATCH, counted ----------------------------------------------------


def api_node(name: str) -> dict[str, Any]:
    obj = node(name)
    del obj["status"]["nodeInfo"]
    return obj


def test_the_runtime_patches_a_held_pod_in_the_api_once_samples_are_fresh_and_counts_it() -> None:
    with kube_emulator() as cluster:
        core = client.CoreV1Api(cluster.api)
        core.create_node(api_node("n1"))
        core.create_namespaced_pod("batch", opportunistic_pod("held-0", memory="1Gi"))
        core.create_namespaced_pod("batch", opportunistic_pod("deleted-0", memory="1Gi"))
        runtime = ExtenderRuntime(StowageSettings(), cluster.client, prometheus_url=None)
        with runtime, serving(runtime.app) as url, httpx.Client(timeout=10.0) as http:
            wait_until(lambda: http.get(f"{url}/readyz").status_code == 200, 30)
            for name in ("held-0", "deleted-0"):
                args = extender_args(opportunistic_pod(name, memory="1Gi"), [node("n1")], cache=True)
                assert http.post(f"{url}/filter", json=args).json()["NodeNames"] == []  # no Prometheus URL
            core.delete_namespaced_pod("deleted-0", "batch")
            runtime.utilization.replace(
                UtilizationSnapshot.from_nodes({"n1": IDLE}, age_s=1.0, fetched_at_s=runtime.utilization.clock()))

            def nudges_total(outcome: str) -> float:
                return metric(http.get(f"{url}/metrics").text, "stowage_extender_nudges_total", {"outcome": outcome})

            wait_until(lambda: nudges_total("patched") == 1 and nudges_total("gone") == 1, 20)
            annotations = core.read_namespaced_pod("held-0", "batch").metadata.annotations
            assert annotations[ANN_NUDGED_AT].endswith("Z")
            assert nudges_total("failed") == 0 and nudges_total("dropped") == 0
            # Once per recovery: later refreshes of the same samples patch nothing more.
            runtime.utilization.replace(
                UtilizationSnapshot.from_nodes({"n1": IDLE}, age_s=1.0, fetched_at_s=runtime.utilization.clock()))
            first = annotations[ANN_NUDGED_AT]
            wait_until(lambda: runtime.nudges.held() == [], 5)
            assert core.read_namespaced_pod("held-0", "batch").metadata.annotations[ANN_NUDGED_AT] == first
            assert nudges_total("patched") == 1
