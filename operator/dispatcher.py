"""The dispatcher: which pending tasks start next, as which class, in fair order (``Dispatcher.decide``).

Glue around ``stowage.policy.dispatch.pack``, the pass the simulator's ``stowage`` preset runs. Plain records
in (``DispatchView``, filled by the operator from its informers, the Job book and Prometheus), plain records
out (``Release``). No Kubernetes I/O here; the clock is injected.

One ``decide(view)``, mirroring ``stowage.sim.packing.PackingPreset.schedule``:

1. **Regular pass** over the groups whose intent is not ``true``, on the regular free capacity
   ``A_reg = allocatable − Σ requests of regular pods`` (``harvest.regular_available``); disk and network
   columns are also capped by ``allocatable − every pod's declared bandwidth`` (the extender's filter).
2. **Opportunistic pass** over the groups still releasable whose intent is ``true``, or ``auto`` and the
   short/long classifier calls them short (OPERA §III-B), in queues that ``Allow`` it, on the harvestable
   capacity ``A_opp = T_alloc·C − U − B − S`` (``harvest.harvestable``; no usage sample → nothing).

Both passes share queues by weighted DRF per pool with the fairness knob, order jobs per queue (FIFO,
SRTF, or FSP with one ``FspTracker`` per queue kept here), boost groups at the barrier, and pick by Tetris
alignment + remaining work. A released task's demand comes off its node's free vector in the dispatcher's
copy before the next one is chosen, so a decision never releases more than fits. Tasks released by an
earlier ``decide`` and not yet bound (``PendingGroup.unbound``) keep their demand on the node they were
released for, so a slow scheduler does not make the same capacity count twice.

Starvation guard (``packing.starvation_skip_limit`` ε_s, OPERA multi-chance reservation): see
``stowage.policy.dispatch``; the skip counts and held nodes live here, by group key, and survive a restart
through ``state_dict``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stowage.config import StowageSettings
from stowage.errors import InvalidInput
from stowage.labels import Opportunistic, PodClass
from stowage.model import JobOrder, Pool
from stowage.policy import alignment, classifier, dispatch, fairness, harvest, ordering, remaining_work
from stowage.resources import CORE_RESOURCES, DISK, NETWORK, ResourceVector

__all__ = [
    "DispatchView",
    "Dispatcher",
    "NodeRecord",
    "PendingGroup",
    "QueueRecord",
    "QueueShare",
    "Release",
    "RunningPod",
]

_STATE_VERSION = 2  # 2: the classifier's own state_dict (1 replayed observations)
_POOLS = (Pool.REGULAR, Pool.OPPORTUNISTIC)


# --- the view ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node as the dispatcher sees it."""

    name: str
    allocatable: ResourceVector
    """``status.allocatable`` (with the bandwidth annotations as ``disk``/``network``): the capacity basis."""
    harvest: bool = True
    """False when the node is labelled ``stowage.io/harvest: "false"``: it harvests nothing."""
    usage: ResourceVector | None = None
    """Measured usage of all pods (the node monitor's fresh sample); None (none, or stale) → harvests nothing."""
    blocked: ResourceVector | None = None
    """Capacity the node monitor blocks after contention (OPERA PRESERVE ``B``, ``stowage_node_blocked``)."""


@dataclass(frozen=True, slots=True)
class RunningPod:
    """A pod bound to a node (any pod: the nodes' free capacity depends on all of them)."""

    node: str
    demand: ResourceVector
    """Requests for a regular pod; the ``stowage.io/demand`` annotation for an opportunistic one."""
    queue: str | None = None
    """Its Stowage queue; None for a pod outside Stowage (it counts on its node, in no queue)."""
    opportunistic: bool = False
    bound_at_s: float | None = None
    """When it was bound (clock seconds): an opportunistic pod counts at full demand for ``harvest.ramp_up_s``
    after it (``S``); None counts as just bound."""


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """A Queue's spec."""

    name: str
    weight: float = 1.0
    opportunistic: bool = True
    """``spec.opportunistic: Allow``; False (``Deny``) → none of its tasks gets harvested capacity."""
    job_order: JobOrder = JobOrder.SRTF
    quota: Mapping[str, float] | None = None
    """``spec.quota`` in base units: the most the queue may hold in each pool at once, per resource it names
    (0 allowed: none of it); None or {}: no ceiling."""


