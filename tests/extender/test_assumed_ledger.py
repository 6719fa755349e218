"""The model's per-node ledger of the assumed set ``S`` equals ``policy.harvest.assumed`` after any history.

The ledger adds a pod's demand when it is placed and takes it back when the pod
expires, is deleted or is bound elsewhere; nodes come and go (rows re-resolved).
Hypothesis drives random histories through the model's public API and compares
every read with the policy function over a plain list of what was placed when.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stowage.kube.cluster import ClusterModel
from stowage.policy import harvest, room
from stowage.resources import ResourceVector
from tests.extender.objects import node

WINDOW_S = 30.0
NODES = ("n1", "n2", "n3", "n4")
PODS = tuple(f"p{i}" for i in range(6))
GI = 2**30


@dataclass
class Clock:
    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Reference:
    """What a reader of the policy would keep: every placement, its node, demand and time."""

    placed: dict[str, tuple[str, np.ndarray, float]] = field(default_factory=dict)

    def expected(self, names: list[str], known: set[str], now: float, exclude: str | None) -> np.ndarray:
        entries = [(n, d, t) for key, (n, d, t) in self.placed.items() if key != exclude and n in known]
        position = {name: i for i, name in enumerate(names)}
        entries = [e for e in entries if e[0] in position]
        if not entries:
            return np.zeros((len(names), 2))
        demands = np.array([d for _, d, _ in entries])
        bound = np.array([t for _, _, t in entries])
        index = np.array([position[n] for n, _, _ in entries])
        return harvest.assumed(demands, bound, index, now, WINDOW_S, len(names))


ops = st.one_of(
    st.tuples(st.just("assume"), st.sampled_from(PODS), st.sampled_from(NODES),
              st.floats(0, 8), st.floats(0, 16)),
    st.tuples(st.just("delete"), st.sampled_from(PODS)),
    st.tuples(st.just("tick"), st.floats(0, 20)),
    st.tuples(st.just("add-node"), st.sampled_from(NODES)),
    st.tuples(st.just("drop-node"), st.sampled_from(NODES)),
    st.tuples(st.just("read"), st.permutations((*NODES, "ghost")).map(lambda p: list(p[:3])),
              st.one_of(st.none(), st.sampled_from(PODS))),
)


@settings(max_examples=200, deadline=None)
@given(history=st.lists(ops, min_size=1, max_size=40))
def test_the_ledger_matches_the_policy_function_after_any_history(history: list[tuple]) -> None:
    clock = Clock()
    model = ClusterModel(recent_window_s=WINDOW_S, clock=clock)
    model.replace_nodes([node("n1"), node("n2")])
    known = {"n1", "n2"}
    ref = Reference()
    for op in history:
        kind = op[0]
        if kind == "assume":
            _, key, name, cpu, mem_gi = op
            model.assume(key, name, ResourceVector({"cpu": cpu, "memory": mem_gi * GI}))
            ref.placed[key] = (name, np.array([cpu, mem_gi * GI]), clock.now)
        elif kind == "delete":
            model.apply_pod_event("DELETED", {"metadata": {"uid": op[1]}})
            ref.placed.pop(op[1], None)
        elif kind == "tick":
            clock.now += op[1]
            ref.placed = {k: v for k, v in ref.placed.items() if clock.now - v[2] < WINDOW_S}
        elif kind == "add-node":
            model.apply_node_event("ADDED", node(op[1]))
            known.add(op[1])
        elif kind == "drop-node":
            model.apply_node_event("DELETED", node(op[1]))
            known.discard(op[1])
        else:
            _, names, exclude = op
            rows = np.array([model.view([n]).rows[0] for n in names])
            got = model.assumed_for(rows, exclude_pod=exclude)[:, :2]
            want = ref.expected(names, known, clock.now, exclude)
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-6)


def test_a_node_named_twice_gets_its_assumed_set_at_both_positions() -> None:
    model = ClusterModel(recent_window_s=WINDOW_S, clock=Clock())
    model.replace_nodes([node("n1"), node("n2")])
    model.assume("a", "n1", ResourceVector({"cpu": 2.0}))
    rows = model.view(["n1", "n2", "n1"]).rows
    assert model.assumed_for(rows)[:, 0].tolist() == [2.0, 0.0, 2.0]


def test_a_pod_filtered_again_does_not_compete_with_its_own_placement() -> None:
    model = ClusterModel(recent_window_s=WINDOW_S, clock=Clock())
    model.replace_nodes([node("n1")])
    model.assume("a", "n1", ResourceVector({"cpu": 2.0}))
    model.assume("b", "n1", ResourceVector({"cpu": 0.5}))
    rows = model.view(["n1"]).rows
    assert model.assumed_for(rows, exclude_pod="a")[0, 0] == pytest.approx(0.5)
    assert model.assumed_for(rows, exclude_pod="b")[0, 0] == pytest.approx(2.0)
    assert model.assumed_for(rows)[0, 0] == pytest.approx(2.5)


def test_the_ledger_returns_to_exactly_zero_when_a_node_empties() -> None:
    clock = Clock()
    model = ClusterModel(recent_window_s=WINDOW_S, clock=clock)
    model.replace_nodes([node("n1")])
    for i, cpu in enumerate((0.1, 0.2, 0.3, 0.7)):  # sums that float arithmetic cannot take back exactly
        model.assume(f"p{i}", "n1", ResourceVector({"cpu": cpu}))
    clock.now += WINDOW_S
    assert model.assumed_for(model.view(["n1"]).rows)[0].tolist() == [0.0] * len(model.resources)


# --- the allowance ends on the first sample that includes the pod ------------------------------------------------


def _bound_pod(key: str, name: str, cpu: float, bound_s: int, started_s: int | None) -> dict:
    """A bound pod as the API shows it: PodScheduled at ``bound_s``, its container running since ``started_s``."""
    def ts(t: int) -> str:
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    state = {"running": {"startedAt": ts(started_s)}} if started_s is not None else {"waiting": {}}
    return {
        "metadata": {"uid": key, "name": key, "namespace": "batch"},
        "spec": {"nodeName": name, "containers": [{"name": "main", "resources": {"requests": {"cpu": str(cpu)}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True",
                                                       "lastTransitionTime": ts(bound_s)}],
                   "containerStatuses": [{"name": "main", "state": state}]},
    }


timed_ops = st.one_of(
    st.tuples(st.just("bind"), st.sampled_from(PODS), st.sampled_from(("n1", "n2")), st.integers(1, 8),
              st.booleans()),
    st.tuples(st.just("start"), st.sampled_from(PODS)),
    st.tuples(st.just("delete"), st.sampled_from(PODS)),
    st.tuples(st.just("tick"), st.integers(0, 12)),
    st.tuples(st.just("sample"), st.sampled_from(("n1", "n2"))),
    st.tuples(st.just("read"), st.one_of(st.none(), st.sampled_from(PODS))),
)


@settings(max_examples=150, deadline=None)
@given(history=st.lists(timed_ops, min_size=1, max_size=40))
def test_the_ledger_with_sample_times_matches_the_policy_rule(history: list[tuple]) -> None:
    """Reads with the nodes' sample times equal ``policy.room.assumed_usage`` over what was bound, when and since
    when it runs (sample times only move forward, as a node monitor's do)."""
    clock = Clock(now=1_700_000_000.0)
    model = ClusterModel(recent_window_s=WINDOW_S, clock=clock)
    model.replace_nodes([node("n1"), node("n2")])
    names = ["n1", "n2"]
    rows = np.array([model.view([n]).rows[0] for n in names])
    sampled = {n: np.nan for n in names}
    placed: dict[str, tuple[int, float, float, float]] = {}  # key → (node position, cpu, bound, started)
    for op in history:
        kind = op[0]
        if kind == "bind":  # bound now, its container running at once or not yet
            _, key, name, cpu, running = op
            now = int(clock.now)
            model.apply_pod_event("ADDED", _bound_pod(key, name, cpu, now, now if running else None))
            placed[key] = (names.index(name), float(cpu), float(now), float(now) if running else np.nan)
        elif kind == "start":  # its container starts now (a MODIFIED event)
            if op[1] in placed and np.isnan(placed[op[1]][3]):
                at, cpu, bound, _ = placed[op[1]]
                model.apply_pod_event("MODIFIED", _bound_pod(op[1], names[at], cpu, int(bound), int(clock.now)))
                placed[op[1]] = (at, cpu, bound, float(int(clock.now)))
        elif kind == "delete":
            model.apply_pod_event("DELETED", {"metadata": {"uid": op[1]}})
            placed.pop(op[1], None)
        elif kind == "tick":
            clock.now += op[1]
        elif kind == "sample":
            sampled[op[1]] = clock.now
        else:
            exclude = op[1]
            table = np.full(int(rows.max()) + 1, np.nan)
            table[rows] = [sampled[n] for n in names]
            got = model.assumed_for(rows, exclude_pod=exclude, sampled=(model.index_version, table), period_s=1.0)
            entries = [v for k, v in placed.items() if k != exclude]
            if entries:
                want = room.assumed_usage(
                    np.array([[e[1]] for e in entries]), [e[2] for e in entries], [e[3] for e in entries],
                    [e[0] for e in entries], [sampled[n] for n in names], clock.now, ramp_up_s=WINDOW_S,
                    period_s=1.0)[:, 0]
            else:
                want = np.zeros(2)
            np.testing.assert_allclose(got[:, 0], want, rtol=1e-9, atol=1e-9)
