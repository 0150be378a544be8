"""The stand-in's clocks, in one place: every module reads them from here at the moment it waits, so a test may
shorten one with ``monkeypatch.setattr(timing, NAME, value)``."""

GRACE_SECONDS = 5.0
"""A pod's termination grace period: SIGTERM, then SIGKILL after it."""
POD_RESYNC_SECONDS = 1.0
"""The kubelet's next sync of a pod after a failed image pull or a missing volume (10 to 15 s on a node)."""
IMAGE_BACKOFF_SECONDS = (10.0, 300.0)
"""The kubelet's image pull back-off: the first wait after a failed pull, doubling up to the second."""
MEMORY_POLL_SECONDS = 0.1
"""How often the kubelet without a memory cgroup reads its containers' memory use."""
RECORD_SECONDS = 0.02
"""How often the stand-in records its objects' changes for watches (a real API server records each write)."""
BOOKMARK_SECONDS = 1.0
"""How often a watch that asked for bookmarks gets one (a real API server: about once a minute)."""
LOG_FOLLOW_SECONDS = 0.05
"""How often a followed log is read for new lines."""
CONTROL_SECONDS = 0.5
"""The controllers reconcile at least this often, else on every change."""
