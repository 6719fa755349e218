"""The process harness: a child that loses the race for its port is started again on another one."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import httpx
import pytest

from tests.support import processes


def _http_server(port: int) -> list[str]:
    return [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_child_whose_port_was_taken_is_restarted_on_a_free_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        picks = iter([taken])
        real = processes.free_port
        monkeypatch.setattr(processes, "free_port", lambda: next(picks, None) or real())
        proc, port = processes.start_on_free_port(_http_server, _answers, tmp_path / "child.log", cwd=tmp_path)
        try:
            assert port != taken and _answers(port)
        finally:
            processes.stop_process(proc)


def test_a_child_that_fails_for_another_reason_is_reported_with_its_log(tmp_path: Path) -> None:
    def broken(port: int) -> list[str]:
        return [sys.executable, "-c", "raise SystemExit('no such config')"]

    with pytest.raises(RuntimeError, match="no such config"):
        processes.start_on_free_port(broken, _answers, tmp_path / "child.log")
