"""Where rollouts live: the tables, the sessions, and the only queries that touch them.

Nothing here is imported by ``rolloutd`` eagerly: the CLI imports the submodule it needs
(``db`` to connect, ``queries`` to read and write), and alembic only when upgrading.
"""
