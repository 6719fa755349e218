"""When will my job run? The operator's side of ``stowage.forecast``: the view as a forecast snapshot, run off the pass.

::

    dispatch pass (its thread) ── offer(view, estimates, usage, now) ──► Forecaster (its own thread)
                                  O(1): the latest input is kept         at most every estimates.forecast_interval_s,
                                                                         only when the input changed (fingerprint):
                                                                         snapshot_of(view) → forecast.predict
                                                                         → each pending Job's status.forecast
                                                                           (merge patch of that key only)
                                                                         → stowage_queue_predicted_wait_seconds
    Publisher.publish_queues ◄── pending_pods(queue): the gated plain pods' forecast, in the Queue status

The prediction is ``stowage.forecast.predict``: the simulator's engine run forward from the live state with the
decision the dispatcher runs (``stowage.policy.decide.Decider``), on the estimates the dispatcher's last decision
held (a learned queue prior without its margin: ``snapshot_of``). It never runs in the pass: a pass only hands
over its view (frozen records) and the decider's estimates and usage, and the status writes happen on the
forecaster's thread.

A status keeps its predicted times until they move by more than :data:`MOVE_S` or :data:`MOVE_FRACTION` of the
wait left (:func:`forecast_status`): a refresh that shifts a finish by seconds writes nothing.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stowage.operator import jobs
from stowage.operator.dispatch_records import DispatchView, PendingGroup
from stowage.operator.events import rfc3339
from stowage.operator.metrics import OperatorMetrics

from stowage import forecast
from stowage.config import StowageSettings
from stowage.kube import api
from stowage.kube.records import parse_timestamp
from stowage.model import Pool
from stowage.policy import estimates as est
from stowage.policy import fairness
from stowage.resources import ResourceVector

__all__ = ["FIRST_KEYS", "MAX_QUEUE_PODS", "MOVE_FRACTION", "MOVE_S", "POD_KEY", "Forecaster", "forecast_error",
           "forecast_status", "pod_entry", "snapshot_of"]

log = logging.getLogger(__name__)

#: A predicted time in a status moves only when the new prediction differs by more than this many seconds ...
#: (small beside a job of a minute: 60 s would keep a prediction off by as much as such a job's whole run)
MOVE_S = 10.0
#: ... and by more than this fraction of the time left until it (a wait of hours moves in steps of minutes).
MOVE_FRACTION = 0.1
#: Gated plain pods listed per Queue status (``status.pendingPods``), the first in queue order: the status stays
#: small however many pods wait; ``stowage queue`` says when the list was cut.
MAX_QUEUE_PODS = 100

Usage = Mapping[Pool, tuple[tuple[str, ...], fairness.QueueUsage]]
#: Kept in ``status.forecast`` from the first prediction of a finish to the Job's end (:func:`forecast_status`).
FIRST_KEYS = ("firstFinish", "firstPredictedAt")
#: A plain pod's key in the forecast (``pod:namespace/name``): a Job and a pod of one name and namespace stay apart.
POD_KEY = "pod:"


# --- the view as a snapshot (pure) ----------------------------------------------------------------


def _source(name: str) -> est.Source:
    return est.Source(est.SOURCE_NAMES.index(name)) if name in est.SOURCE_NAMES else est.Source.PRIOR


def _estimate(g: PendingGroup, held: Mapping[Hashable, tuple[float, str]], settings: StowageSettings,
              means: Mapping[str, float]) -> tuple[float, est.Source]:
    """The dispatcher's last estimate of the group; before its first decision, the hint or the default prior. A
    learned queue prior is predicted from without its margin (``means``: queue → the mean of its finished tasks):
    the margin makes the decision over- rather than under-estimate, a prediction wants the expected value."""
    if g.key in held:
        seconds, source = held[g.key]
        if source == "prior" and g.queue in means:
            return means[g.queue], est.Source.PRIOR
        if math.isfinite(seconds) and seconds > 0:
            return float(seconds), _source(source)
    if math.isfinite(g.expected_duration_s) and g.expected_duration_s > 0:
        return float(g.expected_duration_s), est.Source.HINT
    return settings.estimates.default_prior_s, est.Source.PRIOR


def snapshot_of(view: DispatchView, held: Mapping[Hashable, tuple[float, str]], usage: Usage, now: float,
                settings: StowageSettings, plain: Mapping[str, tuple[float, str]] | None = None,
                means: Mapping[str, float] | None = None) -> forecast.Snapshot:
    """The dispatcher's view as a :class:`stowage.forecast.Snapshot` at ``now``.

    ``held``: the dispatcher's last estimates (group key → seconds, source); ``plain``: estimates of plain pods
    seen gated before (pod key → seconds, source), for those now running, which the decision no longer
    estimates; ``means``: each queue's learned mean task duration (``DurationPriors.learned_mean``), predicted
    from instead of the margined prior (``_estimate``). A Job's running task (``RunningPod.job``) runs to its
    group's estimate; a running plain pod of a queue, to its estimate from when it was gated (else the default
    prior); a pod outside Stowage, or of a Job
    or queue the view no longer lists, holds its node for the whole forecast (``forecast.Node.held``). A
    suspended Job's running tasks run on; nothing else of it is predicted.
    """
    queues = tuple(forecast.Queue(q.name, q.weight, q.job_order, q.opportunistic) for q in view.queues)
    known_queues = {q.name for q in queues}
    by_job: dict[str, list[PendingGroup]] = {}
    for g in view.groups:
        if g.queue in known_queues:
            by_job.setdefault(g.job if g.job is not None else POD_KEY + g.key, []).append(g)
    running_of: dict[tuple[str, str], list[tuple[str, float, bool, ResourceVector]]] = {}
    held_on: dict[str, ResourceVector] = {}
    plain_running: list[tuple[str, str, float, bool, ResourceVector, str]] = []
    for p in view.running:
        started = p.started_at_s if p.started_at_s is not None else p.bound_at_s
        elapsed = max(now - started, 0.0) if started is not None and math.isfinite(started) else 0.0
        if p.job is not None and p.job in by_job:
            running_of.setdefault((p.job, p.group), []).append((p.node, elapsed, p.opportunistic,
                                                                p.requests or p.demand))
        elif p.job is None and p.queue in known_queues and p.key:
            plain_running.append((p.key, p.node, elapsed, p.opportunistic, p.demand, p.queue))
        else:
            held_on[p.node] = held_on.get(p.node, ResourceVector()) + (p.requests or p.demand)
    jobs_: list[forecast.Job] = []
    running: list[forecast.RunningTask] = []
    for key, groups in by_job.items():
        names = {g.group for g in groups}
        out = []
        for g in groups:
            runs = running_of.pop((key, g.group), [])[:max(g.remaining_tasks, 0)]
            seconds, source = _estimate(g, held, settings, means or {})
            left = len(runs) if g.suspended else g.remaining_tasks
            if left <= 0:
                continue
            out.append(forecast.Group(g.group, g.demand, left + g.finished_tasks, seconds, source,
                                      finished=g.finished_tasks,
                                      depends_on=tuple(d for d in g.depends_on if d in names)))
            running.extend(forecast.RunningTask(key, g.group, node, elapsed, opp) for node, elapsed, opp, _ in runs)
        if out:
            first = groups[0]
            kind = "job" if first.job is not None else "pods"
            jobs_.append(forecast.Job(key, first.queue, tuple(out), first.arrival_s, first.intent, kind))
    for runs in running_of.values():  # a group the view lists no more (finished): its pods hold their room
        for node, _, _, demand in runs:
            held_on[node] = held_on.get(node, ResourceVector()) + demand
    for key, node, elapsed, opp, demand, queue in plain_running:
        seconds, source = (plain or {}).get(key, (settings.estimates.default_prior_s, "prior"))
        name = key.rsplit("/", 1)[-1]
        jobs_.append(forecast.Job(POD_KEY + key, queue, (forecast.Group(name, demand, 1, seconds, _source(source)),),
                                  kind="pods"))
        running.append(forecast.RunningTask(POD_KEY + key, name, node, elapsed, opp))
    nodes = tuple(forecast.Node(n.name, n.allocatable, held_on.get(n.name, ResourceVector()), n.harvest)
                  for n in view.nodes)
    listed = {n.name for n in nodes}
    return forecast.Snapshot(now=now, nodes=nodes, queues=queues, jobs=tuple(jobs_),
                             running=tuple(t for t in running if t.node in listed), usage=dict(usage))


def fingerprint(view: DispatchView, held: Mapping[Hashable, tuple[float, str]]) -> int:
    """What the forecast depends on, without the clock: the same fingerprint, the same prediction (give or take the
    time passed). Estimates count to 2 significant digits, as ``status.estimate`` shows them, so a running task past
    its estimate does not make every pass a change."""
    return hash((
        tuple((n.name, n.allocatable, n.harvest) for n in view.nodes),
        tuple((p.key, p.node, p.opportunistic, p.job, p.group) for p in view.running),
        tuple((q.name, q.weight, q.opportunistic, q.job_order, tuple(sorted((q.quota or {}).items())))
              for q in view.queues),
        tuple((g.key, g.queue, g.releasable, g.remaining_tasks, g.unbound, g.finished_tasks, g.suspended, g.intent)
              for g in view.groups),
        tuple(sorted((str(k), float(f"{s:.2g}"), src) for k, (s, src) in held.items())),
    ))


# --- what is published ---------------------------------------------------------------------------


def _moved(new: float | None, old: Any, now: float) -> bool:
    before = parse_timestamp(old) if isinstance(old, str) else None
    if new is None or before is None:
        return (new is None) != (before is None)
    return abs(new - before) > max(MOVE_S, MOVE_FRACTION * max(before - now, 0.0))


def forecast_status(j: forecast.JobForecast | None, old: Mapping[str, Any] | None, now: float) -> dict[str, Any]:
    """A Job's ``status.forecast`` from its prediction, keeping the predicted times of ``old`` (the forecast written
    before) while they moved less than the tolerance (module docstring). Every key is present (None: unknown), so the
    merge patch that writes it removes what no longer holds::

        {"queuePosition": 2, "position": 5, "start": "2026-…Z", "finish": "2026-…Z",
         "sources": {"map": "phase", "reduce": "prior"}, "predictedAt": "2026-…Z", "note": None}

    ``j`` None (the Job is not predicted: suspended, finished, its queue gone): every key None.

    The first predicted finish is kept for the Job's life (``firstFinish``, ``firstPredictedAt``: written once, never
    moved nor cleared): the Job writer measures the forecast's error against it when the Job succeeds
    (``stowage_forecast_error_ratio``, :func:`forecast_error`), as ``tests/system/bench_stock.py`` measures it.
    """
    keys = ("queuePosition", "position", "start", "finish", "sources", "predictedAt", "note")
    if j is None:
        return dict.fromkeys(keys)
    old = old or {}
    first = {k: old[k] for k in FIRST_KEYS if old.get(k)}
    start = j.start_s if j.pending else None
    times = {}
    for name, value in (("start", start), ("finish", j.finish_s)):
        times[name] = old.get(name) if not _moved(value, old.get(name), now) else (
            rfc3339(value) if value is not None else None)
    note = None
    if not j.fits:
        note = "some task group fits no node: it never starts as the cluster stands"
    elif j.pending and start is None:
        note = "not within the forecast's horizon (or only harvested room would run it)"
    if not first and j.finish_s is not None:
        first = {"firstFinish": rfc3339(j.finish_s), "firstPredictedAt": rfc3339(now)}
    return {"queuePosition": j.queue_position, "position": j.position, **times,
            "sources": dict(sorted(j.source.items())), "predictedAt": rfc3339(now), "note": note, **first}


def forecast_error(job: Mapping[str, Any], completed: float) -> float | None:
    """``|actual finish − first predicted finish| ÷ the Job's completion time`` (creation → ``completed``, epoch
    seconds), the benchmark's measure of the forecast; None when the Job never had a predicted finish."""
    first = ((job.get("status") or {}).get("forecast") or {}).get("firstFinish")
    predicted = parse_timestamp(first) if isinstance(first, str) else None
    created = parse_timestamp((job.get("metadata") or {}).get("creationTimestamp"))
    if predicted is None or created is None:
        return None
    return abs(completed - predicted) / max(completed - created, 1.0)


