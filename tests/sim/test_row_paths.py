"""The running table's drops and whole runs through starts and finishes of any size: the invariants.

Rows start and finish one, a few or many at a time (``_flush``, ``_finish_due``, ``Running.append``/``drop``);
every run here is checked at every event (``SimConfig(check=True)``: no task lost, regular requests never
above capacity), finishes everything, and gives the same result twice with the same seed.
"""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import numpy as np
import pytest

from stowage.labels import Opportunistic
from stowage.sim import cluster
from stowage.sim.cluster import Running
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.presets import make
from tests.sim.kit import BURSTY, FLAT, contended, group, job, nodes, workload

# --- the running table ----------------------------------------------------------------------------

class _Seen:
    """A row observer recording what it is told (rows and the table as it is then)."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def appended(self, run: Running, lo: int) -> None:
        self.calls.append(("appended", lo, run.group[lo:].tolist()))

    def dropping(self, run: Running, gone: np.ndarray) -> None:
        self.calls.append(("dropping", gone.dtype.str, gone.tolist(), len(run)))


def test_a_drop_of_unsorted_repeated_rows_reaches_observers_sorted_and_distinct() -> None:
    run, seen = Running(), _Seen()
    run.observers.append(seen)
    run.append(np.arange(6), np.zeros(6, np.int64), 0.0, np.ones(6), np.full(6, 0.5), np.ones(6), np.zeros(6, bool))
    run.drop(np.array([4, 1, 4], dtype=np.int64))
    assert seen.calls[-1] == ("dropping", np.dtype(np.int64).str, [1, 4], 6)
    assert run.group.tolist() == [0, 2, 3, 5]


# --- whole runs -----------------------------------------------------------------------------------

def _mixed_usage() -> Any:
    """Explicit usage on some groups (0, 0.5, 1) and the draw on others, tasks finishing together."""
    groups = [group("a", 6, 10.0, usage=None), group("b", 3, 10.0, usage=0.0, disk=10.0),
              group("c", 4, 7.0, usage=0.5, deps=("a",)), group("d", 2, 7.0, usage=1.0, network=20.0)]
    jobs = [job(f"j{i}", float(i % 3), *groups, opportunistic=(Opportunistic.AUTO, Opportunistic.TRUE)[i % 2])
            for i in range(8)]
    return workload(nodes(3, cpu=6.0, memory=12.0), jobs)


def _run(w: Any, preset: str, config: SimConfig, seed: int) -> dict[str, Any]:
    sim = Simulation(w, make(preset), config, seed)
    finished: list[Any] = []
    inner = sim.preset.on_finished

    def on_finished(groups: np.ndarray, durations: np.ndarray, rows: np.ndarray | None = None) -> None:
        finished.append((groups.dtype.str, groups.tobytes(), durations.dtype.str, durations.tobytes()))
        inner(groups, durations, rows)

    sim.preset.on_finished = on_finished  # type: ignore[method-assign]
    result = sim.run()
    st = sim.status
    return {
        "log": json.dumps(sim.log, default=float),
        "summary": json.dumps(result.summary, sort_keys=True, default=float),
        "jct": result.jct.tobytes(),
        "finished": finished,
        "counts": (st.tasks_done, st.opp_done, st.task_starts, st.g_done.tobytes(), st.g_pending.tobytes()),
        "rng": sim.rng.random(),
    }


RUNS = {
    "contended-bursty": (contended(seed=4, n_jobs=10), SimConfig(usage=BURSTY, trace=True), 1),
    "mixed-usage": (_mixed_usage(), SimConfig(trace=True, check=True), 2),
    "mixed-flat": (_mixed_usage(), SimConfig(usage=FLAT, trace=True, check=True), 0),
}


@pytest.mark.parametrize("preset", ["ubis", "kube-default", "stowage"])
@pytest.mark.parametrize("name", list(RUNS))
def test_whole_runs_keep_every_task_and_repeat_with_the_same_seed(name: str, preset: str) -> None:
    w, config, seed = RUNS[name]
    config = SimConfig(usage=config.usage, trace=True, check=True)  # the invariants at every event
    first = _run(w, preset, config, seed)
    assert json.loads(first["summary"])["lost_tasks"] == 0
    assert first["counts"][0] == sum(g.tasks for j in w.jobs for g in j.groups)
    assert _run(w, preset, config, seed) == first
    # Finishes of different sizes happened (a few rows at once, and more).
    sizes = {len(np.frombuffer(g, dtype=np.int64)) for _, g, _, _ in first["finished"]}
    assert len(sizes) > 1


def test_a_block_that_dropped_rows_still_pickles_and_copies() -> None:
    b = cluster.Block(np.float64, 2)
    b.data[:, :6] = np.arange(12.0).reshape(2, 6)
    b.reserve(6)
    b.drop(np.array([1], dtype=np.int64))
    for twin in (pickle.loads(pickle.dumps(b)), copy.deepcopy(b)):
        assert twin.view().tolist() == b.view().tolist()
        twin.drop(np.array([0], dtype=np.int64))
        assert twin.view().tolist() == [[2.0, 3.0, 4.0, 5.0], [8.0, 9.0, 10.0, 11.0]]
        assert b.view().tolist() == [[0.0, 2.0, 3.0, 4.0, 5.0], [6.0, 8.0, 9.0, 10.0, 11.0]]


@pytest.mark.parametrize("seed", range(4))
def test_drops_anywhere_keep_the_other_rows_in_order(seed: int) -> None:
    """Drops at the front, the back and in between (either side moves) leave the kept rows in start order."""
    rng = np.random.default_rng(seed)
    b = cluster.Block(np.int64, 2)
    kept: list[int] = []
    for step in range(300):
        k = int(rng.integers(0, 40))
        s = b.reserve(k)
        b.data[:, s] = np.arange(len(kept) + 10**6 * step, len(kept) + 10**6 * step + k)
        kept += b.data[0, s].tolist()
        if kept and step % 2:
            gone = np.unique(rng.integers(0, len(kept), size=int(rng.integers(1, 8))))
            if step % 4 == 1:
                gone = gone[gone < 5] if (gone < 5).any() else gone[:1]
            b.drop(gone.astype(np.int64))
            kept = [v for i, v in enumerate(kept) if i not in set(gone.tolist())]
        assert b.view()[0].tolist() == kept
        assert b.view()[1].tolist() == kept
