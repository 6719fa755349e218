"""A list-then-watch loop over one resource, on a thread, with :class:`stowage.kube.api.KubeClient`.

Bodies are read raw and parsed with orjson (thousands of pods per list); the callbacks get plain
API JSON dicts.

Life cycle::

    list ──► on_replace(items) ──► watch from the list's resourceVersion ──► on_event(type, obj) ...
      ▲                                   │ stream ends (server timeout) → watch again from the last version
      │                                   │ 410 Gone (ERROR event or HTTP status) → relist at once
      └──── backoff (exponential, capped, jittered) ◄── any other API or network error

``stop()`` ends the loop promptly: it interrupts the open watch stream.

One object never stops the loop: a callback that raises on one watch event is logged (once per
object) and counted (``callback_errors``), and the watch goes on. A failing list or watch is retried
forever; :meth:`Informer.healthy` says when it has been failing for longer than ``stale_after_s``, so
readiness can tell a cache that follows the cluster from one that stopped following it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from stowage.kube import api
from stowage.kube.records import pod_key

__all__ = ["BOUND_PODS", "STALE_AFTER_S", "Backoff", "CallbackFailed", "Informer", "cluster_informers"]

log = logging.getLogger(__name__)

#: Pods that hold node resources: bound to a node and not finished.
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
#: How long an informer may fail to list or watch before it is unhealthy: two retries at the backoff's cap.
STALE_AFTER_S = 60.0
#: Objects whose callback failure was logged at WARNING; later failures of the same one go to DEBUG.
_LOGGED_FAILURES = 1024


class CallbackFailed(RuntimeError):
    """``on_replace`` raised: the consumer did not take the list; retried (relisted) like a failed list."""


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

    ``path`` is the collection (``/api/v1/nodes``), ``params`` its list/watch query (field or
    label selectors). ``on_replace(items)`` receives the full list after every (re)list;
    ``on_event(type, obj)`` each ADDED / MODIFIED / DELETED object. Both run on the informer's
    thread and must not block for long. ``on_resync()``, if given, runs before every list and every
    new watch, so at least every ``watch_timeout_s`` (refresh a related object there); its errors
    are logged, not fatal. ``synced`` is set after the first successful list.

    ``on_error(exc)``, if given, sees every failure the loop backs off from (not a routine 410).
    When it returns True the consumer has reported the failure itself (an optional resource:
    one warning, not one per retry) and the retry is logged at DEBUG instead of WARNING.

    ``on_event`` raising is that object's problem, not the stream's: logged (once per object at
    WARNING), counted in ``callback_errors``, and the watch continues. ``on_replace`` raising fails
    the list (:class:`CallbackFailed`), which is retried. Health (:meth:`healthy`, :meth:`unhealthy`)
    is measured on ``clock`` (monotonic seconds): the loop is failing from its first failure until a
    list completes or a watch delivers an event or ends normally.
    """

    def __init__(
        self,
        client: api.KubeClient,
        path: str,
        *,
        name: str,
        on_replace: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        params: Mapping[str, Any] | None = None,
        on_resync: Callable[[], None] | None = None,
        on_error: Callable[[Exception], bool] | None = None,
        watch_timeout_s: int = 300,
        request_timeout_s: float = 30.0,
        backoff: Backoff | None = None,
        page_size: int = api.DEFAULT_PAGE_SIZE,
        stale_after_s: float = STALE_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._client = client
        self._path = path
        self._params = dict(params or {})
        self._on_replace = on_replace
        self._on_event = on_event
        self._on_resync = on_resync
        self._on_error = on_error
        self._watch_timeout_s = int(watch_timeout_s)
        self._request_timeout_s = float(request_timeout_s)
        self._backoff = backoff or Backoff()
        self._page_size = int(page_size)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: api.WatchStream | None = None
        self.synced = threading.Event()
        self.relists = 0  # how many times the loop listed (1 + recoveries); for tests and logs
        self.last_error: str | None = None
        self.stale_after_s = float(stale_after_s)
        self._clock = clock
        self._failing_since: float | None = None  # clock() of the first failure since the loop last made progress
        self.callback_errors = 0  # watch events whose on_event raised
        self._failed_objects: set[str] = set()  # objects whose on_event failure was logged at WARNING

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> Informer:
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.interrupt()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- health --------------------------------------------------------------------------------

    def failing_for_s(self, now: float | None = None) -> float:
        """Seconds the loop has been failing to list or watch (0 while it makes progress)."""
        since = self._failing_since
        return 0.0 if since is None else max(0.0, (self._clock() if now is None else now) - since)

    def unhealthy(self, now: float | None = None) -> str | None:
        """Why the consumer's copy cannot be trusted to follow the cluster now, or None when it can.

        Not synced yet; failing to list or watch for longer than ``stale_after_s`` (the copy is as old as
        that); or the loop's thread ended without ``stop()``.
        """
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return "its thread ended"
        failing = self.failing_for_s(now)
        if failing > self.stale_after_s:
            return f"failing to list or watch for {failing:.0f}s (limit {self.stale_after_s:g}s): {self.last_error}"
        if not self.synced.is_set():
            return "not synced yet" + (f" (last error: {self.last_error})" if failing > 0 else "")
        return None

    def healthy(self, now: float | None = None) -> bool:
        """Synced, and not failing to list or watch for longer than ``stale_after_s``."""
        return self.unhealthy(now) is None

    def _progress(self) -> None:
        self._failing_since = None

    # --- the loop ------------------------------------------------------------------------------

    def run(self) -> None:
        """List, then watch until stopped; recover from every failure. Blocks."""
        while not self._stop.is_set():
            try:
                version = self._list()
                self._backoff.reset()
                while not self._stop.is_set():
                    version = self._watch(version)
            except Exception as exc:  # any API/network failure: back off and relist
                if self._stop.is_set():
                    break
                if isinstance(exc, api.ApiError) and exc.status == 410:
                    # The version watched from (or a continue token) expired: routine, relist at once.
                    log.info("informer %s: %s; relisting", self.name, exc)
                    continue
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self._failing_since is None:
                    self._failing_since = self._clock()
                delay = self._backoff.next_delay()
                if isinstance(exc, api.ApiError) and exc.retry_after_s is not None:
                    delay = max(delay, exc.retry_after_s)  # the server said how long it needs
                level = logging.DEBUG if self._reported(exc) else logging.WARNING
                log.log(level, "informer %s: %s; retrying in %.1fs", self.name, self.last_error, delay)
                self._stop.wait(delay)

    def _reported(self, exc: Exception) -> bool:
        if self._on_error is None:
            return False
        try:
            return bool(self._on_error(exc))
        except Exception:  # a broken hook must not stop the loop: log the failure as usual
            log.exception("informer %s: on_error hook failed", self.name)
            return False

    def _resync(self) -> None:
        if self._on_resync is None:
            return
        try:
            self._on_resync()
        except Exception as exc:  # e.g. no RBAC for the related object: keep following this resource regardless
            log.warning("informer %s: resync hook failed: %s", self.name, exc)

    def _list(self) -> str | None:
        """A consistent list in pages of ``page_size`` (the API server's ``continue`` tokens)."""
        self._resync()
        items, version = self._client.list(self._path, self._params, page_size=self._page_size,
                                           timeout_s=self._request_timeout_s)
        try:
            self._on_replace(items)
        except Exception as exc:  # the consumer's bug: fail this list (retried), with the traceback logged
            log.debug("informer %s: on_replace failed", self.name, exc_info=True)
            raise CallbackFailed(f"on_replace failed: {type(exc).__name__}: {exc}") from exc
        self.relists += 1
        self.synced.set()
        self._progress()
        return version

    def _watch(self, version: str | None) -> str | None:
        self._resync()
        stream = self._client.watch(self._path, self._params, version, self._watch_timeout_s)
        self._stream = stream
        if self._stop.is_set():
            stream.interrupt()
        try:
            for event in stream:
                if self._stop.is_set():
                    break
                self._progress()
                kind, obj = event.get("type"), event.get("object")
                obj = obj if isinstance(obj, dict) else {}
                meta = obj.get("metadata")
                version = (meta.get("resourceVersion") if isinstance(meta, dict) else None) or version
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._deliver(kind, obj)
        finally:
            self._stream = None
            stream.close()
        if not self._stop.is_set():
            self._progress()  # the server ended the stream at its timeout: the watch worked
        return version

    def _deliver(self, kind: str, obj: dict[str, Any]) -> None:
        """``on_event``; its failure costs this object only (logged once per object, counted)."""
        try:
            self._on_event(kind, obj)
        except Exception:
            self.callback_errors += 1
            key = pod_key(obj)  # uid, or namespace/name: any object's
            first = key not in self._failed_objects
            if first:
                if len(self._failed_objects) >= _LOGGED_FAILURES:
                    self._failed_objects.clear()
                self._failed_objects.add(key)
            log.log(logging.WARNING if first else logging.DEBUG, "informer %s: %s event of %s not applied",
                    self.name, kind, key, exc_info=True)


def cluster_informers(client: api.KubeClient, model: Any, **informer_kwargs: Any) -> list[Informer]:
    """The two informers that keep a cluster model in step: every Node, and the bound, unfinished Pods.

    ``model`` has ``replace_nodes``/``apply_node_event`` and ``replace_pods``/``apply_pod_event``
    (``stowage.kube.cluster.ClusterModel``). The informers are returned unstarted;
    ``informer_kwargs`` (backoff, watch timeout) go to both.
    """
    return [
        Informer(
            client,
            api.NODES,
            name="nodes",
            on_replace=model.replace_nodes,
            on_event=model.apply_node_event,
            **informer_kwargs,
        ),
        Informer(
            client,
            api.PODS,
            name="pods",
            on_replace=model.replace_pods,
            on_event=model.apply_pod_event,
            params={"fieldSelector": BOUND_PODS},
            **informer_kwargs,
        ),
    ]
