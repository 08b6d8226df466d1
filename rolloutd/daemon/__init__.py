"""The long-running service: :mod:`.service` (leadership, the tick jobs, the lifecycle and
signals), the NOTIFY :mod:`.listener`, the :mod:`.health` endpoint, systemd's :mod:`.sdnotify`
and the daemon's own :mod:`.metrics`. It drives ``rolloutd.reconcile``; nothing below it
imports it."""
