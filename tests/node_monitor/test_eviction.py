"""Eviction under sustained contention, against the kmock Kubernetes emulator (Eviction subresource added)."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from stowage.node_monitor.eviction import EVENT_REASON_CONTENTION, EVENT_REASON_EVICTED

from stowage.config import ContentionPolicy
from stowage.labels import METRICS

from .emulator import Emulator, running_emulator
from .world import GiB, PodSpec, World

# Memory allocatable 10Gi, T_preempt memory 0.95 → threshold 9.5Gi.
REGULAR = PodSpec("regular-db", pod_class="regular", started_s=50, memory=int(7.6 * GiB))
OLD = PodSpec("opp-old", started_s=10, memory=1 * GiB)
MIDDLE = PodSpec("opp-middle", started_s=20, memory=int(1.5 * GiB))
NEW = PodSpec("opp-new", started_s=30, memory=1 * GiB)  # total 11.1Gi: 1.6Gi must go


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with running_emulator() as emu:
        yield emu


_names = itertools.count()


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in Prometheus text exposition, or None when absent."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


@pytest.fixture()
def make_world(emulator: Emulator, tmp_path: Path) -> Iterator:
    worlds: list[World] = []

    def make(pods: list[PodSpec], **kwargs) -> World:
        # A fresh node name per world: the module's emulator is shared, the PodStore keeps only this node's pods.
        world = World(emulator, tmp_path / f"w{len(worlds)}", pods, node=f"node-{next(_names)}", **kwargs)
        worlds.append(world)
        return world

    yield make
    for w in worlds:
        w.close()


def test_newest_opportunistic_pods_go_first_and_only_as_many_as_needed(make_world) -> None:
    world = make_world([REGULAR, OLD, MIDDLE, NEW])
    reports = world.tick(3)
    assert [r.decision.relieve.any() for r in reports] == [False, False, True]  # sustained: 3 samples
    assert world.evicted() == [("opp-new", 201), ("opp-middle", 201)]
    remaining = {p["metadata"]["name"] for p in world.emulator.live("v1/pods")
                 if p["metadata"]["namespace"] == world.namespace}
    assert {"regular-db", "opp-old"} <= remaining and not {"opp-new", "opp-middle"} & remaining


def test_nothing_is_evicted_before_contention_is_sustained(make_world) -> None:
    world = make_world([REGULAR, OLD, MIDDLE, NEW])
    world.tick(2)
    assert world.evicted() == []


def test_a_disruption_budget_refusal_moves_on_to_the_next_victim(make_world, emulator: Emulator) -> None:
    world = make_world([REGULAR, OLD, MIDDLE, NEW])
    emulator.emu.refuse.add("opp-new")
    try:
        world.tick(3)
    finally:
        emulator.emu.refuse.discard("opp-new")
    # 429 for the newest; without it, the middle pod alone frees 1.5Gi < 1.6Gi, so the oldest goes too.
    assert world.evicted() == [("opp-new", 429), ("opp-middle", 201), ("opp-old", 201)]
    evicted_events = {e["involvedObject"]["name"] for e in world.events(EVENT_REASON_EVICTED)}
    assert evicted_events == {"opp-middle", "opp-old"}  # no Event claims the refused pod was evicted


def test_events_say_which_resource_how_much_and_which_threshold(make_world) -> None:
    world = make_world([REGULAR, OLD, MIDDLE, NEW])
    world.tick(3)
    pod_events = {e["involvedObject"]["name"]: e for e in world.events(EVENT_REASON_EVICTED)}
    assert set(pod_events) == {"opp-new", "opp-middle"}
    event = pod_events["opp-new"]
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Pod"
    assert event["metadata"]["namespace"] == world.namespace and event["involvedObject"]["uid"] == NEW.uid
    message = event["message"]
    assert "memory usage 11.1Gi over threshold 9.5Gi (0.95 × capacity 10.0Gi)" in message
    assert "3 consecutive samples" in message and "policy neutral" in message
    assert "this pod used 1.0Gi memory" in message
    (node_event,) = world.events(EVENT_REASON_CONTENTION)
    assert node_event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": world.node,
                                            "uid": f"uid-{world.node}"}
    assert node_event["metadata"]["namespace"] == "default"
    ns = world.namespace
    assert f"evicted 2 opportunistic pod(s): {ns}/opp-new, {ns}/opp-middle" in node_event["message"]
    assert "memory usage 11.1Gi over threshold 9.5Gi" in node_event["message"]


def test_evictions_are_counted_per_resource_and_policy(make_world) -> None:
    world = make_world([REGULAR, OLD, MIDDLE, NEW], policy=ContentionPolicy.PRESERVE)
    world.tick(3)
    text = world.metrics.render().decode()
    node = world.node
    assert value(text, METRICS.EVICTIONS_TOTAL, node=node, policy="preserve", resource="memory") == 2
    assert value(text, METRICS.EVICTIONS_TOTAL, node=node, policy="preserve", resource="cpu") == 0
    assert value(text, METRICS.NODE_CONTENTION, node=node, resource="memory") == 1
    assert value(text, METRICS.NODE_CONTENTION, node=node, resource="cpu") == 0
    # PRESERVE withholds f0·C of the contended resource from harvesting after a contention.
    assert value(text, METRICS.NODE_BLOCKED, node=node, resource="memory") == pytest.approx(0.05 * 10 * GiB)


def test_dry_run_counts_but_neither_evicts_nor_writes_events(make_world) -> None:
    world = make_world([REGULAR, OLD, MIDDLE, NEW], dry_run=True)
    world.tick(3)
    assert world.evicted() == []
    assert world.events(EVENT_REASON_EVICTED) == [] and world.events(EVENT_REASON_CONTENTION) == []
    text = world.metrics.render().decode()
    assert value(text, METRICS.EVICTIONS_TOTAL, node=world.node, policy="neutral", resource="memory") == 2


def test_pods_being_evicted_are_not_chosen_again_while_they_terminate(make_world) -> None:
    world = make_world([REGULAR, OLD, MIDDLE, NEW], dry_run=True)  # dry run: the pods stay, usage stays high
    world.tick(6)  # two sustained periods
    text = world.metrics.render().decode()
    # The second relief projects the pending pods' usage away: no further victims, nothing counted twice.
    assert value(text, METRICS.EVICTIONS_TOTAL, node=world.node, policy="neutral", resource="memory") == 2


def test_an_evicted_pod_gone_from_the_api_but_still_running_is_not_replaced_by_more_victims(make_world) -> None:
    world = make_world([REGULAR, OLD, MIDDLE, NEW])
    world.tick(3)
    assert world.evicted() == [("opp-new", 201), ("opp-middle", 201)]
    world.refresh()  # the watcher's view: the evicted pods are gone, their cgroups still shutting down
    world.tick(3)  # another sustained period with the same usage
    assert world.evicted() == [("opp-new", 201), ("opp-middle", 201)]  # opp-old is spared


def test_aggressive_policy_ignores_cpu_contention(make_world) -> None:
    pods = [PodSpec("opp-busy", started_s=5, memory=GiB)]
    world = make_world(pods, policy=ContentionPolicy.AGGRESSIVE, allocatable={"cpu": "1", "memory": "10Gi"})
    for _ in range(4):
        world.tree.advance_pod(pods[0].uid, cpu_usec=2_000_000)  # 2 cores on a 1-core node
        world.tick()
    assert world.evicted() == []


def test_regular_opt_out_terminating_and_foreign_pods_are_never_evicted(make_world, emulator: Emulator) -> None:
    pods = [
        PodSpec("regular", pod_class="regular", started_s=90, memory=3 * GiB),
        PodSpec("unlabelled", pod_class=None, started_s=91, memory=3 * GiB),
        PodSpec("opted-out", opt="false", started_s=92, memory=3 * GiB),
        PodSpec("leaving", terminating=True, started_s=93, memory=3 * GiB),
        PodSpec("other-node", node="someone-else", started_s=94, memory=3 * GiB),
    ]
    world = make_world(pods)
    world.tick(6)
    assert world.evicted() == []
    # Every pod list asks the API server for one node's pods only; this world's asked for its own.
    selectors = [r.params.get("fieldSelector") for r in emulator.requests()
                 if r.url.path == "/api/v1/pods" and r.method == "GET"]
    assert all(sel is not None and sel.startswith("spec.nodeName=") for sel in selectors)
    assert f"spec.nodeName={world.node}" in selectors


_pod_specs = st.builds(
    PodSpec,
    name=st.just("x"),
    pod_class=st.sampled_from(["opportunistic", "regular", None, "Opportunistic ", "bogus"]),
    opt=st.sampled_from([None, "true", "false", "auto", "FALSE"]),
    started_s=st.integers(0, 3000),
    memory=st.integers(0, 4 * GiB),
    terminating=st.booleans(),
    node=st.sampled_from([None, None, None, "another-node"]),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(_pod_specs, min_size=1, max_size=8), policy=st.sampled_from(list(ContentionPolicy)))
def test_only_opportunistic_pods_of_this_node_are_ever_evicted(emulator: Emulator, specs, policy) -> None:
    specs = [PodSpec(**{**s.__dict__, "name": f"p{i}-{s.uid[:8]}"}) for i, s in enumerate(specs)]
    with tempfile.TemporaryDirectory() as tmp:
        world = World(emulator, Path(tmp), specs, node=f"prop-{next(_names)}", policy=policy, sustained_count=1,
                      allocatable={"cpu": "8", "memory": "4Gi"})
        try:
            world.tick(3)
            by_name = {s.name: s for s in specs}
            for name, _status in world.evicted():
                spec = by_name[name]
                assert spec.node is None, "a pod of another node was touched"
                assert (spec.pod_class or "").strip().lower() == "opportunistic", "a non-opportunistic pod"
                assert (spec.opt or "").strip().lower() != "false", "an opted-out pod"
                assert not spec.terminating
            evictable = [s for s in specs if s.node is None and (s.pod_class or "").strip().lower() == "opportunistic"
                         and (s.opt or "").strip().lower() != "false" and not s.terminating]
            if not any(s.memory for s in evictable):
                assert world.evicted() == []
            elif sum(s.memory for s in specs) > 0.95 * 4 * GiB:
                # Liveness: memory over the threshold and an evictable pod using memory → something goes.
                assert world.evicted(), "sustained memory contention, evictable pods, yet no eviction"
        finally:
            world.close()


def test_a_pod_promoted_in_place_is_no_longer_a_victim(make_world) -> None:
    # The operator promoted opp-new (label stowage.io/class: regular, its requests restored): the watch's MODIFIED
    # event reaches the store, and the monitor reads the class as it is now, not as the pod was converted.
    world = make_world([REGULAR, OLD, MIDDLE, NEW])
    (promoted,) = [p for p in world.emulator.live("v1/pods")
                   if p["metadata"]["namespace"] == world.namespace and p["metadata"]["name"] == "opp-new"]
    promoted["metadata"]["labels"]["stowage.io/class"] = "regular"
    world.store.apply({"type": "MODIFIED", "object": promoted})
    world.tick(3)
    assert world.evicted() == [("opp-middle", 201), ("opp-old", 201)]  # newest first among those still opportunistic
