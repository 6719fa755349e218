"""A ``DispatchView`` as arrays on one resource axis, and the capacity each pass of the dispatcher packs into.

``view_arrays`` lines nodes, running pods, queues and groups up on cpu, memory, disk, network, then extended
resource names; the job helpers give per-job queue and arrival; ``harvestable`` the opportunistic pool's free
vectors by :mod:`stowage.policy.room`'s rule (the extender's and the simulator's); the regular and the declared
bandwidth room follow from ``ViewArrays.reg_alloc`` in ``stowage.policy.snapshot.build``. Pure: no state, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from stowage.operator.dispatch_records import DispatchView, PendingGroup, QueueRecord, RunningPod

from stowage.config import EstimateSettings, HarvestSettings
from stowage.policy import decide, room, use_estimates
from stowage.policy.estimates import RecurringHistory
from stowage.resources import CORE_RESOURCES, DISK, NETWORK, ResourceVector

__all__ = [
    "VectorRows",
    "ViewArrays",
    "bandwidth_mask",
    "harvestable",
    "job_arrival",
    "job_queue",
    "promotable_arrays",
    "queue_quota",
    "queue_records",
    "view_arrays",
]


@dataclass
class ViewArrays:
    """A view as arrays on one resource axis (``view_arrays``)."""

    resources: tuple[str, ...]
    node_names: list[str]
    alloc: NDArray[np.float64]
    reg_alloc: NDArray[np.float64]
    opp_alloc: NDArray[np.float64]
    queue_alloc: NDArray[np.float64]  # (2, Q, R)
    groups: list[PendingGroup] = field(default_factory=list)
    demand: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 0)))
    queue: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    job: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    job_keys: list[str] = field(default_factory=list)
    rows: VectorRows | None = None
    bound_pods: tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]] = (
        np.zeros((0, 0)), np.zeros(0, np.int64), np.zeros(0))
    """Bound pods, regular and opportunistic: demand (P, R), node, bind time (the ramp-up allowance ``S``:
    any new pod's usage is not yet in ``U``, as the extender counts it). The dispatcher appends the pods it
    released and has not seen bound (bind time NaN: just bound)."""
    estimated: NDArray[np.float64] | None = None
    """(G, R) each group's per-task demand with disk and network estimated (``policy.use_estimates``): what the
    decision packs; None: as declared (``demand``)."""
    reg_bandwidth: NDArray[np.float64] | None = None
    """(N, R) what the regular pods reserve of disk and network, by their estimates (``snapshot.PassSnapshot.
    regular_bandwidth``); None: their declarations (``reg_alloc``)."""
    bound_started: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    """When the containers of ``bound_pods``' first rows started (NaN: not yet), in their order; rows past its
    end (released, not bound) have not started. A node sample taken a period after it includes the pod's usage
    (``harvest.in_sample``): its allowance ends there."""


class VectorRows:
    """Resource vectors as rows on one resource axis; a vector object met again is converted once (pods of a
    group usually share theirs), which keeps building the arrays of 10,000 pods to a few milliseconds."""

    def __init__(self, resources: tuple[str, ...]) -> None:
        self.resources = resources
        self._seen: dict[int, tuple[ResourceVector, NDArray[np.float64]]] = {}  # the vector kept: ids stay unique

    def of(self, vectors: Sequence[ResourceVector]) -> NDArray[np.float64]:
        out = np.empty((len(vectors), len(self.resources)))
        for i, v in enumerate(vectors):
            seen = self._seen.get(id(v))
            if seen is None:
                d = v.as_dict()
                seen = self._seen[id(v)] = (v, np.array([d.get(n, 0.0) for n in self.resources]))
            out[i] = seen[1]
        return out


def queue_records(view: DispatchView) -> list[QueueRecord]:
    """The view's queues, the first of each name (their order is the queue index everywhere)."""
    seen: dict[str, QueueRecord] = {}
    for q in view.queues:
        seen.setdefault(q.name, q)
    return list(seen.values())


def _peaks(records: Sequence[RunningPod | PendingGroup], resources: tuple[str, ...]) -> NDArray[np.float64]:
    """(K, R) each record's ``use_peak`` on the resource axis; NaN where none was seen."""
    out = np.full((len(records), len(resources)), np.nan)
    col = {r: j for j, r in enumerate(resources)}
    for i, rec in enumerate(records):
        for r, v in (rec.use_peak or {}).items():
            if r in col:
                out[i, col[r]] = v
    return out


def view_arrays(view: DispatchView, estimates: EstimateSettings | None = None,
                history: RecurringHistory | None = None) -> ViewArrays:
    """Nodes, allocations and groups on one resource axis: cpu, memory, disk, network, then extended names.

    Released-but-unbound tasks are not in it yet: the dispatcher adds them (it knows where they went). With
    ``estimates``, disk and network are also estimated from what the pods used (``ViewArrays.estimated``,
    ``ViewArrays.reg_bandwidth``), else from what earlier runs of the recurring job used (``history``: a pending
    group by its recurring key, a running pod by its Job's pending groups' key; none: declared).
    """
    queues = queue_records(view)
    q_index = {q.name: i for i, q in enumerate(queues)}
    extra: set[str] = set()
    for n in view.nodes:
        extra.update(n.allocatable)
    for g in view.groups:
        extra.update(g.demand)
    resources = CORE_RESOURCES + tuple(sorted(extra - set(CORE_RESOURCES)))
    rows = VectorRows(resources)
    node_names = [n.name for n in view.nodes]
    node_index = {name: i for i, name in enumerate(node_names)}
    r = len(resources)
    alloc = rows.of([n.allocatable for n in view.nodes])
    reg = np.zeros_like(alloc)
    opp = np.zeros_like(alloc)
    qa = np.zeros((2, len(queues), r))
    pods = view.running
    demand = rows.of([p.demand for p in pods])
    on = np.array([node_index.get(p.node, -1) for p in pods], dtype=np.int64)
    is_opp = np.array([p.opportunistic for p in pods], dtype=bool)
    queue = np.array([q_index.get(p.queue, -1) if p.queue is not None else -1 for p in pods], dtype=np.int64)
    np.add.at(reg, on[(on >= 0) & ~is_opp], demand[(on >= 0) & ~is_opp])
    asked = [i for i, p in enumerate(pods) if p.opportunistic and p.requests and on[i] >= 0]
    if asked:  # kube-scheduler counts an opportunistic pod's own requests (1m cpu) in what regular pods fit
        np.add.at(reg, on[asked], rows.of([pods[i].requests for i in asked]))
    np.add.at(opp, on[(on >= 0) & is_opp], demand[(on >= 0) & is_opp])
    np.add.at(qa, (is_opp[queue >= 0].astype(np.int64), queue[queue >= 0]), demand[queue >= 0])
    a = ViewArrays(resources, node_names, alloc, reg, opp, qa)
    a.rows = rows
    mine = on >= 0
    a.bound_pods = (demand[mine], on[mine],
                  np.array([math.nan if p.bound_at_s is None else p.bound_at_s for p, m in zip(pods, mine,
                                                                                              strict=True) if m],
                           dtype=np.float64))
    a.bound_started = np.array([math.nan if p.started_at_s is None else p.started_at_s
                                for p, m in zip(pods, mine, strict=True) if m], dtype=np.float64)
    a.groups = [g for g in view.groups if g.queue in q_index]  # a group of an unknown queue waits for it
    a.demand = rows.of([g.demand for g in a.groups])
    a.queue = np.array([q_index[g.queue] for g in a.groups], dtype=np.int64)
    jobs: dict[str, int] = {}
    for g in a.groups:
        jobs.setdefault(g.job if g.job is not None else g.key, len(jobs))
    a.job_keys = list(jobs)
    a.job = np.array([jobs[g.job if g.job is not None else g.key] for g in a.groups], dtype=np.int64)
    bw = bandwidth_mask(a)
    if estimates is not None and bw.any():
        keys = {g.job: g.recurring_key for g in a.groups if g.job is not None and g.recurring_key is not None}

        def estimated(rows: NDArray[np.float64], records: Sequence[RunningPod | PendingGroup],
                      recurring: Sequence[str | None]) -> NDArray[np.float64]:
            peak = _peaks(records, resources)
            kept = [history.use(k, rec.group) if history is not None and k is not None else {}
                    for rec, k in zip(records, recurring, strict=True)]
            ev = use_estimates.UseSeen(declared=rows, peak=peak,
                                       history=use_estimates.history_use(rows, kept, resources))
            return use_estimates.estimate(ev, bw, estimates).demand

        a.estimated = estimated(a.demand.reshape(len(a.groups), r), a.groups, [g.recurring_key for g in a.groups])
        regular = np.flatnonzero((on >= 0) & ~is_opp)
        held = estimated(demand[regular].reshape(-1, r), [pods[i] for i in regular.tolist()],
                         [keys.get(pods[i].job) if pods[i].job is not None else None for i in regular.tolist()])
        a.reg_bandwidth = use_estimates.reserved(np.arange(regular.size), on[regular], held, len(node_names))
    return a


def job_queue(a: ViewArrays) -> NDArray[np.int64]:
    """(J,) each job's queue index."""
    out = np.zeros(len(a.job_keys), dtype=np.int64)
    out[a.job] = a.queue
    return out


def job_arrival(a: ViewArrays) -> NDArray[np.float64]:
    """(J,) each job's earliest group arrival (``inf`` when none is known)."""
    out = np.full(len(a.job_keys), math.inf)
    for g, group in enumerate(a.groups):
        j = int(a.job[g])
        if not math.isnan(group.arrival_s):
            out[j] = min(out[j], group.arrival_s)
    return out


def bandwidth_mask(a: ViewArrays) -> NDArray[np.bool_]:
    """(R,) the declared-bandwidth columns (disk, network): not Kubernetes resources, capped by the extender."""
    return np.array([r in (DISK, NETWORK) for r in a.resources], dtype=bool)


def harvestable(h: HarvestSettings, view: DispatchView, a: ViewArrays, now: float, *,
                period_s: float = 1.0) -> NDArray[np.float64]:
    """``A_opp`` per node (UBIS Alg. 1 l.21, OPERA Eq. 4) by :mod:`stowage.policy.room`'s rule, as the extender
    and the simulator compute it: nodes without a fresh usage sample (none, or older than
    ``harvest.utilization_stale_after_s``; a node with usage and no age counts as fresh) harvest nothing; a
    bound pod counts its demand in ``S`` until its node's latest sample (taken ``sample_age_s`` before ``now``)
    includes it, ``harvest.ramp_up_s`` at most. ``period_s`` is the node monitor's sampling period
    (``contention.sample_interval_s``)."""
    assert a.rows is not None
    present = np.array([n.usage is not None for n in view.nodes], dtype=bool)
    age = np.array([n.sample_age_s if math.isfinite(n.sample_age_s) else 0.0 for n in view.nodes], dtype=np.float64)
    usage = np.full(a.alloc.shape, np.nan)
    usage[present] = a.rows.of([n.usage for n in view.nodes if n.usage is not None])
    blocked = np.zeros(a.alloc.shape)
    has_block = np.array([n.blocked is not None for n in view.nodes], dtype=bool)
    blocked[has_block] = a.rows.of([n.blocked for n in view.nodes if n.blocked is not None])
    demands, nodes, bound = a.bound_pods
    started = np.full(bound.shape[0], np.nan)
    k = min(a.bound_started.shape[0], started.shape[0])
    started[:k] = a.bound_started[:k]
    assumed = room.assumed_usage(demands.reshape(-1, len(a.resources)), bound, started, nodes,
                                 np.where(present, room.sampled_at(now, age), np.nan), now,
                                 ramp_up_s=h.ramp_up_s, period_s=period_s)
    return room.harvested_room(a.alloc, usage, room.fresh(present, age, h.utilization_stale_after_s), blocked,
                               assumed, h.t_alloc.array(a.resources),
                               np.array([n.harvest for n in view.nodes], dtype=bool))


def promotable_arrays(a: ViewArrays, queues: Sequence[QueueRecord],
                       pods: Sequence[RunningPod] | None) -> decide.Promotable | None:
    """``pods`` on the view's axes: demand rows, node and queue indices."""
    if pods is None or a.rows is None:
        return None if pods is None else decide.Promotable(np.zeros((0, len(a.resources))),
                                                           np.zeros(0, np.int64), np.zeros(0, np.int64))
    node = {name: i for i, name in enumerate(a.node_names)}
    queue = {q.name: i for i, q in enumerate(queues)}
    return decide.Promotable(
        demand=a.rows.of([p.demand for p in pods]).reshape(len(pods), len(a.resources)),
        node=np.array([node.get(p.node, -1) for p in pods], dtype=np.int64),
        queue=np.array([queue.get(p.queue, -1) if p.queue is not None else -1 for p in pods], dtype=np.int64))


def queue_quota(a: ViewArrays, queues: Sequence[QueueRecord]) -> NDArray[np.float64] | None:
    """(Q, R) ``spec.quota`` on the view's resource axis, ``+inf`` where none; None when no queue has one."""
    if not any(q.quota for q in queues):
        return None
    out = np.full((len(queues), len(a.resources)), np.inf)
    for i, q in enumerate(queues):
        for r, name in enumerate(a.resources):
            if q.quota is not None and name in q.quota:
                out[i, r] = q.quota[name]
    return out
