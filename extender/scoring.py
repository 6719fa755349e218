"""Prioritize: Tetris alignment against the class's availability, scaled to kube-scheduler's 0..10.

``a(t,n) = Σ_r (d_r/C_r)·(A_r/C_r)`` (policy.alignment) with ``A = A_reg`` for a regular
pod and ``A = A_opp`` for an opportunistic one; nodes not named in the pod's
``stowage.io/data-nodes`` lose ``packing.remote_penalty`` of their score. Infeasible
nodes score 0, the best feasible node 10 (policy.alignment.to_extender_scores).

Disk/network bandwidth counts only on nodes that declare it: a node without a
bandwidth annotation neither constrains nor rewards the pod's bandwidth demand.
"""

from __future__ import annotations

import numpy as np
from stowage.extender.pods import PodRequest
from stowage.extender.snapshot import ScoringView, Snapshot

from stowage.policy import alignment
from stowage.resources import DISK, NETWORK

__all__ = ["score_nodes"]


def _raw_scores(pod: PodRequest, snap: Snapshot | ScoringView) -> np.ndarray:
    demand = snap.packed_demand(pod)
    capacity = snap.capacity
    available = (snap.harvestable if pod.opportunistic else snap.regular_available).copy()
    cols = [snap.resources.index(r) for r in (DISK, NETWORK) if r in snap.resources]
    if cols and not pod.opportunistic:
        # A regular pod's bandwidth availability is what the node declares (× bandwidth_fill) less what its regular
        # pods reserve; an opportunistic pod's is measured, in A_opp (it reserves no declared bandwidth).
        available[:, cols] = snap.bandwidth_free[:, cols]
    remote = None
    if pod.data_nodes:
        remote = np.fromiter((n not in pod.data_nodes for n in snap.names), dtype=bool, count=len(snap.names))
    if not cols or not demand[cols].any():
        return alignment.alignment(
            demand, capacity, available, remote=remote, remote_penalty=snap.settings.packing.remote_penalty
        )
    # Group nodes by which bandwidth resources they declare; undeclared ones drop out of the demand.
    declared = snap.declared_capacity[:, cols] > 0
    scores = np.full(len(snap.names), -np.inf)
    for pattern in {tuple(row) for row in declared}:
        rows = np.flatnonzero((declared == np.array(pattern)).all(axis=1))
        d = demand.copy()
        for c, has in zip(cols, pattern, strict=True):
            if not has:
                d[c] = 0.0
        scores[rows] = alignment.alignment(
            d,
            capacity[rows],
            available[rows],
            remote=None if remote is None else remote[rows],
            remote_penalty=snap.settings.packing.remote_penalty,
        )
    return scores


def score_nodes(pod: PodRequest, snap: Snapshot | ScoringView) -> tuple[np.ndarray, int | None]:
    """(N,) int64 scores in 0..10, and the index of the best feasible node (None if none fits).

    Pods of other schedulers score 0 everywhere and have no best node.
    """
    if not pod.ours:
        return np.zeros(len(snap.names), dtype=np.int64), None
    raw = _raw_scores(pod, snap)
    best = int(np.argmax(raw)) if raw.size and np.isfinite(raw).any() else None
    return alignment.to_extender_scores(raw), best
