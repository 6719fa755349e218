"""Where the API server is and how to prove who we are: kubeconfig files, exec plugins, the service account.

One loader for every Stowage component (extender, node monitor, benchmarks)::

    load_config(path)            the kubeconfig ``path``: its current-context, or ``context``
    load_config(None)            the in-cluster service account, else $KUBECONFIG (a list, merged as
                                 kubectl merges it), else ~/.kube/config

A kubeconfig user may hold a bearer ``token``, a ``tokenFile`` (re-read on every request), a client
certificate (files or inline data) or an ``exec`` credential plugin: a command printing a
``client.authentication.k8s.io/v1`` (or ``v1beta1``) ExecCredential, as kubectl runs it (``aws eks
get-token``, ``gke-gcloud-auth-plugin``, ``kubelogin``). :func:`run_exec` runs the plugin;
:class:`stowage.kube.api.KubeClient` caches its answer until ``expirationTimestamp`` and re-runs it
once on a 401. ``auth-provider`` users (removed from kubectl in 1.26) are refused with a message.

The in-cluster token is re-read on every request because the kubelet rotates bound tokens.

Why not the official ``kubernetes`` client: importing it costs about 35 MB of resident memory, more
than half the node monitor's 60 MB budget.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import os
import ssl
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stowage.errors import ConfigError

__all__ = [
    "EXEC_API_VERSIONS",
    "SERVICE_ACCOUNT",
    "ApiConfig",
    "ClientCert",
    "ExecConfig",
    "ExecCredential",
    "load_config",
    "run_exec",
]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where the kubelet mounts a pod's service-account token and the cluster CA."""
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_TIMEOUT_S = 60.0
"""A plugin that waits longer is waiting for a person (a browser login); fail with its stderr instead."""
_EXEC_EXTENSION = "client.authentication.k8s.io/exec"  # cluster extension handed to the plugin as spec.cluster.config


@dataclass(frozen=True, slots=True)
class ClientCert:
    """A client certificate and its key, PEM text."""

    cert_pem: str
    key_pem: str


