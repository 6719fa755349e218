"""The CRD YAML of a source checkout, for tests that install it (the chart installs it in a cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from stowage.operator import crd

#: Where the CRD YAML lives (the chart renders them from ``files/crds/``: templates/crds.yaml).
CRD_DIR = Path(__file__).resolve().parents[2] / "charts" / "stowage" / "files" / "crds"


def crd_path(kind: crd.Kind) -> Path:
    """The YAML file of ``kind``'s CustomResourceDefinition."""
    return CRD_DIR / f"{kind.crd_name}.yaml"


def load_crds() -> list[dict[str, Any]]:
    """Both CustomResourceDefinitions as dicts, Queue first (Jobs name Queues)."""
    return [yaml.safe_load(crd_path(k).read_text()) for k in crd.KINDS]
