"""The dispatch loop: cache → snapshot → ``Dispatcher.decide`` → writer, on a thread.

What runs (one :class:`OperatorRuntime` per operator process; each step's module in brackets)::

    informers (threads, stowage.kube.informer)         Kopf (asyncio, jobs.register / queues.register)
      nodes ─────────────┐                               Job events ──► JobBook
      bound pods ────────┼─► ClusterModel                Queue events ─► QueueBook
      task pods ─────────┼─► JobBook (label stowage.io/job)
      unbound pods ──────┴─► gated plain pods (gate stowage.io/admission)       [cache]
    Prometheus ──────────► Utilization (stowage.prom)

    loop (every interval_s, and soon after any event: at most one pass per pass_delay_s):
      1. peering: act only while no other operator of the same peering outranks this one (cli.Peering)
      2. Job plans (JobBook.plans → tasks.plan_job) → status (with the last decision's estimates), Events,
         deletions (a failed Job's pods, gangs taken back) [job_writer]; finished tasks → classifier, duration
         priors, recurring history; stowage_estimate_ratio [learning]; pod groups not whole or not up in time
         taken back [pod_groups]
      3. view = DispatchView(nodes, running pods, queues, pending groups of Jobs, gated plain pods, utilization)
         [snapshot]
      4. releases = Dispatcher.decide(view) (and Dispatcher.promoted: running opportunistic pods to promote)
      5. apply: promote those pods in place first (promotion.Promoter; UBIS Alg. 1 promotes before it allocates),
         then create the Job pods (converted when opportunistic) / remove the gate of plain pods [writer];
         every release is remembered until the cache shows it, so nothing is released twice
      6. holds every pass; every status_interval_s: Queue status + queue gauges [publisher]; every
         state_interval_s: the classifier's state into the ConfigMap ``stowage-operator-state`` (loaded again at
         start) [learning]; the view handed to the forecast, which predicts on its own thread at most every
         estimates.forecast_interval_s and writes each pending Job's status.forecast [forecasting]

Restart safety comes from the names (``tasks.pod_name``): a released task's pod has one name, so a
second create answers 409 and the pods an earlier operator made are found again through the informer
(owner reference + labels) before the first pass.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stowage.operator import crd, jobs, promotion, tasks
from stowage.operator.cache import IN_FLIGHT_TTL_S, Cache, GatedPods
from stowage.operator.dispatcher import Dispatcher, DispatchView, RunningPod
from stowage.operator.events import PodWarnings
from stowage.operator.forecasting import Forecaster
from stowage.operator.job_writer import JobWriter
from stowage.operator.learning import LEARNED_KEY, STATE_CONFIGMAP, STATE_KEY, Learning
from stowage.operator.metrics import PASS_STAGES, OperatorMetrics
from stowage.operator.pod_groups import PodGroups
from stowage.operator.publisher import Publisher
from stowage.operator.snapshot import Snapshots
from stowage.operator.writer import REFUSAL_BACKOFF_S, Writer

from stowage.config import StowageSettings
from stowage.kube import api
from stowage.kube.informer import Informer
from stowage.policy import dispatch
from stowage.prom import PrometheusReader, Utilization

# The constants and GatedPods stay importable from here: tests and the CLI name them through the runtime.
__all__ = ["IN_FLIGHT_TTL_S", "LEARNED_KEY", "PASS_STALE_AFTER_S", "REFUSAL_BACKOFF_S", "STATE_CONFIGMAP",
           "STATE_KEY", "GatedPods", "OperatorRuntime", "operator_namespace"]

log = logging.getLogger(__name__)

_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
#: Readiness fails when no pass has completed for this long (a pass takes well under a second at 1,000 nodes; the
#: loop runs one at least every ``interval_s``): the dispatcher is stuck or every pass fails.
PASS_STALE_AFTER_S = 60.0
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


class OperatorRuntime:
    """The loop and its lifecycle, over the cache, the snapshot, the dispatcher and the writers (module docstring).
    ``start()`` after Kopf has its registry; ``stop()`` on exit."""

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
        self.state_namespace = state_namespace or operator_namespace()
        self.dry_run = dry_run
        self.interval_s, self.pass_delay_s = interval_s, pass_delay_s
        self.status_interval_s, self.state_interval_s = status_interval_s, state_interval_s
        self.pass_stale_after_s = pass_stale_after_s
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.cache = Cache(settings, client, self.metrics, namespaces=list(namespaces or []), clock=clock,
                           poke=self.poke)
        self.cluster, self.jobs, self.queues, self.gated = (self.cache.cluster, self.cache.jobs, self.cache.queues,
                                                            self.cache.gated)
        reader = PrometheusReader(prometheus_url, usage_window_s=settings.harvest.usage_window_s,
                                  bandwidth_window_s=settings.estimates.bandwidth_window_s) if prometheus_url else None
        self.utilization = Utilization(reader)
        self.warnings = PodWarnings(client, dry_run=dry_run)
        self.snapshots = Snapshots(settings, self.cache, self.utilization, self.metrics, tell=self.warnings.tell,
                                   clock=clock)
        self.learning = Learning(client, dispatcher, self.jobs, self.metrics, state_namespace=self.state_namespace,
                                 use_peak=lambda key: self.utilization.current.use_peak(key))
        self.forecaster = Forecaster(settings, client, self.jobs, self.metrics, dry_run=dry_run, clock=clock)
        self.publisher = Publisher(client, self.cache, dispatcher, self.metrics, dry_run=dry_run, clock=clock,
                                   pending_pods=self.forecaster.pending_pods)
        self.job_writer = JobWriter(client, self.jobs, self.metrics, clock=clock)
        self.promoter = promotion.Promoter(client, dry_run=dry_run, clock=clock,
                                           on_change=lambda on: self.metrics.promotion_enabled.set(int(on)))
        self.writer = Writer(client, self.cache, self.job_writer, self.promoter, self.metrics,
                             group_of=self.snapshots.plain_group, held=self.publisher.job_held, dry_run=dry_run,
                             node_hint=node_hint, clock=clock)
        self.pod_groups = PodGroups(client, self.cache, settings.packing.gang_ready_timeout_s, dry_run=dry_run)
        self._thread: threading.Thread | None = None
        self._informers: list[Informer] = []
        self._last_pass = -math.inf  # time.monotonic() of the last pass's start (the throttle's reference)
        self._last_status = -1e18
        self._last_state = -1e18
        self.passes = 0
        self.last_error: str | None = None
        self._completed_at: float | None = None  # time.monotonic() when the last pass completed
        self._stage = PASS_STAGES[0]  # where the running pass is (what a failure is counted as)
        self._acting_now = acting is None  # whether the last pass found this replica acting
        self._acted = False  # whether this replica ever acted: only then is its learned state worth saving
        self._detected_at = -math.inf  # time.monotonic() of the last question whether pods can be resized
        self.metrics.last_pass_age.set_function(self.last_pass_age)
        self.metrics.bad_objects.model = lambda: self.cluster.bad_objects_total

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> OperatorRuntime:
        self.learning.load_state()
        self.detect_promotion()
        self._informers = [i.start() for i in self.cache.informers()]
        if self.utilization._reader is not None:
            self.utilization.start()
        if not self.dry_run:
            self.publisher.pod_holds.start()
        self.forecaster.start()
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
        self.publisher.pod_holds.stop()
        self.forecaster.stop()
        # Only the replica that acts last saves: a standby's state is older than what the leader wrote.
        if not self.dry_run and self._acted and self._acting_now:
            self.learning.save_state(force=True)

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
        """One pass (the numbered steps of the module docstring); returns the releases applied."""
        self._stage = "plan"  # 1. peering
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
        self.cache.expire_releases(now)  # 2. plans → status, Events, deletions; lessons
        mean = self.cache.mean_capacity()
        plans = self.jobs.plans(self.cache.in_flight_for, mean, self.cache.blocked_for())
        self._stage = "apply"
        held = self.learning.job_estimates()
        for key, plan in plans.items():
            try:  # one Job's failure fails that Job (at the next plan), never the pass
                if not self.dry_run:
                    self.job_writer.apply(key, plan, held.get(key), self.writer.held_for(key, now))
                self.learning.learn(key, plan, mean)
            except Exception as exc:
                self.jobs.break_job(key, exc)
        self.writer.ungate_released_task_pods()
        self.pod_groups.take_back(now)  # a pod group not whole, or not up in time, holds no room
        self._stage = "view"  # 3. the snapshot
        self.warnings.tell_bad_bound_pods(self.cluster, self.gated.uids, now)
        view = self.build_view(plans, now)
        if not self.promoter.support.settled and time.monotonic() - self._detected_at >= DETECT_AGAIN_S:
            self.detect_promotion()  # the API server did not answer at start: ask again
        self._stage = "decide"  # 4. decide
        releases = self.dispatcher.decide(view)
        self._stage = "release"  # 5. apply: promotions first, then releases
        self._promote(self.dispatcher.promoted, now)
        taken: dict[str, int] = {}  # group key → tasks of its plan used by this pass's earlier releases
        applied = [r for r in releases if self.writer.apply_release_isolated(r, plans, taken)]
        self._stage = "publish"  # 6. holds, queue status, the learned state
        self.publisher.publish_holds(view, releases, now)
        priors = self.dispatcher.decider.priors
        means = {q.name: m for q in view.queues if (m := priors.learned_mean(q.name)) is not None}
        self.forecaster.offer(view, self.dispatcher.estimates(), dict(self.dispatcher.decider.usage), now, means)
        if now - self._last_status >= self.status_interval_s:
            self._last_status = now
            self.publisher.publish_queues(view, plans)
        self._stage = "state"
        if now - self._last_state >= self.state_interval_s:
            self._last_state = now
            if not self.dry_run:
                self.learning.save_state()
        self.passes += 1
        self._completed_at = time.monotonic()
        return applied

    def _resume(self) -> None:
        """This replica acts again after standing by (Kopf paused: no events came). What the leader learned meanwhile
        is in the ConfigMap, and Jobs and Queues deleted meanwhile never reached the books: read both again."""
        self.learning.load_state()
        self.forecaster.forget()
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

    def _promote(self, pods: Sequence[RunningPod], now: float) -> int:
        """:meth:`Writer.promote`; a promotion turned off meanwhile is turned off in the dispatcher too."""
        done = self.writer.promote(pods, now)
        if not self.promoter.enabled:
            self._sync_promotion()
        return done

    def build_view(self, plans: Mapping[jobs.JobKey, tasks.JobPlan], now: float | None = None) -> DispatchView:
        """This pass's :class:`DispatchView` (``Snapshots.view``; ``now``: the runtime's clock if None)."""
        now = self.clock() if now is None else now
        return self.snapshots.view(plans, now, self.writer.backing_off(now))
