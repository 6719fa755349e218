"""Kubeconfigs that authenticate as one of the chart's ServiceAccounts (a TokenRequest token).

A component started with such a kubeconfig has exactly the permissions the chart's RBAC gives it: a
missing grant shows as a 403 in its log, as it would in a cluster.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Protocol

from kubernetes import client

__all__ = ["TokenKubeconfigs", "token_kubeconfig"]


class TokenKubeconfigs(Protocol):
    """What a control plane offers here (:class:`tests.support.controlplane.ControlPlane` or ExternalCluster)."""

    def kubeconfig_for_token(self, token: str, name: str | None = None) -> Path: ...


def token_kubeconfig(plane: TokenKubeconfigs, core: client.CoreV1Api, service_account: str, namespace: str,
                     *, expiration_s: int = 3600, name: str | None = None) -> Path:
    """A kubeconfig holding a fresh TokenRequest token of ``namespace/service_account``."""
    token = core.create_namespaced_service_account_token(
        service_account, namespace, {"spec": {"expirationSeconds": expiration_s}}).status.token
    return plane.kubeconfig_for_token(token, name=name or f"{service_account}-{uuid.uuid4().hex[:6]}")
