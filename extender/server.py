"""Wiring: informers → cluster model and Queue weights, Prometheus → utilization, all → the app, served by uvicorn.

``ExtenderRuntime`` owns the background threads; ``serve()`` blocks until SIGTERM/SIGINT
(uvicorn handles the signals) and then stops them.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from types import TracebackType
from typing import Any

import uvicorn
from fastapi import FastAPI
from stowage.extender.app import create_app
from stowage.extender.events import PodEvents
from stowage.extender.nudge import PodNudges
from stowage.extender.queues import QueueWeights

from stowage.config import StowageSettings
from stowage.kube.api import KubeClient
from stowage.kube.cluster import ClusterModel
from stowage.kube.informer import STALE_AFTER_S, cluster_informers
from stowage.prom import PrometheusReader, Utilization

__all__ = ["LISTENING", "ExtenderRuntime", "listen_socket"]

log = logging.getLogger(__name__)

#: The start-up line naming the address actually bound (with ``--port 0``, the port the kernel chose).
LISTENING = "extender listening on http://%s:%d"


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` for uvicorn; port 0 takes any free port (read it with getsockname).

    uvicorn does not set TCP_NODELAY on the connections of a socket handed to it; accepted sockets
    inherit it from here, else every response waits ~40 ms on a delayed ACK between its header and
    body writes.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class ExtenderRuntime:
    """Start informers (nodes, pods, Queues) and the utilization feed, build the app; ``close()`` stops everything.

    Readiness waits for the node and pod informers only, and fails again while one of them has failed to
    list or watch for longer than ``informer_stale_after_s``: Queues the extender may not read leave every
    queue at weight 1 (``stowage.extender.queues``), reported by ``/readyz``.
    """

    def __init__(
        self,
        settings: StowageSettings,
        api: KubeClient,
        *,
        prometheus_url: str | None,
        prometheus_interval_s: float = 5.0,
        watch_timeout_s: int = 300,
        informer_stale_after_s: float = STALE_AFTER_S,
    ) -> None:
        self.settings = settings
        self.model = ClusterModel(recent_window_s=settings.harvest.ramp_up_s)
        self.queue_weights = QueueWeights()
        caches = cluster_informers(api, self.model, watch_timeout_s=watch_timeout_s,
                                   stale_after_s=informer_stale_after_s)
        self.informers = [*caches, self.queue_weights.informer(api, watch_timeout_s=watch_timeout_s)]
        reader = (
            PrometheusReader(prometheus_url, usage_window_s=settings.harvest.usage_window_s,
                             bandwidth_window_s=settings.estimates.bandwidth_window_s) if prometheus_url else None
        )
        self.utilization = Utilization(reader, interval_s=prometheus_interval_s)
        # Events about pods placed nowhere: posted off the request path, counted in the app's metrics.
        self.events = PodEvents(api.create_event, on_outcome=lambda outcome: self._count_event(outcome))
        # Pods held for missing samples, patched for an immediate retry once the samples are fresh (nudge.py).
        self.nudges = PodNudges(
            lambda namespace, name, body: api.patch(f"/api/v1/namespaces/{namespace}/pods/{name}", body),
            lambda: self.utilization.current,
            stale_after_s=settings.harvest.utilization_stale_after_s,
            is_bound=lambda key: self.model.pod(key) is not None,
            on_outcome=lambda outcome: self.app.state.metrics.nudges.labels(outcome).inc(),
        )
        self.app: FastAPI = create_app(
            settings, self.model, self.utilization, queue_weights=self.queue_weights, events=self.events,
            nudges=self.nudges, informers=caches,
        )

    def _count_event(self, outcome: str) -> None:
        self.app.state.metrics.events.labels(outcome).inc()

    def start(self) -> ExtenderRuntime:
        for informer in self.informers:
            informer.start()
        self.utilization.start()
        self.events.start()
        self.nudges.start()
        return self

    def close(self) -> None:
        for informer in self.informers:
            informer.stop()
        self.utilization.stop()
        self.events.stop()
        self.nudges.stop()

    def __enter__(self) -> ExtenderRuntime:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def serve(self, host: str, port: int, log_level: str = "info") -> None:
        """Serve until interrupted (blocks). Port 0 takes any free port; the bound one is logged (``LISTENING``).

        Raises ``OSError`` when the address cannot be bound.
        """
        sock = listen_socket(host, port)
        port = sock.getsockname()[1]
        # at the effective level, so the bound port is reported whatever --log-level says (port 0 needs it)
        log.log(max(logging.INFO, log.getEffectiveLevel()), LISTENING, host, port)
        server = uvicorn.Server(self.uvicorn_config(host, port, log_level))
        # uvicorn shuts down gracefully on SIGTERM/SIGINT, restores the handlers it found and then
        # re-raises the signal. A no-op handler here lets the runtime stop its threads and the
        # process exit 0 instead of dying by the signal.
        previous = {}
        if threading.current_thread() is threading.main_thread():
            previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            with self:
                server.run(sockets=[sock])
        finally:
            sock.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def uvicorn_config(self, host: str, port: int, log_level: str = "info", **kwargs: Any) -> uvicorn.Config:
        return uvicorn.Config(self.app, host=host, port=port, log_level=log_level.lower(), access_log=False, **kwargs)
