"""What one run measured, and the numbers compared across policies.

* **makespan**: last job finish − first job arrival.
* **JCT** per job: finish − arrival; mean, median, p95.
* **utilization** per resource: *allocated* (regular requests + opportunistic demands, integrated exactly between
  events) and *used* (sampled usage), each as a time average over the makespan divided by the cluster's capacity.
* **fluid lower bound** on makespan: ``max(max_r W_r / C_r, max_j(a_j + cp_j) − t0)`` with ``W_r`` = Σ tasks
  duration × demand_r, ``C_r`` the cluster's capacity, ``a_j`` a job's arrival and ``cp_j`` its critical path
  (longest chain of group durations through the barriers): no schedule can beat either.
* **mean-JCT lower bound**: the mean of the jobs' critical paths (no job finishes sooner than its critical path
  after it arrives).
* **slowed_vs_fluid_fraction**: jobs whose JCT exceeds their JCT under fluid weighted fair sharing of the same
  arrivals (:mod:`stowage.sim.fluid`, FSP's processor-sharing model) by more than 10 %; ``jct_mean_fluid_s`` is that
  reference's mean JCT. Unfinished jobs are not counted. Issue #21's target.
* **slowed_jobs_fraction** (kept): jobs whose JCT exceeds the same job's JCT in this simulator's ``drf`` run by more
  than 10 % (Tetris §5: "fraction of jobs that slow down compared to a fair allocation"). Against a real scheduler's
  schedule, packing included, but noisy: a small input change reorders a ``drf`` run and moves it by tens of percent
  (#12).
* **queues over time** (issue #21; ``fairness_over_time``): with two or more queues backlogged (work ready to
  start), each queue's *decayed usage* (its sampled dominant share averaged with
  ``packing.queue_usage_half_life_s``, as the policy keeps it) against its target, its weight's share of the
  backlogged queues' usage (``fairness.usage_targets``, the Queue status' ``usageTarget``):
  ``usage_deviation_max`` the largest relative deviation, ``over_tolerance_fraction`` the fraction of such
  samples where some queue is more than 15 % off, both counted once every backlogged queue has been so for one
  half-life (before that the average still remembers the time it was not); ``below_floor_longest_s`` the longest a
  backlogged queue held less than ``packing.queue_share_floor`` of its weighted fair share
  (``fairness.fair_levels``). To the sampling period.
* **relative integral unfairness** (Tetris §5.4): per job ``∫ (a(t) − f(t))/f(t) dt`` over its runtime, divided by
  the runtime, with ``a`` the job's dominant share of the cluster and ``f`` its fair share (its queue's
  ``fairness.fair_shares`` with every queue that has an unfinished job wanting more, ``w / Σ w`` over them, split
  evenly among the queue's active jobs, capped at the dominant share of the job's unfinished tasks: a fair scheme
  gives no job more than it can use); sampled at the metrics period. Reported: the fraction of jobs below zero and
  their mean.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from stowage.policy import fairness, tolerances
from stowage.sim import fluid

if TYPE_CHECKING:
    from stowage.config import StowageSettings
    from stowage.sim.cluster import Cluster, Running
    from stowage.sim.preset import Preset
    from stowage.sim.tables import Spec, Status, Truth

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
        low = on & (shares[i] < floor * fairness.fair_levels(shares[i], w, on) - tolerances.ROUNDING_EPS)
        below_from = np.where(low, np.where(np.isnan(below_from), t[i], below_from), np.nan)
        if low.any():
            longest = max(longest, float(np.nanmax(t[i] - below_from)))
        warm = on.sum() >= 2 and bool((t[i] - since[on] >= half_life_s).all())
        if warm and usage[on].sum() > 0:
            dev = np.abs(usage[on] / fairness.usage_targets(usage, w, on)[on] - 1.0)
            worst, counted = max(worst, float(dev.max())), counted + 1
            over += int(dev.max() > FAIRNESS_TOLERANCE)
    return {"usage_deviation_max": worst, "over_tolerance_fraction": over / counted if counted else 0.0,
            "below_floor_longest_s": longest, "usage_samples": counted}


def critical_paths(spec: Spec, truth: Truth) -> NDArray[np.float64]:
    """(J,) longest chain of group durations through the barriers, per job."""
    finish = np.zeros(spec.n_groups)
    done = np.zeros(spec.n_groups, bool)

    def longest(g: int, depth: int = 0) -> float:
        if done[g]:
            return float(finish[g])
        if depth > spec.n_groups:
            return 0.0  # a cycle: the workload reader rejects these; do not recurse forever
        before = max((longest(d, depth + 1) for d in spec.g_deps[g]), default=0.0)
        finish[g] = before + (truth.g_dur[g] if spec.g_tasks[g] > 0 else 0.0)
        done[g] = True
        return float(finish[g])

    return np.array([max((longest(g) for g in groups), default=0.0) for groups in spec.j_groups], dtype=np.float64)


def fluid_lower_bound(spec: Spec, truth: Truth, total: NDArray[np.float64], paths: NDArray[np.float64]) -> float:
    """The makespan bound of the module docstring on capacity ``total`` (R,); ``paths``: ``critical_paths``."""
    if spec.n_jobs == 0:
        return 0.0
    work = (spec.g_demand * (truth.g_dur * spec.g_tasks)[:, None]).sum(axis=0)
    by_work = np.divide(work, total, out=np.zeros_like(work), where=total > 0).max()  # R ≥ 4: never empty
    return max(float(by_work), float((spec.j_arrival + paths).max() - spec.t0))


def slowed_fraction(jct: NDArray[np.float64], reference: NDArray[np.float64]) -> float:
    ok = np.isfinite(jct) & np.isfinite(reference)
    if not ok.any():
        return 0.0
    return float((jct[ok] > reference[ok] * (1 + SLOWDOWN_TOLERANCE) + tolerances.ROUNDING_EPS).mean())


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
    """Integrates allocation between events and samples usage and shares at a fixed period.

    ``use_at(t)``: each running task's usage at ``t`` (the engine's); ``sample_s``: ``SimConfig.sample_s``.
    """

    def __init__(self, spec: Spec, truth: Truth, status: Status, cluster: Cluster, running: Running,
                 use_at: Callable[[float], NDArray[np.float64]], sample_s: float | None,
                 settings: StowageSettings) -> None:
        self.spec, self.truth, self.status, self.cluster, self.running = spec, truth, status, cluster, running
        self.use_at, self.settings = use_at, settings
        self.paths = critical_paths(spec, truth)
        self.lower_bound = fluid_lower_bound(spec, truth, cluster.total, self.paths)
        # No job finishes sooner than its critical path after it arrives, whatever the schedule.
        self.jct_lower_bound = float(self.paths.mean()) if self.paths.size else 0.0
        self.period = float(sample_s) if sample_s else max(1.0, math.ceil(self.lower_bound / 400.0))  # ~400 samples
        self.next_sample = spec.t0
        self._total = np.where(cluster.total > 0, cluster.total, 1.0)  # a resource nobody has: 1
        self.alloc_integral = np.zeros(cluster.r)
        self.times: list[float] = []
        self.alloc: list[NDArray[np.float64]] = []
        self.used: list[NDArray[np.float64]] = []
        self.shares: list[NDArray[np.float64]] = []
        self.backlogged: list[NDArray[np.bool_]] = []
        self.unfair_sum = np.zeros(spec.n_jobs)
        self.unfair_n = np.zeros(spec.n_jobs)
        self._q = len(spec.queue_names)

    def integrate(self, dt: float) -> None:
        self.alloc_integral += self.status.alloc_total * dt

    def sample_until(self, t: float, now: float) -> None:
        """Take the samples due at or before ``t`` (state is constant from ``now`` until then)."""
        while self.next_sample <= t:
            self._sample(self.next_sample, max(self.next_sample, now))
            self.next_sample += self.period

    def _sample(self, t: float, use_t: float) -> None:
        """The sample due at ``t``, with the tasks' usage at ``use_t``."""
        spec, st, c = self.spec, self.status, self.cluster
        run = self.running
        use = self.use_at(use_t) if len(run) else np.zeros((0, c.r))
        used = np.minimum(c.node_sums(use, run.node), c.cap).sum(axis=0) if len(use) else np.zeros(c.r)
        total = self._total
        self.times.append(t)
        self.alloc.append(st.alloc_total / total)
        self.used.append(used / total)
        qshare = (st.queue_alloc.sum(axis=0) / total).max(axis=1)
        self.shares.append(qshare)
        ready = st.waiting()
        self.backlogged.append(np.bincount(spec.j_queue[spec.g_job[ready]], minlength=self._q)[: self._q] > 0)
        # Relative integral unfairness: jobs arrived and not finished.
        active = st.j_arrived & np.isnan(st.j_finish)
        if active.any():
            q_active = np.bincount(spec.j_queue[active], minlength=self._q)
            # Every queue with an unfinished job wants more (Tetris' fair scheme): its weighted fair share.
            q_fair = fairness.fair_shares(qshare, spec.q_weight, q_active > 0)
            idx = np.flatnonzero(active)
            even = q_fair[spec.j_queue[idx]] / np.maximum(q_active[spec.j_queue[idx]], 1)
            # A fair scheme gives a job no more than it can use: its unfinished tasks' demand.
            left = (st.g_pending + st.g_running).astype(np.float64)[:, None] * spec.g_demand
            demand = np.zeros((spec.n_jobs, c.r))
            np.add.at(demand, spec.g_job, left)
            fair = np.minimum(even, (demand[idx] / total).max(axis=1))
            share = (st.job_alloc[idx] / total).max(axis=1)
            ok = fair > 0
            self.unfair_sum[idx[ok]] += (share[ok] - fair[ok]) / fair[ok]
            self.unfair_n[idx[ok]] += 1

    def fluid_jct(self) -> NDArray[np.float64]:
        """(J,) each job's JCT under fluid weighted fair sharing (engine job order; NaN: never)."""
        spec = self.spec
        size = fluid.job_sizes(spec.g_job, spec.g_tasks, self.truth.g_dur, spec.g_demand, self.cluster.total,
                               spec.n_jobs)
        done = fluid.fluid_completion(spec.j_arrival, size, self.paths, spec.j_queue, spec.q_weight)
        return done - spec.j_arrival

    def result(self, now: float, preset: Preset, contentions: int, time_cap_reached: bool) -> RunResult:
        """The run's numbers at its end, ``now``; the node monitor's ``contentions``."""
        spec, st = self.spec, self.status
        r, q, times = len(spec.resources), self._q, np.array(self.times)
        series = {
            "t": times - spec.t0,
            "allocated": np.array(self.alloc).reshape(-1, r),
            "used": np.array(self.used).reshape(-1, r),
            "shares": np.array(self.shares).reshape(-1, q),
            "backlogged": np.array(self.backlogged, dtype=bool).reshape(-1, q),
            "resources": spec.resources,
            "queues": list(spec.queue_names),
            "harvesting": preset.harvesting,
        }
        finished = ~np.isnan(st.j_finish)
        jct = np.where(finished, st.j_finish - spec.j_arrival, np.nan)
        end = float(np.nanmax(st.j_finish)) if finished.any() else now
        makespan = max(end - spec.t0, 0.0)
        alloc_mean = self.alloc_integral / self._total / max(now - spec.t0, tolerances.MIN_DIVISOR)
        used_mean = series["used"].mean(axis=0) if self.used else np.zeros(r)
        ok = np.isfinite(jct)
        measured = self.unfair_n > 0
        unfair = np.where(measured, self.unfair_sum / np.maximum(self.unfair_n, 1), 0.0)
        negative = unfair[measured & (unfair < 0)]
        fluid_jct = self.fluid_jct()
        slow = np.maximum(np.array(st.regular_runs) - 1.0, 0.0)  # each regular task's slowdown against alone
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
                for i, r in enumerate(spec.resources)
            },
            "opportunistic_fraction": st.opp_done / max(st.tasks_done, 1),
            "harvested_fraction": st.harvested_s / st.run_s if st.run_s > 0 else 0.0,
            "lost_fraction": st.wasted_work_s / st.harvested_s if st.harvested_s > 0 else 0.0,
            "promotions": st.promotions,
            "regular_slowdown_mean": float(np.mean(slow)) if slow.size else 0.0,
            "regular_slowdown_p95": float(np.percentile(slow, 95)) if slow.size else 0.0,
            "evictions": st.evictions,
            "oom_kills": st.oom_kills,
            "contentions": contentions,
            "wasted_work_s": st.wasted_work_s,
            "lost_tasks": int(spec.g_tasks.sum() - st.g_done.sum()),
            "time_cap_reached": time_cap_reached,
            "tasks": int(spec.g_tasks.sum()),
            "tasks_started": st.task_starts,
            "jobs": spec.n_jobs,
            "jobs_finished": int(finished.sum()),
            "slowed_jobs_fraction": 0.0,
            "slowed_vs_fluid_fraction": slowed_fraction(jct, fluid_jct),
            "jct_mean_fluid_s": float(np.nanmean(fluid_jct)) if np.isfinite(fluid_jct).any() else 0.0,
            "queues_over_time": fairness_over_time(
                times, series["shares"], series["backlogged"], spec.q_weight,
                self.settings.packing.queue_usage_half_life_s, self.settings.packing.queue_share_floor),
            "unfairness": {
                "negative_jobs_fraction": float(negative.size / max(int(measured.sum()), 1)),
                "mean_negative": float(negative.mean()) if negative.size else 0.0,
            },
        }
        # Per-job arrays in the workload's own job order (the engine sorts jobs by arrival).
        jct_out, arrival_out = np.empty_like(jct), np.empty_like(jct)
        jct_out[spec.j_source] = jct
        arrival_out[spec.j_source] = spec.j_arrival
        return RunResult(preset.name, summary, jct_out, arrival_out, series)
