"""The FastAPI app: ``create_app(settings, model, utilization)``.

Every verb does parse → snapshot → policy → serialise; the arithmetic lives in
``filtering``, ``scoring`` and ``preemption`` (which call ``stowage.policy``).
Failure handling follows the protocol (EXTENDER_PROTOCOL.md §2):

- a body that does not match the wire types → HTTP 400 ``{"error": "<field>: <problem>"}``;
- a malformed Stowage annotation on a Stowage pod → every node rejected as
  unresolvable with the ``invalid-pod`` phrase, and an Event on the pod naming the
  annotation; prioritize scores 0 and preempt leaves the candidates as they are;
- an internal failure → filter fails closed for opportunistic pods (every node
  rejected with the ``internal-error`` phrase, never ``Error``, which an ignorable
  extender would let through) and passes regular pods through unchanged;
  prioritize answers all-zero scores and preempt echoes the candidates.

Rejected nodes get their reason's fixed phrase (``messages.REASONS``); when a pod fits
nowhere, one Event per pod (``events.PodEvents``, rate-limited, posted off the request
path) carries the numbers: what it needs and what the closest nodes had. An opportunistic pod placed nowhere
for missing samples is reported to ``nudge.PodNudges``, which patches it for a retry once they are fresh again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

import numpy as np
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message, Receive, Scope, Send
from stowage.extender import filtering, preemption, scoring, snapshot, wire
from stowage.extender.events import EVENT_INVALID, EVENT_NOT_PLACED, PodEvents
from stowage.extender.messages import REASONS
from stowage.extender.metrics import ExtenderMetrics
from stowage.extender.nudge import MAX_NODES, PodNudges
from stowage.extender.pods import PodRequest, parse_pod
from stowage.extender.queues import QueueWeights

from stowage import __version__
from stowage.config import StowageSettings
from stowage.errors import InvalidInput
from stowage.kube.cluster import ClusterModel
from stowage.kube.informer import Informer
from stowage.labels import LABEL_CLASS, LABEL_QUEUE, SCHEDULER_NAME, PodClass, pod_class
from stowage.prom import Utilization

__all__ = ["create_app"]

log = logging.getLogger(__name__)

#: How long filter's snapshot may serve the prioritize call that follows it (same pod).
_REUSE_S = 1.0


def _encode(body: Any) -> bytes:
    """orjson; the stdlib for the rare body orjson refuses (a lone UTF-16 surrogate echoed from the request)."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode()


def _zero_scores(raw: Mapping[str, Any]) -> tuple[list[str], list[int]]:
    """Every offered node with score 0, read without touching the model (the failure path)."""
    if raw.get("NodeNames") is not None:
        names = [str(n) for n in raw["NodeNames"]]
    else:
        items = (raw.get("Nodes") or {}).get("items") or []
        names = [str(((item or {}).get("metadata") or {}).get("name") or "") for item in items]
    return names, [0] * len(names)


def _pod_key(pod: Any) -> str:
    meta = (pod.get("metadata") if isinstance(pod, Mapping) else None) or {}
    return str(meta.get("uid") or f"{meta.get('namespace') or ''}/{meta.get('name') or ''}")


