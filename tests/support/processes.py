"""Child processes started by tests: wait for the port they bound, stop them politely, then firmly.

Ports: a port picked free by the test and bound later by the child can be taken in between
(by any socket, e.g. an outgoing connection's ephemeral port). So every child is started on
port 0 and reports the port it bound (:func:`wait_for_logged_port`).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

__all__ = ["EXTENDER_PORT_LOGGED", "NODE_MONITOR_PORT_LOGGED", "stop_process", "wait_for_logged_port"]

#: The start-up lines of ``stowage extender`` and ``stowage node-monitor`` on 127.0.0.1 (group 1: the port bound).
EXTENDER_PORT_LOGGED = r"extender listening on http://127\.0\.0\.1:(\d+)"
NODE_MONITOR_PORT_LOGGED = r"metrics on http://127\.0\.0\.1:(\d+)/metrics"

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


def _tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"
