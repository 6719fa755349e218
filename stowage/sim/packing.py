"""Tetris packing (``tetris``) and everything Stowage does on top of it (``stowage``).

Every formula is ``stowage.policy``'s: alignment, remaining work and the combined
score, DRF shares and the fairness and barrier knobs, job order (FIFO, SRTF,
FSP), harvestable capacity, and OPERA's short/long classifier.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.model import JobOrder
from stowage.policy import alignment, dispatch, fairness, ordering, remaining_work
from stowage.sim.presets import OPP_AUTO, OPP_TRUE, Preset

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["PackingPreset"]


class PackingPreset(Preset):
    """Tetris packing (alignment + remaining work, fairness and barrier knobs); ``stowage`` adds the rest."""

    operator_paced = True  # in a cluster these passes are the operator dispatcher's (SimConfig.pass_delay_s)

    def __init__(self, name: str, *, harvesting: bool, job_order: bool, classifier: bool) -> None:
        self.name, self.harvesting, self.job_order, self.use_classifier = name, harvesting, job_order, classifier

    def attach(self, sim: Simulation) -> None:
        super().attach(sim)
        # The starvation guard is the operator's: the presets replay the papers' policies without it.
        self.knobs = dataclasses.replace(sim.settings.packing, starvation_skip_limit=0)
        self.mean_cap = sim.cluster.cap.mean(axis=0)
        self._cap_norm = np.where(self.mean_cap > 0, self.mean_cap, 1.0)
        self._static_features: dict[int, dict[str, str]] = {}
        self._static_ids: dict[tuple[tuple[str, str], ...], int] = {}
        self._static_id = np.full(sim.n_groups, -1, dtype=np.int64)  # index into _static_ids, -1 = not yet
        self._job_tasks = np.bincount(sim.g_job, weights=sim.g_tasks, minlength=sim.n_jobs)
        self.fsp = [ordering.FspTracker(1.0) for _ in sim.queue_names]
        self._ranks_kept: dict[int, tuple[bytes, NDArray[np.float64]]] = {}  # queue → (its jobs' key, ranks)
        # Fairness over time (packing.queue_share_deficit_s): each queue's deficit, per pool.
        self._deficits = [fairness.QueueDeficits(), fairness.QueueDeficits()]
        self.classifier = None
        if self.use_classifier:
            from stowage.policy import classifier

            self.classifier = classifier.ShortLongClassifier(sim.settings.classifier.short_task_threshold_s)
        total = np.where(sim.cluster.total > 0, sim.cluster.total, 1.0)
        # FSP job size: work in "whole cluster" seconds (dominant resource).
        self._size = np.zeros(sim.n_jobs)
        self._path = _chains(sim.g_dur, sim.g_children)
        np.add.at(self._size, sim.g_job, sim.g_dur * sim.g_tasks * (sim.g_demand / total).max(axis=1))

    # --- hooks ------------------------------------------------------------------------------------

    def on_job_arrived(self, j: int) -> None:
        sim = self.sim
        q = int(sim.j_queue[j])
        if self.job_order and sim.q_order[q] is JobOrder.FSP:
            self.fsp[q].arrive(j, sim.now, float(self._size[j]), 1.0)

    def on_job_finished(self, j: int) -> None:
        q = int(self.sim.j_queue[j])
        if j in self.fsp[q]:
            self.fsp[q].remove(j)

    def _features(self, g: int) -> dict[str, str]:
        """OPERA Eq. 1 properties of a task of group ``g``: framework, app, stage, progress, demand."""
        from stowage.policy import classifier

        sim = self.sim
        j = int(sim.g_job[g])
        static = self._static(g)
        groups = sim.j_groups[j]
        done = sum(int(sim.g_done[x]) for x in groups) / max(sum(int(sim.g_tasks[x]) for x in groups), 1)
        return {**static, "progress": classifier.bucket_progress(done)}

    def _static(self, g: int) -> dict[str, str]:
        """The properties of group ``g``'s tasks that never change (all but progress)."""
        static = self._static_features.get(g)
        if static is None:
            sim = self.sim
            static = self._static_features[g] = dispatch.task_features(
                sim.queue_names[sim.g_queue[g]],
                sim.jobs[int(sim.g_job[g])].name,
                sim.g_name[g],
                dict(zip(sim.resources, (sim.g_demand[g] / self._cap_norm).tolist(), strict=True)),
            )
            self._static_id[g] = self._static_ids.setdefault(tuple(static.items()), len(self._static_ids))
        return static

    def _short(self, groups: NDArray[np.int64]) -> NDArray[np.bool_]:
        """``classifier.is_short`` of each group's features, asked once per distinct set of features.

        Groups with equal static properties whose jobs are in the same progress bucket have equal
        features, so they get the same answer; the classifier is asked with one of them.
        """
        from stowage.policy import classifier

        assert self.classifier is not None
        if groups.size == 0:
            return np.zeros(0, dtype=bool)
        sim = self.sim
        for g in groups[self._static_id[groups] < 0].tolist():
            self._static(g)
        j_done = np.bincount(sim.g_job, weights=sim.g_done, minlength=sim.n_jobs)
        progress = j_done[sim.g_job[groups]] / np.maximum(self._job_tasks[sim.g_job[groups]], 1.0)
        values, which = np.unique(progress, return_inverse=True)
        names = [classifier.bucket_progress(v) for v in values.tolist()]
        bucket = np.unique(names, return_inverse=True)[1].reshape(-1)[which.reshape(-1)]
        _, first, inverse = np.unique(self._static_id[groups] * len(names) + bucket,
                                         return_index=True, return_inverse=True)
        answers = np.array([self.classifier.is_short(self._features(int(groups[i]))) for i in first.tolist()],
                           dtype=bool)
        return answers[inverse.reshape(-1)]

    def on_finished(self, groups: NDArray[np.int64], durations: NDArray[np.float64]) -> None:
        if self.classifier is None:
            return
        # OPERA §III-B: learned "upon the completion of tasks", from how long they really ran.
        features: dict[int, dict[str, str]] = {}
        for g, duration in zip(groups.tolist(), durations.tolist(), strict=True):
            if g not in features:
                features[g] = self._features(g)
            self.classifier.observe(features[g], duration)

    # --- ordering ---------------------------------------------------------------------------------

    @staticmethod
    def _bandwidth_capped(sim: Simulation, avail: NDArray[np.float64]) -> NDArray[np.float64]:
        """Declared bandwidth counts for every pod, regular or opportunistic (the extender's filter).

        Opportunistic pods keep their disk/network annotations (only cpu and memory requests
        are zeroed), so on those columns what is left is capacity − every pod's declared demand.
        """
        c = sim.cluster
        bw = sim.io_resources
        out = avail.copy()
        out[:, bw] = np.minimum(out[:, bw], np.maximum(c.cap[:, bw] - c.reg_alloc[:, bw] - c.opp_alloc[:, bw], 0.0))
        return out

    def _job_work(self, sim: Simulation) -> NDArray[np.float64]:
        if not hasattr(self, "_work"):
            self._work = _JobWork(sim.g_dur, sim.g_demand, sim.g_job, sim.j_groups, self.mean_cap)
        return self._work.current((sim.g_pending + sim.g_running).astype(np.float64))

    def _job_rank(self, sim: Simulation, jobs: NDArray[np.int64], work: _Lazy) -> NDArray[np.float64]:
        """``dispatch.job_ranks`` with this run's queues; FSP trackers are advanced to now when asked."""

        def fsp_order(q: int) -> list[int]:
            self.fsp[q].advance(sim.now)
            return self.fsp[q].order()  # type: ignore[return-value]

        # job_ranks ranks each queue's jobs on their own, so it is asked per queue, and a FIFO or SRTF
        # queue whose jobs (and, for SRTF, their work) are those of the last pass gets the same ranks
        # again. FSP queues are always asked: asking advances their tracker.
        p = work()
        queues = sim.j_queue[jobs]
        rank = np.empty(jobs.size, dtype=np.float64)
        for q in np.unique(queues).tolist():
            sel = np.flatnonzero(queues == q)
            js = jobs[sel]
            order = sim.q_order[q]
            if order is JobOrder.FSP:
                rank[sel] = dispatch.job_ranks(js, sim.j_queue, sim.q_order, sim.j_arrival, p, fsp_order)
                continue
            key = js.tobytes() + (p[js].tobytes() if order is JobOrder.SRTF else b"")
            kept = self._ranks_kept.get(q)
            if kept is None or kept[0] != key:
                kept = self._ranks_kept[q] = (key, dispatch.job_ranks(js, sim.j_queue, sim.q_order, sim.j_arrival,
                                                                      p, fsp_order))
            rank[sel] = kept[1]
        return rank

    # --- the pass ---------------------------------------------------------------------------------

    def schedule(self, sim: Simulation) -> None:
        ready = sim.ready_groups()
        if ready.size == 0:
            return
        work = _Lazy(lambda: self._job_work(sim))
        if sim.regular_changed:  # after a bare monitor tick the regular room is unchanged
            regular = ready[sim.j_opp[sim.g_job[ready]] != OPP_TRUE] if self.harvesting else ready
            self._pack(sim, regular, self._bandwidth_capped(sim, sim.regular_free()), work, opp=False)
        if self.harvesting:
            ready = sim.ready_groups()
            ready = ready[self._opp_eligible(sim, ready)]
            if not ready.size:
                return
            avail = self._bandwidth_capped(sim, self._harvestable(sim))
            # Only groups that fit some node's harvestable room need the classifier's opinion.
            present, shape_of = np.unique(sim.g_shape[ready], return_inverse=True)
            ready = ready[alignment.feasible(sim.shapes[present], avail).any(axis=1)[shape_of.reshape(-1)]]
            if self.classifier is not None and ready.size:
                short = sim.j_opp[sim.g_job[ready]] != OPP_AUTO
                short[~short] = self._short(ready[~short])
                ready = ready[short]
            if ready.size:
                self._pack(sim, ready, avail, work, opp=True)

    def _pack(self, sim: Simulation, groups: NDArray[np.int64], avail: NDArray, work: _Lazy, opp: bool) -> None:
        """One ``dispatch.pack`` pass over ``groups`` in one pool; its placements become ``sim.place`` calls."""
        if groups.size == 0:
            return
        pool = 1 if opp else 0
        passed = dispatch.PassInput(
            capacity=sim.cluster.cap,
            available=avail,
            shapes=sim.shapes,
            group_shape=sim.g_shape[groups],
            group_job=sim.g_job[groups],
            group_queue=sim.g_queue[groups],
            pending=sim.g_pending[groups],
            finished_fraction=sim.g_done[groups] / np.maximum(sim.g_tasks[groups], 1),
            job_work=work,
            queue_alloc=sim.queue_alloc[pool],
            pool_total=sim.cluster.total,
            queue_weight=sim.q_weight,
            job_rank=(lambda jobs: self._job_rank(sim, jobs, work)) if self.job_order else None,
            queue_overdue=self._overdue(sim, pool),
            group_duration_s=sim.g_dur[groups],
            group_path_s=self._path[groups],
        )
        for placed in dispatch.pack(passed, self.knobs).placements:
            sim.place(int(groups[placed.group]), placed.node, opp=opp)
        self._note_shares(sim, groups, pool)

    def _overdue(self, sim: Simulation, pool: int) -> NDArray[np.bool_] | None:
        """``PassInput.queue_overdue`` for a pass now: None (weighted DRF at every slot) when the threshold is 0."""
        threshold = self.knobs.queue_share_deficit_s
        return self._deficits[pool].overdue(threshold, sim.q_weight, sim.now) if threshold > 0 else None

    def _note_shares(self, sim: Simulation, groups: NDArray[np.int64], pool: int) -> None:
        """Carry the pool's deficits past a pass: the shares it left hold until the next pass."""
        if self.knobs.queue_share_deficit_s <= 0:
            return
        waiting = groups[sim.g_pending[groups] > 0]
        self._deficits[pool] = fairness.after_pass(self._deficits[pool], sim.queue_alloc[pool], sim.cluster.total,
                                                   sim.q_weight, sim.g_queue[waiting], sim.now)


