"""kube-scheduler's and Trimaran's node scores, as upstream computes them, for the baselines.

These are the *alternatives* Stowage is compared against, not Stowage policy, so they live with the simulator. Each
scores one pod against every node and returns integers in ``0..100`` (``framework.MaxNodeScore``), like upstream:

* ``NodeResourcesFit`` ``LeastAllocated`` (k8s ``least_allocated.go``): per resource ``(cap − req)·100 / cap`` with
  integer division (0 when the pod would not fit or ``cap`` is 0), then the weighted mean ``Σ s_r·w_r / Σ w_r`` with
  upstream's default weights (cpu and memory, 1 each), also integer. ``req`` = the node's requested + the pod's
  request, with upstream's non-zero defaults (100 millicores, 200 MiB) for pods that request nothing.
* ``MostAllocated`` (``most_allocated.go``): ``min(req, cap)·100 / cap``.
* ``NodeResourcesBalancedAllocation`` (``balanced_allocation.go``, k8s ≥ 1.26): ``(1 − std(f))·100`` truncated,
  ``f_r = min(req_r / cap_r, 1)`` over cpu and memory, population standard deviation; requests as given (no non-zero
  default).
* Trimaran ``TargetLoadPacking`` (scheduler-plugins ``pkg/trimaran/targetloadpacking``): predicted CPU % =
  ``100·(measured + missing + pod)/cap`` where ``pod`` is the pod's CPU limit, else its request ×
  ``requests_multiplier`` (1.5); ``missing`` adds the same prediction for pods bound within the last metrics
  interval (60 s). Score ``round((100 − T)·p/T + T)`` for ``p ≤ T``, ``round(T·(100 − p)/(100 − T))`` above, 0
  beyond 100 %. Target ``T`` = 40.

CPU is in cores here and converted to millicores, memory in bytes, so the integer arithmetic matches upstream's
``int64`` milli-CPU and byte counts.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["DEFAULT_MEMORY_REQUEST", "DEFAULT_MILLI_CPU_REQUEST", "MAX_NODE_SCORE", "TLP_METRICS_INTERVAL_S",
           "TLP_REQUESTS_MULTIPLIER", "TLP_TARGET_PERCENT", "plugin_scores", "target_load_packing", "to_units"]

MAX_NODE_SCORE = 100
DEFAULT_MILLI_CPU_REQUEST = 100.0  # k8s pkg/scheduler/util: DefaultMilliCPURequest
DEFAULT_MEMORY_REQUEST = 200.0 * 1024 * 1024  # DefaultMemoryRequest, 200 MiB
TLP_TARGET_PERCENT = 40.0  # TargetLoadPackingArgs.targetUtilization default
TLP_REQUESTS_MULTIPLIER = 1.5  # TargetLoadPackingArgs.defaultRequestsMultiplier default
TLP_METRICS_INTERVAL_S = 60.0  # metricsAgentReportingIntervalSeconds


_UNITS = np.array([1000.0, 1.0])  # [cores, bytes] → [milli-CPU, bytes]
_NON_ZERO = np.array([DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST])


def to_units(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """[cpu cores, memory bytes] (last axis) → [milli-CPU, bytes] as whole numbers (upstream's int64)."""
    return np.rint(np.asarray(values, dtype=np.float64) * _UNITS)


def plugin_scores(req_u: NDArray[np.float64], cap_u: NDArray[np.float64], pod_u: NDArray[np.float64], strategy: str
                  ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(fit strategy score, BalancedAllocation score) of a pod per node, as upstream computes them.

    In upstream units (``to_units``): req_u, cap_u (N, 2) [milli-CPU, bytes]; pod_u (2,). ``strategy``:
    ``"least"`` (LeastAllocated) or ``"most"`` (MostAllocated), both with equal weights. Both plugins
    in one pass: a placement asks for them on one node at a time, where numpy's calls cost more than the math.
    """
    safe = np.where(cap_u > 0, cap_u, 1.0)
    req = req_u + np.where(pod_u > 0, pod_u, _NON_ZERO)  # upstream's non-zero defaults for the fit plugins
    if strategy == "least":
        per = np.where((cap_u > 0) & (req <= cap_u), np.floor((cap_u - req) * MAX_NODE_SCORE / safe), 0.0)
    else:  # a request above capacity counts as capacity
        per = np.where(cap_u > 0, np.floor(np.minimum(req, cap_u) * MAX_NODE_SCORE / safe), 0.0)
    fit = np.floor((per[:, 0] + per[:, 1]) / 2.0)
    # Two resources: the population std of the fractions is |f₁ − f₂| / 2; requests as given.
    frac = np.where(cap_u > 0, np.minimum((req_u + pod_u) / safe, 1.0), 0.0)
    return fit, np.floor((1.0 - np.abs(frac[:, 0] - frac[:, 1]) / 2.0) * MAX_NODE_SCORE)


def target_load_packing(
    measured_cpu: NDArray[np.float64],
    missing_cpu: NDArray[np.float64],
    capacity_cpu: NDArray[np.float64],
    pod_cpu_request: float,
) -> NDArray[np.int64]:
    """TargetLoadPacking score per node; all CPU amounts in cores, shapes (N,).

    ``missing_cpu`` is already the predicted usage of recently bound pods
    (request × ``TLP_REQUESTS_MULTIPLIER`` each); the pod's own prediction is added here.
    """
    pod = pod_cpu_request * TLP_REQUESTS_MULTIPLIER if pod_cpu_request > 0 else 1.0  # defaultRequests: 1 core
    safe = np.where(capacity_cpu > 0, capacity_cpu, 1.0)
    predicted = np.where(capacity_cpu > 0, 100.0 * (measured_cpu + missing_cpu + pod) / safe, 0.0)
    t = TLP_TARGET_PERCENT
    below = np.floor((100.0 - t) * predicted / t + t + 0.5)  # Go math.Round: half away from 0
    above = np.floor(t * (100.0 - predicted) / (100.0 - t) + 0.5)
    score = np.where(predicted > t, np.where(predicted > 100.0, 0.0, above), below)
    return score.astype(np.int64)
