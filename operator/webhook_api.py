"""The webhooks' API calls through the official ``kubernetes`` client: bounded reads, and the configurations'
server-side apply. A read that fails or does not answer in time raises :class:`ApiUnreadable` (refused with 503).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, TypeVar

from stowage.operator import admission, crd

from stowage import labels

__all__ = ["APPLY_TIMEOUT_S", "FIELD_MANAGER", "READ_TIMEOUT_S", "ApiUnreadable", "Applier", "kubernetes_applier",
           "kubernetes_namespace_labels", "kubernetes_namespace_queue", "kubernetes_queue_lookup",
           "kubernetes_queue_names", "kubernetes_queue_spec"]

FIELD_MANAGER = "stowage-operator"
Applier = Callable[[list[dict[str, Any]]], None]
QueueExists = admission.QueueExists
_T = TypeVar("_T")


class ApiUnreadable(Exception):
    """A read the webhook needs (a Queue, the Queues, a namespace) failed: a timeout, a lost connection or an API
    error. The request is refused with 503 (the API's "try again"), never admitted unchecked."""


# --- the API, through the official client -------------------------------------------------------

#: Seconds one API read of a webhook may take (connect and answer together). A pod create makes at most three
#: reads (its namespace, its Queue, the Queues a refusal lists), and the first that fails ends it: with one
#: retry each, the worst case stays near the API server's own ``TIMEOUT_S`` for calling the webhook, and no
#: executor thread waits on a dead connection for the kernel's keep-alive (about 15 minutes).
READ_TIMEOUT_S = 1.5
#: Seconds the webhook configurations' server-side apply may take, at start and after a certificate renewal.
APPLY_TIMEOUT_S = 30.0


def _reading_client(api_client: Any) -> Any:
    """An ``ApiClient`` for the webhooks' reads: ``api_client``'s server and credentials, one retry.

    The client's default is three retries of a GET, each restarting the timeout: four times ``READ_TIMEOUT_S``
    would outlast the API server's wait. One retry still replaces a pooled connection that died quietly.
    """
    from kubernetes import client
    from urllib3.util.retry import Retry

    configuration = copy.deepcopy(api_client.configuration)
    configuration.retries = Retry(total=1, backoff_factor=0, raise_on_status=False)
    return client.ApiClient(configuration)


def _read(what: str, read: Callable[[], _T]) -> _T:
    """``read()``, whose every failure is :class:`ApiUnreadable` saying what could not be read and why."""
    from kubernetes import client
    from urllib3.exceptions import HTTPError

    try:
        return read()
    except client.ApiException as exc:  # status 0: the client's own failure (TLS)
        answer = f"answered {exc.status} {exc.reason}" if exc.status else f"could not be read ({exc.reason})"
        raise ApiUnreadable(f"the API server {answer} reading {what}") from exc
    except (HTTPError, OSError) as exc:
        raise ApiUnreadable(f"the API server did not answer reading {what} within {READ_TIMEOUT_S:g} s "
                            f"({type(exc).__name__})") from exc


def kubernetes_applier(api_client: Any, field_manager: str = FIELD_MANAGER) -> Applier:
    """An ``apply`` for :class:`ConfiguringServer`: server-side apply with a ``kubernetes.client.ApiClient``."""
    from kubernetes import client

    api = client.AdmissionregistrationV1Api(api_client)

    def apply(configurations: list[dict[str, Any]]) -> None:
        for obj in configurations:
            patch = (api.patch_validating_webhook_configuration if obj["kind"] == "ValidatingWebhookConfiguration"
                     else api.patch_mutating_webhook_configuration)
            patch(obj["metadata"]["name"], obj, field_manager=field_manager, force=True,
                  _content_type="application/apply-patch+yaml", _request_timeout=APPLY_TIMEOUT_S)

    return apply


def kubernetes_queue_lookup(api_client: Any) -> QueueExists:
    """``queue_lookup`` for :func:`register`: reads the Queue from the API (404 → does not exist).

    A read, not an informer's cache: a Queue created a moment before the Job that names it is found.
    Any other answer, or none within ``READ_TIMEOUT_S``, raises :class:`ApiUnreadable`: the webhook refuses
    (fails closed) with 503.
    """
    from kubernetes import client

    objects = client.CustomObjectsApi(_reading_client(api_client))

    def get(name: str) -> bool:
        try:
            objects.get_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, name,
                                              _request_timeout=READ_TIMEOUT_S)
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def exists(name: str) -> bool:
        # A name no Queue can have is not looked up: "" would read the list of Queues, and find it.
        return crd.is_queue_name(name) and _read(f"Queue {name!r}", lambda: get(name))

    return exists


