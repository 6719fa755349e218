"""The assembled extender: informers against the kmock emulator feed the served app; the CLI's surface."""

from __future__ import annotations

import logging
import socket

import httpx
import pytest
from click.testing import CliRunner
from kubernetes import client
from stowage.extender.cli import extender
from stowage.extender.messages import REASONS
from stowage.extender.server import ExtenderRuntime

from stowage.config import StowageSettings
from tests.extender.objects import extender_args, node, opportunistic_pod, preemption_args, regular_pod
from tests.support.kube import kube_emulator, wait_until, write_kubeconfig
from tests.support.serving import serving

pytestmark = pytest.mark.timeout(60)


def api_node(name: str, cpu: str = "16") -> dict:
    """A node the typed client accepts (its models require every nodeInfo field; we send none)."""
    obj = node(name, cpu=cpu)
    del obj["status"]["nodeInfo"]
    return obj


def test_the_runtime_becomes_ready_and_answers_from_the_watched_cluster() -> None:
    with kube_emulator() as cluster:
        core = client.CoreV1Api(cluster.api)
        core.create_node(api_node("n1"))
        core.create_namespaced_pod("batch", regular_pod("busy-0", cpu="15", memory="1Gi", node_name="n1"))
        runtime = ExtenderRuntime(StowageSettings(), cluster.client, prometheus_url=None)
        with runtime, serving(runtime.app) as url, httpx.Client(timeout=10.0) as http:
            wait_until(lambda: http.get(f"{url}/readyz").status_code == 200, 30)
            core.create_node(api_node("n2", cpu="32"))
            wait_until(lambda: "n2" in runtime.model.node_names(), 30)
            nodes = [node("n1"), node("n2", cpu="32")]
            regular = http.post(f"{url}/filter", json=extender_args(regular_pod(cpu="4"), nodes, cache=True)).json()
            assert regular["NodeNames"] == ["n1", "n2"]  # fit is kube-scheduler's job; no contention known
            scores = http.post(f"{url}/prioritize", json=extender_args(regular_pod(cpu="4"), nodes, cache=True)).json()
            # n1 has 1 core left of 16 (the watched pod requests 15): infeasible there, best on n2.
            assert scores == [{"Host": "n1", "Score": 0}, {"Host": "n2", "Score": 10}]
            opp = http.post(f"{url}/filter", json=extender_args(opportunistic_pod(), nodes, cache=True)).json()
            assert opp["NodeNames"] == []
            assert opp["FailedNodes"]["n1"] == REASONS["utilization-unavailable"]  # no Prometheus URL configured


def test_the_cli_help_names_every_flag() -> None:
    result = CliRunner().invoke(extender, ["--help"])
    assert result.exit_code == 0
    for flag in ("--kubeconfig", "--prometheus-url", "--host", "--port", "--config", "--log-level"):
        assert flag in result.output
    assert "[default: 8888" in result.output


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        pytest.param(["--kubeconfig", "/nonexistent/kubeconfig"], "/nonexistent/kubeconfig", id="missing-kubeconfig"),
        pytest.param(["--port", "70000"], "70000 is not in the range", id="port-out-of-range"),
    ],
)
def test_the_cli_rejects_bad_flags_with_a_message(args: list[str], phrase: str) -> None:
    result = CliRunner().invoke(extender, args)
    assert result.exit_code == 2
    assert phrase in result.output


def test_the_cli_reports_every_bad_config_key(tmp_path) -> None:
    config = tmp_path / "stowage.yaml"
    config.write_text("harvest:\n  t_alloc: {cpu: 1.5}\n  ramp_up_seconds: 3\n")
    result = CliRunner().invoke(extender, ["--config", str(config)])
    assert result.exit_code == 2
    assert "harvest.t_alloc.cpu" in result.output and "harvest.ramp_up_seconds" in result.output


def test_a_taken_port_is_a_clear_error_before_anything_starts(tmp_path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")  # never contacted
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        result = CliRunner().invoke(
            extender, ["--kubeconfig", str(kubeconfig), "--host", "127.0.0.1", "--port", str(port)]
        )
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port} (--host/--port): Address already in use" in result.output


def test_without_the_queue_crd_the_runtime_serves_with_every_queue_at_weight_1(
        caplog: pytest.LogCaptureFixture) -> None:
    # kmock serves only declared resources: queues.stowage.io answers 404, as without the CRD.
    caplog.set_level(logging.INFO, logger="stowage.extender.queues")
    caplog.set_level(logging.DEBUG, logger="stowage.kube.informer")  # last: it also sets caplog's handler level
    with kube_emulator() as cluster:
        core = client.CoreV1Api(cluster.api)
        core.create_node(api_node("n1"))
        core.create_namespaced_pod("batch", regular_pod("hog-0", cpu="12", memory="1Gi", queue="hog", node_name="n1"))
        runtime = ExtenderRuntime(StowageSettings(), cluster.client, prometheus_url=None)
        with runtime, serving(runtime.app) as url, httpx.Client(timeout=10.0) as http:
            wait_until(lambda: http.get(f"{url}/readyz").status_code == 200, 30)

            def queue_retries() -> list[logging.LogRecord]:
                return [r for r in caplog.records if r.name == "stowage.kube.informer"
                        and r.getMessage().startswith("informer queues:")]

            wait_until(lambda: len(queue_retries()) >= 3, 30)  # the informer keeps retrying ...
            assert {r.levelno for r in queue_retries()} == {logging.DEBUG}  # ... quietly
            warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "Queues" in r.getMessage()]
            assert len(warnings) == 1 and "HTTP 404" in warnings[0].getMessage()
            ready = http.get(f"{url}/readyz").json()
            assert "HTTP 404" in ready["queue_weights_error"] and "weighs 1" in ready["queue_weights_error"]
            victims = {"n1": [regular_pod("hog-0", cpu="12", memory="1Gi", queue="hog", node_name="n1")]}
            answer = http.post(f"{url}/preempt", json=preemption_args(regular_pod("new-0", queue="research"),
                                                                      victims, cache=True)).json()
            # hog holds 12 of 16 cores against a fair share of 1/2 (weights 1): its pod may go.
            assert answer == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-hog-0"}], "NumPDBViolations": 0}}}
