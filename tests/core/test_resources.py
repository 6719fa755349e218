"""Kubernetes quantities, resource vectors, and a pod's effective demand as the scheduler computes it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stowage.errors import QuantityError
from stowage.resources import ResourceVector, format_quantity, parse_quantity, pod_demand

GI = 2**30
MI = 2**20


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("500m", 0.5, id="millicores"),
        pytest.param("2", 2.0, id="plain-integer"),
        pytest.param("0.25", 0.25, id="decimal-fraction"),
        pytest.param(".5", 0.5, id="leading-dot"),
        pytest.param("+3", 3.0, id="explicit-plus"),
        pytest.param("100n", 100e-9, id="nano"),
        pytest.param("3u", 3e-6, id="micro"),
        pytest.param("1k", 1e3, id="kilo"),
        pytest.param("128M", 128e6, id="mega"),
        pytest.param("2G", 2e9, id="giga"),
        pytest.param("1T", 1e12, id="tera"),
        pytest.param("1P", 1e15, id="peta"),
        pytest.param("1E", 1e18, id="exa"),
        pytest.param("1Ki", 1024.0, id="kibi"),
        pytest.param("1.5Gi", 1.5 * GI, id="fractional-gibi"),
        pytest.param("128Mi", 128.0 * MI, id="mebi"),
        pytest.param("1Ti", float(2**40), id="tebi"),
        pytest.param("1Pi", float(2**50), id="pebi"),
        pytest.param("2Ei", float(2 * 2**60), id="exbi"),
        pytest.param("1e3", 1000.0, id="exponent"),
        pytest.param("12E-1", 1.2, id="negative-exponent-capital"),
        pytest.param("5e+2", 500.0, id="exponent-with-plus"),
        pytest.param(" 4Gi ", 4.0 * GI, id="surrounding-space"),
        pytest.param(3, 3.0, id="int"),
        pytest.param(0.5, 0.5, id="float"),
    ],
)
def test_parse_quantity_accepts_every_suffix_the_api_accepts(text: str | float, expected: float) -> None:
    assert parse_quantity(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        pytest.param("12x", "Kubernetes quantity", id="unknown-suffix"),
        pytest.param("1KI", "Kubernetes quantity", id="wrong-case-binary"),
        pytest.param("", "Kubernetes quantity", id="empty"),
        pytest.param("Gi", "Kubernetes quantity", id="suffix-only"),
        pytest.param("1 Gi", "Kubernetes quantity", id="inner-space"),
        pytest.param("-1", "non-negative", id="negative"),
        pytest.param("-500m", "non-negative", id="negative-milli"),
        pytest.param(float("nan"), "finite", id="nan"),
        pytest.param(float("inf"), "finite", id="infinite"),
        pytest.param("nan", "Kubernetes quantity", id="nan-string"),
        pytest.param(True, "Kubernetes quantity", id="bool"),
        pytest.param(None, "Kubernetes quantity", id="none"),
    ],
)
def test_parse_quantity_rejects_bad_input_naming_field_and_value(value: object, fragment: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(value, "spec.containers[0].resources.requests.cpu")  # type: ignore[arg-type]
    message = str(err.value)
    assert message.startswith("spec.containers[0].resources.requests.cpu: ")
    assert fragment in message
    assert repr(value) in message


def test_negative_quantity_is_allowed_only_when_asked() -> None:
    assert parse_quantity("-2Gi", allow_negative=True) == -2.0 * GI


@pytest.mark.parametrize(
    ("value", "resource", "text"),
    [
        pytest.param(0.25, "cpu", "250m", id="cpu-millicores"),
        pytest.param(2.0, "cpu", "2", id="cpu-whole"),
        pytest.param(4 * GI, "memory", "4Gi", id="memory-gibi"),
        pytest.param(1536 * MI, "memory", "1536Mi", id="memory-mebi"),
        pytest.param(1000.0, "memory", "1000", id="memory-not-binary"),
        pytest.param(0.0, "memory", "0", id="zero"),
    ],
)
def test_format_quantity_gives_the_shortest_exact_form(value: float, resource: str, text: str) -> None:
    assert format_quantity(value, resource) == text


@given(st.integers(min_value=0, max_value=2**62), st.sampled_from(["memory", "disk", "network", "nvidia.com/gpu"]))
def test_byte_quantities_round_trip_through_format_and_parse(n: int, resource: str) -> None:
    assert parse_quantity(format_quantity(float(n), resource)) == float(n)


@given(st.integers(min_value=0, max_value=10**9))
def test_cpu_millicores_round_trip_through_format_and_parse(milli: int) -> None:
    value = milli / 1000
    assert parse_quantity(format_quantity(value, "cpu")) == pytest.approx(value, rel=1e-15, abs=0)


@given(st.floats(min_value=0, max_value=1e15, allow_nan=False, allow_infinity=False))
def test_any_finite_float_round_trips(value: float) -> None:
    back = parse_quantity(format_quantity(value, "cpu"))
    assert math.isclose(back, value, rel_tol=1e-12, abs_tol=1e-12)


def test_resource_vectors_add_subtract_and_compare_over_the_union_of_names() -> None:
    a = ResourceVector({"cpu": 2, "memory": 4 * GI})
    b = ResourceVector({"cpu": 0.5, "nvidia.com/gpu": 1})
    assert a + b == {"cpu": 2.5, "memory": 4 * GI, "nvidia.com/gpu": 1}
    assert (a - b)["nvidia.com/gpu"] == -1
    assert a["disk"] == 0.0
    assert b.fits_in(a) is False
    assert ResourceVector({"cpu": 1}).fits_in(a) is True
    assert list(a.to_array(["memory", "cpu", "disk"])) == [4 * GI, 2.0, 0.0]
    assert a.as_quantities() == {"cpu": "2", "memory": "4Gi"}


def test_resource_vector_parse_names_the_bad_key() -> None:
    with pytest.raises(QuantityError, match=r"^requests\.memory: "):
        ResourceVector.parse({"cpu": "1", "memory": "lots"}, "requests")


def _pod(**spec: object) -> dict:
    return {"metadata": {"name": "p"}, "spec": spec}


def _c(name: str, requests: dict | None = None, limits: dict | None = None, **extra: object) -> dict:
    resources: dict = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources, **extra}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(
            _pod(containers=[_c("a", {"cpu": "1", "memory": "1Gi"}), _c("b", {"cpu": "500m"})]),
            {"cpu": 1.5, "memory": GI},
            id="sum-of-containers",
        ),
        pytest.param(
            _pod(containers=[_c("a", None, {"cpu": "2", "memory": "2Gi"})]),
            {"cpu": 2, "memory": 2 * GI},
            id="requests-default-to-limits",
        ),
        pytest.param(
            _pod(containers=[_c("a", {"cpu": "0"}, {"cpu": "2", "memory": "2Gi"})]),
            {"memory": 2 * GI},
            id="explicit-zero-request-is-kept",
        ),
        pytest.param(
            _pod(containers=[_c("a", {"cpu": "1"})], initContainers=[_c("i", {"cpu": "3", "memory": "1Gi"})]),
            {"cpu": 3, "memory": GI},
            id="init-container-max",
        ),
        pytest.param(
            _pod(
                containers=[_c("a", {"cpu": "1"})],
                initContainers=[_c("side", {"cpu": "500m"}, restartPolicy="Always"), _c("i", {"cpu": "2"})],
            ),
            {"cpu": 2.5},
            id="sidecar-adds-to-later-init-and-main",
        ),
        pytest.param(
            _pod(containers=[_c("a", {"cpu": "1"})], overhead={"cpu": "250m", "memory": "64Mi"}),
            {"cpu": 1.25, "memory": 64 * MI},
            id="pod-overhead",
        ),
        pytest.param(
            _pod(containers=[_c("a", {"cpu": "1", "nvidia.com/gpu": "1"})]),
            {"cpu": 1, "nvidia.com/gpu": 1},
            id="extended-resource",
        ),
        pytest.param(
            _pod(containers=[_c("a", {"cpu": "1", "memory": "1Gi"})], resources={"requests": {"cpu": "4"}}),
            {"cpu": 4, "memory": GI},
            id="pod-level-requests-override",
        ),
        pytest.param(_pod(containers=[]), {}, id="no-containers"),
    ],
)
def test_pod_demand_matches_the_schedulers_pod_requests(pod: dict, expected: dict) -> None:
    assert pod_demand(pod) == ResourceVector(expected)


def test_pod_demand_counts_a_resized_container_at_its_allocated_amount() -> None:
    pod = _pod(containers=[_c("a", {"cpu": "1"})])
    pod["status"] = {"containerStatuses": [{"name": "a", "allocatedResources": {"cpu": "2"}}]}
    assert pod_demand(pod)["cpu"] == 2


def test_pod_demand_error_names_the_container_field() -> None:
    pod = _pod(containers=[_c("a", {"cpu": "1"}), _c("b", {"memory": "12x"})])
    with pytest.raises(QuantityError, match=r"spec\.containers\[1\]\.resources\.requests\.memory"):
        pod_demand(pod)
