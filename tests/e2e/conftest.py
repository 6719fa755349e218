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

from tests.support.processes import free_port, stop_process

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
def running(args: list[str], ready_url: str, log: Path, timeout_s: float = 90.0) -> Iterator[None]:
    """Run ``stowage ARGS`` until ``ready_url`` answers 200; stop it afterwards."""
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "stowage", *args], stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"stowage {' '.join(args)} exited {proc.returncode}:\n{log.read_text()}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(ready_url, timeout=2.0).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    pytest.fail(f"{ready_url} not ready after {timeout_s}s:\n{log.read_text()}")
                time.sleep(0.5)
            yield
        finally:
            stop_process(proc, timeout_s=15)


@pytest.fixture
def port() -> int:
    return free_port()
