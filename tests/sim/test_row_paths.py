"""The few-rows paths (a task or two started or finished, ``cluster.FEW_ROWS``) against the numpy paths.

Starting and finishing a row or two runs on Python numbers instead of numpy calls (``_flush``, the usage
draw, ``Running.append``/``drop``, ``_finish_due``). Each must give exactly the
bits the numpy path gives: here both run on the same inputs (the numpy path forced by setting FEW_ROWS
to 0 in every module that reads it) and every array is compared bit for bit.
"""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import numpy as np
import pytest

from stowage.labels import Opportunistic
from stowage.sim import cluster, engine, rates
from stowage.sim.cluster import Running
from stowage.sim.engine import SimConfig, Simulation
from stowage.sim.presets import make
from stowage.sim.usage import UsageModel
from tests.sim.kit import BURSTY, FLAT, contended, group, job, nodes, workload

_READERS = (cluster, engine, rates)  # modules that read FEW_ROWS


def _bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every few-rows path off: the numpy paths run for any number of rows."""
    for module in _READERS:
        monkeypatch.setattr(module, "FEW_ROWS", 0)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# --- the usage draw -------------------------------------------------------------------------------

OVERRIDES = [np.nan, -0.0, 0.0, 0.3, 1.0, -0.5, 1.5, np.nan, 0.05, 0.01]
MODELS = [UsageModel(), UsageModel(io_fraction=None), UsageModel(concentration=0.0, mean_fraction=0.02),
          UsageModel(min_fraction=0.0, io_fraction=0.7), UsageModel(mean_fraction=1.0, min_fraction=1.0)]


@pytest.mark.parametrize("model", MODELS, ids=range(len(MODELS)))
@pytest.mark.parametrize("k", [0, 1, 2, 3, 4])
def test_few_draws_give_numpys_bits_and_leave_the_generator_where_numpy_does(model: UsageModel, k: int) -> None:
    for trial in range(20):
        pick = np.random.default_rng(trial).choice(len(OVERRIDES), size=k)
        override = np.array([OVERRIDES[i] for i in pick], dtype=np.float64)
        rng_np, rng_py = np.random.default_rng(trial), np.random.default_rng(trial)
        base = model.draw_base(rng_np, override)
        io = model.io_base(base, override)
        base_py = model.draw_base_few(rng_py, override.tolist())
        io_py = model.io_base_few(base_py, override.tolist())
        assert _same_bits(base, np.array(base_py, dtype=np.float64))
        assert _same_bits(io, np.array(io_py, dtype=np.float64))
        assert rng_np.random() == rng_py.random()  # the same numbers drawn, no more, no fewer


# --- the running table ----------------------------------------------------------------------------

class _Seen:
    """A row observer recording what it is told (rows and the table as it is then)."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def appended(self, run: Running, lo: int) -> None:
        self.calls.append(("appended", lo, run.uid[lo:].tolist()))

    def dropping(self, run: Running, gone: np.ndarray) -> None:
        self.calls.append(("dropping", gone.dtype.str, gone.tolist(), len(run)))


def _table_ops(seed: int) -> tuple[dict[str, bytes], list[Any]]:
    """A random sequence of appends (0..6 rows; lists for a few rows, as ``_flush`` hands them) and drops of
    1..6 rows at the front, the middle, the back, unsorted and repeated; every field's bytes at the end."""
    rng = np.random.default_rng(seed)
    run, seen = Running(), _Seen()
    run.observers.append(seen)
    for step in range(400):
        k = int(rng.integers(0, 7))
        if k:
            values = [rng.integers(0, 9, k), rng.integers(0, 5, k), float(step),
                      rng.choice([0.0, -0.0, 1.5, np.nan, 7.25], k), rng.random(k), rng.random(k),
                      rng.random(k) < 0.4]
            if k <= 4 and step % 2:
                values = [v if isinstance(v, float) else v.tolist() for v in values]
            run.append(*values)
        else:
            run.append(*(np.zeros(0, dtype=t) for t in (np.int64, np.int64)), float(step),
                       *(np.zeros(0) for _ in range(3)), np.zeros(0, dtype=bool))
        n = len(run)
        if n > 8 and step % 3:
            d = int(rng.integers(1, 7))
            where = step % 4
            if where == 0:
                rows = np.arange(d)
            elif where == 1:
                rows = np.arange(n - d, n)
            elif where == 2:
                rows = np.sort(rng.choice(n, size=d, replace=False))
            else:
                rows = rng.choice(n, size=d)  # any order, repeats (np.unique's work)
            run.drop(rows.astype(np.int64))
            run.work_left = run.work_left - 0.5  # writes through a field after a drop land in the table
    fields = ("start", "work_left", "rate", "base", "io_base", "burst_until", "group", "node", "uid", "opp")
    return {f: getattr(run, f).tobytes() for f in fields}, seen.calls


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_running_table_few_rows_paths_hold_what_the_numpy_paths_hold(monkeypatch: pytest.MonkeyPatch,
                                                                     seed: int) -> None:
    few = _table_ops(seed)
    _bulk(monkeypatch)
    bulk = _table_ops(seed)
    assert few[0] == bulk[0]
    assert few[1] == bulk[1]
    assert all(c[2] == sorted(set(c[2])) for c in few[1] if c[0] == "dropping")  # observers get them sorted
    assert any(c[0] == "dropping" and 1 <= len(c[2]) <= 4 for c in few[1])


