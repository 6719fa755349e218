"""The policies the simulator compares, as named presets.

* ``kube-default``: PrioritySort queue (priority, then arrival); NodeResourcesFit
  LeastAllocated + NodeResourcesBalancedAllocation on cpu and memory, requests only.
* ``binpack``: the same with MostAllocated.
* ``drf``: the queue with the lowest dominant share places next (FIFO inside it);
  LeastAllocated + BalancedAllocation.
* ``load-aware``: Trimaran TargetLoadPacking (measured CPU, target 40 %, pods
  bound within the last 60 s and the new pod at 1.5 × request).
* ``tetris``: alignment + ε·remaining work over all resources; DRF deficits
  between queues with the fairness knob ``f``; barrier knob ``b``; regular only.
* ``ubis``: kube-default, plus tasks that do not fit run opportunistically on
  harvestable capacity (UBIS Alg. 1), evicted under sustained contention.
* ``stowage``: tetris + DRF per pool + each queue's ``jobOrder`` (FIFO, SRTF,
  FSP) + harvesting, with OPERA's short/long classifier for ``auto`` jobs and
  the contention policy.

kube-scheduler places pods one at a time in queue order, and a pod that fits
nowhere does not block the pods behind it; the kube-like presets check fit on
every Kubernetes resource except disk and network bandwidth, which are not
Kubernetes resources, so those presets over-allocate bandwidth (Tetris §5.3.1).
Ties between equal node scores are broken at random (kube's ``selectHost``),
from the run's seeded generator. Not modelled: ``percentageOfNodesToScore``
(every feasible node is scored).

The kube-like ``Score`` plugins live in ``stowage.sim.scoring``; every
Stowage formula comes from ``stowage.policy`` (the code the cluster runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.errors import InvalidInput
from stowage.policy import decide, harvest

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["PRESETS", "Preset", "make"]

# JobSpec.opportunistic as the engine codes it: the decision's intent codes
OPP_FALSE, OPP_AUTO, OPP_TRUE = decide.INTENT_FALSE, decide.INTENT_AUTO, decide.INTENT_TRUE


class Preset:
    """Base: hooks the engine calls, and shared helpers."""

    name = "base"
    harvesting = False
    operator_paced = False
    """Its passes are the operator's dispatcher's, paced by ``SimConfig.pass_delay_s``; False: event-driven,
    as kube-scheduler is."""

    def attach(self, sim: Simulation) -> None:
        self.sim = sim

    def regular_resources(self, sim: Simulation) -> NDArray[np.bool_]:
        """Resources checked when fitting a regular pod."""
        return np.ones(len(sim.resources), dtype=bool)

    def on_job_arrived(self, j: int) -> None: ...
    def on_job_finished(self, j: int) -> None: ...
    def on_evicted(self, groups: NDArray[np.int64]) -> None: ...
    def on_finished(self, groups: NDArray[np.int64], durations: NDArray[np.float64]) -> None: ...

    def schedule(self, sim: Simulation) -> None:
        raise NotImplementedError

    # --- helpers ---------------------------------------------------------------------------------

    def _pick(self, scores: NDArray, ok: NDArray[np.bool_]) -> int | None:
        """Highest-scoring feasible node; ties at random like kube's selectHost."""
        if not ok.any():
            return None
        s = np.where(ok, scores, -np.inf)
        best = np.flatnonzero(s == s.max())
        if best.size == 1:
            return int(best[0])
        return int(best[self.sim.rng.integers(best.size)])

    def _harvestable(self, sim: Simulation) -> NDArray[np.float64]:
        """``A_opp`` per node (UBIS Alg. 1 l.21), from a fresh-enough monitor sample."""
        c = sim.cluster
        if sim.now - sim.monitor.last_sample >= sim.settings.contention.sample_interval_s:
            sim.monitor.sample()
        run = sim.running  # every running row, regular or opportunistic: any new task's usage lags U
        assumed = harvest.assumed(
            sim.g_demand[run.group], run.start, run.node, sim.now, sim.settings.harvest.ramp_up_s, c.n,
        )
        a = harvest.harvestable(c.cap, c.usage, c.blocked, assumed, sim.settings.harvest.t_alloc.array(sim.resources))
        a[~c.harvest] = 0.0
        return a

    def _opp_eligible(self, sim: Simulation, groups: NDArray[np.int64]) -> NDArray[np.bool_]:
        jobs = sim.g_job[groups]
        return (sim.j_opp[jobs] != OPP_FALSE) & sim.q_opp[sim.g_queue[groups]]


def _factories() -> dict[str, object]:
    from stowage.sim.baselines import KubePreset
    from stowage.sim.packing import PackingPreset

    return {
        "kube-default": lambda: KubePreset("kube-default", "least"),
        "binpack": lambda: KubePreset("binpack", "most"),
        "drf": lambda: KubePreset("drf", "least", order="drf"),
        "load-aware": lambda: KubePreset("load-aware", "tlp"),
        "tetris": lambda: PackingPreset("tetris", harvesting=False, job_order=False, classifier=False,
                                          guard=False),
        "ubis": lambda: KubePreset("ubis", "least", harvesting=True),
        "stowage": lambda: PackingPreset("stowage", harvesting=True, job_order=True, classifier=True,
                                           guard=True),
    }


PRESETS: tuple[str, ...] = ("kube-default", "binpack", "drf", "load-aware", "tetris", "ubis", "stowage")
"""The preset names, in report order. Spelled out rather than ``tuple(_factories())``: building the factories
imports ``baselines`` and ``packing``, which import this module, so importing either of them first failed."""


def make(name: str) -> Preset:
    """A fresh preset instance by name (one per run: presets hold run state)."""
    factories = _factories()
    if name not in factories:
        raise InvalidInput("policy", name, f"one of {', '.join(PRESETS)}")
    return factories[name]()  # type: ignore[operator]
