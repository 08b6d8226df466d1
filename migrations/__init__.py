"""rolloutd's alembic migrations: a package, so that revisions can import :mod:`migrations.ddl`."""