def test_a_drop_of_unsorted_repeated_rows_reaches_observers_sorted_and_distinct() -> None:
    run, seen = Running(), _Seen()
    run.observers.append(seen)
    run.append(list(range(6)), [0] * 6, 0.0, [1.0] * 6, [0.5] * 6, [1.0] * 6, [False] * 6)
    run.drop(np.array([4, 1, 4], dtype=np.int64))
    assert seen.calls[-1] == ("dropping", np.dtype(np.int64).str, [1, 4], 6)
    assert run.group.tolist() == [0, 2, 3, 5]
    assert run.uid.tolist() == [0, 2, 3, 5]


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

    def on_finished(groups: np.ndarray, durations: np.ndarray) -> None:
        finished.append((groups.dtype.str, groups.tobytes(), durations.dtype.str, durations.tobytes()))
        inner(groups, durations)

    sim.preset.on_finished = on_finished  # type: ignore[method-assign]
    result = sim.run()
    return {
        "log": json.dumps(sim.log, default=float),
        "summary": json.dumps(result.summary, sort_keys=True, default=float),
        "jct": result.jct.tobytes(),
        "finished": finished,
        "counts": (sim.tasks_done, sim.opp_done, sim.task_starts, sim.g_done.tobytes(), sim.g_pending.tobytes()),
        "rng": sim.rng.random(),
    }


RUNS = {
    "contended-bursty": (contended(seed=4, n_jobs=10), SimConfig(usage=BURSTY, trace=True), 1),
    "mixed-usage": (_mixed_usage(), SimConfig(trace=True, check=True), 2),
    "mixed-flat": (_mixed_usage(), SimConfig(usage=FLAT, trace=True, check=True), 0),
}


@pytest.mark.parametrize("preset", ["ubis", "kube-default", "stowage"])
@pytest.mark.parametrize("name", list(RUNS))
def test_whole_runs_are_the_same_with_the_few_rows_paths_and_without(monkeypatch: pytest.MonkeyPatch,
                                                                      name: str, preset: str) -> None:
    w, config, seed = RUNS[name]
    few = _run(w, preset, config, seed)
    _bulk(monkeypatch)
    bulk = _run(w, preset, config, seed)
    assert few == bulk
    # Both paths ran: finishes of a few rows and of more.
    sizes = {len(np.frombuffer(g, dtype=np.int64)) for _, g, _, _ in few["finished"]}
    assert sizes & {1, 2, 3, 4}


# --- clamping the allocations a finish lowered ----------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clamp_allocs_gives_numpys_maximum_on_the_nodes_named(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = np.array([0.0, -0.0, np.nan, -1e-300, 1e-300, -3.5, 2.0, np.inf, -np.inf])
    c = cluster.Cluster(("cpu", "memory", "disk"), np.ones((6, 3)), np.ones(6, dtype=bool))
    c.reg_alloc[:] = rng.choice(values, size=(6, 3))
    c.opp_alloc[:] = rng.choice(values, size=(6, 3))
    c.reg_alloc[0, 0], c.opp_alloc[2, 1] = -0.0, -0.0  # np.maximum makes these +0.0
    expected = [a.copy() for a in (c.reg_alloc, c.opp_alloc)]
    touched = [0, 2, 3, 5]
    for a in expected:  # as the finish of a row or two did it before, node by node
        for n in touched:
            np.maximum(a[n], 0.0, out=a[n])
    c.clamp_allocs(touched)
    assert _same_bits(c.reg_alloc, expected[0])
    assert _same_bits(c.opp_alloc, expected[1])


def test_a_block_that_dropped_rows_still_pickles_and_copies() -> None:
    b = cluster.Block(np.float64, 2)
    b.data[:, :6] = np.arange(12.0).reshape(2, 6)
    b.reserve(6)
    b.drop(np.array([1], dtype=np.int64))  # builds the block's memoryviews
    for twin in (pickle.loads(pickle.dumps(b)), copy.deepcopy(b)):
        assert _same_bits(twin.view(), b.view())
        twin.drop(np.array([0], dtype=np.int64))
        assert twin.view().tolist() == [[2.0, 3.0, 4.0, 5.0], [8.0, 9.0, 10.0, 11.0]]
        assert b.view().tolist() == [[0.0, 2.0, 3.0, 4.0, 5.0], [6.0, 8.0, 9.0, 10.0, 11.0]]
