"""The publisher: what the last decision means for users, written where they look.

* holds (``Dispatcher.holds``) → ``stowage_held_pods``, the ``stowage.io/Held`` condition of each held plain pod
  (``holds.PodHolds``, off the loop) and each Job's ``Held`` condition (written with its status, ``JobWriter``);
* the queues' numbers (``Dispatcher.queue_shares`` + counts) → the queue gauges and each Queue's status (with the
  forecast of its gated plain pods, ``forecasting.Forecaster.pending_pods``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stowage.operator import holds, jobs, tasks
from stowage.operator.cache import Cache, pod_key
from stowage.operator.dispatcher import Dispatcher, DispatchView, Release
from stowage.operator.metrics import OperatorMetrics, QueueNumbers

from stowage import labels
from stowage.kube import api
from stowage.policy import holding

__all__ = ["Publisher"]


class Publisher:
    """Publishes holds every pass and queue numbers when asked (``status_interval_s``). Dry run: metrics only."""

    def __init__(self, client: api.KubeClient, cache: Cache, dispatcher: Dispatcher, metrics: OperatorMetrics, *,
                 dry_run: bool, clock: Callable[[], float],
                 pending_pods: Callable[[str], Sequence[Mapping[str, Any]]] = lambda queue: ()) -> None:
        """``pending_pods``: queue → the forecast of its gated plain pods (``Forecaster.pending_pods``)."""
        self.cache = cache
        self.pending_pods = pending_pods
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.dry_run = dry_run
        self.pod_holds = holds.PodHolds(client, clock=clock)
        self._job_notes = holds.HoldNotes()
        self._job_held: dict[jobs.JobKey, tuple[str, str]] = {}  # the last pass's Held condition per Job
        self.last_numbers: list[QueueNumbers] = []

    def job_held(self, key: jobs.JobKey) -> tuple[str, str] | None:
        """The last pass's ``Held`` (reason, message) of the Job; None: the dispatcher holds none of its tasks."""
        return self._job_held.get(key)

    def publish_holds(self, view: DispatchView, releases: Sequence[Release], now: float) -> None:
        """The last decision's holds (``Dispatcher.holds``) as ``stowage_held_pods``, the ``stowage.io/Held``
        condition of each held plain pod (written off the loop, ``holds.PodHolds``) and each Job's ``Held``
        condition (written with its status at the next pass, ``JobWriter.apply``)."""
        released: dict[str, int] = {}
        for r in releases:
            released[r.group_key] = released.get(r.group_key, 0) + r.count
        decided = self.dispatcher.holds
        gated = {"/".join(pod_key(p)): p for p in self.cache.gated.pods()} if decided else {}
        counts: dict[tuple[str, str], int] = {}
        pods: dict[holds.PodKey, tuple[holding.Hold, Mapping[str, Any]]] = {}
        by_job: dict[jobs.JobKey, list[tuple[str, int, holding.Hold]]] = {}
        for g in view.groups:
            hold = decided.get(g.key)
            n = g.releasable - released.get(g.key, 0)
            if hold is None or n <= 0:
                continue
            counts[(g.queue, hold.reason)] = counts.get((g.queue, hold.reason), 0) + n
            if g.job is None:
                ns, _, name = g.key.partition("/")
                if name.startswith(labels.POD_GROUP_KEY):  # a pod group: each gated member says why
                    for pod in gated.values():
                        if (pod_key(pod)[0] == ns and ((pod.get("metadata") or {}).get("labels") or {}).get(
                                labels.LABEL_POD_GROUP) == name[len(labels.POD_GROUP_KEY):]):
                            pods[pod_key(pod)] = (hold, pod)
                elif (pod := gated.get(g.key)) is not None:
                    pods[pod_key(pod)] = (hold, pod)
            else:
                ns, job, group = g.key.split("/", 2)
                by_job.setdefault((ns, job), []).append((group, n, hold))
        self.metrics.publish_holds(counts, [q.name for q in view.queues])
        self._job_held = {}
        for key, groups in by_job.items():
            summary = holds.job_held(groups)
            if summary is not None:
                self._job_held[key] = self._job_notes.settle(key, *summary, now)
        for key in self._job_notes.known():
            if key not in self._job_held:
                self._job_notes.forget(key)
        if not self.dry_run:
            self.pod_holds.set(pods)

    def publish_queues(self, view: DispatchView, plans: Mapping[jobs.JobKey, tasks.JobPlan]) -> None:
        numbers = self.queue_numbers(view, plans)
        self.last_numbers = numbers
        self.metrics.publish_queues(numbers)
        if not self.dry_run:
            self.cache.queues.write_statuses(numbers)

    def queue_numbers(self, view: DispatchView, plans: Mapping[jobs.JobKey, tasks.JobPlan]) -> list[QueueNumbers]:
        """Per queue: the dispatcher's shares, tasks not yet released, bound pods, Jobs by phase."""
        book = self.cache.jobs
        pending: dict[str, int] = {}
        for g in view.groups:
            if g.job is None:  # a gated plain pod
                pending[g.queue] = pending.get(g.queue, 0) + g.releasable
        for key, plan in plans.items():
            job = book.job(key)
            if job is not None and not plan.terminal:
                waiting = sum(g.unreleased for g in plan.groups)  # neither released nor running
                pending[tasks.job_queue(job)] = pending.get(tasks.job_queue(job), 0) + waiting
        running: dict[str, int] = {}
        for pod in view.running:
            if pod.queue is not None:
                running[pod.queue] = running.get(pod.queue, 0) + 1
        jobs_by_phase: dict[tuple[str, str], int] = {}
        for key in book.job_keys():
            job = book.job(key)
            if job is not None:
                phase = str((job.get("status") or {}).get("phase") or tasks.Phase.PENDING.value)
                q = tasks.job_queue(job)
                jobs_by_phase[(q, phase)] = jobs_by_phase.get((q, phase), 0) + 1
        return [QueueNumbers(
            name=share.name, dominant_share=share.dominant_share, fair_share=share.fair_share,
            allocated=share.allocated, pending_tasks=pending.get(share.name, 0),
            running_tasks=running.get(share.name, 0),
            pending_jobs=jobs_by_phase.get((share.name, tasks.Phase.PENDING.value), 0),
            running_jobs=jobs_by_phase.get((share.name, tasks.Phase.RUNNING.value), 0),
            quota_used=share.quota_used, usage=share.usage, usage_target=share.usage_target,
            pending_pods=self.pending_pods(share.name),
        ) for share in self.dispatcher.queue_shares(view)]
