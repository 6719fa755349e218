"""The process harness: the port a child logs is the port it serves on; a child that dies is reported with its log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support import processes

# A child that binds port 0 and logs the port it got, as stowage's processes and Prometheus do.
_SERVE_ON_PORT_0 = """
import http.server, sys
server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
print(f"serving on port {server.server_address[1]}", flush=True)
server.serve_forever()
"""


def _start(code: str, log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)


def test_the_logged_port_is_the_one_the_child_serves_on(tmp_path: Path) -> None:
    proc = _start(_SERVE_ON_PORT_0, tmp_path / "child.log")
    try:
        port = processes.wait_for_logged_port(proc, tmp_path / "child.log", r"serving on port (\d+)")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 200
    finally:
        processes.stop_process(proc)


def test_a_child_that_exits_before_logging_its_port_is_reported_with_its_log(tmp_path: Path) -> None:
    proc = _start("raise SystemExit('no such config')", tmp_path / "child.log")
    with pytest.raises(RuntimeError, match="no such config"):
        processes.wait_for_logged_port(proc, tmp_path / "child.log", r"serving on port (\d+)")
