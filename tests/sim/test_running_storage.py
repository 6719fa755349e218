"""The running table's in-place storage (``sim.cluster.Block``, ``Running``) against plain numpy arrays.

Appends write into spare capacity and drops move later rows down in place; every field must read
exactly what concatenating and boolean-indexing fresh arrays gives, in the same row order (per-node
sums add in row order), through growth, single drops, many drops and drops of everything.
"""

from __future__ import annotations

import numpy as np
import pytest

from stowage.sim.cluster import Block, Running

FIELDS = ("group", "node", "start", "work_left", "rate", "base", "io_base", "burst_until", "opp")


class Recorder:
    """A row observer that sees what the table holds when it is told (rows named by their group: unique here)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, list[int]]] = []

    def appended(self, run: Running, lo: int) -> None:
        self.calls.append(("appended", lo, run.group[lo:].tolist()))

    def dropping(self, run: Running, gone: np.ndarray) -> None:
        self.calls.append(("dropping", len(run), run.group[gone].tolist()))


def _reference_append(ref: dict[str, np.ndarray], rows: dict[str, np.ndarray]) -> None:
    for name, values in rows.items():
        ref[name] = np.concatenate([ref[name], values])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_running_reads_what_fresh_arrays_give_through_appends_and_drops(seed: int) -> None:
    rng = np.random.default_rng(seed)
    run = Running()
    obs = Recorder()
    run.observers.append(obs)
    ref = {name: np.zeros(0, dtype=bool if name == "opp" else np.int64 if name in ("group", "node")
                          else np.float64) for name in FIELDS}
    next_id = 0  # each row gets its own group: the observer names rows by it
    for step in range(300):
        k = int(rng.integers(1, 40)) if step % 3 else int(rng.integers(0, 3))
        now = float(step)
        rows = {
            "group": np.arange(next_id, next_id + k), "node": rng.integers(0, 20, k),
            "work_left": rng.random(k) * 100, "base": rng.random(k), "io_base": rng.random(k),
            "opp": rng.random(k) < 0.3,
        }
        version = run.version
        run.append(rows["group"], rows["node"], now, rows["work_left"], rows["base"], rows["io_base"], rows["opp"])
        assert run.version == version + 1
        _reference_append(ref, {**rows, "start": np.full(k, now), "rate": np.ones(k),
                                "burst_until": np.full(k, -np.inf)})
        next_id += k
        assert obs.calls[-1] == ("appended", len(ref["group"]) - k, list(range(next_id - k, next_id)))
        # Writes through a field land in the table (the engine's rates, progress and bursts).
        run.rate = rng.random(len(run))
        ref["rate"] = run.rate.copy()
        left = run.work_left
        left -= 0.5
        ref["work_left"] = ref["work_left"] - 0.5
        # Drop a few rows (a finish), many (an eviction storm), or every row.
        p = len(run)
        if step % 50 == 49:
            mask = np.zeros(p, dtype=bool)
        elif step % 7 == 0:
            mask = rng.random(p) < 0.5
        else:
            mask = np.ones(p, dtype=bool)
            if p:
                mask[rng.integers(0, p, int(rng.integers(1, 4)))] = False
        gone = ref["group"][~mask].tolist()
        rows = np.flatnonzero(~mask)
        run.drop(rng.permutation(rows))  # any order: an eviction's victims
        assert obs.calls[-1] == ("dropping", p, gone)
        ref = {name: values[mask] for name, values in ref.items()}
        assert len(run) == len(ref["group"])
        for name in FIELDS:
            got = getattr(run, name)
            assert got.dtype == ref[name].dtype, name
            np.testing.assert_array_equal(got, ref[name], err_msg=name)


def test_block_drop_keeps_order_with_few_and_many_rows_gone() -> None:
    rng = np.random.default_rng(5)
    for p in (0, 1, 2, 17, 1000, 3000):
        for gone in (0, 1, 2, 16, 17, p):  # 16: the most moved run by run; 17: a boolean index
            b = Block(np.float64, 3)
            values = rng.random((3, p))
            rows = b.reserve(p)  # may grow the block: write after
            b.data[:, rows] = values
            mask = np.ones(p, dtype=bool)
            mask[rng.choice(p, min(gone, p), replace=False)] = False
            b.drop(np.flatnonzero(~mask))
            np.testing.assert_array_equal(b.view(), values[:, mask])
            assert b.data.shape[1] >= p  # capacity is kept for the next appends


def test_block_reuses_its_room_when_old_rows_leave_from_the_front() -> None:
    """Finishes mostly take old rows: the rows before them move up and the view starts later, until
    appends reach the end of the buffer and the rows in use move back to its start."""
    b = Block(np.int64, 2)
    rows = b.reserve(50)  # fifty rows running throughout: compacting must carry them all
    b.data[0, rows], b.data[1, rows] = np.arange(50), -np.arange(50)
    ref: list[int] = list(range(50))
    next_value = 50
    for step in range(5000):
        k = 2 if step % 3 == 0 else 1
        rows = b.reserve(k)
        values = np.arange(next_value, next_value + k)
        b.data[0, rows], b.data[1, rows] = values, -values
        ref.extend(values.tolist())
        next_value += k
        gone = [0] if step % 3 else [0, min(2, len(ref) - 1)]  # the oldest, or two near the front
        b.drop(np.array(sorted(set(gone)), dtype=np.int64))
        for i in sorted(set(gone), reverse=True):
            del ref[i]
        np.testing.assert_array_equal(b.view()[0], ref)
        np.testing.assert_array_equal(b.view()[1], [-v for v in ref])
    assert b.data.shape[1] == 1024  # it never needed to grow: the room freed at the front was reused
