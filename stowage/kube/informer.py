"""A list-then-watch loop over one resource, on a thread, with the ``kubernetes`` client.

Why not ``kubernetes.watch.Watch``: it deserialises every object into client models
(slow for thousands of pods) and, with ``deserialize=False``, mishandles ``ERROR``
events. Here bodies are read raw and parsed with orjson; the callbacks get plain
API JSON dicts.

Life cycle::

    list ──► on_replace(items) ──► watch from the list's resourceVersion ──► on_event(type, obj) ...
      ▲                                   │ stream ends (server timeout) → watch again from the last version
      │                                   │ 410 Gone (ERROR event or HTTP status) → relist at once
      └──── backoff (exponential, capped, jittered) ◄── any other API or network error

``stop()`` ends the loop promptly: it closes the open watch response.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

__all__ = ["BOUND_PODS", "Backoff", "Informer", "WatchExpired", "cluster_informers"]

log = logging.getLogger(__name__)

#: Pods that hold node resources: bound to a node and not finished.
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"

ListFunction = Callable[..., Any]
"""A ``CoreV1Api`` list method such as ``list_node`` or ``list_pod_for_all_namespaces``."""


class WatchExpired(Exception):
    """The resourceVersion we watch from is too old (HTTP 410 Gone): relist."""


class Backoff:
    """Exponential backoff with full jitter: ``uniform(0, min(cap, base·2^attempt))`` seconds."""

    def __init__(self, base_s: float = 0.5, cap_s: float = 30.0, rng: random.Random | None = None) -> None:
        self.base_s, self.cap_s = base_s, cap_s
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        delay = self._rng.uniform(0.0, min(self.cap_s, self.base_s * (2**self.attempt)))
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0


class Informer:
    """Keep a consumer in step with one resource through list + watch, on a daemon thread.

    ``on_replace(items)`` receives the full list after every (re)list; ``on_event(type,
    obj)`` each ADDED / MODIFIED / DELETED object. Both run on the informer's thread
    and must not block for long. ``synced`` is set after the first successful list.
    """

    def __init__(
        self,
        list_fn: ListFunction,
        *,
        name: str,
        on_replace: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        watch_timeout_s: int = 300,
        request_timeout_s: float = 30.0,
        backoff: Backoff | None = None,
        list_kwargs: Mapping[str, Any] | None = None,
        page_size: int = 500,
    ) -> None:
        self.name = name
        self._list_fn = list_fn
        self._on_replace = on_replace
        self._on_event = on_event
        self._watch_timeout_s = int(watch_timeout_s)
        self._request_timeout_s = float(request_timeout_s)
        self._backoff = backoff or Backoff()
        self._list_kwargs = dict(list_kwargs or {})
        self._page_size = int(page_size)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self._lock = threading.Lock()
        self.synced = threading.Event()
        self.relists = 0  # how many times the loop listed (1 + recoveries); for tests and logs
        self.last_error: str | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> Informer:
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            # shutdown() (urllib3 ≥ 2.3) interrupts a read blocked in another thread; close() alone does not.
            with contextlib.suppress(Exception):
                getattr(response, "shutdown", response.close)()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # --- the loop ------------------------------------------------------------------------------

    def run(self) -> None:
        """List, then watch until stopped; recover from every failure. Blocks."""
        while not self._stop.is_set():
            try:
                version = self._list()
                self._backoff.reset()
                while not self._stop.is_set():
                    version = self._watch(version)
            except WatchExpired:
                log.info("informer %s: watch expired (410 Gone); relisting", self.name)
            except Exception as exc:  # any API/network failure: back off and relist
                if self._stop.is_set():
                    break
                self.last_error = f"{type(exc).__name__}: {exc}"
                delay = self._backoff.next_delay()
                log.warning("informer %s: %s; retrying in %.1fs", self.name, self.last_error, delay)
                self._stop.wait(delay)

    def _call(self, **kwargs: Any) -> Any:
        response = self._list_fn(_preload_content=False, **self._list_kwargs, **kwargs)
        with self._lock:
            self._response = response
        if self._stop.is_set():
            response.close()
        return response

    def _release(self, response: Any) -> None:
        with self._lock:
            self._response = None
        try:
            response.close()
            response.release_conn()
        except Exception:  # best effort
            pass

    def _list(self) -> str | None:
        """A consistent list in pages of ``page_size`` (the API server's ``continue`` tokens)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"_request_timeout": self._request_timeout_s, "limit": self._page_size}
            if token:
                kwargs["_continue"] = token
            try:
                response = self._call(**kwargs)
            except ApiException as exc:
                if exc.status == 410:  # the continue token expired: start the list again
                    raise WatchExpired() from exc
                raise
            try:
                body = orjson.loads(response.data)
            finally:
                self._release(response)
            items.extend(body.get("items") or [])
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
        self._on_replace(items)
        self.relists += 1
        self.synced.set()
        return meta.get("resourceVersion")

    def _watch(self, version: str | None) -> str | None:
        kwargs: dict[str, Any] = {
            "watch": True,
            "allow_watch_bookmarks": True,
            "timeout_seconds": self._watch_timeout_s,
            # connect timeout, read timeout: a silent stream longer than the server timeout is dead.
            "_request_timeout": (self._request_timeout_s, self._watch_timeout_s + self._request_timeout_s),
        }
        if version:
            kwargs["resource_version"] = version
        try:
            response = self._call(**kwargs)
        except ApiException as exc:
            if exc.status == 410:
                raise WatchExpired() from exc
            raise
        try:
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    break
                if not line or line.isspace():
                    continue
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired()
                    raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind == "BOOKMARK":
                    continue
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._on_event(kind, obj)
        finally:
            self._release(response)
        return version


def cluster_informers(core: Any, model: Any, **informer_kwargs: Any) -> list[Informer]:
    """The two informers that keep a cluster model in step: every Node, and the bound, unfinished Pods.

    ``core`` is a ``CoreV1Api``; ``model`` has ``replace_nodes``/``apply_node_event`` and
    ``replace_pods``/``apply_pod_event`` (``stowage.kube.cluster.ClusterModel``). The informers are
    returned unstarted; ``informer_kwargs`` (backoff, watch timeout) go to both.
    """
    return [
        Informer(
            core.list_node,
            name="nodes",
            on_replace=model.replace_nodes,
            on_event=model.apply_node_event,
            **informer_kwargs,
        ),
        Informer(
            core.list_pod_for_all_namespaces,
            name="pods",
            on_replace=model.replace_pods,
            on_event=model.apply_pod_event,
            list_kwargs={"field_selector": BOUND_PODS},
            **informer_kwargs,
        ),
    ]
