"""Turning gate specs and metrics into verdicts. Every gate kind is judged here, nowhere else."""
