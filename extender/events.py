"""Warning Events on pods the extender placed nowhere: the numbers behind the filter's short reasons.

kube-scheduler's ``FailedScheduling`` event groups the filter's per-node phrases ("480 stowage:
not enough harvestable capacity"); what the pod needs and what the closest nodes had goes here,
in one Event per pod. Posting happens on a background thread, never on the request path, and at
most once per pod per ``min_interval_s`` (kube-scheduler retries an unschedulable pod every few
seconds to minutes; one Event a minute is enough to read). When the queue is full, Events are
dropped and counted, never waited for.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["EVENT_INVALID", "EVENT_NOT_PLACED", "PodEvents"]

log = logging.getLogger(__name__)

EVENT_NOT_PLACED = "StowageNoNode"
EVENT_INVALID = "StowageInvalidPod"
_COMPONENT = "stowage-extender"
_MESSAGE_LIMIT = 1024  # the API server truncates longer Event messages; keep the start readable

Post = Callable[[str, dict[str, Any]], Any]
"""``post(namespace, event_body)``: create a core/v1 Event (``KubeClient.create_event``)."""


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(pod: Mapping[str, Any], reason: str, message: str, instance: str) -> tuple[str, dict[str, Any]]:
    """``(namespace, core/v1 Event)`` about ``pod``."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    now = _now()
    return namespace, {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name,
                           "uid": str(meta.get("uid") or "")},
        "reason": reason,
        "message": message if len(message) <= _MESSAGE_LIMIT else message[: _MESSAGE_LIMIT - 1] + "…",
        "type": "Warning",
        "source": {"component": _COMPONENT},
        "reportingComponent": _COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class PodEvents:
    """Rate-limited, asynchronous Events about pods. ``post=None`` keeps the limiter but posts nothing."""

    def __init__(
        self,
        post: Post | None,
        *,
        min_interval_s: float = 60.0,
        max_queue: int = 256,
        remembered: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        on_outcome: Callable[[str], None] | None = None,
    ) -> None:
        self._post = post
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._last: OrderedDict[str, float] = OrderedDict()
        self._remembered = remembered
        self._queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue(max_queue)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._on_outcome = on_outcome or (lambda _outcome: None)
        self.instance = socket.gethostname()

    def due(self, key: str) -> bool:
        """True (and the pod marked) when no Event about ``key`` went out within ``min_interval_s``."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.min_interval_s:
                return False
            self._last[key] = now
            self._last.move_to_end(key)
            while len(self._last) > self._remembered:
                self._last.popitem(last=False)
            return True

    def emit(self, pod: Mapping[str, Any], reason: str, message: str) -> None:
        """Queue one Event (call after :meth:`due`); dropped, and counted, when the queue is full."""
        if self._post is None:
            return
        try:
            self._queue.put_nowait(event_body(pod, reason, message, self.instance))
        except queue.Full:
            self._on_outcome("dropped")

    def start(self) -> PodEvents:
        if self._post is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pod-events", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        assert self._post is not None
        while (item := self._queue.get()) is not None:
            namespace, body = item
            try:
                self._post(namespace, body)
                self._on_outcome("posted")
            except Exception as exc:  # an Event is advice: log, count, carry on
                log.warning("could not post Event %s on %s/%s: %s", body["reason"], namespace,
                            body["involvedObject"]["name"], exc)
                self._on_outcome("failed")
