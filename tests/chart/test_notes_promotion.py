"""The chart's NOTES say when promotion needs the feature gate (issue #32 §2), per cluster version.

``helm install --dry-run=client`` cannot be given a cluster version, so NOTES.txt is rendered here as
``helm template --kube-version`` renders any template: a copy of the chart with a probe ConfigMap that runs the
NOTES text through ``tpl`` with the same context.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.chart.render import CHART, find_helm, helm

PROBE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: notes-probe
data:
  notes: |
{{ tpl (.Files.Get "notes-probe.txt") . | indent 4 }}
"""


def notes(tmp_path: Path, kube_version: str, *values: str) -> str:
    if find_helm() is None:
        pytest.skip("helm not found: run `bash scripts/setup.sh --test`")
    chart = tmp_path / "stowage"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes-probe.txt")
    (chart / "templates" / "notes-probe.yaml").write_text(PROBE)
    out = helm("template", "stowage", str(chart), "-n", "stowage-system", "--kube-version", kube_version,
               "--show-only", "templates/notes-probe.yaml", *values).stdout
    return str(yaml.safe_load(out)["data"]["notes"])


def test_notes_say_promotion_needs_the_gate_before_1_33(tmp_path: Path) -> None:
    text = notes(tmp_path, "v1.30.13")
    assert "InPlacePodVerticalScaling=true" in text and "stowage_promotion_enabled 0" in text
    assert "kubectl get --raw /metrics" in text


def test_notes_say_nothing_of_the_gate_from_1_33(tmp_path: Path) -> None:
    assert "InPlacePodVerticalScaling" not in notes(tmp_path, "v1.33.0")


def test_no_operator_no_promotion_note(tmp_path: Path) -> None:
    assert "InPlacePodVerticalScaling" not in notes(tmp_path, "v1.30.13", "--set", "operator.enabled=false")
