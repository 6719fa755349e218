"""``helm install`` onto the real control plane, the components under their chart ServiceAccounts, upgrade, uninstall.

One install per module (release ``stowage`` in ``stowage-chart``) on three fake nodes, one of them tainted
``NoSchedule``. No kubelet runs the chart's pods: kube-controller-manager creates them (DaemonSet pods stay
Pending without a scheduler), and the tests start the components themselves, as processes on this machine,
each with a token of its own chart ServiceAccount (TokenRequest API) and the configuration the chart
rendered into the cluster. Tests run in file order; the last ones upgrade and uninstall.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from stowage.labels import HARVEST_RESOURCE, LABEL_CLASS, OPPORTUNISTIC_PRIORITY_CLASS, SCHEDULER_NAME
from tests.chart.render import CHART, REPO, crd_documents, helm
from tests.support.chart_tokens import token_kubeconfig
from tests.support.controlplane import LOCAL_ASSETS, ControlPlane, find_assets
from tests.support.fake_kubelet import ANN_RUN_SECONDS, FakeKubelet, NodeSpec
from tests.support.kube import delete_namespace_and_wait
from tests.support.processes import EXTENDER_PORT_LOGGED, NODE_MONITOR_PORT_LOGGED, stop_process, wait_for_logged_port

pytestmark = pytest.mark.usefixtures("helm_binary")

RELEASE = "stowage"
NAMESPACE = "stowage-chart"
NODE_LABEL = "stowage-test/chart"
WAIT_S = 90.0
"""Upper bound of every wait: how long a broken test may hang on a loaded 2-core machine, not a speed target."""

STOWAGE = Path(sys.executable).with_name("stowage")
PEERING = "stowage"
SA = {"scheduler": f"{RELEASE}-scheduler", "node-monitor": f"{RELEASE}-node-monitor", "operator": f"{RELEASE}-operator"}


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.2)


class Installed:
    """The release on the control plane, and handles the tests share."""

    def __init__(self, plane: ControlPlane, kubelet: FakeKubelet, nodes: list[str], workdir: Path) -> None:
        self.plane, self.kubelet, self.nodes, self.workdir = plane, kubelet, nodes, workdir
        self.api = plane.api()
        self.core = client.CoreV1Api(self.api)
        self.dynamic = DynamicClient(self.api)
        self.installed = False
        #: Upgrade flags: --force-conflicts once CRDs another field manager applied were adopted (docs/install.md).
        self.upgrade_flags: list[str] = []

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return helm(*args, "--kubeconfig", str(self.plane.kubeconfig), check=check)

    def manifest(self) -> list[dict[str, Any]]:
        text = self.helm("get", "manifest", RELEASE, "-n", NAMESPACE).stdout
        return [d for d in yaml.safe_load_all(text) if d]

    def get(self, doc: dict[str, Any]) -> dict[str, Any] | None:
        resource = self.dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        namespace = doc["metadata"].get("namespace") if resource.namespaced else None
        if resource.namespaced and namespace is None:
            namespace = NAMESPACE
        try:
            return resource.get(name=doc["metadata"]["name"], namespace=namespace).to_dict()
        except NotFoundError:
            return None

    def token_kubeconfig(self, component: str) -> Path:
        """A kubeconfig with a TokenRequest token of the component's chart ServiceAccount."""
        return token_kubeconfig(self.plane, self.core, SA[component], NAMESPACE,
                                name=f"chart-{component}-{uuid.uuid4().hex[:6]}")

    def config_map(self, suffix: str) -> dict[str, str]:
        return self.core.read_namespaced_config_map(f"{RELEASE}-{suffix}", NAMESPACE).data

    def pods(self, component: str) -> list[client.V1Pod]:
        selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
        return self.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items


