"""The extender's ``A_opp`` and the node monitor's contention threshold stand on the same capacity: allocatable.

A real node reserves part of its capacity for the system (kube-reserved, system-reserved, eviction
threshold); pods, and the kubepods cgroup the node monitor measures, get only ``status.allocatable``.
With capacity 16Gi, allocatable 14Gi and 13.5Gi used, the node monitor is in contention
(0.95 × 14Gi = 13.3Gi): the extender must not still be admitting opportunistic memory there.
"""

from __future__ import annotations

from stowage.node_monitor.capacity import capacity_array, node_capacity

from stowage.config import StowageSettings
from stowage.resources import MEMORY

from .objects import GI, extender_args, node, opportunistic_pod


def test_the_monitor_and_the_extender_agree_that_a_reserved_node_is_full(make_world) -> None:
    reserved = node("n1", cpu="16", memory="16Gi", allocatable_cpu="15", allocatable_memory="14Gi")
    used = 13.5 * GI
    settings = StowageSettings()

    # the node monitor: capacity from the Node object, threshold T_preempt × allocatable
    capacity = capacity_array((MEMORY,), node_capacity(reserved))
    threshold = settings.contention.t_preempt.array((MEMORY,)) * capacity
    assert capacity[0] == 14 * GI
    assert used > threshold[0]  # sustained, this is contention

    # the extender: A_opp = T_alloc × allocatable − U ≤ 0, so nothing is harvestable
    world = make_world([reserved], samples={"n1": {"usage": {"cpu": 2.0, "memory": used}}}, settings=settings)
    body = world.post("filter", extender_args(opportunistic_pod(memory="800Mi", cpu="1"), [reserved], cache=True))
    answer = body.json()
    assert answer["NodeNames"] == []
    assert "n1" in answer["FailedNodes"]


def test_harvestable_capacity_is_measured_against_allocatable(make_world) -> None:
    reserved = node("n1", cpu="16", memory="16Gi", allocatable_cpu="15", allocatable_memory="14Gi")
    world = make_world([reserved], samples={"n1": {"usage": {"cpu": 2.0, "memory": 4 * GI}}})
    # 0.9 × 14Gi − 4Gi = 8.6Gi: a pod of 8.5Gi fits, one of 8.7Gi does not (with capacity it would: 10.4Gi)
    fits = world.post("filter", extender_args(opportunistic_pod(memory="8.5Gi"), [reserved], cache=True)).json()
    over = world.post("filter", extender_args(opportunistic_pod("etl-1", memory="8.7Gi"), [reserved], cache=True))
    assert fits["NodeNames"] == ["n1"]
    assert over.json()["NodeNames"] == []
