"""The one Kubernetes client (``stowage.kube.api``): kubeconfig variants, exec plugins, the service account,
errors, and list/watch — against a real API server where one can answer, kmock where a state is hard to make.

The exec plugin is a tiny Python script printing an ExecCredential; it records every run (and the
``KUBERNETES_EXEC_INFO`` it was given) in a state file, so caching and re-runs are counted.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from stowage.node_monitor.eviction import Evictor, Outcome
from stowage.node_monitor.pods import PodInfo, PodStore, PodWatcher, pod_info

from stowage.errors import ConfigError
from stowage.kube import api, credentials
from stowage.kube.api import ApiConfig, ApiError, KubeClient, load_config
from stowage.labels import LABEL_CLASS
from tests.support.kube import gone_once, kube_emulator, wait_until

pytestmark = pytest.mark.timeout(120)

V1, V1BETA1 = credentials.EXEC_API_VERSIONS

PLUGIN = r'''
import datetime, json, os, sys
from pathlib import Path

info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
state = Path(os.environ["PLUGIN_STATE"])
runs = len(state.read_text().splitlines()) if state.exists() else 0
with state.open("a") as f:
    f.write(json.dumps({"info": info, "args": sys.argv[1:], "extra": os.environ.get("PLUGIN_EXTRA")}) + "\n")
if os.environ.get("PLUGIN_FAIL"):
    print("login expired: run `cloud login`", file=sys.stderr)
    sys.exit(3)
status = {}
if os.environ.get("PLUGIN_CERT"):
    status["clientCertificateData"] = Path(os.environ["PLUGIN_CERT"]).read_text()
    status["clientKeyData"] = Path(os.environ["PLUGIN_KEY"]).read_text()
else:
    tokens = os.environ["PLUGIN_TOKENS"].split(",")
    status["token"] = tokens[min(runs, len(tokens) - 1)]
if os.environ.get("PLUGIN_EXPIRES_IN"):
    delta = datetime.timedelta(seconds=float(os.environ["PLUGIN_EXPIRES_IN"]))
    at = datetime.datetime.now(datetime.timezone.utc) + delta
    status["expirationTimestamp"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
version = os.environ.get("PLUGIN_ANSWER_VERSION") or info["apiVersion"]
print(json.dumps({"apiVersion": version, "kind": "ExecCredential", "status": status}))
'''


def write_kubeconfig(path: Path, user: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None,
                     current: str | None = "c", extra_contexts: list[dict[str, Any]] | None = None) -> Path:
    data: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}, *(extra_contexts or [])],
        "clusters": [{"name": "k", "cluster": cluster if cluster is not None else {
            "server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user if user is not None else {"token": "t"}}],
    }
    if current is not None:
        data["current-context"] = current
    path.write_text(yaml.safe_dump(data))
    return path


def exec_user(tmp_path: Path, version: str = V1, **env: str) -> dict[str, Any]:
    """A kubeconfig ``user`` running the test plugin with ``PLUGIN_*`` settings ``env``."""
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    env = {"PLUGIN_STATE": str(tmp_path / "runs.jsonl"), "PLUGIN_TOKENS": "token-a", **env}
    return {"exec": {"apiVersion": version, "command": sys.executable, "args": [str(plugin), "--flag"],
                     "env": [{"name": k, "value": v} for k, v in env.items()], "interactiveMode": "Never",
                     "installHint": "install it with: pip install cloud-cli"}}


def runs(tmp_path: Path) -> list[dict[str, Any]]:
    state = tmp_path / "runs.jsonl"
    return [json.loads(line) for line in state.read_text().splitlines()] if state.exists() else []


# --- kubeconfig files ------------------------------------------------------------------------------


def test_a_kubeconfig_with_a_token_is_loaded(tmp_path: Path) -> None:
    config = load_config(write_kubeconfig(tmp_path / "kc"))
    assert config.server == "https://10.0.0.1:6443" and config.insecure and config.bearer() == "t"
    assert "context 'c'" in config.source


def test_another_context_than_the_current_one_can_be_chosen(tmp_path: Path) -> None:
    other = {"name": "other", "context": {"cluster": "k", "user": "u"}}
    kc = write_kubeconfig(tmp_path / "kc", current=None, extra_contexts=[other])
    assert "context 'other'" in load_config(kc, context="other").source
    with pytest.raises(ConfigError, match="no current-context set"):
        load_config(kc)


def test_relative_paths_are_relative_to_the_kubeconfig_and_the_token_file_is_reread(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "token").write_text("first\n")
    (tmp_path / "conf" / "ca.crt").write_text("not read until a request")
    kc = write_kubeconfig(tmp_path / "conf" / "kc", user={"tokenFile": "token"},
                          cluster={"server": "https://k:6443", "certificate-authority": "ca.crt"})
    config = load_config(kc)
    assert config.ca_file == tmp_path / "conf" / "ca.crt" and config.bearer() == "first"
    (tmp_path / "conf" / "token").write_text("rotated\n")
    assert config.bearer() == "rotated"


def test_kubeconfig_list_in_the_environment_is_merged_first_file_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tmp_path / "a.yaml"
    first.write_text(yaml.safe_dump({"current-context": "c", "contexts": [
        {"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": "http://first:8080"}}]}))
    second = write_kubeconfig(tmp_path / "b.yaml", user={"token": "from-second"},
                              cluster={"server": "http://second:8080"})
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'absent.yaml'}:{second}")
    config = load_config(None)
    assert config.server == "http://first:8080" and config.bearer() == "from-second"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        pytest.param({"current": "missing"}, "context 'missing' not found", id="unknown-context"),
        pytest.param({"cluster": {}}, "has no server", id="cluster-without-server"),
        pytest.param({"user": {"auth-provider": {"name": "gcp"}}}, "exec plugin", id="auth-provider"),
        pytest.param({"user": {"username": "a", "password": "b"}}, "basic auth", id="basic-auth"),
        pytest.param({"user": {"exec": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1alpha1"}}},
                     "v1alpha1 was removed", id="exec-v1alpha1"),
        pytest.param({"user": {"exec": {"apiVersion": V1}}}, "exec needs a command", id="exec-without-command"),
        pytest.param({"user": {"client-certificate-data": base64.b64encode(b"PEM").decode()}},
                     "needs both client-certificate and client-key", id="certificate-without-key"),
        pytest.param({"user": {"client-key-data": "%%%"}}, "not base64", id="bad-base64"),
        pytest.param({"cluster": {"server": "https://k", "certificate-authority": "absent.crt"}},
                     r"certificate-authority .*absent.crt not found", id="missing-ca-file"),
        pytest.param({"user": {"tokenFile": "absent-token"}}, "tokenFile .* not found", id="missing-token-file"),
    ],
)
def test_kubeconfig_problems_are_named(tmp_path: Path, kwargs: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        load_config(write_kubeconfig(tmp_path / "kc", **kwargs))


def test_an_unreadable_kubeconfig_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--kubeconfig .*cannot read"):
        load_config(tmp_path / "absent")


def test_without_any_credentials_every_place_tried_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(ConfigError) as info:
        load_config(None)
    text = str(info.value)
    assert "in-cluster service account (KUBERNETES_SERVICE_HOST unset" in text
    assert f"$KUBECONFIG={tmp_path / 'absent'} (no such file)" in text and "--kubeconfig PATH" in text


def test_in_a_pod_the_service_account_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("sa-token")
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc")))
    config = load_config(None)
    assert config.server == "https://[fd00::1]:6443" and config.source == "in-cluster service account"
    assert config.ca_file == tmp_path / "ca.crt" and config.bearer() == "sa-token"
    assert load_config(None, context="c").server == "https://10.0.0.1:6443"  # a context means the kubeconfig


# --- exec plugins, run directly -----------------------------------------------------------------------


@pytest.mark.parametrize("version", [V1, V1BETA1])
def test_an_exec_plugin_gets_its_request_and_its_token_is_read(tmp_path: Path, version: str) -> None:
    user = exec_user(tmp_path, version, PLUGIN_EXTRA="from-env", PLUGIN_EXPIRES_IN="3600")
    user["exec"]["provideClusterInfo"] = True
    cluster = {"server": "https://k:6443", "certificate-authority-data": base64.b64encode(b"CA PEM").decode(),
               "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "k8s"}}]}
    config = load_config(write_kubeconfig(tmp_path / "kc", user=user, cluster=cluster))
    credential = credentials.run_exec(config.exec)
    assert credential.token == "token-a" and credential.client_cert is None
    assert 3500 < credential.expires_at_s - time.time() <= 3600
    (run,) = runs(tmp_path)
    assert run["args"] == ["--flag"] and run["extra"] == "from-env"
    assert run["info"] == {"apiVersion": version, "kind": "ExecCredential", "spec": {"interactive": False, "cluster": {
        "server": "https://k:6443", "insecure-skip-tls-verify": False,
        "certificate-authority-data": base64.b64encode(b"CA PEM").decode(), "config": {"audience": "k8s"}}}}


def test_a_relative_plugin_command_is_found_next_to_the_kubeconfig(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "plugin"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\n{PLUGIN}")
    script.chmod(0o755)
    user = exec_user(tmp_path)
    user["exec"].update(command="./bin/plugin", args=[])
    config = load_config(write_kubeconfig(tmp_path / "kc", user=user))
    assert config.exec.command == str(tmp_path / "./bin/plugin")
    assert credentials.run_exec(config.exec).token == "token-a"


@pytest.mark.parametrize(
    ("change", "env", "fragment"),
    [
        pytest.param({}, {"PLUGIN_FAIL": "1"}, r"exited with 3: login expired: run `cloud login`", id="fails"),
        pytest.param({"command": "stowage-no-such-plugin"}, {}, "not found; install it with: pip install cloud-cli",
                     id="not-installed"),
        pytest.param({}, {"PLUGIN_ANSWER_VERSION": V1BETA1}, "answered apiVersion", id="wrong-version"),
        pytest.param({"interactiveMode": "Always"}, {}, "needs a terminal", id="interactive-only"),
        pytest.param({}, {"PLUGIN_TOKENS": ""}, "neither status.token nor", id="no-credential"),
    ],
)
def test_exec_plugin_failures_say_which_plugin_and_why(tmp_path: Path, change: dict, env: dict, fragment: str) -> None:
    user = exec_user(tmp_path, **env)
    user["exec"].update(change)
    config = load_config(write_kubeconfig(tmp_path / "kc", user=user))
    with pytest.raises(ConfigError, match=fragment) as info:
        credentials.run_exec(config.exec)
    assert "exec plugin" in str(info.value) and "user 'u'" in str(info.value)


# --- errors and streams -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "header", "retry_after_s"),
    [
        pytest.param({"code": 429, "details": {"retryAfterSeconds": 10}}, None, 10.0, id="status-details"),
        pytest.param({"code": 429}, "3", 3.0, id="header-seconds"),
        pytest.param({"code": 429}, "Wed, 21 Oct 2015 07:28:00 GMT", 0.0, id="header-date-past"),
        pytest.param({"code": 429}, None, None, id="not-said"),
        pytest.param("not a status", "junk", None, id="garbage"),
    ],
)
def test_retry_after_is_read_from_the_status_or_the_header(body: Any, header: str | None,
                                                           retry_after_s: float | None) -> None:
    assert ApiError.from_status(429, body, header).retry_after_s == retry_after_s


def test_status_causes_are_part_of_the_message() -> None:
    error = ApiError.from_status(429, {"message": "Cannot evict pod.", "reason": "TooManyRequests", "details": {
        "causes": [{"reason": "DisruptionBudget", "message": "The disruption budget pdb needs 1 healthy pods"}]}})
    assert error.status == 429 and error.reason == "TooManyRequests"
    assert error.message == "Cannot evict pod. (The disruption budget pdb needs 1 healthy pods)"


def _silent_server() -> tuple[Any, int]:
    """A loopback socket that accepts connections and never answers (a dead keep-alive peer)."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server, server.getsockname()[1]


