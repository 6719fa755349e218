"""The dispatcher with fairness over time: each pool's decayed queue usage, carried between decisions and restarts.

Constructed views, no cluster. One node of 4 cores; queue ``a`` has one large job, queue ``b`` a small one, equal
weights, a usage half-life of 10 s. Remaining-work order prefers ``b``'s small job; a queue whose usage (past and
present) is more than 10 % ahead of the other's waits. The usage survives a restart through ``state_dict``
(serialised as the operator's ConfigMap holds it); the time the operator was down counts as its last shares held
(the pods it released ran on); the state changes only when the shares do; the previous release's deficits are
read.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
from stowage.operator.dispatcher import Dispatcher, DispatchView, QueueRecord, RunningPod

from stowage.config import StowageSettings
from stowage.model import Pool
from tests.operator.test_dispatcher import GI, grp, node, released, rv

HALF_LIFE_S = 10.0


def _settings(half_life_s: float = HALF_LIFE_S) -> StowageSettings:
    base = StowageSettings()
    return dataclasses.replace(base, packing=dataclasses.replace(base.packing, queue_usage_half_life_s=half_life_s))


def _view(a_running: int, b_running: int, queues: list[QueueRecord] | None = None) -> DispatchView:
    running = [RunningPod("n1", rv(cpu=1.0, memory=2 * GI), queue=q) for q, k in (("a", a_running), ("b", b_running))
               for _ in range(k)]
    return DispatchView(
        nodes=[node("n1", cpu=4.0, memory=32.0)], running=running,
        queues=queues or [QueueRecord("a"), QueueRecord("b")],
        groups=[grp("a-big", "a", tasks=50, duration=600.0), grp("b-small", "b", tasks=50, duration=5.0)],
    )


def _saved(d: Dispatcher) -> dict[str, Any]:
    """What the operator's ConfigMap holds (``Learning.state_data``), read back; strict JSON (no NaN)."""
    return json.loads(json.dumps(d.state_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False))


def _restarted(state: dict[str, Any], clock: Callable[[], float], half_life_s: float = HALF_LIFE_S) -> Dispatcher:
    d = Dispatcher(_settings(half_life_s), clock=clock)
    d.load_state(state)
    return d


def _usage(d: Dispatcher, now: float, names: tuple[str, ...] = ("a", "b")) -> list[float]:
    return d.decider.queue_usage(Pool.REGULAR, names, now).tolist()


def _a_used_the_node(clock: list[float]) -> Dispatcher:
    """a held the whole node from t = 0 (b had nothing): a's usage is 1, b's 0."""
    d = Dispatcher(_settings(), clock=lambda: clock[0])
    d.decide(_view(4, 0))
    return d


def test_a_queue_that_used_more_waits_though_it_holds_less_now_and_a_restart_keeps_that() -> None:
    # At t = 100, a holds 1 core, b 2, one is free. By what they hold, a is behind and its big job goes; by usage
    # over time (a held the node for 100 s, ten half-lives) a is ahead and b's small job goes.
    clock = [0.0]
    uninterrupted = _a_used_the_node(clock)
    state = _saved(uninterrupted)
    assert state["version"] == 5 and state["usage"]["regular"] == {
        "queues": ["a", "b"], "usage": [1.0, 0.0], "dominant": [1.0, 0.0], "at": 0.0}
    clock[0] = 100.0
    restarted = _restarted(state, lambda: clock[0])
    forgetful = Dispatcher(_settings(0.0), clock=lambda: clock[0])  # no memory: shares at every slot
    assert released(uninterrupted.decide(_view(1, 2))) == {"b-small": 1}
    assert released(restarted.decide(_view(1, 2))) == {"b-small": 1}
    assert released(forgetful.decide(_view(1, 2))) == {"a-big": 1}


def test_the_usage_round_trips_bit_for_bit_and_follows_the_queues_by_name() -> None:
    clock = [0.0]
    d = _a_used_the_node(clock)
    clock[0] = 3.0
    d.decide(_view(1, 3))
    state = _saved(d)
    again = _restarted(state, lambda: clock[0])
    assert again.decider.usage == d.decider.usage  # every float the same bits: == on the frozen records
    assert again.state_dict() == d.state_dict()
    clock[0] = 5.0  # listed in another order, with a new queue: by name, the new one at 0
    names = ("new", "b", "a")
    assert _usage(again, 5.0, names) == _usage(d, 5.0, names) == [0.0, *reversed(_usage(d, 5.0))]


def test_a_steady_cluster_leaves_the_state_as_it_was_so_nothing_is_written() -> None:
    clock = [0.0]
    d = _a_used_the_node(clock)
    before = _saved(d)
    for t in (30.0, 60.0, 90.0):  # the node stays full with a's tasks: the shares do not change
        clock[0] = t
        d.decide(_view(4, 0))
        assert _saved(d) == before
    clock[0] = 120.0
    d.decide(_view(3, 1))  # they change: a new state, at the time they changed
    assert _saved(d)["usage"]["regular"]["at"] == 120.0


