"""The Grafana dashboard (charts/stowage/dashboards/stowage.json) against a real Prometheus.

``control_plane`` and ``fake_kubelet`` come from :mod:`tests.support.controlplane_plugin`.
"""

from tests.support.controlplane_plugin import control_plane, fake_kubelet, pytest_runtest_makereport  # noqa: F401
