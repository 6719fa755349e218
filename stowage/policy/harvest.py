"""Regular and harvestable (opportunistic) capacity of nodes, and UBIS's per-node assignment.

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

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stowage.errors import InvalidInput
from stowage.policy.alignment import nan_to_num_if_needed

__all__ = [
    "NOT_PLACED",
    "OPPORTUNISTIC",
    "REGULAR",
    "NodeAssignment",
    "assign_on_node",
    "assign_on_node_detailed",
    "assumed",
    "harvestable",
    "regular_available",
]

NOT_PLACED = 0
REGULAR = 1
OPPORTUNISTIC = 2

# Same float-noise allowance as alignment.FEASIBILITY_RTOL, relative to what is free.
_FIT_RTOL = 1e-9


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


def assumed(
    demands: ArrayLike,
    bound_at_s: ArrayLike,
    node_index: ArrayLike,
    now_s: float,
    ramp_up_s: float,
    n_nodes: int,
    measured: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """Usage not yet visible in the samples, per node: ``S`` of :func:`harvestable`.

    ``S[n] = Σ_{p on n, now − bound_p < ramp_up} max(d_p − m_p, 0)``

    A pod bound less than ``ramp_up_s`` ago is assumed to use its whole demand
    ``d_p``; the part its own measured usage ``m_p`` already shows is in ``U``
    and is not counted twice. After ``ramp_up_s`` the pod counts only through
    ``U``. Every bound pod counts, regular or opportunistic: a new regular pod's
    usage is no more visible in ``U`` than an opportunistic one's, and the
    extender, the dispatcher and the simulator must agree on ``S`` (a pod the
    dispatcher releases into room the extender does not see waits in backoff).
    Tetris §4.1 lets the allowance decay to zero over 30 s; we keep it at
    the full demand until it expires (UBIS's conservative assumption), which
    can only harvest less, never overcommit more.

    Args:
        demands: (P, R) each pod's demand (negative → 0, NaN → 0).
        bound_at_s: (P,) bind time. A bind time in the future (clock skew) or
            NaN (unknown) counts as just bound: the conservative choice.
        node_index: (P,) int, the node each pod is bound to. Out of ``[0,
            n_nodes)`` (e.g. −1 = not bound) → ignored.
        now_s: current time, same clock as ``bound_at_s``.
        ramp_up_s: allowance window; default in config ``harvest.ramp_up_s`` = 30 s.
            ``≤ 0`` → nothing is assumed.
        n_nodes: N.
        measured: optional (P, R) each pod's own measured usage (NaN → 0);
            None → nothing measured yet, count the full demand.

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


class NodeAssignment(NamedTuple):
    """Outcome of one node heartbeat (:func:`assign_on_node_detailed`)."""

    classes: NDArray[np.int64]
    """(P,) 0 = not placed, 1 = regular, 2 = opportunistic."""
    regular_left: NDArray[np.float64]
    """(R,) regular free capacity after the placements."""
    harvestable_left: NDArray[np.float64]
    """(R,) harvestable capacity after the placements."""


def _fits(demand: NDArray[np.float64], free: NDArray[np.float64]) -> bool:
    return bool(np.all(demand <= free * (1.0 + _FIT_RTOL)))


def assign_on_node_detailed(
    demands: ArrayLike,
    may_be_opportunistic: ArrayLike,
    regular_free: ArrayLike,
    harvestable_free: ArrayLike,
    *,
    must_be_opportunistic: ArrayLike | None = None,
) -> NodeAssignment:
    """UBIS Algorithm 1 for one node, returning the classes and what is left.

    See :func:`assign_on_node` for the rules.
    """
    d = _arr(demands, "demands", 2)
    p, r = d.shape
    nan_demand = np.isnan(d).any(axis=1)
    d = _amount(d)
    may = np.asarray(may_be_opportunistic, dtype=bool).reshape(-1)
    if may.shape != (p,):
        raise InvalidInput("may_be_opportunistic.shape", may.shape, f"must be ({p},), one per request")
    must = (
        np.zeros(p, dtype=bool)
        if must_be_opportunistic is None
        else np.asarray(must_be_opportunistic, dtype=bool).reshape(-1)
    )
    if must.shape != (p,):
        raise InvalidInput("must_be_opportunistic.shape", must.shape, f"must be ({p},), one per request")
    reg = _amount(_arr(regular_free, "regular_free", 1))
    opp = _amount(_arr(harvestable_free, "harvestable_free", 1))
    for name, arr in (("regular_free", reg), ("harvestable_free", opp)):
        if arr.shape != (r,):
            raise InvalidInput(f"{name}.shape", arr.shape, f"must be ({r},) like a demand row")

    classes = np.full(p, NOT_PLACED, dtype=np.int64)
    # Lines 11–19: regular containers first, in the caller's (fairness) order.
    for i in range(p):
        if nan_demand[i] or must[i] or not _fits(d[i], reg):
            continue
        classes[i] = REGULAR
        reg = np.maximum(reg - d[i], 0.0)
        # Alloc^new carries into line 22: a container placed now has zero measured
        # usage yet will use its allocation, so it also shrinks the harvestable room.
        opp = np.maximum(opp - d[i], 0.0)
    # Lines 21–29: then opportunistic containers on the harvestable room.
    for i in range(p):
        if classes[i] != NOT_PLACED or nan_demand[i] or not (may[i] or must[i]):
            continue
        if _fits(d[i], opp):
            classes[i] = OPPORTUNISTIC
            opp = np.maximum(opp - d[i], 0.0)
    return NodeAssignment(classes, reg, opp)


def assign_on_node(
    demands: ArrayLike,
    may_be_opportunistic: ArrayLike,
    regular_free: ArrayLike,
    harvestable_free: ArrayLike,
    *,
    must_be_opportunistic: ArrayLike | None = None,
) -> NDArray[np.int64]:
    """UBIS Algorithm 1 for one node heartbeat: which pending requests run here, and as what.

    Rules, in the order of Algorithm 1:

    1. (l.11–19) Walk the requests in the given order (the caller's fairness
       order). A request that fits ``regular_free`` on every resource becomes
       **regular** (code 1); its demand comes off ``regular_free`` *and* off
       ``harvestable_free`` (l.22 compares against the same ``Alloc^new``: a new
       container shows no usage yet but will use what it was given).
    2. (l.21–29) Walk the remaining requests in order again. One that may be
       opportunistic and fits ``harvestable_free`` becomes **opportunistic**
       (code 2); its demand comes off ``harvestable_free`` only (opportunistic
       pods request 0, so regular room is untouched).
    3. Everything else is **not placed** (code 0).

    Args:
        demands: (P, R) each request's demand, in priority order. A row with a
            NaN is never placed; negative entries count as 0.
        may_be_opportunistic: (P,) bool, the request accepts harvested capacity
            (pod ``stowage.io/opportunistic: true|auto`` and its queue Allows it).
        regular_free: (R,) ``A_reg`` of this node (:func:`regular_available`).
        harvestable_free: (R,) ``A_opp`` of this node (:func:`harvestable`).
        must_be_opportunistic: optional (P,) bool: requests labelled ``"true"``
            skip step 1 and may only run opportunistically.

    Returns:
        (P,) int64 class codes: ``NOT_PLACED`` 0, ``REGULAR`` 1, ``OPPORTUNISTIC`` 2.

    Where we differ from Algorithm 1, and why:

    - Promotion (l.6–8) is not done here; it changes running pods, not pending
      requests, and belongs to the dispatcher.
    - Availability for opportunistic pods is our ``A_opp = T_alloc·C − U − B − S``
      rather than ``T_alloc·Cap − Util``: ``B`` adds OPERA's PRESERVE block and
      ``S`` keeps the ramp-up allowance across heartbeats, not just within one.
    - ``AllocateXContainer`` in YARN returns the next fitting request in fair
      order; we make that explicit: a request that does not fit is skipped and
      later, smaller ones may still be placed (no head-of-line blocking).
    - Optional ``must_be_opportunistic`` (our ``"true"`` intent) has no UBIS
      counterpart: UBIS only lets jobs opt out, not force opportunistic.
    """
    return assign_on_node_detailed(
        demands,
        may_be_opportunistic,
        regular_free,
        harvestable_free,
        must_be_opportunistic=must_be_opportunistic,
    ).classes
