"""The Stowage operator (kopf): Job and Queue CRDs, admission webhooks, the dispatcher.

Imported as ``stowage.operator`` (never as ``operator``: that is the standard library).
Handlers are glue: read the spec, call a pure planner in ``stowage.policy``, write the patch.
"""