def test_network_failures_are_os_errors_naming_the_request() -> None:
    """httpx's TransportError is not an OSError; every ``except OSError`` around an API call relies on this one."""
    import socket

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: connection refused
    with KubeClient(ApiConfig(f"http://127.0.0.1:{port}"), timeout_s=2.0) as kube, \
            pytest.raises(OSError) as refused:
        kube.get("/api/v1/nodes")
    assert isinstance(refused.value, api.ApiUnreachable) and "GET /api/v1/nodes" in str(refused.value)

    server, port = _silent_server()
    try:
        with KubeClient(ApiConfig(f"http://127.0.0.1:{port}"), timeout_s=0.3) as kube:
            for call in (lambda: kube.create("/api/v1/namespaces/a/pods", {}), lambda: kube.list(api.PODS)):
                with pytest.raises(api.ApiUnreachable, match="Timeout"):
                    call()
    finally:
        server.close()


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param([b'{"a":1}\n{"b":2}\n'], id="whole-lines"),
        pytest.param([b'{"a"', b":1}\n{", b'"b":2}', b"\n"], id="split-inside-lines"),
        pytest.param([b"x" * 10, b"y" * 10, b"\n\nz"], id="long-line-blank-line-unterminated"),
        pytest.param([], id="empty"),
    ],
)
def test_the_watch_line_splitter_answers_as_bytes_split(chunks: list[bytes]) -> None:
    expected = b"".join(chunks).split(b"\n")
    if expected and not expected[-1]:
        expected.pop()
    assert list(api._lines(chunks)) == expected


