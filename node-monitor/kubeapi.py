"""The node monitor's few Kubernetes API calls, over httpx.

Why not the official ``kubernetes`` client: importing it costs about 35 MB of
resident memory, more than half the DaemonSet's 60 MB budget, for five calls:
get the Node, list and watch this node's pods, create an Eviction, create an Event.

Configuration comes from a kubeconfig file (``--kubeconfig``: server, CA,
token or client certificate; exec plugins are not supported) or, by default,
from the in-cluster service account. The service-account token is re-read on
every request because the kubelet rotates bound tokens.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from stowage.errors import ConfigError

__all__ = ["ApiConfig", "ApiError", "KubeClient", "load_config"]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
EVICTION_API_VERSION = "policy/v1"


class ApiError(Exception):
    """A non-2xx answer from the API server: ``status``, ``reason`` and ``message`` from its Status body."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status, self.reason, self.message = status, reason, message
        super().__init__(f"HTTP {status} {reason}: {message}")


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """Where and how to reach the API server."""

    server: str
    ssl_context: ssl.SSLContext | bool = True
    token: str | None = None
    token_file: Path | None = None

    def bearer(self) -> str | None:
        if self.token_file is not None:
            try:
                return self.token_file.read_text().strip()
            except OSError:
                return self.token
        return self.token


def _ssl_context(cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path) -> ssl.SSLContext | bool:
    if cluster.get("insecure-skip-tls-verify"):
        return False
    ctx = ssl.create_default_context()
    if cluster.get("certificate-authority-data"):
        ctx.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif cluster.get("certificate-authority"):
        ctx.load_verify_locations(cafile=str(base / cluster["certificate-authority"]))
    cert_data, key_data = user.get("client-certificate-data"), user.get("client-key-data")
    if cert_data and key_data:
        # ssl only loads a client certificate from files: write them briefly, load, delete.
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
            cert.write_bytes(base64.b64decode(cert_data))
            key.write_bytes(base64.b64decode(key_data))
            ctx.load_cert_chain(str(cert), str(key))
    elif user.get("client-certificate") and user.get("client-key"):
        ctx.load_cert_chain(str(base / user["client-certificate"]), str(base / user["client-key"]))
    return ctx


def _named(items: Any, name: str, kind: str, path: Path) -> Mapping[str, Any]:
    for item in items or []:
        if isinstance(item, Mapping) and item.get("name") == name:
            return item.get(kind) or {}
    raise ConfigError([f"{path}: {kind} {name!r} not found in the kubeconfig"])


