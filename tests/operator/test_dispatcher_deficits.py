"""The dispatcher with fairness over time (``packing.queue_share_deficit_s``): the deficits carried between passes.

Constructed views, no cluster. One node of 4 cores; queue ``a`` has one large job, queue ``b`` a small one, equal
weights. The remaining-work score prefers ``b``'s small job; with a deficit threshold every queue competes until
one is owed more than it, then that queue goes first. The deficits survive a restart through ``state_dict``
(serialised as the operator's ConfigMap holds them); the time the operator was down accrues nothing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
from stowage.operator.dispatcher import Dispatcher, DispatchView, QueueRecord, RunningPod

from stowage.config import StowageSettings
from tests.operator.test_dispatcher import GI, grp, node, released, rv


def _settings(deficit_s: float) -> StowageSettings:
    base = StowageSettings()
    return dataclasses.replace(base, packing=dataclasses.replace(base.packing, queue_share_deficit_s=deficit_s))


def _view(b_running: int, queues: list[QueueRecord] | None = None, a_running: int = 0) -> DispatchView:
    running = [RunningPod("n1", rv(cpu=1.0, memory=2 * GI), queue=q) for q, k in (("a", a_running), ("b", b_running))
               for _ in range(k)]
    return DispatchView(
        nodes=[node("n1", cpu=4.0, memory=32.0)], running=running,
        queues=queues or [QueueRecord("a"), QueueRecord("b")],
        groups=[grp("a-big", "a", tasks=50, duration=600.0), grp("b-small", "b", tasks=50, duration=5.0)],
    )


def test_until_a_queue_is_owed_more_than_the_threshold_every_queue_competes_then_it_goes_first() -> None:
    clock = [0.0]
    d = Dispatcher(_settings(1.0), clock=lambda: clock[0])
    assert released(d.decide(_view(0))) == {"b-small": 4}  # nothing owed yet: the small job takes the node
    clock[0] = 1.0  # b held the whole node for 1 s while a waited: a is owed 0.5 pool-seconds
    assert released(d.decide(_view(3))) == {"b-small": 1}
    clock[0] = 3.0  # 2 s more: owed 1.5 > 1
    assert released(d.decide(_view(3))) == {"a-big": 1}


def test_off_by_default_strict_drf_shares_the_node() -> None:
    got = released(Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(_view(0)))
    assert got == {"a-big": 2, "b-small": 2}


def test_the_deficits_follow_the_queues_by_name() -> None:
    clock = [0.0]
    d = Dispatcher(_settings(1.0), clock=lambda: clock[0])
    d.decide(_view(0))
    clock[0] = 3.0  # a owed 1.5 (b held the node); the queues now come listed in another order, with a new one
    assert released(d.decide(_view(3, [QueueRecord("new"), QueueRecord("b"), QueueRecord("a")]))) == {"a-big": 1}


# --- across a restart ----------------------------------------------------------------------------


def _saved(d: Dispatcher) -> dict[str, Any]:
    """What the operator's ConfigMap holds (``runtime._state_data``), read back; strict JSON (no NaN)."""
    return json.loads(json.dumps(d.state_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False))


def _restarted(state: dict[str, Any], clock: Callable[[], float], deficit_s: float = 1.0) -> Dispatcher:
    d = Dispatcher(_settings(deficit_s), clock=clock)
    d.load_state(state)
    return d


def _a_owed(clock: list[float]) -> Dispatcher:
    """b held the node 3 s while a waited: a is owed 1.5 > 1 and was given the one free core at t = 3."""
    d = Dispatcher(_settings(1.0), clock=lambda: clock[0])
    d.decide(_view(0))
    clock[0] = 3.0
    assert released(d.decide(_view(3))) == {"a-big": 1}
    return d


def test_the_deficits_round_trip_bit_for_bit() -> None:
    clock = [0.0]
    d = _a_owed(clock)
    state = _saved(d)
    assert state["version"] == 4
    assert state["deficits"]["regular"]["queues"] == ["a", "b"]
    assert state["deficits"]["regular"]["deficit"] == [1.5, -1.5] and state["deficits"]["regular"]["at"] == 3.0
    again = _restarted(state, lambda: clock[0])
    assert again.decider.deficits == d.decider.deficits  # every float the same bits: == on the frozen records
    assert again.state_dict() == d.state_dict()


def test_a_queue_that_took_no_part_round_trips_as_null() -> None:
    clock = [0.0]
    d = Dispatcher(_settings(1.0), clock=lambda: clock[0])
    d.decide(_view(0, [QueueRecord("a"), QueueRecord("b"), QueueRecord("zero", weight=0.0)]))
    state = _saved(d)
    assert state["deficits"]["regular"]["active"] == [True, True, False]
    d2 = _restarted(state, lambda: clock[0])
    assert d2.state_dict() == d.state_dict()


def test_after_a_restart_the_owed_queue_still_goes_first_as_without_one() -> None:
    clock = [0.0]
    uninterrupted = _a_owed(clock)
    state = _saved(uninterrupted)
    restarted = _restarted(state, lambda: clock[0])
    forgetful = Dispatcher(_settings(1.0), clock=lambda: clock[0])  # what version 2 did: nothing carried
    clock[0] = 4.0  # one b task finished: one core free, a holds one
    view = _view(2, a_running=1)
    assert released(uninterrupted.decide(view)) == {"a-big": 1}  # owed 1.75
    assert released(restarted.decide(view)) == {"a-big": 1}  # owed 1.5: the deficit carried over
    assert released(forgetful.decide(view)) == {"b-small": 1}  # owed nothing: the small job wins


