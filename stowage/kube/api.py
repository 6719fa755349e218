"""The one Kubernetes API client of Stowage: REST verbs on paths over httpx, raw JSON parsed with orjson.

The extender's informers and the node monitor both use it. Typical use::

    client = KubeClient(load_config(kubeconfig))          # kubeconfig, exec plugin or service account
    items, version = client.list(PODS, {"fieldSelector": "spec.nodeName=n1"})
    for event in client.watch(PODS, {...}, version):     # {"type": "ADDED", "object": {...}}, ...
        ...

Objects are plain API JSON dicts: no models, no deserialisation beyond orjson (thousands of pods
per list). A non-2xx answer raises :class:`ApiError`; an ``ERROR`` event in a watch stream raises
it too (410 Gone: relist). Credentials come from :mod:`stowage.kube.credentials`: an exec plugin's
answer is cached until it expires and renewed once when the server answers 401.

Why not the official ``kubernetes`` client: importing it costs about 35 MB of resident memory, more
than half the node monitor's 60 MB budget, and its models are slow for thousands of pods.
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

import httpx
import orjson

from stowage.kube.credentials import ApiConfig, ClientCert, ExecCredential, load_config, run_exec

__all__ = [
    "JSON_PATCH",
    "MERGE_PATCH",
    "NODES",
    "PODS",
    "STRATEGIC_MERGE_PATCH",
    "ApiConfig",
    "ApiError",
    "ApiUnreachable",
    "KubeClient",
    "WatchStream",
    "load_config",
    "on_node",
]

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
#: Lists merge by their key (a pod's containers by name): a patch names only the containers it changes.
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
EVICTION_API_VERSION = "policy/v1"
DEFAULT_PAGE_SIZE = 500
"""Objects per list page: client-go's reflector pages by 500 too; bounds one response's size."""
_WATCH_GRACE_S = 30.0  # read timeout beyond the server-side watch timeout: a silent stream longer than that is dead

Obj = dict[str, Any]


def on_node(node: str) -> dict[str, str]:
    """List/watch parameters selecting the pods bound to ``node``."""
    return {"fieldSelector": f"spec.nodeName={node}"}


class ApiError(Exception):
    """A non-2xx answer (or a watch ``ERROR`` event): ``status``, ``reason`` and ``message`` from its Status.

    ``retry_after_s``: how long the server asked us to wait (``Retry-After`` header or
    ``details.retryAfterSeconds``), ``None`` when it did not say. The message includes the Status's
    ``details.causes`` (e.g. which PodDisruptionBudget refused an eviction).
    """

    def __init__(self, status: int, reason: str, message: str, retry_after_s: float | None = None) -> None:
        self.status, self.reason, self.message, self.retry_after_s = status, reason, message, retry_after_s
        super().__init__(f"HTTP {status} {reason}: {message}")

    @classmethod
    def from_status(cls, code: int, body: Any, retry_after: str | None = None, fallback: str = "") -> ApiError:
        """From a Status object (``body``; anything else counts as empty) and a ``Retry-After`` header value."""
        body = body if isinstance(body, Mapping) else {}
        details = body.get("details") if isinstance(body.get("details"), Mapping) else {}
        causes = [str(c.get("message")) for c in details.get("causes") or []
                  if isinstance(c, Mapping) and c.get("message")]
        message = str(body.get("message") or fallback)
        if causes:
            message = f"{message} ({'; '.join(causes)})"
        wait = details.get("retryAfterSeconds")
        retry = float(wait) if isinstance(wait, int | float) and wait > 0 else _retry_after(retry_after)
        return cls(int(body.get("code") or code), str(body.get("reason") or ""), message, retry)


class ApiUnreachable(ConnectionError):
    """The API server could not be reached or did not answer in time (httpx's ``TransportError``: connect,
    read or write failures and timeouts).

    An ``OSError`` (through ``ConnectionError``), so every ``except OSError`` around an API call handles it: a
    network failure must cost a retry of that call, never the loop around it.
    """


def _retry_after(header: str | None) -> float | None:
    """``Retry-After``: delta seconds or an HTTP date."""
    if not header:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())


def _raise_for(response: httpx.Response) -> None:
    """Raise :class:`ApiError` for a non-2xx response whose body has been read."""
    if response.is_success:
        return
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = None
    error = ApiError.from_status(response.status_code, body, response.headers.get("Retry-After"),
                                 fallback=response.text[:200])
    if not error.reason:
        error = ApiError(error.status, response.reason_phrase, error.message, error.retry_after_s)
    raise error


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Split a byte stream into lines without re-copying a long line once per chunk."""
    partial: list[bytes] = []
    for chunk in chunks:
        if b"\n" not in chunk:
            partial.append(chunk)
            continue
        lines = chunk.split(b"\n")
        if partial:
            partial.append(lines[0])
            lines[0] = b"".join(partial)
            partial = []
        last = lines.pop()
        if last:
            partial.append(last)
        yield from lines
    if partial:
        yield b"".join(partial)


