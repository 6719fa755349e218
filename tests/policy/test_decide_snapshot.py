"""``decide`` works from the snapshot it is given (issue #34): the harvestable room and the classifier's features
are data in ``DecideInput``, built by the adapters only when some group may harvest (``decide.harvest_candidates``,
``needs_harvestable``, ``needs_features``), and the decision is the same whether a room it does not need is given
or not.
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


def _arrays(intent: list[int], releasable: list[int], queue: list[int], allow: list[bool]) -> tuple[np.ndarray, ...]:
    return (np.array(intent, dtype=np.int64), np.array(releasable, dtype=np.int64), np.array(queue, dtype=np.int64),
            np.array(allow, dtype=bool))


def test_the_shared_predicate_marks_the_groups_that_may_harvest() -> None:
    # groups:            0 true  1 auto  2 false  3 converted  4 true, none left  5 true, Deny queue  6 auto
    args = _arrays([T, A, F, C, T, T, A], [1, 2, 3, 1, 0, 1, 1], [0, 0, 0, 0, 0, 1, 0], [True, False])
    assert decide.harvest_candidates(*args).tolist() == [True, True, False, True, False, False, True]
    assert decide.needs_features(*args).tolist() == [False, True, False, False, False, False, True]
    assert decide.needs_harvestable(*args)


@pytest.mark.parametrize(("intent", "releasable", "queue", "explain", "needed"), [
    pytest.param([F, F], [2, 1], [0, 0], True, False, id="only-false-groups"),
    pytest.param([T, A], [0, 0], [0, 0], True, False, id="nothing-releasable"),
    pytest.param([A, T], [1, 1], [1, 1], False, False, id="deny-queue"),
    # A "true" group's holds are told in the harvested pool, whatever its queue allows: explain reads the room.
    pytest.param([A, T], [1, 1], [1, 1], True, True, id="deny-queue-explained"),
    pytest.param([A], [1], [1], True, False, id="auto-in-a-deny-queue-waits-in-the-regular-pool"),
    pytest.param([F, C], [1, 1], [0, 0], False, True, id="converted"),
    pytest.param([], [], [], True, False, id="no-groups"),
])
def test_needs_harvestable(intent: list[int], releasable: list[int], queue: list[int], explain: bool,
                           needed: bool) -> None:
    args = _arrays(intent, releasable, queue, [True, False])
    assert decide.needs_harvestable(*args, explain=explain) is needed
    if not needed:
        assert not decide.harvest_candidates(*args).any() and not decide.needs_features(*args).any()


def _decided(inp: decide.DecideInput, **kw: bool) -> tuple[list[tuple[int, int, Pool]], dict, list[int]]:
    d = decide.Decider(StowageSettings(), **kw).decide(inp)
    return d.placements, dict(d.holds), d.promoted.tolist()


@pytest.mark.parametrize("explain", [False, True])
def test_a_decision_with_no_group_that_may_harvest_does_not_need_the_room(explain: bool) -> None:
    # "false" groups (regular room for one of the three tasks), a "true" group with nothing releasable: the room
    # is not needed, and None (no room computed) decides exactly as a room would.
    inp = decide_input(nodes=[(4, 16), (4, 16)], free=[(1, 16), (0, 0)],
                       groups=[("q", 1, 2), ("q", 1, 1), ("q", 1, 0)], intent=[F, F, T],
                       harvestable=[(4, 16), (4, 16)], explain=explain)
    assert not decide.needs_harvestable(inp.intent, inp.releasable, inp.group_queue, inp.queue_opportunistic,
                                        explain=explain)
    with_room = _decided(inp)
    assert with_room == _decided(replace(inp, harvestable=None))
    assert len(with_room[0]) == 1  # one task placed
    assert bool(with_room[1]) is explain  # the group left waiting is told in the regular pool


def test_the_room_matters_only_when_a_group_is_still_a_candidate_after_the_regular_pass() -> None:
    # A "true" task that regular room holds: a candidate before the decision, none after its regular pass, so the
    # room does not change the decision.
    inp = decide_input(nodes=[(4, 16)], free=[(4, 16)], groups=[("q", 1, 1)], intent=[T], harvestable=[(4, 16)],
                       explain=False)
    placements, _, _ = _decided(inp)
    assert [pool for _, _, pool in placements] == [Pool.REGULAR]
    assert _decided(replace(inp, harvestable=np.zeros((1, 2)))) == _decided(inp)
    # No regular room: the opportunistic pass harvests on the room, and none leaves the task waiting.
    full = replace(inp, regular_free=np.zeros((1, 2)))
    placements, _, _ = _decided(full)
    assert [pool for _, _, pool in placements] == [Pool.OPPORTUNISTIC]
    assert _decided(replace(full, harvestable=np.zeros((1, 2))))[0] == []
    # Explained, a waiting "true" group's hold is told on the room.
    held = replace(full, harvestable=np.array([[0.5, 16 * GI]]), explain=True)
    placements, holds, _ = _decided(held)
    assert placements == [] and holds[0].reason == "room"


def test_the_caller_s_room_is_not_changed() -> None:
    inp = decide_input(nodes=[(4, 16)], free=[(0, 0)], groups=[("q", 1, 3)], intent=[T], harvestable=[(4, 16)])
    room = inp.harvestable
    assert room is not None
    before = room.copy()
    assert len(_decided(inp)[0]) == 3
    assert np.array_equal(room, before)


def test_features_are_read_only_for_the_groups_needs_features_marks() -> None:
    # An "auto" group that fits the harvested room is asked about (a classifier that has seen nothing calls it
    # long: it waits); the "true" and "false" groups' entries are None and never read.
    inp = decide_input(nodes=[(4, 16)], free=[(0, 0)], groups=[("q", 1, 1), ("q", 1, 1), ("q", 1, 1)],
                       intent=[A, T, F], harvestable=[(4, 16)], explain=False)
    ask = decide.needs_features(inp.intent, inp.releasable, inp.group_queue, inp.queue_opportunistic)
    assert ask.tolist() == [True, False, False]
    features = tuple({"framework": "q", "app": "x", "stage": "map"} if a else None for a in ask.tolist())
    placements, _, _ = _decided(replace(inp, features=features))
    assert [(g, pool) for g, _, pool in placements] == [(1, Pool.OPPORTUNISTIC)]
    # Without features (None) the classifier is not asked: the "auto" group harvests as well.
    placements, _, _ = _decided(replace(inp, features=None))
    assert sorted(g for g, _, _ in placements) == [0, 1]
    # A missing entry for a group that is asked about is the caller's mistake, said as such.
    with pytest.raises(ValueError, match=r"features\[0\] is None"):
        decide.Decider(StowageSettings()).decide(replace(inp, features=(None, None, None)))


def test_passing_none_where_the_predicate_says_so_never_changes_a_decision() -> None:
    """Random small snapshots: wherever ``needs_harvestable`` is False, None decides as the room does."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        g = int(rng.integers(1, 5))
        n = int(rng.integers(1, 3))
        explain = bool(rng.integers(2))
        inp = decide_input(
            nodes=[(4, 16)] * n, free=[(float(rng.choice([0, 1, 4])), 16) for _ in range(n)],
            groups=[(str(rng.choice(["a", "b"])), float(rng.choice([0.5, 1, 2])), int(rng.integers(0, 3)))
                    for _ in range(g)], queues=("a", "b"),
            intent=rng.choice([F, A, T, C], size=g).tolist(),
            harvestable=[(float(rng.choice([0, 1, 4])), 16) for _ in range(n)], explain=explain)
        inp = replace(inp, queue_opportunistic=np.array([True, bool(rng.integers(2))]))
        needed = decide.needs_harvestable(inp.intent, inp.releasable, inp.group_queue, inp.queue_opportunistic,
                                          explain=explain)
        got = _decided(inp, use_classifier=False)
        if not needed:
            assert got == _decided(replace(inp, harvestable=None), use_classifier=False)
