"""Tests of pinned artefacts, deploy executors, verification and drills."""
