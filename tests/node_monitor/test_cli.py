"""``stowage node-monitor``: help, clear errors for bad values, and a one-shot sample."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from stowage.node_monitor.cgroups import Driver, QoS
from stowage.node_monitor.cli import parse_interval
from stowage.node_monitor.synthetic import SyntheticNode

from stowage.cli import main


def run(*args: str, env: dict[str, str | None] | None = None):
    return CliRunner().invoke(main, ["node-monitor", *args], env=env or {}, catch_exceptions=False)


def test_help_names_every_flag() -> None:
    result = run("--help")
    assert result.exit_code == 0
    for flag in ("--node-name", "--cgroup-root", "--proc-root", "--kubeconfig", "--port", "--interval", "--config",
                 "--dry-run", "--no-kubernetes", "--capacity", "--address", "--exclude-interfaces", "--once"):
        assert flag in result.output
    assert "NODE_NAME" in result.output and "9808" in result.output


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param(["--interval", "fast"], "a duration such as 1s, 500ms", id="interval-not-a-duration"),
        pytest.param(["--interval", "0ms"], "a positive duration", id="interval-zero"),
        pytest.param(["--port", "70000"], "0<=x<=65535", id="port-out-of-range"),
        pytest.param(["--capacity", "cpu=lots"], "Kubernetes quantity", id="capacity-bad-quantity"),
        pytest.param(["--capacity", "cpu"], "name=quantity pairs", id="capacity-not-a-pair"),
        pytest.param(["--exclude-interfaces", "("], "not a valid regular expression", id="bad-regex"),
        pytest.param(["--cgroup-root", "/nonexistent/cgroup"], "is not a directory", id="missing-cgroup-root"),
    ],
)
def test_bad_values_are_rejected_with_a_clear_message(args: list[str], fragment: str) -> None:
    result = run("--no-kubernetes", *args)
    assert result.exit_code == 2
    assert fragment in result.output


def test_a_node_name_is_required_with_kubernetes() -> None:
    result = run()
    assert result.exit_code == 2 and "NODE_NAME" in result.output


def test_without_a_cluster_and_without_kubeconfig_it_says_what_to_pass(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": None, "KUBECONFIG": str(tmp_path / "absent")}
    result = run("--node-name", "n1", "--cgroup-root", str(tmp_path), env=env)
    assert result.exit_code == 2
    assert "in-cluster service account" in result.output and str(tmp_path / "absent") in result.output
    assert "--kubeconfig" in result.output and "--no-kubernetes" in result.output


def test_the_node_monitor_never_imports_the_kubernetes_client() -> None:
    # Importing `kubernetes` costs ~35 MB of resident memory, over half the DaemonSet's 60 MB budget.
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from stowage.cli import main\n"
        "import stowage.kube.api, stowage.kube.credentials, stowage.kube.informer\n"
        "from stowage.node_monitor import bench, capacity, cli, eviction, metrics, monitor, pods, sampling, summary\n"
        "assert CliRunner().invoke(main, ['node-monitor', '--help']).exit_code == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'kmock')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_a_bad_config_file_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "stowage.yaml"
    config.write_text("contention:\n  policy: gentle\n  sustained_count: 0\n")
    result = run("--no-kubernetes", "--config", str(config), "--once")
    assert result.exit_code == 2
    assert "contention.policy: must be one of aggressive, neutral, preserve" in result.output


def test_once_prints_the_usage_of_a_kubelet_shaped_tree(tmp_path: Path) -> None:
    tree = SyntheticNode(tmp_path / "cg", 2, Driver.SYSTEMD, tmp_path / "proc")
    tree.add_pod("aaaaaaaa-0000-0000-0000-000000000001", QoS.GUARANTEED, memory_current=1 << 30)
    tree.add_pod("aaaaaaaa-0000-0000-0000-000000000002", QoS.BESTEFFORT, network="host")
    result = run("--no-kubernetes", "--once", "--interval", "50ms", "--cgroup-root", str(tree.root),
                 "--proc-root", str(tree.proc_root))
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["layout"].startswith("cgroup v2, systemd driver")
    assert data["node"]["memory"] == 1 << 30 and data["node"]["cpu"] == 0.0
    assert data["pods"]["aaaaaaaa-0000-0000-0000-000000000001"]["memory"] == 1 << 30
    assert data["pods"]["aaaaaaaa-0000-0000-0000-000000000001"]["network"] == 0.0  # its own namespace, idle
    host = data["pods"]["aaaaaaaa-0000-0000-0000-000000000002"]
    assert host["network"] is None and host["cpu"] == 0.0  # host network: no value of its own


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("500ms", 0.5), ("2", 2.0), (".5s", 0.5), ("1m", 60.0), (" 250 ms ", 0.25)],
    ids=["seconds", "milliseconds", "bare-number", "leading-dot", "minutes", "spaces"],
)
def test_interval_accepts_common_duration_forms(text: str, seconds: float) -> None:
    assert parse_interval(text) == pytest.approx(seconds)
