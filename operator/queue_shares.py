"""The numbers a Queue's status and ``kubectl get sq`` show, in the dispatcher's own terms (docs/operator.md).

Pure: from a view's arrays (with the released-but-unbound tasks reserved, as a pass sees them) and the decider's
decayed usage. One definition of fair share (``fairness.fair_shares``) and of the usage target
(``fairness.usage_targets``), the ones the dispatcher's tiers and holds read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray
from stowage.operator.dispatch_arrays import ViewArrays, queue_records
from stowage.operator.dispatch_records import DispatchView, QueueShare

from stowage.model import Pool
from stowage.policy import fairness
from stowage.policy.decide import POOLS

__all__ = ["queue_shares", "quota_used"]


def queue_shares(a: ViewArrays, view: DispatchView,
                 queue_usage: Callable[[Pool, Sequence[str]], NDArray[np.float64] | None]) -> list[QueueShare]:
    """Per queue: allocation, dominant share per pool, fair share and usage target, from the view as it is.

    The fair share is the dispatcher's (``fairness.fair_shares``, weighted max-min over the regular pool, the
    queues with tasks ready to start wanting more): the level its floor and holds read. The usage target is
    what its tiers even out (``fairness.usage_targets``: the backlogged queues' decayed usage split by weight;
    a queue with nothing waiting, its own usage)."""
    queues = queue_records(view)
    if not queues:  # none known yet (the operator's first pass)
        return []
    weights = np.array([q.weight for q in queues], dtype=np.float64)
    total = a.alloc.sum(axis=0) if a.node_names else np.zeros(len(a.resources))
    # Backlogged as a pass sees it: tasks ready to start (the opportunistic pool: in queues that allow it).
    waiting = np.zeros(len(queues), dtype=bool)
    q_index = {q.name: i for i, q in enumerate(queues)}
    for g in view.groups:
        if g.queue in q_index and g.releasable > 0:
            waiting[q_index[g.queue]] = True
    backlogged = {Pool.REGULAR.value: waiting,
                  Pool.OPPORTUNISTIC.value: waiting & np.array([q.opportunistic for q in queues], dtype=bool)}
    out = []
    shares = {pool.value: fairness.dominant_shares(a.queue_alloc[p], total, weights) for p, pool in
              enumerate(POOLS)}
    plain = {pool.value: fairness.dominant_shares(a.queue_alloc[p], total, np.ones(len(queues))) for p, pool in
             enumerate(POOLS)}
    fair = fairness.fair_shares(plain[Pool.REGULAR.value], weights, waiting)
    names = [q.name for q in queues]
    targets: dict[str, NDArray[np.float64]] = {}
    used: dict[str, NDArray[np.float64]] = {}
    for pool in POOLS:
        decayed = queue_usage(pool, names)
        used[pool.value] = plain[pool.value] if decayed is None else decayed
        targets[pool.value] = fairness.usage_targets(used[pool.value], weights, backlogged[pool.value])
    for i, q in enumerate(queues):
        out.append(QueueShare(
            name=q.name,
            allocated={pool.value: {r: float(x) for r, x in zip(a.resources, a.queue_alloc[p, i], strict=True)
                                    if x > 0} for p, pool in enumerate(POOLS)},
            dominant_share={pool: float(s[i]) for pool, s in shares.items()},
            share={pool: float(s[i]) for pool, s in plain.items()},
            fair_share=float(fair[i]),
            usage={pool: float(u[i]) for pool, u in used.items()},
            usage_target={pool: float(t[i]) for pool, t in targets.items()},
            quota_used=quota_used(a, p_alloc=a.queue_alloc[:, i], quota=q.quota),
        ))
    return out


def quota_used(a: ViewArrays, p_alloc: NDArray[np.float64],
                quota: Mapping[str, float] | None) -> dict[str, dict[str, float]]:
    """pool → resource → allocated / quota, for the resources ``quota`` names (a zero quota counts as used up)."""
    if not quota:
        return {}
    index = {r: k for k, r in enumerate(a.resources)}
    out: dict[str, dict[str, float]] = {}
    for p, pool in enumerate(POOLS):
        used = {}
        for name, limit in sorted(quota.items()):
            held = float(p_alloc[p, index[name]]) if name in index else 0.0
            used[name] = held / limit if limit > 0 else 1.0
        out[pool.value] = used
    return out
