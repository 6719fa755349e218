"""kmock's Kubernetes emulator on a background thread, with the Eviction subresource, for sync code.

kmock 0.8 answers ``POST .../pods/<name>/eviction`` with 404 (no action is
guessed for a POST on a named object), so :class:`EvictingEmulator` — a small
subclass, as DESIGN.md's testing section allows — implements it as the API
server does: the pod is deleted (a DELETED watch event follows), or ``429`` is
returned when a PodDisruptionBudget would be violated (simulated by naming the
pod in ``refuse``). Everything else is kmock's own behaviour.

The node monitor is synchronous (threads + httpx); the shared harness in
``tests/support/kube.py`` runs the emulator's asyncio loop on its own thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp.web
import attrs
import kmock

from tests.support.kube import KubeEmulator, kube_emulator, write_kubeconfig

__all__ = ["EVENTS", "NODES", "PODS", "Emulator", "EvictingEmulator", "running_emulator", "write_kubeconfig"]

PODS = "v1/pods"
EVENTS = "v1/events"
NODES = "v1/nodes"
T = TypeVar("T")


@attrs.define(kw_only=True)
class EvictingEmulator(kmock.KubernetesEmulator):
    """kmock's emulator plus ``policy/v1`` Evictions (see the module docstring)."""

    refuse: set[str] = attrs.field(factory=set)
    evictions: list[tuple[str, str, int]] = attrs.field(factory=list)  # (namespace, name, HTTP status), in order

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        res = request.resource
        is_pod = res is not None and res.plural == "pods"
        if is_pod and request.subresource == "eviction" and request.method == kmock.method.POST:
            return await self._evict(request)
        return await super()._handle(request)

    async def _evict(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        ns, name = request.namespace, request.name
        if name in self.refuse:
            self.evictions.append((ns, name, 429))
            return aiohttp.web.json_response({
                "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 429, "reason": "TooManyRequests",
                "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget pdb needs "
                                        "1 healthy pods and has 1 currently"}]},
            }, status=429)
        key = (kmock.resource(PODS), ns, name)
        async with self._lock:
            if key not in self.objects or self.objects[key].deleted:
                self.evictions.append((ns, name, 404))
                return aiohttp.web.json_response({"kind": "Status", "status": "Failure", "code": 404,
                                                  "reason": "NotFound", "message": f'pods "{name}" not found'},
                                                 status=404)
            raw = self.objects[key].raw
            self.objects[key].delete()
            await self._buses[kmock.resource(PODS)].put({"type": "DELETED", "object": raw})
        self.evictions.append((ns, name, 201))
        return aiohttp.web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201},
                                         status=201)


@dataclass
class Emulator:
    """A running :class:`EvictingEmulator` (via ``tests.support.kube``) with thread-safe helpers."""

    handle: KubeEmulator

    @property
    def emu(self) -> EvictingEmulator:
        return self.handle.emulator  # type: ignore[return-value]

    @property
    def url(self) -> str:
        return self.handle.url

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the emulator's loop thread and return its result."""
        return self.handle.call(fn)

    def put(self, resource: str, obj: dict[str, Any]) -> None:
        """Store an object directly (no watch event: create through the API for that)."""
        meta = obj["metadata"]

        def store() -> None:
            self.emu.objects[resource, meta.get("namespace"), meta["name"]] = obj

        self.call(store)

    def live(self, resource: str) -> list[dict[str, Any]]:
        """Current (not deleted) objects of a resource."""

        def read() -> list[dict[str, Any]]:
            out = []
            for (res, _ns, _name), obj in self.emu.objects.items():
                if res == kmock.resource(resource) and not obj.deleted:
                    out.append(dict(obj.raw))
            return out

        return self.call(read)

    def requests(self) -> list[kmock.Request]:
        return self.call(lambda: list(self.emu))  # iterating a kmock handler yields its requests


@contextlib.contextmanager
def running_emulator() -> Iterator[Emulator]:
    """The shared kmock harness (``tests/support/kube.py``) with the Eviction subresource added."""
    with kube_emulator(emulator_cls=EvictingEmulator) as handle:
        yield Emulator(handle)


