"""Child processes started by tests: stop them politely, then firmly."""

from __future__ import annotations

import subprocess

__all__ = ["stop_process"]


def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> int:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL; return the exit code."""
    proc.terminate()
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
