"""Pinned engine artefacts, the executors that put them on replicas, and staging drills.

"Roll back" means a known-good state: the previous engine configuration and the exact model
files, verified by digest, on every canary replica, by a path exercised in staging first.
``artefacts`` hashes and compares files, ``catalog`` keeps pinned sets in the database,
``executors`` (``command``, ``triton``) deploy a set to one replica, ``verify`` checks a
replica's health and digests afterwards, and ``drills`` exercises the whole path.
"""