@pytest.fixture(scope="module")
def installed(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs the test's own control plane (STOWAGE_TEST_KUBECONFIG points at an external cluster)")
    workdir = tmp_path_factory.mktemp("chart-install")
    kubelet = FakeKubelet(control_plane.api(), workdir / "cgroup").start()
    specs = [NodeSpec(f"chart-node-{i}-{uuid.uuid4().hex[:4]}", labels={NODE_LABEL: "1"}) for i in range(2)]
    specs.append(NodeSpec(f"chart-node-tainted-{uuid.uuid4().hex[:4]}", labels={NODE_LABEL: "1"},
                          taints=({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},)))
    nodes = kubelet.add_nodes(specs)
    state = Installed(control_plane, kubelet, nodes, workdir)
    # A PriorityClass or a default Queue another module left behind (not Helm's: another module's operator
    # creates the Queue at start) would block the install: Helm adopts nothing.
    scheduling = client.SchedulingV1Api(state.api)
    with contextlib.suppress(client.ApiException):
        leftover = scheduling.read_priority_class(OPPORTUNISTIC_PRIORITY_CLASS)
        if (leftover.metadata.labels or {}).get("app.kubernetes.io/managed-by") != "Helm":
            scheduling.delete_priority_class(OPPORTUNISTIC_PRIORITY_CLASS)
    objects = client.CustomObjectsApi(state.api)
    with contextlib.suppress(client.ApiException):
        queue = objects.get_cluster_custom_object("stowage.io", "v1alpha1", "queues", "default")
        if (queue["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") != "Helm":
            objects.delete_cluster_custom_object("stowage.io", "v1alpha1", "queues", "default")
    # CRDs another module applied (not Helm's) are adopted as docs/install.md tells a user upgrading from a chart
    # that kept them in crds/: Helm's ownership label and annotations, then the install takes them over.
    if adopt_crds(state.api, RELEASE, NAMESPACE):
        # Helm 4 applies server-side: fields another manager applied (kubectl, Helm 3's crds/) conflict on the
        # first upgrade that changes them, unless it forces them over (docs/install.md).
        state.upgrade_flags = ["--force-conflicts"]
    try:
        # Default values: two operator replicas peered as "stowage", the CRDs templates of the release.
        state.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace")
        state.installed = True
        yield state
    finally:
        if state.installed:
            state.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "2m", check=False)
        kubelet.stop(cleanup=True)


def adopt_crds(api: client.ApiClient, release: str, namespace: str) -> list[str]:
    """Give every existing CRD of the chart Helm's ownership metadata for ``release``; returns their names."""
    extensions = client.ApiextensionsV1Api(api)
    adopted = []
    for doc in crd_documents():
        name = doc["metadata"]["name"]
        with contextlib.suppress(client.ApiException):
            extensions.patch_custom_resource_definition(name, {"metadata": {
                "labels": {"app.kubernetes.io/managed-by": "Helm"},
                "annotations": {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}}})
            adopted.append(name)
    return adopted


@contextlib.contextmanager
def process(argv: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})})
    try:
        yield proc
    finally:
        stop_process(proc, timeout_s=15)


def _forbidden(log: Path) -> list[str]:
    """Refusals in a component's log; an Event refused by a terminating namespace is no RBAC refusal."""
    return [line for line in log.read_text(errors="replace").splitlines()
            if ("forbidden" in line.lower() or " 403" in line) and "because it is being terminated" not in line]


# --- install -----------------------------------------------------------------------------------------------


def test_every_rendered_object_is_accepted(installed: Installed) -> None:
    docs = installed.manifest()
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "DaemonSet", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
            "PriorityClass", "CustomResourceDefinition", "PodDisruptionBudget", "Secret", "ClusterRole",
            "Role"} <= kinds
    missing = [f"{d['kind']}/{d['metadata']['name']}" for d in docs if installed.get(d) is None]
    assert not missing


def test_crds_are_installed_and_the_default_queue_exists(installed: Installed) -> None:
    queue = installed.dynamic.resources.get(api_version="stowage.io/v1alpha1", kind="Queue").get(name="default")
    assert queue.spec.weight == 1
    crds = client.ApiextensionsV1Api(installed.api)
    for name in ("clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"):
        conditions = crds.read_custom_resource_definition(name).status.conditions or []
        assert any(c.type == "Established" and c.status == "True" for c in conditions), name


def test_node_monitor_daemonset_creates_one_pod_per_node_tainted_or_not(installed: Installed) -> None:
    def per_node() -> dict[str, int] | None:
        counts: dict[str, int] = {}
        for pod in installed.pods("node-monitor"):
            required = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
            node = required.node_selector_terms[0].match_fields[0].values[0]
            counts[node] = counts.get(node, 0) + 1
        return counts if set(installed.nodes) <= set(counts) else None

    counts = wait_for(per_node, "a node-monitor pod on every fake node")
    assert all(counts[n] == 1 for n in installed.nodes), counts
    pod = next(p for p in installed.pods("node-monitor"))
    env = {e.name: e.value_from.field_ref.field_path for e in pod.spec.containers[0].env if e.value_from}
    assert env == {"NODE_NAME": "spec.nodeName"}


