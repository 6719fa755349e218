"""Same-node promotion of a running opportunistic pod (UBIS §IV-D), the operator's side: build, send, interpret.

``decide`` chooses which running opportunistic pods to promote (``Decision.promoted``, ``harvest.promotions``);
this module only carries a choice out. A promotion is one in-place resize of the pod:

- every container's cpu and memory requests go back to what they were before the conversion (annotation
  ``stowage.io/requests``, written by ``admission.convert_opportunistic``), and
- the label ``stowage.io/class`` becomes ``regular``: the node monitor stops evicting it, the extender's preempt
  verb treats it as regular, the dispatcher counts it in the regular pool and in its queue's regular share.

What Kubernetes allows (KEP-1287) shapes the patch. Only cpu and memory can be resized: the extended resource
``stowage.io/harvested: 1`` stays requested (one of the node's harvested slots) for the pod's life. The QoS class
cannot change: a converted pod is Burstable (``admission`` keeps a 1m cpu request), and a promotion that would make
it Guaranteed (every container's requests equal to its limits) keeps the first container's cpu request 1m below
its limit. The priority class is immutable: a promoted pod keeps ``stowage-opportunistic`` (negative). Only
regular containers are resized (init containers have finished; a restartable init container keeps its converted
requests).

How, by server version: up to v1.32 with the alpha gate ``InPlacePodVerticalScaling`` on, one strategic merge
PATCH of the pod changes both the requests and the label; from v1.33 on, the requests go through the ``resize``
subresource and the label by a second PATCH. :func:`detect` decides once at start whether the cluster can resize
(v1.33+, else the API server's gauge ``kubernetes_feature_enabled{name="InPlacePodVerticalScaling"}``); a 422 that
says the pod spec is immutable turns promotion off for good, as does a 422 on the very first promotion.
"""

from __future__ import annotations

import enum
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stowage.operator.events import post_event

from stowage import labels
from stowage.errors import InvalidInput
from stowage.kube import api
from stowage.resources import CPU, MEMORY, format_quantity, parse_quantity

__all__ = [
    "FEATURE_GATE",
    "Outcome",
    "Promoter",
    "Support",
    "class_patch",
    "detect",
    "feature_gate_enabled",
    "resize_patch",
    "server_version",
]

log = logging.getLogger(__name__)

FEATURE_GATE = "InPlacePodVerticalScaling"
#: The first version whose pods are resized through the ``resize`` subresource (and no longer by a pod PATCH).
RESIZE_SUBRESOURCE_SINCE = (1, 33)
EVENT_REASON = "Promoted"
_GAUGE = re.compile(r'^kubernetes_feature_enabled\{([^}]*)\}\s+([0-9.eE+-]+)', re.MULTILINE)
#: What the API server answers a pod PATCH that changes resources while the gate is off (a 422).
_SPEC_IMMUTABLE = "pod updates may not change fields"


class Mode(enum.StrEnum):
    PATCH = "patch"  # v1.27–v1.32 with the alpha gate: one PATCH of the pod
    RESIZE = "resize"  # v1.33+: the resize subresource, then the label


@dataclass(frozen=True, slots=True)
class Support:
    """Whether this cluster can resize pods in place, how, and why (said once at start)."""

    enabled: bool
    mode: Mode
    reason: str
    settled: bool = True
    """False when the answer came from a transient error (the API server unreachable, a 5xx): ask again later."""


def _transient(exc: Exception) -> bool:
    return not isinstance(exc, api.ApiError) or exc.status >= 500 or exc.status == 429


class Outcome(enum.StrEnum):
    PROMOTED = "promoted"
    GONE = "gone"  # deleted, replaced (another uid), finished, or no longer opportunistic: nothing to do
    SKIPPED = "skipped"  # this pod cannot be promoted (no recorded requests, or the API server refused it)
    OFF = "off"  # the cluster cannot resize: promotion is now off
    FAILED = "failed"  # transient (network, 5xx, 409): the next pass decides again


# --- pure: detection ---------------------------------------------------------------------------


def server_version(version: Mapping[str, Any]) -> tuple[int, int] | None:
    """(major, minor) of ``GET /version`` (``"30+"`` reads 30); None when unreadable."""
    try:
        major = int(re.sub(r"\D.*$", "", str(version.get("major", ""))))
        minor = int(re.sub(r"\D.*$", "", str(version.get("minor", ""))))
    except ValueError:
        return None
    return major, minor


