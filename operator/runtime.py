"""The dispatch loop: informer caches → DispatchView → ``Dispatcher.decide`` → releases, on a thread.

What runs (one :class:`OperatorRuntime` per operator process)::

    informers (threads, stowage.kube.informer)         Kopf (asyncio, jobs.register / queues.register)
      nodes ─────────────┐                               Job events ──► JobBook
      bound pods ────────┼─► ClusterModel                Queue events ─► QueueBook
      task pods ─────────┼─► JobBook (label stowage.io/job)
      unbound pods ──────┴─► gated plain pods (gate stowage.io/admission)
    Prometheus ──────────► Utilization (stowage.prom)

    loop (every interval_s, and soon after any event: at most one pass per pass_delay_s):
      1. peering: act only while no other operator of the same peering outranks this one (cli.Peering)
      2. Job plans (tasks.plan_job) → status (with the last decision's estimates), Events, deletions
         (JobBook.apply); finished tasks → classifier, duration priors, recurring history; stowage_estimate_ratio
      3. view = DispatchView(nodes, running pods, queues, pending groups of Jobs, gated plain pods, utilization)
      4. releases = Dispatcher.decide(view) (and Dispatcher.promoted: running opportunistic pods to promote)
      5. apply: promote those pods in place first (promotion.Promoter; UBIS Alg. 1 promotes before it allocates),
         then create the Job pods (converted when opportunistic) / remove the gate of plain pods;
         every release is remembered until the cache shows it, so nothing is released twice
      6. every status_interval_s: Queue status + queue gauges; every state_interval_s: the classifier's
         state into the ConfigMap ``stowage-operator-state`` (loaded again at start)

Restart safety comes from the names (``tasks.pod_name``): a released task's pod has one name, so a
second create answers 409 and the pods an earlier operator made are found again through the informer
(owner reference + labels) before the first pass.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stowage.operator import admission, crd, holds, jobs, promotion, queues, tasks
from stowage.operator.dispatcher import (
    Dispatcher,
    DispatchView,
    NodeRecord,
    PendingGroup,
    QueueRecord,
    Release,
    RunningPod,
)
from stowage.operator.metrics import PASS_STAGES, OperatorMetrics, QueueNumbers

from stowage import labels
from stowage.config import StowageSettings
from stowage.errors import InvalidInput
from stowage.kube import api
from stowage.kube.cluster import ClusterModel
from stowage.kube.informer import BOUND_PODS, Informer
from stowage.kube.records import object_name, parse_timestamp
from stowage.model import QueueOpportunistic
from stowage.policy import dispatch, holding, room
from stowage.prom import PrometheusReader, Utilization
from stowage.resources import CPU, MEMORY, ResourceVector, pod_demand

__all__ = ["LEARNED_KEY", "STATE_CONFIGMAP", "STATE_KEY", "GatedPods", "OperatorRuntime", "operator_namespace"]

log = logging.getLogger(__name__)

STATE_CONFIGMAP = "stowage-operator-state"
STATE_KEY = "classifier.json"
LEARNED_KEY = "learned.json"
_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
#: A release not seen in the cache after this long is forgotten (the create answered, but the pod never
#: showed: deleted at once, or a watch that missed it); the next pass decides about the task again.
IN_FLIGHT_TTL_S = 120.0
#: Readiness fails when no pass has completed for this long (a pass takes well under a second at 1,000 nodes; the
#: loop runs one at least every ``interval_s``): the dispatcher is stuck or every pass fails.
PASS_STALE_AFTER_S = 60.0
#: A Job whose pod create the API server forbids (403: ResourceQuota, PodSecurity, LimitRange, RBAC) waits this
#: long before its next try, doubling per refusal up to the cap; meanwhile it leaves its queue's order to others.
REFUSAL_BACKOFF_S = (10.0, 300.0)
#: Whether pods can be resized is asked once at start; an unsettled answer (the API server unreachable, a 5xx) is
#: asked again after this long.
DETECT_AGAIN_S = 60.0


def operator_namespace() -> str:
    """Where the operator keeps its state: ``$POD_NAMESPACE``, the service account's namespace, else ``default``."""
    env = os.environ.get("POD_NAMESPACE") or os.environ.get("STOWAGE_NAMESPACE")
    if env:
        return env
    try:
        with open(_NAMESPACE_FILE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


# --- gated plain pods ----------------------------------------------------------------------------


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == labels.GATE_ADMISSION for g in gates)


