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
import reprlib
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any

import numpy as np

from stowage.errors import InvalidInput, QuantityError

__all__ = [
    "CORE_RESOURCES",
    "CPU",
    "DISK",
    "MAX_QUANTITY",
    "MAX_QUANTITY_CHARS",
    "MEMORY",
    "NETWORK",
    "ResourceVector",
    "containers_of",
    "expect_list",
    "expect_object",
    "format_quantity",
    "parse_quantity",
    "pod_demand",
    "shown",
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
# signed number (digits, optional fraction, or fraction alone), then suffix or exponent; ASCII digits only, as
# the API's grammar (``\d`` alone would also take other scripts' digits).
_QUANTITY = re.compile(
    r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))",
    re.ASCII,
)
_ALLOWED = "a Kubernetes quantity such as 500m, 2, 1.5Gi, 128Mi, 1e3 (suffixes n u m k M G T P E, Ki..Ei)"
#: Longer text is refused before it is parsed: no real quantity comes close, and the bound keeps the exponent's
#: ``int()`` and the Decimal arithmetic below far from Python's digit and Decimal context limits.
MAX_QUANTITY_CHARS = 64
#: Beyond this exponent a quantity of at most 64 characters is either 0, or above ``MAX_QUANTITY`` (positive), or
#: below 1e-36 (negative), which reads as 0; Decimal never sees it, so no Decimal context limit is reached.
_MAX_EXPONENT = 100
#: The API's bound on a quantity's magnitude (``resource.Quantity``: 2^63-1). It also keeps every sum of
#: quantities the cluster model adds up far from float overflow.
MAX_QUANTITY = float(2**63)
_SHOWN_CHARS = 200


_SHORT = reprlib.Repr()  # bounded at every level: never deep, never long, never an over-long integer
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict = 3, 40, 40, 6, 6
_SHOWN_CONTAINER_CHARS = 80


def shown(value: Any) -> Any:
    """``value`` as an error (``InvalidInput.value``, and its message's ``repr``) may carry it.

    Scalars, short strings and small lists or objects as they are (``got []`` says more than a size); a
    long string by its start and length; a larger container or a huge integer by its type and size: their
    ``repr`` may be megabytes, and for a deep list or an integer past Python's digit limit it raises.
    """
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= 64 else f"<an integer of {value.bit_length()} bits>"
    if isinstance(value, str):
        return value if len(value) <= _SHOWN_CHARS else f"{value[:40]}... ({len(value)} characters)"
    if isinstance(value, Mapping | list | tuple):
        text = _SHORT.repr(value)
        if "..." not in text and len(text) <= _SHOWN_CONTAINER_CHARS:
            return value
        return f"<a {type(value).__name__} of {len(value)} items>"
    return f"<a {type(value).__name__}>"


def _parse_text(value: str, field: str) -> float:
    text = value.strip()
    if len(text) > MAX_QUANTITY_CHARS:
        raise QuantityError(field, shown(text), f"at most {MAX_QUANTITY_CHARS} characters: {_ALLOWED}")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(field, shown(value), _ALLOWED)
    mantissa = Decimal(match["num"])  # the regex admits only plain decimals: Decimal() cannot fail
    if match["bin"]:
        return float(mantissa * _BINARY[match["bin"]])
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if mantissa == 0 or exponent < -_MAX_EXPONENT:
            return 0.0
        if exponent > _MAX_EXPONENT:
            return math.copysign(math.inf, mantissa)  # refused below, as any magnitude above MAX_QUANTITY
        return float(mantissa.scaleb(exponent))
    return float(mantissa * _DECIMAL[match["dec"] or ""])


def parse_quantity(value: str | int | float, field: str = "quantity", *, allow_negative: bool = False) -> float:
    """Parse a Kubernetes quantity into a float in base units (cores, bytes, ...).

    Total: whatever ``value`` is, the only exception is :class:`QuantityError` naming ``field``, for
    anything the API would reject, for text longer than ``MAX_QUANTITY_CHARS``, for NaN/infinite numbers,
    for magnitudes above 2^63-1 (the API's own limit) and for negative values unless ``allow_negative``.
    """
    if isinstance(value, bool):
        raise QuantityError(field, value, _ALLOWED)
    if isinstance(value, int):
        if abs(value) > MAX_QUANTITY:  # compared as int: float() of a huge int raises OverflowError
            raise QuantityError(field, shown(value), "a quantity of at most 2^63-1 in magnitude")
        number = float(value)
    elif isinstance(value, float):
        number = value
        if not math.isfinite(number):
            raise QuantityError(field, value, "a finite number")
    elif isinstance(value, str):
        number = _parse_text(value, field)
    else:
        raise QuantityError(field, shown(value), _ALLOWED)
    if abs(number) > MAX_QUANTITY:
        raise QuantityError(field, shown(value), "a quantity of at most 2^63-1 in magnitude")
    if number < 0 and not allow_negative:
        raise QuantityError(field, shown(value), "a non-negative quantity")
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
            raise QuantityError(field, shown(quantities), "a map of resource name to quantity")
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


