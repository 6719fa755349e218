"""Stowage's custom resources: their names, the enums and defaults of their schemas, and where the YAML lives.

Pure: no Kubernetes I/O. The CRD YAML in ``charts/stowage/files/crds/`` is the one source of the schemas:
the chart installs it, ``manifests/`` is rendered from the chart, the tests apply it to a real API
server. The constants below repeat what the admission rules need from it (enums, defaults, bounds);
``tests/operator/test_crds.py`` fails when the two drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from stowage import labels

__all__ = [
    "API_VERSION",
    "DEFAULT_JOB_ORDER",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_QUEUE_OPPORTUNISTIC",
    "DEFAULT_WEIGHT",
    "GROUP",
    "JOB",
    "JOB_ORDERS",
    "JOB_PHASES",
    "KINDS",
    "MAX_EXPECTED_DURATION_S",
    "MAX_REPLICAS",
    "MAX_RETRIES_LIMIT",
    "MAX_SELECTOR_EXPRESSIONS",
    "MAX_SELECTOR_LABELS",
    "MAX_SELECTOR_VALUES",
    "MAX_TASKS",
    "MAX_WEIGHT",
    "QUEUE",
    "QUEUE_NAME",
    "QUEUE_NAME_MAX",
    "QUEUE_OPPORTUNISTIC",
    "QUEUE_STATES",
    "SELECTOR_OPERATORS",
    "STATE_CLOSED",
    "STATE_DRAINING",
    "STATE_OPEN",
    "VERSION",
    "Kind",
    "is_queue_name",
]

GROUP = labels.API_GROUP
VERSION = labels.API_VERSION
API_VERSION = f"{GROUP}/{VERSION}"

#: Queue ``spec.jobOrder``: FIFO by creation, SRTF by least remaining work, FSP by processor-sharing finish time.
JOB_ORDERS: tuple[str, ...] = ("FIFO", "SRTF", "FSP")
DEFAULT_JOB_ORDER = "SRTF"
#: Queue ``spec.opportunistic``: whether the queue's tasks may use harvested capacity.
QUEUE_OPPORTUNISTIC: tuple[str, ...] = ("Allow", "Deny")
DEFAULT_QUEUE_OPPORTUNISTIC = "Allow"
#: Queue ``spec.state``: Open takes and releases work; Closed refuses new work at admission (what it admitted goes
#: on); Draining admits new work but the dispatcher releases none of it (running work finishes).
STATE_OPEN, STATE_CLOSED, STATE_DRAINING = "Open", "Closed", "Draining"
QUEUE_STATES: tuple[str, ...] = (STATE_OPEN, STATE_CLOSED, STATE_DRAINING)
#: Queue ``spec.namespaceSelector``: a ``metav1.LabelSelector``; its ``matchExpressions`` operators and bounds.
SELECTOR_OPERATORS: tuple[str, ...] = ("In", "NotIn", "Exists", "DoesNotExist")
MAX_SELECTOR_LABELS = 64
MAX_SELECTOR_EXPRESSIONS = 32
MAX_SELECTOR_VALUES = 64
DEFAULT_WEIGHT = 1.0
MAX_WEIGHT = 1_000_000
#: Job ``status.phase`` values.
JOB_PHASES: tuple[str, ...] = ("Pending", "Running", "Suspended", "Succeeded", "Failed")
DEFAULT_MAX_RETRIES = 3
MAX_RETRIES_LIMIT = 100
#: ``spec.tasks`` and each ``dependsOn`` hold at most this many entries: the bound that keeps the CEL rules
#: (unique names, known dependencies) inside the API server's cost budget.
MAX_TASKS = 64
#: Tasks in one group (``replicas``).
MAX_REPLICAS = 100_000
#: The longest ``expectedDuration`` (and ``stowage.io/expected-duration``) a task may state: 30 days. A batch
#: task that runs longer than a month is not left to a queue unwatched, so no real hint is refused; and the
#: bound keeps a Job's remaining work (at most 64 groups x 100,000 tasks x 30 days, about 1.7e13 task-seconds)
#: far from float overflow, where a stated 1e308 s would become an infinite amount of work.
MAX_EXPECTED_DURATION_S = 30 * 24 * 3600
#: A Queue's name as ``spec.queue`` must spell it (a DNS subdomain, as every cluster-scoped object's name).
QUEUE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUEUE_NAME_MAX = 253


def is_queue_name(value: Any) -> bool:
    """True for a name a Queue can have (a lookup of anything else would ask the API a different question)."""
    return isinstance(value, str) and len(value) <= QUEUE_NAME_MAX and QUEUE_NAME.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class Kind:
    """One custom resource: its names as the API serves them."""

    kind: str
    plural: str
    singular: str
    short_name: str
    namespaced: bool

    @property
    def crd_name(self) -> str:
        """``<plural>.<group>``: the CustomResourceDefinition's name and its YAML file's stem."""
        return f"{self.plural}.{GROUP}"

    def path(self, name: str | None = None, namespace: str | None = None) -> str:
        """The REST path of the collection, or of one object when ``name`` is given.

        A namespaced kind without ``namespace`` gives the all-namespaces collection.
        """
        base = f"/apis/{GROUP}/{VERSION}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name is not None else base


QUEUE = Kind("Queue", "queues", "queue", "sq", namespaced=False)
JOB = Kind("Job", "jobs", "job", "sjob", namespaced=True)
KINDS: tuple[Kind, ...] = (QUEUE, JOB)