def _same(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    return a is not None and {k: v for k, v in a.items() if k != "predictedAt"} == \
        {k: v for k, v in b.items() if k != "predictedAt"}


def pod_entry(j: forecast.JobForecast) -> dict[str, Any]:
    """One gated plain pod's line of a Queue's ``status.pendingPods``."""
    return {"pod": j.key.removeprefix(POD_KEY), "queuePosition": j.queue_position, "position": j.position,
            "start": rfc3339(j.start_s) if j.start_s is not None else None,
            "finish": rfc3339(j.finish_s) if j.finish_s is not None else None,
            "source": next(iter(j.source.values()), "prior")}


# --- the thread ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Offer:
    view: DispatchView
    held: Mapping[Hashable, tuple[float, str]]
    usage: Usage
    now: float
    means: Mapping[str, float]


class Forecaster:
    """Runs ``stowage.forecast.predict`` off the pass (module docstring): :meth:`offer` from the pass, :meth:`start`
    the thread, :meth:`refresh` one round (tests call it directly). Dry run: metrics only, no status writes."""

    def __init__(self, settings: StowageSettings, client: api.KubeClient, book: jobs.JobBook,
                 metrics: OperatorMetrics, *, dry_run: bool, clock: Callable[[], float] = time.time,
                 predict: Callable[[forecast.Snapshot, StowageSettings], forecast.Forecast] = forecast.predict) -> None:
        self.settings = settings
        self.interval_s = settings.estimates.forecast_interval_s
        self.client, self.book, self.metrics = client, book, metrics
        self.dry_run, self.clock, self._predict = dry_run, clock, predict
        self._lock = threading.Lock()
        self._offer: _Offer | None = None
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._fingerprint: int | None = None
        self._plain: dict[str, tuple[float, str]] = {}  # plain pod key → its last estimate while gated
        self._written: dict[jobs.JobKey, dict[str, Any]] = {}  # the status.forecast last written per Job
        self._forget = False
        self.latest: forecast.Forecast | None = None
        self.refreshes = 0

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    def offer(self, view: DispatchView, held: Mapping[Hashable, tuple[float, str]], usage: Usage, now: float,
              means: Mapping[str, float] | None = None) -> None:
        """The pass's view and the decider's estimates, usage and learned queue means (``snapshot_of``): kept until
        the thread takes them (O(1))."""
        if not self.enabled:
            return
        with self._lock:
            self._offer = _Offer(view, held, usage, now, dict(means or {}))
        self._wake.set()

    def start(self) -> Forecaster:
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="forecast", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            if self._stop.is_set():
                break
            self._wake.clear()
            began = time.monotonic()
            try:
                self.refresh()
            except Exception:  # the thread must survive anything; the next offer tries again
                log.exception("forecast failed; the next change tries again")
            self._stop.wait(max(0.0, began + self.interval_s - time.monotonic()))

    def refresh(self) -> bool:
        """Predict from the latest offer if it differs from the one predicted last; publish. True when it ran."""
        with self._lock:
            offer, self._offer = self._offer, None
        if self._forget:
            self._forget = False
            self._written.clear()
            self._fingerprint = None
        if offer is None:
            return False
        mark = fingerprint(offer.view, offer.held)
        if mark == self._fingerprint:
            return False
        cpu = time.process_time()
        for g in offer.view.groups:
            if g.job is None and g.key in offer.held:
                self._plain[g.key] = offer.held[g.key]
        snap = snapshot_of(offer.view, offer.held, offer.usage, offer.now, self.settings, self._plain, offer.means)
        result = self._predict(snap, self.settings)
        self.metrics.forecast_seconds.observe(time.process_time() - cpu)
        self._fingerprint, self.latest = mark, result
        self.refreshes += 1
        running = {p.key for p in offer.view.running}
        gated = {g.key for g in offer.view.groups if g.job is None}
        self._plain = {k: v for k, v in self._plain.items() if k in running or k in gated}
        self._publish_metrics(result, [q.name for q in offer.view.queues])
        if not self.dry_run:
            self._write(result, offer.now)
        return True

    def _publish_metrics(self, result: forecast.Forecast, queues: Sequence[str]) -> None:
        waits: dict[str, list[float]] = {}
        for j in result.pending():
            if j.start_s is not None:
                waits.setdefault(j.queue, []).append(max(j.start_s - result.now, 0.0))
        self.metrics.publish_predicted_waits({q: (min(w), max(w)) for q, w in waits.items() if q in queues})

    def _write(self, result: forecast.Forecast, now: float) -> None:
        """Each Job's ``status.forecast`` where it changed (a merge patch of that key: the Job writer's status
        writes leave it alone); a Job no longer predicted (started and finished, suspended) gets it cleared."""
        seen: set[jobs.JobKey] = set()
        for j in result.jobs:
            if j.kind != "job":
                continue
            ns, name = j.key.split("/", 1)
            key = (ns, name)
            seen.add(key)
            self._patch(key, forecast_status(j, self._written.get(key) or self._stored(key), now))
        for key in [k for k in self._written if k not in seen]:
            self._patch(key, forecast_status(None, None, now))
            self._written.pop(key, None)

    def _stored(self, key: jobs.JobKey) -> Mapping[str, Any] | None:
        job = self.book.job(key)
        stored = ((job or {}).get("status") or {}).get("forecast")
        return stored if isinstance(stored, Mapping) else None

    def _patch(self, key: jobs.JobKey, status: dict[str, Any]) -> None:
        if _same(self._written.get(key) or self._stored(key), status):
            self._written.setdefault(key, status)
            return
        try:
            self.client.patch(jobs.job_path(key, "/status"), {"status": {"forecast": status}})
        except (api.ApiError, OSError) as exc:
            if isinstance(exc, api.ApiError) and exc.status == 404:
                return  # deleted meanwhile
            log.warning("job %s/%s: forecast not written (%s); the next refresh tries again", *key, exc)
            self._fingerprint = None  # write again at the next offer even if nothing changed
            return
        self._written[key] = status

    def forget(self) -> None:
        """Forget what was written and predicted (this replica acts again after standing by: another one may have
        written the forecasts meanwhile); the next offer predicts and compares with the Jobs' stored status."""
        self._forget = True  # done on the forecaster's thread, which owns what it wrote

    def pending_pods(self, queue: str) -> list[dict[str, Any]]:
        """The gated plain pods of ``queue`` in queue order (at most :data:`MAX_QUEUE_PODS`), as the last forecast
        predicted them: a Queue's ``status.pendingPods``."""
        result = self.latest
        if result is None:
            return []
        return [pod_entry(j) for j in result.queue(queue) if j.kind == "pods"][:MAX_QUEUE_PODS]