def test_scheduler_and_operator_deployments_get_their_pods(installed: Installed) -> None:
    for component, replicas in (("scheduler", 1), ("operator", 2)):
        pods = wait_for(lambda c=component, n=replicas: len(installed.pods(c)) == n and installed.pods(c),
                        f"{replicas} {component} pod(s)")
        assert {p.spec.service_account_name for p in pods} == {SA[component]}
    assert {p.spec.priority_class_name for p in installed.pods("operator")} == {"system-cluster-critical"}
    (scheduler,) = installed.pods("scheduler")
    assert [c.name for c in scheduler.spec.containers] == ["kube-scheduler", "extender"]


def test_scheduler_image_is_the_control_planes_own_version(installed: Installed) -> None:
    version = client.VersionApi(installed.api).get_code().git_version  # e.g. v1.30.14
    (scheduler,) = installed.pods("scheduler")
    image = scheduler.spec.containers[0].image
    assert image == f"registry.k8s.io/kube-scheduler:{version.split('-')[0].split('+')[0]}"


def test_operator_disruption_budget_lets_one_replica_go_at_a_time(installed: Installed) -> None:
    def budget() -> Any:
        pdb = client.PolicyV1Api(installed.api).read_namespaced_pod_disruption_budget(f"{RELEASE}-operator", NAMESPACE)
        return pdb if pdb.status and pdb.status.expected_pods == 2 else None

    pdb = wait_for(budget, "the operator's PodDisruptionBudget to count both replicas")
    assert pdb.spec.min_available == 1


# --- RBAC ----------------------------------------------------------------------------------------------


def _allowed(installed: Installed, component: str, verb: str, resource: str, namespace: str = "",
             group: str = "", name: str = "", subresource: str = "") -> bool:
    user = f"system:serviceaccount:{NAMESPACE}:{SA[component]}"
    review = client.AuthorizationV1Api(installed.api).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}",
                                          "system:authenticated"],
                 "resourceAttributes": {"verb": verb, "resource": resource, "group": group, "namespace": namespace,
                                        "name": name, "subresource": subresource}}})
    return bool(review.status.allowed)


#: (component, verb, resource, namespace, group, name, subresource) → allowed?
RBAC_CASES = [
    # node monitor: exactly docs/node-monitor.md "Deployment"
    ("node-monitor", "get", "nodes", "", "", "", "", True),
    ("node-monitor", "list", "pods", "", "", "", "", True),
    ("node-monitor", "watch", "pods", "", "", "", "", True),
    ("node-monitor", "create", "pods", "batch", "", "victim", "eviction", True),
    ("node-monitor", "create", "events", "batch", "", "", "", True),
    ("node-monitor", "delete", "pods", "batch", "", "", "", False),
    ("node-monitor", "create", "pods", "batch", "", "", "", False),
    ("node-monitor", "patch", "nodes", "", "", "", "", False),
    ("node-monitor", "list", "nodes", "", "", "", "", False),
    # scheduler pod (kube-scheduler + the extender sidecar)
    ("scheduler", "list", "nodes", "", "", "", "", True),
    ("scheduler", "watch", "pods", "", "", "", "", True),
    ("scheduler", "create", "pods", "batch", "", "p", "binding", True),
    ("scheduler", "create", "events", "batch", "", "", "", True),
    # the extender's nudge of a pod it held for missing samples: a patch of the pod, not of its subresources
    ("scheduler", "patch", "pods", "batch", "", "p", "", True),
    ("scheduler", "update", "pods", "batch", "", "p", "", False),
    ("scheduler", "patch", "pods", "batch", "", "p", "resize", False),
    ("scheduler", "update", "leases", "kube-system", "coordination.k8s.io", "stowage-scheduler", "", True),
    ("scheduler", "get", "configmaps", "kube-system", "", "extension-apiserver-authentication", "", True),
    # the extender's Queue informer (preempt's weights): read only
    ("scheduler", "list", "queues", "", "stowage.io", "", "", True),
    ("scheduler", "watch", "queues", "", "stowage.io", "", "", True),
    ("scheduler", "patch", "queues", "", "stowage.io", "", "", False),
    ("scheduler", "list", "jobs", "", "stowage.io", "", "", False),
    ("scheduler", "create", "pods", "batch", "", "", "", False),
    ("scheduler", "update", "nodes", "", "", "", "", False),
    ("scheduler", "create", "pods", "batch", "", "p", "eviction", False),
    # operator
    ("operator", "create", "pods", "batch", "", "", "", True),
    ("operator", "patch", "pods", "batch", "", "", "", True),
    ("operator", "delete", "pods", "batch", "", "", "", True),
    ("operator", "patch", "queues", "", "stowage.io", "", "status", True),
    # It ensures the default Queue at start (create); it never deletes a Queue nor creates a user's Job.
    ("operator", "create", "queues", "", "stowage.io", "", "", True),
    ("operator", "delete", "queues", "", "stowage.io", "default", "", False),
    ("operator", "create", "jobs", "batch", "stowage.io", "", "", False),
    ("operator", "watch", "jobs", "batch", "stowage.io", "", "", True),
    ("operator", "update", "configmaps", NAMESPACE, "", "", "", True),
    # Its own identity (to recognise its own pods in the webhook): system:basic-user grants it to everyone.
    ("operator", "create", "selfsubjectreviews", "", "authentication.k8s.io", "", "", True),
    # Kopf peering (operator.peering is set in this install): the operator creates its object, Kopf patches it.
    ("operator", "create", "clusterkopfpeerings", "", "kopf.dev", "", "", True),
    ("operator", "patch", "clusterkopfpeerings", "", "kopf.dev", PEERING, "", True),
    ("operator", "patch", "kopfpeerings", "batch", "kopf.dev", PEERING, "", True),
    ("operator", "delete", "clusterkopfpeerings", "", "kopf.dev", PEERING, "", False),
    ("operator", "update", "configmaps", "batch", "", "", "", False),
    ("operator", "create", "mutatingwebhookconfigurations", "", "admissionregistration.k8s.io", "", "", False),
    ("operator", "patch", "nodes", "", "", "", "", False),
    ("operator", "create", "pods", "batch", "", "p", "eviction", False),
    # Promotion: a patch of the pod (v1.30 with the gate) or of its resize subresource (v1.33+).
    ("operator", "patch", "pods", "batch", "", "p", "resize", True),
    ("node-monitor", "patch", "pods", "batch", "", "p", "resize", False),
]


