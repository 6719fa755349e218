"""A small HTTP proxy between kube-scheduler and the extender that can inject faults and records bodies.

Usage::

    with FaultProxy("http://127.0.0.1:8888") as proxy:     # listens on 127.0.0.1:<any free port>
        ... kube-scheduler's urlPrefix = proxy.url ...
        proxy.mode = Mode.ERROR_500                         # PASS, ERROR_500, ERROR_FIELD, HANG
        proxy.bodies["/filter"]                             # request bodies forwarded, parsed, in order

Modes:

- ``PASS``: forward to :attr:`FaultProxy.upstream` and relay its status and body. When the upstream
  cannot be reached (the extender was killed), the connection is closed without an answer, as a dead
  peer would leave it: kube-scheduler sees a transport error.
- ``ERROR_500``: answer HTTP 500 (kube-scheduler: "failed <verb> with extender ..., code 500").
- ``ERROR_FIELD``: answer 200 ``{"Error": "injected"}`` (an extender reporting its own failure).
- ``HANG``: answer nothing until :meth:`FaultProxy.release` (or ``hang_s``, or close), i.e. past
  kube-scheduler's ``httpTimeout``.

Only bodies of requests actually forwarded are recorded in :attr:`FaultProxy.bodies` (the answers in
:attr:`FaultProxy.answers`);
:attr:`FaultProxy.received` counts every request by path, whatever the mode.
"""

from __future__ import annotations

import enum
import http.client
import json
import threading
import urllib.parse
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FaultProxy", "Mode"]


class Mode(enum.StrEnum):
    PASS = "pass"
    ERROR_500 = "500"
    ERROR_FIELD = "error-field"
    HANG = "hang"


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: FaultProxy


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the caller gave up (timeout): nothing to answer
            self.close_connection = True

    def do_GET(self) -> None:
        self._forward(b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._forward(self.rfile.read(length) if length else b"")

    def _forward(self, body: bytes) -> None:
        proxy = self.server.proxy
        path = self.path
        mode = proxy.note_received(path)
        if mode is Mode.ERROR_500:
            self._answer(500, b"injected failure\n", "text/plain")
            return
        if mode is Mode.ERROR_FIELD:
            self._answer(200, b'{"Error": "injected"}')
            return
        if mode is Mode.HANG:
            proxy.wait_released()
            self.close_connection = True
            return
        upstream = urllib.parse.urlsplit(proxy.upstream)
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=proxy.upstream_timeout_s)
        try:
            headers = {"Content-Type": self.headers.get("Content-Type") or "application/json"}
            conn.request(self.command, path, body=body if self.command == "POST" else None, headers=headers)
            response = conn.getresponse()
            data = response.read()
            status, content_type = response.status, response.getheader("Content-Type") or "application/json"
        except OSError:
            # Upstream down (killed) or broken: leave the caller with a transport error, as a dead extender would.
            self.close_connection = True
            return
        finally:
            conn.close()
        if self.command == "POST":
            proxy.note_forwarded(path, body, status, data)
        self._answer(status, data, content_type)


class FaultProxy:
    """A threaded ``http.server`` on 127.0.0.1 (any free port) in front of ``upstream``."""

    def __init__(self, upstream: str = "", hang_s: float = 60.0, upstream_timeout_s: float = 30.0) -> None:
        self.upstream = upstream
        self.hang_s = hang_s
        self.upstream_timeout_s = upstream_timeout_s
        self._mode = Mode.PASS
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()
        self.bodies: dict[str, list[Any]] = defaultdict(list)
        self.answers: dict[str, list[tuple[int, Any]]] = defaultdict(list)
        self.received: dict[str, int] = defaultdict(int)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def mode(self) -> Mode:
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        with self._lock:
            self._mode = Mode(mode)
            if self._mode is Mode.HANG:
                self._released.clear()
            else:
                self._released.set()

    def release(self) -> None:
        """Let hanging requests go (they end without an answer)."""
        self._released.set()

    def wait_released(self) -> None:
        self._released.wait(self.hang_s)

    def note_received(self, path: str) -> Mode:
        with self._lock:
            self.received[path] += 1
            return self._mode

    def note_forwarded(self, path: str, body: bytes, status: int, answer: bytes) -> None:
        with self._lock:
            self.bodies[path].append(_parse(body))
            self.answers[path].append((status, _parse(answer)))

    def clear(self) -> None:
        with self._lock:
            self.bodies.clear()
            self.answers.clear()
            self.received.clear()

    def count(self, path: str) -> int:
        with self._lock:
            return len(self.bodies.get(path, ()))

    def snapshot(self, path: str) -> list[Any]:
        """The bodies forwarded to ``path`` so far."""
        with self._lock:
            return list(self.bodies.get(path, ()))

    def exchanges(self, path: str) -> list[tuple[Any, int, Any]]:
        """``(request body, status, answer body)`` of every request forwarded to ``path``."""
        with self._lock:
            return [(b, s, a) for b, (s, a) in zip(self.bodies.get(path, ()), self.answers.get(path, ()), strict=True)]

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10.0)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
