"""Pod groups taken back: a released all-or-nothing group of plain pods (``stowage.io/pod-group``) that is not
whole, or not up in time, holds no room.

The dispatcher releases a pod group whole, once all its pods exist gated (``snapshot.pod_gangs``). Afterwards each
pass (``PodGroups.take_back``) looks at the group's bound pods in the cache:

* fewer bound or released pods than the group's size: a member is gone. It may have succeeded, so the group's pods
  are listed once from the API server (only then): when its live members plus its succeeded ones are fewer than the
  size, a member failed, was evicted or deleted, and the live ones are deleted (``short``); a member released
  long ago and still on no node counts as not up (below);
* not all started ``packing.gang_ready_timeout_s`` after the last was bound (or, one still unbound, after the
  oldest such was released): the live ones are deleted (``late``).

Each deleted pod gets a Warning Event ``GangTakenBack`` saying why. Pods the user created are the user's to create
again (as Kueue expects of its pod groups, a controller that makes them does it by itself); the dispatcher releases
the group whole again once all of it exists gated. ``verdict`` and ``listed`` are pure; ``PodGroups`` is
the thin shell (the cache, one list, the deletes).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

from stowage.operator import crd
from stowage.operator.cache import Cache
from stowage.operator.events import post_event

from stowage import labels
from stowage.errors import InvalidInput
from stowage.kube import api
from stowage.kube.records import PodRecord

__all__ = ["PodGroups", "listed", "verdict"]

log = logging.getLogger(__name__)

Verdict = Literal["ok", "short", "late"]
Listed = Literal["short", "unbound", "whole"]
_REASON: Final = "GangTakenBack"


def verdict(live: Sequence[PodRecord], in_flight: int, total: int, now: float, timeout_s: float,
            released_at: float = math.inf) -> Verdict:
    """What the cache says of a pod group's ``live`` bound pods (``in_flight``: released, not bound yet, the oldest
    at ``released_at``)."""
    if not live:
        return "ok"  # nothing holds room
    if len(live) + in_flight < total:
        return "short"
    if in_flight:  # a member released and never bound (no node took it) does not come up either
        return "late" if now - released_at > timeout_s else "ok"
    if any(p.start_time_s is None for p in live) and now - max(p.bound_at_s for p in live) > timeout_s:
        return "late"
    return "ok"


def listed(pods: Iterable[Mapping[str, Any]], total: int) -> Listed:
    """What the group's pods as listed (every pod carrying its name) say: ``short`` when its live released members
    plus its succeeded ones are fewer than ``total`` (a member failed, was evicted or deleted); ``unbound`` when it is
    whole but a released member is on no node yet; else ``whole``."""
    count = unbound = 0
    for pod in pods:
        live = _live_released(pod)
        count += (pod.get("status") or {}).get("phase") == "Succeeded" or live
        unbound += live and not (pod.get("spec") or {}).get("nodeName")
    return "short" if count < total else "unbound" if unbound else "whole"


def _live_released(pod: Mapping[str, Any]) -> bool:
    """Released (its gate gone), not finished, not being deleted: it holds room, or is on its way to."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    gated = any(isinstance(g, Mapping) and g.get("name") == labels.GATE_ADMISSION
                for g in spec.get("schedulingGates") or [])
    phase = (pod.get("status") or {}).get("phase")
    return not gated and phase not in ("Succeeded", "Failed") and not meta.get("deletionTimestamp")


def group_of(pod_labels: Mapping[str, Any]) -> tuple[str, int] | None:
    """The pod group named by a pod's labels; None: none, or labels the webhook would have refused."""
    try:
        return labels.pod_group(pod_labels, crd.MAX_REPLICAS)
    except InvalidInput:
        return None