@pytest.mark.parametrize(("component", "verb", "resource", "namespace", "group", "name", "sub", "expected"),
                         RBAC_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}{'/' + c[6] if c[6] else ''}-{c[3] or 'cluster'}"
                                          f"-{'allowed' if c[7] else 'denied'}" for c in RBAC_CASES])
def test_rbac_grants_each_component_what_it_needs_and_no_more(
        installed: Installed, component: str, verb: str, resource: str, namespace: str, group: str, name: str,
        sub: str, expected: bool) -> None:
    assert _allowed(installed, component, verb, resource, namespace, group, name, sub) is expected


def test_only_the_operator_reads_the_api_servers_metrics(installed: Installed) -> None:
    # Promotion's one look at start: the gauge kubernetes_feature_enabled{name="InPlacePodVerticalScaling"}.
    def allowed(component: str) -> bool:
        user = f"system:serviceaccount:{NAMESPACE}:{SA[component]}"
        review = client.AuthorizationV1Api(installed.api).create_subject_access_review({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated"],
                     "nonResourceAttributes": {"verb": "get", "path": "/metrics"}}})
        return bool(review.status.allowed)

    assert allowed("operator")
    assert not allowed("node-monitor")


#: (role bound in the namespace, verb, resource, allowed in that namespace?) for `kubectl auth can-i`.
USER_CASES = [
    ("admin", "create", "jobs.stowage.io", True), ("admin", "delete", "jobs.stowage.io", True),
    ("edit", "create", "jobs.stowage.io", True), ("edit", "patch", "jobs.stowage.io", True),
    ("edit", "delete", "jobs.stowage.io", True), ("edit", "update", "jobs.stowage.io/status", False),
    ("view", "list", "jobs.stowage.io", True), ("view", "get", "jobs.stowage.io/status", True),
    ("view", "create", "jobs.stowage.io", False), ("view", "delete", "jobs.stowage.io", False),
]


