"""The Helm chart (charts/stowage), the image (Dockerfile) and manifests/stowage.yaml.

Helm is the real binary (``.tools/helm/helm``, unpacked by ``scripts/setup.sh --test``); without it these
tests skip with the how-to, except under ``CI`` where they fail. The install tests use the session's real
control plane (:mod:`tests.support.controlplane_plugin`).
"""

from __future__ import annotations

import os

import pytest

from tests.chart.render import find_helm
from tests.support.controlplane_plugin import control_plane, fake_kubelet, pytest_runtest_makereport  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a minute (still runs in CI)")


@pytest.fixture(scope="session")
def helm_binary() -> str:
    found = find_helm()
    if found is None:
        reason = "helm not found: run `bash scripts/setup.sh --test` (it unpacks .tools/helm/helm) or set HELM"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the chart tests: {reason}", pytrace=False)
        pytest.skip(reason)
    return found
