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

from stowage.node_monitor.kubeapi import KubeClient

from stowage.errors import IntentError
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


class PodWatcher(threading.Thread):
    """List, then watch, this node's pods into a :class:`PodStore`; relist after any error.

    ``on_relist`` runs before every list (the monitor refreshes the Node's
    capacity there). Stops when ``stop`` is set; waits at most ``backoff_max_s``
    between failed attempts.
    """

    def __init__(
        self,
        client: KubeClient,
        store: PodStore,
        stop: threading.Event,
        on_relist: Callable[[], None] | None = None,
        watch_timeout_s: int = 300,
        backoff_max_s: float = 30.0,
    ) -> None:
        super().__init__(name="pod-watcher", daemon=True)
        self.client, self.store, self.stop = client, store, stop
        self.on_relist = on_relist
        self.watch_timeout_s = watch_timeout_s
        self.backoff_max_s = backoff_max_s

    def run(self) -> None:
        backoff = 0.5
        while not self.stop.is_set():
            if self.on_relist is not None:
                try:
                    self.on_relist()
                except Exception as exc:  # e.g. no RBAC for nodes get: keep following pods regardless
                    log.warning("refreshing the node before listing pods failed: %s", exc)
            try:
                items, version = self.client.list_pods(self.store.node)
                self.store.replace(items)
                backoff = 0.5
                for event in self.client.watch_pods(self.store.node, version, self.watch_timeout_s):
                    if self.stop.is_set():
                        return
                    if event.get("type") == "ERROR":  # e.g. 410 Gone: the version expired, relist
                        break
                    self.store.apply(event)
            except Exception as exc:  # any failure: log, back off, relist; never kill the monitor
                if self.stop.is_set():  # the stream was interrupted to shut down
                    return
                log.warning("pod list/watch failed (%s); retrying in %.1fs", exc, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max_s)