def _can_i(installed: Installed, user: str, verb: str, resource: str, namespace: str | None) -> bool:
    """``kubectl auth can-i`` as ``user`` (an authenticated user, impersonated by the admin)."""
    kubectl = REPO / ".tools" / "kubectl" / "kubectl"
    if not kubectl.exists():
        pytest.skip("kubectl not found: run `bash scripts/setup.sh --test` (it unpacks .tools/kubectl/kubectl)")
    scope = ["-n", namespace] if namespace else []
    # kubectl reads "jobs.stowage.io/status" as type/name: a subresource goes in its own flag.
    resource, _, subresource = resource.partition("/")
    scope += [f"--subresource={subresource}"] if subresource else []
    done = subprocess.run([str(kubectl), "--kubeconfig", str(installed.plane.kubeconfig), "auth", "can-i", verb,
                           resource, *scope, "--as", user, "--as-group", "system:authenticated"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() in ("yes", "no"), done.stderr
    return done.stdout.strip() == "yes"


@pytest.fixture(scope="module")
def team(installed: Installed) -> str:
    """A namespace whose admin, editor and viewer hold Kubernetes' built-in roles there (RoleBindings)."""
    ns = f"team-{uuid.uuid4().hex[:6]}"
    installed.plane.create_namespace(ns)
    rbac = client.RbacAuthorizationV1Api(installed.api)
    for role in ("admin", "edit", "view"):
        rbac.create_namespaced_role_binding(ns, {
            "metadata": {"name": f"{role}-user"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"{role}-user"}]})
    # kube-controller-manager's clusterrole-aggregation controller copies the chart's rules into the built-in roles.
    wait_for(lambda: _can_i(installed, "view-user", "list", "jobs.stowage.io", ns), "the roles' aggregation")
    return ns


@pytest.mark.parametrize(("role", "verb", "resource", "expected"), USER_CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{'yes' if c[3] else 'no'}" for c in USER_CASES])
def test_namespace_users_get_stowage_jobs_through_the_built_in_roles(
        installed: Installed, team: str, role: str, verb: str, resource: str, expected: bool) -> None:
    assert _can_i(installed, f"{role}-user", verb, resource, team) is expected
    assert not _can_i(installed, f"{role}-user", verb, resource, "default"), "a RoleBinding reaches one namespace"


def test_every_user_lists_queues_and_none_changes_them(installed: Installed, team: str) -> None:
    for user in ("admin-user", "edit-user", "view-user", "someone-else"):
        assert _can_i(installed, user, "list", "queues.stowage.io", None), user
        assert not _can_i(installed, user, "create", "queues.stowage.io", None), user
        assert not _can_i(installed, user, "patch", "queues.stowage.io", None), user
    assert not _can_i(installed, "someone-else", "list", "jobs.stowage.io", team)


def _user_allowed(installed: Installed, user: str, verb: str, resource: str, namespace: str = "",
                  group: str = "stowage.io", name: str = "", subresource: str = "") -> bool:
    """A SubjectAccessReview for ``user`` (authenticated, no other group): what the API server would let it do."""
    review = client.AuthorizationV1Api(installed.api).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:authenticated"],
                 "resourceAttributes": {"verb": verb, "resource": resource, "group": group, "namespace": namespace,
                                        "name": name, "subresource": subresource}}})
    return bool(review.status.allowed)


def test_namespace_users_cannot_change_a_queue_nor_label_their_namespace_into_one(installed: Installed,
                                                                                   team: str) -> None:
    """Tenancy rests on two things users of a namespace cannot change (docs/operator.md "Tenancy"): a Queue (its
    namespaceSelector, its state) and their namespace's labels, which the selector matches."""
    for user in ("admin-user", "edit-user", "view-user", "someone-else"):
        for verb in ("create", "update", "patch", "delete"):
            assert not _user_allowed(installed, user, verb, "queues", name="default"), (user, verb)
            assert not _user_allowed(installed, user, verb, "queues", name="default", subresource="status"), user
            assert not _user_allowed(installed, user, verb, "queues", namespace=team), (user, verb, team)
        for verb in ("update", "patch"):
            assert not _user_allowed(installed, user, verb, "namespaces", group="", name=team), (user, verb)
        assert _user_allowed(installed, user, "get", "queues", name="default"), user  # reading is for everyone
    assert _user_allowed(installed, "edit-user", "create", "jobs", namespace=team)  # the review is the real one


@pytest.mark.parametrize("component", list(SA))
def test_no_component_reads_secrets(installed: Installed, component: str) -> None:
    for verb in ("get", "list", "watch"):
        for namespace in ("", NAMESPACE, "kube-system", "default"):
            assert not _allowed(installed, component, verb, "secrets", namespace), (verb, namespace)


# --- the components under their own ServiceAccounts --------------------------------------------------------


@dataclass
class RunningScheduler:
    """kube-scheduler and the extender running under the scheduler account (see :func:`running_scheduler`)."""

    scheduler_log: Path
    extender_log: Path
    extender_port: int


