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
SRTF, or FSP with one ``FspTracker`` per queue, ``fsp_queues``), boost groups at the barrier, and pick by Tetris
alignment + remaining work. A released task's demand comes off its node's free vector in the dispatcher's
copy before the next one is chosen, so a decision never releases more than fits. Tasks released by an
earlier ``decide`` and not yet bound (``PendingGroup.unbound``) keep their demand on the node they were
released for, so a slow scheduler does not make the same capacity count twice.

Modules: ``dispatch_records`` (the records in and out, re-exported here), ``dispatch_arrays`` (a view as
arrays, the pools' free vectors), ``fsp_queues`` (FSP order), this one (the decision and its state).

Starvation guard (``packing.starvation_skip_limit`` ε_s, OPERA multi-chance reservation): see
``stowage.policy.dispatch``; the skip counts and held nodes live here, by group key, and survive a restart
through ``state_dict``.

Fairness over time (``packing.queue_share_deficit_s`` > 0): each pool's ``fairness.QueueDeficits`` lives here,
listed by queue name, brought up to each pass's time and updated with the shares the pass leaves. They survive a
restart through ``state_dict`` (``deficit_state``); the time the operator was down accrues nothing (nobody could
be served then): the first pass after ``load_state`` is their new reference time (``QueueDeficits.resumed``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from stowage.operator import deficit_state
from stowage.operator.dispatch_arrays import (
    ViewArrays,
    bandwidth_capped,
    harvestable,
    job_arrival,
    job_queue,
    job_work,
    queue_records,
    view_arrays,
)
from stowage.operator.dispatch_records import (
    DispatchView,
    NodeRecord,
    PendingGroup,
    QueueRecord,
    QueueShare,
    Release,
    RunningPod,
)
from stowage.operator.fsp_queues import FspQueues

from stowage.config import StowageSettings
from stowage.labels import Opportunistic, PodClass
from stowage.model import Pool
from stowage.policy import alignment, classifier, dispatch, fairness, harvest

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

_STATE_VERSION = 3  # 3: the queue deficits; 2: the classifier's own state_dict (1 replayed observations)
_READS = (2, 3)  # a version-2 state (the previous release's) loads with no deficits, as it had none
_POOLS = (Pool.REGULAR, Pool.OPPORTUNISTIC)


# --- the dispatcher ------------------------------------------------------------------------------




class Dispatcher:
    """Decides releases from a ``DispatchView``; keeps the classifier, FSP trackers and starvation counts."""

    def __init__(self, settings: StowageSettings, clock: Callable[[], float] = time.time, *,
                 on_pass: Callable[[Pool, dispatch.PassInput, dispatch.PassResult], None] | None = None) -> None:
        """``on_pass``: called after each pass with its input and result (benchmarks, debugging)."""
        self.settings = settings
        self.clock = clock
        self.on_pass = on_pass
        self.classifier = classifier.ShortLongClassifier(settings.classifier.short_task_threshold_s)
        self._fsp = FspQueues()
        self._skips: dict[str, int] = {}  # group key → passes skipped (starvation guard)
        self._held: dict[tuple[str, str], str] = {}  # (group key, pool) → node held for it
        self._released: dict[str, list[tuple[str, str]]] = {}  # group key → (node, pool) of recent releases
        # packing.queue_share_deficit_s: per pool, the queue names the deficits are listed by, and the deficits
        self._deficits: deficit_state.Deficits = {}
        self._resume = False  # deficits restored by load_state: the next pass's time is their reference time

    # --- learning and state ----------------------------------------------------------------------

    def observe_finished(self, features: Mapping[str, Any], duration_s: float) -> None:
        """Teach the classifier one finished task (OPERA: "upon the completion of tasks")."""
        self.classifier.observe(features, duration_s)

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state a restarted operator needs: what the classifier learned, the starvation
        guard's counts and holds, where unbound releases were placed, and each pool's queue deficits
        (``deficit_state``; none while ``packing.queue_share_deficit_s`` is 0). FSP trackers are rebuilt from
        the jobs' arrival times."""
        return {
            "version": _STATE_VERSION,
            "classifier": self.classifier.state_dict(),
            "skips": dict(sorted(self._skips.items())),
            "held": [[key, pool, node] for (key, pool), node in sorted(self._held.items())],
            "released": {key: [list(x) for x in v] for key, v in sorted(self._released.items())},
            "deficits": deficit_state.to_state(self._deficits),
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict()``'s output. Raises ``ValueError``/``KeyError``/``TypeError`` if malformed.

        The classifier comes back through ``ShortLongClassifier.from_state`` (its counts, O(distinct feature
        values)). Its labels were given under its ``short_task_threshold_s``: a state learned under another
        threshold than the settings' is refused (``ValueError``) rather than mixed.

        Queue deficits: version 2 (no deficits yet) starts every queue owed nothing; with
        ``packing.queue_share_deficit_s`` 0 they are dropped (nothing would keep them current). A queue deleted
        meanwhile drops out at the next pass, one added starts at 0 (``QueueDeficits.reordered``); the downtime
        accrues nothing (module docstring).
        """
        version = int(state["version"])
        if version not in _READS:
            raise ValueError(f"version: this operator reads state versions {_READS}, got {state['version']!r}")
        fresh = classifier.ShortLongClassifier.from_state(state["classifier"])
        if fresh.threshold_s != self.classifier.threshold_s:
            raise ValueError(f"classifier.threshold_s: learned under {fresh.threshold_s:g} s, the settings say "
                             f"{self.classifier.threshold_s:g} s (classifier.short_task_threshold_s)")
        skips = {str(k): int(v) for k, v in state["skips"].items()}
        held = {(str(k), str(p)): str(n) for k, p, n in state["held"]}
        released = {str(k): [(str(n), str(p)) for n, p in v] for k, v in state["released"].items()}
        deficits = deficit_state.from_state(state.get("deficits")) if version >= 3 else {}
        self.classifier = fresh
        self._skips, self._held, self._released = skips, held, released
        self._deficits = deficits if self.settings.packing.queue_share_deficit_s > 0 else {}
        self._resume = bool(self._deficits)

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
        if self._resume:  # restored deficits: the time since the last pass before the restart accrues nothing
            self._deficits = {p: (names, d.resumed(now)) for p, (names, d) in self._deficits.items()}
            self._resume = False
        knobs = self.settings.packing
        queues = queue_records(view)
        n_groups = len(a.groups)
        releasable = np.array([max(g.releasable, 0) for g in a.groups], dtype=np.int64)
        intent = [g.intent for g in a.groups]
        shapes, group_shape = np.unique(a.demand, axis=0, return_inverse=True)
        group_shape = group_shape.reshape(-1)
        mean_cap = a.alloc.mean(axis=0)
        work = job_work(a, mean_cap)
        arrival = job_arrival(a)
        self._fsp.arrive(a, queues, arrival, now)
        weights = np.array([q.weight for q in queues], dtype=np.float64)
        quota = self._quota(a, queues)
        orders = [q.job_order for q in queues]

        def rank(jobs: NDArray[np.int64]) -> NDArray[np.float64]:
            return dispatch.job_ranks(jobs, job_queue(a), orders, arrival, work,
                                      lambda q: self._fsp.order(queues[q].name, a, now))

        total = a.alloc.sum(axis=0)
        finished = np.array([g.finished_fraction for g in a.groups], dtype=np.float64)
        skips = np.array([self._skips.get(g.key, 0) for g in a.groups], dtype=np.int64)
        node_index = {n: i for i, n in enumerate(a.node_names)}
        placed: list[tuple[int, int, PodClass]] = []
        skipped = np.zeros(n_groups, dtype=bool)

        def run(pool: Pool, pending: NDArray[np.int64], avail: NDArray[np.float64]) -> None:
            p = 0 if pool is Pool.REGULAR else 1
            held = np.array([node_index.get(self._held.get((g.key, pool.value), ""), -1) for g in a.groups])
            deficits = self._queue_deficits(pool, queues)
            passed = dispatch.PassInput(
                capacity=a.alloc, available=avail, shapes=shapes, group_shape=group_shape, group_job=a.job,
                group_queue=a.queue, pending=pending, finished_fraction=finished, job_work=work,
                queue_alloc=a.queue_alloc[p].copy(), pool_total=total, queue_weight=weights, job_rank=rank,
                skips=skips, held=held, queue_quota=quota,
                queue_overdue=None if deficits is None else deficits.overdue(knobs.queue_share_deficit_s, weights,
                                                                                now))
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
            if deficits is not None:  # the shares this pass leaves hold until the next one
                left = pending - np.bincount([pl.group for pl in result.placements], minlength=n_groups)
                self._deficits[pool] = (tuple(q.name for q in queues), fairness.after_pass(
                    deficits, a.queue_alloc[p], total, weights, a.queue[left > 0], now))
            for g, group in enumerate(a.groups):
                node = int(result.held[g])
                if node >= 0:
                    self._held[(group.key, pool.value)] = a.node_names[node]
                else:
                    self._held.pop((group.key, pool.value), None)

        regular = np.where([i is not Opportunistic.TRUE for i in intent], releasable, 0)
        run(Pool.REGULAR, regular, bandwidth_capped(a, harvest.regular_available(a.alloc, a.reg_alloc)))
        allow = np.array([queues[q].opportunistic for q in a.queue.tolist()], dtype=bool)
        eligible = allow & np.array([i is not Opportunistic.FALSE for i in intent], dtype=bool) & (releasable > 0)
        if eligible.any():
            avail = bandwidth_capped(a, harvestable(self.settings.harvest, view, a, now))
            fits = alignment.feasible(shapes, avail).any(axis=1)[group_shape]
            eligible &= fits  # only groups that fit some node need the classifier's opinion
            for g in np.flatnonzero(eligible & np.array([i is Opportunistic.AUTO for i in intent])).tolist():
                eligible[g] = self.classifier.is_short(self._features(a, g, mean_cap))
            if eligible.any():
                run(Pool.OPPORTUNISTIC, np.where(eligible, releasable, 0), avail)
        return self._releases(a, placed, skipped)

    def _queue_deficits(self, pool: Pool, queues: Sequence[QueueRecord]) -> fairness.QueueDeficits | None:
        """The pool's deficits listed by ``queues`` (fairness over time); None when it is off (deficit 0)."""
        if self.settings.packing.queue_share_deficit_s <= 0:
            return None
        before, state = self._deficits.get(pool, ((), fairness.QueueDeficits()))
        return state.reordered(before, [q.name for q in queues])

    def _releases(self, a: ViewArrays, placed: list[tuple[int, int, PodClass]], skipped: NDArray[np.bool_]) -> list[
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
    def _quota(a: ViewArrays, queues: Sequence[QueueRecord]) -> NDArray[np.float64] | None:
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
        queues = queue_records(view)
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
    def _quota_used(a: ViewArrays, p_alloc: NDArray[np.float64],
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

    def _arrays(self, view: DispatchView, *, trim: bool = False) -> ViewArrays:
        """``dispatch_arrays.view_arrays`` plus the released-but-unbound tasks where they were released."""
        a = view_arrays(view)
        self._reserve_unbound(a, {name: i for i, name in enumerate(a.node_names)}, trim=trim)
        return a

    def _reserve_unbound(self, a: ViewArrays, node_index: Mapping[str, int], *, trim: bool) -> None:
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

    def _features(self, a: ViewArrays, g: int, mean_cap: NDArray[np.float64]) -> Mapping[str, str]:
        group = a.groups[g]
        if group.features is not None:
            return group.features
        norm = np.where(mean_cap > 0, mean_cap, 1.0)
        demand = dict(zip(a.resources, (a.demand[g] / norm).tolist(), strict=True))
        job_name = group.job.rsplit("/", 1)[-1] if group.job is not None else group.key.rsplit("/", 1)[-1]
        return dispatch.task_features(group.queue, job_name, group.group, demand, group.job_progress)
