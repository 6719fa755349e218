"""The extender's caches never show stale state: every change reaches the very next request.

The caches (the per-state node table, the rows of a repeated name list, the encoded
prioritize entries) are checked three ways: over real HTTP after each kind of state change
(the numbers in the pod's Event follow the change), against an extender built afresh over
the same state, and against an uncached snapshot for random clusters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stowage.extender import filtering, snapshot, wire
from stowage.extender.app import create_app
from stowage.extender.pods import parse_pod

from stowage.config import StowageSettings
from stowage.kube.cluster import ClusterModel
from stowage.prom import Utilization, UtilizationSnapshot
from tests.extender.conftest import World, WorldFactory
from tests.extender.objects import GI, node, opportunistic_pod, regular_pod

pytestmark = pytest.mark.timeout(120)

NODES = [node("n1"), node("n2")]
SAMPLES: dict[str, dict[str, dict[str, float]]] = {
    "n1": {"usage": {"cpu": 2.0, "memory": 4 * GI}},
    "n2": {"usage": {"cpu": 6.0, "memory": 13.2 * GI}},
}
BIG = {"Pod": opportunistic_pod("etl-big", cpu="1", memory="15Gi"), "Nodes": None, "NodeNames": ["n1", "n2"]}
N1_BEFORE = "n1: memory 15.0Gi > harvestable 10.4Gi (0.90 × 16Gi − used 4.0Gi − blocked 0)"
N2_BEFORE = "n2: memory 15.0Gi > harvestable 1.2Gi (0.90 × 16Gi − used 13.2Gi − blocked 0)"
CAPACITY = filtering.REASONS["harvest-capacity"]


def filtered(world: World, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The filter answer and, when it placed the pod nowhere, the message of the Event it posted about it."""
    world.events.clear()
    answer = world.post("filter", body).json()
    if answer["NodeNames"]:
        return answer, ""
    return answer, world.event_about(body["Pod"]["metadata"]["name"])["message"]


@pytest.fixture
def world(make_world: WorldFactory) -> World:
    return make_world(NODES, samples=SAMPLES)


def bound_now(name: str, node_name: str, memory: str) -> dict[str, Any]:
    """A regular pod bound to ``node_name`` at the world's current time (inside the ramp-up)."""
    pod = regular_pod(name, cpu="1", memory=memory, node_name=node_name)
    stamp = "2024-05-01T10:00:00Z"  # conftest.NOW
    pod["status"]["conditions"][0]["lastTransitionTime"] = stamp
    pod["status"]["startTime"] = stamp
    return pod


def with_usage(world: World, n1_memory_gi: float, blocked_gi: float = 0.0) -> None:
    samples = {**SAMPLES, "n1": {"usage": {"cpu": 2.0, "memory": n1_memory_gi * GI}}}
    if blocked_gi:
        samples["n1"] = {**samples["n1"], "blocked": {"memory": blocked_gi * GI}}
    world.samples(samples)


def fresh_answer(world: World, body: dict[str, Any]) -> dict[str, Any]:
    """What an extender with empty caches answers over the same model and utilization."""
    ext = create_app(world.settings, world.model, world.utilization).state.extender
    return ext.filter(orjson.loads(orjson.dumps(body)))


def move_utilization_clock(world: World, seconds: float) -> None:
    start = world.utilization.clock()
    world.utilization.clock = lambda: start + seconds


CHANGES: list[Any] = [
    pytest.param(
        lambda w: with_usage(w, 6.0),
        "n1: memory 15.0Gi > harvestable 8.4Gi (0.90 × 16Gi − used 6.0Gi − blocked 0)",
        id="a-prometheus-refresh-changes-used",
    ),
    pytest.param(
        lambda w: with_usage(w, 4.0, blocked_gi=1.0),
        "n1: memory 15.0Gi > harvestable 9.4Gi (0.90 × 16Gi − used 4.0Gi − blocked 1.0Gi)",
        id="a-prometheus-refresh-blocks-capacity",
    ),
    pytest.param(
        lambda w: w.model.apply_pod_event("ADDED", bound_now("train-9", "n1", "2Gi")),
        "n1: memory 15.0Gi > harvestable 8.4Gi (0.90 × 16Gi − used 4.0Gi − blocked 0 − assumed 2.0Gi)",
        id="a-pod-bound-just-now-is-assumed",
    ),
    pytest.param(
        lambda w: w.model.apply_node_event("MODIFIED", node("n1", memory="20Gi")),
        "n1: memory 15.0Gi > harvestable 14.0Gi (0.90 × 20Gi − used 4.0Gi − blocked 0)",
        id="the-node-grows",
    ),
    pytest.param(
        lambda w: w.model.apply_node_event("MODIFIED", node("n1", harvest=False)),
        None,  # unresolvable now
        id="harvesting-disabled-on-the-node",
    ),
    pytest.param(
        lambda w: move_utilization_clock(w, w.settings.harvest.utilization_stale_after_s + 5),
        "utilization-unavailable, e.g. n1: utilization samples are",
        id="the-samples-go-stale-with-time-alone",
    ),
    pytest.param(
        lambda w: w.utilization.replace(UtilizationSnapshot.unavailable("Prometheus down")),
        "utilization-unavailable, e.g. n1: no harvesting while utilization is unavailable (Prometheus down)",
        id="prometheus-becomes-unavailable",
    ),
]


