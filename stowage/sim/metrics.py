"""What one run measured, and the numbers compared across policies.

* **makespan**: last job finish − first job arrival.
* **JCT** per job: finish − arrival; mean, median, p95.
* **utilization** per resource: *allocated* (regular requests + opportunistic
  demands, integrated exactly between events) and *used* (sampled usage), each
  as a time average over the makespan divided by the cluster's capacity.
* **fluid lower bound** on makespan: ``max(max_r W_r / C_r, max_j(a_j + cp_j) − t0)``
  with ``W_r`` = Σ tasks duration × demand_r, ``C_r`` the cluster's capacity,
  ``a_j`` a job's arrival and ``cp_j`` its critical path (longest chain of group
  durations through the barriers): no schedule can beat either.
* **mean-JCT lower bound**: the mean of the jobs' critical paths (no job
  finishes sooner than its critical path after it arrives).
* **slowed_vs_fluid_fraction**: jobs whose JCT exceeds their JCT under fluid
  weighted fair sharing of the same arrivals (:mod:`stowage.sim.fluid`, FSP's
  processor-sharing model) by more than 10 %; ``jct_mean_fluid_s`` is that
  reference's mean JCT. Unfinished jobs are not counted. Issue #21's target.
* **slowed_jobs_fraction** (kept): jobs whose JCT exceeds the same job's JCT in
  this simulator's ``drf`` run by more than 10 % (Tetris §5: "fraction of jobs
  that slow down compared to a fair allocation"). Against a real scheduler's
  schedule, packing included, but noisy: a small input change reorders a
  ``drf`` run and moves it by tens of percent (#12).
* **queues over time** (issue #21; ``fairness_over_time``): with two or more queues backlogged (work ready
  to start), each queue's *decayed usage* (its sampled dominant share averaged with
  ``packing.queue_usage_half_life_s``, as the policy keeps it) against its weight's share of the backlogged
  queues' usage: ``usage_deviation_max`` the largest relative deviation, ``over_tolerance_fraction`` the
  fraction of such samples where some queue is more than 15 % off, both counted once every backlogged queue
  has been so for one half-life (before that the average still remembers the time it was not);
  ``below_floor_longest_s`` the longest a backlogged queue held less than ``packing.queue_share_floor`` of its
  weighted fair share (``fairness.fair_levels``). To the sampling period.
* **relative integral unfairness** (Tetris §5.4): per job
  ``∫ (a(t) − f(t))/f(t) dt`` over its runtime, divided by the runtime, with
  ``a`` the job's dominant share of the cluster and ``f`` its fair share (its
  queue's weighted share among active queues, split evenly among the queue's
  active jobs, capped at the dominant share of the job's unfinished tasks: a
  fair scheme gives no job more than it can use); sampled at the metrics
  period. Reported: the fraction of jobs below zero and their mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from stowage.policy import fairness
from stowage.sim import fluid

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["Recorder", "RunResult", "critical_paths", "fairness_over_time", "fluid_lower_bound", "slowed_fraction"]

SLOWDOWN_TOLERANCE = 0.10


FAIRNESS_TOLERANCE = 0.15
"""Issue #21's promise: decayed usage within ±15 % of the weights' share while queues are backlogged."""


def fairness_over_time(t: NDArray[np.float64], shares: NDArray[np.float64], backlogged: NDArray[np.bool_],
                       weights: NDArray[np.float64], half_life_s: float, floor: float) -> dict[str, float | int]:
    """The queues-over-time figures (module docstring) from samples: times (T,), dominant shares (T, Q),
    backlogged (T, Q), weights (Q,)."""
    w = np.maximum(np.nan_to_num(np.asarray(weights, dtype=np.float64)), 0.0)
    since = np.full(shares.shape[1], np.nan)  # when each queue last became backlogged
    below_from = since.copy()  # when each queue last fell below its floor
    worst, over, counted, longest = 0.0, 0, 0, 0.0
    usage = np.zeros(shares.shape[1])  # each queue's decayed usage, from the first sample on
    for i in range(t.size):
        usage = fairness.decayed(usage, shares[i - 1], t[i] - t[i - 1], half_life_s) if i else shares[0]
        on = backlogged[i] & (w > 0)
        since = np.where(on, np.where(np.isnan(since), t[i], since), np.nan)
        low = on & (shares[i] < floor * fairness.fair_levels(shares[i], w, on) - 1e-9)
        below_from = np.where(low, np.where(np.isnan(below_from), t[i], below_from), np.nan)
        if low.any():
            longest = max(longest, float(np.nanmax(t[i] - below_from)))
        warm = on.sum() >= 2 and bool((t[i] - since[on] >= half_life_s).all())
        if warm and usage[on].sum() > 0:
            dev = np.abs((usage[on] / usage[on].sum()) / (w[on] / w[on].sum()) - 1.0)
            worst, counted = max(worst, float(dev.max())), counted + 1
            over += int(dev.max() > FAIRNESS_TOLERANCE)
    return {"usage_deviation_max": worst, "over_tolerance_fraction": over / counted if counted else 0.0,
            "below_floor_longest_s": longest, "usage_samples": counted}


