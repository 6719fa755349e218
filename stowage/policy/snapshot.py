"""What one dispatch pass knows (``PassSnapshot``), and the one builder of ``decide.DecideInput`` from it.

The operator's dispatcher (``stowage.operator.dispatcher``) fills a snapshot from its informers, the simulator's
packing presets (``stowage.sim.packing``) from the simulation's arrays; both hand it to ``build``, so what the
decision derives from those facts (the regular and the declared-bandwidth room, the duration evidence, the pool
total) and when it needs the two inputs that cost the adapter something (the harvestable room, the classifier's
features: ``decide.needs_harvestable``, ``decide.needs_features``) is written once, here. A field the decision
gains is added to the snapshot and to this builder, and both adapters see it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from stowage.model import JobOrder
from stowage.policy import decide, estimates, harvest, room

__all__ = ["PassSnapshot", "build", "shapes_of"]


@dataclass(frozen=True, slots=True)
class PassSnapshot:
    """One pass's facts on the decision's axes (N nodes, R resources, S shapes, G groups, J jobs, Q queues), as
    ``decide.DecideInput`` documents them; what ``build`` derives is named by what it is derived from."""

    now: float
    capacity: NDArray[np.float64]
    """(N, R) node capacity (allocatable)."""
    regular_requests: NDArray[np.float64]
    """(N, R) Σ requests (declared demand) of the regular pods on each node: the regular room and the
    declared-bandwidth room both follow from it."""
    bandwidth: NDArray[np.bool_]
    shapes: NDArray[np.float64]
    group_shape: NDArray[np.int64]
    group_key: Sequence[Hashable]
    group_job: NDArray[np.int64]
    group_queue: NDArray[np.int64]
    releasable: NDArray[np.int64]
    remaining: NDArray[np.int64]
    intent: NDArray[np.int64]
    finished: NDArray[np.int64]
    """(G,) finished tasks per group (the estimates' evidence)."""
    finished_fraction: NDArray[np.float64]
    finished_mean_s: NDArray[np.float64]
    """(G,) mean run time of the finished tasks (NaN or anything with none finished)."""
    hint_s: NDArray[np.float64]
    """(G,) the user's ``expectedDuration`` (NaN: none)."""
    elapsed_s: NDArray[np.float64]
    """(G,) the longest elapsed time of a running task (a lower bound; 0: none)."""
    history_s: NDArray[np.float64]
    """(G,) earlier runs of the group's recurring job (``estimates.RecurringHistory``; NaN: none)."""
    job_key: Sequence[Hashable]
    job_arrival: NDArray[np.float64]
    queue_name: Sequence[str]
    queue_weight: NDArray[np.float64]
    queue_order: Sequence[JobOrder]
    queue_opportunistic: NDArray[np.bool_]
    queue_alloc: NDArray[np.float64]
    node_key: Sequence[Hashable]
    queue_quota: NDArray[np.float64] | None = None
    duration_s: NDArray[np.float64] | None = None
    group_children: Sequence[Sequence[int]] | None = None
    regular_changed: bool = True
    explain: bool = False
    resources: Sequence[str] = ()
    sample_age_s: NDArray[np.float64] | None = None
    promotable: decide.Promotable | None = None


def shapes_of(demand: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """``(shapes, group_shape)`` of per-group demand rows (G, R): the distinct rows and each group's row of them."""
    if demand.shape[0] == 0:
        return np.zeros((0, demand.shape[1])), np.zeros(0, np.int64)
    shapes, inverse = np.unique(demand, axis=0, return_inverse=True)
    return shapes, np.asarray(inverse, dtype=np.int64).reshape(-1)


def build(snap: PassSnapshot, *, harvestable: Callable[[], NDArray[np.float64]] | None = None,
          features: Callable[[int], Mapping[str, str]] | None = None) -> decide.DecideInput:
    """``decide.DecideInput`` from ``snap``.

    ``harvestable``: builds the (N, R) harvestable room (None: this adapter does not harvest); ``features``:
    builds group ``g``'s classifier features (None: no classifier). Each is called only when the decision may
    read it (``decide.needs_harvestable``, ``decide.needs_features``), for the groups it may read it for; without
    harvested room no features are built (only the opportunistic pass asks the classifier)."""
    room_now = None
    asked: list[Mapping[str, str] | None] | None = None
    if harvestable is not None and decide.needs_harvestable(snap.intent, snap.releasable, snap.group_queue,
                                                             snap.queue_opportunistic, explain=snap.explain):
        room_now = harvestable()
        if features is not None:
            asked = [None] * len(snap.group_key)
            for g in np.flatnonzero(decide.needs_features(snap.intent, snap.releasable, snap.group_queue,
                                                          snap.queue_opportunistic)).tolist():
                asked[g] = features(g)
    n = len(snap.group_key)
    return decide.DecideInput(
        now=snap.now, capacity=snap.capacity,
        regular_free=harvest.regular_available(snap.capacity, snap.regular_requests), bandwidth=snap.bandwidth,
        bandwidth_room=room.bandwidth_room(snap.capacity, snap.regular_requests), shapes=snap.shapes,
        group_shape=snap.group_shape, group_key=snap.group_key, group_job=snap.group_job,
        group_queue=snap.group_queue, releasable=snap.releasable, remaining=snap.remaining, intent=snap.intent,
        finished_fraction=snap.finished_fraction,
        evidence=estimates.Evidence(hint_s=snap.hint_s, finished=snap.finished, finished_mean_s=snap.finished_mean_s,
                                    elapsed_s=snap.elapsed_s, history_s=snap.history_s, prior_s=np.full(n, np.nan)),
        job_key=snap.job_key, job_arrival=snap.job_arrival, queue_name=snap.queue_name,
        queue_weight=snap.queue_weight, queue_order=snap.queue_order, queue_opportunistic=snap.queue_opportunistic,
        queue_alloc=snap.queue_alloc, pool_total=snap.capacity.sum(axis=0), node_key=snap.node_key,
        harvestable=room_now, queue_quota=snap.queue_quota, features=asked, duration_s=snap.duration_s,
        group_children=snap.group_children, regular_changed=snap.regular_changed, explain=snap.explain,
        resources=snap.resources, sample_age_s=snap.sample_age_s, promotable=snap.promotable)
