"""kube-scheduler's extender protocol, over real HTTP, with payloads shaped as the scheduler sends them.

Scenarios from EXTENDER_PROTOCOL.md §4 (sequential filtering, both nodeCacheCapable
modes, explicit empty list, non-overlapping failure maps, single-node prioritize,
meta victims in preempt) plus Stowage's own rules.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from stowage.extender.messages import REASONS

from stowage.labels import LABEL_CLASS, SCHEDULER_NAME
from tests.extender.conftest import World, WorldFactory
from tests.extender.objects import GI, extender_args, node, opportunistic_pod, preemption_args, regular_pod

pytestmark = pytest.mark.timeout(60)

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}

NODES = [node("n1"), node("n2"), node("n3"), node("n4", harvest=False)]
SAMPLES = {
    "n1": {"usage": {"cpu": 2.0, "memory": 4 * GI}},
    "n2": {"usage": {"cpu": 6.0, "memory": 13.2 * GI}},
    "n3": {"usage": {"cpu": 2.0, "memory": 15.5 * GI}, "contention": {"memory": 1}},
    "n4": {"usage": {"cpu": 1.0, "memory": 1 * GI}},
}


@pytest.fixture
def world(make_world: WorldFactory) -> World:
    return make_world(NODES, samples=SAMPLES)


def names(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["metadata"]["name"] for n in nodes]


def assert_filter_shape(body: dict[str, Any], sent: list[str], *, cache: bool) -> list[str]:
    """Every key present; one explicit list; a subset of the input; maps disjoint; every node accounted for."""
    assert set(body) == FILTER_KEYS
    assert body["Error"] == ""
    if cache:
        assert body["Nodes"] is None
        assert isinstance(body["NodeNames"], list)
        passed = body["NodeNames"]
    else:
        assert body["NodeNames"] is None
        assert body["Nodes"]["metadata"] == {}
        passed = names(body["Nodes"]["items"])
    failed, unresolvable = body["FailedNodes"], body["FailedAndUnresolvableNodes"]
    assert set(passed) <= set(sent)
    assert not set(failed) & set(unresolvable)
    assert not (set(failed) | set(unresolvable)) & set(passed)
    assert set(passed) | set(failed) | set(unresolvable) == set(sent)
    return passed


# --- filter ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cache", [True, False], ids=["node-names", "full-nodes"])
def test_filter_answers_in_the_mode_it_was_asked_in(world: World, cache: bool) -> None:
    response = world.post("filter", extender_args(opportunistic_pod(), NODES, cache=cache))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    passed = assert_filter_shape(response.json(), names(NODES), cache=cache)
    assert passed == ["n1"]


def test_filter_full_mode_returns_the_node_objects_unmodified(world: World) -> None:
    response = world.post("filter", extender_args(regular_pod(), NODES, cache=False))
    items = response.json()["Nodes"]["items"]
    by_name = {n["metadata"]["name"]: n for n in NODES}
    assert items and all(item == by_name[item["metadata"]["name"]] for item in items)


@pytest.mark.parametrize("cache", [True, False], ids=["node-names", "full-nodes"])
def test_no_fitting_node_gives_an_explicit_empty_list_not_null(world: World, cache: bool) -> None:
    huge = opportunistic_pod(cpu="64", memory="1Ti")
    body = world.post("filter", extender_args(huge, NODES, cache=cache)).json()
    assert_filter_shape(body, names(NODES), cache=cache)
    if cache:
        assert body["NodeNames"] == []
    else:
        assert body["Nodes"]["items"] == []
    assert len(body["FailedNodes"]) + len(body["FailedAndUnresolvableNodes"]) == len(NODES)


def test_an_empty_node_list_is_answered_with_an_empty_list(world: World) -> None:
    body = world.post("filter", {"Pod": opportunistic_pod(), "Nodes": None, "NodeNames": []}).json()
    assert body["NodeNames"] == [] and body["FailedNodes"] == {} and body["Error"] == ""


def test_sequential_filtering_only_narrows_what_the_previous_extender_left(world: World) -> None:
    # A previous extender kept n2 and n3 only; we must not resurrect n1.
    previous = [NODES[1], NODES[2]]
    body = world.post("filter", extender_args(regular_pod(), previous, cache=True)).json()
    passed = assert_filter_shape(body, ["n2", "n3"], cache=True)
    assert passed == ["n2"]
    assert "n1" not in body["FailedNodes"]


def test_a_nominated_node_alone_is_filtered_like_any_other(world: World) -> None:
    body = world.post("filter", extender_args(opportunistic_pod(), [NODES[0]], cache=True)).json()
    assert body["NodeNames"] == ["n1"]


def test_rejected_nodes_get_one_stable_phrase_per_reason(world: World) -> None:
    """kube-scheduler counts identical phrases in FailedScheduling: per-node numbers would make a line per node."""
    body = world.post("filter", extender_args(opportunistic_pod(memory="14Gi"), NODES, cache=True)).json()
    assert body["FailedNodes"] == {"n1": REASONS["harvest-capacity"], "n2": REASONS["harvest-capacity"],
                                   "n3": REASONS["contention"]}
    assert body["FailedAndUnresolvableNodes"] == {"n4": REASONS["harvest-disabled"]}
    exported = world.http.get(f"{world.url}/metrics").text
    for reason in REASONS:  # each a metric label, exported before its first rejection
        assert f'stowage_extender_rejections_total{{reason="{reason}"}}' in exported


def test_the_numbers_behind_a_rejection_go_in_one_event_on_the_pod(world: World) -> None:
    pod = opportunistic_pod("etl-big", memory="14Gi")
    world.post("filter", extender_args(pod, NODES, cache=True))
    event = world.event_about("etl-big")
    assert event["type"] == "Warning" and event["reason"] == "StowageNoNode"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "batch", "name": "etl-big",
                                       "uid": pod["metadata"]["uid"]}
    message = event["message"]
    assert "needs cpu 2, memory 14.0Gi (harvested capacity)" in message
    assert "2 harvest-capacity" in message and "1 contention" in message and "1 harvest-disabled" in message
    # the closest node first: n1 has 10.4Gi harvestable, n2 1.2Gi
    assert message.index("n1: memory 14.0Gi > harvestable 10.4Gi (0.90 × 16Gi − used 4.0Gi − blocked 0)") < (
        message.index("n2: memory 14.0Gi > harvestable 1.2Gi (0.90 × 16Gi − used 13.2Gi − blocked 0)")
    )
    assert "contention, e.g. n3: sustained contention on memory" in message


def test_events_about_one_pod_are_rate_limited(make_world: WorldFactory) -> None:
    from stowage.extender.events import PodEvents

    clock = [0.0]
    events = PodEvents(None, min_interval_s=60.0, clock=lambda: clock[0])
    assert events.due("uid-1") and not events.due("uid-1") and events.due("uid-2")
    clock[0] = 61.0
    assert events.due("uid-1")


@pytest.mark.parametrize(
    ("pod", "expected_passed", "reasons"),
    [
        pytest.param(
            opportunistic_pod(),
            ["n1"],
            {"n2": ("failed", "harvestable"), "n3": ("failed", "contention"), "n4": ("unresolvable", "harvest=false")},
            id="opportunistic-fits-only-where-harvestable",
        ),
        pytest.param(
            regular_pod(),
            ["n1", "n2", "n4"],
            {"n3": ("failed", REASONS["contention"])},
            id="regular-kept-off-contended-nodes-only",
        ),
        pytest.param(
            regular_pod(scheduler="default-scheduler"),
            ["n1", "n2", "n3", "n4"],
            {},
            id="other-scheduler-passes-through-unchanged",
        ),
    ],
)
def test_filter_rules(world: World, pod: dict[str, Any], expected_passed: list[str], reasons: dict[str, Any]) -> None:
    body = world.post("filter", extender_args(pod, NODES, cache=True)).json()
    assert body["NodeNames"] == expected_passed
    for name, (kind, phrase) in reasons.items():
        where = body["FailedNodes"] if kind == "failed" else body["FailedAndUnresolvableNodes"]
        assert phrase in where[name]


def test_stale_samples_stop_harvesting_but_never_block_regular_pods(make_world: WorldFactory) -> None:
    world = make_world(NODES[:2])
    world.samples({k: SAMPLES[k] for k in ("n1", "n2")}, age_s={"n1": 45.0, "n2": 1.0})
    opp = world.post("filter", extender_args(opportunistic_pod(memory="1Gi"), NODES[:2], cache=True)).json()
    assert opp["NodeNames"] == ["n2"]
    assert opp["FailedNodes"]["n1"] == REASONS["utilization-unavailable"]
    reg = world.post("filter", extender_args(regular_pod(), NODES[:2], cache=True)).json()
    assert reg["NodeNames"] == ["n1", "n2"]


def test_without_prometheus_no_node_harvests_and_regular_pods_still_schedule(make_world: WorldFactory) -> None:
    world = make_world(NODES)  # no samples at all: utilization unavailable
    opp = world.post("filter", extender_args(opportunistic_pod(), NODES, cache=True)).json()
    assert opp["NodeNames"] == []
    assert opp["FailedNodes"]["n1"] == REASONS["utilization-unavailable"]
    assert "utilization is unavailable" in world.event_about(opportunistic_pod()["metadata"]["name"])["message"]
    reg = world.post("filter", extender_args(regular_pod(), NODES, cache=True)).json()
    assert reg["NodeNames"] == names(NODES)  # no samples → no contention known → nothing blocked


def test_declared_bandwidth_is_never_over_allocated(make_world: WorldFactory) -> None:
    nodes = [node("d1", disk_bandwidth="200Mi"), node("d2", disk_bandwidth="200Mi"), node("d3")]
    busy = regular_pod("io-0", cpu="1", node_name="d1", annotations={"stowage.io/disk-bandwidth": "150Mi"})
    world = make_world(nodes, pods=[busy])
    pod = regular_pod("io-1", cpu="1", annotations={"stowage.io/disk-bandwidth": "80Mi"})
    body = world.post("filter", extender_args(pod, nodes, cache=True)).json()
    assert body["NodeNames"] == ["d2", "d3"]  # d3 declares nothing: not checked
    assert body["FailedNodes"]["d1"] == REASONS["bandwidth"]
    crowded = world.post("filter", extender_args(pod, nodes[:1], cache=True)).json()
    assert crowded["NodeNames"] == []
    # The new rule names whose declarations count: only regular pods reserve declared bandwidth.
    assert "disk bandwidth 80.0Mi/s > free 50.0Mi/s (node declares 200Mi/s, regular pods reserve 150.0Mi/s)" in (
        world.event_about("io-1")["message"]
    )


def test_unknown_nodes_reject_opportunistic_pods_but_not_regular_ones(world: World) -> None:
    body = {"Pod": opportunistic_pod(), "Nodes": None, "NodeNames": ["n1", "ghost"]}
    opp = world.post("filter", body).json()
    assert opp["NodeNames"] == ["n1"] and "not in Stowage's cache" in opp["FailedNodes"]["ghost"]
    reg = world.post("filter", {**body, "Pod": regular_pod()}).json()
    assert reg["NodeNames"] == ["n1", "ghost"]


def test_an_opportunistic_pod_without_its_demand_annotation_counts_at_its_limits(world: World) -> None:
    pod = opportunistic_pod(memory="12Gi")  # limits memory 12Gi, requests explicit 0
    del pod["metadata"]["annotations"]["stowage.io/demand"]
    body = world.post("filter", extender_args(pod, NODES, cache=True)).json()
    assert body["NodeNames"] == []  # n1 has 0.9·16Gi − 4Gi = 10.4Gi harvestable
    assert "n1: memory 12.0Gi > harvestable 10.4Gi" in world.event_about(pod["metadata"]["name"])["message"]


def test_an_opportunistic_pod_needing_a_resource_no_node_has_is_unresolvable_everywhere(world: World) -> None:
    pod = opportunistic_pod()
    pod["metadata"]["annotations"]["stowage.io/demand"] = '{"cpu": "1", "example.com/fpga": "1"}'
    body = world.post("filter", extender_args(pod, NODES, cache=True)).json()
    assert body["NodeNames"] == [] and body["FailedNodes"] == {}
    assert body["FailedAndUnresolvableNodes"]["n1"] == REASONS["missing-resource"]
    assert "No node offers example.com/fpga" in world.event_about(pod["metadata"]["name"])["message"]


def test_a_malformed_stowage_annotation_rejects_every_node_with_the_field_named(world: World) -> None:
    pod = opportunistic_pod(annotations={"stowage.io/demand": "{not json"})
    body = world.post("filter", extender_args(pod, NODES, cache=True)).json()
    assert body["NodeNames"] == []
    assert set(body["FailedAndUnresolvableNodes"]) == set(names(NODES))
    assert body["FailedAndUnresolvableNodes"]["n1"] == REASONS["invalid-pod"]
    event = world.event_about(pod["metadata"]["name"])
    assert event["reason"] == "StowageInvalidPod" and "stowage.io/demand" in event["message"]


# --- the assumed set S ----------------------------------------------------------------------------


def test_two_pods_in_quick_succession_cannot_take_the_same_harvestable_slot(make_world: WorldFactory) -> None:
    world = make_world([node("n1"), node("n2")], samples={"n1": SAMPLES["n1"], "n2": SAMPLES["n1"]})
    first, second, third = (opportunistic_pod(f"etl-{i}", cpu="4", memory="8Gi") for i in range(3))
    args = {"Nodes": None, "NodeNames": ["n1", "n2"]}
    # A_opp memory = 0.9·16Gi − 4Gi = 10.4Gi on each node: one 8Gi pod per node.
    assert world.post("filter", {**args, "Pod": first}).json()["NodeNames"] == ["n1", "n2"]
    scores = world.post("prioritize", {**args, "Pod": first}).json()
    chosen = max(scores, key=lambda s: s["Score"])["Host"]
    other = "n2" if chosen == "n1" else "n1"
    assert world.post("filter", {**args, "Pod": second}).json()["NodeNames"] == [other]
    world.post("prioritize", {**args, "Pod": second})
    body = world.post("filter", {**args, "Pod": third}).json()
    assert body["NodeNames"] == []
    assert f"{chosen}: memory 8.0Gi > harvestable 2.4Gi" in world.event_about("etl-2")["message"]
    assert "assumed 8.0Gi" in world.event_about("etl-2")["message"]


def test_a_pod_refiltered_does_not_compete_with_its_own_provisional_slot(make_world: WorldFactory) -> None:
    world = make_world([node("n1")], samples={"n1": SAMPLES["n1"]})
    pod = opportunistic_pod(cpu="4", memory="8Gi")
    args = {"Pod": pod, "Nodes": None, "NodeNames": ["n1"]}
    assert world.post("filter", args).json()["NodeNames"] == ["n1"]  # single node: assumed here
    assert world.post("filter", args).json()["NodeNames"] == ["n1"]  # retry of the same pod still fits


def test_the_assumption_lasts_for_the_ramp_up_after_binding_then_usage_takes_over(make_world: WorldFactory) -> None:
    world = make_world([node("n1")], samples={"n1": SAMPLES["n1"]})
    bound = opportunistic_pod("etl-a", cpu="4", memory="8Gi", node_name="n1")
    bound["status"]["conditions"][0]["lastTransitionTime"] = "2024-05-01T10:00:00Z"  # bound just now
    world.model.apply_pod_event("ADDED", bound)
    pod = {"Pod": opportunistic_pod("etl-b", cpu="4", memory="8Gi"), "Nodes": None, "NodeNames": ["n1"]}
    assert world.post("filter", pod).json()["NodeNames"] == []
    world.clock.now += world.settings.harvest.ramp_up_s + 1  # ramp-up over: only measured usage counts
    assert world.post("filter", pod).json()["NodeNames"] == ["n1"]


# --- prioritize -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cache", [True, False], ids=["node-names", "full-nodes"])
def test_prioritize_returns_a_bare_array_of_every_host_scored_0_to_10(world: World, cache: bool) -> None:
    body = world.post("prioritize", extender_args(regular_pod(), NODES, cache=cache)).json()
    assert isinstance(body, list)
    assert [entry["Host"] for entry in body] == names(NODES)
    assert all(set(e) == {"Host", "Score"} and isinstance(e["Score"], int) and 0 <= e["Score"] <= 10 for e in body)


def test_prioritize_of_a_single_node_still_answers(world: World) -> None:
    body = world.post("prioritize", extender_args(regular_pod(), [NODES[0]], cache=True)).json()
    assert body == [{"Host": "n1", "Score": 10}]


def test_prioritize_prefers_the_node_whose_free_resources_align_with_the_demand(make_world: WorldFactory) -> None:
    nodes = [node("cpu-busy", cpu="16", memory="64Gi"), node("mem-busy", cpu="16", memory="64Gi")]
    running = [
        regular_pod("cpu-hog", cpu="12", memory="1Gi", node_name="cpu-busy"),
        regular_pod("mem-hog", cpu="1", memory="48Gi", node_name="mem-busy"),
    ]
    world = make_world(nodes, pods=running)
    cpu_heavy = regular_pod(cpu="3", memory="1Gi")
    body = world.post("prioritize", extender_args(cpu_heavy, nodes, cache=True)).json()
    scores = {e["Host"]: e["Score"] for e in body}
    # a = Σ (d/C)(A/C): cpu-busy 3/16·4/16 + 1/64·63/64 ≈ 0.06 < mem-busy 3/16·15/16 + 1/64·16/64 ≈ 0.18
    assert scores == {"mem-busy": 10, "cpu-busy": 1}


def test_nodes_holding_the_data_outscore_identical_remote_nodes(make_world: WorldFactory) -> None:
    nodes = [node("a"), node("b")]
    world = make_world(nodes)
    pod = regular_pod(data_nodes="b")
    scores = {e["Host"]: e["Score"] for e in world.post("prioritize", extender_args(pod, nodes, cache=True)).json()}
    assert scores["b"] > scores["a"]


def test_prioritize_gives_other_schedulers_pods_zero_everywhere(world: World) -> None:
    body = world.post("prioritize", extender_args(regular_pod(scheduler="default-scheduler"), NODES, cache=True)).json()
    assert [e["Score"] for e in body] == [0, 0, 0, 0]


def test_opportunistic_pods_score_zero_where_nothing_is_harvestable(world: World) -> None:
    body = world.post("prioritize", extender_args(opportunistic_pod(), NODES, cache=True)).json()
    scores = {e["Host"]: e["Score"] for e in body}
    assert scores["n1"] == 10 and scores["n2"] == 0 and scores["n4"] == 0


# --- preempt --------------------------------------------------------------------------------------

RUNNING = [
    opportunistic_pod("etl-run-0", node_name="n1"),
    regular_pod("hog-0", cpu="10", memory="10Gi", queue="hog", node_name="n2"),
    regular_pod("fair-0", cpu="1", memory="1Gi", queue="research", node_name="n2"),
]
# hog holds 40 of 64 cores (62.5%) against a fair share of 50% (two active queues, weight 1 each).
HOG_ELSEWHERE = [regular_pod(f"hog-{i}", cpu="10", memory="10Gi", queue="hog", node_name=f"n{i}") for i in (1, 3, 4)]


@pytest.fixture
def crowded(make_world: WorldFactory) -> World:
    return make_world(NODES, pods=RUNNING + HOG_ELSEWHERE, samples=SAMPLES)


@pytest.mark.parametrize("cache", [True, False], ids=["meta-victims", "full-victims"])
def test_preempt_keeps_acceptable_victims_and_drops_the_rest(crowded: World, cache: bool) -> None:
    etl, hog, fair = RUNNING
    victims = {"n1": [etl], "n2": [hog], "n3": [fair], "n4": [hog, fair]}
    body = crowded.post("preempt", preemption_args(regular_pod("new-0", queue="research"), victims, cache=cache)).json()
    assert set(body) == {"NodeNameToMetaVictims"}
    kept = body["NodeNameToMetaVictims"]
    # opportunistic always; hog's queue is above its fair share; research's is not; n4 mixes both → dropped.
    assert kept == {
        "n1": {"Pods": [{"UID": "uid-etl-run-0"}], "NumPDBViolations": 0},
        "n2": {"Pods": [{"UID": "uid-hog-0"}], "NumPDBViolations": 0},
    }


def test_preempt_never_returns_a_node_with_an_empty_victim_list(crowded: World) -> None:
    args = {
        "Pod": regular_pod("new-0"),
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": 0}, "n2": None},
    }
    body = crowded.post("preempt", args).json()
    assert body == {"NodeNameToMetaVictims": {}}


def test_preempt_of_unknown_uids_protects_them(crowded: World) -> None:
    args = {
        "Pod": regular_pod("new-0"),
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "never-seen"}], "NumPDBViolations": 1}},
    }
    assert crowded.post("preempt", args).json() == {"NodeNameToMetaVictims": {}}


def test_preempt_leaves_other_schedulers_candidates_alone(crowded: World) -> None:
    _, _, fair = RUNNING
    args = preemption_args(regular_pod("x", scheduler="default-scheduler"), {"n2": [fair]}, cache=True)
    args["NodeNameToMetaVictims"]["n2"]["NumPDBViolations"] = 2
    body = crowded.post("preempt", args).json()
    assert body == {"NodeNameToMetaVictims": {"n2": {"Pods": [{"UID": "uid-fair-0"}], "NumPDBViolations": 2}}}


def _promoted(name: str, queue: str, node_name: str) -> dict[str, Any]:
    """A pod the operator promoted in place: converted once (priority class stowage-opportunistic, immutable, and
    the extended resource stowage.io/harvested, not resizable), now labelled regular with its requests restored."""
    pod = opportunistic_pod(name, cpu="2", memory="3Gi", queue=queue, node_name=node_name)
    pod["metadata"]["labels"][LABEL_CLASS] = "regular"
    pod["spec"]["containers"][0]["resources"]["requests"].update({"cpu": "2", "memory": "3Gi"})
    return pod


@pytest.mark.parametrize("cache", [True, False], ids=["meta-victims", "full-victims"])
def test_preempt_treats_a_promoted_pod_as_regular_whatever_its_priority(make_world: WorldFactory,
                                                                         cache: bool) -> None:
    # Its priority stays negative (a priority class is immutable), so kube-scheduler offers it as a victim to any
    # pod; preempt accepts it only as it accepts a regular pod: from a queue above its fair share.
    fair, hoggish = _promoted("etl-fair", "research", "n3"), _promoted("etl-hog", "hog", "n4")
    world = make_world(NODES, pods=RUNNING + HOG_ELSEWHERE + [fair, hoggish], samples=SAMPLES)
    body = world.post("preempt", preemption_args(regular_pod("new-0", queue="research"),
                                                 {"n3": [fair], "n4": [hoggish]}, cache=cache)).json()
    assert body["NodeNameToMetaVictims"] == {"n4": {"Pods": [{"UID": "uid-etl-hog"}], "NumPDBViolations": 0}}


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "body", "phrase"),
    [
        pytest.param("filter", {"Nodes": None, "NodeNames": ["n1"]}, "Pod: Field required", id="filter-without-pod"),
        pytest.param(
            "filter",
            {"Pod": regular_pod(), "NodeNames": "n1"},
            "NodeNames: Input should be a valid list",
            id="names-not-a-list",
        ),
        pytest.param(
            "prioritize",
            {"Pod": {"metadata": {"labels": {"x": 1}}}, "NodeNames": []},
            "Pod.metadata.labels.x",
            id="label-not-a-string",
        ),
        pytest.param(
            "preempt",
            {"Pod": regular_pod(), "NodeNameToMetaVictims": {"n1": {"Pods": [{"uid": "x"}]}}},
            "NodeNameToMetaVictims.n1.Pods.0.UID: Field required",
            id="victim-without-uid",
        ),
        pytest.param("filter", [], "Input should be a valid dictionary", id="array-instead-of-object"),
    ],
)
def test_malformed_bodies_get_400_naming_what_is_wrong(world: World, verb: str, body: Any, phrase: str) -> None:
    response = world.post(verb, body)
    assert response.status_code == 400
    assert phrase in response.json()["error"]


def test_invalid_json_gets_400(world: World) -> None:
    response = world.http.post(f"{world.url}/filter", content=b'{"Pod": ', headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]


def test_a_node_name_with_a_lone_surrogate_is_echoed_as_valid_json(world: World) -> None:
    # JSON allows "\ud800"; Python decodes it to a lone surrogate that orjson refuses to encode.
    body = b'{"Pod": {"spec": {"schedulerName": "default-scheduler"}}, "Nodes": null, "NodeNames": ["\\ud800"]}'
    response = world.http.post(f"{world.url}/filter", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert response.json()["NodeNames"] == ["\ud800"]


@pytest.mark.parametrize("cache", [True, False])
def test_an_internal_failure_fails_opportunistic_pods_closed_and_lets_regular_pods_pass(
    world: World, cache: bool
) -> None:
    """Never ``Error``: an ignorable extender's Error lets kube-scheduler bind the pod anywhere."""
    from stowage.prom import UtilizationSnapshot

    broken = UtilizationSnapshot.from_nodes({"n1": {"usage": {"cpu": 1.0}}})
    broken.index["n2"] = 99  # a corrupt snapshot: row 99 does not exist
    world.utilization.replace(broken)
    response = world.post("filter", extender_args(opportunistic_pod(), NODES, cache=cache))
    assert response.status_code == 200
    body = response.json()
    assert body["Error"] == "" and body["NodeNames" if cache else "Nodes"] in ([], {"metadata": {}, "items": []})
    assert body["FailedNodes"] == dict.fromkeys(names(NODES), REASONS["internal-error"])
    assert "Traceback" not in response.text
    regular = world.post("filter", extender_args(regular_pod(), NODES, cache=cache)).json()
    assert regular["Error"] == "" and regular["FailedNodes"] == {}
    if cache:
        assert regular["NodeNames"] == names(NODES)
    else:
        assert [n["metadata"]["name"] for n in regular["Nodes"]["items"]] == names(NODES)
    prioritized = world.post("prioritize", extender_args(opportunistic_pod(), NODES, cache=True))
    assert prioritized.status_code == 200 and [e["Score"] for e in prioritized.json()] == [0, 0, 0, 0]


