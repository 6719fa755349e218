"""Rendering the chart with the real Helm binary, and ``manifests/stowage.yaml`` from it.

``python -m tests.chart.render`` rewrites the chart's copies of the pod UPDATE webhook's CEL condition
(``files/pod-update-condition.cel`` from ``stowage.operator.admission.pod_update_condition``, its one source)
and of the workload webhook's (``files/workload-template-condition.cel``, ``stowage_template_condition``)
and ``manifests/stowage.yaml`` (``helm template`` with default values, for a v1.30 cluster);
``tests/chart/test_rendering.py`` fails while either disagrees with its source.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "CHART",
    "CRDS",
    "MANIFEST",
    "MANIFEST_HEADER",
    "MANIFEST_NAMESPACE",
    "POD_UPDATE_CONDITION",
    "REPO",
    "WORKLOAD_CONDITION",
    "crd_documents",
    "docs_of_kind",
    "find_helm",
    "helm",
    "normalise_certificates",
    "pod_update_condition",
    "render",
    "render_documents",
    "render_manifest",
    "set_args",
    "workload_condition",
]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "stowage"
#: The CRDs' one source; templates/crds.yaml renders them (so `helm upgrade` upgrades them).
CRDS = CHART / "files" / "crds"
MANIFEST = REPO / "manifests" / "stowage.yaml"
MANIFEST_NAMESPACE = "stowage-system"
#: The cluster version manifests/stowage.yaml is rendered for (the scheduler image follows it).
MANIFEST_KUBE_VERSION = "v1.30.14"
POD_UPDATE_CONDITION = CHART / "files" / "pod-update-condition.cel"
WORKLOAD_CONDITION = CHART / "files" / "workload-template-condition.cel"
MANIFEST_HEADER = f"""\
# Stowage for kubectl users: `helm template stowage charts/stowage -n {MANIFEST_NAMESPACE} \\
#     --kube-version {MANIFEST_KUBE_VERSION}` with default values
# (regenerate: .venv/bin/python -m tests.chart.render; tests/chart checks it is current).
# kube-scheduler is {MANIFEST_KUBE_VERSION}: on another cluster version set its image to yours (skew policy).
#
#   kubectl create namespace {MANIFEST_NAMESPACE}
#   kubectl apply -f manifests/stowage.yaml      # again if it says "no matches for kind Queue": the CRD
#                                                # must be established before the default Queue
#
# The webhook certificate below was generated once by `helm template`: everyone who applies this file
# shares its private key. For anything beyond a trial install with Helm (a new CA per install) or with
# cert-manager (--set certManager.enabled=true): docs/install.md.
"""


def find_helm() -> str | None:
    """``$HELM``, ``.tools/helm/helm`` (scripts/setup.sh unpacks it there), or ``helm`` on PATH."""
    for candidate in (os.environ.get("HELM"), str(REPO / ".tools" / "helm" / "helm"), shutil.which("helm")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def helm(*args: str, check: bool = True, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    """Run Helm; ``check``: raise with Helm's stderr when it fails."""
    binary = find_helm()
    if binary is None:
        raise FileNotFoundError("helm not found: run `bash scripts/setup.sh --test` (it unpacks .tools/helm/helm)")
    done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done


def set_args(values: Mapping[str, Any] | None) -> list[str]:
    """``--set-json key=value`` for each dotted key (JSON keeps types: booleans, numbers, lists)."""
    import json

    out: list[str] = []
    for key, value in (values or {}).items():
        out += ["--set-json", f"{key}={json.dumps(value)}"]
    return out


def render(values: Mapping[str, Any] | None = None, *, release: str = "stowage", namespace: str = MANIFEST_NAMESPACE,
           api_versions: Iterable[str] = (), include_crds: bool = False, check: bool = True,
           extra: Iterable[str] = ()) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart."""
    args = ["template", release, str(CHART), "--namespace", namespace, *set_args(values)]
    for api in api_versions:
        args += ["--api-versions", api]
    if include_crds:
        args.append("--include-crds")
    return helm(*args, *extra, check=check)


def render_documents(values: Mapping[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """The rendered objects (empty documents dropped)."""
    return [d for d in yaml.safe_load_all(render(values, **kwargs).stdout) if d]


def crd_documents() -> list[dict[str, Any]]:
    """Every CustomResourceDefinition of the chart, from its one source (``files/crds/``)."""
    return [d for path in sorted(CRDS.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]


def docs_of_kind(docs: Iterable[Mapping[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [dict(d) for d in docs if d.get("kind") == kind]


_PEM_KEYS = re.compile(r"^(\s*(?:ca\.crt|tls\.crt|tls\.key|caBundle):\s*)\S+$", re.MULTILINE)


def normalise_certificates(text: str) -> str:
    """The text with generated key material replaced: two renders differ only there."""
    return _PEM_KEYS.sub(r"\1<generated>", text)


def render_manifest() -> str:
    """What ``manifests/stowage.yaml`` must hold."""
    return MANIFEST_HEADER + render(extra=["--kube-version", MANIFEST_KUBE_VERSION]).stdout


def pod_update_condition() -> str:
    """What ``files/pod-update-condition.cel`` must hold: the operator's CEL condition, one line."""
    from stowage.operator import admission

    return admission.pod_update_condition() + "\n"


def workload_condition() -> str:
    """What ``files/workload-template-condition.cel`` must hold: the workload webhook's CEL condition, one line."""
    from stowage.operator import admission

    return admission.stowage_template_condition() + "\n"


def main(argv: list[str]) -> int:
    POD_UPDATE_CONDITION.parent.mkdir(exist_ok=True)
    POD_UPDATE_CONDITION.write_text(pod_update_condition())
    print(f"wrote {POD_UPDATE_CONDITION.relative_to(REPO)}")
    WORKLOAD_CONDITION.write_text(workload_condition())
    print(f"wrote {WORKLOAD_CONDITION.relative_to(REPO)}")
    MANIFEST.write_text(render_manifest())
    print(f"wrote {MANIFEST.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