@dataclass(frozen=True, slots=True)
class PendingGroup:
    """One task group of an unfinished job (or one gated plain pod). List every group of every unfinished
    job, releasable or not: remaining work counts them all, and FSP forgets a job that leaves the view."""

    key: str
    """Unique and stable across passes (e.g. ``namespace/job/group``, ``namespace/pod``): releases name it."""
    queue: str
    demand: ResourceVector
    """Per task (requests, or limits where no request)."""
    releasable: int
    """Tasks that may start now and were not released yet (barrier satisfied, job not suspended)."""
    namespace: str = ""
    job: str | None = None
    """The job's key (``namespace/name``); None for a plain gated pod (a one-task job of its own)."""
    group: str = ""
    intent: Opportunistic = Opportunistic.FALSE
    expected_duration_s: float = math.nan
    """Expected duration of one task (``expectedDuration``, or history); NaN unknown (no remaining work)."""
    arrival_s: float = math.nan
    """The job's creation time (clock seconds): FIFO order, FSP arrival."""
    remaining_tasks: int = 0
    """Tasks of the group not finished (not yet released + released but running): its remaining work."""
    finished_fraction: float = 0.0
    """Finished / total tasks of the group (the barrier knob)."""
    job_progress: float = 0.0
    """Finished / total tasks of the job (the classifier's progress feature)."""
    unbound: int = 0
    """Tasks released by an earlier pass whose pods are not bound yet."""
    features: Mapping[str, str] | None = None
    """Classifier features; None → ``dispatch.task_features`` of queue, job, group, demand and progress."""


@dataclass(frozen=True, slots=True)
class DispatchView:
    """One pass's snapshot."""

    nodes: Sequence[NodeRecord]
    running: Sequence[RunningPod]
    queues: Sequence[QueueRecord]
    groups: Sequence[PendingGroup]


@dataclass(frozen=True, slots=True)
class Release:
    """Start ``count`` tasks of group ``group_key`` as ``pod_class``; the dispatcher placed them on ``node_hint``."""

    group_key: str
    count: int
    pod_class: PodClass
    node_hint: str


@dataclass(frozen=True, slots=True)
class QueueShare:
    """What the operator publishes for one queue (Queue status, ``stowage_queue_*``)."""

    name: str
    allocated: dict[str, dict[str, float]]
    """pool → resource → amount held by its running (and released, unbound) tasks."""
    dominant_share: dict[str, float]
    """pool → weighted dominant share ``max_r(alloc_r/total_r)/weight`` (what DRF compares)."""
    share: dict[str, float]
    """pool → unweighted dominant share ``max_r(alloc_r/total_r)`` (comparable with ``fair_share``)."""
    fair_share: float
    """``weight / Σ weights of the queues with work`` (0 without work)."""
    quota_used: dict[str, dict[str, float]] = field(default_factory=dict)
    """pool → resource → allocated / ``spec.quota`` for each resource the quota names ({} without a quota)."""


# --- the dispatcher ------------------------------------------------------------------------------


@dataclass
class _Arrays:
    """A view as arrays on one resource axis (see ``Dispatcher._arrays``)."""

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
    rows: _Rows | None = None
    opp_pods: tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]] = (
        np.zeros((0, 0)), np.zeros(0, np.int64), np.zeros(0))
    """Bound opportunistic pods: demand (P, R), node, bind time (the ramp-up allowance ``S``)."""


class _Rows:
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


