"""Stowage: a batch scheduling add-on for Kubernetes.

The pure core lives here (resources, labels, config, ``policy``, ``sim``); the
cluster-facing parts are ``stowage.operator``, ``stowage.extender`` and
``stowage.node_monitor``. Each part's charter is in its own ``__init__``.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
