"""Which pods the monitor may evict, parsed from Pod objects; the store keeps this node's pods only."""

from __future__ import annotations

import pytest
from stowage.node_monitor.pods import DEFAULT_GRACE_S, PodStore, pod_info

from stowage.labels import LABEL_CLASS, LABEL_OPPORTUNISTIC, PodClass


def _pod(labels: dict[str, str] | None = None, node: str = "n1", uid: str = "u1", **extra) -> dict:
    meta = {"name": "p", "namespace": "ns", "uid": uid, "labels": labels or {}, **extra.pop("meta", {})}
    return {"metadata": meta, "spec": {"nodeName": node, **extra.pop("spec", {})},
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:10Z", **extra.pop("status", {})}}


@pytest.mark.parametrize(
    ("labels", "extra", "evictable"),
    [
        pytest.param({LABEL_CLASS: "opportunistic"}, {}, True, id="class-opportunistic-is-evictable"),
        pytest.param({LABEL_CLASS: " Opportunistic "}, {}, True, id="class-value-normalised-like-pod-intent"),
        pytest.param({LABEL_CLASS: "regular"}, {}, False, id="regular-is-protected"),
        pytest.param({}, {}, False, id="unclassified-pod-is-protected"),
        pytest.param({LABEL_CLASS: "bogus"}, {}, False, id="malformed-class-is-protected"),
        pytest.param({LABEL_OPPORTUNISTIC: "true"}, {}, False, id="user-intent-alone-is-not-the-given-class"),
        pytest.param({LABEL_CLASS: "opportunistic", LABEL_OPPORTUNISTIC: "false"}, {}, False,
                     id="contradictory-labels-are-protected"),
        pytest.param({LABEL_CLASS: "opportunistic"}, {"meta": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, False,
                     id="terminating-pod-is-not-chosen-again"),
        pytest.param({LABEL_CLASS: "opportunistic"}, {"status": {"phase": "Succeeded"}}, False,
                     id="finished-pod-is-not-chosen"),
    ],
)
def test_only_opportunistic_pods_that_did_not_opt_out_are_evictable(labels, extra, evictable) -> None:
    info = pod_info(_pod(labels, **extra))
    assert info is not None and info.opportunistic is evictable


def test_start_time_grace_period_and_class_label_are_read() -> None:
    info = pod_info(_pod({LABEL_CLASS: "opportunistic"}, spec={"terminationGracePeriodSeconds": 5}))
    assert info.started_at_s == 1767225610.0  # 2026-01-01T00:00:10Z
    assert info.grace_s == 5.0 and info.class_label == "opportunistic"
    plain = pod_info(_pod(status={"startTime": None}, meta={"creationTimestamp": "2026-01-01T00:00:00Z"}))
    assert plain.started_at_s == 1767225600.0 and plain.grace_s == DEFAULT_GRACE_S
    assert plain.class_label == PodClass.REGULAR  # never classified: protected, shown as regular


def test_a_pod_without_uid_cannot_be_matched_to_a_cgroup() -> None:
    assert pod_info(_pod(uid="")) is None


def test_the_store_keeps_only_this_nodes_pods() -> None:
    store = PodStore("n1")
    store.replace([_pod(uid="a"), _pod(uid="b", node="n2")])
    assert set(store.snapshot()) == {"a"}
    store.apply({"type": "ADDED", "object": _pod(uid="c", node="n2")})
    store.apply({"type": "ADDED", "object": _pod(uid="d")})
    assert set(store.snapshot()) == {"a", "d"}
    store.apply({"type": "MODIFIED", "object": _pod(uid="a", node="n9")})  # moved away: dropped
    store.apply({"type": "DELETED", "object": _pod(uid="d")})
    store.apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}})
    assert store.snapshot() == {}
