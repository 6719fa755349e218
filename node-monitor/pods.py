"""This node's pods as the node monitor needs them, kept current by a list+watch thread.

Only pods with ``spec.nodeName`` equal to this node are requested (field
selector) and, because a server or emulator might ignore the selector, kept:
pods of other nodes are never stored and so never touched.

A pod counts as opportunistic — evictable by Stowage — only when
:func:`stowage.labels.pod_class` (the rule the extender and the simulator use
too) says so. Everything else (regular, unlabelled, contradictory, malformed)
is protected.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stowage.errors import IntentError
from stowage.kube import api
from stowage.kube.informer import Backoff, Informer
from stowage.labels import PodClass, pod_class

__all__ = ["PodInfo", "PodStore", "PodWatcher", "pod_info"]

log = logging.getLogger("stowage.node_monitor.pods")

DEFAULT_GRACE_S = 30.0
"""Kubernetes' default ``terminationGracePeriodSeconds``."""


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the monitor knows about one pod of this node."""

    uid: str
    namespace: str
    name: str
    pod_class: PodClass | None  # None: labels malformed or contradictory (protected, reported as regular)
    started_at_s: float
    terminating: bool
    grace_s: float = DEFAULT_GRACE_S
    resource_version: str = ""
    """The version seen: an eviction names it (a pod changed since, e.g. promoted to regular, is not evicted)."""
    host_network: bool = False
    """``spec.hostNetwork``: the pod shares the node's network namespace, so it has no network usage of its own."""

    @property
    def opportunistic(self) -> bool:
        """Evictable by Stowage: class opportunistic and not already terminating."""
        return self.pod_class is PodClass.OPPORTUNISTIC and not self.terminating

    @property
    def class_label(self) -> str:
        """The ``class`` label value for metrics: the given class, ``regular`` when never classified."""
        return str(self.pod_class or PodClass.REGULAR)


def _epoch(ts: Any) -> float | None:
    if not isinstance(ts, str) or not ts:
        return None
    try:
        return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_info(pod: Mapping[str, Any]) -> PodInfo | None:
    """Parse a Pod API object; ``None`` when it has no uid (nothing to match a cgroup with)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    uid = meta.get("uid")
    if not uid:
        return None
    labels = meta.get("labels") or {}
    try:
        given: PodClass | None = pod_class(labels)
    except IntentError:
        given = None
    # Newest first needs a start time; a pod without one sorts as the oldest (evicted last).
    started = _epoch(status.get("startTime")) or _epoch(meta.get("creationTimestamp")) or 0.0
    terminating = bool(meta.get("deletionTimestamp")) or status.get("phase") in ("Succeeded", "Failed")
    grace = spec.get("terminationGracePeriodSeconds")
    return PodInfo(
        uid=str(uid),
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        pod_class=given,
        started_at_s=started,
        terminating=terminating,
        grace_s=float(grace) if isinstance(grace, int | float) and grace >= 0 else DEFAULT_GRACE_S,
        resource_version=str(meta.get("resourceVersion") or ""),
        host_network=spec.get("hostNetwork") is True,
    )


class PodStore:
    """Thread-safe map uid → :class:`PodInfo` for one node."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._lock = threading.Lock()
        self._pods: dict[str, PodInfo] = {}
        self.synced = threading.Event()

    def _mine(self, pod: Mapping[str, Any]) -> bool:
        return (pod.get("spec") or {}).get("nodeName") == self.node

    def replace(self, items: list[Mapping[str, Any]]) -> None:
        pods = {}
        for item in items:
            info = pod_info(item) if self._mine(item) else None
            if info is not None:
                pods[info.uid] = info
        with self._lock:
            self._pods = pods
        self.synced.set()

    def apply(self, event: Mapping[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        info = pod_info(obj)
        if info is None:
            return
        with self._lock:
            if kind == "DELETED" or not self._mine(obj):
                self._pods.pop(info.uid, None)
            else:
                self._pods[info.uid] = info

    def snapshot(self) -> dict[str, PodInfo]:
        with self._lock:
            return dict(self._pods)


class PodWatcher(Informer):
    """List, then watch, this node's pods into a :class:`PodStore` (field selector ``spec.nodeName``).

    The shared :class:`~stowage.kube.informer.Informer` loop: relist at once after ``410 Gone``,
    jittered backoff up to ``backoff_max_s`` after other errors. ``on_resync`` runs before every
    list and every new watch, at least every ``watch_timeout_s`` (the monitor re-reads the Node's
    capacity there). ``start()`` it; ``stop()`` ends it promptly.
    """

    def __init__(
        self,
        client: api.KubeClient,
        store: PodStore,
        on_resync: Callable[[], None] | None = None,
        watch_timeout_s: int = 300,
        backoff_max_s: float = 30.0,
    ) -> None:
        def on_event(kind: str, obj: dict[str, Any]) -> None:
            store.apply({"type": kind, "object": obj})

        super().__init__(client, api.PODS, name=f"pods-on-{store.node}", params=api.on_node(store.node),
                         on_replace=store.replace, on_event=on_event, on_resync=on_resync,
                         watch_timeout_s=watch_timeout_s, backoff=Backoff(cap_s=backoff_max_s))
        self.store = store
