"""`stowage extender` as a process: kubeconfig → informers against kmock → served on a port → SIGTERM."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from tests.extender.objects import extender_args, node, regular_pod
from tests.support.kube import kube_emulator, write_kubeconfig
from tests.support.processes import start_on_free_port

pytestmark = pytest.mark.timeout(150)


def test_the_command_serves_the_watched_cluster_and_stops_on_sigterm(tmp_path: Path) -> None:
    with kube_emulator() as cluster:
        api_node = node("n1")
        del api_node["status"]["nodeInfo"]  # the typed client requires every nodeInfo field
        client.CoreV1Api(cluster.api).create_node(api_node)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster.url)

        def command(port: int) -> list[str]:
            return [
                sys.executable, "-m", "stowage", "extender", "--kubeconfig", str(kubeconfig),
                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
            ]  # fmt: skip

        def ready(port: int) -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        # The extender cannot bind port 0: a lost race for the picked port restarts it on another.
        proc, port = start_on_free_port(command, ready, tmp_path / "extender.log", cwd=tmp_path)
        try:
            url = f"http://127.0.0.1:{port}"
            body = httpx.post(f"{url}/filter", json=extender_args(regular_pod(), [node("n1")], cache=True)).json()
            assert body["NodeNames"] == ["n1"] and body["Error"] == ""
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, (tmp_path / "extender.log").read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
