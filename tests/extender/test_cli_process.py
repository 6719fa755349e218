"""`stowage extender` as a process: kubeconfig → informers against kmock → served on a port → SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from tests.extender.objects import extender_args, node, regular_pod
from tests.support.kube import kube_emulator, write_kubeconfig
from tests.support.prometheus import free_port

pytestmark = pytest.mark.timeout(90)


def test_the_command_serves_the_watched_cluster_and_stops_on_sigterm(tmp_path: Path) -> None:
    with kube_emulator() as cluster:
        api_node = node("n1")
        del api_node["status"]["nodeInfo"]  # the typed client requires every nodeInfo field
        client.CoreV1Api(cluster.api).create_node(api_node)
        port = free_port()
        command = [
            sys.executable, "-m", "stowage", "extender",
            "--kubeconfig", str(write_kubeconfig(tmp_path / "kubeconfig", cluster.url)),
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
        ]  # fmt: skip
        proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            ready = False
            while time.monotonic() < deadline and proc.poll() is None and not ready:
                try:
                    ready = httpx.get(f"{url}/readyz", timeout=1).status_code == 200
                except httpx.HTTPError:
                    time.sleep(0.1)
            assert ready, proc.stdout.read().decode() if proc.poll() is not None else "not ready in 30 s"
            body = httpx.post(f"{url}/filter", json=extender_args(regular_pod(), [node("n1")], cache=True)).json()
            assert body["NodeNames"] == ["n1"] and body["Error"] == ""
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