# --- against kmock: states a real server cannot be put in quickly ---------------------------------


def _pod(name: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "w", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}


def test_the_watcher_follows_this_nodes_pods_and_relists_after_an_expired_watch() -> None:
    with kube_emulator() as handle:
        core = k8s.CoreV1Api(handle.api)
        core.create_namespaced_pod("w", _pod("before", "n1"))
        store = PodStore("n1")
        resyncs: list[int] = []
        gone_once(handle, "pods")  # the first watch ends with 410 Gone: the watcher must list again
        watcher = PodWatcher(handle.client, store, on_resync=lambda: resyncs.append(1), backoff_max_s=0.2).start()
        try:
            wait_until(lambda: "uid-before" in store.snapshot() and watcher.relists >= 2)
            assert watcher.last_error is None and len(resyncs) >= 3  # list, watch, list (at least)
            core.create_namespaced_pod("w", _pod("added", "n1"))
            core.create_namespaced_pod("w", _pod("elsewhere", "n2"))
            wait_until(lambda: "uid-added" in store.snapshot())
            core.delete_namespaced_pod("before", "w")
            wait_until(lambda: "uid-before" not in store.snapshot())
            assert set(store.snapshot()) == {"uid-added"}  # the n2 pod was never kept
        finally:
            watcher.stop(timeout_s=10)  # interrupts the open watch stream
        assert not watcher.is_alive()