@pytest.mark.parametrize(("change", "n1_after"), CHANGES)
def test_a_state_change_shows_in_the_very_next_filter(
    world: World, change: Callable[[World], None], n1_after: str | None
) -> None:
    before, message = filtered(world, BIG)
    assert before["FailedNodes"] == {"n1": CAPACITY, "n2": CAPACITY}
    assert N1_BEFORE in message and N2_BEFORE in message
    change(world)
    after, message = filtered(world, BIG)
    if n1_after is None:
        assert "harvest=false" in after["FailedAndUnresolvableNodes"]["n1"]
        assert N1_BEFORE not in message
    else:
        assert n1_after in message
    assert after == fresh_answer(world, BIG)  # nothing of the previous state survives in a cache


def test_a_change_that_makes_room_changes_the_decision_at_once(world: World) -> None:
    assert world.post("filter", BIG).json()["NodeNames"] == []
    with_usage(world, 0.5)  # 0.9·16Gi − 0.5Gi = 13.9Gi: still short of 15Gi
    assert world.post("filter", BIG).json()["NodeNames"] == []
    world.model.apply_node_event("MODIFIED", node("n1", memory="20Gi"))  # 17.5Gi now
    assert world.post("filter", BIG).json()["NodeNames"] == ["n1"]


def test_an_assumption_shows_in_the_next_message_and_leaves_other_nodes_alone(world: World) -> None:
    assert N1_BEFORE in filtered(world, BIG)[1]
    small = {"Pod": opportunistic_pod("etl-1", cpu="1", memory="8Gi"), "Nodes": None, "NodeNames": ["n1", "n2"]}
    assert world.post("filter", small).json()["NodeNames"] == ["n1"]  # the single fit: assumed on n1
    message = filtered(world, BIG)[1]
    assert "n1: memory 15.0Gi > harvestable 2.4Gi (0.90 × 16Gi − used 4.0Gi − blocked 0 − assumed 8.0Gi)" in message
    assert N2_BEFORE in message
    world.clock.now += world.settings.harvest.ramp_up_s + 1  # the ramp-up expires: the assumption goes
    assert N1_BEFORE in filtered(world, BIG)[1]


def test_a_deleted_pod_leaves_the_next_message(world: World) -> None:
    pod = bound_now("train-9", "n1", "2Gi")
    world.model.apply_pod_event("ADDED", pod)
    assert "assumed 2.0Gi" in filtered(world, BIG)[1]
    world.model.apply_pod_event("DELETED", pod)
    assert N1_BEFORE in filtered(world, BIG)[1]


def test_a_node_added_under_a_repeated_name_list_is_known_at_once(world: World) -> None:
    body = {**BIG, "Pod": opportunistic_pod("etl-2", cpu="1", memory="1Gi"), "NodeNames": ["n1", "ghost"]}
    assert world.post("filter", body).json()["NodeNames"] == ["n1"]
    world.model.apply_node_event("ADDED", node("ghost"))
    world.samples({**SAMPLES, "ghost": {"usage": {"cpu": 1.0, "memory": 1 * GI}}})
    assert world.post("filter", body).json()["NodeNames"] == ["n1", "ghost"]


def test_prioritize_names_the_right_hosts_after_node_rows_are_reused(world: World) -> None:
    pod = opportunistic_pod("etl-3", cpu="1", memory="1Gi")
    first = world.post("prioritize", {"Pod": pod, "Nodes": None, "NodeNames": ["n1", "n2"]}).json()
    assert [e["Host"] for e in first] == ["n1", "n2"]
    world.model.apply_node_event("DELETED", node("n1"))
    world.model.apply_node_event("ADDED", node("n9"))  # takes n1's freed row
    world.samples({**SAMPLES, "n9": SAMPLES["n1"]})
    body = {"Pod": opportunistic_pod("etl-4", cpu="1", memory="1Gi"), "Nodes": None, "NodeNames": ["n9", "n2"]}
    assert [e["Host"] for e in world.post("prioritize", body).json()] == ["n9", "n2"]


