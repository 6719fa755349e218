"""End-to-end suite for a real kind or minikube cluster.

Runs when ``KUBECONFIG`` points at a kubeconfig file when pytest starts; skipped
otherwise (no cluster can run on the CI machines). Run it with::

    KUBECONFIG=~/.kube/config .venv/bin/python -m pytest tests/e2e -v

The tests start Stowage's processes on this machine against the cluster's API
server (as a developer would before installing the chart) and only read from
the cluster: nothing is created, evicted or deleted.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import stop_process, wait_for_logged_port

_KUBECONFIG = os.environ.get("KUBECONFIG", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.e2e)
            if not _KUBECONFIG or not Path(_KUBECONFIG).is_file():
                item.add_marker(pytest.mark.skip(reason="e2e: set KUBECONFIG to a kind/minikube cluster to run"))


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    return _KUBECONFIG


@pytest.fixture(scope="session")
def nodes(kubeconfig: str) -> list[dict]:
    """The cluster's Nodes as JSON (fails clearly when KUBECONFIG is set but the cluster is unreachable)."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=kubeconfig)
    try:
        node_list = client.CoreV1Api(api_client).list_node(_request_timeout=15)
    except Exception as exc:  # any transport or auth failure: say what to fix
        pytest.fail(f"KUBECONFIG={kubeconfig} is set but its cluster is unreachable: {exc}")
    # The API's own camelCase JSON, as kube-scheduler would send it.
    return list(api_client.sanitize_for_serialization(node_list.items))


@contextlib.contextmanager
def running(args: list[str], port_logged: str, ready_path: str, log: Path, timeout_s: float = 90.0) -> Iterator[str]:
    """Run ``stowage ARGS`` (with ``--port 0``) until ``ready_path`` answers 200; yield the base URL; stop it after.

    ``port_logged``: the regex of the start-up line naming the port the child bound (group 1).
    """
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "stowage", *args], stdout=out, stderr=subprocess.STDOUT)
    try:
        port = wait_for_logged_port(proc, log, port_logged, timeout_s)
        deadline = time.monotonic() + timeout_s
        while not _answers(f"http://127.0.0.1:{port}{ready_path}"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-4000:]
                pytest.fail(f"stowage {args[0]} never answered {ready_path}:\n{tail}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc, timeout_s=15)


def _answers(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=2.0).status_code == 200
    return False