# --- against a real API server ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plane() -> Iterator[Any]:
    """A real kube-apiserver (no controller-manager: PDBs stay unprocessed, so evictions get a 429 with Retry-After)."""
    controlplane = pytest.importorskip("tests.support.controlplane")
    if controlplane.find_assets() is None:
        pytest.skip(controlplane.missing_assets_reason())
    with controlplane.ControlPlane(controller_manager=False) as cp:
        yield cp


def _cluster(plane: Any) -> dict[str, Any]:
    return {"server": plane.host, "certificate-authority": str(plane.ca_file)}


def test_a_token_kubeconfig_with_a_ca_file_reaches_the_server(plane: Any, tmp_path: Path) -> None:
    with KubeClient(load_config(write_kubeconfig(tmp_path / "kc", {"token": plane.token}, _cluster(plane)))) as kube:
        assert kube.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"


def test_a_wrong_token_is_a_401_api_error(plane: Any, tmp_path: Path) -> None:
    config = load_config(write_kubeconfig(tmp_path / "kc", {"token": "wrong"}, _cluster(plane)))
    with KubeClient(config) as kube, pytest.raises(ApiError) as info:
        kube.get("/api/v1/namespaces")
    assert info.value.status == 401 and info.value.reason == "Unauthorized"


def test_an_exec_token_is_cached_until_it_expires(plane: Any, tmp_path: Path) -> None:
    user = exec_user(tmp_path, PLUGIN_TOKENS=plane.token, PLUGIN_EXPIRES_IN="3600")
    with KubeClient(load_config(write_kubeconfig(tmp_path / "kc", user, _cluster(plane)))) as kube:
        for _ in range(3):
            kube.get("/api/v1/namespaces/default")
    assert len(runs(tmp_path)) == 1


