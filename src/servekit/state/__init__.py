"""Servekit's state: the SQLite database under the servekit home (WAL), its migrations, one repository per
aggregate. Files (artifacts, captures, reports) live in ``servekit.storage``, not here."""

from servekit.state.connection import connect, transaction
from servekit.state.database import DB_NAME, StateDB, database_path
from servekit.state.home import DEFAULT_HOME, HOME_ENV, resolve_home
from servekit.state.migrations import Migration, SchemaTooNew, StateError, migrate, schema_versions
from servekit.state.schema import MIGRATIONS
from servekit.state.transform_jobs import TransformJobRow, TransformJobs, TransformObjectRow

__all__ = [
    "DB_NAME",
    "DEFAULT_HOME",
    "HOME_ENV",
    "MIGRATIONS",
    "Migration",
    "SchemaTooNew",
    "StateDB",
    "StateError",
    "TransformJobRow",
    "TransformJobs",
    "TransformObjectRow",
    "connect",
    "database_path",
    "migrate",
    "resolve_home",
    "schema_versions",
    "transaction",
]
