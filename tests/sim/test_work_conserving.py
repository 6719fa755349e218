"""Graham's check on the decision: a pass never leaves regular room idle that a waiting task could use.

Any work-conserving order loses at most one critical path against the optimum (Graham's bound); an order that
idles room a ready task fits has no such bound. After every decision of a simulated run this recomputes, from the
decision's own input and placements, the regular room each node has left (free vector, and on disk and network the
declared-bandwidth room), and asks whether a group with tasks still releasable fits one. The only room allowed to
stay idle is a node the starvation guard holds for a starved group (nothing else starts there, so its free room
grows until the group fits: a bounded, deliberate reservation, OPERA §III-C), and that is counted, not hidden.
"""

from __future__ import annotations

import numpy as np
import pytest

from stowage.model import Pool
from stowage.policy import decide
from stowage.policy.dispatch import PASS_DELAY_S
from stowage.sim.engine import SimConfig, simulate
from stowage.sim.traces.random_mix import random_mix


class Check:
    """Wraps ``Decider.decide``; counts the passes, and the groups that fit idle room (held nodes apart)."""

    def __init__(self) -> None:
        self.passes = self.idle = self.on_held_nodes = 0
        self.examples: list[tuple[float, object, int]] = []
        self.inner = decide.Decider.decide

    def __call__(self, decider: decide.Decider, inp: decide.DecideInput) -> decide.Decision:
        held_before = set(decider.held.values())
        out = self.inner(decider, inp)
        assert inp.queue_quota is None, "this check reads no quota: give it one before using quotas here"
        self.passes += 1
        free = np.array(inp.regular_free, dtype=np.float64)
        declared = np.where(inp.bandwidth[None, :], np.array(inp.bandwidth_room, dtype=np.float64), np.inf)
        left = np.asarray(inp.releasable, dtype=np.int64).copy()
        if inp.promotable is not None:  # promoted pods take their regular room before any placement
            for row in out.promoted.tolist():
                d = inp.promotable.demand[row]
                free[inp.promotable.node[row]] -= d
                declared[inp.promotable.node[row]] -= np.where(inp.bandwidth, d, 0.0)
        for g, n, pool in out.placements:
            left[g] -= 1
            if pool is Pool.REGULAR:
                d = inp.shapes[inp.group_shape[g]]
                free[n] -= d
                declared[n] -= np.where(inp.bandwidth, d, 0.0)
        room = np.minimum(free, declared)
        held = np.array([k in held_before | set(decider.held.values()) for k in inp.node_key], dtype=bool)
        for g in np.flatnonzero(left > 0).tolist():
            fits = (inp.shapes[inp.group_shape[g]][None, :] <= room * (1 + 1e-9) + 1e-12).all(axis=1)
            if (fits & ~held).any():
                self.idle += 1
                if len(self.examples) < 3:
                    self.examples.append((inp.now, inp.group_key[g], int(left[g])))
            elif fits.any():
                self.on_held_nodes += 1
        return out


@pytest.mark.parametrize(("seed", "preset"), [(0, "stowage-regular"), (7, "stowage-regular"), (7, "stowage")])
def test_no_pass_leaves_room_idle_that_a_waiting_task_fits(monkeypatch: pytest.MonkeyPatch, seed: int,
                                                           preset: str) -> None:
    check = Check()
    monkeypatch.setattr(decide.Decider, "decide", lambda self, inp: check(self, inp))
    simulate(random_mix(seed), preset, config=SimConfig(pass_delay_s=PASS_DELAY_S), seed=seed)
    assert check.passes > 100
    assert check.idle == 0, f"{check.idle} groups fit idle room after a pass; (time, group, tasks): {check.examples}"


def test_the_check_sees_idle_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a decision that drops its last placement leaves room a waiting task fits."""
    check = Check()
    inner = check.inner

    def lazy(self: decide.Decider, inp: decide.DecideInput) -> decide.Decision:
        out = inner(self, inp)
        out.placements[:] = out.placements[:-1]
        return out

    check.inner = lazy
    monkeypatch.setattr(decide.Decider, "decide", lambda self, inp: check(self, inp))
    simulate(random_mix(0), "stowage-regular", config=SimConfig(pass_delay_s=PASS_DELAY_S), seed=0)
    assert check.idle > 0
