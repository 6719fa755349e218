"""All-or-nothing groups (``DecideInput.gang``, ``stowage.policy.gang``): a gang starts whole on regular room or not
at all, never on harvested room, and says how many of its tasks fit. Constructed states, the decider run for real."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from stowage.config import StowageSettings
from stowage.policy import decide, gang, holding
from tests.policy.test_decide_holds import GI, decide_input


def _decide(inp: decide.DecideInput) -> decide.Decision:
    return decide.Decider(StowageSettings()).decide(inp)


def test_slots_count_the_tasks_each_node_holds_at_once() -> None:
    avail = np.array([[4.0, 16 * GI], [1.5, 16 * GI], [0.5, 16 * GI]])
    assert gang.slots(np.array([1.0, GI]), avail).tolist() == [4, 1, 0]
    assert gang.fit_count(np.array([1.0, GI]), avail, 10) == 5
    assert gang.fit_count(np.array([1.0, GI]), avail, 3) == 3


def test_place_fills_the_best_aligned_node_first() -> None:
    avail = np.array([[2.0, 16 * GI], [4.0, 16 * GI]])
    assert gang.place(np.array([1.0, GI]), avail, np.array([0.5, 0.9]), 5) == [1, 1, 1, 1, 0]
    assert gang.place(np.array([1.0, GI]), avail, np.array([0.5, 0.9]), 7) is None
    assert gang.place(np.array([1.0, GI]), avail, np.array([0.5, -np.inf]), 3) is None  # a node held elsewhere


def test_a_gang_that_fits_whole_starts_whole() -> None:
    inp = decide_input(nodes=[(4, 16), (4, 16)], free=[(4, 16), (4, 16)], groups=[("q", 1, 6)])
    decision = _decide(replace(inp, gang=np.array([6])))
    assert len(decision.placements) == 6
    assert decision.holds == {}


def test_a_gang_that_does_not_fit_whole_takes_nothing_and_says_how_many_fit() -> None:
    # 6 one-core tasks, 5 cores free: none starts (one at a time, 5 would hold 5 cores and wait for the sixth).
    inp = decide_input(nodes=[(4, 16), (4, 16)], free=[(4, 16), (1, 16)], groups=[("q", 1, 6)])
    decision = _decide(replace(inp, gang=np.array([6])))
    assert decision.placements == []
    assert decision.holds == {0: holding.Hold(
        "gang", "all or nothing: its 6 tasks start together on regular room or not at all, and 5 of them fit in "
                "the free regular room now")}


def test_the_room_a_gang_cannot_use_goes_to_the_work_behind_it() -> None:
    # The gang (job 0, first in FIFO) does not fit whole; the one-task group behind it starts.
    inp = decide_input(nodes=[(4, 16)], free=[(2, 16)], groups=[("q", 1, 3), ("q", 1, 1)])
    decision = _decide(replace(inp, gang=np.array([3, 0])))
    assert [g for g, _, _ in decision.placements] == [1]
    assert decision.holds[0].reason == "gang"


def test_two_gangs_that_each_need_most_of_the_cluster_go_one_after_the_other() -> None:
    # Two gangs of 5 on 8 cores (each 62 %): the first in order starts whole, the second takes none of the rest.
    inp = decide_input(nodes=[(4, 16), (4, 16)], free=[(4, 16), (4, 16)], groups=[("q", 1, 5), ("q", 1, 5)])
    decision = _decide(replace(inp, gang=np.array([5, 5])))
    assert [g for g, _, _ in decision.placements] == [0] * 5
    assert decision.holds[1] == holding.Hold(
        "gang", "all or nothing: its 5 tasks start together on regular room or not at all, and 3 of them fit in "
                "the free regular room now")


def test_a_gang_never_starts_on_harvested_room() -> None:
    # No regular room; harvested room for all three: an opportunistic gang still waits, on regular room.
    inp = decide_input(nodes=[(4, 16)], free=[(0, 16)], groups=[("q", 1, 3)], intent=[decide.INTENT_TRUE],
                       harvestable=[(4, 16)])
    decision = _decide(replace(inp, gang=np.array([3])))
    assert decision.placements == []
    assert decision.holds[0].reason == "gang"


def test_a_gang_within_its_quota_only_as_a_whole() -> None:
    # Quota 2 cores, room for 3: a gang of 3 would go over, so none of it starts.
    inp = decide_input(nodes=[(4, 16)], free=[(4, 16)], groups=[("q", 1, 3)], quota={"q": 2.0})
    decision = _decide(replace(inp, gang=np.array([3])))
    assert decision.placements == []
    assert decision.holds == {0: holding.Hold(
        "quota", "queue 'q' is at its cpu quota: 0/2 in use, its gang of 3 tasks needs 3")}


def test_the_tasks_of_a_group_past_its_gang_go_one_at_a_time() -> None:
    # A gang of 2 in a group of 4 with room for 3: the gang starts whole, one more task beside it.
    inp = decide_input(nodes=[(4, 16)], free=[(3, 16)], groups=[("q", 1, 4)])
    decision = _decide(replace(inp, gang=np.array([2])))
    assert len(decision.placements) == 3
    assert decision.holds[0].reason == "room"


def test_a_gang_with_fewer_tasks_waiting_than_its_size_waits_for_the_rest() -> None:
    # A pod group of 3 with 2 pods created: room for all, none starts.
    inp = decide_input(nodes=[(4, 16)], free=[(4, 16)], groups=[("q", 1, 2)])
    decision = _decide(replace(inp, gang=np.array([3])))
    assert decision.placements == []
    assert decision.holds == {0: holding.Hold(
        "gang", "all or nothing: only 2 of its 3 tasks are there to start; it starts once all 3 are")}