@dataclass(frozen=True, slots=True)
class ExecConfig:
    """A kubeconfig user's ``exec`` section, resolved (command path, environment, cluster info)."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = EXEC_API_VERSIONS[0]
    install_hint: str = ""
    interactive_mode: str = "IfAvailable"
    cluster: Mapping[str, Any] | None = None  # spec.cluster of KUBERNETES_EXEC_INFO (provideClusterInfo)
    where: str = "kubeconfig"  # names the kubeconfig user in messages


@dataclass(frozen=True, slots=True)
class ExecCredential:
    """What an exec plugin printed: a token or a client certificate, and until when it holds."""

    token: str | None = None
    client_cert: ClientCert | None = None
    expires_at_s: float | None = None  # wall-clock epoch seconds; None: until the server rejects it

    def expired(self, now_s: float) -> bool:
        return self.expires_at_s is not None and now_s >= self.expires_at_s


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """Where and how to reach the API server. ``source`` says where it was found (for logs and errors)."""

    server: str
    ca_file: Path | None = None
    ca_data: str | None = None  # PEM
    insecure: bool = False
    token: str | None = None
    token_file: Path | None = None
    client_cert: ClientCert | None = None
    exec: ExecConfig | None = None
    source: str = ""

    def bearer(self) -> str | None:
        """The static bearer token: ``token_file`` read now (rotated tokens), else ``token``."""
        if self.token_file is not None:
            try:
                return self.token_file.read_text().strip() or self.token
            except OSError:
                return self.token
        return self.token

    def ssl_context(self, client_cert: ClientCert | None = None) -> ssl.SSLContext:
        """TLS settings: the configured CA (else the system's), and ``client_cert`` or the configured one."""
        ctx = ssl.create_default_context(
            cafile=str(self.ca_file) if self.ca_file and not self.insecure else None,
            cadata=self.ca_data if self.ca_data and not self.insecure else None,
        )
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        cert = client_cert or self.client_cert
        if cert is not None:
            # ssl loads a client certificate only from files: write them briefly (owner-only), load, delete.
            with tempfile.TemporaryDirectory(prefix="stowage-tls-") as tmp:
                cert_path, key_path = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
                cert_path.write_text(cert.cert_pem)
                key_path.write_text(cert.key_pem)
                ctx.load_cert_chain(str(cert_path), str(key_path))
        return ctx


# --- loading ----------------------------------------------------------------------------------------


def load_config(kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None) -> ApiConfig:
    """API access from ``kubeconfig``; when ``None``: in-cluster, else ``$KUBECONFIG``, else ``~/.kube/config``.

    ``context`` picks a kubeconfig context other than the current one (and skips the in-cluster
    attempt). Raises :class:`ConfigError` saying what was tried and what to pass instead.
    """
    if kubeconfig is not None:
        return _from_files([Path(kubeconfig)], context, f"--kubeconfig {kubeconfig}")
    tried: list[str] = []
    if context is None:
        found = _in_cluster(tried)
        if found is not None:
            return found
    env = os.environ.get("KUBECONFIG")
    paths = [Path(p) for p in env.split(os.pathsep) if p] if env else [Path.home() / ".kube" / "config"]
    existing = [p for p in paths if p.is_file()]
    if existing:
        return _from_files(existing, context, f"$KUBECONFIG {env}" if env else str(existing[0]))
    tried.append(f"$KUBECONFIG={env} (no such file)" if env else f"{paths[0]} (no such file; $KUBECONFIG unset)")
    raise ConfigError([f"no Kubernetes API credentials found; tried: {'; '.join(tried)}. Pass --kubeconfig PATH"])


def _in_cluster(tried: list[str]) -> ApiConfig | None:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    token = SERVICE_ACCOUNT / "token"
    if not host:
        tried.append("in-cluster service account (KUBERNETES_SERVICE_HOST unset: not in a pod)")
        return None
    if not token.is_file():
        tried.append(f"in-cluster service account (no token at {token}: automountServiceAccountToken off?)")
        return None
    server_host = f"[{host}]" if ":" in host else host
    return ApiConfig(f"https://{server_host}:{port}", ca_file=SERVICE_ACCOUNT / "ca.crt", token_file=token,
                     source="in-cluster service account")


def _from_files(paths: list[Path], context: str | None, label: str) -> ApiConfig:
    """Merge kubeconfig files as kubectl does (the first file naming an entry wins) and resolve one context."""
    merged: dict[str, dict[str, tuple[Mapping[str, Any], Path]]] = {"contexts": {}, "clusters": {}, "users": {}}
    current: str | None = None
    for path in paths:
        data = _read(path, label)
        current = current or data.get("current-context") or None
        for section, kind in (("contexts", "context"), ("clusters", "cluster"), ("users", "user")):
            for item in data.get(section) or []:
                if isinstance(item, Mapping) and item.get("name") is not None:
                    merged[section].setdefault(str(item["name"]), (item.get(kind) or {}, path.parent))
    name = context or current
    if not name:
        raise ConfigError([f"{label}: no current-context set (kubectl config use-context NAME)"])
    ctx, _ = _named(merged["contexts"], name, "context", label)
    cluster, cluster_dir = _named(merged["clusters"], ctx.get("cluster"), "cluster", label)
    user, user_dir = _named(merged["users"], ctx.get("user"), "user", label) if ctx.get("user") else ({}, Path())
    where = f"{label}: user {ctx.get('user')!r}"
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise ConfigError([f"{label}: cluster {ctx.get('cluster')!r} has no server"])
    if user.get("auth-provider"):
        raise ConfigError([f"{where} uses an auth-provider plugin, which kubectl removed in 1.26 and Stowage does "
                           "not run; switch to its exec plugin (gke-gcloud-auth-plugin, kubelogin) or a token"])
    if user.get("username") or user.get("password"):
        raise ConfigError([f"{where} uses basic auth, which the API server no longer accepts; use a token, "
                           "a client certificate or an exec plugin"])
    ca_file = _path(cluster.get("certificate-authority"), cluster_dir)
    ca_data = _pem(cluster.get("certificate-authority-data"), f"{label}: cluster {ctx.get('cluster')!r} "
                   "certificate-authority-data")
    if ca_file is not None and not ca_file.is_file():
        raise ConfigError([f"{label}: certificate-authority {ca_file} not found"])
    config = ApiConfig(
        server=server,
        ca_file=ca_file,
        ca_data=ca_data,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        token=str(user["token"]) if user.get("token") else None,
        token_file=_path(user.get("tokenFile"), user_dir),
        client_cert=_client_cert(user, user_dir, where),
        exec=_exec(user.get("exec"), user_dir, cluster, ca_file, ca_data, where) if user.get("exec") else None,
        source=f"{label} (context {name!r})",
    )
    if config.token_file is not None and not config.token_file.is_file():
        raise ConfigError([f"{where}: tokenFile {config.token_file} not found"])
    return config


def _read(path: Path, label: str) -> Mapping[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError([f"{label}: cannot read {path} ({exc.strerror})"]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([f"{label}: {path} is not valid YAML ({exc})"]) from exc
    if not isinstance(data, Mapping):
        raise ConfigError([f"{label}: {path} is not a kubeconfig (a YAML mapping with clusters, users, contexts)"])
    return data


def _named(entries: Mapping[str, tuple[Mapping[str, Any], Path]], name: Any, kind: str,
           label: str) -> tuple[Mapping[str, Any], Path]:
    if name is None or str(name) not in entries:
        known = ", ".join(sorted(entries)) or "none"
        raise ConfigError([f"{label}: {kind} {name!r} not found in the kubeconfig (known: {known})"])
    return entries[str(name)]


def _path(value: Any, base: Path) -> Path | None:
    """A kubeconfig path: relative ones are relative to the file that names them."""
    return base / Path(os.path.expanduser(str(value))) if value else None


def _pem(data: Any, what: str) -> str | None:
    if not data:
        return None
    try:
        return base64.b64decode(str(data), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ConfigError([f"{what}: not base64-encoded PEM ({exc})"]) from exc


def _client_cert(user: Mapping[str, Any], base: Path, where: str) -> ClientCert | None:
    cert = _inline_or_file(user, "client-certificate", base, where)
    key = _inline_or_file(user, "client-key", base, where)
    if bool(cert) != bool(key):
        raise ConfigError([f"{where}: a client certificate needs both client-certificate and client-key"])
    return ClientCert(cert, key) if cert and key else None


def _inline_or_file(user: Mapping[str, Any], key: str, base: Path, where: str) -> str | None:
    """``<key>-data`` (base64 PEM) if set, else the file ``<key>``."""
    inline = _pem(user.get(f"{key}-data"), f"{where} {key}-data")
    path = _path(user.get(key), base)
    if inline or path is None:
        return inline
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError([f"{where}: {key} {path}: cannot read ({exc.strerror})"]) from exc


def _exec(spec: Any, base: Path, cluster: Mapping[str, Any], ca_file: Path | None, ca_data: str | None,
          where: str) -> ExecConfig:
    if not isinstance(spec, Mapping) or not spec.get("command"):
        raise ConfigError([f"{where}: exec needs a command"])
    version = str(spec.get("apiVersion") or "")
    if version not in EXEC_API_VERSIONS:
        raise ConfigError([f"{where}: exec apiVersion {version!r} is not supported; use one of "
                           f"{', '.join(EXEC_API_VERSIONS)} (v1alpha1 was removed in Kubernetes 1.24)"])
    command = str(spec["command"])
    if os.sep in command and not os.path.isabs(command):
        command = str(base / command)  # as client-go: a relative path is relative to the kubeconfig's folder
    env = tuple((str(e.get("name")), str(e.get("value") or "")) for e in spec.get("env") or []
                if isinstance(e, Mapping) and e.get("name"))
    info: dict[str, Any] | None = None
    if spec.get("provideClusterInfo"):
        ca = ca_data or (ca_file.read_text() if ca_file is not None else None)
        info = {"server": str(cluster.get("server")), "insecure-skip-tls-verify": bool(
            cluster.get("insecure-skip-tls-verify"))}
        if ca:
            info["certificate-authority-data"] = base64.b64encode(ca.encode()).decode()
        for key in ("tls-server-name", "proxy-url"):
            if cluster.get(key):
                info[key] = cluster[key]
        for ext in cluster.get("extensions") or []:
            if isinstance(ext, Mapping) and ext.get("name") == _EXEC_EXTENSION:
                info["config"] = ext.get("extension")
    return ExecConfig(
        command=command,
        args=tuple(str(a) for a in spec.get("args") or []),
        env=env,
        api_version=version,
        install_hint=str(spec.get("installHint") or "").strip(),
        interactive_mode=str(spec.get("interactiveMode") or "IfAvailable"),
        cluster=info,
        where=where,
    )


# --- exec plugins -----------------------------------------------------------------------------------


def run_exec(spec: ExecConfig, timeout_s: float = EXEC_TIMEOUT_S) -> ExecCredential:
    """Run an exec credential plugin once, non-interactively; parse the ExecCredential it prints.

    Raises :class:`ConfigError` naming the plugin, with its stderr or install hint, when it cannot
    run, fails, or prints something else.
    """
    name = f"{spec.where}: exec plugin {spec.command!r}"
    if spec.interactive_mode == "Always":
        raise ConfigError([f"{name} needs a terminal (interactiveMode: Always), which Stowage never has; "
                           "configure a non-interactive login"])
    request: dict[str, Any] = {"apiVersion": spec.api_version, "kind": "ExecCredential",
                               "spec": {"interactive": False}}
    if spec.cluster is not None:
        request["spec"]["cluster"] = dict(spec.cluster)
    env = {**os.environ, **dict(spec.env), "KUBERNETES_EXEC_INFO": json.dumps(request)}
    try:
        done = subprocess.run([spec.command, *spec.args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout_s, check=False)
    except FileNotFoundError as exc:
        hint = f"; {spec.install_hint}" if spec.install_hint else ""
        raise ConfigError([f"{name} not found{hint}"]) from exc
    except OSError as exc:
        raise ConfigError([f"{name} cannot run ({exc.strerror})"]) from exc
    except subprocess.TimeoutExpired as exc:
        raise ConfigError([f"{name} did not finish within {timeout_s:g}s (is it waiting for a login?)"]) from exc
    stderr = done.stderr.decode(errors="replace").strip()[-500:]
    if done.returncode != 0:
        raise ConfigError([f"{name} exited with {done.returncode}: {stderr or '(no stderr)'}"])
    try:
        out = json.loads(done.stdout)
    except ValueError as exc:
        raise ConfigError([f"{name} printed no JSON ExecCredential ({exc}); stderr: {stderr or '(none)'}"]) from exc
    if not isinstance(out, Mapping) or out.get("kind") != "ExecCredential":
        kind = out.get("kind") if isinstance(out, Mapping) else type(out).__name__
        raise ConfigError([f"{name} printed no ExecCredential (kind {kind!r})"])
    if out.get("apiVersion") != spec.api_version:
        raise ConfigError([f"{name} answered apiVersion {out.get('apiVersion')!r}, asked for {spec.api_version!r}"])
    status = out.get("status") if isinstance(out.get("status"), Mapping) else {}
    token = status.get("token") or None
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    if bool(cert) != bool(key):
        raise ConfigError([f"{name} gave clientCertificateData without clientKeyData or the reverse"])
    if not token and not cert:
        raise ConfigError([f"{name} gave neither status.token nor status.clientCertificateData/clientKeyData"])
    return ExecCredential(
        token=str(token) if token else None,
        client_cert=ClientCert(str(cert), str(key)) if cert else None,
        expires_at_s=_epoch(status.get("expirationTimestamp"), name),
    )


def _epoch(value: Any, name: str) -> float | None:
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise ConfigError([f"{name}: expirationTimestamp {value!r} is not RFC 3339"]) from exc
