"""Regular and harvestable (opportunistic) capacity of nodes, and which running opportunistic pods to promote.

Two pools per node (UBIS §IV, OPERA Eq. 6–7):

- **regular**: ``A_reg = allocatable − Σ requests of regular pods`` (OPERA Eq. 6,
  UBIS Alg. 1 l.11), what kube-scheduler itself would call free.
- **harvestable**: ``A_opp = T_alloc·C − U − B − S`` (UBIS Alg. 1 l.21, OPERA Eq. 4):
  capacity up to the over-allocation threshold, less measured usage ``U``,
  less capacity blocked after contention ``B`` (OPERA PRESERVE), less the
  *assumed* usage ``S`` of pods bound too recently to show in ``U`` (Tetris §4.1
  ramp-up allowance; UBIS §V-A "we conservatively assume that these newly
  allocated containers will use all the resources allocated to them").

Shapes: N nodes, R resources, P pods/requests. Units as the caller's (cores,
bytes, bytes/s); seconds for times. Every input is clamped, never trusted:
negative amounts count as 0, and a NaN usage counts as a full node so a node
with unknown usage harvests nothing (fail safe, DESIGN.md).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stowage.errors import InvalidInput
from stowage.policy import tolerances
from stowage.policy.alignment import nan_to_num_if_needed

__all__ = [
    "assumed",
    "harvestable",
    "in_sample",
    "promotions",
    "regular_available",
]


def _arr(value: ArrayLike, field: str, ndim: int) -> NDArray[np.float64]:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != ndim:
        raise InvalidInput(f"{field}.shape", arr.shape, f"must be a {ndim}-D array")
    return arr


def _amount(arr: NDArray[np.float64], nan: float = 0.0) -> NDArray[np.float64]:
    """Non-negative finite amounts; NaN → ``nan``; +inf → treat as huge but finite."""
    # −inf: nan_to_num's lowest float, then 0 by the maximum.
    return np.maximum(nan_to_num_if_needed(arr, nan=nan, posinf=np.finfo(np.float64).max), 0.0)


def harvestable(
    capacity: ArrayLike,
    usage: ArrayLike,
    blocked: ArrayLike,
    assumed: ArrayLike,
    t_alloc: ArrayLike,
) -> NDArray[np.float64]:
    """Capacity opportunistic pods may still take on each node (UBIS Alg. 1 l.21, OPERA Eq. 4).

    ``A_opp = max(T_alloc·C − U − B − S, 0)``, so ``0 ≤ A_opp ≤ T_alloc·C``.

    Args:
        capacity: (N, R) node capacity ``C`` (NaN/negative → 0).
        usage: (N, R) measured usage ``U`` of *all* pods. NaN (no sample) → ``C``,
            so that node harvests nothing on that resource.
        blocked: (N, R) ``B``, capacity held back after contention (OPERA PRESERVE).
        assumed: (N, R) ``S`` from :func:`assumed`.
        t_alloc: (R,) over-allocation threshold per resource, or (N, R) per node
            (UBIS lets each node set its own); clamped to ``[0, 1]``, NaN → 0.
            Default in config: ``harvest.t_alloc`` = 0.9 on every resource.

    Returns:
        (N, R) harvestable capacity.
    """
    cap = _amount(_arr(capacity, "capacity", 2))
    use = np.asarray(usage, dtype=np.float64)
    blk = np.asarray(blocked, dtype=np.float64)
    ass = np.asarray(assumed, dtype=np.float64)
    for name, arr in (("usage", use), ("blocked", blk), ("assumed", ass)):
        if arr.shape != cap.shape:
            raise InvalidInput(f"{name}.shape", arr.shape, f"must be {cap.shape} like capacity")
    t = np.clip(np.nan_to_num(np.asarray(t_alloc, dtype=np.float64), nan=0.0), 0.0, 1.0)
    if t.shape not in ((cap.shape[1],), cap.shape):
        raise InvalidInput("t_alloc.shape", t.shape, f"must be ({cap.shape[1]},) or {cap.shape}")
    use = np.where(np.isnan(use), cap, _amount(use))
    ceiling = t * cap
    return np.clip(ceiling - use - _amount(blk) - _amount(ass), 0.0, ceiling)


def in_sample(
    started_at_s: ArrayLike,
    node_index: ArrayLike,
    sampled_at_s: ArrayLike,
    period_s: float,
) -> NDArray[np.bool_]:
    """(P,) whether each pod's usage is in its node's latest utilization sample.

    A sample taken at ``t`` measures the period before ``t`` (a rate over ``period_s``), so it shows a pod
    that was running for all of it: ``started + period ≤ t``. A pod not started yet (NaN), on no node or a node
    out of range, or on a node with no sample (NaN, −inf) is not in it: the conservative answer.

    Args:
        started_at_s: (P,) when each pod's containers started (the simulator: its start).
        node_index: (P,) int, its node; out of ``[0, N)`` → not in any sample.
        sampled_at_s: (N,) when each node's latest sample was taken, on the same clock.
        period_s: the node monitor's sampling period (``contention.sample_interval_s``, 1 s).
    """
    started = np.asarray(started_at_s, dtype=np.float64).reshape(-1)
    idx = np.asarray(node_index).reshape(-1)
    sampled = np.asarray(sampled_at_s, dtype=np.float64).reshape(-1)
    if idx.shape != started.shape:
        raise InvalidInput("node_index.shape", idx.shape, f"must be {started.shape}, one per pod")
    idx = np.asarray(np.nan_to_num(idx.astype(np.float64), nan=-1.0), dtype=np.int64)
    on = (idx >= 0) & (idx < sampled.shape[0])
    at = np.where(on, sampled[np.where(on, idx, 0)] if sampled.size else np.nan, np.nan)
    with np.errstate(invalid="ignore"):
        return on & (started + max(float(period_s), 0.0) <= at)


def assumed(
    demands: ArrayLike,
    bound_at_s: ArrayLike,
    node_index: ArrayLike,
    now_s: float,
    ramp_up_s: float,
    n_nodes: int,
    measured: ArrayLike | None = None,
    included: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """Usage not yet visible in the samples, per node: ``S`` of :func:`harvestable`.

    ``S[n] = Σ_{p on n, not in a sample, now − bound_p < ramp_up} max(d_p − m_p, 0)``

    A newly bound pod is assumed to use its whole demand ``d_p`` until a sample that includes it has been seen
    (``included``, :func:`in_sample`): UBIS §IV-B assumes "the newly allocated containers will utilize all
    allocated resources" until the next heartbeat reports them; Koordinator's load-aware scheduling reserves the
    estimate above the reported usage until the pod's usage is reported. From then on the pod counts only through
    ``U``. The part its own measured usage ``m_p`` already shows is in ``U`` and is not counted twice.
    ``ramp_up_s`` is an upper limit (Tetris §4.1: 30 s): a pod older than that counts only through ``U``, sample or
    not (a node without a fresh sample harvests nothing anyway). Every bound pod counts, regular or
    opportunistic: a new regular pod's usage is no more visible in ``U`` than an opportunistic one's, and the
    extender, the dispatcher and the simulator must agree on ``S``.

    Args:
        demands: (P, R) each pod's demand (negative → 0, NaN → 0).
        bound_at_s: (P,) bind time. A bind time in the future (clock skew) or
            NaN (unknown) counts as just bound: the conservative choice.
        node_index: (P,) int, the node each pod is bound to. Out of ``[0,
            n_nodes)`` (e.g. −1 = not bound) → ignored.
        now_s: current time, same clock as ``bound_at_s``.
        ramp_up_s: the upper limit; default in config ``harvest.ramp_up_s`` = 30 s.
            ``≤ 0`` → nothing is assumed.
        n_nodes: N.
        measured: optional (P, R) each pod's own measured usage (NaN → 0);
            None → nothing measured yet, count the full demand.
        included: optional (P,) bool, the pod is in its node's latest sample (:func:`in_sample`): it is
            not assumed. None → no pod is known to be in a sample (the allowance lasts ``ramp_up_s``).

    Returns:
        (N, R) assumed usage per node.
    """
    d = _amount(_arr(demands, "demands", 2))
    p, r = d.shape
    bound = np.asarray(bound_at_s, dtype=np.float64).reshape(-1)
    idx = np.asarray(node_index).reshape(-1)
    if bound.shape != (p,):
        raise InvalidInput("bound_at_s.shape", bound.shape, f"must be ({p},), one per pod")
    if idx.shape != (p,):
        raise InvalidInput("node_index.shape", idx.shape, f"must be ({p},), one per pod")
    if n_nodes < 0:
        raise InvalidInput("n_nodes", n_nodes, "must be ≥ 0")
    out = np.zeros((n_nodes, r), dtype=np.float64)
    if p == 0 or not ramp_up_s > 0:
        return out
    if measured is not None:
        m = _amount(np.asarray(measured, dtype=np.float64))
        if m.shape != d.shape:
            raise InvalidInput("measured.shape", m.shape, f"must be {d.shape} like demands")
        d = np.maximum(d - m, 0.0)
    age = float(now_s) - bound
    recent = ~(age >= ramp_up_s)  # NaN age (unknown bind time) counts as recent
    if included is not None:
        seen = np.asarray(included, dtype=bool).reshape(-1)
        if seen.shape != (p,):
            raise InvalidInput("included.shape", seen.shape, f"must be ({p},), one per pod")
        recent &= ~seen
    if idx.dtype.kind in "iu":  # integer indices cannot be NaN
        idx_int = idx.astype(np.int64)
    else:
        idx_int = np.asarray(np.nan_to_num(idx.astype(np.float64), nan=-1.0), dtype=np.int64)
    on_node = (idx_int >= 0) & (idx_int < n_nodes)
    keep = recent & on_node
    at, dk = idx_int[keep], d[keep]
    # bincount adds in index order from 0.0, as np.add.at does (same bits), at a fraction of its cost.
    for col in range(r):
        out[:, col] = np.bincount(at, weights=dk[:, col], minlength=n_nodes)
    return out


def promotions(
    demands: ArrayLike,
    node_index: ArrayLike,
    queue_index: ArrayLike,
    regular_free: ArrayLike,
    quota_left: ArrayLike | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Running opportunistic pods to promote in place, and the regular room they leave (UBIS Alg. 1 l.6–8).

    UBIS §IV-D: "Same node promotions are easy and always beneficial": a running opportunistic container whose
    node now has the regular room for it becomes regular there, before any new allocation on that node (Alg. 1
    promotes, then allocates). It keeps its work; it is no longer evicted under contention, and the kernel gives
    it a regular pod's cpu weight. Walk the pods in the caller's order (the dispatcher: oldest first, the most
    work at stake); one whose demand fits its node's regular room on every resource, and its queue's regular
    quota where one is set, is promoted and its demand comes off both before the next is looked at. Never across
    nodes (UBIS: a task would lose its work).

    Args:
        demands: (P, R) each running opportunistic pod's demand; a row with a NaN is never promoted.
        node_index: (P,) int, its node; out of range → never promoted.
        queue_index: (P,) int, its queue (for ``quota_left``); −1: no queue.
        regular_free: (N, R) ``A_reg`` (:func:`regular_available`).
        quota_left: optional (Q, R) what each queue's regular quota still allows (``+inf``: no quota); None: none.

    Returns:
        ``(promoted, regular_free_after)``: the rows promoted, in order, and (N, R) the regular room left.
    """
    d = _arr(demands, "demands", 2)
    reg = _amount(_arr(regular_free, "regular_free", 2)).copy()
    idx = np.asarray(node_index, dtype=np.int64).reshape(-1)
    qix = np.asarray(queue_index, dtype=np.int64).reshape(-1)
    p = d.shape[0]
    if d.shape[1] != reg.shape[1] and p:
        raise InvalidInput("demands.shape", d.shape, f"must have {reg.shape[1]} resources like regular_free")
    for name, arr in (("node_index", idx), ("queue_index", qix)):
        if arr.shape != (p,):
            raise InvalidInput(f"{name}.shape", arr.shape, f"must be ({p},), one per pod")
    quota = None if quota_left is None else np.array(quota_left, dtype=np.float64)
    ok = ~np.isnan(d).any(axis=1) & (idx >= 0) & (idx < reg.shape[0])
    d = _amount(d)
    # Room only shrinks as the walk goes on: a pod that does not fit its node's room now never will, so the
    # walk visits only those that do (most running opportunistic pods, on most passes, do not).
    fits_now = np.zeros(p, dtype=bool)
    at = np.flatnonzero(ok)
    fits_now[at] = (d[at] <= reg[idx[at]] * (1.0 + tolerances.FEASIBILITY_RTOL)).all(axis=1)
    out: list[int] = []
    for i in np.flatnonzero(fits_now).tolist():
        n = int(idx[i])
        if not (d[i] <= reg[n] * (1.0 + tolerances.FEASIBILITY_RTOL)).all():
            continue
        q = int(qix[i])
        if quota is not None and 0 <= q < quota.shape[0]:
            left = np.where(np.isnan(quota[q]), 0.0, quota[q])  # +inf (no quota) stays +inf
            if not (d[i] <= left * (1.0 + tolerances.FEASIBILITY_RTOL)).all():
                continue
            quota[q] -= d[i]
        reg[n] = np.maximum(reg[n] - d[i], 0.0)
        out.append(i)
    return np.array(out, dtype=np.int64), reg


def regular_available(allocatable: ArrayLike, regular_requests: ArrayLike) -> NDArray[np.float64]:
    """Free capacity for regular pods: ``A_reg = max(allocatable − Σ requests, 0)`` (OPERA Eq. 6).

    allocatable, regular_requests: (N, R); ``regular_requests`` is the sum of
    the requests of the regular pods bound to each node (opportunistic pods
    request 0 and do not appear). NaN allocatable → 0; NaN requests → the
    whole allocatable (unknown → nothing free). Returns (N, R).
    """
    alloc = _amount(_arr(allocatable, "allocatable", 2))
    req = np.asarray(regular_requests, dtype=np.float64)
    if req.shape != alloc.shape:
        raise InvalidInput("regular_requests.shape", req.shape, f"must be {alloc.shape} like allocatable")
    req = np.where(np.isnan(req), alloc, _amount(req))
    return np.maximum(alloc - req, 0.0)
