"""``GET /metrics`` plus health probes on a background thread (the operator's and the node monitor's endpoint),
and :class:`CountsCollector`, a counter whose values another object keeps (every component's).

A probe is a function answering ``(ok, text)``: 200 with the text when ok, else 503, so a kubelet probe and a
person with ``curl`` read the same reason. The extender serves its probes from its FastAPI app instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

__all__ = ["CountsCollector", "MetricsServer", "Probe"]

Probe = Callable[[], tuple[bool, str]]
_TEXT = "text/plain; charset=utf-8"


class MetricsServer:
    """Serves ``render()`` at ``/metrics`` and each of ``probes`` (path → probe) on ``address:port`` (0: any)."""

    def __init__(self, render: Callable[[], bytes], probes: Mapping[str, Probe], address: str, port: int) -> None:
        routes = dict(probes)
        hint = ", ".join(["/metrics", *routes]).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, render(), CONTENT_TYPE_LATEST)
                elif path in routes:
                    try:
                        ok, text = routes[path]()
                    except Exception as exc:  # a broken probe is a failed probe, never a dropped connection
                        ok, text = False, f"probe failed: {type(exc).__name__}: {exc}\n"
                    self._send(200 if ok else 503, text.encode(), _TEXT)
                else:
                    self._send(404, b"not found: try " + hint + b"\n", _TEXT)

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # scrapes and probes are not news
                return

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, name="metrics-http", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class CountsCollector(Collector):
    """A counter ``name{label}`` read at scrape time from ``counts()`` (label value → count so far), for counts an
    object keeps anyway (the cluster model's unreadable objects): no second tally to keep in step."""

    def __init__(self, name: str, documentation: str, label: str, counts: Callable[[], Mapping[str, int]]) -> None:
        self._name, self._documentation, self._label, self._counts = name, documentation, label, counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self._name, self._documentation, labels=[self._label])
        for value, count in self._counts().items():
            family.add_metric([value], float(count))
        yield family
