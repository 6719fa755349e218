"""What the operator learns from finished tasks, and where it keeps it across restarts.

Finished tasks (:func:`lessons`) teach the dispatcher (classifier, queue priors, recurring history: run times,
and the sustained disk and network use Prometheus showed of each, ``policy.use_estimates``' history row); the
estimate each replaced is observed as ``stowage_estimate_ratio{source}``. The classifier's state and the uids it
learned from are one ConfigMap write (``stowage-operator-state``), loaded again at start and on resuming.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping

from stowage.operator import jobs, tasks
from stowage.operator.dispatcher import Dispatcher
from stowage.operator.metrics import OperatorMetrics

from stowage import labels
from stowage.kube import api
from stowage.policy import classifier
from stowage.resources import DISK, NETWORK

__all__ = ["LEARNED_KEY", "STATE_CONFIGMAP", "STATE_KEY", "Learning", "UsePeak", "lessons"]

log = logging.getLogger(__name__)

STATE_CONFIGMAP = "stowage-operator-state"
STATE_KEY = "classifier.json"
LEARNED_KEY = "learned.json"

#: A pod's sustained disk and network use by (namespace, pod name) (``prom.UtilizationSnapshot.use_peak``).
UsePeak = Callable[[tuple[str, str]], Mapping[str, float] | None]


def lessons(book: jobs.JobBook, key: jobs.JobKey, plan: tasks.JobPlan,
            mean_capacity: Mapping[str, float], use_peak: UsePeak | None = None) -> list[jobs.Lesson]:
    """One :class:`Lesson` per task of the Job that succeeded and was not learned from yet.

    The features are the ones the dispatcher asks the classifier about (``classifier.task_features``:
    queue, job, group, the demand as fractions of the mean node, the Job's progress); the duration is the
    task's run span (``evidence.run_span``), the same the group's ``finished_mean_s`` averages. ``used``: the
    pod's sustained use (``use_peak``) ÷ its declared disk and network, where it declares some and was seen.
    """
    job = book.job(key)
    out = []
    recurring = jobs.job_recurring_key(job) if job is not None else None
    for pod in plan.finished if job is not None else ():
        uid = str((pod.get("metadata") or {}).get("uid"))
        span = jobs.run_span(pod)
        if span is None or not book.learned.fresh(uid, span[1]):
            continue
        book.learned.add(uid, span[1])
        group = labels.task_group(pod)
        demand = book.demands.task_demand(job, group)
        if demand is None:
            continue
        queue = tasks.job_queue(job)
        features = classifier.task_features(queue, jobs.job_recurring_key(job), group, demand, mean_capacity,
                                            tasks.job_progress(plan))
        seen = use_peak((key[0], str((pod.get("metadata") or {}).get("name")))) if use_peak is not None else None
        used = {r: float(seen[r]) / demand[r] for r in (DISK, NETWORK)
                if seen and r in seen and demand[r] > 0 and math.isfinite(float(seen[r])) and float(seen[r]) >= 0}
        out.append(jobs.Lesson(features, span[1] - span[0], queue, f"{key[0]}/{key[1]}/{group}", group, recurring,
                               used or None))
    return out


class Learning:
    """Teaches the dispatcher from the Jobs' finished tasks; saves and loads what it learned."""

    def __init__(self, client: api.KubeClient, dispatcher: Dispatcher, book: jobs.JobBook, metrics: OperatorMetrics,
                 *, state_namespace: str, use_peak: UsePeak | None = None) -> None:
        """``use_peak``: each pod's sustained disk and network use (None: bandwidth use is not learned)."""
        self.client = client
        self.dispatcher = dispatcher
        self.book = book
        self.metrics = metrics
        self.state_namespace = state_namespace
        self.use_peak = use_peak
        self._saved_state: str | None = None

    def learn(self, key: jobs.JobKey, plan: tasks.JobPlan, mean_capacity: Mapping[str, float]) -> int:
        """Teach the dispatcher the Job's tasks that succeeded since (classifier, queue prior, recurring history of
        run times and of bandwidth use)
        and observe ``stowage_estimate_ratio{source}``: the estimate its last decision held for the task's group
        ÷ the task's run time. Returns how many tasks it learned from."""
        found = lessons(self.book, key, plan, mean_capacity, self.use_peak)
        for lesson in found:
            held = self.dispatcher.observe_finished(
                lesson.features, (lesson.duration_s,), queue=lesson.queue, group_key=lesson.group_key,
                recurring_key=lesson.recurring_key, group=lesson.group)
            if lesson.used and lesson.recurring_key is not None:
                self.dispatcher.observe_use(lesson.recurring_key, lesson.group, lesson.used)
            if held is not None and lesson.duration_s > 0 and math.isfinite(held[0]):
                self.metrics.estimate_ratio.labels(held[1]).observe(held[0] / lesson.duration_s)
        return len(found)

    def job_estimates(self) -> dict[jobs.JobKey, dict[str, tuple[float, str]]]:
        """The dispatcher's last estimates (``Dispatcher.estimates``) by Job: group name → (task seconds, source);
        plain pods' (``namespace/pod``) are left out."""
        out: dict[jobs.JobKey, dict[str, tuple[float, str]]] = {}
        for group_key, (seconds, source) in self.dispatcher.estimates().items():
            parts = str(group_key).split("/")
            if len(parts) == 3:
                out.setdefault((parts[0], parts[1]), {})[parts[2]] = (float(seconds), str(source))
        return out

    # --- the state ConfigMap ---------------------------------------------------------------------

    def load_state(self) -> None:
        """The classifier's state (and which tasks it learned from) from the ConfigMap; absent: start empty."""
        path = f"/api/v1/namespaces/{self.state_namespace}/configmaps/{STATE_CONFIGMAP}"
        where = f"configmap {self.state_namespace}/{STATE_CONFIGMAP}"
        try:
            data = self.client.get(path).get("data") or {}
        except (api.ApiError, OSError) as exc:
            if not (isinstance(exc, api.ApiError) and exc.status == 404):
                log.warning("classifier state not loaded from %s (%s): starting empty", where, exc)
            return
        if not data.get(STATE_KEY):
            return
        try:
            self.dispatcher.load_state(json.loads(data[STATE_KEY]))
            self.book.learned.load(json.loads(data.get(LEARNED_KEY) or "{}"))
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("classifier state in %s is unreadable (%s): starting empty", where, exc)
            return
        self._saved_state = self.state_data()
        log.info("classifier state loaded from %s", where)

    def state_data(self) -> str:
        """The ConfigMap's data as one JSON text: what :meth:`save_state` writes when it changed."""
        return json.dumps({STATE_KEY: json.dumps(self.dispatcher.state_dict(), sort_keys=True, separators=(",", ":")),
                           LEARNED_KEY: json.dumps(self.book.learned.state(), separators=(",", ":"))})

    def save_state(self, force: bool = False) -> None:
        """Write the classifier's state and what it learned from into the ConfigMap (one write), when changed."""
        try:
            serialised = self.state_data()
        except (TypeError, ValueError) as exc:
            log.warning("classifier state not saved: %s", exc)
            return
        if serialised == self._saved_state and not force:
            return
        data = json.loads(serialised)
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": STATE_CONFIGMAP, "namespace": self.state_namespace,
                             "labels": {"app.kubernetes.io/managed-by": "stowage-operator"}},
                "data": data}
        collection = f"/api/v1/namespaces/{self.state_namespace}/configmaps"
        try:
            try:
                self.client.patch(f"{collection}/{STATE_CONFIGMAP}", {"data": data})
            except api.ApiError as exc:
                if exc.status != 404:
                    raise
                self.client.create(collection, body)
        except (api.ApiError, OSError) as exc:
            log.warning("classifier state not saved to %s/%s (%s); retrying later", self.state_namespace,
                        STATE_CONFIGMAP, exc)
            return
        self._saved_state = serialised