def test_the_time_the_operator_was_down_accrues_nothing() -> None:
    clock = [0.0]
    d = Dispatcher(_settings(1.0), clock=lambda: clock[0])
    d.decide(_view(0))
    clock[0] = 1.0
    assert released(d.decide(_view(3))) == {"b-small": 1}  # a owed 0.5 < 1: no queue goes first
    state = _saved(d)
    clock[0] = 3601.0  # an hour later; b's four tasks still hold the node as before the restart
    restarted = _restarted(state, lambda: clock[0])
    assert released(restarted.decide(_view(3))) == {"b-small": 1}, "a is still owed 0.5, not 0.5 + 1800"
    assert restarted.decider.deficits["regular"][1].deficit == (0.5, -0.5)
    assert restarted.decider.deficits["regular"][1].at == 3601.0, "the first pass is the new reference time"
    assert released(d.decide(_view(3))) == {"a-big": 1}, "without the restart the hour counts"
    clock[0] = 3603.0  # after the first pass time counts again: 2 s more with b holding the node, a owed 1.5
    assert released(restarted.decide(_view(3))) == {"a-big": 1}


def test_a_restart_with_nothing_to_release_changes_no_state() -> None:
    # The reference time moves at the first pass, not at the first decide: a quiet operator writes nothing new.
    clock = [0.0]
    state = _saved(_a_owed(clock))
    restarted = _restarted(state, lambda: clock[0])
    clock[0] = 100.0
    assert restarted.decide(DispatchView(nodes=[node("n1", cpu=4.0, memory=32.0)], running=[],
                                         queues=[QueueRecord("a"), QueueRecord("b")], groups=[])) == []
    assert _saved(restarted)["deficits"] == state["deficits"]


def test_queues_deleted_while_down_drop_out_and_new_ones_start_at_zero() -> None:
    clock = [0.0]
    state = _saved(_a_owed(clock))
    restarted = _restarted(state, lambda: clock[0])
    clock[0] = 4.0
    queues = [QueueRecord("new"), QueueRecord("a")]  # b was deleted, "new" added
    view = DispatchView(nodes=[node("n1", cpu=4.0, memory=32.0)],
                        running=[RunningPod("n1", rv(cpu=1.0, memory=2 * GI), queue="a")], queues=queues,
                        groups=[grp("a-big", "a", tasks=50, duration=600.0),
                                grp("new-small", "new", tasks=50, duration=5.0)])
    restarted.decide(view)
    names, deficits = restarted.decider.deficits["regular"]
    assert names == ("new", "a")
    # At the pass (before its shares count) new was at 0 and a at 1.5; the pass leaves them as its shares say.
    assert deficits.active == (True, True) and deficits.at == 4.0 and deficits.deficit == (0.0, 1.5)


def test_a_version_2_state_loads_with_no_deficits() -> None:
    clock = [0.0]
    state = _saved(_a_owed(clock))
    state["version"] = 2
    del state["deficits"]
    restarted = _restarted(state, lambda: clock[0])
    assert restarted.decider.deficits == {} and restarted.state_dict()["version"] == 4
    clock[0] = 4.0
    assert released(restarted.decide(_view(2, a_running=1))) == {"b-small": 1}


def test_with_the_threshold_off_the_saved_deficits_are_dropped() -> None:
    clock = [0.0]
    state = _saved(_a_owed(clock))
    assert _restarted(state, lambda: clock[0], deficit_s=0.0).state_dict()["deficits"] == {}


def _break(state: dict[str, Any], edit: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    edit(state)
    return state


@pytest.mark.parametrize(("edit", "field"), [
    pytest.param(lambda s: s.pop("deficits"), "deficits", id="missing"),
    pytest.param(lambda s: s.update(deficits=[]), "deficits", id="not-a-mapping"),
    pytest.param(lambda s: s["deficits"].update(spare=s["deficits"]["regular"]), "deficits.spare", id="no-such-pool"),
    pytest.param(lambda s: s["deficits"]["regular"].update(queues=["a", "a"]), "deficits.regular.queues",
                 id="twice-the-same-queue"),
    pytest.param(lambda s: s["deficits"]["regular"]["deficit"].pop(), "deficits.regular.deficit", id="short"),
    pytest.param(lambda s: s["deficits"]["regular"].update(dominant=["x", 1.0]), "deficits.regular.dominant",
                 id="not-a-number"),
    pytest.param(lambda s: s["deficits"]["regular"].update(active=[1, 1]), "deficits.regular.active",
                 id="not-a-bool"),
    pytest.param(lambda s: s["deficits"]["regular"].pop("at"), "deficits.regular.at", id="no-time"),
    pytest.param(lambda s: s["deficits"]["regular"].update(at=True), "deficits.regular.at", id="time-a-bool"),
])
def test_malformed_deficits_are_refused_naming_the_field_and_change_nothing(edit: Callable, field: str) -> None:
    clock = [0.0]
    state = _break(_saved(_a_owed(clock)), edit)
    d = Dispatcher(_settings(1.0), clock=lambda: clock[0])
    d.decide(_view(0))
    before = d.state_dict()
    with pytest.raises(ValueError, match=rf"^{field.replace('.', '[.]')}:"):
        d.load_state(state)
    assert d.state_dict() == before
