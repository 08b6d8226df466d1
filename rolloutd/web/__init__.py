"""The read-only web view and the rollout report: pages rendered from the store."""