def test_the_time_the_operator_was_down_counts_as_its_last_shares_held_and_a_restart_writes_nothing_new() -> None:
    clock = [0.0]
    d = _a_used_the_node(clock)
    clock[0] = 5.0
    d.decide(_view(0, 4))  # from t = 5 b holds the node; its pods run on while the operator is down
    state = _saved(d)
    clock[0] = 3605.0  # an hour later
    restarted = _restarted(state, lambda: clock[0])
    restarted.decide(_view(0, 4))
    assert _usage(restarted, 3605.0) == _usage(d, 3605.0) == pytest.approx([0.0, 1.0])
    assert _saved(restarted) == state, "the same shares: nothing new to write"


def test_queues_deleted_while_down_drop_out_and_new_ones_start_at_zero() -> None:
    clock = [0.0]
    restarted = _restarted(_saved(_a_used_the_node(clock)), lambda: clock[0])
    clock[0] = 4.0
    queues = [QueueRecord("new"), QueueRecord("a")]  # b was deleted, "new" added
    view = DispatchView(nodes=[node("n1", cpu=4.0, memory=32.0)],
                        running=[RunningPod("n1", rv(cpu=1.0, memory=2 * GI), queue="a")] * 4, queues=queues,
                        groups=[grp("a-big", "a", tasks=50, duration=600.0),
                                grp("new-small", "new", tasks=50, duration=5.0)])
    restarted.decide(view)
    names, usage = restarted.decider.usage[Pool.REGULAR]
    assert names == ("new", "a") and usage.usage == (0.0, 1.0)


def test_the_previous_releases_deficits_are_read_as_usage() -> None:
    # Version 4 saved queue deficits: the shares they held since ``at`` become the usage at ``at``.
    clock = [10.0]
    state = _saved(_a_used_the_node([0.0]))
    del state["usage"]
    state |= {"version": 4, "deficits": {"regular": {"queues": ["a", "b"], "deficit": [-1.5, 1.5],
                                                     "dominant": [0.75, None], "active": [True, False], "at": 7.0}}}
    d = _restarted(state, lambda: clock[0])
    assert _usage(d, 7.0) == [0.75, 0.0] and _usage(d, 17.0) == [0.75, 0.0]  # the shares it held since 7 s
    assert d.state_dict()["version"] == 5 and d.decide(_view(3, 0))
    assert _saved(d)["usage"]["regular"]["usage"] == [0.75, 0.0]


def test_a_version_2_state_loads_with_no_usage_and_a_half_life_of_0_drops_it() -> None:
    clock = [0.0]
    state = _saved(_a_used_the_node(clock))
    assert _restarted(state, lambda: clock[0], half_life_s=0.0).state_dict()["usage"] == {}
    old = {k: v for k, v in state.items() if k not in ("usage", "priors", "history")} | {"version": 2}
    assert _restarted(old, lambda: clock[0]).decider.usage == {}


def _break(state: dict[str, Any], edit: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    edit(state)
    return state


@pytest.mark.parametrize(("edit", "field"), [
    pytest.param(lambda s: s.update(usage=[]), "usage", id="not-a-mapping"),
    pytest.param(lambda s: s["usage"].update(spare=s["usage"]["regular"]), "usage.spare", id="no-such-pool"),
    pytest.param(lambda s: s["usage"]["regular"].update(queues=["a", "a"]), "usage.regular.queues",
                 id="twice-the-same-queue"),
    pytest.param(lambda s: s["usage"]["regular"]["usage"].pop(), "usage.regular.usage", id="short"),
    pytest.param(lambda s: s["usage"]["regular"].update(dominant=["x", 1.0]), "usage.regular.dominant",
                 id="not-a-number"),
    pytest.param(lambda s: s["usage"]["regular"].pop("at"), "usage.regular.at", id="no-time"),
    pytest.param(lambda s: s["usage"]["regular"].update(at=True), "usage.regular.at", id="time-a-bool"),
    pytest.param(lambda s: s.update(version=4, deficits={"regular": {"queues": ["a"]}}), "deficits.regular.deficit",
                 id="old-deficits"),
])
def test_malformed_usage_is_refused_naming_the_field_and_changes_nothing(edit: Callable, field: str) -> None:
    clock = [0.0]
    state = _break(_saved(_a_used_the_node(clock)), edit)
    d = Dispatcher(_settings(), clock=lambda: clock[0])
    d.decide(_view(2, 2))
    before = d.state_dict()
    with pytest.raises(ValueError, match=rf"^{field.replace('.', '[.]')}:"):
        d.load_state(state)
    assert d.state_dict() == before