def test_an_expired_exec_token_is_renewed_before_the_next_request(plane: Any, tmp_path: Path) -> None:
    user = exec_user(tmp_path, PLUGIN_TOKENS=plane.token, PLUGIN_EXPIRES_IN="-60")
    with KubeClient(load_config(write_kubeconfig(tmp_path / "kc", user, _cluster(plane)))) as kube:
        kube.get("/api/v1/namespaces/default")
        kube.get("/api/v1/namespaces/default")
    assert len(runs(tmp_path)) == 2


def test_a_401_reruns_the_plugin_once(plane: Any, tmp_path: Path) -> None:
    user = exec_user(tmp_path, PLUGIN_TOKENS=f"revoked,{plane.token}")
    with KubeClient(load_config(write_kubeconfig(tmp_path / "kc", user, _cluster(plane)))) as kube:
        assert kube.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"
        assert len(runs(tmp_path)) == 2
        kube.get("/api/v1/namespaces/default")  # the renewed token is kept
        assert len(runs(tmp_path)) == 2


def test_a_plugin_whose_fresh_token_is_rejected_too_gives_the_401(plane: Any, tmp_path: Path) -> None:
    user = exec_user(tmp_path, PLUGIN_TOKENS="revoked")
    config = load_config(write_kubeconfig(tmp_path / "kc", user, _cluster(plane)))
    with KubeClient(config) as kube, pytest.raises(ApiError) as info:
        kube.get("/api/v1/namespaces/default")
    assert info.value.status == 401 and len(runs(tmp_path)) == 2  # one retry, not a loop


@pytest.fixture(scope="module")
def admin_cert(plane: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A client certificate for an admin (group system:masters) signed by the control plane's CA."""
    d = tmp_path_factory.mktemp("client-cert")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr",
            "-subj", "/O=system:masters/CN=stowage-test-admin")
    openssl("x509", "-req", "-in", "client.csr", "-CA", str(plane.ca_file), "-CAkey", str(plane.pki / "ca.key"),
            "-CAcreateserial", "-out", "client.crt", "-days", "1")
    return d / "client.crt", d / "client.key"


def test_a_client_certificate_from_an_exec_plugin_authenticates(plane: Any, admin_cert: tuple[Path, Path],
                                                                tmp_path: Path) -> None:
    user = exec_user(tmp_path, PLUGIN_CERT=str(admin_cert[0]), PLUGIN_KEY=str(admin_cert[1]))
    with KubeClient(load_config(write_kubeconfig(tmp_path / "kc", user, _cluster(plane)))) as kube:
        assert kube.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"


def test_inline_certificate_data_authenticates(plane: Any, admin_cert: tuple[Path, Path], tmp_path: Path) -> None:
    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    user = {"client-certificate-data": b64(admin_cert[0]), "client-key-data": b64(admin_cert[1])}
    cluster = {"server": plane.host, "certificate-authority-data": b64(plane.ca_file)}
    with KubeClient(load_config(write_kubeconfig(tmp_path / "kc", user, cluster))) as kube:
        assert kube.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"


def test_in_cluster_the_rotated_token_is_read_on_every_request(plane: Any, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ca.crt").write_bytes(plane.ca_file.read_bytes())
    (tmp_path / "token").write_text("expired-token")
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", plane.host.rsplit(":", 1)[1])
    with KubeClient(load_config(None)) as kube:
        with pytest.raises(ApiError, match="401"):
            kube.get("/api/v1/namespaces/default")
        (tmp_path / "token").write_text(plane.token)  # what the kubelet does when it rotates the token
        assert kube.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"


@pytest.fixture(scope="module")
def admin(plane: Any) -> Iterator[KubeClient]:
    with KubeClient(ApiConfig(plane.host, ca_file=plane.ca_file, token=plane.token)) as kube:
        yield kube


def _real_pod(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"nodeName": "api-test-node", "containers": [{"name": "c", "image": "x"}]}}


