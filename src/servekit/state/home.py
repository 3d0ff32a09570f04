"""Where the servekit home is: the one place that knows ``SERVEKIT_HOME`` and the ``./.servekit`` default (and
``SERVEKIT_DATABASE_URL``, the state database when it is not the home's SQLite file).

Library code never reads the environment: the CLI passes its flag and ``os.environ`` in, once, at the edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

HOME_ENV = "SERVEKIT_HOME"
DEFAULT_HOME = ".servekit"
DATABASE_URL_ENV = "SERVEKIT_DATABASE_URL"


def resolve_home(explicit: str | Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The servekit home as an absolute path: ``explicit`` (a ``--home`` flag), else ``env[SERVEKIT_HOME]``
    when set and not empty, else ``./.servekit`` (relative to the working directory)."""
    if explicit is not None and str(explicit):
        return Path(explicit).expanduser().resolve()
    from_env = (env or {}).get(HOME_ENV, "")
    return Path(from_env or DEFAULT_HOME).expanduser().resolve()


def resolve_database_url(explicit: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The state database's URL: ``explicit`` (a ``--database-url`` flag), else ``env[SERVEKIT_DATABASE_URL]``
    when set and not empty, else None (the home's SQLite file)."""
    return explicit or (env or {}).get(DATABASE_URL_ENV) or None