class WatchStream:
    """The events of one watch request, read as they arrive: iterate it; :meth:`interrupt` ends it from any thread.

    Yields ``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK`` events as dicts; raises :class:`ApiError`
    on an ``ERROR`` event or a non-2xx answer; stops when the server closes the stream (its
    ``timeoutSeconds``) or after :meth:`interrupt`.
    """

    def __init__(self, client: KubeClient, path: str, params: Mapping[str, Any], timeout: httpx.Timeout) -> None:
        self._client, self._path, self._params, self._timeout = client, path, params, timeout
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._interrupted = False
        self._events = self._read()

    def __iter__(self) -> WatchStream:
        return self

    def __next__(self) -> Obj:
        return next(self._events)

    def close(self) -> None:
        """Stop reading and release the connection (from the thread that iterates)."""
        self._events.close()

    def interrupt(self) -> None:
        """End the stream: a thread blocked reading it returns (closing the HTTP client alone would not wake it)."""
        with self._lock:
            self._interrupted = True
            sock = self._socket
        if sock is not None:
            # socket.socket's own shutdown: an SSLSocket's override would drop the TLS object under the reader.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def _read(self) -> Iterator[Obj]:
        client = self._client
        client._streams.add(self)  # before the request: interrupt_watch() must reach a stream still connecting
        response: httpx.Response | None = None
        try:
            response = client._send("GET", self._path, params=self._params, timeout=self._timeout, stream=True)
            if not response.is_success:
                response.read()
                _raise_for(response)
            stream = response.extensions.get("network_stream")
            with self._lock:
                self._socket = stream.get_extra_info("socket") if stream is not None else None
                if self._interrupted:
                    return
            for line in _lines(response.iter_bytes()):
                if not line.strip():
                    continue
                event = orjson.loads(line)
                if not isinstance(event, dict):
                    continue
                if event.get("type") == "ERROR":
                    raise ApiError.from_status(500, event.get("object"))
                yield event
        except httpx.TransportError as exc:
            if not self._interrupted:
                raise ApiUnreachable(f"watch {self._path}: {type(exc).__name__}: {exc}") from exc
        except OSError:
            if not self._interrupted:
                raise
        finally:
            client._streams.discard(self)
            if response is not None:
                response.close()


