"""Child processes started by tests: wait for the port they bound, stop them politely, then firmly.

Ports: a port picked free by the test and bound later by the child can be taken in between
(by any socket, e.g. an outgoing connection's ephemeral port). Children that accept port 0
are started on it and report the port they bound (:func:`wait_for_logged_port`); the others
are restarted on a new port when the bind fails (:func:`start_on_free_port`).
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["BIND_FAILED", "free_port", "start_on_free_port", "stop_process", "wait_for_logged_port"]

#: How a bind failure reads in a child's log (Python's OSError, uvicorn, Go's net package).
BIND_FAILED = re.compile(r"address already in use|Errno 98", re.IGNORECASE)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (see the module docstring before using it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> int:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL; return the exit code."""
    proc.terminate()
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def wait_for_logged_port(proc: subprocess.Popen, log: Path, pattern: str, timeout_s: float = 60.0) -> int:
    """Wait until ``log`` has a line matching ``pattern`` (group 1: the port the child bound); return the port.

    Raises ``RuntimeError`` with the log when the child exits first or ``timeout_s`` passes (a readiness
    deadline for a loaded machine, not a timing assertion).
    """
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout_s
    while True:
        # Read before polling: a child that logged its port and then exited is reported as exited below.
        found = regex.search(log.read_text(errors="replace")) if log.exists() else None
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}:\n{_tail(log)}")
        if found:
            return int(found.group(1))
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.args[0]} logged no port after {timeout_s}s:\n{_tail(log)}")
        time.sleep(0.05)


def start_on_free_port(
    command: Callable[[int], list[str]],
    ready: Callable[[int], bool],
    log: Path,
    timeout_s: float = 60.0,
    attempts: int = 5,
    **popen: object,
) -> tuple[subprocess.Popen, int]:
    """Start ``command(port)`` on a free port until ``ready(port)``; on a lost bind race start it on another port.

    stdout and stderr go to ``log`` (rewritten per attempt). A child that exits for any other reason,
    or is not ready within ``timeout_s``, raises ``RuntimeError`` with its log.
    """
    for _ in range(attempts):
        port = free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen(command(port), stdout=out, stderr=subprocess.STDOUT, **popen)  # type: ignore[call-overload]
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and not ready(port):
            if time.monotonic() > deadline:
                stop_process(proc)
                raise RuntimeError(f"{proc.args[0]} not ready on port {port} after {timeout_s}s:\n{_tail(log)}")
            time.sleep(0.1)
        if proc.poll() is None:
            return proc, port
        if not BIND_FAILED.search(log.read_text(errors="replace")):
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}:\n{_tail(log)}")
    raise RuntimeError(f"{attempts} ports in a row were taken before the child could bind them")


def _tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"
