"""The kmock Kubernetes emulator on a background thread, for tests of synchronous Kubernetes clients.

Usage::

    with kube_emulator() as (emulator, api):        # api: kubernetes.client.ApiClient (the test's own hands)
        CoreV1Api(api).create_node({"metadata": {"name": "n1"}})
        wait_until(lambda: ..., timeout_s=5)

    handle.client                                   # stowage.kube.api.KubeClient: the code under test's client

The emulator (``kmock.KubernetesEmulator`` served by ``kmock.Server``) runs its own
asyncio loop on a daemon thread; ``v1/pods``, ``v1/nodes`` and ``v1/events`` are
declared (kmock 0.8 serves only declared resources). Change cluster state through
``api`` (create / patch / delete): only requests that go through the emulator's
HTTP handler reach open watch streams. Quirks seen with kmock 0.8 (DESIGN.md):
objects get no ``uid`` or ``resourceVersion`` unless the test sets them, list
metadata carries ``resourceVersion: "..."``, a watch replays every existing object
as ``ADDED`` and ignores ``resourceVersion`` and ``timeoutSeconds``, patches are
plain dict merges.

``handle.call(fn)`` runs ``fn()`` on the emulator's loop (use it to add kmock
reactions, e.g. an injected ``410 Gone``) and returns its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import kmock
import yaml
from kubernetes import client

from stowage.kube.api import ApiConfig, KubeClient

__all__ = ["DEFAULT_RESOURCES", "KubeEmulator", "gone_once", "kube_emulator", "wait_until", "write_kubeconfig"]

DEFAULT_RESOURCES: tuple[str, ...] = ("v1/pods", "v1/nodes", "v1/events")

T = TypeVar("T")


@dataclass
class KubeEmulator:
    """A running emulator. Unpacks as ``(emulator, api)``; ``client`` is Stowage's own client for it."""

    emulator: kmock.KubernetesEmulator
    api: client.ApiClient
    url: str
    loop: asyncio.AbstractEventLoop
    client: KubeClient

    def __iter__(self) -> Iterator[Any]:
        return iter((self.emulator, self.api))

    def call(self, fn: Callable[[], T], timeout_s: float = 10.0) -> T:
        """Run ``fn()`` on the emulator's event loop thread and return what it returns."""

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout_s)


@contextlib.contextmanager
def kube_emulator(
    resources: Sequence[str] = DEFAULT_RESOURCES,
    startup_timeout_s: float = 60.0,
    emulator_cls: type[kmock.KubernetesEmulator] = kmock.KubernetesEmulator,
) -> Iterator[KubeEmulator]:
    """Start a kmock emulator on a loopback port; yield a :class:`KubeEmulator`; stop it on exit.

    ``emulator_cls``: a subclass adding fidelity a test needs (e.g. an Eviction subresource).
    """
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Event | None = None
    state: dict[str, Any] = {}

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        try:
            async with emulator_cls() as emulator, kmock.Server(emulator) as server:
                for resource in resources:
                    emulator.resources[resource] = {}
                state["emulator"], state["url"] = emulator, str(server.url).rstrip("/")
                ready.set()
                await stop.wait()
        except BaseException as exc:
            state["error"] = exc
            ready.set()
            raise

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), name="kmock", daemon=True)
    thread.start()
    if not ready.wait(startup_timeout_s) or "error" in state:
        raise RuntimeError(f"kmock emulator did not start: {state.get('error')!r}")
    configuration = client.Configuration()
    configuration.host = state["url"]
    api = client.ApiClient(configuration)
    kube = KubeClient(ApiConfig(state["url"], token="test-token", source="kmock"))
    try:
        yield KubeEmulator(state["emulator"], api, state["url"], loop, kube)
    finally:
        kube.close()
        api.close()
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(startup_timeout_s)
        loop.close()


def gone_once(handle: KubeEmulator, plural: str) -> None:
    """Make the next watch of ``v1/<plural>`` end with an ``ERROR`` event ``410 Gone`` (an expired watch).

    Later watches behave normally: the reaction matches only the first watch request made from now on.
    """
    status = {
        "type": "ERROR",
        "object": {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "code": 410,
            "reason": "Expired",
            "message": "too old resource version",
        },
    }
    emulator = handle.emulator
    seen = len(list(emulator[kmock.action.WATCH, kmock.resource("", "v1", plural)]))

    def install() -> None:
        criteria = emulator[kmock.action.WATCH, kmock.resource("", "v1", plural)]
        criteria[seen : seen + 1] << (status,)

    handle.call(install)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 30.0, interval_s: float = 0.02) -> None:
    """Poll ``predicate`` until it is true; raise ``TimeoutError`` naming it otherwise.

    ``timeout_s`` only bounds how long a broken test hangs: keep it generous (a loaded CI machine
    can stall a thread or a child process for seconds), never use it to assert speed.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise TimeoutError(f"condition not met within {timeout_s}s: {getattr(predicate, '__name__', predicate)!r}")


def delete_namespace_and_wait(core: client.CoreV1Api, ns: str, timeout_s: float = 120.0) -> None:
    """Delete ``ns`` (already gone is fine) and wait until the API server has removed it with everything in it;
    ``TimeoutError`` otherwise. A test that leaves pods in a terminating namespace lets the next one meet them."""
    with contextlib.suppress(client.ApiException):
        core.delete_namespace(ns)

    def gone() -> bool:
        try:
            core.read_namespace(ns)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    gone.__name__ = f"namespace {ns} deleted"
    wait_until(gone, timeout_s, interval_s=0.5)


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig pointing at ``server`` (an emulator) over plain HTTP with a dummy token."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "kmock",
                "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "tester"}}],
                "clusters": [{"name": "kmock", "cluster": {"server": server}}],
                "users": [{"name": "tester", "user": {"token": "test-token"}}],
            }
        )
    )
    return path
