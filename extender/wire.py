"""kube-scheduler's extender wire types (``k8s.io/kube-scheduler/extender/v1``), as Pydantic models.

The Go structs have no ``json:`` tags, so the JSON keys are the Go field names in
PascalCase, every key is always present and unset pointers are ``null``
(EXTENDER_PROTOCOL.md §1). The embedded Kubernetes objects keep their camelCase
API JSON; we model only the parts we read and allow everything else through.

The only module of the extender that knows Pydantic: routes convert these models
to plain values with the helpers at the bottom, and build responses as dicts that
orjson encodes exactly as Go would have.
"""

from __future__ import annotations

import json
import operator
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

__all__ = [
    "ExtenderArgs",
    "ExtenderFilterResult",
    "ExtenderPreemptionArgs",
    "ExtenderPreemptionResult",
    "HostEntries",
    "HostPriority",
    "MetaPod",
    "MetaVictims",
    "NodeList",
    "NodeObject",
    "ObjectMeta",
    "PodObject",
    "Problem",
    "Victims",
    "accepts_extender_args",
    "describe_validation_error",
    "filter_result",
    "host_priorities",
    "host_priorities_json",
    "preemption_result",
]


class _KubeObject(BaseModel):
    model_config = ConfigDict(extra="allow")


class ObjectMeta(_KubeObject):
    """The ``metadata`` of a Kubernetes object (fields Stowage reads; others pass through)."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PodObject(_KubeObject):
    """A ``v1.Pod`` as the API serialises it (camelCase)."""

    metadata: ObjectMeta | None = None
    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None


class NodeObject(_KubeObject):
    """A ``v1.Node`` as the API serialises it."""

    metadata: ObjectMeta | None = None
    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None


class NodeList(_KubeObject):
    """A ``v1.NodeList``; the scheduler sends ``{"metadata": {}, "items": [...]}``."""

    metadata: dict[str, Any] | None = None
    items: list[NodeObject] | None = None


class ExtenderArgs(BaseModel):
    """Request of ``filter`` and ``prioritize``: ``NodeNames`` when nodeCacheCapable, else ``Nodes``."""

    model_config = ConfigDict(extra="ignore")

    Pod: PodObject
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class ExtenderFilterResult(BaseModel):
    """Response of ``filter``. Both lists null would filter out every node: we always send one."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] | None = None
    FailedAndUnresolvableNodes: dict[str, str] | None = None
    Error: str = ""


class HostPriority(BaseModel):
    """One entry of the ``prioritize`` response (a bare JSON array of these)."""

    Host: str
    Score: int = Field(ge=0, le=10)


class MetaPod(BaseModel):
    """A victim named by UID."""

    model_config = ConfigDict(extra="ignore")

    UID: str


class MetaVictims(BaseModel):
    model_config = ConfigDict(extra="ignore")

    Pods: list[MetaPod] | None = None
    NumPDBViolations: int = 0


class Victims(BaseModel):
    model_config = ConfigDict(extra="ignore")

    Pods: list[PodObject | None] | None = None
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(BaseModel):
    """Request of ``preempt``: ``NodeNameToMetaVictims`` when nodeCacheCapable, else ``NodeNameToVictims``."""

    model_config = ConfigDict(extra="ignore")

    Pod: PodObject
    NodeNameToVictims: dict[str, Victims | None] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims | None] | None = None


class Problem(BaseModel):
    """Body of an HTTP 400: what is wrong with the request, field by field."""

    error: str


class ExtenderPreemptionResult(BaseModel):
    """Response of ``preempt``: always the meta (UID) form."""

    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


# --- plain-value helpers ------------------------------------------------------------------------


_EXTENDER_ARGS = TypeAdapter(ExtenderArgs)


def accepts_extender_args(raw: Any) -> bool:
    """Whether :class:`ExtenderArgs` (the filter/prioritize routes' body model) accepts ``raw``."""
    try:
        _EXTENDER_ARGS.validate_python(raw)
    except ValidationError:
        return False
    return True


def describe_validation_error(exc: ValidationError | Any) -> str:
    """One line per problem, ``Pod.metadata.labels.x: Input should be a valid string (got 3)``."""
    lines = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            where = [p for p in err.get("loc", ()) if p != "body"]
            detail = (err.get("ctx") or {}).get("error", "invalid JSON")
            lines.append(f"body is not valid JSON: {detail} at character {where[0] if where else '?'}")
            continue
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        got = err.get("input")
        shown = repr(got)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        lines.append(f"{loc}: {err.get('msg')} (got {shown})")
    return "; ".join(lines) or "request body does not match the extender protocol"