# --- health, readiness, metrics, OpenAPI ------------------------------------------------------------


def test_readyz_waits_for_both_caches(make_world: WorldFactory) -> None:
    world = make_world(NODES, synced=False)
    assert world.http.get(f"{world.url}/healthz").status_code == 200
    response = world.http.get(f"{world.url}/readyz")
    assert response.status_code == 503 and response.json()["waiting_for"] == ["nodes", "pods"]
    world.model.replace_nodes(NODES)
    world.model.replace_pods([])
    assert world.http.get(f"{world.url}/readyz").status_code == 200


def test_metrics_count_requests_rejections_and_harvestable_capacity(world: World) -> None:
    world.post("filter", extender_args(opportunistic_pod(), NODES, cache=True))
    world.post("prioritize", extender_args(opportunistic_pod(), NODES, cache=True))
    text = world.http.get(f"{world.url}/metrics").text
    assert 'stowage_extender_request_seconds_count{verb="filter"} 1.0' in text
    assert 'stowage_extender_request_seconds_count{verb="prioritize"} 1.0' in text
    assert 'stowage_extender_rejections_total{reason="contention"} 1.0' in text
    assert 'stowage_extender_rejections_total{reason="harvest-disabled"} 1.0' in text
    assert 'stowage_node_harvestable{node="n4",resource="cpu"} 0.0' in text
    # 0.9·16 − used 2 − assumed 2 (prioritize placed the pod on n1 provisionally)
    harvestable = re.search(r'stowage_node_harvestable\{node="n1",resource="cpu"\} (\S+)', text)
    assert harvestable is not None and float(harvestable.group(1)) == pytest.approx(10.4)


def test_the_openapi_document_describes_every_verb(world: World) -> None:
    doc = world.http.get(f"{world.url}/openapi.json").json()
    assert {"/filter", "/prioritize", "/preempt", "/healthz", "/readyz", "/metrics"} <= set(doc["paths"])
    schemas = doc["components"]["schemas"]
    assert {"ExtenderArgs", "ExtenderFilterResult", "HostPriority", "ExtenderPreemptionArgs"} <= set(schemas)


def test_requests_are_not_modified_by_the_extender(world: World) -> None:
    args = extender_args(opportunistic_pod(), NODES, cache=False)
    before = copy.deepcopy(args)
    world.post("filter", args)
    assert args == before
    assert args["Pod"]["spec"]["schedulerName"] == SCHEDULER_NAME
