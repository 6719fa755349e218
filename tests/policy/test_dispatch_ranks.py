"""The job-order mask kept through a pass answers as the per-call sort it replaced."""

from __future__ import annotations

import numpy as np
import pytest

from stowage.policy.dispatch import _Ranks


def _sorted_mask(jobs: np.ndarray, queues: np.ndarray, rank_of: dict[int, float], f: float) -> np.ndarray:
    """The straightforward rule: per queue, the first max(1, ⌈(1−f)·J_q⌉) present jobs by (rank, job)."""
    allowed: set[int] = set()
    for q in np.unique(queues).tolist():
        present = sorted(set(jobs[queues == q].tolist()), key=lambda j: (rank_of[j], j))
        allowed.update(present[: max(1, int(np.ceil((1.0 - f) * len(present))))])
    return np.array([j in allowed for j in jobs.tolist()], dtype=bool)


@pytest.mark.parametrize("seed", range(30))
def test_the_mask_follows_rows_leaving_one_by_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_jobs, n_rows = int(rng.integers(1, 40)), int(rng.integers(1, 80))
    job_queue = rng.integers(0, 3, size=n_jobs)
    jobs = rng.integers(0, n_jobs, size=n_rows) * 7 + 3  # sparse job indices, several rows per job
    queues = job_queue[(jobs - 3) // 7]
    ranks = rng.choice([0.0, 1.0, 2.0, 5.0, np.inf], size=n_jobs)  # ties and unknown (inf) ranks
    rank_of = {int(j): float(ranks[(j - 3) // 7]) for j in np.unique(jobs)}
    f = float(rng.choice([0.0, 0.25, 0.5, 0.9, 1.0]))
    asked: list[np.ndarray] = []

    def job_rank(js: np.ndarray) -> np.ndarray:
        asked.append(js)
        return np.array([rank_of[int(j)] for j in js])

    ranker = _Ranks(job_rank, jobs, queues, f)
    keep = None
    while jobs.size:
        assert ranker.mask(keep).tolist() == _sorted_mask(jobs, queues, rank_of, f).tolist()
        keep = rng.random(jobs.size) > 0.3
        keep[rng.integers(jobs.size)] = False
        jobs, queues = jobs[keep], queues[keep]
    assert len(asked) == 1  # the caller's ranking is asked once per pass
