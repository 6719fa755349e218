"""``ubis`` skips an opportunistic pass when the harvestable room can only have shrunk since one that
found no demand shape fitting anywhere (``KubePreset._still_no_room``).

The skip must never change a result: the same runs with the skip turned off give the same placements
(time, job, group, node, class), the same summary and the same JCTs, and the skip must actually happen
on them (else this compares nothing).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from stowage.config import StowageSettings
from stowage.sim.baselines import KubePreset
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.presets import make
from stowage.sim.traces import resolve_workload
from stowage.sim.workload import Workload
from tests.sim.kit import BURSTY, contended


def _run(workload: Workload, config: SimConfig, seed: int, skip: bool, monkeypatch: pytest.MonkeyPatch
         ) -> tuple[str, str, list[float], int]:
    original = KubePreset._still_no_room
    skipped = [0]

    def still_no_room(self: KubePreset, sim: Simulation) -> bool:
        verdict = original(self, sim) and skip
        skipped[0] += verdict
        return verdict

    with monkeypatch.context() as m:
        m.setattr(KubePreset, "_still_no_room", still_no_room)
        sim = Simulation(workload, make("ubis"), config, seed)
        result = sim.run()
    return (json.dumps(sim.log, default=float), json.dumps(result.summary, sort_keys=True, default=float),
            np.asarray(result.jct).tolist(), skipped[0])


@pytest.mark.parametrize("case", ["contended", "swim-batch"])
def test_skipping_passes_with_no_room_changes_nothing(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if case == "contended":  # bursts, OOM kills and evictions: the room moves in every way it can
        workload, config, seed = contended(seed=4, n_jobs=16), SimConfig(usage=BURSTY, trace=True), 4
    else:  # the FB-2009 shapes, every job at t = 0: harvesting saturates, as on the speed target's run
        workload = resolve_workload("swim", nodes=10, node_shape=None, seed=5).sliced(first_jobs=1000)
        workload, config, seed = workload.with_batch_arrivals(), SimConfig(trace=True), 5
    log, summary, jct, skipped = _run(workload, config, seed, True, monkeypatch)
    log_off, summary_off, jct_off, skipped_off = _run(workload, config, seed, False, monkeypatch)
    assert skipped > 0 and skipped_off == 0
    assert log == log_off
    assert summary == summary_off
    assert jct == jct_off


def test_a_due_usage_sample_is_taken_even_when_the_last_pass_found_no_room() -> None:
    """With no opportunistic task running and no node over-allocated the monitor does not tick, so only the
    opportunistic pass samples usage. At t = 1 the node's regular tasks use all of it (no room for ``opp``);
    at t = 5 two of them finish. The skip may not keep the stale sample: the pass samples again, finds room,
    and ``opp`` starts then, not when the last regular task leaves at t = 50. (No ramp-up allowance here: with
    it, the regular tasks' demand would count until t = 30 whatever the samples say.)"""
    from stowage.labels import Opportunistic
    from tests.sim.kit import FLAT, group, job, nodes, workload

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
