"""Queue weights for preempt, kept live by an informer over the cluster-scoped Queue objects.

``queues.stowage.io/v1alpha1``: ``spec.weight`` (> 0, default 1) is a queue's weight in weighted
DRF, the weight preempt's fair share (the dispatcher's, ``fairness.fair_shares``) uses
(``preemption.over_share_queues``). The rules:

- a queue with no Queue object, or whose Queue was deleted, weighs 1;
- a weight that is missing, not a number, not finite or ≤ 0 reads as 1 (the CRD schema and the
  operator's webhook refuse those; read leniently, as the operator's ``QueueSpec`` does);
- when the API refuses the list (401, 403: the extender's RBAC lacks ``queues``; 404: the CRD is
  not installed) every queue weighs 1 until a list succeeds; any other failure (network, API
  server restarting) keeps the last weights read while the informer retries.

The extender serves whatever happens here: a failure is logged once (WARNING) until the list
succeeds again (INFO), and ``error`` (shown by ``/readyz`` as ``queue_weights_error``) says what is
wrong meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from stowage import labels
from stowage.kube import api
from stowage.kube.informer import Informer
from stowage.labels import API_GROUP, API_VERSION

__all__ = ["NOT_READ", "QUEUES", "QueueWeights", "queue_weight"]

log = logging.getLogger(__name__)

#: The Queue collection (cluster-scoped).
QUEUES = f"/apis/{API_GROUP}/{API_VERSION}/queues"
#: ``error`` before the first list has been answered.
NOT_READ = "Queues not read yet"
#: API answers that mean "you cannot read Queues here" (not a blip): weights fall back to 1.
_UNREADABLE = frozenset({401, 403, 404})


def queue_weight(queue: Mapping[str, Any]) -> float:
    """``spec.weight`` of a Queue object (``labels.queue_weight``: 1 when missing, not a number, not finite or ≤ 0)."""
    return labels.queue_weight(queue.get("spec"))


def _name(queue: Mapping[str, Any]) -> str | None:
    meta = queue.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return str(name) if name else None


class QueueWeights:
    """Weight per queue name, from the Queue informer's list and events. Thread-safe.

    Writers (the informer thread) publish a new dict on every change; :meth:`weights` hands
    readers the current one, which is never modified afterwards.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._weights: dict[str, float] = {}
        self._error: str | None = NOT_READ
        self._failing = False

    def weights(self) -> Mapping[str, float]:
        """The weights of the Queues that exist now; a name missing from it weighs 1."""
        return self._weights

    @property
    def error(self) -> str | None:
        """Why the weights may be wrong now (``None`` once the last list succeeded)."""
        return self._error

    def replace(self, items: Iterable[Mapping[str, Any]]) -> None:
        """A full list: exactly these Queues exist."""
        weights = {name: queue_weight(q) for q in items if (name := _name(q)) is not None}
        with self._lock:
            self._weights = weights
            self._error = None
            recovered, self._failing = self._failing, False
        if recovered:
            log.info("Queue weights readable again (%d queues): preempt uses them", len(weights))

    def apply(self, event_type: str, queue: Mapping[str, Any]) -> None:
        """One watch event: ADDED and MODIFIED set the queue's weight, DELETED drops it (weight 1)."""
        name = _name(queue)
        if name is None:
            return
        with self._lock:
            weights = dict(self._weights)
            if event_type == "DELETED":
                weights.pop(name, None)
            else:
                weights[name] = queue_weight(queue)
            self._weights = weights

    def failed(self, exc: Exception) -> bool:
        """The informer's ``on_error``: record why, log the first failure of a run; True (reported)."""
        unreadable = isinstance(exc, api.ApiError) and exc.status in _UNREADABLE
        with self._lock:
            if unreadable:
                self._weights = {}
                consequence = "every queue weighs 1 in preempt until they can be read"
            else:
                consequence = f"preempt keeps the last weights read ({len(self._weights)} queues) meanwhile"
            self._error = f"cannot read Queues ({type(exc).__name__}: {exc}): {consequence}"
            first, self._failing = not self._failing, True
            message = self._error
        if first:
            hint = " (the extender needs list and watch on queues.stowage.io, and the Queue CRD installed)"
            log.warning("%s%s; retrying quietly", message, hint if unreadable else "")
        return True

    def informer(self, client: api.KubeClient, **informer_kwargs: Any) -> Informer:
        """An unstarted informer keeping these weights in step (``informer_kwargs``: backoff, watch timeout)."""
        return Informer(
            client,
            QUEUES,
            name="queues",
            on_replace=self.replace,
            on_event=self.apply,
            on_error=self.failed,
            **informer_kwargs,
        )
