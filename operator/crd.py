"""Stowage's custom resources: their names, the enums and defaults of their schemas, and where the YAML lives.

Pure: no Kubernetes I/O. The CRD YAML in ``charts/stowage/files/crds/`` is the one source of the schemas:
the chart installs it, ``manifests/`` is rendered from the chart, the tests apply it to a real API
server. The constants below repeat what the admission rules need from it (enums, defaults, bounds);
``tests/operator/test_crds.py`` fails when the two drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stowage import labels

__all__ = [
    "API_VERSION",
    "CRD_DIR",
    "DEFAULT_JOB_ORDER",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_QUEUE_OPPORTUNISTIC",
    "DEFAULT_WEIGHT",
    "GROUP",
    "JOB",
    "JOB_ORDERS",
    "JOB_PHASES",
    "KINDS",
    "MAX_RETRIES_LIMIT",
    "MAX_TASKS",
    "QUEUE",
    "QUEUE_OPPORTUNISTIC",
    "VERSION",
    "Kind",
    "crd_path",
    "load_crds",
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
DEFAULT_WEIGHT = 1.0
#: Job ``status.phase`` values.
JOB_PHASES: tuple[str, ...] = ("Pending", "Running", "Suspended", "Succeeded", "Failed")
DEFAULT_MAX_RETRIES = 3
MAX_RETRIES_LIMIT = 100
#: ``spec.tasks`` and each ``dependsOn`` hold at most this many entries: the bound that keeps the CEL rules
#: (unique names, known dependencies) inside the API server's cost budget.
MAX_TASKS = 64

#: Where the CRD YAML lives in a source checkout (the chart renders them from ``files/crds/``: templates/crds.yaml).
CRD_DIR = Path(__file__).resolve().parents[1] / "charts" / "stowage" / "files" / "crds"


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


def crd_path(kind: Kind) -> Path:
    """The YAML file of ``kind``'s CustomResourceDefinition."""
    return CRD_DIR / f"{kind.crd_name}.yaml"


def load_crds() -> list[dict[str, Any]]:
    """Both CustomResourceDefinitions as dicts, Queue first (Jobs name Queues)."""
    missing = [str(crd_path(k)) for k in KINDS if not crd_path(k).is_file()]
    if missing:
        raise FileNotFoundError(
            f"CRD YAML not found: {', '.join(missing)}; it ships with the source tree and the Helm chart "
            "(charts/stowage/files/crds/), not inside the Python package: install the CRDs with the chart"
        )
    return [yaml.safe_load(crd_path(k).read_text()) for k in KINDS]
