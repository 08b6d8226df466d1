"""The long-running service: :mod:`.service` (the main loop, lifecycle, signals, reload and
clock steps), :mod:`.leadership` (the lease), :mod:`.jobs` (the tick jobs and the alert
sender), the NOTIFY :mod:`.listener`, the :mod:`.health` endpoint, systemd's :mod:`.sdnotify`
and the daemon's own :mod:`.metrics`. It drives ``rolloutd.reconcile``; nothing below it
imports it."""