class KubeClient:
    """Synchronous, thread-safe access to one API server (one httpx connection pool).

    Generic verbs take an API path (``/api/v1/nodes``, ``/apis/policy/v1/...``); typed helpers
    cover the node monitor's calls. ``timeout_s`` bounds each request except watches, which wait
    up to their own server-side timeout plus 30 s.
    """

    def __init__(self, config: ApiConfig, *, timeout_s: float = 10.0, user_agent: str = "stowage") -> None:
        self.config = config
        self._timeout = httpx.Timeout(timeout_s)
        self._user_agent = user_agent
        self._lock = threading.Lock()
        self._credential: ExecCredential | None = None  # the exec plugin's last answer
        self._cert: ClientCert | None = config.client_cert
        self._http = self._new_http(self._cert)
        self._streams: set[WatchStream] = set()

    def _new_http(self, cert: ClientCert | None) -> httpx.Client:
        https = self.config.server.startswith("https")
        return httpx.Client(
            base_url=self.config.server,
            verify=self.config.ssl_context(cert) if https else True,
            timeout=self._timeout,
            headers={"User-Agent": self._user_agent, "Accept": "application/json"},
        )

    # --- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        self.interrupt_watch()
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def interrupt_watch(self) -> None:
        """End every open watch stream of this client (threads reading them return)."""
        for stream in list(self._streams):
            stream.interrupt()

    # --- credentials -------------------------------------------------------------------------------

    def _exec_credential(self, stale: ExecCredential | None = None) -> ExecCredential:
        """The exec plugin's answer: cached until it expires, or renewed when it is ``stale`` (a 401 for it)."""
        assert self.config.exec is not None
        with self._lock:
            current = self._credential
            if current is None or current is stale or current.expired(time.time()):
                current = self._credential = run_exec(self.config.exec)
                if current.client_cert is not None and current.client_cert != self._cert:
                    old, self._cert = self._http, current.client_cert
                    self._http = self._new_http(self._cert)
                    old.close()  # open watches on it end; their informers reconnect with the new certificate
            return current

    def _prepare(self, stale: ExecCredential | None) -> tuple[httpx.Client, dict[str, str], ExecCredential | None]:
        token = self.config.bearer()
        credential = None
        if token is None and self.config.exec is not None:
            credential = self._exec_credential(stale)
            token = credential.token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self._http, headers, credential

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: httpx.Timeout | None = None,
        stream: bool = False,
    ) -> httpx.Response:
        """One request; with an exec plugin, a 401 renews the credential and retries once."""
        content = orjson.dumps(body) if body is not None else None
        stale: ExecCredential | None = None
        while True:
            http, headers, credential = self._prepare(stale)
            if content is not None:
                headers["Content-Type"] = content_type
            request = http.build_request(method, path, params=params, content=content, headers=headers,
                                         timeout=timeout or self._timeout)
            try:
                response = http.send(request, stream=stream)
            except httpx.TransportError as exc:
                raise ApiUnreachable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
            if response.status_code != 401 or credential is None or stale is not None:
                return response
            response.close()
            stale = credential

    def _json(self, method: str, path: str, **kwargs: Any) -> Obj:
        response = self._send(method, path, **kwargs)  # not streamed: the body is read before it returns
        _raise_for(response)
        data = orjson.loads(response.content) if response.content else {}
        return data if isinstance(data, dict) else {}

    # --- generic verbs -----------------------------------------------------------------------------

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Obj:
        return self._json("GET", path, params=params)

    def get_text(self, path: str) -> str:
        """GET a non-JSON endpoint (``/metrics``) as text; raises :class:`ApiError` like the JSON verbs."""
        response = self._send("GET", path)
        _raise_for(response)
        return response.text

    def list(
        self,
        path: str,
        params: Mapping[str, Any] | None = None,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        timeout_s: float | None = None,
    ) -> tuple[list[Obj], str | None]:
        """Every object under ``path`` (following ``continue`` tokens) and the list's resourceVersion.

        An expired ``continue`` token raises :class:`ApiError` 410: list again from the start.
        """
        timeout = httpx.Timeout(timeout_s) if timeout_s is not None else None
        query: dict[str, Any] = {**(params or {}), "limit": page_size}
        items: list[Obj] = []
        while True:
            body = self._json("GET", path, params=query, timeout=timeout)
            items.extend(body.get("items") or [])
            meta = body.get("metadata") or {}
            if not meta.get("continue"):
                return items, meta.get("resourceVersion")
            query["continue"] = meta["continue"]

    def watch(
        self,
        path: str,
        params: Mapping[str, Any] | None = None,
        resource_version: str | None = None,
        timeout_s: float = 300,
    ) -> WatchStream:
        """Events after ``resource_version`` (bookmarks included) until the server ends the stream at ``timeout_s``."""
        query: dict[str, Any] = {**(params or {}), "watch": "true", "allowWatchBookmarks": "true",
                                 "timeoutSeconds": int(timeout_s)}
        if resource_version:
            query["resourceVersion"] = resource_version
        timeout = httpx.Timeout(self._timeout.connect, read=timeout_s + _WATCH_GRACE_S)
        return WatchStream(self, path, query, timeout)

    def create(self, path: str, body: Mapping[str, Any]) -> Obj:
        return self._json("POST", path, body=body)

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH) -> Obj:
        return self._json("PATCH", path, body=body, content_type=content_type)

    def delete(self, path: str, body: Mapping[str, Any] | None = None) -> Obj:
        """Delete; ``body`` is DeleteOptions (e.g. ``{"gracePeriodSeconds": 0}``)."""
        return self._json("DELETE", path, body=body)

    # --- the node monitor's calls ------------------------------------------------------------------

    def get_node(self, name: str) -> Obj:
        return self.get(f"{NODES}/{name}")

    def list_pods(self, node: str) -> tuple[list[Obj], str | None]:
        """This node's pods and the list's resourceVersion."""
        return self.list(PODS, on_node(node))

    def watch_pods(self, node: str, resource_version: str | None, timeout_s: float = 300) -> WatchStream:
        return self.watch(PODS, on_node(node), resource_version, timeout_s)

    def evict(self, namespace: str, name: str, uid: str | None = None, resource_version: str | None = None) -> Obj:
        """Create a ``policy/v1`` Eviction; the server checks PodDisruptionBudgets (429 when one forbids it).

        ``uid``: only the pod we measured, not a same-named successor; ``resource_version``: only the pod as we
        saw it (409 Conflict when it changed since, e.g. promoted to regular)."""
        body: Obj = {"apiVersion": EVICTION_API_VERSION, "kind": "Eviction",
                     "metadata": {"name": name, "namespace": namespace}}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            body["deleteOptions"] = {"preconditions": preconditions}
        return self.create(f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body)

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> Obj:
        return self.create(f"/api/v1/namespaces/{namespace}/events", event)
