"""Fixtures for the operator's tests: the real control plane, raw API access, Stowage's CRDs installed.

``control_plane`` and ``fake_kubelet`` come from :mod:`tests.support.controlplane_plugin`.
``kube`` is a :class:`RawApi` on the admin credentials: plain JSON in and out (no typed models),
any ``Accept`` (e.g. the Table format behind ``kubectl get``). ``stowage_crds`` applies
``charts/stowage/files/crds/`` once per session and waits until both CRDs are Established.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kubernetes import client

from tests.operator.support import OperatorStack, running_operator
from tests.scheduler.stack import Proc
from tests.support.controlplane import ControlPlane, ExternalCluster
from tests.support.controlplane_plugin import control_plane, fake_kubelet, pytest_runtest_makereport  # noqa: F401
from tests.support.crds import load_crds

CRD_API = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
FIELD_MANAGER = "stowage-tests"


class RawApi:
    """Requests to the API server as plain JSON, returning ``(status, body)``; nothing raises on a 4xx/5xx."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def request(self, method: str, path: str, body: Any = None, *, query: Mapping[str, Any] | None = None,
                content_type: str = "application/json", accept: str = "application/json",
                headers: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> tuple[int, Any]:
        """``headers`` adds to the request's, e.g. ``Impersonate-User`` to act as another user."""
        m, url, all_headers, payload, _ = self.api.param_serialize(
            method, path, query_params=list(query.items()) if query else None,
            header_params={"Content-Type": content_type, "Accept": accept, **(headers or {})}, body=body,
            auth_settings=["BearerToken"])
        response = self.api.call_api(m, url, all_headers, payload, _request_timeout=(10.0, timeout_s))
        data = response.read()
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = data.decode(errors="replace")
        return response.status, parsed

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        """:meth:`request`, asserting a 2xx answer (the failure shows the server's message)."""
        status, answer = self.request(method, path, body, **kwargs)
        assert 200 <= status <= 299, f"{method} {path}: {status} {answer}"
        return answer

    def apply(self, path: str, obj: Mapping[str, Any]) -> Any:
        """Server-side apply of ``obj`` at ``path`` (the object's own path, name included)."""
        return self.ok("PATCH", path, obj, query={"fieldManager": FIELD_MANAGER, "force": "true"},
                       content_type="application/apply-patch+yaml")


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane | ExternalCluster) -> RawApi:  # noqa: F811
    """Admin access to the session's API server as plain JSON."""
    return RawApi(control_plane.api())


@pytest.fixture(scope="session")
def stowage_crds(kube: RawApi) -> list[dict[str, Any]]:
    """Both CRDs from ``charts/stowage/files/crds/`` applied (server-side) and Established; returns them as stored."""
    stored = []
    for definition in load_crds():
        name = definition["metadata"]["name"]
        kube.apply(f"{CRD_API}/{name}", definition)
        deadline = time.monotonic() + 60.0
        while True:
            current = kube.ok("GET", f"{CRD_API}/{name}")
            conditions = {c["type"]: c["status"] for c in (current.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                stored.append(current)
                break
            assert time.monotonic() < deadline, f"CRD {name} not Established after 60 s: {conditions}"
            time.sleep(0.1)
    return stored


# The live modules' shared stack: fake nodes, extender, kube-scheduler (each module starts its own operator).
from tests.operator.support import operator_stack  # noqa: E402, F401


@pytest.fixture(scope="module")
def operator(operator_stack: OperatorStack, request: pytest.FixtureRequest) -> Iterator[Proc]:  # noqa: F811
    """The module's operator process; a module may set ``OPERATOR_KWARGS`` (``OperatorStack.start_operator``)."""
    with running_operator(operator_stack, **getattr(request.module, "OPERATOR_KWARGS", {})) as proc:
        yield proc


@pytest.fixture
def ns(operator_stack: OperatorStack, operator: Proc, request: pytest.FixtureRequest) -> Iterator[str]:  # noqa: F811
    """A namespace for one test (prefix: the module's ``NAMESPACE_PREFIX``), deleted after it."""
    with operator_stack.namespace(getattr(request.module, "NAMESPACE_PREFIX", "op")) as name:
        yield name
