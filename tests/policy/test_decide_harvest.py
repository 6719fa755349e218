"""Regular room first and same-node promotion, decided in the pure core (UBIS Alg. 1 l.6–29, §IV-D).

Constructed states on one or two nodes, the decider run for real: which pool each intent's task gets, and which
running opportunistic pods a decision promotes before it places anything.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from stowage.config import StowageSettings
from stowage.model import Pool
from stowage.policy import decide
from tests.policy.test_decide_holds import GI, decide_input

T, A, F, C = decide.INTENT_TRUE, decide.INTENT_AUTO, decide.INTENT_FALSE, decide.INTENT_CONVERTED
REG, OPP = Pool.REGULAR, Pool.OPPORTUNISTIC


def placed(inp: decide.DecideInput) -> list[tuple[int, int, Pool]]:
    # No classifier: an "auto" task that fits harvested room may take it (the classifier's gate is its own test).
    return decide.Decider(StowageSettings(), use_classifier=False).decide(inp).placements


# One 4-cpu node; one 1-cpu task of the given intent; regular room and harvested room (cpu) as given.
POOL_CASES = [
    pytest.param(T, 4, 4, [REG], id="true-takes-regular-room-first"),
    pytest.param(A, 4, 4, [REG], id="auto-takes-regular-room-first"),
    pytest.param(F, 4, 4, [REG], id="false-is-regular"),
    pytest.param(T, 0, 4, [OPP], id="true-harvests-when-no-regular-room-holds-it"),
    pytest.param(A, 0.5, 4, [OPP], id="auto-harvests-when-no-regular-room-holds-it"),
    pytest.param(F, 0, 4, [], id="false-never-harvests"),
    pytest.param(T, 0, 0.5, [], id="true-waits-when-neither-holds-it"),
    pytest.param(C, 4, 4, [OPP], id="a-converted-plain-pod-takes-harvested-room-only"),
    pytest.param(C, 4, 0.5, [], id="a-converted-plain-pod-waits-for-harvested-room"),
]


@pytest.mark.parametrize(("intent", "regular", "harvested", "pools"), POOL_CASES)
def test_every_intent_takes_regular_room_first(intent: int, regular: float, harvested: float,
                                               pools: list[Pool]) -> None:
    inp = decide_input(nodes=[(4, 16)], free=[(regular, 16)], groups=[("q", 1, 1)], intent=[intent],
                       harvestable=[(harvested, 16)], explain=False)
    assert [pool for _, _, pool in placed(inp)] == pools


def test_regular_room_is_handed_out_before_harvested_room_whatever_the_order_of_the_groups() -> None:
    # Two "true" tasks and one "false" one; 2 cpus of regular room: the first two in order get it, the third
    # harvests (it may) or waits (it may not).
    inp = decide_input(nodes=[(4, 16)], free=[(2, 16)], groups=[("q", 1, 1), ("q", 1, 1), ("q", 1, 1)],
                       intent=[T, T, F], harvestable=[(4, 16)], explain=False)
    got = sorted((g, pool) for g, _, pool in placed(inp))
    assert got == [(0, REG), (1, REG)]  # "false" (group 2) waits: no regular room left, and it never harvests
    inp = replace(inp, intent=np.array([F, T, T]))
    got = sorted((g, pool) for g, _, pool in placed(inp))
    assert got == [(0, REG), (1, REG), (2, OPP)]


def promotable(*rows: tuple[float, int, int]) -> decide.Promotable:
    """Running opportunistic pods: (cpu, node, queue) of 1 GiB each."""
    return decide.Promotable(np.array([(c, GI) for c, _, _ in rows], dtype=np.float64).reshape(-1, 2),
                             np.array([n for _, n, _ in rows], dtype=np.int64),
                             np.array([q for _, _, q in rows], dtype=np.int64))


def test_a_decision_promotes_before_it_places_anything_new() -> None:
    # Node n0 has 2 cpus of regular room; an opportunistic pod of 2 cpus runs there. A waiting regular task of
    # 1 cpu would fit, but promotion comes first (Alg. 1 l.6–8 before l.11): the pod is promoted, the room is
    # gone, the task waits. On n1 the running pod does not fit: it stays opportunistic.
    inp = decide_input(nodes=[(4, 16), (4, 16)], free=[(2, 16), (0.5, 16)], groups=[("q", 1, 1)],
                       intent=[F], harvestable=[(0, 0), (0, 0)], explain=False)
    alloc = np.array(inp.queue_alloc)
    alloc[1, 0] = (3.0, 2 * GI)  # what the two running opportunistic pods hold
    inp = replace(inp, queue_alloc=alloc, promotable=promotable((2.0, 0, 0), (1.0, 1, 0)))
    d = decide.Decider(StowageSettings())
    decision = d.decide(inp)
    assert decision.promoted.tolist() == [0]
    assert decision.placements == []
    # Without promotion the same room goes to the waiting task.
    assert [(g, n, pool) for g, n, pool in decide.Decider(StowageSettings()).decide(
        replace(inp, promotable=None)).placements] == [(0, 0, REG)]


def test_promotion_respects_the_queues_regular_quota_and_is_off_without_promotable_pods() -> None:
    inp = decide_input(nodes=[(4, 16)], free=[(4, 16)], groups=[("q", 1, 0)], intent=[F], harvestable=[(0, 0)],
                       quota={"q": 1.0}, explain=False)
    inp = replace(inp, promotable=promotable((2.0, 0, 0)))
    assert decide.Decider(StowageSettings()).decide(inp).promoted.tolist() == []  # 2 cpus > quota 1
    inp = replace(inp, queue_quota=None)
    assert decide.Decider(StowageSettings()).decide(inp).promoted.tolist() == [0]
    assert decide.Decider(StowageSettings()).decide(replace(inp, promotable=None)).promoted.tolist() == []