class PodGroups:
    """Takes back released pod groups that are not whole or not up in time (module docstring)."""

    def __init__(self, client: api.KubeClient, cache: Cache, timeout_s: float, *, dry_run: bool) -> None:
        self.client, self.cache, self.timeout_s, self.dry_run = client, cache, timeout_s, dry_run
        self._taken: set[str] = set()  # uids deleted: not counted again while they terminate
        # A group the API showed whole: its live uids then, and when to look again (a member still unbound: at its
        # timeout).
        self._whole: dict[tuple[str, str], tuple[frozenset[str], float]] = {}

    def take_back(self, now: float) -> int:
        """One look at every released pod group; how many pods were deleted."""
        groups: dict[tuple[str, str], tuple[int, list[PodRecord]]] = {}
        for pod in self.cache.cluster.pods():
            named = group_of(pod.labels) if labels.LABEL_POD_GROUP in pod.labels else None
            if named is None or pod.uid in self._taken:
                continue
            groups.setdefault((pod.namespace, named[0]), (named[1], []))[1].append(pod)
        live_uids = {p.uid for p in self.cache.cluster.pods()}
        self._taken &= live_uids
        self._whole = {k: v for k, v in self._whole.items() if k in groups}
        if not groups:
            return 0
        flying: dict[tuple[str, str], int] = {}
        since: dict[tuple[str, str], float] = {}
        for (ns, _), r in self.cache.released_plain().items():
            if r.pod_group is not None:
                flying[(ns, r.pod_group)] = flying.get((ns, r.pod_group), 0) + 1
                since[(ns, r.pod_group)] = min(since.get((ns, r.pod_group), math.inf), r.at)
        deleted = 0
        for (ns, name), (total, live) in sorted(groups.items()):
            found = verdict(live, flying.get((ns, name), 0), total, now, self.timeout_s,
                            since.get((ns, name), math.inf))
            if found == "short":
                uids = frozenset(p.uid for p in live)
                seen = self._whole.get((ns, name))
                if seen is not None and seen[0] == uids and now < seen[1]:
                    continue  # members that succeeded, seen before: asked once, not every pass
                got = self._list(ns, name)
                if got is None:
                    continue
                answer = listed(got, total)
                deadline = max(p.bound_at_s for p in live) + self.timeout_s
                if answer == "unbound" and now > deadline:
                    found = "late"
                elif answer != "short":
                    self._whole[(ns, name)] = (uids, deadline if answer == "unbound" else math.inf)
                    continue
                # Every released member goes, bound or not: one left on its way would start alone.
                targets = [(str(m.get("name")), str(m.get("uid"))) for m in
                           ((p.get("metadata") or {}) for p in got if _live_released(p))]
            elif found == "late":
                targets = [(p.name, p.uid) for p in live] + [(pod, "") for (n, pod), r in
                                                             self.cache.released_plain().items()
                                                             if n == ns and r.pod_group == name]
            else:
                continue
            why = (f"pod group {name!r} is all or nothing ({total} pods): "
                   + (f"only {len(live)} of its pods are live (a member failed, was evicted or deleted)"
                      if found == "short" else
                      f"not all of its pods were running {self.timeout_s:g} s after they were bound "
                      "(packing.gang_ready_timeout_s)")
                   + "; its released pods were deleted so that no part of it holds room. Create the group's pods "
                     "again: it is released whole once all of them exist")
            deleted += self._delete(ns, targets, why, now)
        return deleted

    def _list(self, ns: str, name: str) -> list[Mapping[str, Any]] | None:
        """The group's pods as the API server lists them; None: it did not answer."""
        try:
            pods, _ = self.client.list(f"/api/v1/namespaces/{ns}/pods",
                                       {"labelSelector": f"{labels.LABEL_POD_GROUP}={name}"})
        except (api.ApiError, OSError) as exc:
            log.warning("pod group %s/%s not checked (%s); the next pass looks again", ns, name, exc)
            return None
        return list(pods)

    def _delete(self, ns: str, pods: Sequence[tuple[str, str]], why: str, now: float) -> int:
        """Delete ``(name, uid)`` pods of ``ns``, each told why; how many were deleted."""
        done = 0
        for name, uid in pods:
            if self.dry_run:
                log.info("dry run: would delete %s/%s: %s", ns, name, why)
                continue
            try:
                self.client.delete(f"/api/v1/namespaces/{ns}/pods/{name}")
            except api.ApiError as exc:
                if exc.status != 404:  # gone already: nothing to tell
                    log.warning("pod %s/%s of a gang not deleted (%s); the next pass tries again", ns, name, exc)
                continue
            except OSError as exc:
                log.warning("pod %s/%s of a gang not deleted (%s); the next pass tries again", ns, name, exc)
                continue
            if uid:
                self._taken.add(uid)
            done += 1
            post_event(self.client, {"apiVersion": "v1", "kind": "Pod",
                                     "metadata": {"namespace": ns, "name": name, "uid": uid or None}},
                       "Warning", _REASON, why, now)
        if done:
            log.warning("took back %d pod(s) in %s: %s", done, ns, why)
        return done

