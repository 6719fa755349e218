"""Kubernetes quantities, resource vectors, and a pod's effective demand.

Units everywhere inside Stowage: ``cpu`` in cores, ``memory`` in bytes,
``disk`` and ``network`` in bytes per second, extended resources in their own
integer units. Quantities follow the API's grammar exactly
(``k8s.io/apimachinery/pkg/api/resource``): a signed decimal number followed by
a binary suffix (``Ki``…``Ei``), a decimal suffix (``n u m "" k M G T P E``) or a
decimal exponent (``e3``, ``E-2``).

A pod's demand is computed as the scheduler's ``PodRequests`` computes it:
the sum over containers, the max with each init container (restartable
"sidecar" init containers run alongside and add up), plus pod overhead;
a request that is missing falls back to the container's limit, as the API's
defaulting would have set it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from stowage.errors import QuantityError

__all__ = [
    "CORE_RESOURCES",
    "CPU",
    "DISK",
    "MEMORY",
    "NETWORK",
    "ResourceVector",
    "format_quantity",
    "parse_quantity",
    "pod_demand",
]

CPU = "cpu"
MEMORY = "memory"
DISK = "disk"
NETWORK = "network"
#: The resources every node and pod is described by; extended resources come after these.
CORE_RESOURCES: tuple[str, ...] = (CPU, MEMORY, DISK, NETWORK)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# signed number (digits, optional fraction, or fraction alone), then suffix or exponent.
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)
_ALLOWED = "a Kubernetes quantity such as 500m, 2, 1.5Gi, 128Mi, 1e3 (suffixes n u m k M G T P E, Ki..Ei)"


def parse_quantity(value: str | int | float, field: str = "quantity", *, allow_negative: bool = False) -> float:
    """Parse a Kubernetes quantity into a float in base units (cores, bytes, ...).

    Raises :class:`QuantityError` naming ``field`` for anything the API would reject,
    for NaN/infinite numbers, and for negative values unless ``allow_negative``.
    """
    if isinstance(value, bool):
        raise QuantityError(field, value, _ALLOWED)
    if isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number):
            raise QuantityError(field, value, "a finite number")
    elif isinstance(value, str):
        match = _QUANTITY.match(value.strip())
        if match is None:
            raise QuantityError(field, value, _ALLOWED)
        try:
            mantissa = Decimal(match["num"])
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
            raise QuantityError(field, value, _ALLOWED) from exc
        if match["bin"]:
            scaled = mantissa * _BINARY[match["bin"]]
        elif match["exp"]:
            scaled = mantissa.scaleb(int(match["exp"][1:]))
        else:
            scaled = mantissa * _DECIMAL[match["dec"] or ""]
        number = float(scaled)
        if not math.isfinite(number):
            raise QuantityError(field, value, "a quantity small enough to represent")
    else:
        raise QuantityError(field, value, _ALLOWED)
    if number < 0 and not allow_negative:
        raise QuantityError(field, value, "a non-negative quantity")
    return number


def format_quantity(value: float, resource: str = MEMORY) -> str:
    """Format base units as the shortest exact Kubernetes quantity.

    CPU prefers millicores (``"250m"``), byte-like resources prefer binary
    suffixes (``"1536Mi"``); anything that is not exact in those falls back to a
    plain decimal that parses back to the same float.
    """
    if not math.isfinite(value):
        raise QuantityError(resource, value, "a finite number")
    if value == 0:
        return "0"
    if resource == CPU:
        milli = value * 1000
        if milli == int(milli) and abs(milli) < 2**53:
            m = int(milli)
            return str(m // 1000) if m % 1000 == 0 else f"{m}m"
    if value == int(value) and abs(value) < 2**63:
        n = int(value)
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if n % _BINARY[suffix] == 0:
                return f"{n // _BINARY[suffix]}{suffix}"
        return str(n)
    return repr(float(value))


class ResourceVector(Mapping[str, float]):
    """An immutable map from resource name to amount in base units.

    Missing names read as 0. Arithmetic is element-wise over the union of names.
    Use :meth:`to_array` to line a vector up with a fixed resource axis for the
    numpy policy code.
    """

    __slots__ = ("_d",)

    def __init__(self, values: Mapping[str, float] | Iterable[tuple[str, float]] = ()) -> None:
        items = values.items() if isinstance(values, Mapping) else values
        self._d: dict[str, float] = {k: float(v) for k, v in items if v != 0}

    @classmethod
    def parse(cls, quantities: Mapping[str, Any] | None, field: str = "resources") -> ResourceVector:
        """Parse a ``{name: quantity}`` map such as a container's ``requests``."""
        if not quantities:
            return cls()
        if not isinstance(quantities, Mapping):
            raise QuantityError(field, quantities, "a map of resource name to quantity")
        return cls({name: parse_quantity(q, f"{field}.{name}") for name, q in quantities.items()})

    def __getitem__(self, key: str) -> float:
        return self._d.get(key, 0.0)

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ResourceVector):
            return self._d == other._d
        if isinstance(other, Mapping):
            return self._d == ResourceVector(other)._d
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._d.items()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={format_quantity(v, k)}" for k, v in sorted(self._d.items()))
        return f"ResourceVector({inner})"

    def _zip(self, other: Mapping[str, float], op: Any) -> ResourceVector:
        names = set(self._d) | set(other)
        return ResourceVector({n: op(self[n], other.get(n, 0.0)) for n in names})

    def __add__(self, other: Mapping[str, float]) -> ResourceVector:
        return self._zip(other, lambda a, b: a + b)

    def __sub__(self, other: Mapping[str, float]) -> ResourceVector:
        return self._zip(other, lambda a, b: a - b)

    def __mul__(self, factor: float) -> ResourceVector:
        return ResourceVector({k: v * factor for k, v in self._d.items()})

    __rmul__ = __mul__

    def max(self, other: Mapping[str, float]) -> ResourceVector:
        """Element-wise maximum (used for init containers)."""
        return self._zip(other, max)

    def fits_in(self, available: Mapping[str, float]) -> bool:
        """True when every amount is at most what ``available`` has of it."""
        return all(v <= available.get(k, 0.0) for k, v in self._d.items())

    def to_array(self, names: Iterable[str]) -> np.ndarray:
        """The amounts in the order of ``names`` (0 for absent names), as float64."""
        return np.array([self[n] for n in names], dtype=np.float64)

    def as_dict(self) -> dict[str, float]:
        return dict(self._d)

    def as_quantities(self) -> dict[str, str]:
        """Kubernetes quantity strings, e.g. for the ``stowage.io/demand`` annotation."""
        return {k: format_quantity(v, k) for k, v in sorted(self._d.items())}


