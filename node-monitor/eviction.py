"""Acting on a contention decision: Eviction API requests and the Events that explain them.

``policy/v1`` Evictions go through the API server's PodDisruptionBudget check:
``429 Too Many Requests`` means a budget forbids this one now, and the caller
moves on to its next candidate. ``404`` means the pod is already gone (its
resources are leaving anyway). Each eviction names the pod's uid and the
resourceVersion the monitor saw it labelled opportunistic at: ``409`` means it
changed since (promoted to regular in place, say), and it is not evicted.
Every eviction writes a Warning Event on the pod and one on the Node saying
which resource, how much, and which threshold.
With ``dry_run`` nothing is written; the decision is logged and counted.
"""

from __future__ import annotations

import datetime
import enum
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stowage.node_monitor.pods import PodInfo

from stowage.kube.api import ApiError, KubeClient
from stowage.resources import CPU

__all__ = [
    "EVENT_REASON_CONTENTION",
    "EVENT_REASON_EVICTED",
    "Evictor",
    "Outcome",
    "Pressure",
    "human",
]

log = logging.getLogger("stowage.node_monitor.eviction")

EVENT_REASON_EVICTED = "StowageEvicted"
"""Event reason on an evicted pod (``kubectl get events --field-selector reason=StowageEvicted``)."""
EVENT_REASON_CONTENTION = "StowageContention"
"""Event reason on the Node when the monitor relieved contention."""
COMPONENT = "stowage-node-monitor"


class Outcome(enum.StrEnum):
    EVICTED = "evicted"
    REFUSED = "refused"  # 429: a PodDisruptionBudget forbids it now
    GONE = "gone"  # 404: already deleted
    CHANGED = "changed"  # 409: the pod changed since it was seen (e.g. promoted to regular): not evicted now
    FAILED = "failed"  # any other error; the pod is skipped this round
    DRY_RUN = "dry-run"


def human(value: float, resource: str) -> str:
    """``2.35 cores``, ``7.6Gi``, ``80.0Mi/s``: numbers a person reads in an Event."""
    if resource == CPU:
        return f"{value:.2f} cores"
    suffix = "" if resource == "memory" else "/s"
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}{suffix}"
    return f"{value:.0f}B{suffix}"


@dataclass(frozen=True, slots=True)
class Pressure:
    """Why the monitor acts: one resource's sustained contention."""

    resource: str
    usage: float
    threshold: float
    capacity: float
    samples: int
    policy: str

    def text(self) -> str:
        fraction = self.threshold / self.capacity if self.capacity > 0 else 0.0
        return (
            f"{self.resource} usage {human(self.usage, self.resource)} over threshold "
            f"{human(self.threshold, self.resource)} ({fraction:.2f} × capacity {human(self.capacity, self.resource)}) "
            f"for {self.samples} consecutive samples (policy {self.policy})"
        )


def _now_iso(wall: Callable[[], float]) -> str:
    return datetime.datetime.fromtimestamp(wall(), tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Evictor:
    """Evicts pods of one node and records why; ``client=None`` or ``dry_run`` only logs."""

    def __init__(
        self,
        client: KubeClient | None,
        node: str,
        dry_run: bool = False,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.node = node
        self.node_uid: str | None = None
        self.dry_run = dry_run or client is None
        self._wall = wall

    def evict(self, pod: PodInfo, pressure: Sequence[Pressure], pod_usage: str) -> Outcome:
        """Request one eviction; on success write the pod's Event. Never raises."""
        why = "; ".join(p.text() for p in pressure)
        if self.dry_run:
            log.warning("dry-run: would evict %s/%s (%s) on %s: %s", pod.namespace, pod.name, pod_usage, self.node, why)
            return Outcome.DRY_RUN
        assert self.client is not None
        try:
            # As seen: the class read from this version of the pod is the class it has when it is evicted.
            self.client.evict(pod.namespace, pod.name, pod.uid, pod.resource_version or None)
        except ApiError as exc:
            if exc.status == 429:
                # A PodDisruptionBudget forbids it now (the message names the budget), or the server is throttling.
                after = f"; server asks to wait {exc.retry_after_s:g}s" if exc.retry_after_s is not None else ""
                log.info("eviction of %s/%s refused: %s%s", pod.namespace, pod.name, exc.message, after)
                return Outcome.REFUSED
            if exc.status == 404:
                return Outcome.GONE
            if exc.status == 409:
                log.info("eviction of %s/%s skipped: the pod changed since it was seen (%s); the next tick decides "
                         "on it as it is now", pod.namespace, pod.name, exc.message)
                return Outcome.CHANGED
            log.warning("eviction of %s/%s failed: %s", pod.namespace, pod.name, exc)
            return Outcome.FAILED
        except Exception as exc:  # network trouble: skip this pod now, the next tick retries
            log.warning("eviction of %s/%s failed: %s", pod.namespace, pod.name, exc)
            return Outcome.FAILED
        log.warning("evicted %s/%s (%s) from %s: %s", pod.namespace, pod.name, pod_usage, self.node, why)
        self._event(
            pod.namespace,
            {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            EVENT_REASON_EVICTED,
            f"Evicted by Stowage from node {self.node} to relieve contention: {why}; this pod used {pod_usage}",
        )
        return Outcome.EVICTED

    def node_event(self, evicted: Sequence[PodInfo], pressure: Sequence[Pressure]) -> None:
        """One Event on the Node summarising a relief round (skipped in dry-run or when nothing was evicted)."""
        if self.dry_run or not evicted:
            return
        names = ", ".join(f"{p.namespace}/{p.name}" for p in evicted)
        involved: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "name": self.node}
        if self.node_uid:
            involved["uid"] = self.node_uid
        why = "; ".join(p.text() for p in pressure)
        self._event("default", involved, EVENT_REASON_CONTENTION,
                    f"Sustained contention: {why}; evicted {len(evicted)} opportunistic pod(s): {names}")

    def _event(self, namespace: str, involved: dict[str, Any], reason: str, message: str) -> None:
        assert self.client is not None
        now = _now_iso(self._wall)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            # Named as the kubelet names its events: object name + a unique hex suffix.
            "metadata": {"name": f"{involved['name']}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "action": "Evict",
            "source": {"component": COMPONENT, "host": self.node},
            "reportingComponent": f"stowage.io/{COMPONENT}",
            "reportingInstance": self.node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.client.create_event(namespace, body)
        except Exception as exc:  # an Event is an explanation, not the action: never fail for it
            log.warning("could not write %s event for %s %s: %s", reason, involved["kind"], involved["name"], exc)
