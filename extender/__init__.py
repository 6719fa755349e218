"""The kube-scheduler extender (FastAPI): filter, prioritize and preempt for ``stowage-scheduler``.

Imported as ``stowage.extender``. Routes parse, snapshot, call ``stowage.policy`` and
serialise; no arithmetic lives in a route.
"""
