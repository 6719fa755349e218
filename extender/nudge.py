"""Nudges: an opportunistic pod held for missing samples is retried as soon as those samples are fresh again.

A pod the filter rejects on every node sits in kube-scheduler's unschedulable pool, and the return of
utilization samples is no API event: kube-scheduler v1.30 looks at that pool only on a cluster event a
plugin registered for, or every 30 s (``flushUnschedulablePodsLeftover``) for pods held longer than
``--pod-max-in-unschedulable-pods-duration``. An *update of the pod* moves it out at once: its
``PriorityQueue.Update`` sends a pod of the unschedulable pool whose update ``isPodUpdated`` (anything
beyond resourceVersion, generation, status, managedFields and finalizers changed; an annotation does) to
the backoff queue, or straight to the active queue when its backoff (1 s doubling to 10 s) is over.

So the filter reports (:meth:`PodNudges.hold`) each opportunistic pod it placed nowhere while it rejected
at least one node for missing or stale samples, with up to :data:`MAX_NODES` of those nodes. A worker
thread looks at every new utilization snapshot: a held pod one of whose nodes has fresh samples in it is
nudged — a JSON merge patch setting ``stowage.io/nudged-at`` (``labels.ANN_NUDGED_AT``) to the current
time, with the pod's uid as a precondition (a same-named successor is left alone) — and forgotten. That is
once per recovery: the pod is held again only if the filter rejects it for samples again.

Bounded and fail-safe: at most ``max_held`` pods remembered (the oldest forgotten, counted ``dropped``:
they wait for kube-scheduler's own retry, as without nudges), at most ``qps`` patches a second, a pod at
most once per ``min_interval_s``, pods already bound skipped. The filter only records (a dict insert);
patches go out on the worker thread. A failed patch is logged and counted, never raised or retried.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stowage.config import HarvestSettings
from stowage.kube.api import ApiError
from stowage.labels import ANN_NUDGED_AT
from stowage.policy import room
from stowage.prom import UtilizationSnapshot

__all__ = ["MAX_NODES", "OUTCOMES", "HeldPod", "PodNudges", "fresh_nodes"]

log = logging.getLogger(__name__)

#: How many of the nodes a pod was rejected on for samples are remembered: fresh samples on any one of them
#: nudge it (when Prometheus is back, all of them are fresh at once).
MAX_NODES = 64
#: ``stowage_extender_nudges_total{outcome}``: patched; gone (the pod was deleted or replaced); failed (any other
#: error, logged); dropped (forgotten unnudged from a full table).
OUTCOMES = ("patched", "gone", "failed", "dropped")
_WARN_EVERY_S = 60.0

Patch = Callable[[str, str, dict[str, Any]], Any]
"""``patch(namespace, name, merge_patch)``: a JSON merge patch of the pod."""


@dataclass(frozen=True, slots=True)
class HeldPod:
    """A pod the filter placed nowhere for want of fresh samples on ``nodes`` (some of them)."""

    key: str
    namespace: str
    name: str
    uid: str
    nodes: frozenset[str]


def fresh_nodes(snapshot: UtilizationSnapshot, stale_after_s: float) -> frozenset[str]:
    """Names of the nodes with samples no older than ``stale_after_s`` in ``snapshot`` (as of its fetch)."""
    if snapshot.error is not None or not snapshot.index:
        return frozenset()
    rows = np.fromiter(snapshot.index.values(), dtype=np.int64, count=len(snapshot.index))
    fresh = room.fresh(np.ones(rows.size, dtype=bool), snapshot.age_s[rows], stale_after_s)
    return frozenset(name for name, ok in zip(snapshot.index, fresh.tolist(), strict=True) if ok)


def _stamp(unix_s: float) -> str:
    return dt.datetime.fromtimestamp(unix_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class PodNudges:
    """Held pods and the worker that nudges them. ``patch=None`` records nothing and never patches."""

    def __init__(
        self,
        patch: Patch | None,
        current: Callable[[], UtilizationSnapshot] | None = None,
        *,
        stale_after_s: float = HarvestSettings().utilization_stale_after_s,
        is_bound: Callable[[str], bool] = lambda _key: False,
        qps: float = 20.0,
        min_interval_s: float = 10.0,
        max_held: int = 10_000,
        poll_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_outcome: Callable[[str], None] | None = None,
    ) -> None:
        self._patch = patch
        self._current = current or (lambda: UtilizationSnapshot.unavailable("no utilization feed"))
        self.stale_after_s = stale_after_s
        self._is_bound = is_bound
        self.qps = qps
        self.min_interval_s = min_interval_s
        self.max_held = max_held
        self.poll_s = poll_s
        self._clock, self._wall = clock, wall
        self._on_outcome = on_outcome or (lambda _outcome: None)
        self._held: OrderedDict[str, HeldPod] = OrderedDict()
        self._pending: OrderedDict[str, HeldPod] = OrderedDict()
        self._nudged: OrderedDict[str, float] = OrderedDict()  # key → when last nudged (clock)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_warning = -np.inf
        self._quiet_failures = 0

    # --- the filter's side (request path: a dict insert under a lock) ----------------------------------

    def hold(self, key: str, pod: Mapping[str, Any], nodes: Sequence[str]) -> None:
        """Remember ``pod`` as placed nowhere, rejected for missing samples on ``nodes`` (the first
        :data:`MAX_NODES` are kept)."""
        if self._patch is None:
            return
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
        name = str(meta.get("name") or "")
        if not name:
            return
        held = HeldPod(key, str(meta.get("namespace") or "default"), name, str(meta.get("uid") or ""),
                       frozenset(nodes[:MAX_NODES]))
        dropped = 0
        with self._lock:
            self._held[key] = held
            self._held.move_to_end(key)
            while len(self._held) > self.max_held:
                self._held.popitem(last=False)
                dropped += 1
        for _ in range(dropped):
            self._on_outcome("dropped")

    def release(self, key: str) -> None:
        """The filter placed the pod somewhere: nothing to nudge."""
        if self._patch is None:
            return
        with self._lock:
            self._held.pop(key, None)

    def held(self) -> list[HeldPod]:
        """The pods held now, oldest first."""
        with self._lock:
            return list(self._held.values())

    # --- the worker's side ----------------------------------------------------------------------------

    def due(self, snapshot: UtilizationSnapshot) -> list[HeldPod]:
        """Take out of the held table the pods to nudge for ``snapshot``: one of their nodes is fresh in it, they
        are not bound, and they were not nudged within ``min_interval_s``."""
        with self._lock:
            if not self._held:
                return []
            candidates = list(self._held.values())
        fresh = fresh_nodes(snapshot, self.stale_after_s)
        if not fresh:
            return []
        now = self._clock()
        out = []
        with self._lock:
            for pod in candidates:
                if self._held.get(pod.key) is not pod or pod.nodes.isdisjoint(fresh):
                    continue
                last = self._nudged.get(pod.key)
                if last is not None and now - last < self.min_interval_s:
                    continue  # stays held: a later snapshot nudges it
                del self._held[pod.key]
                if not self._is_bound(pod.key):
                    out.append(pod)
        return out

    def nudge(self, pod: HeldPod) -> str:
        """Patch one pod; return its outcome (also reported to ``on_outcome``). Never raises."""
        assert self._patch is not None
        with self._lock:
            self._nudged[pod.key] = self._clock()
            self._nudged.move_to_end(pod.key)
            while len(self._nudged) > self.max_held:
                self._nudged.popitem(last=False)
        meta: dict[str, Any] = {"annotations": {ANN_NUDGED_AT: _stamp(self._wall())}}
        if pod.uid:
            meta["uid"] = pod.uid  # a precondition: never the same-named successor of a deleted pod
        try:
            self._patch(pod.namespace, pod.name, {"metadata": meta})
            outcome = "patched"
        except ApiError as exc:
            outcome = "gone" if exc.status in (404, 409) else "failed"
            if outcome == "failed":
                self._warn(pod, exc)
        except Exception as exc:  # a nudge is a shortcut: log, count, carry on
            outcome = "failed"
            self._warn(pod, exc)
        self._on_outcome(outcome)
        return outcome

    def _warn(self, pod: HeldPod, exc: Exception) -> None:
        now = self._clock()
        if now - self._last_warning >= _WARN_EVERY_S:
            more = f" ({self._quiet_failures} more failed since the last warning)" if self._quiet_failures else ""
            log.warning("could not nudge held pod %s/%s for a retry: %s%s", pod.namespace, pod.name, exc, more)
            self._last_warning, self._quiet_failures = now, 0
        else:
            self._quiet_failures += 1
            log.debug("could not nudge held pod %s/%s: %s", pod.namespace, pod.name, exc)

    def step(self, last: UtilizationSnapshot | None) -> tuple[UtilizationSnapshot, bool]:
        """One turn of the worker: take the due pods of a new snapshot, patch at most one pending pod.

        Returns the snapshot looked at and whether a patch was sent.
        """
        snapshot = self._current()
        if snapshot is not last:
            due = self.due(snapshot)
            if due:
                log.info("utilization samples fresh again: nudging %d held pod(s) for a retry", len(due))
            for pod in due:
                self._pending[pod.key] = pod
        if not self._pending:
            return snapshot, False
        _, pod = self._pending.popitem(last=False)
        self.nudge(pod)
        return snapshot, True

    def start(self) -> PodNudges:
        if self._patch is not None and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="pod-nudges", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        last: UtilizationSnapshot | None = None
        while not self._stop.is_set():
            try:
                last, sent = self.step(last)
            except Exception:  # the loop must survive anything; held pods then wait for kube-scheduler's retry
                log.exception("nudging held pods failed")
                sent = False
            self._stop.wait(1.0 / self.qps if sent else self.poll_s)
