"""Fluid weighted fair sharing: each job's completion time were the cluster one processor shared fairly.

The reference against which the report counts *slowed* jobs (issue #21 §2). It is FSP's model (seed 002, §3.2–3.3):
the cluster is a single server of capacity 1 (one cluster-second of work per second), jobs are served by
(generalised) processor sharing, and a job that needs only part of the cluster runs at most at that part (Fig. 2:
"it is sufficient to allocate 35 % of the cluster to serve it"). Computed exactly, event by event on arrivals and
completions: between two events every rate is constant, so progress is piecewise linear and each completion time is
solved for, not stepped towards.

The model, precisely:

* **Job size** ``W_j = Σ_groups tasks × duration × max_r(demand_r / C_r)``, with ``C_r`` the cluster's total
  capacity of resource ``r``: cluster-seconds of the job's bottleneck resource, charged per task as DRF charges an
  allocation (its dominant share). Per task rather than ``max_r`` of the job's summed work because a job's phases
  (cpu-heavy maps, network-heavy reduces) are separated by barriers and never overlap, so their bottlenecks add up.
  Demand is the *request* (what a fair allocation would reserve), not measured usage.
* **Rate cap** ``c_j = min(1, W_j / L_j)`` with ``L_j`` the job's critical path (longest chain of group durations
  through the barriers, :func:`stowage.sim.metrics.critical_paths`). Alone, a job finishes in ``max(L_j, W_j)``:
  never faster than its critical path, never faster than the whole cluster allows. For one phase of ``n`` tasks of
  duration ``d`` and dominant share ``s`` this is ``c = n·s``, FSP Fig. 2's "job j requires 55 % of the cluster".
  Otherwise barriers and DAG shape are ignored: the job progresses at a constant maximal rate (FSP §3 likewise does
  "not differentiate between MAP and REDUCE tasks"). A job with ``W_j = 0`` (no tasks, zero demand) takes no
  capacity and finishes at ``a_j + L_j``; one with infinite size (demand on a resource the cluster has none of)
  never finishes (NaN).
* **Sharing** (FSP §3.3, GPS): the active queues (those with an unfinished arrived job) share capacity 1 in
  proportion to their weights, within a queue the active jobs share equally (PS), and both levels are max-min fair
  with the caps: capacity a job or queue cannot use goes to the others (work conserving). Queue ``job_order``
  (FIFO/SRTF/FSP) is a policy, not part of fairness, and is ignored.

It reads true durations: a reference for reporting, never an input to a policy. Pure numpy; no clock, no randomness.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from stowage.policy.tolerances import EQUALITY_RTOL, ZERO_ATOL

__all__ = ["fluid_completion", "job_sizes"]



def job_sizes(
    g_job: NDArray[np.int64],
    g_tasks: NDArray[np.int64],
    g_dur: NDArray[np.float64],
    g_demand: NDArray[np.float64],
    total: NDArray[np.float64],
    n_jobs: int,
) -> NDArray[np.float64]:
    """(J,) ``W_j = Σ tasks × duration × max_r(demand_r / C_r)`` in cluster-seconds.

    ``g_*``: per task group (job index, task count, duration s, (G, R) demand); ``total``: (R,)
    cluster capacity. A demand on a resource of capacity 0 makes the size infinite.
    """
    share = np.zeros_like(g_demand, dtype=np.float64)
    np.divide(g_demand, total, out=share, where=total > 0)
    share[(g_demand > 0) & ~(total > 0)] = np.inf
    dominant = share.max(axis=1) if share.shape[1] else np.zeros(len(g_job))
    work = g_tasks * g_dur
    per_group = np.zeros(len(g_job))
    busy = work > 0  # 0 tasks × an infinite share stays 0, not NaN
    per_group[busy] = work[busy] * dominant[busy]
    out = np.zeros(n_jobs)
    np.add.at(out, g_job, per_group)
    return out


def _water_fill(weight: NDArray[np.float64], cap: NDArray[np.float64], capacity: float,
                sorted_by_ratio: bool = False) -> NDArray[np.float64]:
    """Rates ``min(w_i·λ, c_i)`` with λ the largest level whose rates sum to at most ``capacity``.

    ``sorted_by_ratio``: ``cap / weight`` is already ascending (saves the sort on the hot path).
    Jobs in ratio order are capped up to a point and share the level beyond it: with the first
    ``k`` capped, ``λ_k = (capacity − Σ_{i<k} c_i) / Σ_{i≥k} w_i``, and ``k`` is the first position
    whose ratio exceeds ``λ_k``.
    """
    if cap.sum() <= capacity:
        return cap.copy()
    order = np.arange(len(cap)) if sorted_by_ratio else np.argsort(cap / weight, kind="stable")
    c, w = cap[order], weight[order]
    below = np.cumsum(c) - c
    above = w[::-1].cumsum()[::-1]
    level = (capacity - below) / above
    k = int(np.argmax(c > w * level))  # exists: Σ c > capacity
    sorted_rates = np.where(np.arange(len(c)) < k, c, w * level[k])
    rates = np.empty_like(cap)
    rates[order] = sorted_rates
    return rates


def fluid_completion(
    arrival: NDArray[np.float64],
    size: NDArray[np.float64],
    path: NDArray[np.float64],
    queue: NDArray[np.int64],
    weight: NDArray[np.float64],
) -> NDArray[np.float64]:
    """(J,) completion times under fluid weighted fair sharing (module docstring).

    ``arrival`` s, ``size`` cluster-seconds (:func:`job_sizes`), ``path`` critical path s,
    ``queue`` index into ``weight`` (queue weights > 0; a non-positive weight counts as 1).
    """
    n = len(arrival)
    done = np.full(n, np.nan)
    if n == 0:
        return done
    path = np.maximum(path, 0.0)
    w = np.where(weight > 0, weight, 1.0)
    free = size <= 0
    done[free] = arrival[free] + path[free]  # takes no capacity: only its critical path holds it back
    shared = np.flatnonzero(np.isfinite(size) & ~free)
    if not shared.size:
        return done
    cap = np.ones(n)
    long_path = shared[path[shared] > 0]
    cap[long_path] = np.minimum(1.0, size[long_path] / path[long_path])
    by_arrival = shared[np.argsort(arrival[shared], kind="stable")]
    queues = np.unique(queue[shared])
    # Within a queue jobs weigh the same, so water-filling wants them by cap: sort once, then keep
    # each queue's active jobs as an index array in that order (appending arrivals and re-sorting
    # only when something arrives).
    active: dict[int, NDArray[np.int64]] = {int(q): np.zeros(0, np.int64) for q in queues}
    left = size.copy()
    nxt, t = 0, float(arrival[by_arrival[0]])
    while True:
        if nxt < len(by_arrival) and arrival[by_arrival[nxt]] <= t:
            stop = int(np.searchsorted(arrival[by_arrival], t, side="right"))
            new = by_arrival[nxt:stop]
            nxt = stop
            for q in np.unique(queue[new]):
                both = np.concatenate([active[int(q)], new[queue[new] == q]])
                active[int(q)] = both[np.argsort(cap[both], kind="stable")]
        busy = [q for q, members in active.items() if len(members)]
        if not busy:
            if nxt >= len(by_arrival):
                break
            t = float(arrival[by_arrival[nxt]])
            continue
        members = [active[q] for q in busy]
        q_cap = np.array([cap[m].sum() for m in members])
        q_rate = _water_fill(w[busy], q_cap, 1.0)
        rates = [_water_fill(np.ones(len(m)), cap[m], float(r), sorted_by_ratio=True)
                 for m, r in zip(members, q_rate, strict=True)]
        step = min(float((left[m] / r).min()) for m, r in zip(members, rates, strict=True))
        if nxt < len(by_arrival):
            step = min(step, float(arrival[by_arrival[nxt]]) - t)
        t += step
        for q, m, r in zip(busy, members, rates, strict=True):
            finished = left[m] / r <= step * (1 + EQUALITY_RTOL) + ZERO_ATOL  # finishes in this step
            left[m] -= r * step
            done[m[finished]] = t
            active[q] = m[~finished]
    return done