def filter_result(
    passed: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    *,
    node_items: list[Any] | None,
) -> dict[str, Any]:
    """The filter response in the request's mode: ``node_items`` (raw items by name order) → ``Nodes``.

    ``passed`` is always an explicit list (``[]`` when empty): both lists ``null``
    would mean "filter out every node" to the scheduler.
    """
    if node_items is None:
        return {
            "Nodes": None,
            "NodeNames": passed,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
    return {
        "Nodes": {"metadata": {}, "items": node_items},
        "NodeNames": None,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }


def host_priorities(names: list[str], scores: list[int]) -> list[dict[str, Any]]:
    """The prioritize response: a bare array of ``{"Host", "Score"}``."""
    # scores arrive as Python ints (ndarray.tolist()); no per-entry conversion on this hot path
    return [{"Host": n, "Score": s} for n, s in zip(names, scores)]  # noqa: B905 - equal by construction


#: ``{"Host":"<name>","Score":`` per node name, JSON-escaped once; cleared when it outgrows any cluster.
_HOST_PREFIX: dict[str, str] = {}
_HOST_PREFIX_LIMIT = 200_000
_SCORE_SUFFIX = tuple(f"{s}}}" for s in range(11))


def _host_prefix(name: str) -> str:
    try:
        quoted = orjson.dumps(name).decode()
    except TypeError:  # a lone UTF-16 surrogate: only the stdlib can escape it
        quoted = json.dumps(name, ensure_ascii=True)
    if len(_HOST_PREFIX) >= _HOST_PREFIX_LIMIT:
        _HOST_PREFIX.clear()
    prefix = _HOST_PREFIX[name] = f'{{"Host":{quoted},"Score":'
    return prefix


def host_priorities_json(names: Sequence[str], scores: Sequence[int]) -> bytes:
    """:func:`host_priorities` already encoded: the same bytes orjson would write, without a dict per node.

    Each node name's JSON prefix is escaped once and kept; scores must be 0..10 (else orjson is used).
    """
    if len(names) != len(scores) or any(s < 0 or s > 10 for s in (min(scores, default=0), max(scores, default=0))):
        return orjson.dumps(host_priorities(list(names), list(scores)))
    try:
        prefixes = list(map(_HOST_PREFIX.__getitem__, names))
    except KeyError:  # names not seen yet: escape those once
        prefixes = [_HOST_PREFIX.get(n) or _host_prefix(n) for n in names]
    entries = map(operator.add, prefixes, map(_SCORE_SUFFIX.__getitem__, scores))
    return ("[" + ",".join(entries) + "]").encode()


class HostEntries:
    """Encoded ``{"Host":"<name>","Score":s}`` for every model row and score 0..10, built once per name.

    A prioritize answer is then a gather and a join (:meth:`encode`), with no Python work
    per node. Rows belong to one node-index version of the cluster model: a new version
    (nodes added or removed, rows reused) starts the table afresh.
    """

    def __init__(self) -> None:
        self._version: int | None = None
        self._table = np.empty((0, 11), dtype=object)
        self._lock = threading.Lock()

    def encode(self, names: Sequence[str], rows: np.ndarray, scores: np.ndarray, version: int) -> bytes:
        """The body for ``names`` at model ``rows`` (−1: unknown) with int ``scores``; same bytes as orjson."""
        if rows.size == 0 or rows.min() < 0 or scores.min() < 0 or scores.max() > 10:
            return host_priorities_json(names, scores.tolist())
        with self._lock:
            if version != self._version:
                self._version, self._table = version, np.empty((0, 11), dtype=object)
            table = self._table
            if table.shape[0] <= rows.max():
                grown = np.empty((max(int(rows.max()) + 1, 2 * table.shape[0]), 11), dtype=object)
                grown[: table.shape[0]] = table
                table = self._table = grown
            new = np.flatnonzero(np.equal(table[rows, 0], None))
            for k in new.tolist():
                prefix = _HOST_PREFIX.get(names[k]) or _host_prefix(names[k])
                table[rows[k]] = [f"{prefix}{s}}}" for s in range(11)]
            return ("[" + ",".join(table[rows, scores].tolist()) + "]").encode()


def preemption_result(victims: dict[str, tuple[list[str], int]]) -> dict[str, Any]:
    """``{node: ([uid, ...], pdb_violations)}`` → the meta form; nodes without victims must not be here."""
    return {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": int(pdb)}
            for node, (uids, pdb) in victims.items()
        }
    }
