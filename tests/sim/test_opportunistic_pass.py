"""``ubis``'s opportunistic pass judges the harvestable room on a fresh usage sample."""

from __future__ import annotations

import dataclasses

from stowage.config import StowageSettings
from stowage.labels import Opportunistic
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.presets import make
from tests.sim.kit import FLAT, group, job, nodes, workload


def test_a_due_usage_sample_is_taken_before_an_opportunistic_pass() -> None:
    """With no opportunistic task running and no node over-allocated the monitor does not tick, so only the
    opportunistic pass samples usage. At t = 1 the node's regular tasks use all of it (no room for ``opp``);
    at t = 5 two of them finish. The pass may not keep the stale sample: it samples again, finds room,
    and ``opp`` starts then, not when the last regular task leaves at t = 50. (No ramp-up allowance here: with
    it, the regular tasks' demand would count until t = 30 whatever the samples say.)"""
    w = workload(nodes(1), [
        job("short", 0.0, group("g", 2, 5.0)),
        job("long", 0.0, group("g", 2, 50.0)),
        job("opp", 1.0, group("g", 1, 5.0), opportunistic=Opportunistic.TRUE),
    ])
    base = StowageSettings()
    settings = dataclasses.replace(base, harvest=dataclasses.replace(base.harvest, ramp_up_s=0.0))
    sim = Simulation(w, make("ubis"), SimConfig(settings=settings, usage=FLAT, trace=True), 0)
    sim.run()
    starts = {(name, opp): t for t, name, _, _, opp in sim.log}
    assert starts[("opp", True)] == 5.0


def test_stowage_builds_the_room_only_when_some_group_may_harvest(monkeypatch) -> None:
    """``decide.needs_harvestable`` before each decision: "false" jobs never make the preset compute the room. A
    "true" task that regular room holds does (it may harvest), and it still runs regular (regular room first)."""
    from stowage.sim.packing import PackingPreset

    calls = []
    real = PackingPreset._harvestable
    monkeypatch.setattr(PackingPreset, "_harvestable", lambda self: calls.append(self.view.now) or real(self))
    regular = workload(nodes(1), [job("a", 0.0, group("g", 2, 5.0)), job("b", 1.0, group("g", 6, 5.0))])
    Simulation(regular, make("stowage"), SimConfig(usage=FLAT), 0).run()
    assert calls == []
    fits = workload(nodes(1), [job("t", 0.0, group("g", 1, 5.0), opportunistic=Opportunistic.TRUE)])
    sim = Simulation(fits, make("stowage"), SimConfig(usage=FLAT, trace=True), 0)
    sim.run()
    assert calls == [0.0]
    assert [(name, opp) for _, name, _, _, opp in sim.log] == [("t", False)]
