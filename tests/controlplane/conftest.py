"""The real control plane (``control_plane``) and the fake kubelet (``fake_kubelet``) for this folder.

Other test folders enable the same fixtures with the same import in their own conftest.py.
"""

from tests.support.controlplane_plugin import control_plane, fake_kubelet, pytest_runtest_makereport  # noqa: F401
