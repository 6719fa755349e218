"""The dispatcher's decisions on constructed states (no cluster): DRF, job order, barrier, harvesting, guard.

Every state is a ``DispatchView`` built by hand; the assertions are about which groups get released, how
many, as which class and where — the outcome the operator acts on.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stowage.operator.dispatcher import (
    Dispatcher,
    DispatchView,
    NodeRecord,
    PendingGroup,
    QueueRecord,
    Release,
    RunningPod,
)

from stowage.config import StowageSettings
from stowage.labels import Opportunistic, PodClass
from stowage.model import JobOrder
from stowage.policy import estimates, fairness, harvest, tolerances
from stowage.resources import ResourceVector
from stowage.sim import presets
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.workload import JobSpec, NodeSpec, QueueSpec, TaskGroup, Workload

GI = 2.0**30


def rv(**amounts: float) -> ResourceVector:
    return ResourceVector(amounts)


def node(name: str, cpu: float = 8.0, memory: float = 32.0, *, usage: ResourceVector | None = None,
         harvest_: bool = True) -> NodeRecord:
    return NodeRecord(name, rv(cpu=cpu, memory=memory * GI), harvest_, usage)


def grp(key: str, queue: str = "q", *, cpu: float = 1.0, memory: float = 2.0, tasks: int = 1,
        intent: Opportunistic = Opportunistic.FALSE, arrival: float = 0.0, duration: float = 60.0,
        finished: float = 0.0, job: str | None = None, remaining: int | None = None, **kw) -> PendingGroup:
    return PendingGroup(key=key, queue=queue, demand=rv(cpu=cpu, memory=memory * GI), releasable=tasks,
                        job=job if job is not None else key, group="main", intent=intent, arrival_s=arrival,
                        expected_duration_s=duration, remaining_tasks=tasks if remaining is None else remaining,
                        finished_fraction=finished, **kw)


def settings_with(**packing: float) -> StowageSettings:
    base = StowageSettings()
    return dataclasses.replace(base, packing=dataclasses.replace(base.packing, **packing))


def released(releases: Sequence[Release]) -> Counter[str]:
    out: Counter[str] = Counter()
    for r in releases:
        out[r.group_key] += r.count
    return out


def order(releases: Sequence[Release]) -> list[str]:
    return [r.group_key for r in releases]


# --- DRF and the fairness knob -------------------------------------------------------------------


def test_the_one_free_slot_goes_to_the_queue_furthest_below_its_fair_share() -> None:
    # Queue a already runs 6 of the 8 cores; queue b nothing. One 2-core slot is left.
    view = DispatchView(
        nodes=[node("n1")],
        running=[RunningPod("n1", rv(cpu=6.0, memory=6 * GI), queue="a")],
        queues=[QueueRecord("a"), QueueRecord("b")],
        groups=[grp("a-job", "a", cpu=2.0, memory=2.0), grp("b-job", "b", cpu=1.0, memory=1.0)],
    )
    strict = Dispatcher(settings_with(fairness_knob=0.9), clock=lambda: 100.0)
    assert order(strict.decide(view))[0] == "b-job"
    # f = 0: every queue competes and the better-aligned task (a's, 2 cores into 2 free) goes first.
    efficient = Dispatcher(settings_with(fairness_knob=0.0, remaining_work_weight=0.0), clock=lambda: 100.0)
    assert order(efficient.decide(view))[0] == "a-job"


@pytest.mark.parametrize(("weights", "expected"), [pytest.param((1.0, 1.0), (5, 5), id="equal-weights-half-each"),
                                                   pytest.param((2.0, 1.0), (7, 3), id="weights-2-1")])
def test_strict_drf_shares_a_burst_by_weight(weights: tuple[float, float], expected: tuple[int, int]) -> None:
    # Ten 1-core slots, plenty of identical work in both queues.
    view = DispatchView(
        nodes=[node("n1", cpu=10.0, memory=100.0)], running=[],
        queues=[QueueRecord("a", weight=weights[0]), QueueRecord("b", weight=weights[1])],
        groups=[grp("a-job", "a", tasks=20), grp("b-job", "b", tasks=20)],
    )
    got = released(Dispatcher(settings_with(fairness_knob=0.9), clock=lambda: 0.0).decide(view))
    assert (got["a-job"], got["b-job"]) == expected


def test_a_group_of_an_unknown_queue_waits_for_its_queue() -> None:
    view = DispatchView([node("n1")], [], [QueueRecord("a")], [grp("lost", "nope"), grp("ok", "a")])
    assert released(Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(view)) == Counter({"ok": 1})


# --- job order inside a queue --------------------------------------------------------------------


def _two_jobs(job_order: JobOrder) -> DispatchView:
    # old: arrived at 0 with 8 tasks of 10 s on the 1-core node: PS finishes it at 80; at 100 it is still
    # waiting for real. new: arrived at 99, 2 tasks of 1 s: less remaining work now.
    return DispatchView(
        nodes=[node("n1", cpu=1.0, memory=4.0)], running=[],
        queues=[QueueRecord("q", job_order=job_order)],
        groups=[grp("old", tasks=8, arrival=0.0, duration=10.0, memory=1.0),
                grp("new", tasks=2, arrival=99.0, duration=1.0, memory=1.0)],
    )


@pytest.mark.parametrize(("job_order", "first"), [pytest.param(JobOrder.FIFO, "old", id="fifo-earliest-arrival"),
                                                  pytest.param(JobOrder.SRTF, "new", id="srtf-least-remaining-work"),
                                                  pytest.param(JobOrder.FSP, "old", id="fsp-virtual-finish-order")])
def test_job_order_decides_which_job_of_a_queue_gets_the_slot(job_order: JobOrder, first: str) -> None:
    clock = [0.0]
    d = Dispatcher(settings_with(fairness_knob=0.9), clock=lambda: clock[0])
    view = _two_jobs(job_order)
    if job_order is JobOrder.FSP:
        # FSP saw "old" arrive alone at 0 (it finishes virtually at 80 under PS), then "new" at 99.
        d.decide(dataclasses.replace(view, groups=[dataclasses.replace(view.groups[0], releasable=0)]))
    clock[0] = 100.0
    assert order(d.decide(view)) == [first]


def test_fsp_lets_a_short_newcomer_overtake_a_long_job_still_running_virtually() -> None:
    # FSP Figure 1: j1 (30 s) at 0, j2 (10 s) at 10: under PS j2 finishes first, so it goes first at 11.
    clock = [0.0]
    d = Dispatcher(settings_with(fairness_knob=0.9), clock=lambda: clock[0])
    j1 = grp("j1", tasks=30, arrival=0.0, duration=1.0, cpu=1.0, memory=1.0)
    j2 = grp("j2", tasks=10, arrival=10.0, duration=1.0, cpu=1.0, memory=1.0)
    full = DispatchView([node("n1", cpu=1.0, memory=4.0)], [RunningPod("n1", rv(cpu=1.0), queue="q")],
                        [QueueRecord("q", job_order=JobOrder.FSP)], [j1])
    d.decide(full)  # j1 arrives; the node is busy
    clock[0] = 11.0
    free = DispatchView([node("n1", cpu=1.0, memory=4.0)], [], [QueueRecord("q", job_order=JobOrder.FSP)], [j1, j2])
    assert order(d.decide(free)) == ["j2"]


# --- the barrier knob ----------------------------------------------------------------------------


def test_stragglers_of_an_almost_finished_group_go_first() -> None:
    view = DispatchView(
        nodes=[node("n1", cpu=2.0, memory=8.0)], running=[], queues=[QueueRecord("q")],
        groups=[grp("fresh", cpu=2.0, memory=4.0, tasks=5, duration=1.0),
                grp("straggler", cpu=1.0, memory=1.0, tasks=1, duration=100.0, finished=0.95)],
    )
    assert order(Dispatcher(settings_with(barrier_knob=0.9), clock=lambda: 0.0).decide(view))[0] == "straggler"
    assert order(Dispatcher(settings_with(barrier_knob=1.0), clock=lambda: 0.0).decide(view))[0] == "fresh"


# --- never more than fits ------------------------------------------------------------------------


@st.composite
def _views(draw: st.DrawFn) -> DispatchView:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_nodes = int(rng.integers(1, 6))
    nodes = [NodeRecord(f"n{i}", rv(cpu=float(rng.choice([4, 8, 16])), memory=float(rng.choice([16, 64])) * GI,
                                    network=1000.0),
                        harvest=bool(rng.random() < 0.8),
                        usage=rv(cpu=float(rng.uniform(0, 4)), memory=float(rng.uniform(0, 8)) * GI)
                        if rng.random() < 0.8 else None)
             for i in range(n_nodes)]
    running = [RunningPod(f"n{int(rng.integers(0, n_nodes))}", rv(cpu=float(rng.choice([0.5, 1, 2])),
                                                                 memory=float(rng.choice([1, 4])) * GI),
                          queue=str(rng.choice(["a", "b"])))
               for _ in range(int(rng.integers(0, 10)))]
    queues = [QueueRecord("a", 1.0, True, JobOrder.SRTF), QueueRecord("b", 2.0, bool(rng.random() < 0.5), JobOrder.FSP)]
    groups = [grp(f"g{k}", str(rng.choice(["a", "b"])), cpu=float(rng.choice([0.5, 1, 2, 3])),
                  memory=float(rng.choice([1, 2, 8])), tasks=int(rng.integers(0, 12)),
                  intent=Opportunistic(str(rng.choice(["true", "auto", "false"]))), arrival=float(rng.uniform(0, 50)))
              for k in range(int(rng.integers(1, 10)))]
    return DispatchView(nodes, running, queues, groups)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_views(), st.sampled_from([0.0, 0.25, 0.9]))
def test_released_demand_never_exceeds_the_free_capacity_of_a_node_in_either_pool(view: DispatchView, f: float) -> None:
    s = settings_with(fairness_knob=f)
    releases = Dispatcher(s, clock=lambda: 1000.0).decide(view)
    res = ("cpu", "memory", "disk", "network")
    alloc = np.array([n.allocatable.to_array(res) for n in view.nodes])
    names = [n.name for n in view.nodes]
    requests = np.zeros_like(alloc)
    for p in view.running:
        requests[names.index(p.node)] += p.demand.to_array(res)
    usage = np.array([n.usage.to_array(res) if n.usage is not None else np.full(4, np.nan) for n in view.nodes])
    opp_free = harvest.harvestable(alloc, usage, np.zeros_like(alloc), np.zeros_like(alloc),
                                   s.harvest.t_alloc.array(res))
    opp_free[[n.usage is None or not n.harvest for n in view.nodes]] = 0.0
    free = {PodClass.REGULAR: harvest.regular_available(alloc, requests), PodClass.OPPORTUNISTIC: opp_free}
    used = {c: np.zeros_like(alloc) for c in PodClass}
    demand = {g.key: g.demand.to_array(res) for g in view.groups}
    for r in releases:
        used[r.pod_class][names.index(r.node_hint)] += r.count * demand[r.group_key]
    for c in PodClass:
        assert (used[c] <= free[c] * (1 + tolerances.FEASIBILITY_RTOL) + 1e-9).all(), c
    per_group = released(releases)
    for g in view.groups:
        assert per_group[g.key] <= g.releasable


def test_tasks_released_but_not_bound_yet_keep_their_capacity() -> None:
    clock = [0.0]
    d = Dispatcher(StowageSettings(), clock=lambda: clock[0])
    view = DispatchView([node("n1", cpu=4.0)], [], [QueueRecord("q")], [grp("g", tasks=10)])
    assert released(d.decide(view))["g"] == 4
    # The operator created the 4 pods; kube-scheduler has not bound them yet.
    clock[0] = 1.0
    waiting = dataclasses.replace(view, groups=[dataclasses.replace(view.groups[0], releasable=6, unbound=4)])
    assert d.decide(waiting) == []
    # Two bound (now running), two still unbound: still nothing free.
    bound = dataclasses.replace(waiting, running=[RunningPod("n1", view.groups[0].demand, queue="q")] * 2,
                                groups=[dataclasses.replace(view.groups[0], releasable=6, unbound=2)])
    assert d.decide(bound) == []


def test_an_opportunistic_pods_own_requests_come_off_the_regular_room() -> None:
    """kube-scheduler counts a converted pod's 1m cpu: a regular task that needs exactly the rest does not fit
    there, so the dispatcher must not release it onto that room (it would wait unbound)."""
    regular = RunningPod("n1", rv(cpu=3.0, memory=GI), queue="q")
    converted = RunningPod("n1", rv(cpu=2.0, memory=GI), queue="q", opportunistic=True, requests=rv(cpu=0.001))
    exact = [grp("g", cpu=1.0, memory=1.0)]
    free = DispatchView([node("n1", cpu=4.0)], [regular], [QueueRecord("q")], exact)
    assert released(Dispatcher(StowageSettings()).decide(free))["g"] == 1
    taken = DispatchView([node("n1", cpu=4.0)], [regular, converted], [QueueRecord("q")], exact)
    assert released(Dispatcher(StowageSettings()).decide(taken))["g"] == 0


# --- harvesting ----------------------------------------------------------------------------------


def _full_node_view(*groups: PendingGroup, queue: QueueRecord | None = None) -> DispatchView:
    # The node's cores are all requested, but only 1 of 8 is used: 0.9·8 − 1 = 6.2 cores harvestable.
    return DispatchView(
        nodes=[node("n1", cpu=8.0, memory=32.0, usage=rv(cpu=1.0, memory=4 * GI))],
        running=[RunningPod("n1", rv(cpu=8.0, memory=8 * GI), queue="other", bound_at_s=-1e6)],  # long ago: in U
        queues=[queue or QueueRecord("q"), QueueRecord("other")],
        groups=list(groups),
    )


def test_only_true_and_short_auto_tasks_run_on_harvested_capacity() -> None:
    d = Dispatcher(StowageSettings(), clock=lambda: 0.0)
    view = _full_node_view(grp("yes", intent=Opportunistic.TRUE), grp("maybe", intent=Opportunistic.AUTO),
                           grp("no", intent=Opportunistic.FALSE))
    got = d.decide(view)
    assert {r.group_key for r in got} == {"yes"}
    assert all(r.pod_class is PodClass.OPPORTUNISTIC and r.node_hint == "n1" for r in got)
    # Finished tasks of "maybe"'s kind ran for 5 s: short. Now it qualifies; "no" never does.
    features = d._features(d._arrays(view), 1, np.array([8.0, 32 * GI, 0.0, 0.0]))
    d.observe_finished(features, [5.0] * 5)
    again = d.decide(view)
    assert {r.group_key for r in again} == {"yes", "maybe"}


def test_a_long_auto_task_stays_pending_when_only_harvested_capacity_is_left() -> None:
    d = Dispatcher(StowageSettings(), clock=lambda: 0.0)
    view = _full_node_view(grp("batch", intent=Opportunistic.AUTO))
    features = d._features(d._arrays(view), 0, np.array([8.0, 32 * GI, 0.0, 0.0]))
    d.observe_finished(features, [3600.0] * 5)
    assert d.decide(view) == []


def test_auto_tasks_run_regular_while_regular_capacity_exists() -> None:
    view = DispatchView([node("n1", usage=rv())], [], [QueueRecord("q")], [grp("g", intent=Opportunistic.AUTO)])
    assert [r.pod_class for r in Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(view)] == [PodClass.REGULAR]


def test_a_queue_that_denies_harvesting_gets_no_harvested_capacity() -> None:
    view = _full_node_view(grp("yes", intent=Opportunistic.TRUE), queue=QueueRecord("q", opportunistic=False))
    assert Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(view) == []


def test_the_harvestable_room_and_features_are_built_only_when_some_group_may_harvest(monkeypatch) -> None:
    """``decide.needs_harvestable`` / ``needs_features`` before the decision: "false" groups (or nothing
    releasable) need no room and no features; an "auto" one does, and only its own features are built."""
    import stowage.operator.dispatcher as dispatcher_module

    built: list[str] = []
    real = dispatcher_module.harvestable
    monkeypatch.setattr(dispatcher_module, "harvestable", lambda *a, **kw: built.append("room") or real(*a, **kw))
    d = Dispatcher(StowageSettings(), clock=lambda: 0.0)
    view = _full_node_view(grp("no", intent=Opportunistic.FALSE), grp("none-left", intent=Opportunistic.TRUE, tasks=0))
    inp = d.decide_input(view, d._arrays(view), 0.0)
    assert inp.harvestable is None and inp.features is None and built == []
    assert d.decide(view) == [] and built == []
    view = _full_node_view(grp("no", intent=Opportunistic.FALSE), grp("maybe", intent=Opportunistic.AUTO))
    inp = d.decide_input(view, d._arrays(view), 0.0)
    assert inp.harvestable is not None and built == ["room"]
    assert inp.features is not None and inp.features[0] is None and inp.features[1] is not None


@pytest.mark.parametrize("why", ["no-usage-sample", "harvest-label-false"])
def test_a_node_without_a_fresh_sample_or_opted_out_harvests_nothing(why: str) -> None:
    view = _full_node_view(grp("yes", intent=Opportunistic.TRUE))
    n = view.nodes[0]
    n = dataclasses.replace(n, usage=None) if why == "no-usage-sample" else dataclasses.replace(n, harvest=False)
    assert Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(dataclasses.replace(view, nodes=[n])) == []


@pytest.mark.parametrize("opportunistic", [True, False])
def test_recently_bound_pods_count_at_full_demand(opportunistic: bool) -> None:
    # 6.2 cores harvestable by usage; a pod of 5 bound 10 s ago (ramp-up 30 s) leaves 1.2, whatever its
    # class: a new regular pod's usage is no more in U than an opportunistic one's (the extender's S).
    base = _full_node_view(grp("yes", intent=Opportunistic.TRUE, tasks=4))
    recent = RunningPod("n1", rv(cpu=5.0, memory=1 * GI), queue="q", opportunistic=opportunistic, bound_at_s=90.0)
    d = Dispatcher(StowageSettings(), clock=lambda: 100.0)
    assert released(d.decide(dataclasses.replace(base, running=[*base.running, recent])))["yes"] == 1
    d2 = Dispatcher(StowageSettings(), clock=lambda: 200.0)  # long after the ramp-up: only usage counts
    assert released(d2.decide(dataclasses.replace(base, running=[*base.running, recent])))["yes"] == 4


@pytest.mark.parametrize(("started_at", "sample_age", "expected"), [
    pytest.param(None, 0.0, 1, id="not-started-is-assumed"),
    pytest.param(95.0, 10.0, 1, id="sample-taken-before-it-started"),
    pytest.param(95.0, 4.5, 1, id="sample-inside-its-first-period"),
    pytest.param(95.0, 4.0, 4, id="first-sample-that-includes-it-ends-the-allowance"),
    pytest.param(95.0, 0.0, 4, id="later-samples-include-it-too"),
    pytest.param(95.0, 31.0, 0, id="stale-sample-harvests-nothing"),
])
def test_the_allowance_ends_on_the_first_sample_that_includes_the_pod(
    started_at: float | None, sample_age: float, expected: int
) -> None:
    # 6.2 cores harvestable by usage; a pod of 5 bound at 90 (now 100, ramp-up 30 s) started at 95. A sample
    # taken a sampling period (1 s) or more after it started has its usage in U: from then on it is not in S
    # (policy.room.assumed_usage), so the 4 one-core tasks fit; before that it counts at full demand (1.2 left).
    base = _full_node_view(grp("yes", intent=Opportunistic.TRUE, tasks=4))
    recent = RunningPod("n1", rv(cpu=5.0, memory=1 * GI), queue="q", bound_at_s=90.0, started_at_s=started_at)
    n = dataclasses.replace(base.nodes[0], sample_age_s=sample_age)
    view = dataclasses.replace(base, nodes=[n], running=[*base.running, recent])
    got = Dispatcher(StowageSettings(), clock=lambda: 100.0).decide(view)
    assert released(got).get("yes", 0) == expected


def _bandwidth_view(net_usage: float, *groups: PendingGroup) -> DispatchView:
    # One node declaring 100 B/s of network; a regular pod declared 60 of it, an opportunistic one 30.
    n = NodeRecord("n1", rv(cpu=8.0, memory=32 * GI, network=100.0), True,
                   rv(cpu=1.0, memory=4 * GI, network=net_usage), sample_age_s=0.0)
    running = [RunningPod("n1", rv(cpu=1.0, memory=GI, network=60.0), queue="q", bound_at_s=-1e6),
               RunningPod("n1", rv(cpu=1.0, memory=GI, network=30.0), queue="q", opportunistic=True,
                          bound_at_s=-1e6)]
    return DispatchView([n], running, [QueueRecord("q")], list(groups))


def test_only_regular_pods_declarations_take_declared_bandwidth_room() -> None:
    # The new rule: opportunistic pods reserve no declared bandwidth, so a regular pod declaring 40 fits the
    # 100 − 60 left by the regular pod (the opportunistic pod's 30 no longer counts: it used to leave 10).
    view = _bandwidth_view(0.0, dataclasses.replace(grp("reg", tasks=2),
                                                    demand=rv(cpu=1.0, memory=2 * GI, network=40.0)))
    got = Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(view)
    assert released(got) == Counter({"reg": 1})  # the second would over-declare
    assert all(r.pod_class is PodClass.REGULAR for r in got)


@pytest.mark.parametrize(("seen", "expected"), [
    pytest.param(None, 0, id="nothing-seen-packed-as-declared"),
    pytest.param({"disk": 20.0}, 1, id="first-pods-use-seen-second-fits"),
    pytest.param({"disk": 70.0}, 0, id="seen-near-its-declaration-still-declared"),
])
def test_disk_is_packed_by_the_groups_estimated_use(seen: dict[str, float] | None, expected: int) -> None:
    # A node of 100 B/s of disk; a regular pod of the group declares 80 and runs. Its group's next task declares 80
    # too: by declarations it does not fit (80 + 80 > 100); once the group's pods were seen using 20, each is
    # packed at 20 × bandwidth_margin 1.25 = 25 (policy.use_estimates): 25 + 25 fits.
    n = NodeRecord("n1", rv(cpu=8.0, memory=32 * GI, disk=100.0), True)
    demand = rv(cpu=1.0, memory=GI, disk=80.0)
    first = RunningPod("n1", demand, queue="q", bound_at_s=-1e6, use_peak=seen)
    group = dataclasses.replace(grp("job/a", tasks=1), demand=demand, use_peak=seen)
    got = Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(DispatchView([n], [first], [QueueRecord("q")],
                                                                               [group]))
    assert released(got).get("job/a", 0) == expected


@pytest.mark.parametrize(("net_usage", "expected"), [(0.0, 1), (60.0, 0)])
def test_an_opportunistic_pods_bandwidth_fits_the_measured_harvested_room(net_usage: float, expected: int) -> None:
    # An opportunistic task declaring 50 B/s: the declared room is 100 − 60 = 40, but it is measured like cpu
    # and memory: 0.9·100 − the measured network use. Idle network (90 harvestable) holds it, 60 in use does not.
    # No regular room: the node's cpu is all requested.
    view = _bandwidth_view(net_usage, dataclasses.replace(grp("opp", intent=Opportunistic.TRUE),
                                                          demand=rv(cpu=1.0, memory=2 * GI, network=50.0)))
    full = RunningPod("n1", rv(cpu=6.0, memory=GI), queue="q", bound_at_s=-1e6)
    got = Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(dataclasses.replace(
        view, running=[*view.running, full]))
    assert released(got).get("opp", 0) == expected
    assert all(r.pod_class is PodClass.OPPORTUNISTIC for r in got)


def test_regular_tasks_released_in_the_same_pass_or_unbound_count_in_the_ramp_up_allowance() -> None:
    # An idle 8-core node, 4 cores requested long ago by an idle pod: 0.9·8 = 7.2 cores harvestable by usage,
    # 4 cores of regular room. The regular pass releases 4 one-core tasks (regular room first, UBIS Alg. 1: the
    # "true" group would take regular room too, but none is left); they bind first and are then pods just bound
    # (S at full demand, as the extender counts them): 3.2 harvested cores left for the "true" group.
    idle = RunningPod("n1", rv(cpu=4.0, memory=4 * GI), queue="q", bound_at_s=-1e6)
    view = DispatchView([node("n1", usage=rv())], [idle], [QueueRecord("q")],
                        [grp("reg", tasks=4), grp("opp", tasks=10, intent=Opportunistic.TRUE)])
    d = Dispatcher(StowageSettings(), clock=lambda: 0.0)
    got = d.decide(view)
    assert released(got) == Counter({"reg": 4, "opp": 3})
    assert {r.group_key: r.pod_class for r in got}["opp"] is PodClass.OPPORTUNISTIC
    # Next pass, nothing bound yet: the 4 + 3 released tasks still count where they were released.
    later = dataclasses.replace(view, groups=[grp("reg", tasks=0, remaining=4, unbound=4),
                                              grp("opp", tasks=7, remaining=10, intent=Opportunistic.TRUE, unbound=3)])
    assert released(d.decide(later)) == Counter()


def test_a_release_bound_on_another_node_than_planned_frees_no_slot_twice() -> None:
    # Two 2-core nodes, two 2-core tasks released, one per node. kube-scheduler binds x on the node planned
    # for y while y is still unbound: the node planned for x is the one y will take, not room for z.
    nodes = [node("n1", cpu=2.0, memory=64.0), node("n2", cpu=2.0, memory=64.0)]
    d = Dispatcher(StowageSettings(), clock=lambda: 0.0)
    first = d.decide(DispatchView(nodes, [], [QueueRecord("q")], [grp("x", cpu=2.0), grp("y", cpu=2.0)]))
    planned = {r.group_key: r.node_hint for r in first}
    assert set(planned) == {"x", "y"} and planned["x"] != planned["y"]
    x_bound = RunningPod(planned["y"], rv(cpu=2.0, memory=2 * GI), queue="q", bound_at_s=0.0)
    later = DispatchView(nodes, [x_bound], [QueueRecord("q")],
                         [grp("x", cpu=2.0, tasks=0, remaining=1), grp("y", cpu=2.0, tasks=0, remaining=1, unbound=1),
                          grp("z", cpu=2.0)])
    assert released(d.decide(later)) == Counter()


# --- the starvation guard ------------------------------------------------------------------------


def test_a_group_passed_over_more_than_the_limit_gets_a_node_held_for_it() -> None:
    # Two 4-core nodes each with 1 core left; a stream of 1-core tasks (ranked first: least work) keeps
    # taking every core that frees; a 3-core group fits each node's capacity but never the free room.
    clock = [0.0]
    d = Dispatcher(settings_with(fairness_knob=0.9, starvation_skip_limit=2), clock=lambda: clock[0])
    nodes = [node("n1", cpu=4.0, memory=64.0), node("n2", cpu=4.0, memory=64.0)]
    busy = [RunningPod(n, rv(cpu=3.0, memory=3 * GI), queue="q") for n in ("n1", "n2")]
    big = grp("big", cpu=3.0, memory=3.0, duration=600.0)
    small = grp("small", cpu=1.0, memory=1.0, tasks=100, duration=1.0)
    view = DispatchView(nodes, busy, [QueueRecord("q")], [big, small])
    for _ in range(3):  # skipped 3 times > 2
        assert released(d.decide(view)) == Counter({"small": 2})
    # Starved now: a node is held for it, so only the other node's core goes to "small".
    got = d.decide(view)
    assert released(got) == Counter({"small": 1})
    held = d.held()
    assert list(held) == [("big", "regular")]
    assert {r.node_hint for r in got} != {held[("big", "regular")]}
    # The held node's tasks finish: "big" fits there and goes first, then the guard lets go.
    h = held[("big", "regular")]
    freed = dataclasses.replace(view, running=[p for p in busy if p.node != h])
    got = d.decide(freed)
    assert got[0] == Release("big", 1, PodClass.REGULAR, h)
    assert d.held() == {}


def test_the_guard_is_off_at_zero() -> None:
    d = Dispatcher(settings_with(fairness_knob=0.9, starvation_skip_limit=0), clock=lambda: 0.0)
    view = DispatchView([node("n1", cpu=4.0, memory=64.0)], [RunningPod("n1", rv(cpu=3.0), queue="q")],
                        [QueueRecord("q")], [grp("big", cpu=3.0, memory=3.0, duration=600.0),
                                             grp("small", cpu=1.0, memory=1.0, tasks=100, duration=1.0)])
    for _ in range(10):
        assert released(d.decide(view)) == Counter({"small": 1})
    assert d.held() == {}


# --- the same decisions as the simulator's preset ------------------------------------------------


def _workload(seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    nodes = tuple(NodeSpec(f"n{i}", rv(cpu=float(rng.choice([4, 8])), memory=float(rng.choice([16, 32])),
                                       disk=100.0, network=100.0)) for i in range(int(rng.integers(2, 6))))
    queues = (QueueSpec("a", 1.0, JobOrder.SRTF, True), QueueSpec("b", 2.0, JobOrder.FSP, True),
              QueueSpec("c", 1.0, JobOrder.FIFO, False))
    jobs = []
    for j in range(int(rng.integers(3, 12))):
        groups = tuple(TaskGroup(f"g{k}", int(rng.integers(1, 8)),
                                 rv(cpu=float(rng.choice([0.5, 1, 2])), memory=float(rng.choice([1, 2, 6])),
                                    disk=float(rng.choice([0, 10]))),
                                 float(rng.choice([5, 30, 120])), 1.0) for k in range(int(rng.integers(1, 3))))
        jobs.append(JobSpec(f"job{j}", str(rng.choice(["a", "b", "c"])), 0.0, groups,
                            Opportunistic(str(rng.choice(["true", "auto", "false"])))))
    return Workload("parity", nodes, queues, tuple(jobs), {"source": "tests"})


def _first_pass_of_the_stowage_preset(wl: Workload, oracle: bool) -> tuple[Simulation, Counter]:
    sim = Simulation(wl, presets.make("stowage"), SimConfig(trace=True, max_sim_s=0.0, oracle_durations=oracle), 0)
    sim.run()  # every job arrives at 0; the run stops after the first scheduling pass
    assert sim.log is not None
    out: Counter = Counter()
    for _, job, group, node_name, opp in sim.log:
        out[(f"{job}/{group}", PodClass.OPPORTUNISTIC if opp else PodClass.REGULAR, node_name)] += 1
    return sim, out


def _same_state_as_a_view(wl: Workload, sim: Simulation, oracle: bool) -> DispatchView:
    return DispatchView(
        nodes=[NodeRecord(n.name, n.capacity, n.harvest, usage=ResourceVector()) for n in wl.nodes],
        running=[],
        queues=[QueueRecord(q.name, q.weight, q.opportunistic_allowed, q.job_order) for q in wl.queues],
        groups=[PendingGroup(key=f"{job.name}/{g.name}", queue=job.queue, demand=g.demand, releasable=g.tasks,
                             job=job.name, group=g.name, intent=Opportunistic(job.opportunistic),
                             expected_duration_s=g.duration_s if oracle else math.nan, arrival_s=job.arrival_s,
                             remaining_tasks=g.tasks)
                # the simulator's group order (ties: first row)
                for job in (wl.jobs[i] for i in sim.spec.j_source) for g in job.groups],
    )


@pytest.mark.parametrize("oracle", [False, True], ids=["estimates", "oracle"])
@pytest.mark.parametrize("seed", range(25))
def test_the_dispatcher_releases_what_one_pass_of_the_simulators_stowage_preset_places(seed: int, oracle: bool) -> None:
    """Both run ``decide.Decider.decide``: on the same view they release the same tasks to the same nodes, with
    the estimates a cluster has (no duration stated) and with the durations stated (the simulator's oracle)."""
    wl = _workload(seed)
    sim, expected = _first_pass_of_the_stowage_preset(wl, oracle)
    got: Counter = Counter()
    for r in Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(_same_state_as_a_view(wl, sim, oracle)):
        got[(r.group_key, r.pod_class, r.node_hint)] += r.count
    assert got == expected
    assert sum(expected.values()) > 0


def test_the_dispatcher_and_the_simulator_build_the_decisions_input_through_one_builder(monkeypatch) -> None:
    """Every ``DecideInput`` the two decide on comes from ``snapshot.build`` (issue #34): with the builder
    patched to record its callers, a dispatcher pass and a simulated run both go through it, and each decision
    is handed exactly what the builder returned."""
    from stowage.policy import decide, snapshot

    built: list[str] = []
    decided: list[bool] = []
    made: set[int] = set()
    real_build, real_decide = snapshot.build, decide.Decider.decide

    def spy_build(snap: snapshot.PassSnapshot, **kw: object) -> decide.DecideInput:
        import inspect

        built.append(inspect.stack()[1].filename.replace("\\", "/").rsplit("/", 2)[-2])
        inp = real_build(snap, **kw)
        made.add(id(inp))
        return inp

    def spy_decide(self: decide.Decider, inp: decide.DecideInput) -> decide.Decision:
        decided.append(id(inp) in made)
        return real_decide(self, inp)

    monkeypatch.setattr(snapshot, "build", spy_build)
    monkeypatch.setattr(decide.Decider, "decide", spy_decide)
    wl = _workload(0)
    sim, _ = _first_pass_of_the_stowage_preset(wl, False)
    Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(_same_state_as_a_view(wl, sim, False))
    assert set(built) == {"sim", "operator"}
    assert decided and all(decided)


# --- restart safety and the published numbers ----------------------------------------------------


def test_state_survives_a_restart_as_json() -> None:
    s = settings_with(fairness_knob=0.9, starvation_skip_limit=2)
    d = Dispatcher(s, clock=lambda: 0.0)
    short = {"framework": "q", "app": "etl", "stage": "map", "progress": "0-25%", "demand": "cpu=2^-3"}
    long_ = {**short, "app": "train"}
    for _ in range(3):
        d.observe_finished(short, (4.0,))
        d.observe_finished(long_, (900.0,))
    d.observe_finished(short, (math.nan,))  # teaches nothing
    view = DispatchView([node("n1", cpu=4.0, memory=64.0)], [RunningPod("n1", rv(cpu=3.0), queue="q")],
                        [QueueRecord("q")], [grp("big", cpu=3.0, memory=3.0, duration=600.0),
                                             grp("small", cpu=1.0, memory=1.0, tasks=100, duration=1.0)])
    d.decide(view)
    state = json.loads(json.dumps(d.state_dict()))
    assert state["version"] == 5 and state["usage"]["regular"]["queues"] == ["q"]
    restarted = Dispatcher(s, clock=lambda: 0.0)
    restarted.load_state(state)
    assert restarted.state_dict() == d.state_dict()
    previous = Dispatcher(s, clock=lambda: 0.0)  # the previous release's state (version 2) is still read
    previous.load_state({k: v for k, v in state.items() if k not in ("usage", "priors", "history")}
                        | {"version": 2})
    fresh = estimates.DurationPriors(s.estimates).state_dict(), estimates.RecurringHistory(s.estimates).state_dict()
    assert (previous.state_dict()["priors"], previous.state_dict()["history"]) == fresh  # learned nothing yet
    assert (previous.state_dict() | {"priors": state["priors"], "history": state["history"], "usage": state["usage"]}
            == d.state_dict())
    assert restarted.classifier.class_counts == d.classifier.class_counts == (3, 3)
    for f in (short, long_, {**short, "stage": "reduce"}):
        assert restarted.classifier.probability_short(f) == d.classifier.probability_short(f)
    assert restarted.decider.skips == {"big": 1}


@pytest.mark.parametrize("bad", [{"version": 99}, {"version": 1}, {"version": 1, "classifier": {}}])
def test_a_malformed_state_is_refused_and_changes_nothing(bad: dict) -> None:
    d = Dispatcher(StowageSettings(), clock=lambda: 0.0)
    d.observe_finished({"framework": "x"}, (1.0,))
    with pytest.raises((ValueError, KeyError, TypeError)):
        d.load_state(bad)
    assert d.classifier.n_observed == 1


def test_queue_shares_before_any_queue_is_known_are_empty() -> None:
    # The operator's first pass can come before the Queue cache has filled.
    view = DispatchView(nodes=[node("n1", cpu=8.0, memory=32.0)], running=[], queues=[], groups=[])
    assert Dispatcher(StowageSettings(), clock=lambda: 0.0).queue_shares(view) == []


def test_queue_shares_are_the_numbers_drf_compares() -> None:
    view = DispatchView(
        nodes=[node("n1", cpu=8.0, memory=32.0), node("n2", cpu=8.0, memory=32.0)],
        running=[RunningPod("n1", rv(cpu=4.0, memory=4 * GI), queue="a"),
                 RunningPod("n2", rv(cpu=1.0, memory=16 * GI), queue="b", opportunistic=True),
                 RunningPod("n2", rv(cpu=2.0), queue=None)],
        queues=[QueueRecord("a", weight=2.0), QueueRecord("b"), QueueRecord("idle")],
        groups=[grp("b-job", "b")],
    )
    shares = {s.name: s for s in Dispatcher(StowageSettings(), clock=lambda: 0.0).queue_shares(view)}
    assert shares["a"].allocated == {"regular": {"cpu": 4.0, "memory": 4 * GI}, "opportunistic": {}}
    assert shares["a"].share == {"regular": 0.25, "opportunistic": 0.0}  # 4 of 16 cores
    assert shares["a"].dominant_share["regular"] == 0.125  # divided by its weight
    assert shares["b"].share["opportunistic"] == 0.25  # 16 of 64 GiB
    # The dispatcher's fair share (weighted max-min, ``fairness.fair_shares``; issue #34 replaced w/Σw): b has a
    # task waiting and gets what a, waiting for nothing, leaves of the regular pool: a keeps the 25 % it holds.
    assert shares["a"].fair_share == pytest.approx(0.25)
    assert shares["b"].fair_share == pytest.approx(0.75)
    assert shares["idle"].fair_share == 0.0
    # Usage targets: the backlogged queues' usage split by weight (b alone: its own); a queue waiting for nothing
    # is on target (before the first decision the usage is the dominant share).
    assert shares["a"].usage_target == {"regular": 0.25, "opportunistic": 0.0}
    assert shares["b"].usage_target == {"regular": 0.0, "opportunistic": 0.25}


def test_published_fair_shares_are_the_levels_the_dispatchers_floor_reads() -> None:
    """Two queues waiting, weights 2 : 1, a third holding 10 % and waiting for nothing: the published fair shares
    are the dispatcher's ``fair_levels`` (0.6, 0.3) and the third's holding; usage targets split by weight."""
    view = DispatchView(
        nodes=[node("n1", cpu=10.0, memory=1000.0)],
        running=[RunningPod("n1", rv(cpu=3.0), queue="a"), RunningPod("n1", rv(cpu=3.0), queue="b"),
                 RunningPod("n1", rv(cpu=1.0), queue="c")],
        queues=[QueueRecord("a", weight=2.0), QueueRecord("b"), QueueRecord("c")],
        groups=[grp("a-job", "a"), grp("b-job", "b")],
    )
    shares = {s.name: s for s in Dispatcher(StowageSettings(), clock=lambda: 0.0).queue_shares(view)}
    assert [shares[q].fair_share for q in "abc"] == pytest.approx([0.6, 0.3, 0.1])
    dominant = np.array([shares[q].share["regular"] for q in "abc"])
    levels = fairness.fair_levels(dominant, [2.0, 1.0, 1.0], [True, True, False])
    assert [shares[q].fair_share for q in "ab"] == levels[:2].tolist()
    assert [shares[q].usage_target["regular"] for q in "abc"] == pytest.approx([0.4, 0.2, 0.1])


# --- spec.quota ----------------------------------------------------------------------------------


def test_a_queue_is_never_released_beyond_its_quota_per_pool() -> None:
    # Queue a may hold 3 cpu in each pool. It runs 1 cpu regular and has one released task not bound yet: one
    # more regular task fits its quota. Its "true" tasks fill the harvested pool up to 3 cpu of their own; b,
    # without a quota, takes the regular capacity a may not.
    view = DispatchView(
        nodes=[node("n1", cpu=16.0, memory=64.0, usage=rv(cpu=0.5, memory=GI))],
        running=[RunningPod("n1", rv(cpu=1.0, memory=GI), queue="a", bound_at_s=-1e6)],
        queues=[QueueRecord("a", quota={"cpu": 3.0}), QueueRecord("b")],
        groups=[grp("a-reg", "a", tasks=10, unbound=1), grp("a-opp", "a", tasks=10, intent=Opportunistic.TRUE),
                grp("b", "b", tasks=5)])  # b's 5 + a's 1 regular cpu leave 0.9·16 − 0.5 − 6 = 7.9 harvestable
    d = Dispatcher(StowageSettings(), clock=lambda: 0.0)
    got = d.decide(view)
    by_class = Counter()
    for r in got:
        by_class[(r.group_key, r.pod_class)] += r.count
    assert by_class[("a-reg", PodClass.REGULAR)] == 1
    assert by_class[("a-opp", PodClass.OPPORTUNISTIC)] == 3
    assert by_class[("b", PodClass.REGULAR)] == 5
    shares = {s.name: s for s in d.queue_shares(view)}
    assert shares["a"].quota_used == {"regular": {"cpu": pytest.approx(2 / 3)}, "opportunistic": {"cpu": 0.0}}
    assert shares["b"].quota_used == {}


def test_a_quota_on_a_resource_no_node_has_caps_nothing_else() -> None:
    view = DispatchView([node("n1")], [], [QueueRecord("a", quota={"nvidia.com/gpu": 0.0})], [grp("g", "a", tasks=3)])
    assert released(Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(view)) == {"g": 3}


def test_the_head_of_a_long_chain_goes_first_with_the_critical_path_knob() -> None:
    # One free core. "short": one 5 s task; "long": a 10 s map, then a 1000 s reduce behind it (dependsOn).
    # SRTF prefers "short"; with c = 1 the map heads a 1010 s chain, longer than the 15 s the waiting work
    # drains in, so it goes first: the operator passes the chains its groups' dependsOn make.
    view = DispatchView(
        nodes=[node("n1", cpu=1.0, memory=8.0)], running=[], queues=[QueueRecord("q", job_order=JobOrder.SRTF)],
        groups=[grp("short", duration=5.0, memory=1.0),
                dataclasses.replace(grp("long/map", job="long", duration=10.0, memory=1.0), group="map"),
                dataclasses.replace(grp("long/reduce", job="long", duration=1000.0, memory=1.0, tasks=0,
                                        remaining=1), group="reduce", depends_on=("map",))])
    assert order(Dispatcher(StowageSettings(), clock=lambda: 0.0).decide(view)) == ["short"]
    critical = Dispatcher(settings_with(critical_path_fraction=1.0), clock=lambda: 0.0)
    assert order(critical.decide(view)) == ["long/map"]
