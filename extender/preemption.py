"""Preempt: which of the scheduler's candidate victims Stowage accepts.

- An opportunistic victim is always acceptable: it runs on borrowed capacity. The class is the label
  ``stowage.io/class`` as it is now: a pod the operator promoted in place is regular here, though its
  priority class stays ``stowage-opportunistic`` (immutable) and kube-scheduler offers it as a victim to
  any pod of higher priority.
- A regular victim is acceptable only if its queue is above its fair share of the regular pool
  (``policy.fairness.fair_shares``, the dispatcher's weighted max-min, with the Queues' live
  weights); a regular pod without a queue, or one Stowage has never seen, is protected.
- The scheduler's dry run picked the *minimum* victim set for each node, so a node
  with any unacceptable victim is dropped whole (evicting only part of the set
  would kill pods without making room), and so is a node left without victims:
  kube-scheduler rejects an empty victim list ("expected at least one victim").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from stowage.extender.pods import PodRequest

from stowage.kube.records import PodRecord
from stowage.policy import fairness

__all__ = ["VictimInfo", "over_share_queues", "select_victims"]


@dataclass(frozen=True, slots=True)
class VictimInfo:
    opportunistic: bool
    queue: str | None


def over_share_queues(
    pods: list[PodRecord],
    resources: tuple[str, ...],
    total: np.ndarray,
    weights: Mapping[str, float] | None = None,
    pending: set[str] | frozenset[str] = frozenset(),
) -> set[str]:
    """Queues whose dominant share of the regular pool exceeds their weighted fair share.

    ``allocated`` (Q,R) sums the requests of each queue's regular pods; ``total`` (R,)
    is the cluster's allocatable; ``weights`` are the Queues' ``spec.weight`` (the extender's
    ``queues.QueueWeights``), 1 for a queue missing from them.
    The fair share is the dispatcher's (``policy.fairness.fair_shares``, weighted max-min): the queues in
    ``pending`` (the preemptor's) want more, every other queue wants what it holds. A queue is over its share when
    its unweighted dominant share ``max_r(alloc_qr/total_r)`` exceeds it: it holds more than the level ``w_q·L``
    the pending queues are filled to, so a queue that holds less than its weight's level is never preempted.
    """
    queues = sorted({p.queue for p in pods if p.queue and not p.opportunistic} | set(pending))
    if not queues:
        return set()
    col = {r: i for i, r in enumerate(resources)}
    qi = {q: i for i, q in enumerate(queues)}
    allocated = np.zeros((len(queues), len(resources)))
    for p in pods:
        if p.opportunistic or not p.queue:
            continue
        for name, amount in p.demand.items():
            if name in col:
                allocated[qi[p.queue], col[name]] += amount
    w = np.array([float((weights or {}).get(q, 1.0)) for q in queues])
    dominant = fairness.dominant_shares(allocated, total, np.ones(len(queues)))
    fair = fairness.fair_shares(dominant, w, np.array([q in pending for q in queues], dtype=bool))
    return {q for q, d, f in zip(queues, dominant.tolist(), fair.tolist(), strict=True) if d > f}


def select_victims(
    pod: PodRequest,
    candidates: Mapping[str, tuple[list[str], int]],
    lookup: Callable[[str], VictimInfo | None],
    over_share: set[str],
) -> dict[str, tuple[list[str], int]]:
    """Keep the nodes whose every victim is acceptable; pods of other schedulers keep all candidates."""
    if not pod.ours:
        return {node: (uids, pdb) for node, (uids, pdb) in candidates.items() if uids}
    kept: dict[str, tuple[list[str], int]] = {}
    for node, (uids, pdb) in candidates.items():
        if not uids:
            continue
        infos = [lookup(uid) for uid in uids]
        if all(i is not None and (i.opportunistic or (i.queue is not None and i.queue in over_share)) for i in infos):
            kept[node] = (uids, pdb)
    return kept
