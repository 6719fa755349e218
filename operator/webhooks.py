"""Kopf glue for Stowage's admission webhooks: the handlers, the webhook server, the webhook configurations.

The rules themselves are :mod:`stowage.operator.admission` (pure). Here:

- :func:`register` puts the admission handlers (one per id of ``HANDLER_IDS``) into a ``kopf.OperatorRegistry``;
  their ids are the URL paths the API server calls (``/validate-queue.stowage.io`` …), and the names of the webhooks;
- :func:`webhook_server` builds Kopf's HTTPS server from certificate files (never Kopf's self-signed
  path: it needs oscrypto, which fails on OpenSSL 3);
- :func:`webhook_configurations` is the one definition of the Validating/MutatingWebhookConfiguration
  objects: failure policy, scope, selectors, conditions. Kopf's own managed configurations cannot
  carry a ``namespaceSelector`` or ``matchConditions`` and remove their webhooks when the operator
  stops, which would let a pod through unconverted; so ``settings.admission.managed`` stays unset and
  :class:`ConfiguringServer` writes ours (server-side apply) whenever the server reports where it is
  reachable. The chart may instead render the same objects statically.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import re
import urllib.parse
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from typing import Any

import aiohttp.web  # Kopf's own dependency: its webhook server
import jsonpatch  # Kopf's own dependency: applies our RFC 6902 patch to the body Kopf diffs
import kopf
from stowage.operator import admission, crd
from stowage.operator.webhook_api import (
    APPLY_TIMEOUT_S,
    FIELD_MANAGER,
    READ_TIMEOUT_S,
    ApiUnreadable,
    Applier,
    kubernetes_applier,
    kubernetes_namespace_labels,
    kubernetes_namespace_queue,
    kubernetes_queue_lookup,
    kubernetes_queue_names,
    kubernetes_queue_spec,
)

from stowage import labels
from stowage.errors import InvalidInput

# The API reads and the applier stay importable from here (webhook_api.py holds them).
__all__ = [
    "APPLY_TIMEOUT_S",
    "CONFIGURATION_NAME",
    "EXEMPT_NAMESPACES",
    "FIELD_MANAGER",
    "HANDLER_IDS",
    "MUTATE_POD",
    "MUTATE_POD_IN_QUEUE_NAMESPACE",
    "READ_TIMEOUT_S",
    "TIMEOUT_S",
    "VALIDATE_JOB",
    "VALIDATE_POD_UPDATE",
    "VALIDATE_QUEUE",
    "VALIDATE_WORKLOAD",
    "VALIDATE_WORKLOAD_IN_QUEUE_NAMESPACE",
    "ApiUnreadable",
    "ConfiguringServer",
    "configure",
    "kubernetes_applier",
    "kubernetes_namespace_labels",
    "kubernetes_namespace_queue",
    "kubernetes_queue_lookup",
    "kubernetes_queue_names",
    "kubernetes_queue_spec",
    "register",
    "service_client_config",
    "webhook_configurations",
    "webhook_server",
]

VALIDATE_QUEUE = "validate-queue.stowage.io"
VALIDATE_JOB = "validate-job.stowage.io"
MUTATE_POD = "mutate-pod.stowage.io"
#: The second entry of the pod webhook (same handler, path ``/mutate-pod.stowage.io``): pods of queue-labelled
#: namespaces that do not name Stowage themselves.
MUTATE_POD_IN_QUEUE_NAMESPACE = "mutate-pod-in-queue-namespace.stowage.io"
VALIDATE_POD_UPDATE = "validate-pod-update.stowage.io"
#: Workloads (Deployments, batch/v1 Jobs, ... : ``admission.WORKLOAD_TEMPLATES``) whose pod template names Stowage.
VALIDATE_WORKLOAD = "validate-workload.stowage.io"
#: The second entry of the workload webhook (same handler): workloads of queue-labelled namespaces.
VALIDATE_WORKLOAD_IN_QUEUE_NAMESPACE = "validate-workload-in-queue-namespace.stowage.io"
HANDLER_IDS: tuple[str, ...] = (VALIDATE_QUEUE, VALIDATE_JOB, MUTATE_POD, VALIDATE_POD_UPDATE, VALIDATE_WORKLOAD)
#: Name of both the ValidatingWebhookConfiguration and the MutatingWebhookConfiguration.
CONFIGURATION_NAME = "stowage.io"
#: Namespaces the pod webhook never sees, besides those labelled ``stowage.io/webhook: ignore``: the
#: system's own pods must never depend on Stowage. Add Stowage's namespace (the operator's pods).
EXEMPT_NAMESPACES: tuple[str, ...] = ("kube-system",)
#: Seconds the API server waits for an answer: a pod create waits this long when the webhook hangs.
TIMEOUT_S = 10
_NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server (1.22+)

QueueExists = admission.QueueExists
log = logging.getLogger(__name__)


# --- handlers ------------------------------------------------------------------------------------


def _refuse(problems: Sequence[InvalidInput]) -> None:
    if problems:
        raise kopf.AdmissionError("; ".join(str(p) for p in problems), code=422)


#: Characters of an unexpected error a refusal repeats.
_ERROR_CHARS = 200


def _answering(kind: str, handler: Callable[..., None]) -> Callable[..., None]:
    """``handler`` whose every failure is a refusal the API server passes on: the rules' own (422, naming the
    field), an unreadable API (503), and, as the last line of defence, anything else (422: the object could not
    be checked, so it is not admitted; logged with its traceback). Kopf would answer such an exception with a
    500 carrying a bare Python message."""

    @functools.wraps(handler)
    def answering(**kwargs: Any) -> None:
        try:
            handler(**kwargs)
        except kopf.AdmissionError:
            raise
        except InvalidInput as exc:
            raise kopf.AdmissionError(str(exc), code=422) from None
        except ApiUnreadable as exc:
            raise kopf.AdmissionError(f"{kind} not checked: {exc}; nothing was changed, try again", code=503) from None
        except Exception as exc:
            log.exception("%s: admission failed on an unexpected value; refused", kind)
            detail = f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
            raise kopf.AdmissionError(
                f"{kind} not admitted: Stowage's admission check failed on a value it does not expect ({detail}); "
                "check the object's fields against docs/operator.md", code=422) from None

    return answering


def _apply_patch(ops: admission.JSONPatch, body: dict[str, Any]) -> None:
    jsonpatch.apply_patch(body, ops, in_place=True)


def register(registry: kopf.OperatorRegistry, queue_lookup: QueueExists, *,
             trusted_users: Collection[str] = (), namespace_queue: admission.NamespaceQueue | None = None,
             queue_names: admission.QueueNames | None = None, namespaces: Collection[str] = (),
             queue_spec: admission.QueueSpecOf | None = None,
             namespace_labels: admission.NamespaceLabels | None = None) -> None:
    """Register the admission handlers into ``registry`` (one per id of ``HANDLER_IDS``; the workload handler once
    per kind of ``admission.WORKLOAD_TEMPLATES``).

    ``queue_lookup(name)`` says whether a Queue exists (e.g. :func:`kubernetes_queue_lookup`);
    ``namespace_queue(namespace)`` gives a namespace's default queue (:func:`kubernetes_namespace_queue`;
    None: no namespace defaults); ``queue_names()`` the existing Queues for a refusal's message
    (:func:`kubernetes_queue_names`); ``namespaces`` the ones the operator watches (empty: all), outside which a
    Stowage pod is refused. ``queue_spec(name)`` (:func:`kubernetes_queue_spec`; it answers ``queue_lookup`` too)
    and ``namespace_labels(namespace)`` (:func:`kubernetes_namespace_labels`; it answers ``namespace_queue`` too)
    let admission refuse work a Queue does not take (``spec.state``, ``spec.namespaceSelector``).
    ``trusted_users`` are API usernames whose pods pass the pod webhooks
    unchanged: the operator's own service account (``system:serviceaccount:<namespace>:<name>``), which
    creates a Job's pods already labelled and, when opportunistic, converted, and removes their admission gates.
    """
    trusted = frozenset(trusted_users)
    common: dict[str, Any] = {"registry": registry, "persistent": True}
    lookups: dict[str, Any] = {k: v for k, v in (("namespace_queue", namespace_queue), ("queue_names", queue_names),
                                                 ("queue_spec", queue_spec), ("namespace_labels", namespace_labels))
                               if v is not None}
    lookups["watched_namespaces"] = frozenset(namespaces)
    tenancy = {k: lookups[k] for k in ("queue_spec", "namespace_labels") if k in lookups}

    def validate_queue(spec: Mapping[str, Any], old: Mapping[str, Any] | None, **_: Any) -> None:
        _refuse(admission.validate_queue(spec, _spec_of(old)))

    def validate_job(spec: Mapping[str, Any], old: Mapping[str, Any] | None, body: Mapping[str, Any],
                     **_: Any) -> None:
        namespace = str((body.get("metadata") or {}).get("namespace") or "")
        _refuse(admission.validate_job(spec, queue_lookup, _spec_of(old), namespace=namespace, **tenancy))

    def validate_workload(body: Mapping[str, Any], resource: kopf.Resource, userinfo: Mapping[str, Any],
                          warnings: list[str], **_: Any) -> None:
        if userinfo.get("username") in trusted:
            return
        path = admission.WORKLOAD_TEMPLATES[(resource.group, resource.plural)]
        namespace = str((body.get("metadata") or {}).get("namespace") or "")
        warnings.extend(admission.admit_workload(body, path, queue_lookup, namespace=namespace, **lookups))

    def mutate_pod(body: Mapping[str, Any], patch: kopf.Patch, userinfo: Mapping[str, Any],
                   warnings: list[str], **_: Any) -> None:
        # The operator's own pods (a Job's tasks) are made right by the operator; a user's are not trusted.
        if userinfo.get("username") in trusted:
            return
        decided = admission.admit_pod(body, queue_lookup, **lookups)
        if decided.patch:
            patch.fns.append(functools.partial(_apply_patch, decided.patch))
        warnings.extend(decided.warnings)

    def validate_pod_update(body: Mapping[str, Any], old: Mapping[str, Any] | None, userinfo: Mapping[str, Any],
                            subresource: str | None, **_: Any) -> None:
        # What admission decided stays decided: only Stowage changes a pod's class, queue, intent, demand, gate.
        if userinfo.get("username") in trusted or subresource:
            return
        _refuse(admission.review_pod_update(old, body))

    kopf.on.validate(crd.GROUP, crd.VERSION, crd.QUEUE.plural, id=VALIDATE_QUEUE, operations=["CREATE", "UPDATE"],
                     **common)(_answering("Queue", validate_queue))
    kopf.on.validate(crd.GROUP, crd.VERSION, crd.JOB.plural, id=VALIDATE_JOB, operations=["CREATE", "UPDATE"],
                     **common)(_answering("Job", validate_job))
    kopf.on.mutate("v1", "pods", id=MUTATE_POD, operations=["CREATE"], **common)(_answering("Pod", mutate_pod))
    kopf.on.validate("v1", "pods", id=VALIDATE_POD_UPDATE, operations=["UPDATE"],
                     **common)(_answering("Pod update", validate_pod_update))
    for group, plural in admission.WORKLOAD_TEMPLATES:
        kopf.on.validate(group, "v1", plural, id=VALIDATE_WORKLOAD, operations=["CREATE"],
                         **common)(_answering("Workload", validate_workload))


def _spec_of(old: Mapping[str, Any] | None) -> Any:
    return old.get("spec") if old is not None else None


# --- server --------------------------------------------------------------------------------------


#: The request's uid, the first field the API server writes into an AdmissionReview's ``request``.
_REQUEST_UID = re.compile(r'"request"\s*:\s*\{\s*"uid"\s*:\s*"([^"\\]+)"')


class _RefusingServer(kopf.WebhookServer):
    """Kopf's server, refusing a request it cannot read instead of answering 500.

    A Job's pod template is kept as written, so the API server passes on JSON nested thousands of levels deep;
    Python's parser stops at its recursion limit (about a thousand). Such a request is refused (422), naming
    the request by the uid the API server always writes first.
    """

    @staticmethod
    async def _serve(fn: kopf.WebhookFn, request: aiohttp.web.Request) -> aiohttp.web.Response:
        try:
            return await kopf.WebhookServer._serve(fn, request)
        except (RecursionError, ValueError):  # Kopf's own HTTP errors are not these: they pass
            uid = _REQUEST_UID.search(await request.text())
            if uid is None:
                raise
            log.warning("admission request %s refused: nested past the recursion limit", uid[1])
            return aiohttp.web.json_response({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": uid[1], "allowed": False, "status": {"code": 422, "message": (
                    "the object is nested deeper than Stowage's webhook reads (about 1,000 levels); a pod template "
                    "has a few dozen: remove the deeply nested field")}}})


def webhook_server(*, certfile: str, pkeyfile: str, addr: str = "0.0.0.0", port: int | None = 9443,
                   host: str | None = None, cafile: str | None = None) -> kopf.WebhookServer:
    """Kopf's HTTPS webhook server listening on ``addr:port`` with the given certificate (``port=None``: any free one).

    ``host`` is the name the API server uses in the URL (default: ``addr``, or 127.0.0.1 for
    0.0.0.0); ``cafile`` the CA bundle the API server verifies the certificate with (default: the
    certificate file itself, right for a self-signed one or one that holds its chain). A request nested too deep
    to read is refused (:class:`_RefusingServer`).
    """
    return _RefusingServer(addr=addr, port=port, host=host, certfile=certfile, pkeyfile=pkeyfile, cafile=cafile)


def service_client_config(namespace: str, name: str, port: int = 443,
                          ca_bundle: str | None = None) -> dict[str, Any]:
    """A webhook ``clientConfig`` reaching the server through a Service (in a cluster)."""
    config: dict[str, Any] = {"service": {"namespace": namespace, "name": name, "port": port, "path": "/"}}
    if ca_bundle is not None:
        config["caBundle"] = ca_bundle
    return config


def _with_path(client_config: Mapping[str, Any], handler_id: str) -> dict[str, Any]:
    """``client_config`` pointing at the handler: its id is the last path segment (Kopf routes by it)."""
    config = copy.deepcopy(dict(client_config))
    segment = urllib.parse.quote(handler_id)
    if "url" in config:
        config["url"] = f"{config['url'].rstrip('/')}/{segment}"
    if "service" in config:
        service = config["service"]
        service["path"] = f"{(service.get('path') or '').rstrip('/')}/{segment}"
    return config


def webhook_configurations(client_config: Mapping[str, Any], *, name: str = CONFIGURATION_NAME,
                           exempt_namespaces: Collection[str] = EXEMPT_NAMESPACES,
                           trusted_users: Collection[str] = ()) -> list[dict[str, Any]]:
    """The ValidatingWebhookConfiguration and MutatingWebhookConfiguration, in that order.

    ``client_config`` is ``{"url": …}`` or ``{"service": …}`` (:func:`service_client_config`) with
    ``caBundle``; each webhook gets its handler id appended to the path.

    Every webhook fails closed (``failurePolicy: Fail``): a Stowage pod the webhook did not see must
    not run unconverted, and a Job or Queue must not skip validation. The pod webhook's scope keeps
    everything else independent of it: only pods that name Stowage (``admission.stowage_pod_condition``:
    scheduler name, queue label, opportunistic label) and, in a second entry, the other pods of namespaces
    labelled ``stowage.io/queue`` not labelled ``stowage.io/webhook: ignore`` themselves; never pods in
    ``exempt_namespaces`` or in a namespace labelled ``stowage.io/webhook: ignore`` (``namespaceSelector``),
    nor pods created by ``trusted_users``.

    The pod UPDATE review (``validate-pod-update.stowage.io``) sees pods that name the Stowage scheduler
    (every pod the webhook admitted) and is called only when
    the update touches a key Stowage owns (``admission.pod_update_condition``, evaluated by the API server):
    the kubelet's status writes (a subresource), the scheduler's binding and every other update never
    wait on it, and a spoof is refused even while the operator is down.
    """
    common: dict[str, Any] = {
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "matchPolicy": "Equivalent",
        "timeoutSeconds": TIMEOUT_S,
        "admissionReviewVersions": ["v1"],
    }
    validating = [
        {
            "name": VALIDATE_QUEUE,
            "clientConfig": _with_path(client_config, VALIDATE_QUEUE),
            "rules": [{"apiGroups": [crd.GROUP], "apiVersions": [crd.VERSION], "resources": [crd.QUEUE.plural],
                       "operations": ["CREATE", "UPDATE"], "scope": "Cluster"}],
            **common,
        },
        {
            "name": VALIDATE_JOB,
            "clientConfig": _with_path(client_config, VALIDATE_JOB),
            "rules": [{"apiGroups": [crd.GROUP], "apiVersions": [crd.VERSION], "resources": [crd.JOB.plural],
                       "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}],
            **common,
        },
    ]
    not_operator: list[dict[str, str]] = []
    if trusted_users:
        users = ", ".join(f"'{u}'" for u in sorted(trusted_users))
        not_operator.append({"name": "not-from-the-operator",
                             "expression": f"!(request.userInfo.username in [{users}])"})
    # After admission every Stowage pod names the Stowage scheduler: that alone scopes the UPDATE review.
    named = {"name": "stowage-scheduler-pods",
             "expression": f"has(object.spec.schedulerName) && object.spec.schedulerName == '{labels.SCHEDULER_NAME}'"}
    validating.append({
        "name": VALIDATE_POD_UPDATE,
        "clientConfig": _with_path(client_config, VALIDATE_POD_UPDATE),
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["UPDATE"],
                   "scope": "Namespaced"}],
        "namespaceSelector": _pod_namespaces(exempt_namespaces),
        "matchConditions": [named, *not_operator, {"name": "changes-what-stowage-owns",
                                                   "expression": admission.pod_update_condition()}],
        **common,
    })
    pod_create: dict[str, Any] = {
        "clientConfig": _with_path(client_config, MUTATE_POD),
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"],
                   "scope": "Namespaced"}],
        # Our patch zeroes requests and records demand once; a second pass would record the zeros.
        "reinvocationPolicy": "Never",
        **common,
    }
    stowage_pods = admission.stowage_pod_condition()
    # Two entries, called in this order: the pods that name Stowage, then the other pods of namespaces labelled
    # stowage.io/queue (not the ones the first entry admitted: by then they name the Stowage scheduler), unless
    # the pod opts out with stowage.io/webhook: ignore.
    mutating = [
        {"name": MUTATE_POD, **pod_create, "namespaceSelector": _pod_namespaces(exempt_namespaces),
         "matchConditions": [{"name": "stowage-pods", "expression": stowage_pods}, *not_operator]},
        {"name": MUTATE_POD_IN_QUEUE_NAMESPACE, **pod_create,
         "namespaceSelector": _pod_namespaces(exempt_namespaces, queue_labelled=True),
         "objectSelector": _not_ignored(),
         "matchConditions": [{"name": "not-a-stowage-pod", "expression": f"!({stowage_pods})"}, *not_operator]},
    ]
    validating += _workload_webhooks(client_config, exempt_namespaces, not_operator, common)
    meta = {"name": name, "labels": {"app.kubernetes.io/name": "stowage", "app.kubernetes.io/component": "webhook"}}
    api_version = "admissionregistration.k8s.io/v1"
    return [
        {"apiVersion": api_version, "kind": "ValidatingWebhookConfiguration", "metadata": meta, "webhooks": validating},
        {"apiVersion": api_version, "kind": "MutatingWebhookConfiguration", "metadata": copy.deepcopy(meta),
         "webhooks": mutating},
    ]


#: CEL: the object has no controller (a Deployment's ReplicaSet, a CronJob's Job): its owner was checked instead.
NOT_CONTROLLED = ("!has(object.metadata.ownerReferences) || "
                  "!object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller)")


def workload_rules() -> list[dict[str, Any]]:
    """The workload webhook's rules: CREATE of every kind of ``admission.WORKLOAD_TEMPLATES``, by API group."""
    groups: dict[str, list[str]] = {}
    for group, plural in admission.WORKLOAD_TEMPLATES:
        groups.setdefault(group, []).append(plural)
    return [{"apiGroups": [group], "apiVersions": ["v1"], "resources": plurals, "operations": ["CREATE"],
             "scope": "Namespaced"} for group, plurals in groups.items()]


