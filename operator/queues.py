"""Queues: the cache Kopf fills, the ``default`` Queue, and the status the dispatch loop writes periodically.

Queue status (``status`` subresource; the CRD's printer columns read it)::

    allocated:      {regular: {cpu: "6", memory: 12Gi}, opportunistic: {...}}   what running tasks hold
    dominantShare:  {regular: 0.38, opportunistic: 0.0}                         max_r(alloc_r/total_r)/weight
    fairShare:      0.25                                                        the dispatcher's fair share (max-min)
    usage:          {regular: 0.31, opportunistic: 0.0}                         dominant share, decayed (half-life)
    usageTarget:    {regular: 0.25, opportunistic: 0.0}                         the usage the dispatcher evens out to
    quotaUsed:      {regular: {cpu: 0.75}, opportunistic: {cpu: 0.0}}           allocated / spec.quota (with a quota)
    pendingTasks, runningTasks, pendingJobs, runningJobs
    pendingPods:    [{pod: ns/name, queuePosition: 1, position: 4, start: …, finish: …, source: prior}, …]
                    the gated plain pods' forecast, the first 100 in queue order (operator.forecasting)

The numbers are the dispatcher's (:class:`stowage.operator.metrics.QueueNumbers`, one pass's view). They
are written every ``status_interval_s`` (5 s by default), only for queues whose numbers changed: a status
write per pod event would put a write on the API server for every task.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from stowage.operator import crd, tenancy
from stowage.operator.metrics import QueueNumbers

from stowage import labels
from stowage.errors import InvalidInput
from stowage.kube import api
from stowage.model import JobOrder, Pool, QueueOpportunistic
from stowage.resources import format_quantity, parse_quantity

__all__ = ["QueueBook", "QueueSpec", "ensure_default_queue", "merge_patch", "register", "status_of"]

log = logging.getLogger(__name__)

DEFAULT_QUEUE = labels.DEFAULT_QUEUE  # one place: stowage.labels


class QueueSpec:
    """A Queue's spec, read leniently (the CRD schema and the validating webhook already checked it)."""

    __slots__ = ("job_order", "name", "opportunistic", "quota", "state", "weight")

    def __init__(self, name: str, spec: Mapping[str, Any] | None) -> None:
        spec = spec or {}
        self.name = name
        self.weight = labels.queue_weight(spec)  # the extender's rule too: finite and > 0, else 1
        self.quota: dict[str, Any] = dict(spec.get("quota") or {})
        self.state = tenancy.queue_state(spec)  # the dispatcher reads Draining; admission, Closed
        try:
            self.opportunistic = QueueOpportunistic(spec.get("opportunistic", QueueOpportunistic.ALLOW.value))
        except ValueError:
            self.opportunistic = QueueOpportunistic.ALLOW
        try:
            self.job_order = JobOrder(spec.get("jobOrder", JobOrder.SRTF.value))
        except ValueError:
            self.job_order = JobOrder.SRTF

    def quota_amounts(self) -> dict[str, float]:
        """``spec.quota`` in base units (``resources.parse_quantity``); an unparseable entry is left out."""
        out: dict[str, float] = {}
        for name, value in self.quota.items():
            try:
                out[str(name)] = parse_quantity(value, f"spec.quota.{name}")
            except (InvalidInput, TypeError):
                # The CRD schema and the webhook refuse these; read leniently, and quietly (asked every pass).
                log.debug("queue %s: spec.quota.%s = %r is not a quantity; not enforced", self.name, name, value)
        return out


def _quantities(values: Mapping[str, float]) -> dict[str, str]:
    return {r: format_quantity(v, r) for r, v in sorted(values.items()) if v > 0}


def status_of(numbers: QueueNumbers) -> dict[str, Any]:
    """The Queue's ``status`` from one pass's numbers (shares rounded to 4 digits: printer columns read them)."""
    return {
        "allocated": {pool.value: _quantities(numbers.allocated.get(pool.value) or {}) for pool in Pool},
        "dominantShare": {pool.value: round(float(numbers.dominant_share.get(pool.value, 0.0)), 4) for pool in Pool},
        "fairShare": round(float(numbers.fair_share), 4),
        "usage": {pool.value: round(float(numbers.usage.get(pool.value, 0.0)), 4) for pool in Pool},
        "usageTarget": {pool.value: round(float(numbers.usage_target.get(pool.value, 0.0)), 4) for pool in Pool},
        "pendingTasks": int(numbers.pending_tasks),
        "runningTasks": int(numbers.running_tasks),
        "pendingJobs": int(numbers.pending_jobs),
        "runningJobs": int(numbers.running_jobs),
        **({"quotaUsed": {pool: {r: round(float(x), 4) for r, x in used.items()}
                          for pool, used in numbers.quota_used.items()}} if numbers.quota_used else {}),
        **({"pendingPods": [dict(p) for p in numbers.pending_pods]} if numbers.pending_pods else {}),
    }


