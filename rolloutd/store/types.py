"""The store's types, named for the code above it without importing the ORM.

A transaction is a :data:`Session` (or, for the fast read-only paths of the command line, a
:data:`Connection`), and a factory of sessions :data:`Sessions`; code outside the store
holds them only to hand them back to store verbs. Import them under ``TYPE_CHECKING``: they
exist for the type checker alone, so importing this module costs nothing at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine
    from sqlalchemy.orm import Session, sessionmaker

    Sessions: TypeAlias = sessionmaker[Session]

__all__ = ["Connection", "Engine", "Session", "Sessions"]