def _chains(duration: NDArray[np.float64], children: list[list[int]]) -> NDArray[np.float64]:
    """(G,) each group's duration plus the longest chain of durations through the groups that wait on it."""
    out = np.full(duration.shape[0], np.nan)
    for start in range(duration.shape[0]):
        stack, open_ = [start], {start}
        while stack:  # iterative depth-first: a deep chain of barriers cannot overflow the call stack
            g = stack[-1]
            todo = [c for c in children[g] if np.isnan(out[c]) and c not in open_]  # (a cycle is cut)
            if todo:  # one at a time: the stack is then a path, and open_ its groups
                stack.append(todo[0])
                open_.add(todo[0])
                continue
            open_.discard(g)
            stack.pop()
            out[g] = duration[g] + max((out[c] for c in children[g] if not np.isnan(out[c])), default=0.0)
    return out


class _JobWork:
    """``remaining_work.remaining_work(dur · left, demand, job, J, C̄)`` kept across passes, same bits.

    Only the jobs whose groups' task counts changed since the last call are summed again. A
    job's groups are contiguous and ascending (``Simulation.j_groups``), and ``np.bincount`` adds
    in index order from 0.0, so a plain left-to-right sum over the job's groups gives its bits.
    ``per_task`` is ``dur · (demand @ inv)`` elementwise, with ``demand @ inv`` taken once on the
    same matrix the plain call uses.
    """

    _FULL = 0.25  # above this fraction of changed groups, one plain call is cheaper than the loop

    def __init__(self, dur: NDArray[np.float64], demand: NDArray[np.float64], job: NDArray[np.int64],
                 job_groups: list[list[int]], mean_cap: NDArray[np.float64]) -> None:
        self.dur, self.demand, self.job, self.job_groups, self.mean_cap = dur, demand, job, job_groups, mean_cap
        self.unit = remaining_work.work_rate(np.asarray(demand, dtype=np.float64),
                                             np.asarray(mean_cap, dtype=np.float64))
        self.left: NDArray[np.float64] | None = None

    def current(self, left: NDArray[np.float64]) -> NDArray[np.float64]:
        """(J,) remaining work for ``left`` (G,) tasks pending or running per group (read-only)."""
        if self.left is not None:
            changed = np.flatnonzero(left != self.left)
            if changed.size <= self._FULL * left.size:
                if changed.size:
                    self._update(left, changed)
                return self.work
        self.left = left
        self.per_task = remaining_work.clean_durations(self.dur * left) * self.unit
        self.work = remaining_work.remaining_work(self.dur * left, self.demand, self.job, len(self.job_groups),
                                                  self.mean_cap)
        self.work.flags.writeable = False
        return self.work

    def _update(self, left: NDArray[np.float64], changed: NDArray[np.int64]) -> None:
        self.left = left
        self.per_task[changed] = remaining_work.clean_durations(self.dur[changed] * left[changed]) * self.unit[changed]
        work = self.work.copy()
        for j in np.unique(self.job[changed]).tolist():
            groups = self.job_groups[j]
            total = 0.0
            for x in self.per_task[groups[0] : groups[-1] + 1].tolist():
                total += x
            work[j] = total
        work.flags.writeable = False
        self.work = work


class _Lazy:
    """A value computed on first call and then kept (remaining work: only if a pass gets that far)."""

    def __init__(self, make: Callable[[], NDArray[np.float64]]) -> None:
        self._make: Callable[[], NDArray[np.float64]] = make
        self._value: NDArray[np.float64] | None = None

    def __call__(self) -> NDArray[np.float64]:
        if self._value is None:
            self._value = self._make()
        return self._value
