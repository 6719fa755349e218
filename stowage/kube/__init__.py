"""Thin adapters over the Kubernetes client shared by the cluster components (informers, events).

Nothing here decides anything: it turns API objects into compact records for
the policy and turns decisions into API calls.
"""
