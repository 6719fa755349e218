"""Tetris packing (``tetris``) and everything Stowage does on top of it (``stowage``).

Every formula is ``stowage.policy``'s: alignment, remaining work and the combined
score, DRF shares and the fairness and barrier knobs, job order (FIFO, SRTF,
FSP), harvestable capacity, and OPERA's short/long classifier.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.model import JobOrder
from stowage.policy import alignment, fairness, ordering, remaining_work
from stowage.sim.presets import OPP_AUTO, OPP_TRUE, Preset

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["PackingPreset"]

_BOOST = 1e6  # barrier-boosted groups outrank any alignment score (scores are in [0, R])


class PackingPreset(Preset):
    """Tetris packing (alignment + remaining work, fairness and barrier knobs); ``stowage`` adds the rest."""

    def __init__(self, name: str, *, harvesting: bool, job_order: bool, classifier: bool) -> None:
        self.name, self.harvesting, self.job_order, self.use_classifier = name, harvesting, job_order, classifier

    def attach(self, sim: Simulation) -> None:
        super().attach(sim)
        k = sim.settings.packing
        self.f, self.b, self.m = k.fairness_knob, k.barrier_knob, k.remaining_work_weight
        self.remote_penalty = k.remote_penalty
        self.mean_cap = sim.cluster.cap.mean(axis=0)
        self._cap_norm = np.where(self.mean_cap > 0, self.mean_cap, 1.0)
        self._static_features: dict[int, dict[str, str]] = {}
        self.fsp = [ordering.FspTracker(1.0) for _ in sim.queue_names]
        self.classifier = None
        if self.use_classifier:
            from stowage.policy import classifier

            self.classifier = classifier.ShortLongClassifier(sim.settings.classifier.short_task_threshold_s)
        total = np.where(sim.cluster.total > 0, sim.cluster.total, 1.0)
        # FSP job size: work in "whole cluster" seconds (dominant resource).
        self._size = np.zeros(sim.n_jobs)
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
        static = self._static_features.get(g)
        if static is None:
            static = self._static_features[g] = {
                "framework": sim.queue_names[sim.g_queue[g]],
                "app": _app_name(sim.jobs[j].name),
                "stage": sim.g_name[g],
                "demand": classifier.bucket_demand(
                    dict(zip(sim.resources, (sim.g_demand[g] / self._cap_norm).tolist(), strict=True))
                ),
            }
        groups = sim.j_groups[j]
        done = sum(int(sim.g_done[x]) for x in groups) / max(sum(int(sim.g_tasks[x]) for x in groups), 1)
        return {**static, "progress": classifier.bucket_progress(done)}

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
        left = (sim.g_pending + sim.g_running).astype(np.float64)
        return remaining_work.remaining_work(sim.g_dur * left, sim.g_demand, sim.g_job, sim.n_jobs, self.mean_cap)

    def _queue_mask(self, sim: Simulation, queues: NDArray[np.int64], pool: int) -> NDArray[np.bool_]:
        """Rows whose queue the fairness knob lets compete now: the queues furthest below fair share."""
        nq = len(sim.queue_names)
        active = np.bincount(queues, minlength=nq) > 0
        act = np.flatnonzero(active)
        if act.size <= 1:
            return np.ones(queues.size, dtype=bool)
        weighted = fairness.dominant_shares(sim.queue_alloc[pool], sim.cluster.total, sim.q_weight)
        share = weighted * np.where(sim.q_weight > 0, sim.q_weight, 1.0)  # back to the unweighted share
        deficit = fairness.fair_share(sim.q_weight, active) - share
        picked = np.zeros(nq, dtype=bool)
        picked[act[fairness.fairness_candidates(deficit[act], self.f)]] = True
        return picked[queues]

    def _job_mask(self, sim: Simulation, groups: NDArray[np.int64], work: NDArray) -> NDArray[np.bool_]:
        """Rows whose job is among the first ⌈(1−f)·J_q⌉ of its queue in the queue's ``jobOrder``."""
        if not self.job_order:
            return np.ones(groups.size, dtype=bool)
        jobs_of_rows = sim.g_job[groups]
        queues = sim.g_queue[groups]
        allowed_jobs: list[int] = []
        for q in np.unique(queues).tolist():
            jobs = np.unique(jobs_of_rows[queues == q])
            order = sim.q_order[q]
            if order is JobOrder.FSP:
                self.fsp[q].advance(sim.now)
                rank = {j: i for i, j in enumerate(self.fsp[q].order())}
                ranked = sorted(jobs.tolist(), key=lambda j: (rank.get(j, math.inf), j))
            else:
                ranked = jobs[ordering.order_jobs(order, sim.j_arrival[jobs], work[jobs])].tolist()
            allowed_jobs.extend(ranked[: max(1, math.ceil((1.0 - self.f) * len(ranked)))])
        return np.isin(jobs_of_rows, allowed_jobs)

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
            ready = ready[alignment.feasible(sim.g_demand[ready], avail).any(axis=1)]
            if self.classifier is not None and ready.size:
                auto = sim.j_opp[sim.g_job[ready]] == OPP_AUTO
                short = np.array([not a or self.classifier.is_short(self._features(int(g)))
                                  for g, a in zip(ready.tolist(), auto.tolist(), strict=True)], dtype=bool)
                ready = ready[short]
            if ready.size:
                self._pack(sim, ready, avail, work, opp=True)

    def _pack(self, sim: Simulation, groups: NDArray[np.int64], avail: NDArray, work: NDArray, opp: bool) -> None:
        if groups.size == 0:
            return
        c = sim.cluster
        d = sim.g_demand[groups]
        score = alignment.alignment(d, c.cap, avail)
        live = np.isfinite(score).any(axis=1)
        groups, d, score = groups[live], d[live], score[live]
        if groups.size == 0:
            return
        pool = 1 if opp else 0
        work = work() if isinstance(work, _Lazy) else work
        p = work[sim.g_job[groups]]
        has_waiters = np.ones(groups.size, dtype=bool)  # the job's end waits on every group
        frac = sim.g_done[groups] / np.maximum(sim.g_tasks[groups], 1)
        # Barrier boost and job order depend on finishes and arrivals only: fixed during a pass.
        boost = fairness.barrier_boost(frac, has_waiters, self.b) * _BOOST
        jobs_ok = self._job_mask(sim, groups, work)
        queues = sim.g_queue[groups]
        while groups.size:
            allowed = jobs_ok & self._queue_mask(sim, queues, pool)
            best = self._best(score, p, boost, allowed)
            if best is None:
                best = self._best(score, p, boost, np.ones(groups.size, dtype=bool))
            if best is None:
                return
            i, n = best
            g = int(groups[i])
            sim.place(g, n, opp=opp)
            avail[n] = np.maximum(avail[n] - d[i], 0.0)
            score[:, n] = alignment.alignment(d, c.cap[n : n + 1], avail[n : n + 1])[:, 0]
            if sim.g_pending[g] == 0:
                keep = np.arange(groups.size) != i
                groups, d, score, p, boost, queues = (
                    groups[keep], d[keep], score[keep], p[keep], boost[keep], queues[keep]
                )
                jobs_ok = self._job_mask(sim, groups, work)

    def _best(self, score: NDArray, p: NDArray, boost: NDArray, rows: NDArray[np.bool_]) -> tuple[int, int] | None:
        if not rows.any():
            return None
        idx = np.flatnonzero(rows)
        sub = score[idx]
        if not np.isfinite(sub).any():
            return None
        combined = remaining_work.combined_score(sub, p[idx], self.m) + boost[idx, None]
        flat = int(np.argmax(combined))
        i, n = divmod(flat, score.shape[1])
        if not np.isfinite(combined[i, n]):
            return None
        return int(idx[i]), int(n)


class _Lazy:
    """A value computed on first call and then kept (remaining work: only if a pass gets that far)."""

    def __init__(self, make: object) -> None:
        self._make, self._value = make, None

    def __call__(self) -> NDArray[np.float64]:
        if self._value is None:
            self._value = self._make()  # type: ignore[operator]
        return self._value


def _app_name(job_name: str) -> str:
    """A job's application: its name without trailing numbers (``sort-0042`` → ``sort``)."""
    stem = job_name.rstrip("0123456789-_.")
    return stem or job_name
