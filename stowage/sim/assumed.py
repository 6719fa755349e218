"""``harvest.assumed`` over the running rows, kept per node across events.

The harvesting presets subtract ``S``, the assumed usage of pods (regular or opportunistic) started less than
``harvest.ramp_up_s`` ago, from every node's harvestable room before each opportunistic pass.
Recomputed from every running row at every event, it was a fifth of ``ubis``'s time on the
FB-2009 batch day (thousands of rows, hundreds of events per simulated second). It changes only
when a row starts, stops, or leaves the ramp-up window, so this keeps each node's
recent rows in row order and sums again only the nodes where one of those happened, with
``harvest.assumed_node``: the additions ``harvest.assumed`` makes, so the same bits
(``tests/sim/test_assumed_incremental.py`` compares the two at every event of whole runs).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.policy import harvest
from stowage.sim.cluster import Running

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["AssumedTracker"]


class AssumedTracker:
    """Per-node ``S`` (N, R), as ``harvest.assumed`` over the running rows gives it.

    A :class:`~stowage.sim.cluster.RowObserver` of ``sim.running``: appended rows join
    their node's rows (a dict in row order, since rows keep their order and new ones go last),
    dropped ones leave it; rows leave it too once ``now − start ≥ ramp_up_s``, found from a queue in
    start order. Only the nodes touched are summed again, when :meth:`current` is asked.
    """

    def __init__(self, sim: Simulation) -> None:
        self.ramp = float(sim.settings.harvest.ramp_up_s)
        n, self.r = sim.cluster.n, len(sim.resources)
        self.demand: list[list[float]] = harvest.clean_demands(sim.g_demand).tolist()  # per group
        self.rows: list[dict[int, list[float]]] = [{} for _ in range(n)]  # per node: uid → demand
        self.by_start: deque[tuple[float, int, int]] = deque()  # (start, node, uid), oldest first
        self.sums = np.zeros((n, self.r))
        self.dirty: set[int] = set()
        self.shrunk: set[int] = set()
        """Nodes where a row left ``S`` (dropped, or out of the window) since the caller last cleared
        this: on every other node ``S`` only grew or stayed (``harvest.assumed_node`` adds rows in row
        order and new rows go last, so a sum with one more row is never smaller)."""
        run = sim.running
        run.observers.append(self)
        if len(run):
            self.appended(run, 0)

    def appended(self, run: Running, lo: int) -> None:
        if not self.ramp > 0:
            return
        added = zip(run.group[lo:].tolist(), run.node[lo:].tolist(), run.uid[lo:].tolist(),
                    run.start[lo:].tolist(), strict=True)
        for g, n, uid, start in added:
            self.rows[n][uid] = self.demand[g]
            self.by_start.append((start, n, uid))
            self.dirty.add(n)

    def dropping(self, run: Running, gone: NDArray[np.int64]) -> None:
        for n, uid in zip(run.node[gone].tolist(), run.uid[gone].tolist(), strict=True):
            if self.rows[n].pop(uid, None) is not None:
                self.dirty.add(n)
                self.shrunk.add(n)

    def current(self, now: float) -> NDArray[np.float64]:
        """(N, R) ``S`` at ``now`` (``now`` never goes back). The caller must not modify it."""
        q = self.by_start
        while q and not harvest.is_recent(now, q[0][0], self.ramp):
            _, n, uid = q.popleft()
            if self.rows[n].pop(uid, None) is not None:
                self.dirty.add(n)
                self.shrunk.add(n)
        if self.dirty:
            for n in self.dirty:
                self.sums[n] = harvest.assumed_node(self.rows[n].values(), self.r)
            self.dirty.clear()
        return self.sums
