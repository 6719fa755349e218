"""Why a task waits (``Decision.holds``, ``stowage.policy.holding``): each reason with its numbers, and the reason
changing when its cause does. Constructed states, the decider run for real; no cluster."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from stowage.config import StowageSettings
from stowage.model import JobOrder
from stowage.policy import decide, estimates, fairness, holding

GI = 2.0**30
RES = ("cpu", "memory")


def decide_input(*, nodes: Sequence[tuple[float, float]], free: Sequence[tuple[float, float]],
                 groups: Sequence[tuple[str, float, int]], queues: Sequence[str] = ("q",),
                 alloc: dict[str, tuple[float, float]] | None = None, quota: dict[str, float] | None = None,
                 weights: Sequence[float] | None = None, intent: Sequence[int] | None = None,
                 harvestable: Sequence[tuple[float, float]] | None = None,
                 sample_age_s: Sequence[float] | None = None, explain: bool = True) -> decide.DecideInput:
    """Nodes (cpu, memory GiB) with their regular ``free`` room; groups (queue, cpu, tasks) of 1 GiB tasks."""
    cap = np.array([(c, m * GI) for c, m in nodes], dtype=np.float64).reshape(-1, 2)
    shapes = np.array([(cpu, GI) for _, cpu, _ in groups], dtype=np.float64)
    g = len(groups)
    q_index = {name: i for i, name in enumerate(queues)}
    queue_alloc = np.zeros((2, len(queues), 2))
    for name, (cpu, mem) in (alloc or {}).items():
        queue_alloc[0, q_index[name]] = (cpu, mem * GI)
    quota_rows = None
    if quota is not None:
        quota_rows = np.full((len(queues), 2), np.inf)
        for name, cpu in quota.items():
            quota_rows[q_index[name], 0] = cpu
    nan = np.full(g, np.nan)
    return decide.DecideInput(
        now=100.0, capacity=cap, regular_free=np.array([(c, m * GI) for c, m in free], dtype=np.float64).reshape(-1, 2),
        bandwidth=np.zeros(2, dtype=bool), bandwidth_room=cap.copy(), shapes=shapes,
        group_shape=np.arange(g, dtype=np.int64), group_key=[f"ns/p{i}" for i in range(g)],
        group_job=np.arange(g, dtype=np.int64), group_queue=np.array([q_index[q] for q, _, _ in groups]),
        releasable=np.array([n for _, _, n in groups], dtype=np.int64),
        remaining=np.array([n for _, _, n in groups], dtype=np.int64),
        intent=np.array(intent if intent is not None else [decide.INTENT_FALSE] * g, dtype=np.int64),
        finished_fraction=np.zeros(g),
        evidence=estimates.Evidence(hint_s=np.full(g, 60.0), finished=np.zeros(g, np.int64), finished_mean_s=nan,
                                    elapsed_s=np.zeros(g), history_s=nan, prior_s=nan),
        job_key=[f"ns/p{i}" for i in range(g)], job_arrival=np.zeros(g), queue_name=list(queues),
        queue_weight=np.array(weights if weights is not None else [1.0] * len(queues)),
        queue_order=[JobOrder.FIFO] * len(queues), queue_opportunistic=np.ones(len(queues), dtype=bool),
        queue_alloc=queue_alloc, pool_total=cap.sum(axis=0), node_key=[f"n{i}" for i in range(len(nodes))],
        harvestable=(None if harvestable is None else
                     np.array([(c, m * GI) for c, m in harvestable], dtype=np.float64).reshape(-1, 2)),
        queue_quota=quota_rows, resources=RES,
        sample_age_s=None if sample_age_s is None else np.array(sample_age_s, dtype=np.float64), explain=explain)


def holds(inp: decide.DecideInput) -> dict[int, holding.Hold]:
    return dict(decide.Decider(StowageSettings()).decide(inp).holds)


def test_a_queue_at_its_quota_names_the_resource_used_and_limit() -> None:
    # Quota 1 cpu, three 1-cpu pods, room for all: one starts, two wait for the quota.
    inp = decide_input(nodes=[(4, 16), (4, 16)], free=[(4, 16), (4, 16)], groups=[("q", 1, 1)] * 3,
                       quota={"q": 1.0})
    decision = decide.Decider(StowageSettings()).decide(inp)
    assert len(decision.placements) == 1
    assert sorted(decision.holds) == sorted({0, 1, 2} - {decision.placements[0][0]})
    for hold in decision.holds.values():
        assert hold == holding.Hold("quota", "queue 'q' is at its cpu quota: 1/1 in use, a task needs 1")


def test_no_node_with_room_names_the_closest_node_and_what_it_lacks() -> None:
    inp = decide_input(nodes=[(4, 16), (4, 16)], free=[(0.5, 8), (0.25, 8)], groups=[("q", 1, 1)])
    assert holds(inp) == {0: holding.Hold(
        "room", "no node has room for a task: cpu 1 needed, 500m free on n0 (the closest of 2 nodes)")}


def test_the_closest_node_is_never_one_without_the_resource() -> None:
    # n0 has no cpu at all: its lack (500m, once counted in cores against a capacity read as 1) looked smaller than
    # n1's (all of its 500m); it can never take the task, so n1 is named, as the starvation guard would hold it.
    inp = decide_input(nodes=[(0, 16), (0.5, 16)], free=[(0, 16), (0, 16)], groups=[("q", 0.5, 1)])
    assert holds(inp) == {0: holding.Hold(
        "room", "no node has room for a task: cpu 500m needed, 0 free on n1 (the closest of 2 nodes)")}


def test_a_queue_ahead_of_its_weight_waits_for_its_share_the_one_behind_for_room() -> None:
    # a holds 6 of 8 cores, b 1; both wait: a is ahead, b comes first when room frees.
    inp = decide_input(nodes=[(4, 16), (4, 16)], free=[(0.5, 8), (0.5, 8)], groups=[("a", 1, 2), ("b", 1, 2)],
                       queues=("a", "b"), alloc={"a": (6, 6), "b": (1, 1)})
    got = holds(inp)
    assert got[0] == holding.Hold("share", "queue 'a' is ahead of its weight: usage 0.75 of the pool (cpu, now and "
                                  "decayed past) at weight 1, queue 'b' 0.12 at weight 1 (tolerance 10%); queues not "
                                  "ahead get the next free room")
    assert got[1].reason == "room"


def test_weights_set_the_share_a_heavier_queue_at_its_weight_waits_for_room() -> None:
    # weight 3:1: a holds 6 of 8 cores (0.25 per weight), b 2 (0.25): neither is ahead; both wait for room.
    inp = decide_input(nodes=[(4, 16), (4, 16)], free=[(0.5, 8), (0.5, 8)], groups=[("a", 1, 1), ("b", 1, 1)],
                       queues=("a", "b"), alloc={"a": (6, 6), "b": (2, 2)}, weights=[3.0, 1.0])
    assert [h.reason for h in holds(inp).values()] == ["room", "room"]


def test_a_queue_that_used_nothing_is_named_to_the_queues_ahead_of_it() -> None:
    # Three equal queues: c holds nothing, a and b 3 cores each: both are ahead of c and wait for it.
    inp = decide_input(nodes=[(4, 16), (4, 16)], free=[(0.5, 8), (0.5, 8)],
                       groups=[("a", 1, 1), ("b", 1, 1), ("c", 1, 1)], queues=("a", "b", "c"),
                       alloc={"a": (3, 3), "b": (3, 3)}, weights=[1.0, 1.0, 1.0])
    got = holds(inp)
    for g, name in ((0, "a"), (1, "b")):
        assert got[g] == holding.Hold("share", f"queue {name!r} is ahead of its weight: usage 0.38 of the pool (cpu, "
                                      "now and decayed past) at weight 1, queue 'c' 0.00 at weight 1 (tolerance 10%); "
                                      "queues not ahead get the next free room")
    assert got[2].reason == "room"


def test_a_queue_below_its_floor_is_named_to_a_queue_even_with_it() -> None:
    # b used much in the past and holds 1 of 8 cores now, a used less and holds 3: by usage they are even,
    # but b holds less than half its fair share (0.5) and goes first.
    d = decide.Decider(StowageSettings())
    names = ("a", "b")
    d.usage[decide.Pool.REGULAR] = (names, fairness.QueueUsage((0.6, 0.9), (0.375, 0.125), 100.0))
    inp = decide_input(nodes=[(4, 16), (4, 16)], free=[(0.5, 8), (0.5, 8)], groups=[("a", 1, 1), ("b", 1, 1)],
                       queues=names, alloc={"a": (3, 3), "b": (1, 1)})
    got = d.decide(inp).holds
    assert got[0] == holding.Hold(
        "share", "queue 'b' holds 0.12 of the pool, below 50% of its fair share 0.50: it gets the next free room")
    assert got[1].reason == "room"


def test_an_opportunistic_pod_without_fresh_samples_waits_for_a_sample_naming_nodes_and_ages() -> None:
    # No regular room (a "true" task takes regular room first): it waits for harvested room.
    inp = decide_input(nodes=[(4, 16), (4, 16), (4, 16)], free=[(0, 0)] * 3, groups=[("q", 1, 1)],
                       intent=[decide.INTENT_TRUE], harvestable=[(0, 0)] * 3, sample_age_s=[45.0, np.inf, np.nan])
    assert holds(inp) == {0: holding.Hold(
        "sample", "no fresh utilization sample from the 2 node(s) that could take it: n0 (45 s old), n1 (none); "
        "harvesting needs one newer than 30 s")}


def test_an_opportunistic_pod_with_fresh_samples_but_no_harvestable_room_waits_for_room() -> None:
    inp = decide_input(nodes=[(4, 16)], free=[(0, 0)], groups=[("q", 1, 1)], intent=[decide.INTENT_TRUE],
                       harvestable=[(0.5, 8)], sample_age_s=[2.0])
    assert holds(inp) == {0: holding.Hold(
        "room", "no node has room for a task: cpu 1 needed, 500m harvestable on n0 (the closest of 1 nodes)")}


@pytest.mark.parametrize(("quota", "free", "reason"), [
    pytest.param(1.0, (4, 16), "quota", id="at-the-quota"),
    pytest.param(3.0, (0.5, 16), "room", id="quota-raised-cluster-full-waits-for-room"),
    pytest.param(3.0, (4, 16), None, id="quota-raised-with-room-released"),
])
def test_the_reason_follows_its_cause(quota: float, free: tuple[float, float], reason: str | None) -> None:
    inp = decide_input(nodes=[(4, 16)], free=[free], groups=[("q", 1, 1)], alloc={"q": (1, 1)}, quota={"q": quota})
    got = holds(inp)
    assert (got[0].reason if got else None) == reason


def test_a_group_partly_placed_is_held_for_the_rest_and_groups_of_one_shape_share_one_answer() -> None:
    inp = decide_input(nodes=[(4, 16)], free=[(2, 16)], groups=[("q", 1, 3), ("q", 1, 5)])
    decision = decide.Decider(StowageSettings()).decide(inp)
    assert len(decision.placements) == 2
    assert set(decision.holds) == {0, 1}
    assert decision.holds[0] == decision.holds[1]


def test_without_explain_the_decision_says_nothing_and_places_the_same() -> None:
    kw = {"nodes": [(4, 16)], "free": [(1, 16)], "groups": [("q", 1, 3)], "quota": {"q": 2.0}}
    quiet = decide.Decider(StowageSettings()).decide(decide_input(**kw, explain=False))
    told = decide.Decider(StowageSettings()).decide(decide_input(**kw))
    assert quiet.holds == {} and told.holds
    assert quiet.placements == told.placements


def test_no_nodes_at_all_is_no_room() -> None:
    inp = decide_input(nodes=[], free=[], groups=[("q", 1, 1)])
    assert holds(inp) == {0: holding.Hold("room", "no node has room: there are no nodes")}
