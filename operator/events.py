"""Events, the writer's one way to tell a user: ``post_event`` (best effort) and :class:`PodWarnings` (once per pod).

Jobs, holds, promotion and the release writer post through :func:`post_event`; messages are bounded
(:func:`bounded`) so an Event names the field and the value, never the whole object.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any

from stowage.kube import api
from stowage.kube.cluster import ClusterModel

__all__ = ["COMPONENT", "PodWarnings", "bounded", "post_event", "rfc3339"]

log = logging.getLogger(__name__)

COMPONENT = "stowage-operator"
_MESSAGE_MAX = 1024  # characters of an Event's or a condition's message (bounded)


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def bounded(message: str) -> str:
    """An Event's or a condition's message: enough to name the field and the value, never the whole object."""
    return message if len(message) <= _MESSAGE_MAX else message[:_MESSAGE_MAX - 1] + "…"


def post_event(client: api.KubeClient, obj: Mapping[str, Any], type_: str, reason: str, message: str,
               now: float) -> None:
    """A core/v1 Event about ``obj`` (a Job or a Pod); failures are logged, never raised (Events are best effort)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    stamp = rfc3339(now)
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
        "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta.get("name"),
                           "namespace": namespace, "uid": meta.get("uid")},
        "type": type_, "reason": reason, "message": bounded(message),
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
    try:
        client.create_event(namespace, event)
    except Exception as exc:  # an Event is best effort: it must never stop the loop
        log.warning("could not post Event %s on %s/%s: %s", reason, namespace, meta.get("name"), exc)


class PodWarnings:
    """Pods Stowage cannot read, told once each (a Warning Event ``InvalidStowageLabels``); the set stays as small
    as what is wrong now (:meth:`tell_bad_bound_pods` forgets the rest)."""

    def __init__(self, client: api.KubeClient, *, dry_run: bool) -> None:
        self._client = client
        self._dry_run = dry_run
        self._told: set[str] = set()  # uids of pods told they cannot be read

    def tell_bad_bound_pods(self, cluster: ClusterModel, gated_uids: Callable[[], set[str]], now: float) -> None:
        """Each bound pod the cluster model reads only in part (its Stowage labels or annotations do not parse: it
        counts as regular at its requests) or leaves out is told why (:meth:`tell`). Pods told before that are
        neither bad in the model nor gated any more (``gated_uids()``) are forgotten."""
        bad = cluster.bad_pods()
        if self._told:
            self._told &= {key for key, _, _ in bad} | gated_uids()
        for key, name, problem in bad:
            if "/" in name:
                namespace, pod = name.split("/", 1)
                meta = {"namespace": namespace, "name": pod, **({} if "/" in key else {"uid": key})}
                self.tell(key, meta, f"Stowage cannot read all of this pod: {problem}", now)

    def tell(self, uid: str, meta: Mapping[str, Any], message: str, now: float) -> bool:
        """A Warning Event ``InvalidStowageLabels`` on a pod Stowage cannot read, once per pod; True when new."""
        if uid in self._told:
            return False
        self._told.add(uid)
        if not self._dry_run:
            post_event(self._client, {"apiVersion": "v1", "kind": "Pod", "metadata": meta}, "Warning",
                       "InvalidStowageLabels", message, now)
        return True
