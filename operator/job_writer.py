"""The Job writer: what a Job's plan says, written (status subresource when changed, Events, deletions).

::

    JobBook.plans ─► plan ─► JobWriter.apply: status (only when changed; the book records what was written)
                                              Events (Completed, Failed, TaskEvicted, ...)
                                              pods of a failed Job deleted
                                              stowage_job_completion_seconds{queue}

The book (:class:`stowage.operator.jobs.JobBook`) stays a cache: it says what a write starts from
(:meth:`JobBook.written_basis`) and is told what was written (:meth:`JobBook.record_written`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from stowage.operator import jobs, tasks
from stowage.operator.events import post_event, rfc3339
from stowage.operator.forecasting import forecast_error
from stowage.operator.metrics import OperatorMetrics

from stowage.kube import api
from stowage.kube.records import parse_timestamp

__all__ = ["JobWriter"]

log = logging.getLogger(__name__)


#: Status keys other writers own: Kopf's bookkeeping, and the forecast (``forecasting.Forecaster`` writes it off the
#: pass with a merge patch of that key alone, which a status write here never removes).
_NOT_OURS = ("kopf", "forecast")


def _comparable(status: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k not in _NOT_OURS}


class JobWriter:
    """Writes the Jobs' plans; errors are logged and leave the Job dirty, so the next pass writes again."""

    def __init__(self, client: api.KubeClient, book: jobs.JobBook, metrics: OperatorMetrics, *,
                 clock: Callable[[], float]) -> None:
        self._client = client
        self._book = book
        self._metrics = metrics
        self._clock = clock
        self._noticed: dict[jobs.JobKey, tasks.JobPlan] = {}  # the last plan whose notices were posted, per Job

    def apply(self, key: jobs.JobKey, plan: tasks.JobPlan,
              estimates: Mapping[str, tuple[float, str]] | None = None, held: tuple[str, str] | None = None) -> None:
        """Write the plan's status (when it changed), post its Events, delete what it says; errors are logged.

        ``estimates``: group name → (task seconds, source) from the dispatcher's last decision, shown as
        ``status.estimate`` (:func:`tasks.estimate_status`; None: the estimates written before are kept).
        ``held``: (reason, message) of the condition ``Held`` while the dispatcher holds some of its tasks
        (``holds.job_held``); None: it holds none (a ``Held`` written before turns False).
        """
        basis = self._book.written_basis(key, plan)
        if basis is None:
            return
        job, current, evictions = basis
        status = plan.status
        estimate = tasks.estimate_status(plan.groups, estimates, current.get("estimate"))
        if estimate is not None:
            status = {**plan.status, "estimate": estimate}
        condition = tasks.held_condition(held if not plan.terminal else None, current, rfc3339(self._clock()))
        if condition is not None:
            status = {**status, "conditions": [*status.get("conditions", []), condition]}
        if _comparable(status) != _comparable(current):
            try:
                self._client.patch(jobs.job_path(key, "/status"), {"status": status})
            except api.ApiError as exc:
                if exc.status == 404:
                    return  # deleted meanwhile
                log.warning("job %s/%s: status not written (%s); retrying next pass", *key, exc)
                self._book.mark_dirty(key)
                return
            except OSError as exc:
                log.warning("job %s/%s: status not written (%s); retrying next pass", *key, exc)
                self._book.mark_dirty(key)
                return
            self._book.record_written(key, plan, status, evictions)
            now = self._clock()
            for type_, reason, message in plan.events:
                post_event(self._client, job, type_, reason, message, now)
            if plan.phase is tasks.Phase.SUCCEEDED and current.get("phase") != tasks.Phase.SUCCEEDED:
                self._observe_completion(job, plan)
        if plan.notices and self._noticed.get(key) is not plan:  # once per plan, status changed or not
            self._noticed[key] = plan
            for type_, reason, message in plan.notices:
                post_event(self._client, job, type_, reason, message, self._clock())
        elif not plan.notices:
            self._noticed.pop(key, None)
        for name in plan.delete:
            try:
                self._client.delete(f"/api/v1/namespaces/{key[0]}/pods/{name}")
            except api.ApiError as exc:
                if exc.status != 404:
                    log.warning("job %s/%s: could not delete its pod %s: %s", *key, name, exc)

    def fail(self, key: jobs.JobKey, message: str) -> None:
        """Fail the Job now (a pod the API server refuses, a spec that cannot be planned): status + Warning Event."""
        job = self._book.job(key)
        if job is None:
            return
        self.apply(key, jobs.failed_plan(job, message, rfc3339(self._clock())))

    def _observe_completion(self, job: Mapping[str, Any], plan: tasks.JobPlan) -> None:
        created = parse_timestamp((job.get("metadata") or {}).get("creationTimestamp"))
        done = parse_timestamp(plan.status.get("completionTime"))
        if created is not None and done is not None:
            self._metrics.job_completion.labels(tasks.job_queue(job)).observe(max(done - created, 0.0))
        error = forecast_error(job, done) if done is not None else None
        if error is not None:
            self._metrics.forecast_error.labels(tasks.job_queue(job)).observe(error)
