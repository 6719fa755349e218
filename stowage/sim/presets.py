"""The policies the simulator compares, as named presets.

* ``kube-default``: PrioritySort queue (priority, then arrival); NodeResourcesFit
  LeastAllocated + NodeResourcesBalancedAllocation on cpu and memory, requests only.
* ``binpack``: the same with MostAllocated.
* ``drf``: the queue with the lowest dominant share places next (FIFO inside it);
  LeastAllocated + BalancedAllocation.
* ``load-aware``: Trimaran TargetLoadPacking (measured CPU, target 40 %, pods
  bound within the last 60 s and the new pod at 1.5 × request).
* ``tetris``: alignment + ε·remaining work over all resources; DRF deficits
  between queues with the fairness knob ``f``; barrier knob ``b``; regular only.
* ``ubis``: kube-default, plus tasks that do not fit run opportunistically on
  harvestable capacity (UBIS Alg. 1), evicted under sustained contention.
* ``stowage``: tetris + DRF per pool + each queue's ``jobOrder`` (FIFO, SRTF,
  FSP) + harvesting, with OPERA's short/long classifier for ``auto`` jobs and
  the contention policy.

kube-scheduler places pods one at a time in queue order, and a pod that fits
nowhere does not block the pods behind it; the kube-like presets check fit on
every Kubernetes resource except disk and network bandwidth, which are not
Kubernetes resources, so those presets over-allocate bandwidth (Tetris §5.3.1).
Ties between equal node scores are broken at random (kube's ``selectHost``),
from the run's seeded generator. Not modelled: ``percentageOfNodesToScore``
(every feasible node is scored).

The kube-like ``Score`` plugins live in ``stowage.sim.scoring``; every
Stowage formula comes from ``stowage.policy`` (the code the cluster runs).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.errors import InvalidInput
from stowage.model import JobOrder
from stowage.policy import alignment, fairness, harvest, ordering, remaining_work
from stowage.sim import scoring

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["PRESETS", "KubePreset", "PackingPreset", "Preset", "make"]

_OPP_FALSE, _OPP_AUTO, _OPP_TRUE = 0, 1, 2
_BOOST = 1e6  # barrier-boosted groups outrank any alignment score (scores are in [0, R])


class Preset:
    """Base: hooks the engine calls, and shared helpers."""

    name = "base"
    harvesting = False

    def attach(self, sim: Simulation) -> None:
        self.sim = sim

    def regular_resources(self, sim: Simulation) -> NDArray[np.bool_]:
        """Resources checked when fitting a regular pod."""
        return np.ones(len(sim.resources), dtype=bool)

    def on_job_arrived(self, j: int) -> None: ...
    def on_job_finished(self, j: int) -> None: ...
    def on_evicted(self, groups: NDArray[np.int64]) -> None: ...
    def on_finished(self, groups: NDArray[np.int64], durations: NDArray[np.float64]) -> None: ...

    def schedule(self, sim: Simulation) -> None:
        raise NotImplementedError

    # --- helpers ---------------------------------------------------------------------------------

    def _pick(self, scores: NDArray, ok: NDArray[np.bool_]) -> int | None:
        """Highest-scoring feasible node; ties at random like kube's selectHost."""
        if not ok.any():
            return None
        s = np.where(ok, scores, -np.inf)
        best = np.flatnonzero(s == s.max())
        if best.size == 1:
            return int(best[0])
        return int(best[self.sim.rng.integers(best.size)])

    def _harvestable(self, sim: Simulation) -> NDArray[np.float64]:
        """``A_opp`` per node (UBIS Alg. 1 l.21), from a fresh-enough monitor sample."""
        c = sim.cluster
        if sim.now - sim.monitor.last_sample >= sim.settings.contention.sample_interval_s:
            sim.monitor.sample()
        run = sim.running
        rows = np.flatnonzero(run.opp) if len(run) else np.zeros(0, np.int64)
        assumed = harvest.assumed(
            sim.g_demand[run.group[rows]], run.start[rows], run.node[rows], sim.now,
            sim.settings.harvest.ramp_up_s, c.n,
        )
        a = harvest.harvestable(c.cap, c.usage, c.blocked, assumed, sim.settings.harvest.t_alloc.array(sim.resources))
        a[~c.harvest] = 0.0
        return a

    def _opp_eligible(self, sim: Simulation, groups: NDArray[np.int64]) -> NDArray[np.bool_]:
        jobs = sim.g_job[groups]
        return (sim.j_opp[jobs] != _OPP_FALSE) & sim.q_opp[sim.g_queue[groups]]


