"""The node monitor DaemonSet: sample cgroup usage, publish metrics, evict under contention.

Imported as ``stowage.node_monitor``. Shaped as sample → summarise → publish: only
sampling reads the filesystem and only publishing talks to the API server.
"""