def load_config(kubeconfig: str | Path | None) -> ApiConfig:
    """API access from ``kubeconfig`` (its current context), or in-cluster when ``None``.

    Raises :class:`ConfigError` saying what is missing and what to pass instead.
    """
    if kubeconfig is None:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (SERVICE_ACCOUNT / "token").is_file():
            raise ConfigError([
                "kubernetes: not running inside a cluster (no KUBERNETES_SERVICE_HOST or service-account token); "
                "pass --kubeconfig PATH, or --no-kubernetes with --capacity to run without a cluster"
            ])
        ctx = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
        server_host = f"[{host}]" if ":" in host else host
        return ApiConfig(f"https://{server_host}:{port}", ctx, token_file=SERVICE_ACCOUNT / "token")
    path = Path(kubeconfig)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError([f"--kubeconfig {path}: cannot read ({exc.strerror})"]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([f"--kubeconfig {path}: not valid YAML ({exc})"]) from exc
    context_name = data.get("current-context")
    if not context_name:
        raise ConfigError([f"--kubeconfig {path}: no current-context set"])
    context = _named(data.get("contexts"), context_name, "context", path)
    cluster = _named(data.get("clusters"), context.get("cluster"), "cluster", path)
    user = _named(data.get("users"), context.get("user"), "user", path) if context.get("user") else {}
    if not cluster.get("server"):
        raise ConfigError([f"--kubeconfig {path}: cluster {context.get('cluster')!r} has no server"])
    if user.get("exec") or user.get("auth-provider"):
        raise ConfigError([
            f"--kubeconfig {path}: user {context.get('user')!r} uses an exec/auth-provider plugin, which the node "
            "monitor does not run; use a token or client certificate (in a cluster, omit --kubeconfig)"
        ])
    base = path.parent
    token_file = Path(base / user["tokenFile"]) if user.get("tokenFile") else None
    server = str(cluster["server"]).rstrip("/")
    ctx = _ssl_context(cluster, user, base) if server.startswith("https") else True
    return ApiConfig(server, ctx, token=user.get("token"), token_file=token_file)


class KubeClient:
    """Synchronous calls for one node's monitor. Thread-safe (httpx clients are)."""

    def __init__(self, config: ApiConfig, timeout_s: float = 10.0, user_agent: str = "stowage-node-monitor") -> None:
        self.config = config
        self._http = httpx.Client(
            base_url=config.server,
            verify=config.ssl_context,
            timeout=httpx.Timeout(timeout_s),
            headers={"User-Agent": user_agent, "Accept": "application/json"},
        )
        self._watch_socket: socket.socket | None = None

    def close(self) -> None:
        self.interrupt_watch()
        self._http.close()

    def interrupt_watch(self) -> None:
        """Wake a thread blocked reading a watch stream (closing the client alone does not)."""
        sock, self._watch_socket = self._watch_socket, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _headers(self) -> dict[str, str]:
        token = self.config.bearer()
        return {"Authorization": f"Bearer {token}"} if token else {}

    @staticmethod
    def _raise(response: httpx.Response) -> None:
        if response.is_success:
            return
        try:
            body = response.json()
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        raise ApiError(response.status_code, str(body.get("reason") or response.reason_phrase),
                       str(body.get("message") or response.text[:200]))

    def _request(self, method: str, url: str, **kwargs: Any) -> dict[str, Any]:
        response = self._http.request(method, url, headers=self._headers(), **kwargs)
        self._raise(response)
        data = response.json() if response.content else {}
        return data if isinstance(data, dict) else {}

    def get_node(self, name: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v1/nodes/{name}")

    def list_pods(self, node: str) -> tuple[list[dict[str, Any]], str | None]:
        """This node's pods (field selector ``spec.nodeName``) and the list's resourceVersion."""
        data = self._request("GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"})
        return list(data.get("items") or []), (data.get("metadata") or {}).get("resourceVersion")

    def watch_pods(self, node: str, resource_version: str | None, timeout_s: int = 300) -> Iterator[dict[str, Any]]:
        """Watch events (``{"type", "object"}``) for this node's pods until the server closes the stream."""
        params: dict[str, Any] = {
            "watch": "true",
            "fieldSelector": f"spec.nodeName={node}",
            "timeoutSeconds": timeout_s,
            "allowWatchBookmarks": "true",
        }
        if resource_version:
            params["resourceVersion"] = resource_version
        timeout = httpx.Timeout(10.0, read=timeout_s + 30.0)
        with self._http.stream("GET", "/api/v1/pods", params=params, headers=self._headers(), timeout=timeout) as r:
            if not r.is_success:
                r.read()
                self._raise(r)
            stream = r.extensions.get("network_stream")
            self._watch_socket = stream.get_extra_info("socket") if stream is not None else None
            for line in r.iter_lines():
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    yield event

    def evict(self, namespace: str, name: str, uid: str | None = None) -> dict[str, Any]:
        """Create a ``policy/v1`` Eviction (the API server checks PodDisruptionBudgets: 429 if one forbids it)."""
        body: dict[str, Any] = {
            "apiVersion": EVICTION_API_VERSION,
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if uid:
            # Only evict the pod we measured, not a same-named successor.
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        return self._request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", json=body)

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> dict[str, Any]:
        return self._request("POST", f"/api/v1/namespaces/{namespace}/events", json=dict(event))
