"""Build a ``kubernetes.client.ApiClient`` the way every Stowage component looks for credentials."""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config

from stowage.errors import ConfigError

__all__ = ["api_client"]


def api_client(kubeconfig: str | os.PathLike[str] | None = None, *, context: str | None = None) -> client.ApiClient:
    """``kubeconfig`` if given; else the in-cluster service account; else ``$KUBECONFIG`` or ``~/.kube/config``.

    Raises :class:`ConfigError` saying what was tried when nothing works.
    """
    if kubeconfig is not None:
        try:
            return config.new_client_from_config(config_file=str(kubeconfig), context=context)
        except (OSError, config.ConfigException) as exc:
            raise ConfigError([f"--kubeconfig {kubeconfig}: cannot load ({exc})"]) from exc
    tried: list[str] = []
    try:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except config.ConfigException as exc:
        tried.append(f"in-cluster service account ({exc})")
    path = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    try:
        return config.new_client_from_config(config_file=path, context=context)
    except (OSError, config.ConfigException) as exc:
        tried.append(f"{path} ({exc})")
    raise ConfigError([f"no Kubernetes credentials found; tried: {'; '.join(tried)}. Pass --kubeconfig PATH."])
