"""Trace-driven discrete-event simulator: trace readers, virtual clock, replay loop.

Drives the very same ``stowage.policy`` code as the cluster components. No
Kubernetes, no network.
"""
