"""`stowage extender` as a process: kubeconfig → informers against kmock → served on a port → SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from tests.extender.objects import extender_args, node, regular_pod
from tests.support.kube import kube_emulator, wait_until, write_kubeconfig
from tests.support.processes import EXTENDER_PORT_LOGGED, wait_for_logged_port

pytestmark = pytest.mark.timeout(150)


def ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_command_serves_the_watched_cluster_and_stops_on_sigterm(tmp_path: Path) -> None:
    with kube_emulator() as cluster:
        api_node = node("n1")
        del api_node["status"]["nodeInfo"]  # the typed client requires every nodeInfo field
        client.CoreV1Api(cluster.api).create_node(api_node)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster.url)

        log = tmp_path / "extender.log"
        command = [
            sys.executable, "-m", "stowage", "extender", "--kubeconfig", str(kubeconfig),
            "--host", "127.0.0.1", "--port", "0", "--log-level", "info",
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            # Port 0: the extender binds a free port itself and logs it, so no other socket can take it first.
            port = wait_for_logged_port(proc, log, EXTENDER_PORT_LOGGED)
            wait_until(lambda: ready(port), 60)
            url = f"http://127.0.0.1:{port}"
            body = httpx.post(f"{url}/filter", json=extender_args(regular_pod(), [node("n1")], cache=True)).json()
            assert body["NodeNames"] == ["n1"] and body["Error"] == ""
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, (tmp_path / "extender.log").read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
