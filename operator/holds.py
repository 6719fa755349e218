"""Why a pod waits, where a user looks: the dispatcher's holds (``stowage.policy.holding``) on pods and Jobs.

* A plain pod held at the gate ``stowage.io/admission`` carries the pod condition ``stowage.io/Held``: status True,
  reason ``WaitingForShare`` / ``WaitingForQuota`` / ``WaitingForRoom`` / ``WaitingForSample`` /
  ``WaitingForGang`` / ``QueueDraining``, the message with the numbers; and a Normal Event of the same reason and
  message when the reason changes (``kubectl describe pod`` lists Events with their messages, conditions only by
  type). Once released, the condition turns False (``Released``).
* A Job's held tasks: its condition ``Held`` (:func:`job_held`, written with the Job's status).

Writes happen on change only: a new reason at once, a new message under the same reason (the numbers moved) at
most once per ``refresh_s``, an Event about a pod at most once per ``refresh_s`` (as the extender's Events). Pod
writes run on their own thread (:class:`PodHolds`), never on the dispatch loop, newest reasons first; a backlog
of 10,000 held pods costs 10,000 condition patches once, not per pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from stowage.operator.events import post_event, rfc3339

from stowage import labels
from stowage.kube import api
from stowage.policy import holding

__all__ = ["EVENT_REASONS", "REFRESH_S", "HoldNotes", "PodHolds", "job_held"]

log = logging.getLogger(__name__)

EVENT_REASONS: Final[Mapping[str, str]] = {
    holding.SHARE: "WaitingForShare",
    holding.QUOTA: "WaitingForQuota",
    holding.ROOM: "WaitingForRoom",
    holding.SAMPLE: "WaitingForSample",
    holding.GANG: "WaitingForGang",
    holding.DRAINING: "QueueDraining",
}
"""Hold reason → the condition's and the Event's reason (CamelCase, as Kubernetes writes reasons)."""
RELEASED: Final = "Released"
REFRESH_S: Final = 60.0
"""A message whose reason did not change is rewritten at most this often; one Event per pod per this long (the
extender's ``PodEvents.min_interval_s``): numbers that move every pass need not cost a write every pass."""
_BATCH: Final = 100  # writes between two looks at the latest holds: a new reason does not wait behind a backlog
STRATEGIC_MERGE: Final = "application/strategic-merge-patch+json"  # conditions merge by type: PodScheduled stays

PodKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class _Note:
    reason: str
    message: str
    at: float


class HoldNotes:
    """What was last written per object, and whether a new (reason, message) is due (module docstring)."""

    def __init__(self, refresh_s: float = REFRESH_S) -> None:
        self.refresh_s = refresh_s
        self._notes: dict[Any, _Note] = {}

    def due(self, key: Any, reason: str, message: str, now: float) -> bool:
        note = self._notes.get(key)
        return (note is None or note.reason != reason
                or (note.message != message and now - note.at >= self.refresh_s))

    def settle(self, key: Any, reason: str, message: str, now: float) -> tuple[str, str]:
        """(reason, message) to show now: the new one when due (and noted as written), else the last one."""
        if self.due(key, reason, message, now):
            self._notes[key] = _Note(reason, message, now)
            return reason, message
        note = self._notes[key]
        return note.reason, note.message

    def get(self, key: Any) -> _Note | None:
        return self._notes.get(key)

    def note(self, key: Any, reason: str, message: str, now: float) -> None:
        self._notes[key] = _Note(reason, message, now)

    def forget(self, key: Any) -> None:
        self._notes.pop(key, None)

    def known(self) -> list[Any]:
        return list(self._notes)


def job_held(groups: Iterable[tuple[str, int, holding.Hold]]) -> tuple[str, str] | None:
    """A Job's ``Held`` condition (reason, message) from its held groups (name, tasks, hold); None: none held.

    The reason is the one holding most tasks; the message counts tasks by reason, then each group's reason.
    """
    held = [(name, n, hold) for name, n, hold in groups if n > 0]
    if not held:
        return None
    by_reason: dict[str, int] = {}
    for _, n, hold in held:
        by_reason[hold.reason] = by_reason.get(hold.reason, 0) + n
    top = max(holding.REASONS, key=lambda r: (by_reason.get(r, 0), -holding.REASONS.index(r)))
    total = sum(by_reason.values())
    counts = ", ".join(f"{by_reason[r]} for {r}" for r in holding.REASONS if r in by_reason)
    details = "; ".join(f"group {name!r}: {hold.message}" for name, _, hold in sorted(held, key=lambda x: x[0]))
    return EVENT_REASONS[top], f"{total} task(s) held ({counts}). {details}"


def _shown(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of the pod's ``stowage.io/Held`` condition as cached, when True; else None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == labels.CONDITION_HELD and c.get("status") == "True":
            return str(c.get("reason")), str(c.get("message"))
    return None


def _condition(status: bool, reason: str, message: str, now: float) -> dict[str, Any]:
    return {"type": labels.CONDITION_HELD, "status": "True" if status else "False", "reason": reason,
            "message": message, "lastTransitionTime": rfc3339(now)}


class PodHolds:
    """The ``stowage.io/Held`` condition and Events on held plain pods, written on a thread of its own.

    The dispatch loop calls :meth:`set` with every held pod's hold after each pass; :meth:`flush` writes what
    changed (the thread calls it when woken; tests call it directly).
    """

    def __init__(self, client: api.KubeClient, *, clock: Callable[[], float] = time.time,
                 refresh_s: float = REFRESH_S) -> None:
        self._client = client
        self._clock = clock
        self._lock = threading.Lock()
        self._wanted: dict[PodKey, tuple[holding.Hold, Mapping[str, Any]]] = {}
        self._written = HoldNotes(refresh_s)
        self._evented: dict[PodKey, float] = {}
        self.refresh_s = refresh_s
        self.writes = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set(self, wanted: Mapping[PodKey, tuple[holding.Hold, Mapping[str, Any]]]) -> None:
        """Every pod held now: key → (its hold, the pod as cached: its uid goes into the Event)."""
        with self._lock:
            self._wanted = dict(wanted)
        self._wake.set()

    def start(self) -> PodHolds:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pod-holds", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.refresh_s)  # woken by each pass; the timeout lets due refreshes go out
            self._wake.clear()
            try:
                while self.flush() >= _BATCH and not self._stop.is_set():
                    pass
            except Exception:  # the writer must survive anything: a condition is advice
                log.exception("held-pod conditions not written; retrying at the next pass")

    def pending(self) -> list[tuple[PodKey, holding.Hold | None, Mapping[str, Any] | None]]:
        """What :meth:`flush` would write now, in order: new reasons, releases, refreshed numbers."""
        now = self._clock()
        with self._lock:
            wanted = dict(self._wanted)
        new, refresh = [], []
        for key, (hold, pod) in wanted.items():
            note = self._written.get(key)
            if note is None and _shown(pod) == (EVENT_REASONS[hold.reason], hold.message):
                self._written.note(key, hold.reason, hold.message, now)  # written before a restart: as it is
                continue
            if note is None or note.reason != hold.reason:
                new.append((key, hold, pod))
            elif self._written.due(key, hold.reason, hold.message, now):
                refresh.append((key, hold, pod))
        gone = [(key, None, None) for key in self._written.known() if key not in wanted]
        return [*new, *gone, *refresh]

    def flush(self, limit: int = _BATCH) -> int:
        """Write at most ``limit`` of :meth:`pending`; returns how many it tried."""
        todo = self.pending()[:limit]
        for key, hold, pod in todo:
            self._write(key, hold, pod)
        return len(todo)

    def _write(self, key: PodKey, hold: holding.Hold | None, pod: Mapping[str, Any] | None) -> None:
        now = self._clock()
        reason = EVENT_REASONS[hold.reason] if hold is not None else RELEASED
        message = hold.message if hold is not None else "released by the dispatcher"
        note = self._written.get(key)
        try:
            self._client.patch(f"/api/v1/namespaces/{key[0]}/pods/{key[1]}/status",
                               {"status": {"conditions": [_condition(hold is not None, reason, message, now)]}},
                               STRATEGIC_MERGE)
        except api.ApiError as exc:
            if exc.status == 404:  # deleted: nothing to say any more
                self._written.forget(key)
                self._evented.pop(key, None)
                return
            log.warning("pod %s/%s: condition %s not written (%s); retrying", *key, labels.CONDITION_HELD, exc)
            return
        except OSError as exc:
            log.warning("pod %s/%s: condition %s not written (%s); retrying", *key, labels.CONDITION_HELD, exc)
            return
        self.writes += 1
        if hold is None:  # released for good (a gate never comes back): nothing more to remember
            self._written.forget(key)
            self._evented.pop(key, None)
            return
        self._written.note(key, hold.reason, message, now)
        changed = note is None or note.reason != hold.reason
        last = self._evented.get(key)
        if changed and pod is not None and (last is None or now - last >= self.refresh_s):
            self._evented[key] = now
            ref = {"apiVersion": "v1", "kind": "Pod", "metadata": pod.get("metadata") or {}}  # listed items lack both
            post_event(self._client, ref, "Normal", reason, message, now)
