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
        self._static_ids: dict[tuple[tuple[str, str], ...], int] = {}
        self._static_id = np.full(sim.n_groups, -1, dtype=np.int64)  # index into _static_ids, -1 = not yet
        self._job_tasks = np.bincount(sim.g_job, weights=sim.g_tasks, minlength=sim.n_jobs)
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
        static = self._static(g)
        groups = sim.j_groups[j]
        done = sum(int(sim.g_done[x]) for x in groups) / max(sum(int(sim.g_tasks[x]) for x in groups), 1)
        return {**static, "progress": classifier.bucket_progress(done)}

    def _static(self, g: int) -> dict[str, str]:
        """The properties of group ``g``'s tasks that never change (all but progress)."""
        from stowage.policy import classifier

        static = self._static_features.get(g)
        if static is None:
            sim = self.sim
            static = self._static_features[g] = {
                "framework": sim.queue_names[sim.g_queue[g]],
                "app": _app_name(sim.jobs[int(sim.g_job[g])].name),
                "stage": sim.g_name[g],
                "demand": classifier.bucket_demand(
                    dict(zip(sim.resources, (sim.g_demand[g] / self._cap_norm).tolist(), strict=True))
                ),
            }
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
            present, shape_of = np.unique(sim.g_shape[ready], return_inverse=True)
            ready = ready[alignment.feasible(sim.shapes[present], avail).any(axis=1)[shape_of.reshape(-1)]]
            if self.classifier is not None and ready.size:
                short = sim.j_opp[sim.g_job[ready]] != OPP_AUTO
                short[~short] = self._short(ready[~short])
                ready = ready[short]
            if ready.size:
                self._pack(sim, ready, avail, work, opp=True)

    def _pack(self, sim: Simulation, groups: NDArray[np.int64], avail: NDArray, work: NDArray, opp: bool) -> None:
        if groups.size == 0:
            return
        c = sim.cluster
        # Groups of one demand shape have identical alignment rows: score each shape, not each group.
        present, shape_of = np.unique(sim.g_shape[groups], return_inverse=True)
        shape_of = shape_of.reshape(-1)
        shapes = sim.shapes[present]
        score = alignment.alignment(shapes, c.cap, avail)  # (S, N)
        live = np.isfinite(score).any(axis=1)[shape_of]
        groups, shape_of = groups[live], shape_of[live]
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
        shaped = _ShapeScores(score)
        while groups.size:
            allowed = jobs_ok & self._queue_mask(sim, queues, pool)
            best = best_candidate(shaped, shape_of, p, boost, allowed, self.m)
            if best is None:
                best = best_candidate(shaped, shape_of, p, boost, np.ones(groups.size, dtype=bool), self.m)
            if best is None:
                return
            i, n = best
            g = int(groups[i])
            sim.place(g, n, opp=opp)
            avail[n] = np.maximum(avail[n] - sim.g_demand[g], 0.0)
            shaped.set_column(n, alignment.alignment(shapes, c.cap[n : n + 1], avail[n : n + 1])[:, 0])
            if sim.g_pending[g] == 0:
                keep = np.arange(groups.size) != i
                groups, shape_of, p, boost, queues = groups[keep], shape_of[keep], p[keep], boost[keep], queues[keep]
                jobs_ok = self._job_mask(sim, groups, work)


class _ShapeScores:
    """Alignment of each demand shape on each node (S, N), with what every search needs from it."""

    def __init__(self, score: NDArray[np.float64]) -> None:
        self.score = score
        self._refresh()

    def set_column(self, n: int, column: NDArray[np.float64]) -> None:
        self.score[:, n] = column
        self._refresh()

    def _refresh(self) -> None:
        self.feasible = np.isfinite(self.score)
        self.count = self.feasible.sum(axis=1)
        self.values = self.score[self.feasible]  # row-major: shape 0's feasible scores, then shape 1's, ...
        self.offset = np.concatenate(([0], np.cumsum(self.count)[:-1]))
        self.row_max = np.where(self.count > 0, np.max(self.score, axis=1, initial=-np.inf), -np.inf)

    def feasible_scores(self, rows_shape: NDArray[np.int64]) -> NDArray[np.float64]:
        """``score[rows_shape][feasible]`` in row-major order (what ``combined_score`` averages), in O(result)."""
        cnt = self.count[rows_shape]
        if rows_shape.size and (rows_shape == rows_shape[0]).all():
            s = int(rows_shape[0])
            return np.tile(self.values[self.offset[s] : self.offset[s] + cnt[0]], rows_shape.size)
        starts = np.concatenate(([0], np.cumsum(cnt)[:-1]))
        index = np.repeat(self.offset[rows_shape] - starts, cnt) + np.arange(int(cnt.sum()))
        return self.values[index]


def best_candidate(
    shaped: _ShapeScores,
    shape_of: NDArray[np.int64],
    p: NDArray[np.float64],
    boost: NDArray[np.float64],
    rows: NDArray[np.bool_],
    m: float,
) -> tuple[int, int] | None:
    """The (row, node) with the highest ``combined_score + boost`` among ``rows``, first on ties; None if none fits.

    Same result, bit for bit, as ``dense_best_candidate`` on the (rows × nodes) matrix
    ``shaped.score[shape_of]``, without building it: ``remaining_work.work_penalty`` gets the
    same feasible entries in the same order (so the same floating-point sums), and since
    ``x ↦ (x − t) + b`` is monotone under rounding, a row's best value is its best alignment's;
    only the winning row is scanned node by node for the first node reaching it.
    """
    if not rows.any():
        return None
    idx = np.flatnonzero(rows)
    s = shape_of[idx]
    cnt = shaped.count[s]
    if not cnt.any():
        return None
    b = boost[idx]
    t = remaining_work.work_penalty(shaped.feasible_scores(s), p[idx], cnt, m)  # combined_score's term, per row
    best_of_row = (shaped.row_max[s] - t) + b
    if np.isnan(best_of_row).any():  # cannot happen for finite inputs; keep the reference rule
        return dense_best_candidate(shaped.score[shape_of], p, boost, rows, m)
    i = int(np.argmax(best_of_row))
    if not np.isfinite(best_of_row[i]):
        return None
    n = int(np.argmax((shaped.score[s[i]] - t[i]) + b[i]))
    return int(idx[i]), n


def dense_best_candidate(
    score: NDArray[np.float64], p: NDArray[np.float64], boost: NDArray[np.float64], rows: NDArray[np.bool_], m: float
) -> tuple[int, int] | None:
    """The straightforward search over the full (rows × nodes) score matrix (reference for the fast one)."""
    if not rows.any():
        return None
    idx = np.flatnonzero(rows)
    sub = score[idx]
    if not np.isfinite(sub).any():
        return None
    combined = remaining_work.combined_score(sub, p[idx], m) + boost[idx, None]
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