class KubePreset(Preset):
    """kube-scheduler: PrioritySort queue, Fit filter on Kubernetes resources, one Score plugin set."""

    def __init__(self, name: str, score: str, order: str = "priority", harvesting: bool = False) -> None:
        self.name, self.score, self.order, self.harvesting = name, score, order, harvesting

    def regular_resources(self, sim: Simulation) -> NDArray[np.bool_]:
        return sim.kube_resources

    def attach(self, sim: Simulation) -> None:
        super().attach(sim)
        self._cm = [sim.resources.index("cpu"), sim.resources.index("memory")]
        self._to_u = np.array([1000.0, 1.0])
        self._cap_u = np.rint(sim.cluster.cap[:, self._cm] * self._to_u)
        self._tlp_sample_t = -math.inf
        self._tlp_measured = np.zeros(sim.cluster.n)
        self._tlp_binds: list[tuple[float, int, float]] = []  # (time, node, predicted cpu)

    def _scores(self, sim: Simulation, g: int) -> NDArray:
        c = sim.cluster
        if self.score in ("least", "most"):
            # Upstream's int64 milli-CPU and bytes: rounding once per quantity, as the API stores it.
            req_u = np.rint(c.reg_alloc[:, self._cm] * self._to_u)
            pod_u = np.rint(sim.g_demand[g, self._cm] * self._to_u)
            return scoring.kube_scores(req_u, self._cap_u, pod_u, self.score)
        pod = sim.g_demand[g, self._cm]
        # Trimaran: the load watcher reports every 60 s; pods bound since count at 1.5 × request.
        if sim.now - self._tlp_sample_t >= scoring.TLP_METRICS_INTERVAL_S:
            sim.monitor.sample()
            self._tlp_measured = c.usage[:, c.cpu].copy()
            self._tlp_sample_t = sim.now
        horizon = sim.now - scoring.TLP_METRICS_INTERVAL_S
        self._tlp_binds = [b for b in self._tlp_binds if b[0] > horizon]
        missing = np.zeros(c.n)
        for _, n, cpu in self._tlp_binds:
            missing[n] += cpu
        return scoring.target_load_packing(self._tlp_measured, missing, c.cap[:, c.cpu], float(pod[0]))

    def _place_regular(self, sim: Simulation, g: int, free: NDArray[np.float64], fit_res: NDArray) -> bool:
        d = sim.g_demand[g]
        ok = (d[fit_res] <= free[:, fit_res] * (1 + 1e-9) + 1e-12).all(axis=1)
        if not ok.any():
            return False
        n = self._pick(self._scores(sim, g), ok)
        if n is None:
            return False
        sim.place(g, n, opp=False)
        free[n] -= d
        if self.score == "tlp":
            self._tlp_binds.append((sim.now, n, float(d[sim.cluster.cpu]) * scoring.TLP_REQUESTS_MULTIPLIER))
        return True

    def _queue_order(self, sim: Simulation, groups: NDArray[np.int64]) -> NDArray[np.int64]:
        key = np.lexsort((groups, sim.g_ready_at[groups], -sim.j_priority[sim.g_job[groups]]))
        return groups[key]

    def schedule(self, sim: Simulation) -> None:
        ready = sim.ready_groups()
        if ready.size == 0:
            return
        regular = ready[sim.j_opp[sim.g_job[ready]] != _OPP_TRUE] if self.harvesting else ready
        if not sim.regular_changed:
            regular = regular[:0]  # only a monitor tick since the last pass: regular room is unchanged
        fit_res = self.regular_resources(sim)
        free = sim.regular_free()
        if regular.size:
            fits = alignment.feasible(sim.g_demand[regular][:, fit_res], free[:, fit_res]).any(axis=1)
            regular = regular[fits]
        if self.order == "drf":
            self._schedule_drf(sim, regular, free, fit_res)
        else:
            failed: list[NDArray[np.float64]] = []  # demands that fit nowhere in this pass
            for g in self._queue_order(sim, regular):
                d = sim.g_demand[g]
                # Room only shrinks during a pass: a demand at least as big as one that failed fails too.
                if failed and (np.array(failed) <= d).all(axis=1).any():
                    continue
                while sim.g_pending[g] > 0 and self._place_regular(sim, int(g), free, fit_res):
                    pass
                if sim.g_pending[g] > 0:
                    failed.append(d)
        if self.harvesting:
            self._schedule_opportunistic(sim)

    def _schedule_drf(self, sim: Simulation, groups: NDArray[np.int64], free: NDArray, fit_res: NDArray) -> None:
        """DRF: the queue furthest below its share places its oldest job's next task."""
        by_queue: list[list[int]] = [[] for _ in sim.queue_names]
        for g in sorted(groups.tolist(), key=lambda g: (sim.j_arrival[sim.g_job[g]], g)):
            by_queue[sim.g_queue[g]].append(g)
        total = sim.cluster.total * fit_res
        shares = fairness.dominant_shares(sim.queue_alloc[0] * fit_res, total, sim.q_weight)
        while True:
            eligible = np.array([bool(q) for q in by_queue])
            if not eligible.any():
                return
            # drf_pick's rule (lowest share, ties to the lowest index) on shares kept between placements.
            q = int(np.flatnonzero(eligible)[np.argmin(shares[eligible])])
            g = by_queue[q][0]
            if sim.g_pending[g] == 0 or not self._place_regular(sim, g, free, fit_res):
                by_queue[q].pop(0)  # fits nowhere now: it does not block the queue
            else:
                shares = fairness.dominant_shares(sim.queue_alloc[0] * fit_res, total, sim.q_weight)

    def _schedule_opportunistic(self, sim: Simulation) -> None:
        """UBIS: what did not fit regularly runs on harvested capacity, in queue order."""
        ready = sim.ready_groups()
        ready = ready[self._opp_eligible(sim, ready)]
        if ready.size == 0:
            return
        avail = self._harvestable(sim)
        ready = ready[alignment.feasible(sim.g_demand[ready], avail).any(axis=1)]
        c = sim.cluster
        inv = np.divide(1.0, c.cap, out=np.zeros_like(c.cap), where=c.cap > 0)
        failed: list[NDArray[np.float64]] = []  # as in the regular pass: room only shrinks
        for g in self._queue_order(sim, ready):
            d = sim.g_demand[g]
            if failed and (np.array(failed) <= d).all(axis=1).any():
                continue
            while sim.g_pending[g] > 0:
                ok = alignment.feasible(d, avail)
                if not ok.any():
                    failed.append(d)
                    break
                # Spread like LeastAllocated, on the harvestable room.
                n = self._pick(((avail - d) * inv).sum(axis=1), ok)
                assert n is not None
                sim.place(int(g), n, opp=True)
                avail[n] = np.maximum(avail[n] - d, 0.0)


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
            regular = ready[sim.j_opp[sim.g_job[ready]] != _OPP_TRUE] if self.harvesting else ready
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
                auto = sim.j_opp[sim.g_job[ready]] == _OPP_AUTO
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


def _factories() -> dict[str, object]:
    return {
        "kube-default": lambda: KubePreset("kube-default", "least"),
        "binpack": lambda: KubePreset("binpack", "most"),
        "drf": lambda: KubePreset("drf", "least", order="drf"),
        "load-aware": lambda: KubePreset("load-aware", "tlp"),
        "tetris": lambda: PackingPreset("tetris", harvesting=False, job_order=False, classifier=False),
        "ubis": lambda: KubePreset("ubis", "least", harvesting=True),
        "stowage": lambda: PackingPreset("stowage", harvesting=True, job_order=True, classifier=True),
    }


PRESETS: tuple[str, ...] = tuple(_factories())


def make(name: str) -> Preset:
    """A fresh preset instance by name (one per run: presets hold run state)."""
    factories = _factories()
    if name not in factories:
        raise InvalidInput("policy", name, f"one of {', '.join(PRESETS)}")
    return factories[name]()  # type: ignore[operator]
