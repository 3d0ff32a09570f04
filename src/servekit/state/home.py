"""Where the servekit home is: the one place that knows ``SERVEKIT_HOME`` and the ``./.servekit`` default.

Library code never reads the environment: the CLI passes its flag and ``os.environ`` in, once, at the edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

HOME_ENV = "SERVEKIT_HOME"
DEFAULT_HOME = ".servekit"


def resolve_home(explicit: str | Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The servekit home as an absolute path: ``explicit`` (a ``--home`` flag), else ``env[SERVEKIT_HOME]``
    when set and not empty, else ``./.servekit`` (relative to the working directory)."""
    if explicit is not None and str(explicit):
        return Path(explicit).expanduser().resolve()
    from_env = (env or {}).get(HOME_ENV, "")
    return Path(from_env or DEFAULT_HOME).expanduser().resolve()
