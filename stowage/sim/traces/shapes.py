"""Node shapes the readers use, and the ``--nodes`` / ``--node-shape`` overrides.

Each shape is a stated machine profile with its source:

- :data:`TETRIS_DEPLOYMENT`: Tetris §5.1, the 250-server cluster: 32 cores, 96 GB memory,
  8 × 1 TB 7200 RPM disks, 10 Gbps NIC. Disk bandwidth is ours: 100 MB/s per disk
  (sequential 7200 RPM), so 800 MB/s.
- :data:`FB_2009_PROFILE`: Tetris §5.1, the trace-driven simulator's "same machine profile
  as the original [Facebook] cluster": 12 cores, 32 GB, 4 disks at 50 MB/s each, 1 Gbps NIC.
- :data:`OPENB_G2`: the most common node model in Alibaba's openb node list (549 of 1,523):
  96 cores, 384 GiB, 8 GPUs.

GB in the papers is read as GiB for memory (how YARN and Kubernetes count it) and MB/s as
10^6 bytes/s for bandwidth (how disks and NICs are rated).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from stowage.errors import InvalidInput
from stowage.resources import CORE_RESOURCES, CPU, DISK, MEMORY, NETWORK, ResourceVector, parse_quantity
from stowage.sim.workload import NodeSpec

__all__ = [
    "FB_2009_PROFILE",
    "GPU",
    "OPENB_G2",
    "TETRIS_DEPLOYMENT",
    "fit_demand",
    "is_extended_resource",
    "parse_node_shape",
    "resize_nodes",
    "uniform_nodes",
]

#: The Kubernetes extended-resource name the openb reader gives GPUs.
GPU = "nvidia.com/gpu"

_GIB = 2**30
TETRIS_DEPLOYMENT = ResourceVector({CPU: 32, MEMORY: 96 * _GIB, DISK: 8 * 100e6, NETWORK: 10e9 / 8})
FB_2009_PROFILE = ResourceVector({CPU: 12, MEMORY: 32 * _GIB, DISK: 4 * 50e6, NETWORK: 1e9 / 8})
OPENB_G2 = ResourceVector({CPU: 96, MEMORY: 384 * _GIB, GPU: 8})

# A Kubernetes extended resource: a DNS-subdomain prefix, a slash, a name (e.g. nvidia.com/gpu).
_EXTENDED = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_SHAPE_ALLOWED = (
    "comma-separated name=quantity pairs, names cpu, memory, disk, network or an extended resource "
    "such as nvidia.com/gpu, e.g. cpu=16,memory=64Gi,disk=200M,network=125M"
)


def is_extended_resource(name: str) -> bool:
    """True for a domain-prefixed Kubernetes extended-resource name such as ``nvidia.com/gpu``."""
    return bool(_EXTENDED.match(name)) and not name.startswith("kubernetes.io/")


def fit_demand(amounts: Mapping[str, float], capacity: Mapping[str, float]) -> ResourceVector:
    """A modelled task demand made runnable on ``capacity``: resources the node lacks are dropped
    (a ``--node-shape`` without disk means disk is not modelled), the rest capped at one node."""
    return ResourceVector({r: min(v, capacity[r]) for r, v in amounts.items() if capacity.get(r, 0) > 0})


def uniform_nodes(count: int, capacity: ResourceVector, prefix: str = "node") -> tuple[NodeSpec, ...]:
    """``count`` identical nodes named ``<prefix>-1`` … ``<prefix>-<count>``."""
    if count < 1:
        raise InvalidInput("nodes", count, "a positive number of nodes")
    return tuple(NodeSpec(f"{prefix}-{i}", capacity) for i in range(1, count + 1))


def parse_node_shape(text: str, field: str = "--node-shape") -> ResourceVector:
    """Parse ``cpu=16,memory=64Gi,disk=200M,network=125M`` into a capacity vector.

    ``cpu`` and ``memory`` are required; disk and network (bytes/s) and extended resources
    are optional. Raises :class:`InvalidInput` naming ``field`` and the bad part.
    """
    amounts: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name or not value.strip():
            raise InvalidInput(field, part, _SHAPE_ALLOWED)
        if name not in CORE_RESOURCES and not is_extended_resource(name):
            raise InvalidInput(f"{field} {name}", name, "cpu, memory, disk, network or an extended resource")
        if name in amounts:
            raise InvalidInput(f"{field} {name}", part, "each resource once")
        amounts[name] = parse_quantity(value.strip(), f"{field} {name}")
    missing = [r for r in (CPU, MEMORY) if amounts.get(r, 0) <= 0]
    if missing:
        raise InvalidInput(field, text, f"a positive {' and '.join(missing)}; {_SHAPE_ALLOWED}")
    return ResourceVector(amounts)


def resize_nodes(
    nodes: Sequence[NodeSpec], count: int | None = None, shape: Mapping[str, float] | None = None
) -> tuple[NodeSpec, ...]:
    """Apply ``--nodes`` and ``--node-shape`` to a workload's own node list.

    - shape only: every node keeps its name and gets ``shape``;
    - count only: nodes ``node-1..node-<count>``, the i-th with the shape of original node
      ``i mod len(nodes)`` (a heterogeneous list keeps its mix, in order);
    - both: ``count`` nodes ``node-1..node-<count>`` of ``shape``.
    """
    if count is None and shape is None:
        return tuple(nodes)
    if count is not None and count < 1:
        raise InvalidInput("--nodes", count, "a positive number of nodes")
    capacity = ResourceVector(shape) if shape is not None else None
    if count is None:
        assert capacity is not None
        return tuple(NodeSpec(n.name, capacity, n.harvest) for n in nodes)
    if capacity is not None or not nodes:
        if capacity is None:
            raise InvalidInput("--nodes", count, "a --node-shape too: the workload has no nodes to copy")
        return uniform_nodes(count, capacity)
    return tuple(
        NodeSpec(f"node-{i + 1}", nodes[i % len(nodes)].capacity, nodes[i % len(nodes)].harvest)
        for i in range(count)
    )