def expect_object(value: Any, field: str, error: type[InvalidInput] = InvalidInput) -> Mapping[str, Any]:
    """``value`` as a JSON object (absent reads as empty); ``error`` naming ``field`` when it is something else."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise error(field, shown(value), "an object")
    return value


def expect_list(value: Any, field: str, error: type[InvalidInput] = InvalidInput) -> list[Any]:
    """``value`` as a JSON list (absent reads as empty); ``error`` naming ``field`` when it is something else."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise error(field, shown(value), "a list")
    return list(value)


def containers_of(spec: Mapping[str, Any], kind: str = "containers") -> list[tuple[str, Mapping[str, Any]]]:
    """``spec.<kind>`` as ``(field path, container)`` pairs; :class:`InvalidInput` unless a list of objects."""
    where = f"spec.{kind}"
    items = expect_list(spec.get(kind), where)
    return [(f"{where}[{i}]", expect_object(c, f"{where}[{i}]")) for i, c in enumerate(items)]


def _container_requests(container: Mapping[str, Any], field: str) -> ResourceVector:
    """A container's requests, each missing key defaulted from its limit (``SetDefaults_Pod``)."""
    resources = expect_object(container.get("resources"), f"{field}.resources")
    limits = ResourceVector.parse(resources.get("limits"), f"{field}.resources.limits")
    requests = ResourceVector.parse(resources.get("requests"), f"{field}.resources.requests")
    explicit = set((resources.get("requests") or {}).keys())  # a mapping, or empty: parse() checked it
    merged = requests.as_dict()
    for name, amount in limits.items():
        if name not in explicit:
            merged[name] = amount
    return ResourceVector(merged)


_Status = tuple[str, Mapping[str, Any]]  # (field path, container status)


def _statuses(status: Mapping[str, Any], key: str) -> dict[str, _Status]:
    """Container statuses by name; entries without a usable name are skipped (they match no container)."""
    entries = expect_list(status.get(key), f"status.{key}")
    return {s["name"]: (f"status.{key}[{i}]", s) for i, s in enumerate(entries)
            if isinstance(s, Mapping) and isinstance(s.get("name"), str)}


def _resized(requests: ResourceVector, found: _Status | None) -> ResourceVector:
    """In-place resize: a running container counts at max(spec, allocated, actual)."""
    if found is None:
        return requests
    field, status = found
    allocated = ResourceVector.parse(status.get("allocatedResources"), f"{field}.allocatedResources")
    actual = ResourceVector.parse(
        expect_object(status.get("resources"), f"{field}.resources").get("requests"), f"{field}.resources.requests"
    )
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

    Total over any JSON ``pod``: a bad quantity or a field of the wrong shape raises
    :class:`InvalidInput` (:class:`QuantityError` for a quantity) naming the field, nothing else.
    """
    pod = expect_object(pod, "pod")
    spec = expect_object(pod.get("spec"), "spec")
    status = expect_object(pod.get("status"), "status")
    statuses = _statuses(status, "containerStatuses")
    init_statuses = _statuses(status, "initContainerStatuses")

    def name_of(c: Mapping[str, Any]) -> str | None:
        name = c.get("name")
        return name if isinstance(name, str) else None

    total = ResourceVector()
    for field, c in containers_of(spec):
        total = total + _resized(_container_requests(c, field), statuses.get(name_of(c)))

    sidecars = ResourceVector()
    init_peak = ResourceVector()
    for field, c in containers_of(spec, "initContainers"):
        req = _resized(_container_requests(c, field), init_statuses.get(name_of(c)))
        if c.get("restartPolicy") == "Always":
            # A sidecar keeps running: it adds to the main containers and to later init containers.
            total = total + req
            sidecars = sidecars + req
            current = sidecars
        else:
            current = req + sidecars
        init_peak = init_peak.max(current)
    total = total.max(init_peak)

    pod_level = expect_object(spec.get("resources"), "spec.resources").get("requests")
    if pod_level:
        override = ResourceVector.parse(pod_level, "spec.resources.requests")
        total = ResourceVector({**total.as_dict(), **override.as_dict()})

    overhead = ResourceVector.parse(spec.get("overhead"), "spec.overhead")
    return total + overhead
