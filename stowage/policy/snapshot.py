"""What one dispatch pass knows (``PassSnapshot``), and the one builder of ``decide.DecideInput`` from it.

The operator's dispatcher (``stowage.operator.dispatcher``) fills a snapshot from its informers, the simulator's
packing presets (``stowage.sim.packing``) from the simulation's arrays; both hand it to ``build``, so what the
decision derives from those facts (the regular and the declared-bandwidth room, the duration evidence, the pool
total) and when it needs the two inputs that cost the adapter something (the harvestable room, the classifier's
features: ``decide.needs_harvestable``, ``decide.needs_features``) is written once, here. A fact the decision
reads as it is goes in ``decide.PassFacts``, which both the snapshot and ``DecideInput`` extend, and passes through
``build`` by name; a derived one is added here once, for both adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Final

import numpy as np
from numpy.typing import NDArray

from stowage.policy import decide, estimates, harvest, room

__all__ = ["PassSnapshot", "build", "shapes_of"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PassSnapshot(decide.PassFacts):
    """One pass's facts: those the decision reads as they are (``decide.PassFacts``) and those ``build`` derives
    its input from."""

    regular_requests: NDArray[np.float64]
    """(N, R) Σ requests (declared demand) of the regular pods on each node: the regular room and the
    declared-bandwidth room both follow from it."""
    finished: NDArray[np.int64]
    """(G,) finished tasks per group (the estimates' evidence)."""
    finished_mean_s: NDArray[np.float64]
    """(G,) mean run time of the finished tasks (anything with none finished)."""
    hint_s: NDArray[np.float64]
    """(G,) the user's ``expectedDuration`` (NaN: none)."""
    elapsed_s: NDArray[np.float64]
    """(G,) the longest elapsed time of a running task (a lower bound; 0: none)."""
    history_s: NDArray[np.float64]
    """(G,) earlier runs of the group's recurring job (``estimates.RecurringHistory``; NaN: none)."""
    regular_bandwidth: NDArray[np.float64] | None = None
    """(N, R) what the regular pods on each node reserve of disk and network: Σ of their groups' estimates
    (``use_estimates.reserved``), read on the ``bandwidth`` columns; None: their declared demand
    (``regular_requests``). ``shapes`` then carry the pending groups' estimates too."""
    bandwidth_fill: float = 1.0
    """The fraction of each node's disk and network capacity regular pods' estimates may fill
    (``estimates.bandwidth_fill``, ``room.bandwidth_room``)."""


_FACTS: Final = tuple(f.name for f in fields(decide.PassFacts))


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
    held = snap.regular_requests
    if snap.regular_bandwidth is not None:  # bandwidth by estimated use, the rest by requests
        held = np.where(np.asarray(snap.bandwidth, dtype=bool)[None, :], snap.regular_bandwidth, held)
    bw_room = room.bandwidth_room(snap.capacity, held, snap.bandwidth_fill)
    free = harvest.regular_available(snap.capacity, held)
    if snap.bandwidth_fill != 1.0:  # the regular pass fits bandwidth by its room, which may pass capacity
        free = np.where(np.asarray(snap.bandwidth, dtype=bool)[None, :], bw_room, free)
    return decide.DecideInput(
        **{name: getattr(snap, name) for name in _FACTS},
        regular_free=free,
        bandwidth_room=bw_room,
        evidence=estimates.Evidence(hint_s=snap.hint_s, finished=snap.finished, finished_mean_s=snap.finished_mean_s,
                                    elapsed_s=snap.elapsed_s, history_s=snap.history_s,
                                    prior_s=np.full(len(snap.group_key), np.nan)),
        pool_total=snap.capacity.sum(axis=0), harvestable=room_now, features=asked)
