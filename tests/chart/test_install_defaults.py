"""What ``helm install`` gives by default (rendered, no cluster): CRDs as templates, operator HA, end-user roles,
the scheduler image following the cluster, NOTES' skew warnings, and the documented kind ``--set`` lines.

The same behaviours on the real control plane are in ``test_install.py`` (upgrade changes a CRD, ``kubectl auth
can-i`` for namespace admins, editors and viewers).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import yaml

from tests.chart.render import CHART, REPO, crd_documents, docs_of_kind, helm, render, render_documents

pytestmark = pytest.mark.usefixtures("helm_binary")

INSTALL_DOC = REPO / "docs" / "install.md"


def _source_crds() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in crd_documents()}


# --- CRDs --------------------------------------------------------------------------------------------------


def test_crds_are_templates_rendered_from_their_one_source_and_kept_on_uninstall() -> None:
    assert not (CHART / "crds").exists(), "crds/ is installed once and never upgraded by Helm"
    rendered = {d["metadata"]["name"]: d for d in docs_of_kind(render_documents(), "CustomResourceDefinition")}
    source = _source_crds()
    assert set(rendered) == set(source) == {"queues.stowage.io", "jobs.stowage.io", "clusterkopfpeerings.kopf.dev",
                                            "kopfpeerings.kopf.dev"}
    for name, crd in rendered.items():
        assert crd["spec"] == source[name]["spec"], name
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_crds_keep_false_lets_uninstall_delete_them_and_install_false_renders_none() -> None:
    deletable = docs_of_kind(render_documents({"crds.keep": False}), "CustomResourceDefinition")
    assert len(deletable) == 4 and not any(d["metadata"].get("annotations") for d in deletable)
    assert not docs_of_kind(render_documents({"crds.install": False}), "CustomResourceDefinition")


def test_the_default_queue_is_created_at_install_only() -> None:
    """A plain Queue would fail the install (Helm maps every object before the CRD exists); a post-upgrade hook
    would delete and re-create it, status and all, on every upgrade."""
    (queue,) = docs_of_kind(render_documents(), "Queue")
    assert queue["metadata"]["annotations"]["helm.sh/hook"] == "post-install"


# --- operator HA -------------------------------------------------------------------------------------------


def test_operator_runs_two_peered_replicas_with_a_budget_and_a_priority() -> None:
    docs = render_documents()
    (deployment,) = [d for d in docs_of_kind(docs, "Deployment") if d["metadata"]["name"] == "stowage-operator"]
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert "--peering=stowage" in pod["containers"][0]["args"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    spread = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert spread[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (budget,) = docs_of_kind(docs, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"][
        "labels"].items()


def test_one_operator_replica_gets_no_budget_that_would_block_drains() -> None:
    assert not docs_of_kind(render_documents({"operator.replicas": 1}), "PodDisruptionBudget")


# --- end-user roles ----------------------------------------------------------------------------------------


def test_user_roles_aggregate_into_the_built_in_roles() -> None:
    roles = {r["metadata"]["name"]: r for r in docs_of_kind(render_documents(), "ClusterRole")}
    edit, view = roles["stowage-edit"], roles["stowage-view"]
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    assert {k for k in edit["metadata"]["labels"] if k.startswith(aggregate)} == {aggregate + "admin",
                                                                                    aggregate + "edit"}
    assert {k for k in view["metadata"]["labels"] if k.startswith(aggregate)} == {aggregate + "view"}
    assert not any(set(rule["verbs"]) - {"get", "list", "watch"} for rule in view["rules"])
    (writes,) = [r for r in edit["rules"] if "create" in r["verbs"]]
    assert writes["resources"] == ["jobs"]


# --- the scheduler's version -------------------------------------------------------------------------------


def _scheduler_image(*extra: str, values: dict[str, Any] | None = None) -> str:
    docs = [d for d in yaml.safe_load_all(render(values, extra=extra).stdout) if d]
    (deployment,) = [d for d in docs_of_kind(docs, "Deployment") if d["metadata"]["name"] == "stowage-scheduler"]
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler"]
    return str(container["image"])


@pytest.mark.parametrize(("kube_version", "tag"), [("v1.30.13", "v1.30.13"), ("v1.32.4", "v1.32.4"),
                                                   ("v1.31.2-gke.1059000", "v1.31.2"), ("1.33.0", "v1.33.0")],
                         ids=["kind", "newer-minor", "provider-suffix-dropped", "no-v"])
def test_scheduler_image_follows_the_clusters_version(kube_version: str, tag: str) -> None:
    image = _scheduler_image("--kube-version", kube_version)
    assert image == f"registry.k8s.io/kube-scheduler:{tag}"


def test_a_pinned_scheduler_tag_wins() -> None:
    image = _scheduler_image("--kube-version", "v1.32.4", values={"scheduler.image.tag": "v1.31.9"})
    assert image.endswith(":v1.31.9")


def _notes(tag: str | None) -> str:
    """NOTES as ``helm install`` prints them (client dry run: Helm's own default cluster version)."""
    args = ["install", "stowage", str(CHART), "--dry-run=client", "-n", "stowage-system"]
    if tag:
        args += ["--set", f"scheduler.image.tag={tag}"]
    return helm(*args).stdout.partition("NOTES:")[2]


def _default_cluster_minor() -> int:
    found = re.search(r":v1\.(\d+)\.", _scheduler_image())
    assert found
    return int(found.group(1))


def test_notes_warn_on_scheduler_skew_in_both_directions() -> None:
    minor = _default_cluster_minor()
    assert "WARNING" not in _notes(None)
    assert "WARNING" not in _notes(f"v1.{minor - 1}.0"), "one minor older is allowed"
    newer = _notes(f"v1.{minor + 1}.0")
    assert "is newer than this cluster" in newer
    older = _notes(f"v1.{minor - 2}.0")
    assert "2 minor versions older than this" in older and "at most one minor version older" in older


# --- the kind advice ---------------------------------------------------------------------------------------


def _documented_capacity_args() -> list[list[str]]:
    """Every ``--set…nodeMonitor.capacity…`` form docs/install.md gives, split as a shell would."""
    text = INSTALL_DOC.read_text()
    forms = re.findall(r"`(--set(?:-json|-string)? '?nodeMonitor\.capacity=[^`]+)`", text)
    assert len(forms) >= 2, forms
    return [shlex.split(form) for form in forms]


def test_the_documented_kind_capacity_settings_render() -> None:
    for args in _documented_capacity_args():
        docs = [d for d in yaml.safe_load_all(render(extra=args).stdout) if d]
        (daemonset,) = docs_of_kind(docs, "DaemonSet")
        assert "--capacity=cpu=2,memory=4Gi" in daemonset["spec"]["template"]["spec"]["containers"][0]["args"], args


def test_the_unescaped_comma_fails_as_the_issue_reported() -> None:
    done = render(extra=["--set", "nodeMonitor.capacity=cpu=2,memory=4Gi"], check=False)
    assert done.returncode != 0 and "additional properties 'memory' not allowed" in done.stderr


# --- the quickstart ----------------------------------------------------------------------------------------


def test_the_quickstarts_job_is_valid_and_carries_only_the_one_label() -> None:
    import kubernetes_validate

    text = (REPO / "docs" / "quickstart.md").read_text()
    (manifest,) = re.findall(r"<<'YAML'\n(.*?)\nYAML\n", text, flags=re.DOTALL)
    job = yaml.safe_load(manifest)
    kubernetes_validate.validate(job, "1.30.0", strict=True)
    template = job["spec"]["template"]
    assert template["metadata"]["labels"] == {"stowage.io/queue": "default"}
    assert "schedulerName" not in template["spec"]
    assert "bash scripts/kind-up.sh" in text and "(docs/quickstart.md)" in (REPO / "README.md").read_text()
