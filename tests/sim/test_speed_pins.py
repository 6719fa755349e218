"""Pinned results: every preset's outcome on two small runs, as digests.

The simulator's speed work must never change a result: an optimisation that moves one placement,
one finish time or one eviction changes a digest here. A deliberate policy change regenerates
them (and says so in its commit): ``.venv/bin/python -m tests.sim.test_speed_pins --update``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.presets import PRESETS, make
from stowage.sim.traces import resolve_workload
from stowage.sim.workload import Workload
from tests.sim.kit import BURSTY, contended

PINS = Path(__file__).with_name("data") / "pinned_runs.json"


def _workloads() -> dict[str, tuple[Workload, SimConfig, int]]:
    swim = resolve_workload("swim", nodes=20, node_shape=None, seed=3).sliced(first_jobs=40).with_batch_arrivals()
    return {
        # harvesting, bursts, OOM kills and evictions, two queues (SRTF and FSP)
        "contended": (contended(seed=2, n_jobs=14), SimConfig(usage=BURSTY, trace=True), 2),
        # the FB-2009 trace's shapes with a common start, as on the speed target's run
        "swim-batch": (swim, SimConfig(trace=True), 3),
    }


def digest(workload: Workload, preset: str, config: SimConfig, seed: int) -> str:
    """SHA-256 over every placement (time, job, group, node, class), the summary and each job's JCT."""
    sim = Simulation(workload, make(preset), config, seed)
    result = sim.run()
    h = hashlib.sha256()
    h.update(json.dumps(sim.log, default=float).encode())
    h.update(json.dumps(result.summary, sort_keys=True, default=float).encode())
    h.update(np.ascontiguousarray(result.jct).tobytes())
    return h.hexdigest()


def current() -> dict[str, str]:
    return {f"{name}/{preset}": digest(w, preset, cfg, seed)
            for name, (w, cfg, seed) in _workloads().items() for preset in PRESETS}


@pytest.fixture(scope="module")
def pinned() -> dict[str, str]:
    return json.loads(PINS.read_text())


@pytest.mark.parametrize("workload", ["contended", "swim-batch"])
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_reproduces_its_pinned_run(pinned: dict[str, str], workload: str, preset: str) -> None:
    w, cfg, seed = _workloads()[workload]
    assert digest(w, preset, cfg, seed) == pinned[f"{workload}/{preset}"], (
        "this run's placements or results changed; if the change is a deliberate policy change, "
        "regenerate with: .venv/bin/python -m tests.sim.test_speed_pins --update")


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    PINS.write_text(json.dumps(current(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {PINS}")