def critical_paths(sim: Simulation) -> NDArray[np.float64]:
    """(J,) longest chain of group durations through the barriers, per job."""
    finish = np.zeros(sim.n_groups)
    done = np.zeros(sim.n_groups, bool)

    def longest(g: int, depth: int = 0) -> float:
        if done[g]:
            return float(finish[g])
        if depth > sim.n_groups:
            return 0.0  # a cycle: the workload reader rejects these; do not recurse forever
        before = max((longest(d, depth + 1) for d in sim.g_deps[g]), default=0.0)
        finish[g] = before + (sim.g_dur[g] if sim.g_tasks[g] > 0 else 0.0)
        done[g] = True
        return float(finish[g])

    return np.array([max((longest(g) for g in groups), default=0.0) for groups in sim.j_groups], dtype=np.float64)


def fluid_lower_bound(sim: Simulation, paths: NDArray[np.float64]) -> float:
    """The makespan bound of the module docstring; ``paths``: ``critical_paths(sim)``."""
    if sim.n_jobs == 0:
        return 0.0
    work = (sim.g_demand * (sim.g_dur * sim.g_tasks)[:, None]).sum(axis=0)
    total = sim.cluster.total
    by_work = np.divide(work, total, out=np.zeros_like(work), where=total > 0).max()  # R ≥ 4: never empty
    return max(float(by_work), float((sim.j_arrival + paths).max() - sim.t0))


def slowed_fraction(jct: NDArray[np.float64], reference: NDArray[np.float64]) -> float:
    ok = np.isfinite(jct) & np.isfinite(reference)
    if not ok.any():
        return 0.0
    return float((jct[ok] > reference[ok] * (1 + SLOWDOWN_TOLERANCE) + 1e-9).mean())


@dataclass
class RunResult:
    """Everything one run produced (series for the plots, per-job numbers for comparisons)."""

    policy: str
    summary: dict[str, Any]
    jct: NDArray[np.float64]
    """Per job, in ``workload.jobs`` order; NaN for a job that never finished."""
    arrival: NDArray[np.float64]
    series: dict[str, Any] = field(default_factory=dict)


