"""The dispatcher with fairness over time (``packing.queue_share_deficit_s``): the deficits carried between passes.

Constructed views, no cluster. One node of 4 cores; queue ``a`` has one large job, queue ``b`` a small one, equal
weights. The remaining-work score prefers ``b``'s small job; with a deficit threshold every queue competes until
one is owed more than it, then that queue goes first.
"""

from __future__ import annotations

import dataclasses

from stowage.operator.dispatcher import Dispatcher, DispatchView, QueueRecord, RunningPod

from stowage.config import StowageSettings
from tests.operator.test_dispatcher import GI, grp, node, released, rv


def _settings(deficit_s: float) -> StowageSettings:
    base = StowageSettings()
    return dataclasses.replace(base, packing=dataclasses.replace(base.packing, queue_share_deficit_s=deficit_s))


def _view(b_running: int, queues: list[QueueRecord] | None = None) -> DispatchView:
    running = [RunningPod("n1", rv(cpu=1.0, memory=2 * GI), queue="b") for _ in range(b_running)]
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