@contextlib.contextmanager
def running_scheduler(installed: Installed, workdir: Path) -> Iterator[RunningScheduler]:
    """The extender and the real kube-scheduler under the scheduler ServiceAccount's token, with the installed
    settings and KubeSchedulerConfiguration (leader election on its own lease), until kube-scheduler leads."""
    assets = find_assets() or LOCAL_ASSETS
    kubeconfig = installed.token_kubeconfig("scheduler")
    settings = workdir / "settings.yaml"
    settings.write_text(installed.config_map("settings")["settings.yaml"])
    ext_log = workdir / "extender.log"
    with process([str(STOWAGE), "extender", "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1", "--port", "0",
                  "--config", str(settings)], ext_log) as extender:
        port = wait_for_logged_port(extender, ext_log, EXTENDER_PORT_LOGGED, WAIT_S)
        wait_for(lambda: _status(f"http://127.0.0.1:{port}/readyz") == 200, "the extender's caches")
        config = yaml.safe_load(installed.config_map("scheduler-config")["config.yaml"])
        assert [e["urlPrefix"] for e in config["extenders"]] == ["http://127.0.0.1:8888"] * 2
        config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
        for entry in config["extenders"]:
            entry["urlPrefix"] = f"http://127.0.0.1:{port}"
        path = workdir / "scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        sched_log = workdir / "kube-scheduler.log"
        with process([str(assets / "kube-scheduler"), f"--config={path}", f"--authentication-kubeconfig={kubeconfig}",
                      f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1", "--secure-port=0",
                      "--v=2"], sched_log) as scheduler:
            def leading() -> bool:
                assert scheduler.poll() is None, sched_log.read_text(errors="replace")[-4000:]
                text = sched_log.read_text(errors="replace")
                return "successfully acquired lease kube-system/stowage-scheduler" in text

            wait_for(leading, "kube-scheduler to lead on its own lease")
            yield RunningScheduler(sched_log, ext_log, port)


def test_scheduler_and_extender_run_under_the_scheduler_account_with_the_charts_config(
        installed: Installed, tmp_path: Path) -> None:
    """The real kube-scheduler loads the installed KubeSchedulerConfiguration (leader election on its own lease),
    calls the extender, binds a regular pod and holds an opportunistic one (no Prometheus: fail closed)."""
    with running_scheduler(installed, tmp_path) as running:
        ns = f"chart-pods-{uuid.uuid4().hex[:6]}"
        # The operator does not run here: its namespace opts out of the (fail-closed) pod webhook.
        installed.plane.create_namespace(ns, labels={"stowage.io/webhook": "ignore"})
        regular = _pod("regular", {"cpu": "100m", "memory": "64Mi"}, {}, {})
        opportunistic = _pod("opportunistic", {"cpu": "0", "memory": "0", HARVEST_RESOURCE: "1"},
                             {HARVEST_RESOURCE: "1", "memory": "1Gi"}, {LABEL_CLASS: "opportunistic"},
                             {"stowage.io/demand": json.dumps({"cpu": "1", "memory": "1Gi"})})
        for body in (regular, opportunistic):
            installed.core.create_namespaced_pod(ns, body)
        bound = wait_for(lambda: installed.core.read_namespaced_pod("regular", ns).spec.node_name,
                         "the regular pod to be bound")
        assert bound in installed.nodes
        events = wait_for(lambda: [e for e in installed.core.list_namespaced_event(
            ns, field_selector="involvedObject.name=opportunistic").items if e.reason == "FailedScheduling"],
            "a FailedScheduling event for the opportunistic pod")
        assert "stowage: no fresh utilization" in events[-1].message
        assert installed.core.read_namespaced_pod("opportunistic", ns).spec.node_name is None
        _delete_namespace(installed, ns)
    assert not _forbidden(running.scheduler_log), _forbidden(running.scheduler_log)
    assert not _forbidden(running.extender_log), _forbidden(running.extender_log)


def _delete_namespace(installed: Installed, ns: str) -> None:
    """Delete ``ns`` and wait until it is gone: a held pod left in a terminating namespace would have the next
    test's scheduler and extender post Events there, which the API server refuses with a 403."""
    delete_namespace_and_wait(installed.core, ns)


def _pod(name: str, requests: dict[str, str], limits: dict[str, str], labels: dict[str, str],
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
            "spec": {"schedulerName": SCHEDULER_NAME, "nodeSelector": {NODE_LABEL: "1"},
                     **({"priorityClassName": OPPORTUNISTIC_PRIORITY_CLASS} if labels else {}),
                     "containers": [{"name": "c", "image": "busybox:1.36",
                                     "resources": {"requests": requests, "limits": limits}}]}}


def _status(url: str) -> int:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=2.0).status_code
    return 0


def test_node_monitor_runs_under_its_account(installed: Installed, tmp_path: Path) -> None:
    node = installed.nodes[0]
    kubeconfig = installed.token_kubeconfig("node-monitor")
    settings = tmp_path / "settings.yaml"
    settings.write_text(installed.config_map("settings")["settings.yaml"])
    log = tmp_path / "node-monitor.log"
    argv = [str(STOWAGE), "node-monitor", "--node-name", node, "--kubeconfig", str(kubeconfig),
            "--cgroup-root", str(installed.kubelet.cgroup_dir(node)),
            "--proc-root", str(installed.kubelet.proc_dir(node)),
            "--address", "127.0.0.1", "--port", "0", "--config", str(settings)]
    with process(argv, log) as monitor:
        port = wait_for_logged_port(monitor, log, NODE_MONITOR_PORT_LOGGED, WAIT_S)

        def capacity_published() -> bool:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            return f'stowage_node_capacity{{node="{node}",resource="memory"}}' in text

        wait_for(capacity_published, "the node's allocatable, read with the node monitor's token")
        assert _status(f"http://127.0.0.1:{port}/healthz") == 200
    assert not _forbidden(log), _forbidden(log)