def feature_gate_enabled(metrics_text: str, gate: str = FEATURE_GATE) -> bool | None:
    """The API server's ``kubernetes_feature_enabled{name=gate}`` gauge: True/False, None when absent."""
    for match in _GAUGE.finditer(metrics_text):
        if f'name="{gate}"' in match.group(1):
            return float(match.group(2)) > 0
    return None


def detect(client: api.KubeClient) -> Support:
    """Can the cluster resize pods in place? v1.33+: yes (the ``resize`` subresource, beta and on by default);
    earlier: when the API server's ``/metrics`` shows the gate on (the operator's ClusterRole may read
    ``/metrics``). Any error reading either says no, with the reason."""
    try:
        version = server_version(client.get("/version"))
    except (api.ApiError, OSError) as exc:
        return Support(False, Mode.PATCH, f"the API server's version could not be read ({exc})",
                       settled=not _transient(exc))
    shown = "unknown" if version is None else f"v{version[0]}.{version[1]}"
    if version is not None and version >= RESIZE_SUBRESOURCE_SINCE:
        return Support(True, Mode.RESIZE, f"Kubernetes {shown} resizes pods through the resize subresource")
    try:
        text = client.get_text("/metrics")
    except (api.ApiError, OSError) as exc:
        return Support(False, Mode.PATCH, f"Kubernetes {shown}: the API server's /metrics could not be read to see "
                       f"whether the feature gate {FEATURE_GATE} is on ({exc})", settled=not _transient(exc))
    enabled = feature_gate_enabled(text)
    if enabled:
        return Support(True, Mode.PATCH, f"Kubernetes {shown} with the feature gate {FEATURE_GATE} on")
    what = "off" if enabled is False else "not reported"
    return Support(False, Mode.PATCH, f"Kubernetes {shown} with the feature gate {FEATURE_GATE} {what}: turn it on "
                   "for kube-apiserver, kube-scheduler, kube-controller-manager and the kubelets (docs/install.md)")


# --- pure: the patches -------------------------------------------------------------------------


def _quantities(value: Any) -> dict[str, str]:
    return {r: str(v) for r, v in value.items() if r in (CPU, MEMORY) and v is not None} \
        if isinstance(value, Mapping) else {}