def kubernetes_queue_spec(api_client: Any) -> admission.QueueSpecOf:
    """``queue_spec`` for :func:`register`: the Queue's spec read from the API (404 → None: no such Queue).

    The same one read as :func:`kubernetes_queue_lookup`, which it replaces: whether the Queue exists, and what
    admission checks on it (``spec.state``, ``spec.namespaceSelector``). A read, not a cache: a Queue created, or
    opened, a moment before the work that names it is seen. Any other failure raises :class:`ApiUnreadable`.
    """
    from kubernetes import client

    objects = client.CustomObjectsApi(_reading_client(api_client))

    def get(name: str) -> dict[str, Any] | None:
        try:
            queue = objects.get_cluster_custom_object(crd.GROUP, crd.VERSION, crd.QUEUE.plural, name,
                                                      _request_timeout=READ_TIMEOUT_S)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(queue.get("spec") or {})

    def spec(name: str) -> dict[str, Any] | None:
        return _read(f"Queue {name!r}", lambda: get(name)) if crd.is_queue_name(name) else None

    return spec


def kubernetes_namespace_labels(api_client: Any) -> admission.NamespaceLabels:
    """``namespace_labels`` for :func:`register`: the namespace's labels, read from the API (its default queue,
    and what a Queue's ``namespaceSelector`` matches). A read, not an informer's cache: a namespace labelled a
    moment ago is seen by its next pod, and a pod costs it only when it needs it (no label of its own, or a Queue
    with a selector). A failed read (a namespace that cannot be read is not known) raises :class:`ApiUnreadable`:
    the webhook refuses with 503 (fails closed).
    """
    from kubernetes import client

    core = client.CoreV1Api(_reading_client(api_client))

    def read(namespace: str) -> dict[str, str]:
        found = _read(f"namespace {namespace!r}",
                      lambda: core.read_namespace(namespace, _request_timeout=READ_TIMEOUT_S))
        return dict(found.metadata.labels or {})

    return read


def kubernetes_queue_names(api_client: Any) -> admission.QueueNames:
    """``queue_names`` for :func:`register`: the Queues that exist, listed when a refusal names them."""
    from kubernetes import client

    objects = client.CustomObjectsApi(_reading_client(api_client))

    def names() -> list[str]:
        listed = _read("the list of Queues", lambda: objects.list_cluster_custom_object(
            crd.GROUP, crd.VERSION, crd.QUEUE.plural, _request_timeout=READ_TIMEOUT_S))
        return [q["metadata"]["name"] for q in listed.get("items") or []]

    return names


def kubernetes_namespace_queue(api_client: Any) -> admission.NamespaceQueue:
    """``namespace_queue`` for :func:`register`: the namespace's ``stowage.io/queue`` label, read from the API.

    A read, like the queue lookup: a namespace labelled a moment ago defaults its next pod. A failed read
    raises :class:`ApiUnreadable`, and the webhook refuses (fails closed) with 503.
    """
    from kubernetes import client

    core = client.CoreV1Api(_reading_client(api_client))

    def queue(namespace: str) -> str | None:
        read = _read(f"namespace {namespace!r}",
                     lambda: core.read_namespace(namespace, _request_timeout=READ_TIMEOUT_S))
        return (read.metadata.labels or {}).get(labels.LABEL_QUEUE)

    return queue