def test_a_long_list_is_read_page_by_page(admin: KubeClient) -> None:
    admin.create("/api/v1/namespaces", {"metadata": {"name": "paged"}})
    for i in range(5):
        admin.create("/api/v1/namespaces/paged/pods", _real_pod(f"p{i}", "paged"))
    items, version = admin.list("/api/v1/namespaces/paged/pods", page_size=2)
    assert sorted(p["metadata"]["name"] for p in items) == [f"p{i}" for i in range(5)] and version


def test_a_watch_streams_changes_and_interrupt_ends_it_promptly(admin: KubeClient) -> None:
    admin.create("/api/v1/namespaces", {"metadata": {"name": "watched"}})
    _, version = admin.list("/api/v1/namespaces/watched/pods")
    stream = admin.watch("/api/v1/namespaces/watched/pods", resource_version=version, timeout_s=300)
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def read() -> None:
        for event in stream:
            if event["type"] != "BOOKMARK":
                seen.append((event["type"], event["object"]["metadata"]["name"]))
        done.set()

    threading.Thread(target=read, daemon=True).start()
    admin.create("/api/v1/namespaces/watched/pods", _real_pod("w1", "watched"))
    admin.patch("/api/v1/namespaces/watched/pods/w1", {"metadata": {"labels": {"x": "y"}}})
    wait_until(lambda: seen[:2] == [("ADDED", "w1"), ("MODIFIED", "w1")])
    started = time.monotonic()
    admin.interrupt_watch()
    assert done.wait(10) and time.monotonic() - started < 10  # far below the 300 s server timeout


def test_a_pod_promoted_since_it_was_seen_is_not_evicted(admin: KubeClient) -> None:
    # The monitor evicts a pod as it saw it labelled opportunistic (uid + resourceVersion preconditions): the
    # operator's promotion (class → regular) in between makes the eviction a 409, and the pod stays.
    pod = admin.create("/api/v1/namespaces/default/pods", _real_pod("promoted"))
    admin.patch("/api/v1/namespaces/default/pods/promoted", {"metadata": {"labels": {LABEL_CLASS: "opportunistic"}}})
    seen = pod_info(admin.get("/api/v1/namespaces/default/pods/promoted"))
    assert seen is not None and seen.opportunistic and seen.resource_version
    admin.patch("/api/v1/namespaces/default/pods/promoted", {"metadata": {"labels": {LABEL_CLASS: "regular"}}})
    assert Evictor(admin, "api-test-node").evict(seen, [], "1Gi memory") is Outcome.CHANGED
    assert admin.get("/api/v1/namespaces/default/pods/promoted")["metadata"].get("deletionTimestamp") is None
    now = pod_info(admin.get("/api/v1/namespaces/default/pods/promoted"))
    assert now is not None and not now.opportunistic  # the next tick sees it regular: never a candidate
    assert pod["metadata"]["uid"] == now.uid


def test_a_disruption_budget_429_is_a_refusal_with_the_budget_named(
    admin: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    pod = admin.create("/api/v1/namespaces/default/pods", _real_pod("guarded", app="db"))
    admin.patch("/api/v1/namespaces/default/pods/guarded/status", {"status": {"phase": "Running"}})
    admin.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "metadata": {"name": "db-pdb"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})
    with pytest.raises(ApiError) as info:
        admin.evict("default", "guarded", pod["metadata"]["uid"])
    assert info.value.status == 429 and info.value.retry_after_s == 10.0
    assert "disruption budget db-pdb" in info.value.message
    info_ = PodInfo(pod["metadata"]["uid"], "default", "guarded", None, 0.0, False)
    with caplog.at_level("INFO", logger="stowage.node_monitor.eviction"):
        assert Evictor(admin, "api-test-node").evict(info_, [], "1Gi memory") is Outcome.REFUSED
    assert "disruption budget db-pdb" in caplog.text and "wait 10s" in caplog.text
    assert admin.get("/api/v1/namespaces/default/pods/guarded")["metadata"].get("deletionTimestamp") is None
