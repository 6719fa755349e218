"""Suite-wide guards: no test outside ``tests/e2e`` may reach a real cluster by accident."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_real_cluster(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path_factory) -> None:
    """Point kubeconfig discovery at nothing, so a stray client call fails loudly instead of touching a cluster."""
    if request.node.get_closest_marker("e2e"):
        return
    missing = tmp_path_factory.getbasetemp() / "no-kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
