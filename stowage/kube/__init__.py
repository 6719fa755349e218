"""Thin adapters over the Kubernetes API shared by the cluster components.

``credentials`` finds the API server and the identity (kubeconfig, exec plugins, service
account); ``api`` is the one client (REST verbs on paths, raw JSON via orjson, no ``kubernetes``
import); ``informer`` keeps a consumer in step by list + watch; ``cluster``, ``records`` and
``recent`` turn API objects into compact records for the policy. Nothing here decides anything.
"""
