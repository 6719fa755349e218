"""The extender's app served on a thread, for tests over real HTTP."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI
from stowage.extender.server import listen_socket


@contextlib.contextmanager
def serving(app: FastAPI, host: str = "127.0.0.1", startup_timeout_s: float = 60.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a thread, on a free loopback port; yield its base URL.

    For tests that speak real HTTP to the app, not an in-process client.
    """
    sock = listen_socket(host, 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.started:
        server.should_exit = True
        sock.close()
        raise RuntimeError(f"uvicorn did not start on {host}:{port} within {startup_timeout_s}s")
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(startup_timeout_s)
        if thread.is_alive():  # a connection that will not close: stop without waiting for it
            server.force_exit = True
            thread.join(startup_timeout_s)
        sock.close()