def _failed_closed(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The filter answer after an internal error, read without touching the model.

    Regular pods (and pods of other schedulers) pass every offered node: they never needed
    Stowage's approval. Anything else, opportunistic or unreadable, is rejected on every node:
    an opportunistic pod is never bound where Stowage did not approve it.
    """
    names, _ = _zero_scores(raw)
    items = (raw.get("Nodes") or {}).get("items") if raw.get("NodeNames") is None else None
    pod = raw.get("Pod") if isinstance(raw.get("Pod"), Mapping) else {}
    try:
        spec = pod.get("spec") or {}
        regular = spec.get("schedulerName") != SCHEDULER_NAME or (
            pod_class((pod.get("metadata") or {}).get("labels") or {}) is PodClass.REGULAR
        )
    except Exception:  # unreadable: treat as opportunistic
        regular = False
    if regular:
        return wire.filter_result(names, {}, {}, node_items=items)
    phrase = REASONS["internal-error"]
    return wire.filter_result([], dict.fromkeys(names, phrase), {}, node_items=[] if items is not None else None)


def _json(body: Any, status: int = 200) -> Response:
    return Response(_encode(body), status_code=status, media_type="application/json")


def _problem(message: str) -> Response:
    return _json({"error": message}, 400)


class _OrjsonBodyRoute(APIRoute):
    """Parse JSON bodies with orjson before FastAPI reads them (2× the stdlib on 5,000 node names).

    Starlette's ``Request.json()`` keeps its result in ``request._json`` and parses only when it
    is absent; FastAPI and the handlers then reuse what we put there. A body orjson refuses
    (not JSON, NaN, huge integers, lone surrogates) is left to the stdlib, so every error and
    every accepted value stays exactly what FastAPI alone would produce.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def parse_then_handle(request: Request) -> Response:
            body = await request.body()
            with contextlib.suppress(orjson.JSONDecodeError):
                request._json = orjson.loads(body)
            return await handler(request)

        return parse_then_handle


_JSON_HEADERS = [(b"content-type", b"application/json")]


def _json_content_type(scope: Scope) -> bool:
    """``Content-Type: application/json`` (any parameters), as kube-scheduler sends it.

    Anything else — absent, ``*+json``, unusual spelling — is left to FastAPI, whose
    rules for it differ between versions.
    """
    for key, value in scope["headers"]:
        if key == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == b"application/json"
    return False


class _ExtenderAPI(FastAPI):
    """FastAPI, with the success path of filter and prioritize served straight from ASGI.

    kube-scheduler calls these two for every pod, and FastAPI's request machinery
    (middleware stack, routing, dependency solving) costs about as much as our decision.
    A request takes the short path only when FastAPI would call the route with it: a
    POST to exactly ``/filter`` or ``/prioritize``, sent as ``application/json``, whose
    body ``ExtenderArgs`` accepts (the same Pydantic model the route declares). Anything
    else — bad JSON, a body that fails validation, another content type — is replayed into FastAPI
    unchanged, so every error answer is FastAPI's own; both paths build the 200 body
    with the same ``_Extender`` method.
    """

    fast_verbs: dict[str, Callable[[Mapping[str, Any]], bytes]]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        verb = None
        if scope["type"] == "http" and scope["method"] == "POST":
            verb = self.fast_verbs.get(scope["path"])
        if verb is None:
            await super().__call__(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nothing to answer
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        raw: Any = None
        if _json_content_type(scope):
            with contextlib.suppress(orjson.JSONDecodeError):
                raw = orjson.loads(body)
            if not wire.accepts_extender_args(raw):
                raw = None
        if raw is None:  # not for the short path: FastAPI answers, with its own errors
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}

            await super().__call__(scope, replay, send)
            return
        payload = verb(raw)
        headers = [*_JSON_HEADERS, (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


class _Extender:
    """The verbs, with their dependencies; routes below only adapt HTTP to these."""

    def __init__(
        self,
        settings: StowageSettings,
        model: ClusterModel,
        utilization: Utilization,
        metrics: ExtenderMetrics,
        queue_weights: QueueWeights,
        events: PodEvents | None = None,
        nudges: PodNudges | None = None,
    ) -> None:
        self.settings = settings
        self.model = model
        self.utilization = utilization
        self.metrics = metrics
        self.queue_weights = queue_weights
        self.events = events or PodEvents(None)
        self.nudges = nudges or PodNudges(None)
        self.entries = wire.HostEntries()
        self.snapshots = snapshot.Snapshots(model, utilization, settings)
        self._last_pod: tuple[Mapping[str, Any], PodRequest] | None = None
        self._last_filter: tuple[str, float, list[str], snapshot.Snapshot, list[str], np.ndarray] | None = None

    def parse(self, pod: Mapping[str, Any]) -> PodRequest:
        """:func:`parse_pod`, remembered for the pod's next verb (prioritize follows filter with the same pod).

        Reused only for an equal pod object (a deep ``==``, far cheaper than parsing again).
        """
        cached = self._last_pod
        if cached is not None and cached[0] == pod:
            return cached[1]
        parsed = parse_pod(pod)
        self._last_pod = (pod, parsed)
        return parsed

    def nodes_of(self, raw: Mapping[str, Any]) -> tuple[list[str], list[Any] | None]:
        """Node names in request order, and the raw items in Nodes mode (None in NodeNames mode)."""
        if raw.get("NodeNames") is not None:
            return list(raw["NodeNames"]), None
        items = list((raw.get("Nodes") or {}).get("items") or [])
        names = [str(((item or {}).get("metadata") or {}).get("name") or "") for item in items]
        # Nodes mode: the scheduler's copy is fresh; learn nodes the informer has not delivered yet.
        known = set(self.model.node_names())
        for item, name in zip(items, names, strict=True):
            if name and name not in known:
                self.model.apply_node_event("ADDED", item)
        return names, items

    def filter(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        names, items = self.nodes_of(raw)
        try:
            pod = self.parse(raw["Pod"])
        except InvalidInput as exc:
            self.metrics.rejections.labels("invalid-pod").inc(len(names))
            if self.events.due(_pod_key(raw["Pod"])):
                self.events.emit(raw["Pod"], EVENT_INVALID, f"Stowage cannot place this pod: {exc}")
            phrase = REASONS["invalid-pod"]
            no_items = [] if items is not None else None
            return wire.filter_result([], {}, dict.fromkeys(names, phrase), node_items=no_items)
        if not pod.ours:
            return wire.filter_result(names, {}, {}, node_items=items)
        snap = self.snapshots.take(names, exclude_pod=pod.key)
        outcome = filtering.filter_nodes(pod, snap)
        if outcome.passed.size == 0 and names and self.events.due(pod.key):
            self.events.emit(raw["Pod"], EVENT_NOT_PLACED,
                             f"Stowage placed {pod.name} on none of {len(names)} nodes: "
                             + filtering.explain(pod, snap, outcome))
        if pod.opportunistic:
            if outcome.passed.size:
                self.nudges.release(pod.key)
            elif "utilization-unavailable" in outcome.reasons:
                # Held for samples: retried as soon as they are fresh again (nudge.py), not at kube-scheduler's flush.
                waiting = filtering.rejected_for(outcome, names, "utilization-unavailable", MAX_NODES)
                self.nudges.hold(pod.key, raw["Pod"], waiting)
        passed_names = filtering.pick(names, outcome.passed)
        self._last_filter = (pod.key, time.monotonic(), names, snap, passed_names, outcome.passed)
        for reason, count in outcome.reasons.items():
            self.metrics.rejections.labels(reason).inc(count)
        passed = outcome.passed.tolist()
        if pod.opportunistic and len(passed) == 1:
            # Prioritize is skipped for a single feasible node: this is where the pod lands.
            self.model.assume(pod.key, names[passed[0]], pod.demand)
        return wire.filter_result(
            passed_names,
            outcome.failed,
            outcome.unresolvable,
            node_items=None if items is None else [items[i] for i in passed],
        )

    def filter_response(self, raw: Mapping[str, Any]) -> bytes:
        """The encoded filter answer; never a 500, and never ``Error`` for an opportunistic pod (fail closed)."""
        start = time.perf_counter()
        try:
            body: Any = self.filter(raw)
        except Exception:
            log.exception("filter failed")
            body = _failed_closed(raw)
            self.metrics.rejections.labels("internal-error").inc(len(_zero_scores(raw)[0]))
        self.metrics.request_seconds.labels("filter").observe(time.perf_counter() - start)
        return _encode(body)

    def prioritize_response(self, raw: Mapping[str, Any]) -> bytes:
        """The encoded prioritize answer; an internal failure scores every node 0."""
        start = time.perf_counter()
        try:
            body = self.prioritize(raw)
        except Exception:  # zero scores: we simply contribute nothing
            log.exception("prioritize failed")
            body = _encode(wire.host_priorities(*_zero_scores(raw)))
        self.metrics.request_seconds.labels("prioritize").observe(time.perf_counter() - start)
        return body

    def prioritize(self, raw: Mapping[str, Any]) -> bytes:
        """The encoded ``[{"Host", "Score"}, ...]`` (:func:`wire.host_priorities_json`)."""
        names, _ = self.nodes_of(raw)
        try:
            pod = self.parse(raw["Pod"])
        except InvalidInput:
            return wire.host_priorities_json(names, [0] * len(names))
        if not pod.ours:
            return wire.host_priorities_json(names, [0] * len(names))
        snap = self._reuse_filter_snapshot(pod.key, names) or self.snapshots.take(names, exclude_pod=pod.key)
        scores, best = scoring.score_nodes(pod, snap)
        if pod.opportunistic and best is not None:
            # Hold the slot until the binding shows up, so the next pod cannot take it too.
            self.model.assume(pod.key, names[best], pod.demand)
        return self.entries.encode(names, snap.rows, scores, snap.index_version)

    def _reuse_filter_snapshot(self, key: str, names: list[str]) -> snapshot.Snapshot | snapshot.ScoringView | None:
        """kube-scheduler calls prioritize right after filter with the survivors: reuse filter's rows.

        Only for the same pod, within ``_REUSE_S``, and when every name was in filter's request.
        """
        last = self._last_filter
        if last is None or last[0] != key or time.monotonic() - last[1] > _REUSE_S:
            return None
        _, _, filtered, snap, passed_names, passed = last
        if names == passed_names:  # the usual case: exactly the nodes filter kept, in its order
            return snap.subset(passed, names)
        if names == filtered:
            return snap
        where = dict(zip(filtered, range(len(filtered)), strict=True))
        positions = np.fromiter(map(where.get, names, itertools.repeat(-1)), dtype=np.int64, count=len(names))
        if (positions < 0).any():
            return None
        return snap.subset(positions, names)

    def _victim_info(self, uid: str) -> preemption.VictimInfo | None:
        record = self.model.pod(uid)
        return None if record is None else preemption.VictimInfo(record.opportunistic, record.queue)

    def preempt(self, raw: Mapping[str, Any]) -> tuple[dict[str, tuple[list[str], int]], PodRequest | None]:
        candidates: dict[str, tuple[list[str], int]] = {}
        infos: dict[str, preemption.VictimInfo] = {}
        if raw.get("NodeNameToMetaVictims") is not None:
            for node, victims in raw["NodeNameToMetaVictims"].items():
                victims = victims or {}
                uids = [str(p["UID"]) for p in victims.get("Pods") or [] if p]
                candidates[node] = (uids, int(victims.get("NumPDBViolations") or 0))
        else:
            for node, victims in (raw.get("NodeNameToVictims") or {}).items():
                victims = victims or {}
                uids = []
                for p in victims.get("Pods") or []:
                    meta = (p or {}).get("metadata") or {}
                    uid = str(meta.get("uid") or f"{meta.get('namespace') or ''}/{meta.get('name') or ''}")
                    pod_labels = meta.get("labels") or {}
                    infos[uid] = preemption.VictimInfo(
                        pod_labels.get(LABEL_CLASS) == PodClass.OPPORTUNISTIC.value, pod_labels.get(LABEL_QUEUE)
                    )
                    uids.append(uid)
                candidates[node] = (uids, int(victims.get("NumPDBViolations") or 0))
        try:
            pod = self.parse(raw["Pod"])
        except InvalidInput:
            return {n: c for n, c in candidates.items() if c[0]}, None
        over = set()
        if pod.ours and candidates:
            resources, total = self.model.totals()
            pending = {pod.queue} if pod.queue else set()
            weights = self.queue_weights.weights()
            over = preemption.over_share_queues(self.model.pods(), resources, total, weights, pending)

        def lookup(uid: str) -> preemption.VictimInfo | None:
            return infos.get(uid) or self._victim_info(uid)

        return preemption.select_victims(pod, candidates, lookup, over), pod


def create_app(
    settings: StowageSettings,
    model: ClusterModel,
    utilization: Utilization,
    *,
    metrics: ExtenderMetrics | None = None,
    queue_weights: QueueWeights | None = None,
    events: PodEvents | None = None,
    nudges: PodNudges | None = None,
    informers: Sequence[Informer] = (),
) -> FastAPI:
    """Build the extender app over a cluster model and a utilization feed (both owned by the caller).

    ``informers``: the ones feeding ``model`` (owned by the caller); ``/readyz`` fails while one of them
    is unhealthy (:meth:`Informer.unhealthy`: failing to list or watch for longer than its limit).

    ``queue_weights``: the live Queue weights preempt uses (fed by the caller's Queue informer); without
    it every queue weighs 1 and ``/readyz`` says the Queues were never read.
    ``events``: where Events about pods placed nowhere go (started and stopped by the caller); none by default.
    ``nudges``: where pods held for missing samples are reported, to be patched for a retry once the samples are
    fresh (started and stopped by the caller); none by default.
    """

    def harvestable() -> tuple[list[str], tuple[str, ...], Any]:
        names = model.node_names()
        snap = ext.snapshots.take(names)
        return names, snap.resources, snap.harvestable

    metrics = metrics or ExtenderMetrics(harvestable, bad_objects=lambda: model.bad_objects_total)
    weights = queue_weights if queue_weights is not None else QueueWeights()
    ext = _Extender(settings, model, utilization, metrics, weights, events, nudges)
    app = _ExtenderAPI(
        title="Stowage scheduler extender",
        version=__version__,
        description=(
            "kube-scheduler extender for the stowage-scheduler profile. Bodies are kube-scheduler's "
            "extender/v1 types exactly (PascalCase keys, null for unset pointers)."
        ),
    )
    app.router.route_class = _OrjsonBodyRoute
    app.fast_verbs = {"/filter": ext.filter_response, "/prioritize": ext.prioritize_response}
    app.state.extender = ext
    app.state.metrics = metrics

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        return _problem(f"invalid {request.url.path.rsplit('/', 1)[-1]} request: {wire.describe_validation_error(exc)}")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # Same body shape for every error: {"error": "..."} (FastAPI's default is {"detail": ...}).
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 400:
            detail = f"invalid {request.url.path.rsplit('/', 1)[-1]} request: {detail} (expected a JSON object)"
        return Response(
            _encode({"error": detail}),
            status_code=exc.status_code,
            media_type="application/json",
            headers=getattr(exc, "headers", None),
        )

    bad_request = {400: {"model": wire.Problem, "description": "The body does not match the extender protocol"}}

    @app.post(
        "/filter",
        response_model=None,
        responses={200: {"model": wire.ExtenderFilterResult}, **bad_request},
        summary="Keep the nodes the pod may run on; explain every rejection",
    )
    async def filter_nodes(args: wire.ExtenderArgs, request: Request) -> Response:
        return Response(ext.filter_response(await request.json()), media_type="application/json")

    @app.post(
        "/prioritize",
        response_model=None,
        responses={200: {"model": list[wire.HostPriority]}, **bad_request},
        summary="Score the nodes 0..10 by multi-resource alignment",
    )
    async def prioritize_nodes(args: wire.ExtenderArgs, request: Request) -> Response:
        return Response(ext.prioritize_response(await request.json()), media_type="application/json")

    @app.post(
        "/preempt",
        response_model=None,
        responses={200: {"model": wire.ExtenderPreemptionResult}, **bad_request},
        summary="Accept the victims Stowage allows; drop the other nodes",
    )
    async def preempt_victims(args: wire.ExtenderPreemptionArgs, request: Request) -> Response:
        start = time.perf_counter()
        raw = await request.json()
        try:
            kept, _ = ext.preempt(raw)
        except Exception:  # degrade to the scheduler's own choice
            log.exception("preempt failed")
            kept = {}
            for node, victims in (raw.get("NodeNameToMetaVictims") or {}).items():
                uids = [str(p["UID"]) for p in (victims or {}).get("Pods") or [] if p]
                if uids:
                    kept[node] = (uids, int((victims or {}).get("NumPDBViolations") or 0))
        metrics.request_seconds.labels("preempt").observe(time.perf_counter() - start)
        return _json(wire.preemption_result(kept))

    @app.get("/healthz", summary="Liveness: the process answers")
    async def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz", summary="Readiness: node and pod caches have synced and still follow the cluster")
    async def readyz() -> Response:
        # Utilization and Queue weights degrade answers (nothing harvests; every queue weighs 1) but never
        # readiness: they are reported, not waited for. Objects the caches cannot read cost only themselves:
        # counted here, never a reason to be unready.
        waiting = [n for n, ev in (("nodes", model.nodes_synced), ("pods", model.pods_synced)) if not ev.is_set()]
        unhealthy = {i.name: why for i in informers if (why := i.unhealthy()) is not None}
        ready = not waiting and not unhealthy
        body = {
            "status": "ready" if ready else "not ready",
            "waiting_for": waiting,
            "unhealthy": unhealthy,
            "bad_objects": {kind: len(found) for kind, found in model.bad_objects().items()},
            "utilization_error": utilization.current.error,
            "queue_weights_error": weights.error,
        }
        return _json(body, 200 if ready else 503)

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