class Dispatcher:
    """Decides releases from a ``DispatchView``; keeps the classifier, FSP trackers and starvation counts."""

    def __init__(self, settings: StowageSettings, clock: Callable[[], float] = time.time, *,
                 on_pass: Callable[[Pool, dispatch.PassInput, dispatch.PassResult], None] | None = None) -> None:
        """``on_pass``: called after each pass with its input and result (benchmarks, debugging)."""
        self.settings = settings
        self.clock = clock
        self.on_pass = on_pass
        self.classifier = classifier.ShortLongClassifier(settings.classifier.short_task_threshold_s)
        self._fsp: dict[str, ordering.FspTracker] = {}  # queue → tracker
        self._fsp_jobs: dict[str, str] = {}  # job key → queue it arrived in
        self._skips: dict[str, int] = {}  # group key → passes skipped (starvation guard)
        self._held: dict[tuple[str, str], str] = {}  # (group key, pool) → node held for it
        self._released: dict[str, list[tuple[str, str]]] = {}  # group key → (node, pool) of recent releases

    # --- learning and state ----------------------------------------------------------------------

    def observe_finished(self, features: Mapping[str, Any], duration_s: float) -> None:
        """Teach the classifier one finished task (OPERA: "upon the completion of tasks")."""
        self.classifier.observe(features, duration_s)

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state a restarted operator needs: what the classifier learned, the starvation
        guard's counts and holds, and where unbound releases were placed. FSP trackers are rebuilt from the
        jobs' arrival times."""
        return {
            "version": _STATE_VERSION,
            "classifier": self.classifier.state_dict(),
            "skips": dict(sorted(self._skips.items())),
            "held": [[key, pool, node] for (key, pool), node in sorted(self._held.items())],
            "released": {key: [list(x) for x in v] for key, v in sorted(self._released.items())},
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict()``'s output. Raises ``ValueError``/``KeyError``/``TypeError`` if malformed.

        The classifier comes back through ``ShortLongClassifier.from_state`` (its counts, O(distinct feature
        values)). Its labels were given under its ``short_task_threshold_s``: a state learned under another
        threshold than the settings' is refused (``ValueError``) rather than mixed.
        """
        if int(state["version"]) != _STATE_VERSION:
            raise ValueError(f"version: this operator reads state version {_STATE_VERSION}, got {state['version']!r}")
        fresh = classifier.ShortLongClassifier.from_state(state["classifier"])
        if fresh.threshold_s != self.classifier.threshold_s:
            raise ValueError(f"classifier.threshold_s: learned under {fresh.threshold_s:g} s, the settings say "
                             f"{self.classifier.threshold_s:g} s (classifier.short_task_threshold_s)")
        skips = {str(k): int(v) for k, v in state["skips"].items()}
        held = {(str(k), str(p)): str(n) for k, p, n in state["held"]}
        released = {str(k): [(str(n), str(p)) for n, p in v] for k, v in state["released"].items()}
        self.classifier = fresh
        self._skips, self._held, self._released = skips, held, released

    def held(self) -> dict[tuple[str, str], str]:
        """(group key, pool) → node held for a starved group (the starvation guard's reservations)."""
        return dict(self._held)

    # --- the decision ----------------------------------------------------------------------------

    def decide(self, view: DispatchView) -> list[Release]:
        """Regular pass, then opportunistic pass (module docstring); releases in the order they were chosen."""
        now = self.clock()
        a = self._arrays(view, trim=True)
        known = {g.key for g in a.groups}
        self._forget(known)
        if not a.groups or not a.node_names:
            return []
        knobs = self.settings.packing
        queues = self._queues(view)
        n_groups = len(a.groups)
        releasable = np.array([max(g.releasable, 0) for g in a.groups], dtype=np.int64)
        intent = [g.intent for g in a.groups]
        shapes, group_shape = np.unique(a.demand, axis=0, return_inverse=True)
        group_shape = group_shape.reshape(-1)
        mean_cap = a.alloc.mean(axis=0)
        work = self._job_work(a, mean_cap)
        arrival = self._job_arrival(a)
        self._fsp_arrive(a, queues, arrival, now)
        weights = np.array([q.weight for q in queues], dtype=np.float64)
        quota = self._quota(a, queues)
        orders = [q.job_order for q in queues]

        def rank(jobs: NDArray[np.int64]) -> NDArray[np.float64]:
            return dispatch.job_ranks(jobs, self._job_queue(a), orders, arrival, work,
                                      lambda q: self._fsp_order(queues[q].name, a, now))

        total = a.alloc.sum(axis=0)
        finished = np.array([g.finished_fraction for g in a.groups], dtype=np.float64)
        skips = np.array([self._skips.get(g.key, 0) for g in a.groups], dtype=np.int64)
        node_index = {n: i for i, n in enumerate(a.node_names)}
        placed: list[tuple[int, int, PodClass]] = []
        skipped = np.zeros(n_groups, dtype=bool)

        def run(pool: Pool, pending: NDArray[np.int64], avail: NDArray[np.float64]) -> None:
            p = 0 if pool is Pool.REGULAR else 1
            held = np.array([node_index.get(self._held.get((g.key, pool.value), ""), -1) for g in a.groups])
            passed = dispatch.PassInput(
                capacity=a.alloc, available=avail, shapes=shapes, group_shape=group_shape, group_job=a.job,
                group_queue=a.queue, pending=pending, finished_fraction=finished, job_work=work,
                queue_alloc=a.queue_alloc[p].copy(), pool_total=total, queue_weight=weights, job_rank=rank,
                skips=skips, held=held, queue_quota=quota)
            result = dispatch.pack(passed, knobs)
            if self.on_pass is not None:
                self.on_pass(pool, passed, result)
            cls = PodClass.REGULAR if pool is Pool.REGULAR else PodClass.OPPORTUNISTIC
            for pl in result.placements:
                g, n = pl.group, pl.node
                releasable[g] -= 1
                (a.reg_alloc if p == 0 else a.opp_alloc)[n] += a.demand[g]
                a.queue_alloc[p, a.queue[g]] += a.demand[g]
                placed.append((g, n, cls))
            skipped[:] |= result.skipped
            for g, group in enumerate(a.groups):
                node = int(result.held[g])
                if node >= 0:
                    self._held[(group.key, pool.value)] = a.node_names[node]
                else:
                    self._held.pop((group.key, pool.value), None)

        regular = np.where([i is not Opportunistic.TRUE for i in intent], releasable, 0)
        run(Pool.REGULAR, regular, self._bandwidth_capped(a, harvest.regular_available(a.alloc, a.reg_alloc)))
        allow = np.array([queues[q].opportunistic for q in a.queue.tolist()], dtype=bool)
        eligible = allow & np.array([i is not Opportunistic.FALSE for i in intent], dtype=bool) & (releasable > 0)
        if eligible.any():
            avail = self._bandwidth_capped(a, self._harvestable(view, a, now))
            fits = alignment.feasible(shapes, avail).any(axis=1)[group_shape]
            eligible &= fits  # only groups that fit some node need the classifier's opinion
            for g in np.flatnonzero(eligible & np.array([i is Opportunistic.AUTO for i in intent])).tolist():
                eligible[g] = self.classifier.is_short(self._features(a, g, mean_cap))
            if eligible.any():
                run(Pool.OPPORTUNISTIC, np.where(eligible, releasable, 0), avail)
        return self._releases(a, placed, skipped)

    def _releases(self, a: _Arrays, placed: list[tuple[int, int, PodClass]], skipped: NDArray[np.bool_]) -> list[
            Release]:
        """Aggregate placements per (group, class, node), first-chosen first; update the guard's counts."""
        counts: dict[tuple[int, PodClass, int], int] = {}
        for g, n, cls in placed:
            counts[(g, cls, n)] = counts.get((g, cls, n), 0) + 1
            pool = Pool.REGULAR if cls is PodClass.REGULAR else Pool.OPPORTUNISTIC
            self._released.setdefault(a.groups[g].key, []).append((a.node_names[n], pool.value))
        got = {g for g, _, _ in placed}
        for g, group in enumerate(a.groups):
            if g in got:
                self._skips.pop(group.key, None)
                for pool in _POOLS:
                    self._held.pop((group.key, pool.value), None)
            elif skipped[g]:
                self._skips[group.key] = self._skips.get(group.key, 0) + 1
        return [Release(a.groups[g].key, k, cls, a.node_names[n]) for (g, cls, n), k in counts.items()]

    @staticmethod
    def _quota(a: _Arrays, queues: Sequence[QueueRecord]) -> NDArray[np.float64] | None:
        """(Q, R) ``spec.quota`` on the view's resource axis, ``+inf`` where none; None when no queue has one."""
        if not any(q.quota for q in queues):
            return None
        out = np.full((len(queues), len(a.resources)), np.inf)
        for i, q in enumerate(queues):
            for r, name in enumerate(a.resources):
                if q.quota is not None and name in q.quota:
                    out[i, r] = q.quota[name]
        return out

    # --- queue numbers ---------------------------------------------------------------------------

    def queue_shares(self, view: DispatchView) -> list[QueueShare]:
        """Per queue: allocation, dominant share per pool, fair share (``fairness``), from the view as it is."""
        a = self._arrays(view)
        queues = self._queues(view)
        weights = np.array([q.weight for q in queues], dtype=np.float64)
        total = a.alloc.sum(axis=0) if a.node_names else np.zeros(len(a.resources))
        active = np.zeros(len(queues), dtype=bool)
        q_index = {q.name: i for i, q in enumerate(queues)}
        for g in view.groups:
            if g.queue in q_index and (g.releasable > 0 or g.remaining_tasks > 0 or g.unbound > 0):
                active[q_index[g.queue]] = True
        active |= a.queue_alloc.sum(axis=(0, 2)) > 0
        fair = fairness.fair_share(weights, active) if queues else np.zeros(0)
        out = []
        shares = {pool.value: fairness.dominant_shares(a.queue_alloc[p], total, weights) for p, pool in
                  enumerate(_POOLS)} if queues else {}
        plain = {pool.value: fairness.dominant_shares(a.queue_alloc[p], total, np.ones(len(queues))) for p, pool in
                 enumerate(_POOLS)} if queues else {}
        for i, q in enumerate(queues):
            out.append(QueueShare(
                name=q.name,
                allocated={pool.value: {r: float(x) for r, x in zip(a.resources, a.queue_alloc[p, i], strict=True)
                                        if x > 0} for p, pool in enumerate(_POOLS)},
                dominant_share={pool: float(s[i]) for pool, s in shares.items()},
                share={pool: float(s[i]) for pool, s in plain.items()},
                fair_share=float(fair[i]),
                quota_used=self._quota_used(a, p_alloc=a.queue_alloc[:, i], quota=q.quota),
            ))
        return out

    @staticmethod
    def _quota_used(a: _Arrays, p_alloc: NDArray[np.float64],
                    quota: Mapping[str, float] | None) -> dict[str, dict[str, float]]:
        """pool → resource → allocated / quota, for the resources ``quota`` names (a zero quota counts as used up)."""
        if not quota:
            return {}
        index = {r: k for k, r in enumerate(a.resources)}
        out: dict[str, dict[str, float]] = {}
        for p, pool in enumerate(_POOLS):
            used = {}
            for name, limit in sorted(quota.items()):
                held = float(p_alloc[p, index[name]]) if name in index else 0.0
                used[name] = held / limit if limit > 0 else 1.0
            out[pool.value] = used
        return out

    # --- building arrays -------------------------------------------------------------------------

    @staticmethod
    def _queues(view: DispatchView) -> list[QueueRecord]:
        seen: dict[str, QueueRecord] = {}
        for q in view.queues:
            seen.setdefault(q.name, q)
        return list(seen.values())

    def _arrays(self, view: DispatchView, *, trim: bool = False) -> _Arrays:
        """Nodes, allocations and groups on one resource axis: cpu, memory, disk, network, then extended names."""
        queues = self._queues(view)
        q_index = {q.name: i for i, q in enumerate(queues)}
        extra: set[str] = set()
        for n in view.nodes:
            extra.update(n.allocatable)
        for g in view.groups:
            extra.update(g.demand)
        resources = CORE_RESOURCES + tuple(sorted(extra - set(CORE_RESOURCES)))
        rows = _Rows(resources)
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
        np.add.at(opp, on[(on >= 0) & is_opp], demand[(on >= 0) & is_opp])
        np.add.at(qa, (is_opp[queue >= 0].astype(np.int64), queue[queue >= 0]), demand[queue >= 0])
        a = _Arrays(resources, node_names, alloc, reg, opp, qa)
        a.rows = rows
        mine = (on >= 0) & is_opp
        a.opp_pods = (demand[mine], on[mine],
                      np.array([math.nan if p.bound_at_s is None else p.bound_at_s for p, m in zip(pods, mine,
                                                                                                  strict=True) if m],
                               dtype=np.float64))
        a.groups = [g for g in view.groups if g.queue in q_index]  # a group of an unknown queue waits for it
        a.demand = rows.of([g.demand for g in a.groups])
        a.queue = np.array([q_index[g.queue] for g in a.groups], dtype=np.int64)
        jobs: dict[str, int] = {}
        for g in a.groups:
            jobs.setdefault(g.job if g.job is not None else g.key, len(jobs))
        a.job_keys = list(jobs)
        a.job = np.array([jobs[g.job if g.job is not None else g.key] for g in a.groups], dtype=np.int64)
        self._reserve_unbound(a, node_index, trim=trim)
        return a

    def _reserve_unbound(self, a: _Arrays, node_index: Mapping[str, int], *, trim: bool) -> None:
        """Released-but-unbound tasks hold their demand where they were released.

        The newest ``unbound`` releases of a group are taken as the unbound ones (earlier releases bind
        first); ``trim`` forgets the older ones (``decide`` does, before adding its own).
        """
        for g, group in enumerate(a.groups):
            recent = self._released.get(group.key, [])
            keep = recent[len(recent) - group.unbound:] if group.unbound > 0 else []
            if trim and keep:
                self._released[group.key] = keep
            elif trim:
                self._released.pop(group.key, None)
            for k in range(max(group.unbound, 0)):
                pool = keep[k][1] if k < len(keep) else Pool.REGULAR.value  # unknown (restart): count as regular
                p = 0 if pool == Pool.REGULAR.value else 1
                a.queue_alloc[p, a.queue[g]] += a.demand[g]
                n = node_index.get(keep[k][0]) if k < len(keep) else None
                if n is not None:
                    (a.reg_alloc if p == 0 else a.opp_alloc)[n] += a.demand[g]

    def _forget(self, known: set[str]) -> None:
        """Drop the state of groups that left the view (finished, deleted)."""
        for key in [k for k in self._skips if k not in known]:
            del self._skips[key]
        for hk in [k for k in self._held if k[0] not in known]:
            del self._held[hk]
        for key in [k for k in self._released if k not in known]:
            del self._released[key]

    @staticmethod
    def _job_queue(a: _Arrays) -> NDArray[np.int64]:
        out = np.zeros(len(a.job_keys), dtype=np.int64)
        out[a.job] = a.queue
        return out

    @staticmethod
    def _job_arrival(a: _Arrays) -> NDArray[np.float64]:
        out = np.full(len(a.job_keys), math.inf)
        for g, group in enumerate(a.groups):
            j = int(a.job[g])
            if not math.isnan(group.arrival_s):
                out[j] = min(out[j], group.arrival_s)
        return out

    @staticmethod
    def _job_work(a: _Arrays, mean_cap: NDArray[np.float64]) -> NDArray[np.float64]:
        """Tetris remaining work per job: Σ groups duration × remaining tasks × Σ_r d_r/C̄_r."""
        dur = np.array([g.expected_duration_s for g in a.groups], dtype=np.float64)
        left = np.array([max(g.remaining_tasks, 0) for g in a.groups], dtype=np.float64)
        return remaining_work.remaining_work(dur * left, a.demand, a.job, len(a.job_keys), mean_cap)

    def _features(self, a: _Arrays, g: int, mean_cap: NDArray[np.float64]) -> Mapping[str, str]:
        group = a.groups[g]
        if group.features is not None:
            return group.features
        norm = np.where(mean_cap > 0, mean_cap, 1.0)
        demand = dict(zip(a.resources, (a.demand[g] / norm).tolist(), strict=True))
        job_name = group.job.rsplit("/", 1)[-1] if group.job is not None else group.key.rsplit("/", 1)[-1]
        return dispatch.task_features(group.queue, job_name, group.group, demand, group.job_progress)

    # --- FSP -------------------------------------------------------------------------------------

    def _fsp_arrive(self, a: _Arrays, queues: Sequence[QueueRecord], arrival: NDArray[np.float64],
                    now: float) -> None:
        """New jobs of FSP queues enter their queue's virtual PS system; jobs that left the view leave it."""
        job_queue = self._job_queue(a)
        present = {key: j for j, key in enumerate(a.job_keys)}
        for job, q in list(self._fsp_jobs.items()):
            if job not in present or queues[int(job_queue[present[job]])].name != q:
                self._fsp[q].remove(job)
                del self._fsp_jobs[job]
        total = a.alloc.sum(axis=0)
        total = np.where(total > 0, total, 1.0)
        # FSP job size: work in "whole cluster" seconds on its dominant resource (as the simulator sizes it).
        dur = np.nan_to_num(np.array([g.expected_duration_s for g in a.groups], dtype=np.float64), nan=0.0)
        tasks = np.array([max(g.remaining_tasks, 0) for g in a.groups], dtype=np.float64)
        size = np.zeros(len(a.job_keys))
        np.add.at(size, a.job, dur * tasks * (a.demand / total).max(axis=1, initial=0.0))
        new = [j for j, key in enumerate(a.job_keys)
               if key not in self._fsp_jobs and queues[int(job_queue[j])].job_order is JobOrder.FSP]
        for j in sorted(new, key=lambda j: (arrival[j], j)):
            q = queues[int(job_queue[j])].name
            tracker = self._fsp.setdefault(q, ordering.FspTracker(1.0))
            t = float(arrival[j]) if math.isfinite(arrival[j]) else now
            # A job that left the view and came back before its virtual finish is still tracked.
            with contextlib.suppress(InvalidInput):
                tracker.arrive(a.job_keys[j], t, float(size[j]), 1.0)
            self._fsp_jobs[a.job_keys[j]] = q

    def _fsp_order(self, queue: str, a: _Arrays, now: float) -> list[int]:
        tracker = self._fsp.get(queue)
        if tracker is None:
            return []
        tracker.advance(now)
        index = {key: j for j, key in enumerate(a.job_keys)}
        return [index[k] for k in tracker.order() if k in index]  # type: ignore[index]

    # --- capacity --------------------------------------------------------------------------------

    @staticmethod
    def _bandwidth_capped(a: _Arrays, avail: NDArray[np.float64]) -> NDArray[np.float64]:
        """Declared bandwidth counts for every pod, regular or opportunistic (the extender's filter)."""
        bw = np.array([r in (DISK, NETWORK) for r in a.resources], dtype=bool)
        out = avail.copy()
        out[:, bw] = np.minimum(out[:, bw], np.maximum(a.alloc[:, bw] - a.reg_alloc[:, bw] - a.opp_alloc[:, bw],
                                                       0.0))
        return out

    def _harvestable(self, view: DispatchView, a: _Arrays, now: float) -> NDArray[np.float64]:
        """``A_opp`` per node (UBIS Alg. 1 l.21, OPERA Eq. 4); nodes without a usage sample harvest nothing."""
        h = self.settings.harvest
        sampled = np.array([n.usage is not None for n in view.nodes], dtype=bool)
        usage = np.full(a.alloc.shape, np.nan)
        usage[sampled] = a.rows.of([n.usage for n in view.nodes if n.usage is not None])
        blocked = np.zeros(a.alloc.shape)
        has_block = np.array([n.blocked is not None for n in view.nodes], dtype=bool)
        blocked[has_block] = a.rows.of([n.blocked for n in view.nodes if n.blocked is not None])
        demands, nodes, bound = a.opp_pods
        assumed = harvest.assumed(demands, bound, nodes, now, h.ramp_up_s, len(a.node_names))
        out = harvest.harvestable(a.alloc, usage, blocked, assumed, h.t_alloc.array(a.resources))
        out[~sampled | ~np.array([n.harvest for n in view.nodes], dtype=bool)] = 0.0
        return out
