"""What a Job's finished and running pods say about its tasks' durations: the estimator's evidence.

The dispatcher learns from finished tasks (:class:`Lesson`, each once: :class:`LearnedTasks`, saved with the
classifier's state) and reads each group's evidence (:func:`group_evidence`) in its pending groups. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from stowage.operator import tasks

from stowage import labels
from stowage.kube.records import parse_timestamp
from stowage.policy import estimates

__all__ = ["LEARNED_MAX_UIDS", "LEARNED_WINDOW_S", "GroupEvidence", "LearnedTasks", "Lesson", "group_evidence",
           "job_recurring_key", "run_span", "running_since"]

#: Finished tasks are remembered this long after the newest one learned from (their uids, in the ConfigMap
#: with the classifier's state), so a restarted operator does not learn from them a second time; older ones
#: it skips by their finish time alone. Generous against cache lag and relists.
LEARNED_WINDOW_S = 600.0
#: At most this many of those uids are remembered (~56 bytes each saved): a burst of finishes inside the window moves
#: its start up instead of growing the ConfigMap past 1 MiB; a task finished before it is taken as learned.
LEARNED_MAX_UIDS = 2000


class Lesson(NamedTuple):
    """One finished task to learn from (``Dispatcher.observe_finished``'s arguments)."""

    features: dict[str, str]  # what the classifier is asked about (classifier.task_features)
    duration_s: float  # its run span (run_span: first container start → last container finish)
    queue: str
    group_key: str  # namespace/job/group: the PendingGroup key the dispatcher estimated it under
    group: str
    recurring_key: str | None  # the Job's estimates.recurring_key
    used: dict[str, float] | None = None  # its sustained disk/network use ÷ declared (RecurringHistory.observe_use)


class GroupEvidence(NamedTuple):
    """What a group's pods say about its tasks' duration (the estimator's evidence, ``policy.estimates``)."""

    finished: int = 0  # succeeded tasks whose run span is known
    mean_s: float = math.nan  # their mean run span; NaN: none
    running_since: float = math.inf  # the earliest container start among its running tasks; inf: none running


class LearnedTasks:
    """Finished tasks the classifier was taught, so none teaches it twice, across restarts too.

    A task is new when it finished at or after ``until`` and its pod's uid is not among the remembered
    ones; ``until`` trails the newest finish time by :data:`LEARNED_WINDOW_S`, and only uids since then
    are kept. Saved with the classifier's state in one ConfigMap write, so the two never disagree.
    """

    def __init__(self, window_s: float = LEARNED_WINDOW_S, max_uids: int = LEARNED_MAX_UIDS) -> None:
        self.window_s = window_s
        self.max_uids = max_uids
        self.until = -math.inf
        self._uids: dict[str, float] = {}

    def fresh(self, uid: str, finished_s: float) -> bool:
        return finished_s >= self.until and uid not in self._uids

    def add(self, uid: str, finished_s: float) -> None:
        self._uids[uid] = finished_s
        self.until = max(self.until, max(self._uids.values()) - self.window_s)
        if len(self._uids) > self.max_uids:  # the oldest finish kept starts the window
            self.until = max(self.until, sorted(self._uids.values())[len(self._uids) - self.max_uids])
        for old in [u for u, t in self._uids.items() if t < self.until]:
            del self._uids[old]

    def state(self) -> dict[str, Any]:
        return {"until": self.until if math.isfinite(self.until) else None, "uids": dict(sorted(self._uids.items()))}

    def load(self, state: Mapping[str, Any]) -> None:
        until = state.get("until")
        self.until = float(until) if until is not None else -math.inf
        self._uids = {str(u): float(t) for u, t in (state.get("uids") or {}).items()}


def run_span(pod: Mapping[str, Any]) -> tuple[float, float] | None:
    """When a finished pod's containers first started and last finished (None if unknown)."""
    starts, ends = [], []
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        term = ((c or {}).get("state") or {}).get("terminated") or {}
        s, e = parse_timestamp(term.get("startedAt")), parse_timestamp(term.get("finishedAt"))
        if s is not None and e is not None:
            starts.append(s)
            ends.append(e)
    if not starts:
        return None
    return min(starts), max(max(ends), min(starts))


def running_since(pod: Mapping[str, Any]) -> float | None:
    """When a running pod's containers started (the earliest ``state.running.startedAt``); None if none runs."""
    starts = [parse_timestamp((((c or {}).get("state") or {}).get("running") or {}).get("startedAt"))
              for c in (pod.get("status") or {}).get("containerStatuses") or []]
    known = [s for s in starts if s is not None]
    return min(known) if known else None


def group_evidence(pods: Iterable[Mapping[str, Any]], spans: dict[str, tuple[str, float]] | None = None,
                   owner_uid: str | None = None) -> dict[str, GroupEvidence]:
    """Per task group (label ``stowage.io/task-group``), what a Job's pods say about its tasks' duration.

    ``finished``/``mean_s``: the succeeded pods whose run span (:func:`run_span`) is known, and its mean;
    ``running_since``: the earliest container start among the pods running now (:func:`running_since`; a pod
    being deleted or disrupted does not count). ``spans`` (uid → (group, seconds)), when given, is updated with
    the succeeded pods and read whole, so a succeeded pod deleted since still counts. ``owner_uid``: only pods
    whose controller reference has that uid (a Job's predecessor of the same name left its own).
    """
    spans = {} if spans is None else spans
    since: dict[str, float] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if owner_uid is not None and not any(
                ref.get("uid") == owner_uid for ref in meta.get("ownerReferences") or () if ref.get("controller")):
            continue
        group = labels.task_group(pod)
        outcome = tasks.pod_outcome(pod)
        if outcome is tasks.Outcome.SUCCEEDED:
            span = run_span(pod)
            if span is not None:
                spans[str(meta.get("uid"))] = (group, span[1] - span[0])
        elif outcome is tasks.Outcome.ACTIVE and (pod.get("status") or {}).get("phase") == "Running":
            start = running_since(pod)
            if start is not None:
                since[group] = min(since.get(group, math.inf), start)
    totals: dict[str, list[float]] = {}
    for group, seconds in spans.values():
        totals.setdefault(group, []).append(seconds)
    out = {g: GroupEvidence(len(v), math.fsum(v) / len(v)) for g, v in totals.items()}
    for group, start in since.items():
        out[group] = out.get(group, GroupEvidence())._replace(running_since=start)
    return out


def job_recurring_key(job: Mapping[str, Any]) -> str:
    """:func:`stowage.policy.estimates.recurring_key` of a Job (its label ``stowage.io/recurring``, generateName,
    else its name without a trailing run number)."""
    meta = job.get("metadata") or {}
    generate = meta.get("generateName")
    return estimates.recurring_key(str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                                   {str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
                                   str(generate) if generate else None)