# --- the encoders match orjson byte for byte -----------------------------------------------------

_names = st.lists(st.text(min_size=1, max_size=12).filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)))


@given(names=_names, data=st.data())
def test_prioritize_bodies_are_the_bytes_orjson_writes(names: list[str], data: st.DataObject) -> None:
    scores = data.draw(st.lists(st.integers(0, 10), min_size=len(names), max_size=len(names)))
    expected = orjson.dumps(wire.host_priorities(names, scores))
    assert wire.host_priorities_json(names, scores) == expected
    entries = wire.HostEntries()
    rows = np.arange(len(names), dtype=np.int64)
    for version in (1, 1, 2):  # built, reused, rebuilt
        assert entries.encode(names, rows, np.array(scores, dtype=np.int64), version) == expected


def test_prioritize_body_of_names_the_model_does_not_know_is_still_exact() -> None:
    names, scores = ["n1", "ghost"], np.array([3, 0])
    body = wire.HostEntries().encode(names, np.array([0, -1]), scores, 1)
    assert body == orjson.dumps(wire.host_priorities(names, scores.tolist()))


# --- the cached state table answers as an uncached snapshot -------------------------------------------

_cores = st.sampled_from([0.0, 0.5, 1.0, 1.25, 2.0, 5.0, 7.5, 12.0, 15.9])
_gib = st.sampled_from([0.0, 0.5, 1.0, 3.3, 4.0, 8.0, 13.2, 15.5, float("nan")])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    usage=st.lists(st.tuples(_cores, _gib), min_size=1, max_size=6),
    steps=st.lists(st.tuples(st.sampled_from(["assume", "refresh", "bind", "time"]), st.integers(0, 5)), max_size=5),
    demand=st.tuples(st.sampled_from(["4", "9", "15", "500m"]), st.sampled_from(["1Gi", "8Gi", "14Gi", "100Mi"])),
)
def test_cached_answers_equal_an_uncached_snapshot_through_state_changes(
    usage: list[tuple[float, float]], steps: list[tuple[str, int]], demand: tuple[str, str]
) -> None:
    clock = [1714557600.0]
    model = ClusterModel(clock=lambda: clock[0])
    names = [f"n{i}" for i in range(len(usage))]
    model.replace_nodes([node(n) for n in names])
    model.replace_pods([])
    utilization = Utilization(None)

    def refresh(shift: float) -> None:
        samples = {n: {"usage": {"cpu": c, "memory": m * GI + shift}} for n, (c, m) in zip(names, usage, strict=True)}
        utilization.replace(UtilizationSnapshot.from_nodes(samples, age_s=1.0, fetched_at_s=utilization.clock()))

    refresh(0.0)
    settings_ = StowageSettings()
    ext = create_app(settings_, model, utilization).state.extender
    for step, (kind, k) in enumerate([("none", 0), *steps]):
        pod_json = opportunistic_pod(f"etl-{step}", cpu=demand[0], memory=demand[1])
        target = names[k % len(names)]
        if kind == "assume":
            model.assume(f"batch/other-{step}", target, parse_pod(opportunistic_pod(cpu="1", memory="1Gi")).demand)
        elif kind == "refresh":
            refresh(k * 0.1 * GI)
        elif kind == "bind":
            model.apply_pod_event("ADDED", bound_now(f"r-{step}", target, "1Gi"))
        elif kind == "time":
            clock[0] += 10.0
        pod = parse_pod(pod_json)
        uncached = filtering.filter_nodes(pod, snapshot.take(model, utilization, settings_, names, exclude_pod=pod.key))
        body = ext.filter({"Pod": pod_json, "Nodes": None, "NodeNames": list(names)})
        assert body["FailedNodes"] == uncached.failed
        assert body["FailedAndUnresolvableNodes"] == uncached.unresolvable
        assert body["NodeNames"] == [names[i] for i in uncached.passed.tolist()]


def test_pods_of_different_demands_in_turn_each_get_their_own_numbers(world: World) -> None:
    other = {**BIG, "Pod": opportunistic_pod("etl-5", cpu="15", memory="14Gi")}
    first = filtered(world, BIG)
    second, message = filtered(world, other)
    assert (
        "n1: cpu 15 > harvestable 12.4 (0.90 × 16 − used 2.0 − blocked 0); memory 14.0Gi > harvestable"
        " 10.4Gi (0.90 × 16Gi − used 4.0Gi − blocked 0)"
    ) in message
    assert second == fresh_answer(world, other)
    assert filtered(world, BIG) == first
