"""A real Kubernetes control plane on loopback for tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

The same idea as controller-runtime's *envtest* (``KUBEBUILDER_ASSETS`` = a folder holding
``kube-apiserver`` and maybe ``etcd``), extended with kube-controller-manager and any number of
kube-schedulers. No kubelet: :mod:`tests.support.fake_kubelet` registers Nodes and runs pods.
Flags and quirks: ``../shared/envtest/README.md``.

Usage::

    with ControlPlane(tmp_path) as cp:                      # etcd → apiserver (/readyz) → controller-manager
        core = CoreV1Api(cp.api())
        sched = cp.start_scheduler(cp.scheduler_config(yaml.safe_load(text), extender_url="http://127.0.0.1:8888"))
        ...
        sched.stop(); sched.start()                         # each scheduler stops and restarts on its own
        cp.restart_apiserver()                              # same port, same etcd

Every process runs on 127.0.0.1, logs to ``<workdir>/logs/<name>.log`` (:meth:`ControlPlane.logs_tail`)
and is stopped by PID (SIGTERM, then SIGKILL). Children get SIGTERM if the thread that started them
dies (``PR_SET_PDEATHSIG``), so a killed pytest leaves no API server behind.

In pytest use the session fixture ``control_plane`` (:mod:`tests.support.controlplane_plugin`).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from tests.support.processes import stop_process

__all__ = [
    "MISSING_ASSETS_HELP",
    "ControlPlane",
    "ExternalCluster",
    "SchedulerHandle",
    "create_namespace",
    "find_assets",
    "find_etcd",
    "missing_assets_reason",
    "scheduler_config",
    "write_token_kubeconfig",
]

REPO = Path(__file__).resolve().parents[2]
SHARED_ENVTEST = REPO.parent / "shared" / "envtest"
LOCAL_ASSETS = REPO / ".envtest"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
BINARIES = (APISERVER, CONTROLLER_MANAGER, SCHEDULER)
SERVICE_CIDR = "10.0.0.0/24"

MISSING_ASSETS_HELP = (
    "a real control plane needs etcd and kube-apiserver (plus kube-controller-manager and kube-scheduler): "
    "install etcd (`apt-get install -y etcd-server`), and either set KUBEBUILDER_ASSETS to a folder holding "
    "the binaries (e.g. `export KUBEBUILDER_ASSETS=$(setup-envtest use 1.30 -p path)` with setup-envtest from "
    "sigs.k8s.io/controller-runtime/tools/setup-envtest) or run `bash ../shared/envtest/unpack.sh .envtest` "
    "from the project root"
)

#: Feature gates of every control-plane process: in-place pod resize (KEP-1287, alpha in v1.30), which the
#: operator's promotion of running opportunistic pods needs (docs/operator.md "Promotion"). One control plane for
#: every test, so on for all of them; nothing else changes with it while no pod is resized.
FEATURE_GATES = "InPlacePodVerticalScaling=true"

#: Controllers that need a cloud, a kubelet or a node IPAM, none of which exist here.
CONTROLLERS = "*,-nodeipam,-nodelifecycle,-service,-route,-cloud-node-lifecycle,-persistentvolume-binder,-attachdetach"


# --- assets -------------------------------------------------------------------------------------


def _has_binaries(folder: Path, names: tuple[str, ...] = (APISERVER,)) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in names)


def find_assets(unpack: bool = True) -> Path | None:
    """The folder holding ``kube-apiserver`` (and the other binaries), or ``None`` when it or etcd is missing.

    Looks at ``$KUBEBUILDER_ASSETS`` (envtest's convention), then ``<repo>/.envtest``; when neither holds
    the binaries and ``unpack``, runs ``../shared/envtest/unpack.sh <repo>/.envtest`` if that script exists.
    etcd may live in the folder or on ``PATH`` (:func:`find_etcd`).
    """
    env = os.environ.get("KUBEBUILDER_ASSETS")
    folder: Path | None = None
    if env:
        folder = Path(env) if _has_binaries(Path(env)) else None
    elif _has_binaries(LOCAL_ASSETS, BINARIES):
        folder = LOCAL_ASSETS
    elif unpack and (SHARED_ENVTEST / "unpack.sh").is_file():
        done = subprocess.run(["bash", str(SHARED_ENVTEST / "unpack.sh"), str(LOCAL_ASSETS)],
                              capture_output=True, text=True, timeout=600, check=False)
        folder = LOCAL_ASSETS if done.returncode == 0 and _has_binaries(LOCAL_ASSETS) else None
    if folder is None or find_etcd(folder) is None:
        return None
    return folder


def find_etcd(assets: Path | None) -> Path | None:
    """``etcd`` from the assets folder if it is there, else from ``PATH`` (Debian's ``etcd-server``)."""
    if assets is not None and _has_binaries(assets, ("etcd",)):
        return assets / "etcd"
    found = shutil.which("etcd")
    return Path(found) if found else None


def missing_assets_reason() -> str:
    """What is missing, and how to get it (the skip or failure message)."""
    env = os.environ.get("KUBEBUILDER_ASSETS")
    where = f"KUBEBUILDER_ASSETS={env}" if env else str(LOCAL_ASSETS)
    have = "found" if (env and _has_binaries(Path(env))) or _has_binaries(LOCAL_ASSETS) else "no kube-apiserver"
    etcd = "found" if find_etcd(Path(env) if env else LOCAL_ASSETS) else "not found"
    return f"{where}: {have}; etcd: {etcd}. {MISSING_ASSETS_HELP}"


# --- files: certificates, tokens, kubeconfigs --------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {done.stderr}")


def _make_pki(d: Path) -> None:
    """CA, an API server serving certificate for 127.0.0.1/localhost, a service-account key pair."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make the test control plane's certificates")
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
             "-subj", "/CN=stowage-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.csr",
             "-subj", "/CN=kube-apiserver", cwd=d)
    (d / "apiserver.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
    )
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "apiserver.crt", "-days", "3650", "-extfile", "apiserver.ext", cwd=d)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def write_token_kubeconfig(path: Path, server: str, token: str, ca_file: Path | None = None,
                           ca_data: str | None = None, user: str = "user") -> Path:
    """A kubeconfig for ``server`` authenticating with the bearer ``token``."""
    cluster: dict[str, Any] = {"server": server}
    if ca_file is not None:
        cluster["certificate-authority"] = str(ca_file)
    if ca_data is not None:
        cluster["certificate-authority-data"] = ca_data
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "test",
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        "clusters": [{"name": "test", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
    }))
    path.chmod(0o600)
    return path


def scheduler_config(base: Mapping[str, Any], kubeconfig: Path | str,
                     extender_url: str | None = None) -> dict[str, Any]:
    """A copy of the KubeSchedulerConfiguration ``base`` made runnable here.

    Sets ``clientConnection.kubeconfig`` (kube-scheduler ignores ``--kubeconfig`` when given ``--config``)
    and ``leaderElection.leaderElect: false``; with ``extender_url``, points every extender's
    ``urlPrefix`` at it. Everything else (profiles, plugin args, extender verbs) is kept as written,
    so tests run the project's own ``manifests/scheduler-config.yaml``.
    """
    out = copy.deepcopy(dict(base))
    out.setdefault("apiVersion", "kubescheduler.config.k8s.io/v1")
    out.setdefault("kind", "KubeSchedulerConfiguration")
    out["clientConnection"] = {**(out.get("clientConnection") or {}), "kubeconfig": str(kubeconfig)}
    out["leaderElection"] = {**(out.get("leaderElection") or {}), "leaderElect": False}
    if extender_url is not None:
        for extender in out.get("extenders") or []:
            extender["urlPrefix"] = extender_url
    return out


def create_namespace(api: client.ApiClient, name: str, labels: Mapping[str, str] | None = None,
                     wait_for_service_account: bool = True, timeout_s: float = 60.0) -> None:
    """Create namespace ``name`` (an existing one is fine) and wait for its ``default`` ServiceAccount.

    With kube-controller-manager running, pods are admitted only once that ServiceAccount exists.
    """
    core = client.CoreV1Api(api)
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}}
    try:
        core.create_namespace(body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    if not wait_for_service_account:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            return
        except client.ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


# --- processes ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_PR_SET_PDEATHSIG = 1
try:  # resolved here: between fork and exec (other threads may hold locks) the child only makes the call
    _prctl: Callable[..., int] | None = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _tail_file(path: Path, lines: int) -> str:
    if not path.exists():
        return "(no log)"
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 256 * lines))
        text = f.read().decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])


class _Process:
    """One child process with its log file; started and stopped by PID."""

    def __init__(self, name: str, argv_fn: Callable[[], list[str]], log: Path) -> None:
        self.name, self._argv_fn, self.log = name, argv_fn, log
        self.proc: subprocess.Popen | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        if self.running:
            return
        argv = self._argv_fn()
        with self.log.open("ab") as out:
            out.write(f"\n=== {time.strftime('%H:%M:%S')} start: {' '.join(argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         preexec_fn=_die_with_parent, close_fds=True)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        code = stop_process(self.proc, timeout_s) if self.proc.poll() is None else self.proc.returncode
        with self.log.open("ab") as out:
            out.write(f"=== {time.strftime('%H:%M:%S')} stopped, exit code {code}\n".encode())
        return code

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{_tail_file(self.log, 40)}")


class SchedulerHandle:
    """A kube-scheduler started by :meth:`ControlPlane.start_scheduler`; stop and start it at will."""

    def __init__(self, name: str, config_path: Path, process: _Process, plane: ControlPlane) -> None:
        self.name, self.config_path, self._process, self._plane = name, config_path, process, plane

    @property
    def log(self) -> Path:
        return self._process.log

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process.running

    def start(self, ready_timeout_s: float = 60.0) -> SchedulerHandle:
        """Start (again, after :meth:`stop`) and wait until it has synced its caches and schedules."""
        offset = self.log.stat().st_size if self.log.exists() else 0
        self._process.start()
        # Informer caches filled: kube-scheduler starts its scheduling loop right after (no log line for that).
        self._plane._wait_for_log(self._process, ("Caches populated for *v1.Node", "Caches populated for *v1.Pod"),
                                  offset, ready_timeout_s)
        return self

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after a bound; returns the exit code."""
        return self._process.stop()

    def logs_tail(self, lines: int = 40) -> str:
        return _tail_file(self.log, lines)


class ControlPlane:
    """etcd, kube-apiserver, optionally kube-controller-manager and kube-schedulers, on 127.0.0.1.

    ``workdir`` (created if missing; a temporary folder by default) holds ``pki/``, ``etcd/``,
    ``logs/`` and ``kubeconfig`` (the admin's: static token in ``system:masters``).

    Start, restart and stop processes from a thread that lives as long as they should (the test's
    main thread): a child gets SIGTERM when the thread that started it exits.
    """

    def __init__(self, workdir: Path | None = None, assets: Path | None = None, controller_manager: bool = True,
                 ready_timeout_s: float = 60.0, apiserver_args: Mapping[str, str] | None = None) -> None:
        self.assets = assets or find_assets()
        if self.assets is None:
            raise FileNotFoundError(missing_assets_reason())
        etcd = find_etcd(self.assets)
        if etcd is None:
            raise FileNotFoundError(missing_assets_reason())
        self.etcd_bin = etcd
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="stowage-cp-"))
        self.with_controller_manager = controller_manager
        self.ready_timeout_s = ready_timeout_s
        self.extra_apiserver_args = dict(apiserver_args or {})
        self.pki = self.workdir / "pki"
        self.logs = self.workdir / "logs"
        self.token = secrets.token_hex(16)
        self.kubeconfig = self.workdir / "kubeconfig"
        self.etcd_port = self.etcd_peer_port = self.port = 0
        self.started_in_s: float | None = None
        self._etcd = _Process("etcd", self._etcd_argv, self.logs / "etcd.log")
        self._apiserver = _Process(APISERVER, self._apiserver_argv, self.logs / f"{APISERVER}.log")
        self._controller_manager = _Process(CONTROLLER_MANAGER, self._cm_argv, self.logs / f"{CONTROLLER_MANAGER}.log")
        self.schedulers: dict[str, SchedulerHandle] = {}
        self._clients: list[client.ApiClient] = []
        self._admin_client: client.ApiClient | None = None

    # --- addresses and files --------------------------------------------------------------------

    @property
    def host(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    def kubeconfig_for_token(self, token: str, name: str | None = None) -> Path:
        """Write a kubeconfig for this API server authenticating with ``token`` (e.g. a TokenRequest's)."""
        name = name or f"token-{secrets.token_hex(4)}"
        return write_token_kubeconfig(self.workdir / f"kubeconfig-{name}", self.host, token, self.ca_file, user=name)

    def api(self, kubeconfig: Path | None = None) -> client.ApiClient:
        """A new ``ApiClient`` for the admin kubeconfig (or ``kubeconfig``); closed by :meth:`stop`."""
        api = config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))
        self._clients.append(api)
        return api

    def _admin(self) -> client.ApiClient:
        """One shared admin client for this module's own calls."""
        if self._admin_client is None:
            self._admin_client = self.api()
        return self._admin_client

    def scheduler_config(self, base: Mapping[str, Any], extender_url: str | None = None) -> dict[str, Any]:
        """:func:`scheduler_config` with this control plane's admin kubeconfig."""
        return scheduler_config(base, self.kubeconfig, extender_url)

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """:func:`create_namespace`; waits for the ServiceAccount only when the controller-manager runs."""
        create_namespace(self._admin(), name, labels, wait_for_service_account=self.with_controller_manager)

    # --- argv -----------------------------------------------------------------------------------

    def _etcd_argv(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [str(self.etcd_bin), "--name", "test", "--data-dir", str(self.workdir / "etcd"),
                "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"test={peer}", "--initial-cluster-state", "new",
                "--logger", "zap", "--log-outputs", "stderr", "--quota-backend-bytes", str(4 << 30)]

    def _apiserver_argv(self) -> list[str]:
        p = self.pki
        disabled = ["TaintNodesByCondition"]  # no node-lifecycle controller takes the not-ready taint off
        if not self.with_controller_manager:
            disabled.append("ServiceAccount")  # nobody creates the `default` ServiceAccount
        args = {
            "--etcd-servers": self.etcd_url,
            "--bind-address": "127.0.0.1",
            "--advertise-address": "127.0.0.1",
            "--secure-port": str(self.port),
            "--tls-cert-file": str(p / "apiserver.crt"),
            "--tls-private-key-file": str(p / "apiserver.key"),
            "--client-ca-file": str(p / "ca.crt"),
            "--token-auth-file": str(p / "tokens.csv"),
            "--authorization-mode": "RBAC",
            "--service-account-issuer": "https://kubernetes.default.svc",
            "--service-account-key-file": str(p / "sa.pub"),
            "--service-account-signing-key-file": str(p / "sa.key"),
            "--service-cluster-ip-range": SERVICE_CIDR,
            "--allow-privileged": "true",
            "--endpoint-reconciler-type": "none",
            "--disable-admission-plugins": ",".join(disabled),
            "--profiling": "false",
            "--feature-gates": FEATURE_GATES,
            # Benchmarks create thousands of pods quickly; the admin token is exempt from fairness anyway.
            "--max-requests-inflight": "1000",
            "--max-mutating-requests-inflight": "500",
            **self.extra_apiserver_args,
        }
        return [str(self.assets / APISERVER), *(f"{k}={v}" for k, v in args.items())]

    def _cm_argv(self) -> list[str]:
        p, kc = self.pki, str(self.kubeconfig)
        return [str(self.assets / CONTROLLER_MANAGER), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}", "--leader-elect=false", "--bind-address=127.0.0.1",
                "--secure-port=0", f"--service-account-private-key-file={p / 'sa.key'}",
                f"--root-ca-file={p / 'ca.crt'}", f"--cluster-signing-cert-file={p / 'ca.crt'}",
                f"--cluster-signing-key-file={p / 'ca.key'}", f"--controllers={CONTROLLERS}",
                "--kube-api-qps=500", "--kube-api-burst=1000", "--concurrent-deployment-syncs=10",
                "--concurrent-replicaset-syncs=10", "--concurrent-gc-syncs=40", f"--feature-gates={FEATURE_GATES}"]

    # --- waiting --------------------------------------------------------------------------------

    def _get(self, url: str, token: str | None = None, timeout_s: float = 5.0) -> tuple[int, bytes]:
        context = ssl.create_default_context(cafile=str(self.ca_file)) if url.startswith("https") else None
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def _wait_http(self, process: _Process, url: str, ok: Callable[[int, bytes], bool], token: str | None,
                   timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while True:
            process.check_alive()
            try:
                status, body = self._get(url, token)
                if ok(status, body):
                    return
                last = f"{status} {body[:300]!r}"
            except (OSError, ssl.SSLError) as exc:
                last = repr(exc)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{process.name} not ready after {timeout_s}s ({url}: {last}):\n"
                                   f"{_tail_file(process.log, 40)}")
            time.sleep(0.1)

    def _wait_for_log(self, process: _Process, needles: tuple[str, ...], offset: int, timeout_s: float) -> None:
        """Wait until every one of ``needles`` was logged after ``offset``."""
        deadline = time.monotonic() + timeout_s
        while True:
            process.check_alive()
            with process.log.open("rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            if all(n in text for n in needles):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{process.name}: not all of {needles} logged after {timeout_s}s:\n"
                                   f"{_tail_file(process.log, 40)}")
            time.sleep(0.1)

    def _start_on_free_port(self, process: _Process, assign: Callable[[], None], wait: Callable[[], None]) -> None:
        """Start on freshly picked ports; retry when another socket took a port between the pick and the bind."""
        for attempt in range(3):
            assign()
            offset = process.log.stat().st_size if process.log.exists() else 0
            process.start()
            try:
                wait()
                return
            except RuntimeError:
                process.stop()
                with process.log.open("rb") as f:
                    f.seek(offset)
                    tail = f.read().decode(errors="replace")
                if attempt == 2 or "address already in use" not in tail:
                    raise

    def _wait_apiserver(self) -> None:
        self._wait_http(self._apiserver, f"{self.host}/readyz", lambda s, _: s == 200, self.token, self.ready_timeout_s)

    def _wait_controller_manager(self) -> None:
        """Ready when the serviceaccount controller made ``default/default`` (pods need it to be admitted)."""
        api = client.CoreV1Api(self._admin())
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            self._controller_manager.check_alive()
            try:
                api.read_namespaced_service_account("default", "default")
                return
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
            if time.monotonic() > deadline:
                raise RuntimeError(f"{CONTROLLER_MANAGER}: no default ServiceAccount after {self.ready_timeout_s}s:\n"
                                   f"{_tail_file(self._controller_manager.log, 40)}")
            time.sleep(0.1)

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        started = time.monotonic()
        try:
            self.logs.mkdir(parents=True, exist_ok=True)
            _make_pki(self.pki)
            (self.pki / "tokens.csv").write_text(f"{self.token},admin,admin-uid,system:masters\n")
            write_token_kubeconfig(self.kubeconfig, "https://127.0.0.1:0", self.token, self.ca_file, user="admin")

            def etcd_ports() -> None:
                self.etcd_port, self.etcd_peer_port = _free_port(), _free_port()

            self._start_on_free_port(self._etcd, etcd_ports, lambda: self._wait_http(
                self._etcd, f"{self.etcd_url}/health", lambda s, b: s == 200 and b'"true"' in b, None,
                self.ready_timeout_s))

            def apiserver_port() -> None:
                self.port = _free_port()
                write_token_kubeconfig(self.kubeconfig, self.host, self.token, self.ca_file, user="admin")

            self._start_on_free_port(self._apiserver, apiserver_port, self._wait_apiserver)
            if self.with_controller_manager:
                self._controller_manager.start()
                self._wait_controller_manager()
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - started
        return self

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port with the same etcd; wait for /readyz."""
        self._apiserver.stop()
        deadline = time.monotonic() + self.ready_timeout_s
        while True:  # the old listener may linger a moment after the process exits
            offset = self._apiserver.log.stat().st_size
            self._apiserver.start()
            try:
                self._wait_apiserver()
                return
            except RuntimeError:
                self._apiserver.stop()
                with self._apiserver.log.open("rb") as f:
                    f.seek(offset)
                    in_use = "address already in use" in f.read().decode(errors="replace")
                if not in_use or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver only (a fault test brings it back with :meth:`start_apiserver`)."""
        self._apiserver.stop()

    def start_apiserver(self) -> None:
        self._apiserver.start()
        self._wait_apiserver()

    def start_scheduler(self, config_yaml: str | Mapping[str, Any] | None = None, name: str | None = None,
                        ready_timeout_s: float | None = None) -> SchedulerHandle:
        """Start a kube-scheduler with ``config_yaml`` (a KubeSchedulerConfiguration as YAML text or a dict).

        The config goes through :func:`scheduler_config` (our kubeconfig, no leader election); ``None``
        runs the default profile. Several schedulers may run, each under its own ``name``.
        """
        name = name or (SCHEDULER if SCHEDULER not in self.schedulers else f"{SCHEDULER}-{len(self.schedulers)}")
        if name in self.schedulers and self.schedulers[name].running:
            raise ValueError(f"a scheduler named {name!r} is running")
        base = yaml.safe_load(config_yaml) if isinstance(config_yaml, str) else dict(config_yaml or {})
        path = self.workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(self.scheduler_config(base)))
        kc = str(self.kubeconfig)
        argv = [str(self.assets / SCHEDULER), f"--config={path}", f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1", "--secure-port=0", "--v=2",
                f"--feature-gates={FEATURE_GATES}"]
        handle = SchedulerHandle(name, path, _Process(name, lambda: argv, self.logs / f"{name}.log"), self)
        self.schedulers[name] = handle
        return handle.start(ready_timeout_s or self.ready_timeout_s)

    def processes(self) -> dict[str, int | None]:
        """PID of every process started (``None``: not running)."""
        procs = [self._etcd, self._apiserver, self._controller_manager, *(s._process for s in self.schedulers.values())]
        return {p.name: p.pid if p.running else None for p in procs}

    def stop(self) -> None:
        """Stop schedulers, controller-manager, apiserver, etcd, in that order, by PID."""
        for api in self._clients:
            with contextlib.suppress(Exception):
                api.close()
        self._clients.clear()
        self._admin_client = None
        for handle in reversed(list(self.schedulers.values())):
            handle.stop()
        self._controller_manager.stop()
        self._apiserver.stop()
        self._etcd.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs_tail(self, lines: int = 30) -> str:
        """The last ``lines`` of every process's log, each under a header."""
        logs = sorted(self.logs.glob("*.log")) if self.logs.exists() else []
        return "\n".join(f"----- {log.name} (last {lines} lines) -----\n{_tail_file(log, lines)}" for log in logs)