def _container_requests(container: Mapping[str, Any], field: str) -> ResourceVector:
    """A container's requests, each missing key defaulted from its limit (``SetDefaults_Pod``)."""
    resources = container.get("resources") or {}
    limits = ResourceVector.parse(resources.get("limits"), f"{field}.resources.limits")
    requests = ResourceVector.parse(resources.get("requests"), f"{field}.resources.requests")
    explicit = set((resources.get("requests") or {}).keys())
    merged = requests.as_dict()
    for name, amount in limits.items():
        if name not in explicit:
            merged[name] = amount
    return ResourceVector(merged)


def _resized(requests: ResourceVector, status: Mapping[str, Any] | None, field: str) -> ResourceVector:
    """In-place resize: a running container counts at max(spec, allocated, actual)."""
    if not status:
        return requests
    allocated = ResourceVector.parse(status.get("allocatedResources"), f"{field}.allocatedResources")
    actual = ResourceVector.parse((status.get("resources") or {}).get("requests"), f"{field}.resources.requests")
    return requests.max(allocated).max(actual)


def pod_demand(pod: Mapping[str, Any]) -> ResourceVector:
    """A pod's effective resource demand, as kube-scheduler's ``PodRequests`` computes it.

    ``pod`` is the API object as JSON (camelCase). Sums containers; takes the max
    with each init container, where restartable (sidecar) init containers keep
    running and so add to everything after them; adds ``spec.overhead``. Pod-level
    ``spec.resources.requests`` (PodLevelResources) replace the aggregate for the
    resources they name. Container statuses with resize information count at
    ``max(spec, allocated, actual)``. Disk and network bandwidth are not
    Kubernetes resources: they come from the Stowage annotations (see
    :func:`stowage.labels.bandwidth_demand`) and are not added here.
    """
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    statuses = {s.get("name"): s for s in status.get("containerStatuses") or [] if isinstance(s, Mapping)}
    init_statuses = {s.get("name"): s for s in status.get("initContainerStatuses") or [] if isinstance(s, Mapping)}

    total = ResourceVector()
    for i, c in enumerate(spec.get("containers") or []):
        field = f"spec.containers[{i}]"
        total = total + _resized(_container_requests(c, field), statuses.get(c.get("name")), field)

    sidecars = ResourceVector()
    init_peak = ResourceVector()
    for i, c in enumerate(spec.get("initContainers") or []):
        field = f"spec.initContainers[{i}]"
        req = _resized(_container_requests(c, field), init_statuses.get(c.get("name")), field)
        if c.get("restartPolicy") == "Always":
            # A sidecar keeps running: it adds to the main containers and to later init containers.
            total = total + req
            sidecars = sidecars + req
            current = sidecars
        else:
            current = req + sidecars
        init_peak = init_peak.max(current)
    total = total.max(init_peak)

    pod_level = (spec.get("resources") or {}).get("requests")
    if pod_level:
        override = ResourceVector.parse(pod_level, "spec.resources.requests")
        total = ResourceVector({**total.as_dict(), **override.as_dict()})

    overhead = ResourceVector.parse(spec.get("overhead"), "spec.overhead")
    return total + overhead
