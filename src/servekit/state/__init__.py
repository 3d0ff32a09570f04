"""Servekit's state: the SQLite database under the servekit home (WAL) or in PostgreSQL, its connection and
migrations, paging. Each service's repository lives in the service's package (``servekit.services.<service>``), and
``servekit.services.database.StateDB`` opens the database with all of them. Files (artifacts, captures, reports) live in
``servekit.storage``, not here."""

from servekit.state.connection import connect, transaction
from servekit.state.database import DB_NAME, Database, database_path
from servekit.state.home import DEFAULT_HOME, HOME_ENV, resolve_home
from servekit.state.migrations import Migration, SchemaTooNew, StateError, migrate, schema_versions

__all__ = [
    "DB_NAME",
    "DEFAULT_HOME",
    "HOME_ENV",
    "Database",
    "Migration",
    "SchemaTooNew",
    "StateError",
    "connect",
    "database_path",
    "migrate",
    "resolve_home",
    "schema_versions",
    "transaction",
]
