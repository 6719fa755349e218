"""FSP job order for the dispatcher: one ``ordering.FspTracker`` per queue of ``jobOrder: FSP``, kept across passes.

Jobs enter their queue's virtual processor-sharing system when first seen, sized in "whole cluster" seconds
on their dominant resource (as the simulator sizes them), and leave it when they leave the view. Trackers are
rebuilt from the jobs' arrival times after a restart (they are not in the dispatcher's saved state).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from stowage.operator.dispatch_arrays import ViewArrays, job_queue
from stowage.operator.dispatch_records import QueueRecord

from stowage.errors import InvalidInput
from stowage.model import JobOrder
from stowage.policy import ordering

__all__ = ["FspQueues"]


class FspQueues:
    """The FSP trackers of the queues that use FSP, by queue name."""

    def __init__(self) -> None:
        self._fsp: dict[str, ordering.FspTracker] = {}  # queue → tracker
        self._fsp_jobs: dict[str, str] = {}  # job key → queue it arrived in

    def arrive(self, a: ViewArrays, queues: Sequence[QueueRecord], arrival: NDArray[np.float64],
               now: float) -> None:
        """New jobs of FSP queues enter their queue's virtual PS system; jobs that left the view leave it."""
        jq = job_queue(a)
        present = {key: j for j, key in enumerate(a.job_keys)}
        for job, q in list(self._fsp_jobs.items()):
            if job not in present or queues[int(jq[present[job]])].name != q:
                self._fsp[q].remove(job)
                del self._fsp_jobs[job]
        total = a.alloc.sum(axis=0)
        total = np.where(total > 0, total, 1.0)
        # FSP job size: work in "whole cluster" seconds on its dominant resource (as the simulator sizes it).
        dur = np.nan_to_num(np.array([g.expected_duration_s for g in a.groups], dtype=np.float64), nan=0.0)
        tasks = np.array([max(g.remaining_tasks, 0) for g in a.groups], dtype=np.float64)
        size = np.zeros(len(a.job_keys))
        np.add.at(size, a.job, dur * tasks * (a.demand / total).max(axis=1, initial=0.0))
        new = [j for j, key in enumerate(a.job_keys)
               if key not in self._fsp_jobs and queues[int(jq[j])].job_order is JobOrder.FSP]
        for j in sorted(new, key=lambda j: (arrival[j], j)):
            q = queues[int(jq[j])].name
            tracker = self._fsp.setdefault(q, ordering.FspTracker(1.0))
            t = float(arrival[j]) if math.isfinite(arrival[j]) else now
            # A job that left the view and came back before its virtual finish is still tracked.
            with contextlib.suppress(InvalidInput):
                tracker.arrive(a.job_keys[j], t, float(size[j]), 1.0)
            self._fsp_jobs[a.job_keys[j]] = q

    def order(self, queue: str, a: ViewArrays, now: float) -> list[int]:
        """The view's jobs of ``queue`` in FSP order (indexes into ``a.job_keys``), the tracker advanced to now."""
        tracker = self._fsp.get(queue)
        if tracker is None:
            return []
        tracker.advance(now)
        index = {key: j for j, key in enumerate(a.job_keys)}
        return [index[k] for k in tracker.order() if k in index]  # type: ignore[index]
