"""Pod groups taken back: a released all-or-nothing group of plain pods (``stowage.io/pod-group``) that is not
whole, or not up in time, holds no room.

The dispatcher releases a pod group whole, once all its pods exist gated (``snapshot.pod_gangs``). Afterwards each
pass (``PodGroups.take_back``) looks at the group's bound pods in the cache:

* fewer bound or released pods than the group's size: a member is gone. It may have succeeded, so the group's pods
  are listed once from the API server (only then): when its live members plus its succeeded ones are fewer than the
  size, a member failed, was evicted or deleted, and the live ones are deleted (``short``);
* all bound, not all started ``packing.gang_ready_timeout_s`` after the last was bound: the live ones are deleted
  (``late``).

Each deleted pod gets a Warning Event ``GangTakenBack`` saying why. Pods the user created are the user's to create
again (as Kueue expects of its pod groups, a controller that makes them does it by itself); the dispatcher releases
the group whole again once all of it exists gated. ``verdict`` and ``confirmed_short`` are pure; ``PodGroups`` is
the thin shell (the cache, one list, the deletes).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

from stowage.operator import crd
from stowage.operator.cache import Cache
from stowage.operator.events import post_event

from stowage import labels
from stowage.errors import InvalidInput
from stowage.kube import api
from stowage.kube.records import PodRecord

__all__ = ["PodGroups", "confirmed_short", "verdict"]

log = logging.getLogger(__name__)

Verdict = Literal["ok", "short", "late"]
_REASON: Final = "GangTakenBack"


def verdict(live: Sequence[PodRecord], in_flight: int, total: int, now: float, timeout_s: float) -> Verdict:
    """What the cache says of a pod group's ``live`` bound pods (``in_flight``: released, not bound yet)."""
    if not live:
        return "ok"  # nothing holds room
    if len(live) + in_flight < total:
        return "short"
    waiting = any(p.start_time_s is None for p in live)
    if in_flight == 0 and waiting and now - max(p.bound_at_s for p in live) > timeout_s:
        return "late"
    return "ok"


def confirmed_short(pods: Iterable[Mapping[str, Any]], total: int) -> bool:
    """Whether the group's pods as listed (every pod carrying its name) fall short: live released members plus
    succeeded ones fewer than ``total`` (a member failed, was evicted or deleted)."""
    count = 0
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        gated = any(isinstance(g, Mapping) and g.get("name") == labels.GATE_ADMISSION
                    for g in (pod.get("spec") or {}).get("schedulingGates") or [])
        phase = status.get("phase")
        if phase == "Succeeded" or (not gated and phase != "Failed" and not meta.get("deletionTimestamp")):
            count += 1
    return count < total


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
        self._whole: dict[tuple[str, str], frozenset[str]] = {}  # live uids of a group the API showed whole

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
        for (ns, _), r in self.cache.released_plain().items():
            if r.pod_group is not None:
                flying[(ns, r.pod_group)] = flying.get((ns, r.pod_group), 0) + 1
        deleted = 0
        for (ns, name), (total, live) in sorted(groups.items()):
            found = verdict(live, flying.get((ns, name), 0), total, now, self.timeout_s)
            if found == "short":
                uids = frozenset(p.uid for p in live)
                if self._whole.get((ns, name)) == uids:
                    continue  # members that succeeded, seen before: asked once, not every pass
                short = self._short(ns, name, total)
                if short is None:
                    continue
                if not short:
                    self._whole[(ns, name)] = uids
                    continue
            if found == "ok":
                continue
            why = (f"pod group {name!r} is all or nothing ({total} pods): "
                   + (f"only {len(live)} of its pods are live (a member failed, was evicted or deleted)"
                      if found == "short" else
                      f"not all of its pods were running {self.timeout_s:g} s after they were bound "
                      "(packing.gang_ready_timeout_s)")
                   + f"; its {len(live)} live pod(s) were deleted so that no part of it holds room. Create the "
                     "group's pods again: it is released whole once all of them exist")
            deleted += self._delete(ns, live, why, now)
        return deleted

    def _short(self, ns: str, name: str, total: int) -> bool | None:
        """``confirmed_short`` on the group's pods as the API server lists them; None: it did not answer."""
        try:
            pods, _ = self.client.list(f"/api/v1/namespaces/{ns}/pods",
                                       {"labelSelector": f"{labels.LABEL_POD_GROUP}={name}"})
        except (api.ApiError, OSError) as exc:
            log.warning("pod group %s/%s not checked (%s); the next pass looks again", ns, name, exc)
            return None
        return confirmed_short(pods, total)

    def _delete(self, ns: str, live: Sequence[PodRecord], why: str, now: float) -> int:
        done = 0
        for pod in live:
            if self.dry_run:
                log.info("dry run: would delete %s/%s: %s", ns, pod.name, why)
                continue
            try:
                self.client.delete(f"/api/v1/namespaces/{ns}/pods/{pod.name}")
            except api.ApiError as exc:
                if exc.status != 404:
                    log.warning("pod %s/%s of a gang not deleted (%s); the next pass tries again", ns, pod.name, exc)
                    continue
            except OSError as exc:
                log.warning("pod %s/%s of a gang not deleted (%s); the next pass tries again", ns, pod.name, exc)
                continue
            self._taken.add(pod.uid)
            done += 1
            post_event(self.client, {"apiVersion": "v1", "kind": "Pod",
                                     "metadata": {"namespace": ns, "name": pod.name, "uid": pod.uid}},
                       "Warning", _REASON, why, now)
        if done:
            log.warning("took back %d pod(s) in %s: %s", done, ns, why)
        return done

