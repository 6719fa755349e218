"""A served extender over a cluster model fed with realistic objects: real HTTP on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from stowage.extender.app import create_app
from stowage.extender.events import PodEvents
from stowage.extender.nudge import PodNudges
from stowage.extender.queues import QueueWeights

from stowage.config import StowageSettings
from stowage.kube.cluster import ClusterModel
from stowage.prom import Utilization, UtilizationSnapshot
from tests.support.serving import serving

#: 2024-05-01T10:00:00Z: pods in tests/extender/objects.py were bound half an hour before.
NOW = 1714557600.0


@dataclass
class Clock:
    now: float = NOW

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    """The extender under test, its inputs, and an HTTP client pointed at it."""

    model: ClusterModel
    utilization: Utilization
    clock: Clock
    url: str
    http: httpx.Client
    app: FastAPI
    settings: StowageSettings = field(default_factory=StowageSettings)
    events: list[dict[str, Any]] = field(default_factory=list)  # Events the extender posted, in order
    nudges: PodNudges | None = None  # with make_world(nudges=True): the app's held pods and their worker
    nudged: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (namespace, name, patch) sent

    def event_about(self, pod_name: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """The newest Event posted about ``pod_name`` (they are posted off the request path: wait for it)."""
        from tests.support.kube import wait_until

        def found() -> dict[str, Any] | None:
            return next((e for e in reversed(self.events) if e["involvedObject"]["name"] == pod_name), None)

        wait_until(lambda: found() is not None, timeout_s)
        event = found()
        assert event is not None
        return event

    def post(self, verb: str, body: Any) -> httpx.Response:
        return self.http.post(f"{self.url}/{verb}", json=body)

    def samples(
        self,
        nodes: Mapping[str, Mapping[str, Mapping[str, float]]],
        age_s: float | Mapping[str, float] = 1.0,
        *,
        timed: bool = False,
    ) -> None:
        """Install samples ``age_s`` old; ``timed``: with their sample times on the model's clock (taken at
        ``clock.now − age``), so the extender knows which pods they include. Else those times are unknown."""
        self.utilization.replace(
            UtilizationSnapshot.from_nodes(nodes, age_s=age_s, fetched_at_s=self.utilization.clock(),
                                           wall_s=self.clock.now if timed else None)
        )


WorldFactory = Callable[..., World]


@pytest.fixture
def make_world() -> Iterator[WorldFactory]:
    """``make_world(nodes, pods=(), samples=None, settings=None, queue_weights=None, nudges=False)`` → a served
    :class:`World`; ``nudges``: with a started :class:`PodNudges` whose patches are recorded in ``World.nudged``."""
    stack: list[Any] = []

    def build(
        nodes: list[dict[str, Any]],
        pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
        samples: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
        settings: StowageSettings | None = None,
        synced: bool = True,
        queue_weights: QueueWeights | None = None,
        nudges: bool = False,
    ) -> World:
        settings = settings or StowageSettings()
        clock = Clock()
        model = ClusterModel(recent_window_s=settings.harvest.ramp_up_s, clock=clock)
        if synced:
            model.replace_nodes(nodes)
            model.replace_pods(list(pods))
        utilization = Utilization(None)
        posted: list[dict[str, Any]] = []
        events = PodEvents(lambda _ns, body: posted.append(body), min_interval_s=0.0).start()
        patched: list[tuple[str, str, dict[str, Any]]] = []
        nudger = PodNudges(lambda ns, name, body: patched.append((ns, name, body)), lambda: utilization.current,
                           stale_after_s=settings.harvest.utilization_stale_after_s,
                           is_bound=lambda key: model.pod(key) is not None, poll_s=0.02).start() if nudges else None
        app = create_app(settings, model, utilization, events=events, queue_weights=queue_weights, nudges=nudger)
        served = serving(app)
        url = served.__enter__()
        http = httpx.Client(timeout=10.0)
        stack.append((served, http, events, nudger))
        world = World(model, utilization, clock, url, http, app, settings, posted, nudger, patched)
        if samples is not None:
            world.samples(samples)
        return world

    yield build
    for served, http, events, nudger in stack:
        http.close()
        served.__exit__(None, None, None)
        events.stop()
        if nudger is not None:
            nudger.stop()
