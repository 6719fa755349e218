"""The release writer: the decision's releases and promotions, applied to the API server.

::

    releases ─► Job groups: create the tasks' pods (converted when opportunistic; 409: made before a restart)
             └► plain pods: remove the gate stowage.io/admission (JSON patch guarded by a test op)
    promoted ─► promotion.Promoter (in place, before any release: UBIS Alg. 1 promotes before it allocates)

Every release is recorded in the cache (``Cache.released``) until the cache shows it, so nothing is released
twice. A create the API server forbids (403) backs its Job off (:data:`REFUSAL_BACKOFF_S`) and says why on the
Job; one it refuses (400/422) fails the Job (``JobWriter.fail``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stowage.operator import admission, jobs, promotion, tasks
from stowage.operator.cache import Cache, Released, pod_key, task_pod
from stowage.operator.dispatcher import PendingGroup, Release, RunningPod
from stowage.operator.events import post_event
from stowage.operator.job_writer import JobWriter
from stowage.operator.metrics import OperatorMetrics

from stowage import labels
from stowage.errors import InvalidInput
from stowage.kube import api

__all__ = ["REFUSAL_BACKOFF_S", "Writer"]

log = logging.getLogger(__name__)

#: A Job whose pod create the API server forbids (403: ResourceQuota, PodSecurity, LimitRange, RBAC) waits this
#: long before its next try, doubling per refusal up to the cap; meanwhile it leaves its queue's order to others.
REFUSAL_BACKOFF_S = (10.0, 300.0)


@dataclass
class Refusal:
    """A Job whose last pod create the API server forbade: retried at ``until`` (clock seconds)."""

    until: float
    attempts: int
    message: str


class Writer:
    """Applies releases and promotions; owns the 403 backoff of Jobs. Dry run: says what it would do, writes nothing."""

    def __init__(self, client: api.KubeClient, cache: Cache, job_writer: JobWriter, promoter: promotion.Promoter,
                 metrics: OperatorMetrics, *, group_of: Callable[[Mapping[str, Any]], PendingGroup | None],
                 held: Callable[[jobs.JobKey], tuple[str, str] | None], dry_run: bool, node_hint: bool,
                 clock: Callable[[], float]) -> None:
        self.client = client
        self.cache = cache
        self.job_writer = job_writer
        self.promoter = promoter
        self.metrics = metrics
        self.group_of = group_of  # a gated plain pod's group (snapshot.Snapshots.plain_group), reserved until bound
        self.held = held  # the dispatcher's hold of a Job (publisher.Publisher.job_held)
        self.dry_run = dry_run
        self.node_hint = node_hint  # released pods prefer the node the dispatcher placed them on (off: it spreads)
        self.clock = clock
        self.refused: dict[jobs.JobKey, Refusal] = {}  # Jobs whose pod create was forbidden, backing off

    # --- releases --------------------------------------------------------------------------------

    def apply_release_isolated(self, release: Release, plans: Mapping[jobs.JobKey, tasks.JobPlan],
                               taken: dict[str, int]) -> bool:
        """:meth:`apply_release`; what one release raises fails its Job (or leaves its pod), not the pass."""
        try:
            return self.apply_release(release, plans, taken)
        except Exception as exc:
            parts = release.group_key.split("/")
            if len(parts) == 3:
                self.cache.jobs.break_job((parts[0], parts[1]), exc)
            else:
                self.metrics.bad_objects.inc("pod")
                log.exception("pod %s not released", release.group_key)
            return False

    def apply_release(self, release: Release, plans: Mapping[jobs.JobKey, tasks.JobPlan],
                      taken: dict[str, int]) -> bool:
        """Create the released tasks' pods, or remove a plain pod's gate; True when anything was released.

        A group placed on several nodes comes as several releases: ``taken`` says how many of its plan's
        releasable tasks the earlier ones used, so each release takes the next ones.
        """
        parts = release.group_key.split("/")
        if len(parts) == 3:
            key: jobs.JobKey = (parts[0], parts[1])
            plan, job = plans.get(key), self.cache.jobs.job(key)
            group = next((g for g in plan.groups if g.name == parts[2]), None) if plan is not None else None
            if job is None or group is None:
                return False
            first = taken.get(release.group_key, 0)
            taken[release.group_key] = first + release.count
            done = 0
            for task in group.releasable[first: first + release.count]:
                done += self.create_task(key, job, task, release.pod_class, release.node_hint)
            if done:
                log.info("released %d task(s) of %s as %s (placed on %s)", done, release.group_key,
                         release.pod_class.value, release.node_hint)
            return done > 0
        if parts[1].startswith(labels.POD_GROUP_KEY):
            return self._release_pod_group(release, parts[0], parts[1][len(labels.POD_GROUP_KEY):], taken)
        pod = next((p for p in self.cache.gated.pods() if "/".join(pod_key(p)) == release.group_key), None)
        if pod is None:
            return False
        if self.remove_gate(pod, release.pod_class, release.node_hint):
            log.info("released pod %s (%s, placed on %s)", release.group_key, release.pod_class.value,
                     release.node_hint)
            return True
        return False

    def _release_pod_group(self, release: Release, namespace: str, name: str, taken: dict[str, int]) -> bool:
        """Remove the gate of the next ``release.count`` gated members of a pod group (by name): the dispatcher
        releases the group whole, in as many releases as the nodes it placed it on."""
        members = sorted((p for p in self.cache.gated.pods() if pod_key(p)[0] == namespace
                          and ((p.get("metadata") or {}).get("labels") or {}).get(labels.LABEL_POD_GROUP) == name),
                         key=pod_key)
        first = taken.get(release.group_key, 0)
        taken[release.group_key] = first + release.count
        done = sum(self.remove_gate(p, release.pod_class, release.node_hint)
                   for p in members[first: first + release.count])
        if done:
            log.info("released %d pod(s) of group %s (placed on %s)", done, release.group_key, release.node_hint)
        return done > 0

    def create_task(self, key: jobs.JobKey, job: Mapping[str, Any], task: tasks.TaskRef,
                    pod_class: labels.PodClass, node_hint: str | None = None) -> bool:
        """Create one task attempt's pod; True when created now.

        A 409 (the pod exists: made before a restart) is remembered like a release, so the task counts as
        active until the cache shows the pod, but it is not counted as a release of this operator.
        """
        pod = tasks.render_pod(job, task, pod_class)
        if node_hint and self.node_hint:
            pod["spec"] = tasks.prefer_node(pod["spec"], node_hint)
        if pod_class is labels.PodClass.OPPORTUNISTIC:
            try:
                pod = admission.convert_opportunistic(pod)
            except InvalidInput as exc:
                self.job_writer.fail(key, f"task group {task.group!r} cannot run opportunistically: {exc}")
                return False
        name = pod["metadata"]["name"]
        now = self.clock()
        if self.dry_run:
            log.info("dry run: would create %s/%s as %s", key[0], name, pod_class.value)
            return False
        created = True
        try:
            self.client.create(f"/api/v1/namespaces/{key[0]}/pods", pod)
        except api.ApiError as exc:
            if exc.status == 409:
                # Made before (by an operator before a restart, or a release the cache has not shown yet), or a pod of
                # a deleted Job of the same name that the garbage collector has not removed yet: the task is planned
                # again (the pod is not this Job's, jobs.owned_by) once the cache shows it, until the name is free.
                log.info("task pod %s/%s exists already: not created again", key[0], name)
                created = False
            elif exc.status in (400, 422):
                self.job_writer.fail(key, f"the API server refused the pod of task {name}: {exc.message}")
                return False
            elif exc.status == 403:
                self.refuse(key, job, exc.message)
                return False
            else:
                log.warning("task pod %s/%s not created (%s); the next pass decides again", key[0], name, exc)
                return False
        except OSError as exc:
            log.warning("task pod %s/%s not created (%s); the next pass decides again", key[0], name, exc)
            return False
        if self.refused.pop(key, None) is not None:
            self.cache.jobs.mark_dirty(key)  # its Held condition turns False at the next pass
        self.cache.released((key[0], name), Released(now, key), bind_pending=created)
        if created:
            self.metrics.dispatch.labels(pod_class.value).inc()
            self.metrics.observe_job_release(job, now)
        return created

    def remove_gate(self, pod: Mapping[str, Any], pod_class: labels.PodClass | None = None,
                    node_hint: str | None = None) -> bool:
        """Remove the gate ``stowage.io/admission`` (JSON patch on ``spec.schedulingGates``, guarded by a test).

        ``pod_class`` is given for a dispatcher release (counted, reserved until bound); None for the
        repair of a Job's task pod.
        """
        key = pod_key(pod)
        gates = list((pod.get("spec") or {}).get("schedulingGates") or [])
        rest = [g for g in gates if not (isinstance(g, Mapping) and g.get("name") == labels.GATE_ADMISSION)]
        patch = [{"op": "test", "path": "/spec/schedulingGates", "value": gates},
                 {"op": "replace", "path": "/spec/schedulingGates", "value": rest}]
        if node_hint and self.node_hint:  # a gated pod's preferred affinity may change (KEP-3838)
            affinity = tasks.prefer_node(pod.get("spec") or {}, node_hint)["affinity"]
            patch.insert(1, {"op": "add", "path": "/spec/affinity", "value": affinity})
        if self.dry_run:
            log.info("dry run: would release %s/%s", *key)
            return False
        now = self.clock()
        try:
            self.client.patch(f"/api/v1/namespaces/{key[0]}/pods/{key[1]}", patch, api.JSON_PATCH)
        except api.ApiError as exc:
            if exc.status not in (404, 422):  # gone, or its gates changed meanwhile: the next pass sees it fresh
                log.warning("pod %s/%s not released (%s); the next pass decides again", *key, exc)
            return False
        except OSError as exc:
            log.warning("pod %s/%s not released (%s); the next pass decides again", *key, exc)
            return False
        if pod_class is None:
            return True
        pod_group = ((pod.get("metadata") or {}).get("labels") or {}).get(labels.LABEL_POD_GROUP)
        self.cache.released(key, Released(now, None, self.group_of(pod), pod_group if isinstance(pod_group, str)
                                          else None), bind_pending=True)
        self.metrics.dispatch.labels(pod_class.value).inc()
        self.metrics.observe_pod_release(pod, now)
        return True

    def ungate_released_task_pods(self) -> None:
        """A Job's task pod carrying the admission gate (a webhook that did not recognise the operator): its
        pod exists only because the dispatcher released it, so the gate goes at once."""
        for pod in self.cache.gated.pods():
            if task_pod(pod) and not self.dry_run:
                log.warning("task pod %s/%s was gated at admission (is the pod webhook told the operator's user?); "
                            "removing the gate", *pod_key(pod))
                self.remove_gate(pod)

    # --- promotion -------------------------------------------------------------------------------

    def promote(self, pods: Sequence[RunningPod], now: float) -> int:
        """Promote the pods the decision chose, in order (``promotion.Promoter``); how many were promoted. A 422
        that shows the cluster cannot resize turns promotion off for the rest of the operator's life."""
        done = 0
        for pod in pods:
            if not self.promoter.enabled:
                break
            outcome = self.promoter.promote(pod.key, pod.uid, pod.node)
            if outcome is promotion.Outcome.PROMOTED:
                done += 1
                self.cache.promoting[pod.uid] = now
                self.metrics.promotions.inc()
        return done

    # --- forbidden creates -----------------------------------------------------------------------

    def held_for(self, key: jobs.JobKey, now: float) -> tuple[str, str] | None:
        """The Job's ``Held`` condition: a forbidden pod create while it backs off, else the dispatcher's hold."""
        refusal = self.refused.get(key)
        if refusal is not None:
            if self.cache.jobs.job(key) is None:
                del self.refused[key]
            else:
                wait = max(refusal.until - now, 0.0)
                return ("PodCreateForbidden", f"the API server refused to create its pods: {refusal.message}; next "
                        f"try in {wait:.0f}s (meanwhile the Jobs behind it in its queue go first)")
        return self.held(key)

    def refuse(self, key: jobs.JobKey, job: Mapping[str, Any], message: str) -> None:
        """A pod create of the Job was forbidden (403): back off (doubling), say why on the Job (condition and a
        Warning Event per refusal, so at most one per backoff), and let its queue's other work go first."""
        now = self.clock()
        old = self.refused.get(key)
        attempts = old.attempts + 1 if old is not None else 1
        base, cap = REFUSAL_BACKOFF_S
        wait = min(cap, base * 2 ** (attempts - 1))
        self.refused[key] = Refusal(now + wait, attempts, message)
        self.cache.jobs.mark_dirty(key)  # the condition is written at the next pass
        log.warning("job %s/%s: pod create forbidden (%s); next try in %.0fs", *key, message, wait)
        if not self.dry_run:
            post_event(self.client, job, "Warning", "PodCreateForbidden",
                       f"the API server refused to create a task pod: {message}; next try in {wait:.0f}s", now)

    def backing_off(self, now: float) -> set[jobs.JobKey]:
        """Jobs whose pod creates were forbidden and whose backoff has not run out: left out of the view."""
        return {k for k, r in self.refused.items() if r.until > now}