def _decided_on(pod: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """What of a gated pod the dispatcher reads (``_plain_group``): labels, annotations, spec."""
    meta = pod.get("metadata") or {}
    return meta.get("labels"), meta.get("annotations"), pod.get("spec")


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class GatedPods:
    """Unbound pods carrying the gate ``stowage.io/admission``, by (namespace, name). Thread-safe."""

    def __init__(self, watched: Callable[[str], bool]) -> None:
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._watched = watched
        self.on_change: Callable[[], None] = lambda: None

    def replace(self, items: Iterable[Mapping[str, Any]]) -> None:
        fresh = {}
        for p in items:
            try:  # a pod of another shape than a Pod's is not gated by us: left out, never the whole list
                if _gated(p) and self._watched(_key(p)[0]):
                    fresh[_key(p)] = dict(p)
            except Exception as exc:
                log.warning("unbound pod %s left out: %s: %s", object_name(p), type(exc).__name__, exc)
        with self._lock:
            self._pods = fresh
        self.on_change()

    def apply_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        key = _key(pod)
        with self._lock:
            before = self._pods.get(key)
            if kind == "DELETED" or not _gated(pod) or (pod.get("spec") or {}).get("nodeName"):
                changed = self._pods.pop(key, None) is not None
            elif self._watched(key[0]):
                self._pods[key] = dict(pod)
                changed = before is None or _decided_on(before) != _decided_on(pod)
            else:
                changed = False
        if changed:  # a status-only change (our own stowage.io/Held condition) changes no decision: no pass
            self.on_change()

    def pods(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._pods.values())


# --- the runtime ---------------------------------------------------------------------------------


@dataclass
class _Refusal:
    """A Job whose last pod create the API server forbade: retried at ``until`` (clock seconds)."""

    until: float
    attempts: int
    message: str


@dataclass
class _Release:
    at: float
    job: jobs.JobKey | None  # None: a plain pod's gate was removed
    group: PendingGroup | None = None  # a plain pod's group, kept until it is bound (its demand stays reserved)


class OperatorRuntime:
    """Caches, the dispatch loop and its writes. ``start()`` after Kopf has its registry; ``stop()`` on exit."""

    def __init__(
        self,
        settings: StowageSettings,
        client: api.KubeClient,
        *,
        dispatcher: Dispatcher,
        prometheus_url: str | None = None,
        namespaces: Sequence[str] | None = None,
        metrics: OperatorMetrics | None = None,
        acting: Callable[[], bool] | None = None,
        state_namespace: str | None = None,
        dry_run: bool = False,
        node_hint: bool = False,
        interval_s: float = 1.0,
        pass_delay_s: float = dispatch.PASS_DELAY_S,
        status_interval_s: float = 5.0,
        state_interval_s: float = 30.0,
        pass_stale_after_s: float = PASS_STALE_AFTER_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.client = client
        self.dispatcher = dispatcher
        self.metrics = metrics or OperatorMetrics()
        self.acting = acting  # None: standalone; else whether peering lets this operator act now (cli.Peering)
        self.namespaces = list(namespaces or [])
        self.state_namespace = state_namespace or operator_namespace()
        self.dry_run = dry_run
        self.node_hint = node_hint  # released pods prefer the node the dispatcher placed them on (off: it spreads)
        self.interval_s, self.pass_delay_s = interval_s, pass_delay_s
        self.status_interval_s, self.state_interval_s = status_interval_s, state_interval_s
        self.clock = clock
        self.cluster = ClusterModel(recent_window_s=settings.harvest.ramp_up_s, clock=clock)
        self.jobs = jobs.JobBook(client, self.metrics, clock=clock, namespaces=self.namespaces or None)
        self.queues = queues.QueueBook(client)
        self.gated = GatedPods(self.jobs.watched)
        for book in (self.jobs, self.queues, self.gated):
            book.on_change = self.poke
        reader = PrometheusReader(prometheus_url, usage_window_s=settings.harvest.usage_window_s) \
            if prometheus_url else None
        self.utilization = Utilization(reader)
        self._lock = threading.Lock()
        self._released: dict[tuple[str, str], _Release] = {}  # (namespace, pod) → when and for whom
        self._bind_pending: dict[tuple[str, str], float] = {}  # released pods waiting for PodScheduled
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._informers: list[Informer] = []
        self._last_pass = -math.inf  # time.monotonic() of the last pass's start (the throttle's reference)
        self._last_status = -1e18
        self._last_state = -1e18
        self._saved_state: str | None = None
        self.passes = 0
        self.last_error: str | None = None
        self.last_numbers: list[QueueNumbers] = []
        self._told: set[str] = set()  # uids of pods told they cannot be read (a Warning Event, once)
        self.pod_holds = holds.PodHolds(client, clock=clock)
        self._job_notes = holds.HoldNotes()
        self._job_held: dict[jobs.JobKey, tuple[str, str]] = {}  # the last pass's Held condition per Job
        self._refused: dict[jobs.JobKey, _Refusal] = {}  # Jobs whose pod create was forbidden, backing off
        self.pass_stale_after_s = pass_stale_after_s
        self._completed_at: float | None = None  # time.monotonic() when the last pass completed
        self._stage = PASS_STAGES[0]  # where the running pass is (what a failure is counted as)
        self._acting_now = acting is None  # whether the last pass found this replica acting
        self._acted = False  # whether this replica ever acted: only then is its learned state worth saving
        self.promoter = promotion.Promoter(client, dry_run=dry_run, clock=clock,
                                           on_change=lambda on: self.metrics.promotion_enabled.set(int(on)))
        self._promoting: dict[str, float] = {}  # uid → when promoted, until the cache shows it regular
        self._detected_at = -math.inf  # time.monotonic() of the last question whether pods can be resized
        self.metrics.last_pass_age.set_function(self.last_pass_age)
        self.metrics.bad_objects.model = lambda: self.cluster.bad_objects_total

    # --- lifecycle -------------------------------------------------------------------------------

    def _pod_paths(self) -> list[str]:
        return [f"/api/v1/namespaces/{ns}/pods" for ns in self.namespaces] or [api.PODS]

    def informers(self) -> list[Informer]:
        """The informers the runtime needs (unstarted): nodes, bound pods, task pods, unbound pods."""
        out = [
            Informer(self.client, api.NODES, name="nodes", on_replace=self.cluster.replace_nodes,
                     on_event=self.cluster.apply_node_event),
            # Every bound pod, whatever its namespace: the nodes' free capacity depends on all of them.
            Informer(self.client, api.PODS, name="bound-pods", on_replace=self._replace_bound,
                     on_event=self._bound_event, params={"fieldSelector": BOUND_PODS}),
        ]
        for path in self._pod_paths():
            out.append(Informer(self.client, path, name=f"task-pods{path}", on_replace=self.jobs.replace_pods,
                                on_event=self.jobs.apply_pod_event, params={"labelSelector": labels.LABEL_JOB}))
            out.append(Informer(self.client, path, name=f"unbound-pods{path}", on_replace=self.gated.replace,
                                on_event=self.gated.apply_event, params={"fieldSelector": "spec.nodeName="}))
        return out

    def start(self) -> OperatorRuntime:
        self.load_state()
        self.detect_promotion()
        self._informers = [i.start() for i in self.informers()]
        if self.utilization._reader is not None:
            self.utilization.start()
        if not self.dry_run:
            self.pod_holds.start()
        self._thread = threading.Thread(target=self._run, name="dispatch-loop", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the loop and the informers, then save the classifier's state; a second call does nothing."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        for informer in self._informers:
            informer.stop()
        self.utilization.stop()
        self.pod_holds.stop()
        # Only the replica that acts last saves: a standby's state is older than what the leader wrote.
        if not self.dry_run and self._acted and self._acting_now:
            self.save_state(force=True)

    def detect_promotion(self) -> bool:
        """Whether the cluster can resize pods in place, asked once (``promotion.detect``; said in the log and in
        ``stowage_promotion_enabled``): the dispatcher promotes only then."""
        self._detected_at = time.monotonic()
        try:
            self.promoter.detect()
        except Exception as exc:  # whatever the client does, the operator runs on, without promotion
            self.promoter.turn_off(f"{type(exc).__name__}: {exc}")
        self._sync_promotion()
        return self.promoter.enabled

    def _sync_promotion(self) -> None:
        skipped = self.promoter.skipped
        self.dispatcher.promote = (lambda p: p.uid not in skipped) if self.promoter.enabled else None

    def synced(self) -> bool:
        return bool(self._informers) and all(i.synced.is_set() for i in self._informers)

    def last_pass_age(self) -> float:
        """Seconds since the last pass completed (a standby's idle pass counts); +inf before the first."""
        return math.inf if self._completed_at is None else time.monotonic() - self._completed_at

    def readiness(self) -> tuple[bool, str]:
        """``/readyz``: every informer is healthy (synced, not failing to list or watch: ``Informer.unhealthy``) and a
        pass completed within ``pass_stale_after_s``; the text says what is wrong (and the last error) so ``kubectl
        describe pod`` shows it."""
        problems = [f"informer {i.name}: {why}" for i in self._informers if (why := i.unhealthy()) is not None]
        if not self._informers:
            problems.append("informers not started")
        age = self.last_pass_age()
        if not problems and age > self.pass_stale_after_s:
            what = "no pass completed yet" if math.isinf(age) else f"last complete pass {age:.0f}s ago"
            problems.append(f"{what} (limit {self.pass_stale_after_s:.0f}s)"
                            + (f"; last error: {self.last_error}" if self.last_error else ""))
        if problems:
            return False, "not ready: " + "; ".join(problems) + "\n"
        return True, f"ready: last complete pass {age:.1f}s ago\n"

    def poke(self) -> None:
        """Something changed: run a pass soon (throttled: a burst of events shares one pass)."""
        self._wake.set()

    # --- bound pods: the cluster model + release-to-bind latency ---------------------------------

    def _replace_bound(self, items: list[dict[str, Any]]) -> None:
        self.cluster.replace_pods(items)
        for pod in items:
            self._seen_bound(pod)
        self.poke()

    def _bound_event(self, kind: str, pod: dict[str, Any]) -> None:
        self.cluster.apply_pod_event(kind, pod)
        if kind != "DELETED":
            self._seen_bound(pod)
        self.poke()

    def _seen_bound(self, pod: Mapping[str, Any]) -> None:
        key = _key(pod)
        with self._lock:
            released = self._bind_pending.pop(key, None)
            r = self._released.get(key)
            if r is not None and r.job is None:
                del self._released[key]  # a plain pod: bound, so the view has it among the running pods
        if released is not None:
            self.metrics.release_to_bind.observe(max(self.clock() - released, 0.0))

    # --- the loop --------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            if self._stop.is_set():
                break
            # Throttle: at most one pass per pass_delay_s. After a quiet spell the pass runs at once; the events
            # of a burst within pass_delay_s of the last pass land meanwhile and share the next one.
            self._stop.wait(max(0.0, self._last_pass + self.pass_delay_s - time.monotonic()))
            self._wake.clear()
            self._last_pass = time.monotonic()
            self.run_pass()

    def run_pass(self) -> bool:
        """:meth:`pass_once`, surviving anything: a failure is counted by the stage it stopped at
        (``stowage_pass_errors_total{stage}``) and kept in ``last_error``; True when the pass completed."""
        try:
            self.pass_once()
        except Exception as exc:  # the loop must survive anything; the next pass starts from the caches
            self.last_error = f"{self._stage}: {type(exc).__name__}: {exc}"
            self.metrics.pass_errors.labels(self._stage).inc()
            log.exception("dispatch pass failed at %s; the next one starts again from the caches", self._stage)
            return False
        self.last_error = None
        return True

    def pass_once(self) -> list[Any]:
        """One pass (see the module docstring); returns the releases applied."""
        self._stage = "plan"
        if not self.synced():
            return []
        acting = self.acting is None or self.acting()
        if acting and not self._acting_now:
            self._resume()
        self._acting_now = acting
        if not acting:
            self._completed_at = time.monotonic()  # a standby has nothing to do: its pass is complete
            return []
        self._acted = True
        now = self.clock()
        self._expire_releases(now)
        mean = self._mean_capacity()
        plans = self.jobs.plans(self._in_flight_for, mean, self._blocked_for())
        self._stage = "apply"
        held = self.job_estimates()
        for key, plan in plans.items():
            try:  # one Job's failure fails that Job (at the next plan), never the pass
                if not self.dry_run:
                    self.jobs.apply(key, plan, held.get(key), self._held_for(key, now))
                self.learn(key, plan, mean)
            except Exception as exc:
                self.jobs.break_job(key, exc)
        self._ungate_released_task_pods()
        self._stage = "view"
        self._tell_bad_bound_pods(now)
        view = self.build_view(plans, now)
        if not self.promoter.support.settled and time.monotonic() - self._detected_at >= DETECT_AGAIN_S:
            self.detect_promotion()  # the API server did not answer at start: ask again
        self._stage = "decide"
        releases = self.dispatcher.decide(view)
        self._stage = "release"
        self._promote(self.dispatcher.promoted, now)
        taken: dict[str, int] = {}  # group key → tasks of its plan used by this pass's earlier releases
        applied = [r for r in releases if self._apply_release_isolated(r, plans, taken)]
        self._stage = "publish"
        self._publish_holds(view, releases, now)
        if now - self._last_status >= self.status_interval_s:
            self._last_status = now
            self._publish_queues(view, plans)
        self._stage = "state"
        if now - self._last_state >= self.state_interval_s:
            self._last_state = now
            if not self.dry_run:
                self.save_state()
        self.passes += 1
        self._completed_at = time.monotonic()
        return applied

    def _resume(self) -> None:
        """This replica acts again after standing by (Kopf paused: no events came). What the leader learned meanwhile
        is in the ConfigMap, and Jobs and Queues deleted meanwhile never reached the books: read both again."""
        self.load_state()
        before_jobs, before_queues = self.jobs.job_uids(), self.queues.names()
        try:
            listed_jobs, _ = self.client.list(crd.JOB.path())
            listed_queues, _ = self.client.list(crd.QUEUE.path())
        except (api.ApiError, OSError) as exc:
            log.warning("acting again, but Jobs and Queues could not be listed (%s): deletions made while this "
                        "operator stood by show at the next resume or restart", exc)
            return
        self.jobs.forget_missing(before_jobs, listed_jobs)
        self.queues.forget_missing(before_queues, listed_queues)

    def _held_for(self, key: jobs.JobKey, now: float) -> tuple[str, str] | None:
        """The Job's ``Held`` condition: a forbidden pod create while it backs off, else the dispatcher's hold."""
        refusal = self._refused.get(key)
        if refusal is not None:
            if self.jobs.job(key) is None:
                del self._refused[key]
            else:
                wait = max(refusal.until - now, 0.0)
                return ("PodCreateForbidden", f"the API server refused to create its pods: {refusal.message}; next "
                        f"try in {wait:.0f}s (meanwhile the Jobs behind it in its queue go first)")
        return self._job_held.get(key)

    def _refuse(self, key: jobs.JobKey, job: Mapping[str, Any], message: str) -> None:
        """A pod create of the Job was forbidden (403): back off (doubling), say why on the Job (condition and a
        Warning Event per refusal, so at most one per backoff), and let its queue's other work go first."""
        now = self.clock()
        old = self._refused.get(key)
        attempts = old.attempts + 1 if old is not None else 1
        base, cap = REFUSAL_BACKOFF_S
        wait = min(cap, base * 2 ** (attempts - 1))
        self._refused[key] = _Refusal(now + wait, attempts, message)
        self.jobs.mark_dirty(key)  # the condition is written at the next pass
        log.warning("job %s/%s: pod create forbidden (%s); next try in %.0fs", *key, message, wait)
        if not self.dry_run:
            jobs.post_event(self.client, job, "Warning", "PodCreateForbidden",
                            f"the API server refused to create a task pod: {message}; next try in {wait:.0f}s", now)

    def _tell_bad_bound_pods(self, now: float) -> None:
        """Each bound pod the cluster model reads only in part (its Stowage labels or annotations do not parse: it
        counts as regular at its requests) or leaves out is told why (:meth:`_tell`). Pods told before that are
        neither bad in the model nor gated any more are forgotten: the set stays as small as what is wrong now."""
        bad = self.cluster.bad_pods()
        if self._told:
            self._told &= {key for key, _, _ in bad} | {str((p.get("metadata") or {}).get("uid"))
                                                        for p in self.gated.pods()}
        for key, name, problem in bad:
            if "/" in name:
                namespace, pod = name.split("/", 1)
                meta = {"namespace": namespace, "name": pod, **({} if "/" in key else {"uid": key})}
                self._tell(key, meta, f"Stowage cannot read all of this pod: {problem}", now)

    def _tell(self, uid: str, meta: Mapping[str, Any], message: str, now: float) -> bool:
        """A Warning Event ``InvalidStowageLabels`` on a pod Stowage cannot read, once per pod; True when new.

        Pods told are forgotten once neither the model nor the gate holds them (:meth:`_tell_bad_bound_pods`)."""
        if uid in self._told:
            return False
        self._told.add(uid)
        if not self.dry_run:
            jobs.post_event(self.client, {"apiVersion": "v1", "kind": "Pod", "metadata": meta}, "Warning",
                            "InvalidStowageLabels", message, now)
        return True

    def _backing_off(self, now: float) -> set[jobs.JobKey]:
        """Jobs whose pod creates were forbidden and whose backoff has not run out: left out of the view."""
        return {k for k, r in self._refused.items() if r.until > now}

    # --- estimates: learned from finished tasks, shown in the Jobs' status ---------------------------

    def learn(self, key: jobs.JobKey, plan: tasks.JobPlan, mean_capacity: Mapping[str, float]) -> int:
        """Teach the dispatcher the Job's tasks that succeeded since (classifier, queue prior, recurring history)
        and observe ``stowage_estimate_ratio{source}``: the estimate its last decision held for the task's group
        ÷ the task's run time. Returns how many tasks it learned from."""
        lessons = self.jobs.lessons(key, plan, mean_capacity)
        for lesson in lessons:
            held = self.dispatcher.observe_finished(
                lesson.features, (lesson.duration_s,), queue=lesson.queue, group_key=lesson.group_key,
                recurring_key=lesson.recurring_key, group=lesson.group)
            if held is not None and lesson.duration_s > 0 and math.isfinite(held[0]):
                self.metrics.estimate_ratio.labels(held[1]).observe(held[0] / lesson.duration_s)
        return len(lessons)

    def job_estimates(self) -> dict[jobs.JobKey, dict[str, tuple[float, str]]]:
        """The dispatcher's last estimates (``Dispatcher.estimates``) by Job: group name → (task seconds, source);
        plain pods' (``namespace/pod``) are left out."""
        out: dict[jobs.JobKey, dict[str, tuple[float, str]]] = {}
        for group_key, (seconds, source) in self.dispatcher.estimates().items():
            parts = str(group_key).split("/")
            if len(parts) == 3:
                out.setdefault((parts[0], parts[1]), {})[parts[2]] = (float(seconds), str(source))
        return out

    # --- in flight -------------------------------------------------------------------------------

    def _in_flight_for(self, job: jobs.JobKey) -> set[str]:
        with self._lock:
            names = {k[1] for k, r in self._released.items() if r.job == job}
        if not names:
            return set()
        seen = self.jobs.pod_names(job)
        with self._lock:
            for name in names & seen:
                self._released.pop((job[0], name), None)
        return names - seen

    def _expire_releases(self, now: float) -> None:
        with self._lock:
            for key, r in list(self._released.items()):
                if now - r.at > IN_FLIGHT_TTL_S:
                    del self._released[key]
            for key, at in list(self._bind_pending.items()):
                if now - at > 3600:
                    del self._bind_pending[key]

    # --- capacity --------------------------------------------------------------------------------

    def _mean_capacity(self) -> dict[str, float]:
        resources, total = self.cluster.totals()
        n = max(len(self.cluster.node_names()), 1)
        return {r: float(total[i]) / n for i, r in enumerate(resources) if total[i] > 0}

    def _blocked_for(self) -> Callable[[Mapping[str, Any]], dict[str, tuple[str, str]]]:
        """This pass's rule for a Job's groups that cannot be dispatched (its Queue gone, or fits no node)."""
        queues = set(self.queues.specs()) or None  # none known yet (Kopf not synced): judge no Queue missing
        records = [self.cluster.node(n) for n in self.cluster.node_names()]
        shapes = list({r.allocatable for r in records if r is not None})  # 200 equal nodes: one shape
        return lambda job: self.jobs.blocked_groups(job, queues, shapes)

    # --- the view --------------------------------------------------------------------------------

    def build_view(self, plans: Mapping[jobs.JobKey, tasks.JobPlan], now: float | None = None) -> DispatchView:
        """This pass's :class:`DispatchView`: nodes (+ fresh utilization), bound pods, queues, pending groups
        (running tasks' elapsed time at ``now``, the runtime's clock if None)."""
        now = self.clock() if now is None else now
        waiting = self._backing_off(now)
        fresh = {k: p for k, p in plans.items() if k not in waiting} if waiting else plans
        return DispatchView(nodes=self._nodes(), running=self._running(), queues=self._queue_records(),
                            groups=[*self.jobs.pending_groups(fresh, now), *self._plain_groups()])

    def _nodes(self) -> list[NodeRecord]:
        names = self.cluster.node_names()
        snapshot = self.utilization.current
        samples = snapshot.lookup(names, snapshot.resources, self.utilization.clock())
        fresh = room.fresh(samples.present, samples.age_s, self.settings.harvest.utilization_stale_after_s)
        out = []
        for i, name in enumerate(names):
            record = self.cluster.node(name)
            if record is None:
                continue
            usage = blocked = None
            age = float(samples.age_s[i]) if samples.present[i] else math.inf
            if fresh[i]:
                values = dict(zip(snapshot.resources, samples.usage[i].tolist(), strict=True))
                # Unknown usage of cpu or memory is not zero usage: such a node harvests nothing.
                if all(r in values and values[r] == values[r] for r in (CPU, MEMORY)):
                    usage = ResourceVector({r: v for r, v in values.items() if v == v})
                    blocked = ResourceVector(dict(zip(snapshot.resources, samples.blocked[i].tolist(), strict=True)))
            out.append(NodeRecord(name=name, allocatable=record.allocatable, harvest=record.harvest_enabled,
                                  usage=usage, blocked=blocked, sample_age_s=age))
        return out

    def _running(self) -> list[RunningPod]:
        """The bound pods; one promoted by an earlier pass counts as regular until the cache shows it so."""
        promoting = self._promoting
        if promoting:
            now = self.clock()
            shown = {p.uid for p in self.cluster.pods() if p.uid in promoting and not p.opportunistic}
            for uid in [u for u, at in promoting.items() if u in shown or now - at > IN_FLIGHT_TTL_S]:
                del promoting[uid]
        return [RunningPod(node=p.node, demand=p.demand, queue=p.queue,
                           opportunistic=p.opportunistic and p.uid not in promoting, bound_at_s=p.bound_at_s,
                           started_at_s=p.start_time_s, key=f"{p.namespace}/{p.name}", uid=p.uid,
                           requests=p.requests if p.opportunistic else None)
                for p in self.cluster.pods()]

    # --- promotion -------------------------------------------------------------------------------

    def _promote(self, pods: Sequence[RunningPod], now: float) -> int:
        """Promote the pods the decision chose, in order (``promotion.Promoter``); how many were promoted. A 422
        that shows the cluster cannot resize turns promotion off for the rest of the operator's life."""
        done = 0
        for pod in pods:
            if not self.promoter.enabled:
                break
            outcome = self.promoter.promote(pod.key, pod.uid, pod.node)
            if outcome is promotion.Outcome.PROMOTED:
                done += 1
                self._promoting[pod.uid] = now
                self.metrics.promotions.inc()
        if not self.promoter.enabled:
            self._sync_promotion()
        return done

    def _queue_records(self) -> list[QueueRecord]:
        return [QueueRecord(name=q.name, weight=q.weight, opportunistic=q.opportunistic is QueueOpportunistic.ALLOW,
                            job_order=q.job_order, quota=q.quota_amounts() or None)
                for q in self.queues.specs().values()]

    def _plain_group(self, pod: Mapping[str, Any]) -> PendingGroup | None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        try:
            intent = labels.pod_intent(pod)
            demand = (intent.demand if intent.is_opportunistic and intent.demand is not None else pod_demand(pod))
        except Exception as exc:  # whatever one pod holds keeps that pod gated, never the pass
            what = str(exc) if isinstance(exc, InvalidInput) else f"{type(exc).__name__}: {exc}"
            message = f"Stowage cannot read this pod, so it stays gated: {what}; fix it and create the pod again"
            if self._tell(str(meta.get("uid")), meta, message, self.clock()):
                self.metrics.bad_objects.inc("pod")
                log.warning("pod %s stays gated: %s", key, what)
            return None
        arrival = parse_timestamp(meta.get("creationTimestamp"))
        return PendingGroup(
            key=key, queue=intent.queue or labels.DEFAULT_QUEUE, demand=demand + intent.bandwidth, releasable=1,
            namespace=str(meta.get("namespace")), job=None, group=str(meta.get("name")),
            intent=labels.Opportunistic.TRUE if intent.is_opportunistic else labels.Opportunistic.FALSE,
            converted=intent.is_opportunistic,
            expected_duration_s=min(intent.expected_duration_s, crd.MAX_EXPECTED_DURATION_S)  # as a Job's (tasks)
            if intent.expected_duration_s is not None else math.nan,
            arrival_s=arrival if arrival is not None else math.nan, remaining_tasks=1)

    def _plain_groups(self) -> list[PendingGroup]:
        """Gated plain pods, one group each; pods released and not yet bound keep their demand reserved."""
        with self._lock:
            released = {k: r for k, r in self._released.items() if r.job is None and r.group is not None}
        out: dict[str, PendingGroup] = {}
        for pod in self.gated.pods():
            if _task_pod(pod):
                continue  # a Job's task: released when its pod was created (see _ungate_released_task_pods)
            group = self._plain_group(pod)
            if group is not None and _key(pod) not in released:
                out[group.key] = group
        for r in released.values():
            assert r.group is not None
            out[r.group.key] = dataclasses.replace(r.group, releasable=0, unbound=1)
        return list(out.values())

    def _ungate_released_task_pods(self) -> None:
        """A Job's task pod carrying the admission gate (a webhook that did not recognise the operator): its
        pod exists only because the dispatcher released it, so the gate goes at once."""
        for pod in self.gated.pods():
            if _task_pod(pod) and not self.dry_run:
                log.warning("task pod %s/%s was gated at admission (is the pod webhook told the operator's user?); "
                            "removing the gate", *_key(pod))
                self._remove_gate(pod)

    # --- why tasks wait --------------------------------------------------------------------------

    def _publish_holds(self, view: DispatchView, releases: Sequence[Release], now: float) -> None:
        """The last decision's holds (``Dispatcher.holds``) as ``stowage_held_pods``, the ``stowage.io/Held``
        condition of each held plain pod (written off the loop, ``holds.PodHolds``) and each Job's ``Held``
        condition (written with its status at the next pass, ``JobBook.apply``)."""
        released: dict[str, int] = {}
        for r in releases:
            released[r.group_key] = released.get(r.group_key, 0) + r.count
        decided = self.dispatcher.holds
        gated = {"/".join(_key(p)): p for p in self.gated.pods()} if decided else {}
        counts: dict[tuple[str, str], int] = {}
        pods: dict[holds.PodKey, tuple[holding.Hold, Mapping[str, Any]]] = {}
        by_job: dict[jobs.JobKey, list[tuple[str, int, holding.Hold]]] = {}
        for g in view.groups:
            hold = decided.get(g.key)
            n = g.releasable - released.get(g.key, 0)
            if hold is None or n <= 0:
                continue
            counts[(g.queue, hold.reason)] = counts.get((g.queue, hold.reason), 0) + n
            if g.job is None:
                pod = gated.get(g.key)
                if pod is not None:
                    pods[_key(pod)] = (hold, pod)
            else:
                ns, job, group = g.key.split("/", 2)
                by_job.setdefault((ns, job), []).append((group, n, hold))
        self.metrics.publish_holds(counts, [q.name for q in view.queues])
        self._job_held = {}
        for key, groups in by_job.items():
            summary = holds.job_held(groups)
            if summary is not None:
                self._job_held[key] = self._job_notes.settle(key, *summary, now)
        for key in self._job_notes.known():
            if key not in self._job_held:
                self._job_notes.forget(key)
        if not self.dry_run:
            self.pod_holds.set(pods)

    # --- queue numbers ---------------------------------------------------------------------------

    def _publish_queues(self, view: DispatchView, plans: Mapping[jobs.JobKey, tasks.JobPlan]) -> None:
        numbers = self._queue_numbers(view, plans)
        self.last_numbers = numbers
        self.metrics.publish_queues(numbers)
        if not self.dry_run:
            self.queues.write_statuses(numbers)

    def _queue_numbers(self, view: DispatchView, plans: Mapping[jobs.JobKey, tasks.JobPlan]) -> list[QueueNumbers]:
        """Per queue: the dispatcher's shares, tasks not yet released, bound pods, Jobs by phase."""
        pending: dict[str, int] = {}
        for g in view.groups:
            if g.job is None:  # a gated plain pod
                pending[g.queue] = pending.get(g.queue, 0) + g.releasable
        for key, plan in plans.items():
            job = self.jobs.job(key)
            if job is not None and not plan.terminal:
                waiting = sum(g.unreleased for g in plan.groups)  # neither released nor running
                pending[tasks.job_queue(job)] = pending.get(tasks.job_queue(job), 0) + waiting
        running: dict[str, int] = {}
        for pod in view.running:
            if pod.queue is not None:
                running[pod.queue] = running.get(pod.queue, 0) + 1
        jobs_by_phase: dict[tuple[str, str], int] = {}
        for key in self.jobs.job_keys():
            job = self.jobs.job(key)
            if job is not None:
                phase = str((job.get("status") or {}).get("phase") or tasks.Phase.PENDING.value)
                q = tasks.job_queue(job)
                jobs_by_phase[(q, phase)] = jobs_by_phase.get((q, phase), 0) + 1
        return [QueueNumbers(
            name=share.name, dominant_share=share.dominant_share, fair_share=share.fair_share,
            allocated=share.allocated, pending_tasks=pending.get(share.name, 0),
            running_tasks=running.get(share.name, 0),
            pending_jobs=jobs_by_phase.get((share.name, tasks.Phase.PENDING.value), 0),
            running_jobs=jobs_by_phase.get((share.name, tasks.Phase.RUNNING.value), 0),
            quota_used=share.quota_used, usage=share.usage, usage_target=share.usage_target,
        ) for share in self.dispatcher.queue_shares(view)]

    # --- releases --------------------------------------------------------------------------------

    def _apply_release_isolated(self, release: Release, plans: Mapping[jobs.JobKey, tasks.JobPlan],
                                taken: dict[str, int]) -> bool:
        """:meth:`_apply_release`; what one release raises fails its Job (or leaves its pod), not the pass."""
        try:
            return self._apply_release(release, plans, taken)
        except Exception as exc:
            parts = release.group_key.split("/")
            if len(parts) == 3:
                self.jobs.break_job((parts[0], parts[1]), exc)
            else:
                self.metrics.bad_objects.inc("pod")
                log.exception("pod %s not released", release.group_key)
            return False

    def _apply_release(self, release: Release, plans: Mapping[jobs.JobKey, tasks.JobPlan],
                       taken: dict[str, int]) -> bool:
        """Create the released tasks' pods, or remove a plain pod's gate; True when anything was released.

        A group placed on several nodes comes as several releases: ``taken`` says how many of its plan's
        releasable tasks the earlier ones used, so each release takes the next ones.
        """
        parts = release.group_key.split("/")
        if len(parts) == 3:
            key: jobs.JobKey = (parts[0], parts[1])
            plan, job = plans.get(key), self.jobs.job(key)
            group = next((g for g in plan.groups if g.name == parts[2]), None) if plan is not None else None
            if job is None or group is None:
                return False
            first = taken.get(release.group_key, 0)
            taken[release.group_key] = first + release.count
            done = 0
            for task in group.releasable[first: first + release.count]:
                done += self._create_task(key, job, task, release.pod_class, release.node_hint)
            if done:
                log.info("released %d task(s) of %s as %s (placed on %s)", done, release.group_key,
                         release.pod_class.value, release.node_hint)
            return done > 0
        pod = next((p for p in self.gated.pods() if "/".join(_key(p)) == release.group_key), None)
        if pod is None:
            return False
        if self._remove_gate(pod, release.pod_class, release.node_hint):
            log.info("released pod %s (%s, placed on %s)", release.group_key, release.pod_class.value,
                     release.node_hint)
            return True
        return False

    def _create_task(self, key: jobs.JobKey, job: Mapping[str, Any], task: tasks.TaskRef,
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
                self.jobs.fail(key, f"task group {task.group!r} cannot run opportunistically: {exc}")
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
                self.jobs.fail(key, f"the API server refused the pod of task {name}: {exc.message}")
                return False
            elif exc.status == 403:
                self._refuse(key, job, exc.message)
                return False
            else:
                log.warning("task pod %s/%s not created (%s); the next pass decides again", key[0], name, exc)
                return False
        except OSError as exc:
            log.warning("task pod %s/%s not created (%s); the next pass decides again", key[0], name, exc)
            return False
        if self._refused.pop(key, None) is not None:
            self.jobs.mark_dirty(key)  # its Held condition turns False at the next pass
        with self._lock:
            self._released[(key[0], name)] = _Release(now, key)
            if created:
                self._bind_pending[(key[0], name)] = now
        if created:
            self.metrics.dispatch.labels(pod_class.value).inc()
            self.metrics.observe_job_release(job, now)
        return created

    def _remove_gate(self, pod: Mapping[str, Any], pod_class: labels.PodClass | None = None,
                     node_hint: str | None = None) -> bool:
        """Remove the gate ``stowage.io/admission`` (JSON patch on ``spec.schedulingGates``, guarded by a test).

        ``pod_class`` is given for a dispatcher release (counted, reserved until bound); None for the
        repair of a Job's task pod.
        """
        key = _key(pod)
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
        with self._lock:
            self._released[key] = _Release(now, None, self._plain_group(pod))
            self._bind_pending[key] = now
        self.metrics.dispatch.labels(pod_class.value).inc()
        self.metrics.observe_pod_release(pod, now)
        return True

    # --- the classifier and its state ------------------------------------------------------------

    def load_state(self) -> None:
        """The classifier's state (and which tasks it learned from) from the ConfigMap; absent: start empty."""
        path = f"/api/v1/namespaces/{self.state_namespace}/configmaps/{STATE_CONFIGMAP}"
        where = f"configmap {self.state_namespace}/{STATE_CONFIGMAP}"
        try:
            data = self.client.get(path).get("data") or {}
        except (api.ApiError, OSError) as exc:
            if not (isinstance(exc, api.ApiError) and exc.status == 404):
                log.warning("classifier state not loaded from %s (%s): starting empty", where, exc)
            return
        if not data.get(STATE_KEY):
            return
        try:
            self.dispatcher.load_state(json.loads(data[STATE_KEY]))
            self.jobs.learned.load(json.loads(data.get(LEARNED_KEY) or "{}"))
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("classifier state in %s is unreadable (%s): starting empty", where, exc)
            return
        self._saved_state = self._state_data()
        log.info("classifier state loaded from %s", where)

    def _state_data(self) -> str:
        return json.dumps({STATE_KEY: json.dumps(self.dispatcher.state_dict(), sort_keys=True, separators=(",", ":")),
                           LEARNED_KEY: json.dumps(self.jobs.learned.state(), separators=(",", ":"))})

    def save_state(self, force: bool = False) -> None:
        """Write the classifier's state and what it learned from into the ConfigMap (one write), when changed."""
        try:
            serialised = self._state_data()
        except (TypeError, ValueError) as exc:
            log.warning("classifier state not saved: %s", exc)
            return
        if serialised == self._saved_state and not force:
            return
        data = json.loads(serialised)
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": STATE_CONFIGMAP, "namespace": self.state_namespace,
                             "labels": {"app.kubernetes.io/managed-by": "stowage-operator"}},
                "data": data}
        collection = f"/api/v1/namespaces/{self.state_namespace}/configmaps"
        try:
            try:
                self.client.patch(f"{collection}/{STATE_CONFIGMAP}", {"data": data})
            except api.ApiError as exc:
                if exc.status != 404:
                    raise
                self.client.create(collection, body)
        except (api.ApiError, OSError) as exc:
            log.warning("classifier state not saved to %s/%s (%s); retrying later", self.state_namespace,
                        STATE_CONFIGMAP, exc)
            return
        self._saved_state = serialised


def _task_pod(pod: Mapping[str, Any]) -> bool:
    """A pod a Stowage Job controls (label and controller reference)."""
    return jobs.task_pod_job(pod) is not None