def _operator_argv(installed: Installed, workdir: Path, kubeconfig: Path) -> list[str]:
    """The installed operator Deployment's arguments, made runnable here: the settings from the installed
    ConfigMap, metrics on any free port, and no webhook server (the API server cannot reach the chart's
    Service without a cluster network; the chart's webhook configurations stay registered, fail closed)."""
    deployment = client.AppsV1Api(installed.api).read_namespaced_deployment(f"{RELEASE}-operator", NAMESPACE)
    (container,) = deployment.spec.template.spec.containers
    assert {e.name: e.value_from.field_ref.field_path for e in container.env if e.value_from} == \
        {"POD_NAMESPACE": "metadata.namespace"}
    settings = workdir / "settings.yaml"
    settings.write_text(installed.config_map("settings")["settings.yaml"])
    argv = [str(STOWAGE)]
    for arg in container.args:
        key = arg.partition("=")[0]
        if key.startswith("--webhook-"):
            continue
        argv.append({"--config": f"--config={settings}", "--metrics-port": "--metrics-port=0"}.get(key, arg))
    return [*argv, "--kubeconfig", str(kubeconfig)]


def _task_job(name: str) -> dict[str, Any]:
    """A Stowage Job of two short regular tasks on the fake nodes. Its label skips the Job webhook (not served
    here); the operator's task pods skip the pod webhook because the operator writes them."""
    template = {"metadata": {"annotations": {ANN_RUN_SECONDS: "3"}},
                "spec": {"nodeSelector": {NODE_LABEL: "1"}, "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "main", "image": "busybox:1.36",
                                         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}
    return {"apiVersion": "stowage.io/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "labels": {"stowage.io/webhook": "ignore"}},
            "spec": {"queue": "default", "opportunistic": "false", "suspend": False,
                     "tasks": [{"name": "work", "replicas": 2, "maxRetries": 1, "template": template}]}}


def test_operator_runs_under_its_account_with_the_deployments_arguments(installed: Installed, tmp_path: Path) -> None:
    """``stowage operator`` with the installed Deployment's arguments (peering included) and its chart token
    starts (default Queue, peering object), runs a Job to Succeeded through the scheduler and the fake
    kubelet, and writes Queue status; nothing it does is forbidden."""
    argv = _operator_argv(installed, tmp_path, installed.token_kubeconfig("operator"))
    assert f"--peering={PEERING}" in argv
    log = tmp_path / "operator.log"
    objects = client.CustomObjectsApi(installed.api)
    with (running_scheduler(installed, tmp_path) as running,
          process(argv, log, env={"POD_NAMESPACE": NAMESPACE}) as operator):
        def started() -> bool:
            assert operator.poll() is None, log.read_text(errors="replace")[-4000:]
            return "stowage operator started" in log.read_text(errors="replace")

        wait_for(started, "the operator's start (default Queue, peering object)")
        ns = f"chart-jobs-{uuid.uuid4().hex[:6]}"
        installed.plane.create_namespace(ns)  # not opted out of the pod webhook: the operator's pods skip it
        objects.create_namespaced_custom_object("stowage.io", "v1alpha1", ns, "jobs", _task_job("chart-job"))

        def phase() -> str | None:
            job = objects.get_namespaced_custom_object("stowage.io", "v1alpha1", ns, "jobs", "chart-job")
            assert operator.poll() is None, log.read_text(errors="replace")[-4000:]
            return (job.get("status") or {}).get("phase") in ("Succeeded", "Failed") and job["status"]["phase"]

        assert wait_for(phase, "the Job to finish", timeout_s=180) == "Succeeded"
        pods = installed.core.list_namespaced_pod(ns).items
        assert len(pods) == 2 and all(p.status.phase == "Succeeded" for p in pods)
        assert all(p.spec.node_name in installed.nodes for p in pods)

        def queue_status() -> dict[str, Any] | None:
            queue = objects.get_cluster_custom_object("stowage.io", "v1alpha1", "queues", "default")
            return queue.get("status") if "dominantShare" in (queue.get("status") or {}) else None

        status = wait_for(queue_status, "the default Queue's status written by the operator")
        assert set(status) >= {"allocated", "dominantShare", "fairShare", "pendingTasks", "runningTasks"}
        peering = objects.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", PEERING)
        assert peering.get("status"), "Kopf records the operator in its peering object"
    _delete_namespace(installed, ns)
    for component_log in (log, running.scheduler_log, running.extender_log):
        assert not _forbidden(component_log), _forbidden(component_log)


# --- upgrade and uninstall ---------------------------------------------------------------------------------


def test_upgrade_changes_a_crd(installed: Installed, tmp_path: Path) -> None:
    """A chart whose Queue CRD gained a printer column: ``helm upgrade`` applies it (crds/ would not), and the
    objects stored under the CRD survive; upgrading back to this chart takes the column away again."""
    chart = tmp_path / "stowage"
    shutil.copytree(CHART, chart)
    path = chart / "files" / "crds" / "queues.stowage.io.yaml"
    crd = yaml.safe_load(path.read_text())
    crd["spec"]["versions"][0].setdefault("additionalPrinterColumns", []).append(
        {"name": "Upgraded", "type": "string", "jsonPath": ".metadata.name"})
    path.write_text(yaml.safe_dump(crd))
    extensions = client.ApiextensionsV1Api(installed.api)

    def columns() -> list[str]:
        stored = extensions.read_custom_resource_definition("queues.stowage.io")
        return [c.name for c in stored.spec.versions[0].additional_printer_columns or []]

    assert "Upgraded" not in columns()
    queue = installed.dynamic.resources.get(api_version="stowage.io/v1alpha1", kind="Queue").get(name="default")
    installed.helm("upgrade", RELEASE, str(chart), "-n", NAMESPACE, "--reuse-values", *installed.upgrade_flags)
    assert "Upgraded" in columns()
    after = installed.dynamic.resources.get(api_version="stowage.io/v1alpha1", kind="Queue").get(name="default")
    assert after.metadata.uid == queue.metadata.uid, "the default Queue is not re-created by an upgrade"
    installed.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values", *installed.upgrade_flags)
    assert "Upgraded" not in columns()


def test_upgrade_keeps_the_webhook_certificate_and_applies_new_values(installed: Installed) -> None:
    secret = installed.core.read_namespaced_secret(f"{RELEASE}-webhook-cert", NAMESPACE).data
    installed.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values",
                   "--set", "nodeMonitor.dryRun=true", "--set", "monitoring.interval=10s")
    after = installed.core.read_namespaced_secret(f"{RELEASE}-webhook-cert", NAMESPACE).data
    assert after == secret
    hooks = client.AdmissionregistrationV1Api(installed.api).read_mutating_webhook_configuration(f"{RELEASE}-pods")
    assert all(w.client_config.ca_bundle == secret["ca.crt"] for w in hooks.webhooks)
    ds = client.AppsV1Api(installed.api).read_namespaced_daemon_set(f"{RELEASE}-node-monitor", NAMESPACE)
    assert "--dry-run" in ds.spec.template.spec.containers[0].args
    status = json.loads(installed.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert status["version"] == 4  # after the two upgrades of test_upgrade_changes_a_crd
    missing = [f"{d['kind']}/{d['metadata']['name']}" for d in installed.manifest() if installed.get(d) is None]
    assert not missing


def test_uninstall_leaves_nothing_but_the_crds(installed: Installed) -> None:
    docs = installed.manifest()
    installed.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "2m")
    installed.installed = False
    wait_for(lambda: all(installed.get(d) is None for d in docs if d["kind"] != "CustomResourceDefinition"),
             "every object of the release but the CRDs to be gone")
    wait_for(lambda: not installed.core.list_namespaced_pod(NAMESPACE).items, "the release's pods to be gone")
    leftovers = [f"{d['kind']}/{d['metadata']['name']}" for d in docs
                 if installed.get(d) is not None and d["kind"] != "CustomResourceDefinition"]
    assert not leftovers
    # The CRDs carry helm.sh/resource-policy: keep (crds.keep), and so every Job and Queue stays; the default
    # Queue was a post-install hook, which uninstall never deletes.
    crds = client.ApiextensionsV1Api(installed.api)
    for name in ("queues.stowage.io", "jobs.stowage.io", "clusterkopfpeerings.kopf.dev"):
        assert crds.read_custom_resource_definition(name).metadata.name == name
    objects = client.CustomObjectsApi(installed.api)
    assert objects.get_cluster_custom_object("stowage.io", "v1alpha1", "queues", "default")["spec"]["weight"] == 1