class Recorder:
    """Integrates allocation between events and samples usage and shares at a fixed period."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.paths = critical_paths(sim)
        self.lower_bound = fluid_lower_bound(sim, self.paths)
        # No job finishes sooner than its critical path after it arrives, whatever the schedule.
        self.jct_lower_bound = float(self.paths.mean()) if self.paths.size else 0.0
        cfg = sim.config.sample_s  # None: about 400 samples over the lower bound
        self.period = float(cfg) if cfg else max(1.0, math.ceil(self.lower_bound / 400.0))
        self.next_sample = sim.t0
        self._total = np.where(sim.cluster.total > 0, sim.cluster.total, 1.0)  # a resource nobody has: 1
        self.alloc_integral = np.zeros(len(sim.resources))
        self.times: list[float] = []
        self.alloc: list[NDArray[np.float64]] = []
        self.used: list[NDArray[np.float64]] = []
        self.shares: list[NDArray[np.float64]] = []
        self.backlogged: list[NDArray[np.bool_]] = []
        self.unfair_sum = np.zeros(sim.n_jobs)
        self.unfair_n = np.zeros(sim.n_jobs)
        self._q = len(sim.queue_names)

    def integrate(self, dt: float) -> None:
        self.alloc_integral += self.sim.alloc_total * dt

    def sample_until(self, t: float) -> None:
        """Take the samples due at or before ``t`` (state is constant until then)."""
        if self.next_sample > t:
            return
        sim = self.sim
        saved = sim.now
        while self.next_sample <= t:
            sim.now = max(self.next_sample, saved)
            self._sample(self.next_sample)
            self.next_sample += self.period
        sim.now = saved

    def _sample(self, t: float) -> None:
        sim = self.sim
        c = sim.cluster
        use = sim.current_use() if len(sim.running) else np.zeros((0, c.r))
        used = np.minimum(c.node_sums(use, sim.running.node), c.cap).sum(axis=0) if len(use) else np.zeros(c.r)
        total = self._total
        self.times.append(t)
        self.alloc.append(sim.alloc_total / total)
        self.used.append(used / total)
        qshare = (sim.queue_alloc.sum(axis=0) / total).max(axis=1)
        self.shares.append(qshare)
        ready = sim.g_ready & (sim.g_pending > 0)
        self.backlogged.append(np.bincount(sim.j_queue[sim.g_job[ready]], minlength=self._q)[: self._q] > 0)
        # Relative integral unfairness: jobs arrived and not finished.
        active = sim.j_arrived & np.isnan(sim.j_finish)
        if active.any():
            q_active = np.bincount(sim.j_queue[active], minlength=self._q)
            w = np.where(q_active > 0, sim.q_weight, 0.0)
            q_fair = w / w.sum() if w.sum() > 0 else w
            idx = np.flatnonzero(active)
            even = q_fair[sim.j_queue[idx]] / np.maximum(q_active[sim.j_queue[idx]], 1)
            # A fair scheme gives a job no more than it can use: its unfinished tasks' demand.
            left = (sim.g_pending + sim.g_running).astype(np.float64)[:, None] * sim.g_demand
            demand = np.zeros((sim.n_jobs, c.r))
            np.add.at(demand, sim.g_job, left)
            fair = np.minimum(even, (demand[idx] / total).max(axis=1))
            share = (sim.job_alloc[idx] / total).max(axis=1)
            ok = fair > 0
            self.unfair_sum[idx[ok]] += (share[ok] - fair[ok]) / fair[ok]
            self.unfair_n[idx[ok]] += 1

    def fluid_jct(self) -> NDArray[np.float64]:
        """(J,) each job's JCT under fluid weighted fair sharing (engine job order; NaN: never)."""
        sim = self.sim
        size = fluid.job_sizes(sim.g_job, sim.g_tasks, sim.g_dur, sim.g_demand, sim.cluster.total, sim.n_jobs)
        done = fluid.fluid_completion(sim.j_arrival, size, self.paths, sim.j_queue, sim.q_weight)
        return done - sim.j_arrival

    def result(self) -> RunResult:
        sim = self.sim
        r, q, times = len(sim.resources), self._q, np.array(self.times)
        series = {
            "t": times - sim.t0,
            "allocated": np.array(self.alloc).reshape(-1, r),
            "used": np.array(self.used).reshape(-1, r),
            "shares": np.array(self.shares).reshape(-1, q),
            "backlogged": np.array(self.backlogged, dtype=bool).reshape(-1, q),
            "resources": sim.resources,
            "queues": list(sim.queue_names),
            "harvesting": sim.preset.harvesting,
        }
        finished = ~np.isnan(sim.j_finish)
        jct = np.where(finished, sim.j_finish - sim.j_arrival, np.nan)
        end = float(np.nanmax(sim.j_finish)) if finished.any() else sim.now
        makespan = max(end - sim.t0, 0.0)
        alloc_mean = self.alloc_integral / self._total / max(sim.now - sim.t0, 1e-9)
        used_mean = series["used"].mean(axis=0) if self.used else np.zeros(r)
        ok = np.isfinite(jct)
        measured = self.unfair_n > 0
        unfair = np.where(measured, self.unfair_sum / np.maximum(self.unfair_n, 1), 0.0)
        negative = unfair[measured & (unfair < 0)]
        fluid_jct = self.fluid_jct()
        summary: dict[str, Any] = {
            "makespan_s": makespan,
            "jct_mean_s": float(np.mean(jct[ok])) if ok.any() else 0.0,
            "jct_p50_s": float(np.median(jct[ok])) if ok.any() else 0.0,
            "jct_p95_s": float(np.percentile(jct[ok], 95)) if ok.any() else 0.0,
            "makespan_lower_bound_s": self.lower_bound,
            "makespan_to_lower_bound": makespan / self.lower_bound if self.lower_bound > 0 else 1.0,
            "jct_mean_lower_bound_s": self.jct_lower_bound,
            "utilization": {
                r: {"allocated": float(alloc_mean[i]), "used": float(used_mean[i])}
                for i, r in enumerate(sim.resources)
            },
            "opportunistic_fraction": sim.opp_done / max(sim.tasks_done, 1),
            "evictions": sim.evictions,
            "oom_kills": sim.oom_kills,
            "contentions": sim.monitor.contentions,
            "wasted_work_s": sim.wasted_work_s,
            "lost_tasks": int(sim.g_tasks.sum() - sim.g_done.sum()),
            "time_cap_reached": sim.time_cap_reached,
            "tasks": int(sim.g_tasks.sum()),
            "tasks_started": sim.task_starts,
            "jobs": sim.n_jobs,
            "jobs_finished": int(finished.sum()),
            "slowed_jobs_fraction": 0.0,
            "slowed_vs_fluid_fraction": slowed_fraction(jct, fluid_jct),
            "jct_mean_fluid_s": float(np.nanmean(fluid_jct)) if np.isfinite(fluid_jct).any() else 0.0,
            "queues_over_time": fairness_over_time(
                times, series["shares"], series["backlogged"], sim.q_weight,
                sim.settings.packing.queue_usage_half_life_s, sim.settings.packing.queue_share_floor),
            "unfairness": {
                "negative_jobs_fraction": float(negative.size / max(int(measured.sum()), 1)),
                "mean_negative": float(negative.mean()) if negative.size else 0.0,
            },
        }
        # Per-job arrays in the workload's own job order (the engine sorts jobs by arrival).
        jct_out, arrival_out = np.empty_like(jct), np.empty_like(jct)
        jct_out[sim.j_source] = jct
        arrival_out[sim.j_source] = sim.j_arrival
        return RunResult(sim.preset.name, summary, jct_out, arrival_out, series)