def _workload_webhooks(client_config: Mapping[str, Any], exempt_namespaces: Collection[str],
                       not_operator: list[dict[str, str]], common: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The workload webhook's two entries, scoped as the pod webhook's: workloads whose pod template names Stowage
    (``admission.stowage_template_condition``), and the others of namespaces labelled ``stowage.io/queue``; never
    one with a controller (its owner was checked), one labelled ``stowage.io/webhook: ignore``, or one of an exempt
    or ignored namespace."""
    named = admission.stowage_template_condition()
    hook = {"clientConfig": _with_path(client_config, VALIDATE_WORKLOAD), "rules": workload_rules(),
            "objectSelector": _not_ignored(), **common}
    controlled = {"name": "not-controlled", "expression": NOT_CONTROLLED}
    return [
        {"name": VALIDATE_WORKLOAD, **copy.deepcopy(hook), "namespaceSelector": _pod_namespaces(exempt_namespaces),
         "matchConditions": [{"name": "stowage-templates", "expression": named}, controlled, *not_operator]},
        {"name": VALIDATE_WORKLOAD_IN_QUEUE_NAMESPACE, **copy.deepcopy(hook),
         "namespaceSelector": _pod_namespaces(exempt_namespaces, queue_labelled=True),
         "matchConditions": [{"name": "not-a-stowage-template", "expression": f"!({named})"}, controlled,
                             *not_operator]},
    ]


def _not_ignored() -> dict[str, Any]:
    """A selector of objects (or namespaces) not labelled ``stowage.io/webhook: ignore``."""
    return {"matchExpressions": [{"key": labels.LABEL_WEBHOOK, "operator": "NotIn", "values": [labels.WEBHOOK_IGNORE]}]}


def _pod_namespaces(exempt_namespaces: Collection[str], queue_labelled: bool = False) -> dict[str, Any]:
    """The pod webhooks' ``namespaceSelector``: not exempt, not ignored; ``queue_labelled``: with a default queue."""
    expressions = [*_not_ignored()["matchExpressions"],
                   {"key": _NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": sorted(exempt_namespaces)}]
    if queue_labelled:
        expressions.append({"key": labels.LABEL_QUEUE, "operator": "Exists"})
    return {"matchExpressions": expressions}


class ConfiguringServer:
    """A Kopf webhook server that (re)writes Stowage's webhook configurations each time it is (re)started.

    Wraps ``server`` (e.g. :func:`webhook_server`): whenever it yields a client config (at start and
    after a certificate renewal), ``apply`` receives :func:`webhook_configurations` for it, run in a
    thread. With ``service=(namespace, name, port)`` the configurations reach the server through that
    Service, keeping the server's CA bundle. Nothing is removed when the operator stops: the webhooks
    stay and fail closed.
    """

    def __init__(self, server: kopf.WebhookServerProtocol, apply: Applier, *,
                 service: tuple[str, str, int] | None = None, name: str = CONFIGURATION_NAME,
                 exempt_namespaces: Collection[str] = EXEMPT_NAMESPACES, trusted_users: Collection[str] = ()) -> None:
        self.server, self.apply, self.service = server, apply, service
        self._options: dict[str, Any] = {"name": name, "exempt_namespaces": tuple(exempt_namespaces),
                                         "trusted_users": tuple(trusted_users)}

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        async for client_config in self.server(fn):
            reached: dict[str, Any] = dict(client_config)
            if self.service is not None:
                reached = service_client_config(*self.service, ca_bundle=client_config.get("caBundle"))
            await asyncio.to_thread(self.apply, webhook_configurations(reached, **self._options))
            yield client_config

    async def __aenter__(self) -> ConfiguringServer:
        if hasattr(self.server, "__aenter__"):
            await self.server.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if hasattr(self.server, "__aexit__"):
            await self.server.__aexit__(*exc)


def configure(settings: kopf.OperatorSettings, server: kopf.WebhookServerProtocol) -> None:
    """Serve admission through ``server``; Kopf manages no webhook configuration (ours do: see the module)."""
    settings.admission.server = server
    settings.admission.managed = None
