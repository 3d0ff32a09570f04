"""The storage API every layer above uses: one protocol, implemented on fsspec (:class:`Storage`) and in memory
(``servekit.testing.InMemoryStorage``).

Addresses are plain paths or URIs (``file://``, ``memory://``, ``s3://`` with its extra). A listing names its
entries by ``key``, the path below the listed root with ``/`` separators, and by ``uri``, the root as the caller
spelled it joined with the key, so a plain path stays plain and ``s3://bucket`` stays ``s3://bucket``.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class FileInfo:
    uri: str  # where to open it, in the caller's spelling
    key: str  # its path below the listed root ('/'-separated); for a listed file, its base name
    size: int
    is_dir: bool = False
    # What changes when the object is rewritten or its metadata changes (mtime, ctime, mode and inode on local
    # disks; ETag or last-modified on object stores); "" when the store reports none. Not part of equality.
    stamp: str = field(default="", compare=False)


def join(uri: str, *parts: str) -> str:
    """``uri`` and ``parts`` joined with single ``/`` (empty parts skipped)."""
    rest = [p.strip("/") for p in parts if p.strip("/")]
    base = uri.rstrip("/")
    if not rest:
        return base or uri
    if not base:
        return "/" * uri.startswith("/") + "/".join(rest)
    return "/".join([base, *rest])


@runtime_checkable
class ObjectStorage(Protocol):
    """What callers may do with files and objects. Nothing here deletes anything a caller did not name."""

    def open(self, uri: str, mode: str = "rb", *, compression: str | None = None) -> IO[bytes]:
        """A binary file object; ``mode`` is ``rb``, ``wb`` or ``ab``; ``compression`` ``gzip`` (or None).
        Writing creates the parent folders. A missing file raises :class:`FileNotFoundError`."""
        ...

    def put(self, uri: str, data: bytes) -> None:
        """Write ``data`` as the whole content of ``uri``, atomically: readers see the old or the new content."""
        ...

    def put_file(self, local_path: str | Path, uri: str) -> None:
        """Copy (upload) the local file ``local_path`` to ``uri``."""
        ...

    def get(self, uri: str) -> bytes:
        """The whole content of ``uri`` (:class:`FileNotFoundError` when missing)."""
        ...

    def info(self, uri: str) -> FileInfo:
        """Size and kind of ``uri`` (:class:`FileNotFoundError` when missing); the key is its base name."""
        ...

    def list(self, uri: str, *, recursive: bool = False) -> builtins.list[FileInfo]:
        """Entries under the folder ``uri``, sorted by key: its files and folders, or with ``recursive`` every
        file below it (no folders). A file lists as itself. :class:`FileNotFoundError` when ``uri`` is missing."""
        ...

    def list_dirs(self, uri: str) -> builtins.list[str]:
        """Names (not paths) of the immediate subfolders; [] if ``uri`` does not exist."""
        ...

    def exists(self, uri: str) -> bool: ...

    def isdir(self, uri: str) -> bool: ...

    def makedirs(self, uri: str) -> None:
        """Create the folder and its parents (nothing to do where folders are implicit, or if it exists)."""
        ...

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing ``dst``: atomic on local disks (publish a file written under a
        temporary name); a copy then delete on object stores."""
        ...

    def remove(self, uri: str) -> None:
        """Delete the file ``uri`` (:class:`FileNotFoundError` when missing)."""
        ...

    def join(self, uri: str, *parts: str) -> str: ...
