"""Telling people: Slack messages built from alerts, a durable outbox, and its sender.

The reconciler and the daemon enqueue messages in the transaction that records what caused
them (:mod:`rolloutd.alerts.enqueue`); the leader's sender job delivers them
(:mod:`rolloutd.alerts.sender`) at Slack's pace, surviving Slack outages and crashes.
"""
