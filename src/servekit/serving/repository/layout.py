"""TF Serving's layout: ``<base_path>/<integer version>/...``; anything else under base_path is ignored."""

from __future__ import annotations

import logging

from servekit.storage import Storage

log = logging.getLogger(__name__)


def parse_version(name: str) -> int | None:
    """The version number of a directory name, or None when it is not a non-negative integer."""
    if not (name.isascii() and name.isdigit()):
        return None
    return int(name)


class VersionLister:
    """Lists the integer version directories of a model, logging each ignored name once."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._warned: set[str] = set()

    def versions(self, base_path: str) -> dict[int, str]:
        found: dict[int, str] = {}
        for name in self._storage.list_dirs(base_path):
            version = parse_version(name)
            if version is None:
                key = f"{base_path}/{name}"
                if key not in self._warned:
                    self._warned.add(key)
                    log.info("ignoring %s: version directories must be named by an integer", key)
                continue
            found[version] = self._storage.join(base_path, name)
        return found