class ExternalCluster:
    """A cluster the test did not start (``STOWAGE_TEST_KUBECONFIG``): API access only, no process control."""

    started_in_s: float | None = 0.0

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.workdir = Path(tempfile.mkdtemp(prefix="stowage-ext-"))
        loaded = yaml.safe_load(self.kubeconfig.read_text())
        contexts = {c["name"]: c["context"] for c in loaded.get("contexts") or []}
        clusters = {c["name"]: c["cluster"] for c in loaded.get("clusters") or []}
        context = contexts[loaded["current-context"]]
        self._cluster = clusters[context["cluster"]]
        self.host = self._cluster["server"]
        self.schedulers: dict[str, SchedulerHandle] = {}

    def api(self, kubeconfig: Path | None = None) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    def kubeconfig_for_token(self, token: str, name: str | None = None) -> Path:
        name = name or f"token-{secrets.token_hex(4)}"
        ca = self._cluster.get("certificate-authority")
        return write_token_kubeconfig(self.workdir / f"kubeconfig-{name}", self.host, token,
                                      Path(ca) if ca else None, self._cluster.get("certificate-authority-data"),
                                      user=name)

    def _no_process_control(self, *_: Any, **__: Any) -> Any:
        import pytest

        pytest.skip("needs process control of the control plane; STOWAGE_TEST_KUBECONFIG points at an external cluster")

    start_scheduler = restart_apiserver = stop_apiserver = start_apiserver = _no_process_control

    def scheduler_config(self, base: Mapping[str, Any], extender_url: str | None = None) -> dict[str, Any]:
        return scheduler_config(base, self.kubeconfig, extender_url)

    def processes(self) -> dict[str, int | None]:
        return {}

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        with self.api() as api:
            create_namespace(api, name, labels)

    def logs_tail(self, lines: int = 30) -> str:
        return "(external cluster: no process logs)"

    def stop(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)
