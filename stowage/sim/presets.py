"""The policies the simulator compares, as named presets.

* ``kube-default``: PrioritySort queue (priority, then arrival); NodeResourcesFit LeastAllocated +
  NodeResourcesBalancedAllocation on cpu and memory, requests only.
* ``binpack``: the same with MostAllocated.
* ``drf``: the queue with the lowest dominant share places next (FIFO inside it); LeastAllocated +
  BalancedAllocation.
* ``load-aware``: Trimaran TargetLoadPacking (measured CPU, target 40 %, pods bound within the last 60 s and the new
  pod at 1.5 × request).
* ``tetris``: alignment + ε·remaining work over all resources; DRF deficits between queues with the fairness knob
  ``f``; barrier knob ``b``; regular only.
* ``ubis``: kube-default, plus tasks that do not fit run opportunistically on harvestable capacity (UBIS Alg. 1),
  evicted under sustained contention.
* ``stowage``: tetris + DRF per pool + each queue's ``jobOrder`` (FIFO, SRTF, FSP) + harvesting, with OPERA's
  short/long classifier for ``auto`` jobs and the contention policy.
* ``stowage-regular``: ``stowage`` with harvesting off (every task regular): what harvesting adds is
  ``stowage`` ÷ this, measured in one run.
* ``stowage-ungated``: ``stowage`` without OPERA's classifier: every ``auto`` task that finds no regular room may
  harvest (issue #32 §5 measures what the classifier's gate buys).

kube-scheduler places pods one at a time in queue order, and a pod that fits nowhere does not block the pods behind
it; the kube-like presets check fit on every Kubernetes resource except disk and network bandwidth, which are not
Kubernetes resources, so those presets over-allocate bandwidth (Tetris §5.3.1). Ties between equal node scores are
broken at random (kube's ``selectHost``), from the run's seeded generator. Not modelled:
``percentageOfNodesToScore`` (every feasible node is scored).

The kube-like ``Score`` plugins live in ``stowage.sim.scoring``; every Stowage formula comes from ``stowage.policy``
(the code the cluster runs).
"""

from __future__ import annotations

from collections.abc import Callable

from stowage.errors import InvalidInput
from stowage.sim.baselines import KubePreset
from stowage.sim.packing import PackingPreset
from stowage.sim.preset import Preset

__all__ = ["DEFAULT_PRESETS", "DIAGNOSTIC", "PRESETS", "Preset", "make"]


_FACTORIES: dict[str, Callable[[], Preset]] = {
    "kube-default": lambda: KubePreset("kube-default", "least"),
    "binpack": lambda: KubePreset("binpack", "most"),
    "drf": lambda: KubePreset("drf", "least", order="drf"),
    "load-aware": lambda: KubePreset("load-aware", "tlp"),
    "tetris": lambda: PackingPreset("tetris", harvesting=False, job_order=False, classifier=False, guard=False),
    "ubis": lambda: KubePreset("ubis", "least", harvesting=True),
    "stowage": lambda: PackingPreset("stowage", harvesting=True, job_order=True, classifier=True, guard=True),
    "stowage-regular": lambda: PackingPreset("stowage-regular", harvesting=False, job_order=True, classifier=True,
                                             guard=True),
    "stowage-ungated": lambda: PackingPreset("stowage-ungated", harvesting=True, job_order=True, classifier=False,
                                             guard=True),
}

PRESETS: tuple[str, ...] = tuple(_FACTORIES)
"""The preset names, in report order."""

DIAGNOSTIC: tuple[str, ...] = ("stowage-regular", "stowage-ungated")
"""Presets that take ``stowage`` apart (run when asked for by name): not schedulers a user would choose."""

DEFAULT_PRESETS: tuple[str, ...] = tuple(p for p in PRESETS if p not in DIAGNOSTIC)
"""What ``stowage simulate`` compares when no ``--policy`` is given."""


def make(name: str) -> Preset:
    """A fresh preset instance by name (one per run: presets hold run state)."""
    if name not in _FACTORIES:
        raise InvalidInput("policy", name, f"one of {', '.join(PRESETS)}")
    return _FACTORIES[name]()