def merge_patch(new: Mapping[str, Any], *before: Mapping[str, Any] | None) -> dict[str, Any]:
    """``new`` as a JSON merge patch (RFC 7386) over what the object may hold now (``before``: the cached status,
    the last one written): a key they have and ``new`` lacks is sent as null, the only way a merge patch removes
    it. Without it, a resource whose last running task ended would stay in ``allocated`` for good."""
    out: dict[str, Any] = {}
    for key, value in new.items():
        under = [b[key] for b in before if isinstance(b, Mapping) and isinstance(b.get(key), Mapping)]
        out[key] = merge_patch(value, *under) if isinstance(value, Mapping) and under else value
    for b in before:
        if isinstance(b, Mapping):
            out.update({key: None for key in b if key not in new})
    return out


def ensure_default_queue(client: api.KubeClient) -> bool:
    """Create the ``default`` Queue (weight 1) if it is missing; True if it was created."""
    body = {"apiVersion": crd.API_VERSION, "kind": crd.QUEUE.kind,
            "metadata": {"name": DEFAULT_QUEUE, "labels": {"app.kubernetes.io/managed-by": "stowage-operator"}},
            "spec": {"weight": 1}}
    try:
        client.create(crd.QUEUE.path(), body)
    except api.ApiError as exc:
        if exc.status == 409:
            return False
        raise
    log.info("created the %r Queue (weight 1): Jobs and pods that name no queue land in it", DEFAULT_QUEUE)
    return True


class QueueBook:
    """The Queues Kopf reported, and the status last written for each. Thread-safe."""

    def __init__(self, client: api.KubeClient) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._queues: dict[str, dict[str, Any]] = {}
        self._written: dict[str, dict[str, Any]] = {}
        self.on_change: Callable[[], None] = lambda: None

    def upsert(self, queue: Mapping[str, Any]) -> None:
        name = str((queue.get("metadata") or {}).get("name"))
        with self._lock:
            old = self._queues.get(name)
            self._queues[name] = dict(queue)
        if old is None or old.get("spec") != queue.get("spec"):
            self.on_change()

    def remove(self, name: str) -> None:
        with self._lock:
            self._queues.pop(name, None)
            self._written.pop(name, None)
        self.on_change()

    def forget_missing(self, before: Iterable[str], listed: Iterable[Mapping[str, Any]]) -> list[str]:
        """Remove the Queues deleted while no events came (a standby replica): those of ``before`` (the names known
        before the list was read) that ``listed`` no longer has. A Queue added since ``before`` is kept."""
        present = {str((q.get("metadata") or {}).get("name")) for q in listed}
        gone = sorted(set(before) - present)
        for name in gone:
            log.info("queue %s was deleted while this operator stood by: forgotten", name)
            self.remove(name)
        return gone

    def specs(self) -> dict[str, QueueSpec]:
        with self._lock:
            return {name: QueueSpec(name, q.get("spec")) for name, q in self._queues.items()}

    def names(self) -> set[str]:
        with self._lock:
            return set(self._queues)

    def write_statuses(self, numbers: Iterable[QueueNumbers]) -> int:
        """Write the status of every known queue whose numbers changed; returns how many were written."""
        written = 0
        for n in numbers:
            with self._lock:
                queue = self._queues.get(n.name)
                last = self._written.get(n.name)
            if queue is None:
                continue  # a queue a pod names but nobody created: nothing to write to
            status = status_of(n)
            generation = (queue.get("metadata") or {}).get("generation")
            if generation is not None:
                status["observedGeneration"] = int(generation)
            current = {k: v for k, v in (queue.get("status") or {}).items() if k != "kopf"}
            if status == last or (last is None and status == current):
                continue
            try:
                self._client.patch(crd.QUEUE.path(n.name) + "/status", {"status": merge_patch(status, current, last)})
            except (api.ApiError, OSError) as exc:
                if not (isinstance(exc, api.ApiError) and exc.status == 404):
                    log.warning("queue %s: status not written (%s); retrying in the next round", n.name, exc)
                continue
            with self._lock:
                self._written[n.name] = status
            written += 1
        return written


def register(registry: Any, book: Callable[[], QueueBook | None]) -> None:
    """Register the Queue handler on ``registry``: every Queue event goes into the live :class:`QueueBook`."""
    import kopf

    @kopf.on.event(crd.GROUP, crd.VERSION, crd.QUEUE.plural, id="stowage-queue-events", registry=registry)
    def queue_event(event: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> None:
        target = book()
        if target is None:
            return
        if event.get("type") == "DELETED":
            target.remove(str((body.get("metadata") or {}).get("name")))
        else:
            target.upsert(dict(body))