def _recorded(pod: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """``stowage.io/requests`` by container name; raises :class:`InvalidInput` when absent or unreadable."""
    where = f"metadata.annotations[{labels.ANN_REQUESTS!r}]"
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(labels.ANN_REQUESTS)
    if raw is None:
        raise InvalidInput(where, "(absent)", "the requests the conversion recorded (pods converted by this release)")
    try:
        data = json.loads(raw)
    except ValueError:
        raise InvalidInput(where, raw, 'JSON {"container": {"cpu": "1", "memory": "1Gi"}}') from None
    if not isinstance(data, Mapping):
        raise InvalidInput(where, raw, 'JSON {"container": {"cpu": "1", "memory": "1Gi"}}')
    return {str(name): _quantities(v) for name, v in data.items()}


def _amount(value: Any, resource: str) -> float:
    try:
        return parse_quantity(value, resource) if value is not None else 0.0
    except InvalidInput:
        return 0.0


def _guaranteed(spec: Mapping[str, Any], requests: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether the pod with ``requests`` (by container name) would be Guaranteed (``qos.GetPodQOS``)."""
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or []:
            res = c.get("resources") or {}
            limits = res.get("limits") or {}
            mine = requests.get(c.get("name"), {}) if kind == "containers" else {}
            current = res.get("requests") or {}
            for r in (CPU, MEMORY):
                limit = _amount(limits.get(r), r)
                if limit <= 0 or _amount(mine.get(r, current.get(r, limits.get(r))), r) != limit:
                    return False
    return True


def _demand(pod: Mapping[str, Any]) -> dict[str, float]:
    """cpu and memory of the pod's ``stowage.io/demand`` ({} when absent or unreadable)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(labels.ANN_DEMAND)
    try:
        demand = labels.parse_demand(raw, labels.ANN_DEMAND) if raw is not None else None
    except InvalidInput:
        return {}
    return {r: v for r, v in (demand or {}).items() if r in (CPU, MEMORY) and v > 0}


def _fill_from_demand(spec: Mapping[str, Any], targets: dict[str, dict[str, str]], demand: Mapping[str, float]) -> None:
    """A resource no container recorded (a pod converted by hand that stated its use only in ``stowage.io/demand``)
    gets the demand's amount, on the containers in order, each up to its limit: a promoted pod reserves at least
    what the decision counted for it."""
    containers = [c for c in spec.get("containers") or [] if isinstance(c.get("name"), str)]
    for r, want in demand.items():
        if any(r in t for t in targets.values()):
            continue
        for c in containers:
            if want <= 0:
                break
            limit = ((c.get("resources") or {}).get("limits") or {}).get(r)
            room = _amount(limit, r) if limit is not None else want
            give = min(want, room)
            if give > 0:
                targets.setdefault(c["name"], {})[r] = format_quantity(give, r)
                want -= give


def resize_patch(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The containers' part of a promotion: each container's cpu and memory requests as recorded at conversion (a
    resource none recorded: the demand's, :func:`_fill_from_demand`).

    Raises :class:`InvalidInput` when the pod has no readable ``stowage.io/requests``. A pod that would turn
    Guaranteed keeps its first container's cpu request 1m below the limit (the QoS class is immutable)."""
    spec = pod.get("spec") or {}
    recorded = _recorded(pod)
    targets: dict[str, dict[str, str]] = {}
    for c in spec.get("containers") or []:
        name = c.get("name")
        if isinstance(name, str) and recorded.get(name):
            targets[name] = dict(recorded[name])
    _fill_from_demand(spec, targets, _demand(pod))
    if not targets:
        raise InvalidInput(f"metadata.annotations[{labels.ANN_REQUESTS!r}]", json.dumps(recorded),
                           "the requests of at least one of the pod's containers")
    if _guaranteed(spec, targets):
        first = (spec.get("containers") or [{}])[0]
        limit = _amount(((first.get("resources") or {}).get("limits") or {}).get(CPU), CPU)
        if limit > 0.001:
            targets.setdefault(first["name"], {})[CPU] = format_quantity(limit - 0.001, CPU)
    return {"spec": {"containers": [{"name": n, "resources": {"requests": r}} for n, r in targets.items()]}}


def class_patch(uid: str, resource_version: str | None = None) -> dict[str, Any]:
    """The label part of a promotion. The uid guards against a same-named successor; ``resource_version`` (the
    version the promotion last read) makes the API server refuse the patch (409) if the pod changed since, e.g. an
    eviction marked it for deletion: a pod being evicted must not turn regular on its way out."""
    meta: dict[str, Any] = {"uid": uid, "labels": {labels.LABEL_CLASS: labels.PodClass.REGULAR.value}}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"metadata": meta}


def _still_promotable(pod: Mapping[str, Any], uid: str) -> bool:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    return (meta.get("uid") == uid and not meta.get("deletionTimestamp")
            and status.get("phase") not in ("Succeeded", "Failed")
            and (meta.get("labels") or {}).get(labels.LABEL_CLASS) == labels.PodClass.OPPORTUNISTIC.value)


# --- the shell -----------------------------------------------------------------------------------


class Promoter:
    """Carries out promotions; ``support`` says whether (and how) the cluster resizes. Not thread-safe: the dispatch
    loop calls it."""

    def __init__(self, client: api.KubeClient, *, dry_run: bool = False, clock: Callable[[], float],
                 on_change: Callable[[bool], None] = lambda enabled: None) -> None:
        self.client = client
        self.dry_run = dry_run
        self.clock = clock
        self.on_change = on_change  # the gauge stowage_promotion_enabled
        self.support = Support(False, Mode.PATCH, "not detected yet", settled=False)
        self.promoted = 0
        self.skipped: set[str] = set()  # uids that cannot be promoted (never asked about again)

    @property
    def enabled(self) -> bool:
        return self.support.enabled

    def detect(self) -> Support:
        """:func:`detect`, said in the log and in the gauge (once, unless the answer was not settled: then the
        operator asks again later, and says so again only when the answer changes)."""
        before = self.support
        self.support = detect(self.client)
        if (before.enabled, before.reason) == (self.support.enabled, self.support.reason):
            return self.support
        if self.support.enabled:
            log.info("promotion of running opportunistic pods is on: %s", self.support.reason)
        else:
            log.warning("promotion of running opportunistic pods is off: %s", self.support.reason)
        self.on_change(self.support.enabled)
        return self.support

    def turn_off(self, reason: str) -> None:
        self.support = Support(False, self.support.mode, reason)  # settled: never asked again
        log.warning("promotion of running opportunistic pods is off: %s", reason)
        self.on_change(False)

    def promote(self, key: str, uid: str, node: str = "") -> Outcome:
        """Promote pod ``key`` (``namespace/name``) of uid ``uid``; never raises."""
        if not self.enabled:
            return Outcome.OFF
        namespace, _, name = key.partition("/")
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        try:
            pod = self.client.get(path)
        except api.ApiError as exc:
            return Outcome.GONE if exc.status == 404 else self._failed(key, exc)
        except OSError as exc:
            return self._failed(key, exc)
        if not _still_promotable(pod, uid):
            return Outcome.GONE
        try:
            resize = resize_patch(pod)
        except InvalidInput as exc:
            self.skipped.add(uid)
            log.warning("pod %s cannot be promoted: %s", key, exc)
            return Outcome.SKIPPED
        if self.dry_run:
            self.skipped.add(uid)  # said once per pod
            log.info("dry run: would promote %s to regular: %s", key, json.dumps(resize))
            return Outcome.SKIPPED
        try:
            if self.support.mode is Mode.RESIZE:
                try:
                    resized = self.client.patch(f"{path}/resize", resize, api.STRATEGIC_MERGE_PATCH)
                except api.ApiError as exc:
                    if exc.status == 404 and self._exists(path, uid):  # the pod is there, its subresource is not
                        self.turn_off(f"the API server does not serve pods/resize ({exc.message}): is the feature "
                                      f"gate {FEATURE_GATE} turned off?")
                        return Outcome.OFF
                    raise
                if not _still_promotable(resized, uid):  # evicted between the read and the resize
                    return Outcome.GONE
                version = (resized.get("metadata") or {}).get("resourceVersion")
                self.client.patch(path, class_patch(uid, version), api.STRATEGIC_MERGE_PATCH)
            else:
                body = {**resize, **class_patch(uid, (pod.get("metadata") or {}).get("resourceVersion"))}
                self.client.patch(path, body, api.STRATEGIC_MERGE_PATCH)
        except api.ApiError as exc:
            if exc.status == 404:
                return Outcome.GONE
            if exc.status == 422:
                return self._refused(key, uid, exc)
            return self._failed(key, exc)
        except OSError as exc:
            return self._failed(key, exc)
        self.promoted += 1
        requests = "; ".join(f"{c['name']}: " + ", ".join(f"{r} {v}" for r, v in c["resources"]["requests"].items())
                             for c in resize["spec"]["containers"])
        where = f" on node {node}" if node else ""
        log.info("promoted %s to regular%s (requests %s)", key, where, requests)
        post_event(self.client, {"apiVersion": "v1", "kind": "Pod", "metadata": pod.get("metadata") or {}},
                        "Normal", EVENT_REASON,
                        f"Promoted in place to regular{where}: regular room frees there, so the pod keeps its work "
                        f"and is no longer evicted under contention; requests restored ({requests})", self.clock())
        return Outcome.PROMOTED

    def _refused(self, key: str, uid: str, exc: api.ApiError) -> Outcome:
        """A 422: the cluster cannot resize (the spec is immutable, or the first promotion ever fails), or this one
        pod cannot be (left as it is, never asked about again)."""
        if "uid" in exc.message.lower():  # replaced by a same-named pod since the GET: not the pod decided on
            return Outcome.GONE
        if _SPEC_IMMUTABLE in exc.message or self.promoted == 0:
            self.turn_off(f"the API server refused to resize pod {key}: {exc.message}")
            return Outcome.OFF
        self.skipped.add(uid)
        log.warning("pod %s cannot be promoted: the API server refused it: %s", key, exc.message)
        return Outcome.SKIPPED

    def _exists(self, path: str, uid: str) -> bool:
        try:
            return (self.client.get(path).get("metadata") or {}).get("uid") == uid
        except (api.ApiError, OSError):
            return False

    @staticmethod
    def _failed(key: str, exc: Exception) -> Outcome:
        log.warning("pod %s not promoted (%s); the next pass decides again", key, exc)
        return Outcome.FAILED
