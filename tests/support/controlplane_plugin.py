"""pytest fixtures for a real control plane: ``control_plane`` (session) and ``fake_kubelet`` (per test).

A test folder enables them in its own ``conftest.py`` (``pytest_plugins`` is only allowed in the root
conftest, which is not ours)::

    from tests.support.controlplane_plugin import control_plane, fake_kubelet, pytest_runtest_makereport  # noqa: F401

``pytest_runtest_makereport`` attaches the last lines of every control-plane process's log to the
report of a failed test in that folder. One control plane serves the whole session, however many
folders import the fixture; it stops when the last of them is torn down.

Without the binaries the fixture skips with a how-to message, except under ``CI`` (set): there it
fails, since CI must run these tests. ``STOWAGE_TEST_KUBECONFIG=<path>`` uses that cluster instead
(API access only: tests needing process control skip).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.controlplane import ControlPlane, ExternalCluster, find_assets, missing_assets_reason
from tests.support.fake_kubelet import FakeKubelet

__all__ = ["control_plane", "fake_kubelet", "pytest_runtest_makereport", "start_control_plane", "started_in_s"]

log = logging.getLogger("tests.controlplane")

#: Seconds the session's control plane took from the first process start to ready (``None``: not started).
started_in_s: float | None = None

_lock = threading.Lock()
_shared: ControlPlane | ExternalCluster | None = None
_users = 0


def start_control_plane(tmp_path_factory: pytest.TempPathFactory,
                        controller_manager: bool = True) -> ControlPlane | ExternalCluster:
    """Start a control plane in a fresh temp folder (or wrap ``STOWAGE_TEST_KUBECONFIG``); skip or fail if missing.

    The caller stops it (``.stop()``).
    """
    global started_in_s
    external = os.environ.get("STOWAGE_TEST_KUBECONFIG")
    if external:
        return ExternalCluster(Path(external))
    assets = find_assets()
    if assets is None:
        reason = missing_assets_reason()
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the control-plane tests: {reason}", pytrace=False)
        pytest.skip(reason)
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), assets, controller_manager=controller_manager)
    plane.start()
    started_in_s = plane.started_in_s
    log.info("control plane ready in %.1fs on %s", plane.started_in_s, plane.host)
    return plane


def _announce(pytestconfig: pytest.Config, plane: ControlPlane | ExternalCluster) -> None:
    """One line on the terminal (past output capture): how long the control plane took to be ready."""
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    if reporter is None or not isinstance(plane, ControlPlane):
        return
    line = f"control plane ready in {plane.started_in_s:.1f}s ({plane.host}, logs in {plane.logs})"
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        reporter.write_line("")
        reporter.write_line(line)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory,
                  pytestconfig: pytest.Config) -> Iterator[ControlPlane | ExternalCluster]:
    """The session's control plane: etcd, kube-apiserver, kube-controller-manager (no scheduler until asked)."""
    global _shared, _users
    with _lock:
        if _shared is None:
            _shared = start_control_plane(tmp_path_factory)
            _announce(pytestconfig, _shared)
        _users += 1
        plane = _shared
    try:
        yield plane
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                _shared = None
                plane.stop()


@pytest.fixture
def fake_kubelet(control_plane: ControlPlane | ExternalCluster, tmp_path: Path) -> Iterator[FakeKubelet]:
    """A started :class:`FakeKubelet` writing cgroup trees under ``tmp_path/cgroup``; add nodes yourself.

    On teardown it deletes its pods, Leases and Nodes, so later tests' schedulers never bind to them.
    """
    api = control_plane.api()
    kubelet = FakeKubelet(api, tmp_path / "cgroup").start()
    try:
        yield kubelet
    finally:
        kubelet.stop(cleanup=True)
        api.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """A failed test that used the control plane gets its processes' log tails as a report section."""
    report: pytest.TestReport = yield
    if report.failed and _shared is not None and "control_plane" in getattr(item, "fixturenames", ()):
        report.sections.append(("control plane logs", _shared.logs_tail()))
    return report
