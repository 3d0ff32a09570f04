"""Least privilege for a step's storage: the handle a step is given reads only under its read prefixes (and its
own output prefix), writes only new files under its own ``<root>/<pipeline>/<run>/<step>/`` prefix, and never
deletes, renames or overwrites. Each refusal is a :class:`StepAccessDenied` naming the step, the path and the rule.

Paths are compared after normalising them: local paths (and ``file://``) made absolute with symbolic links
resolved, so neither ``..`` nor a link leads out of a prefix; other URIs with ``..`` are refused outright. A
prefix covers itself and what lies below it on a ``/`` boundary (``/data/a`` does not cover ``/data/ab``).

What this guards is the handle: a step's own code could still call ``open()`` directly. Under real IAM the same
rules hold for everything (``servekit pipeline policy``).
"""

from __future__ import annotations

import builtins
import os
import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from servekit.services.pipelines.errors import StepAccessDenied
from servekit.storage import FileInfo, ObjectStorage, join


def normalize(uri: str) -> str:
    """``uri`` in the one spelling prefixes are compared in (see the module's docstring)."""
    if "://" not in uri or uri.startswith("file://"):
        return os.path.realpath(os.path.abspath(uri.removeprefix("file://")))
    scheme, _, rest = uri.partition("://")
    if ".." in rest.split("/"):
        raise ValueError(f"{uri!r}: '..' is not allowed in a storage URI")
    return f"{scheme}://{posixpath.normpath(rest) if rest else rest}".rstrip("/")


def covers(prefix: str, uri: str) -> bool:
    """Whether the normalised ``uri`` lies at or under the normalised ``prefix``."""
    prefix = prefix.rstrip("/") or "/"
    return uri == prefix or uri.startswith(prefix if prefix.endswith("/") else prefix + "/")


class GuardedStorage:
    """An :class:`ObjectStorage` for one step (see the module's docstring)."""

    def __init__(self, inner: ObjectStorage, step: str, reads: Sequence[str], write_prefix: str) -> None:
        self._inner = inner
        self.step = step
        self.write_prefix = normalize(write_prefix)
        self.read_prefixes = tuple(dict.fromkeys([*(normalize(r) for r in reads), self.write_prefix]))

    # ---- the rules -------------------------------------------------------------------------------------------

    def _path(self, uri: str) -> str:
        try:
            return normalize(uri)
        except ValueError as exc:
            raise StepAccessDenied(self.step, uri, f"use a path with '..' ({exc})") from None

    def check_read(self, uri: str) -> None:
        path = self._path(uri)
        if not any(covers(p, path) for p in self.read_prefixes):
            shown = ", ".join(self.read_prefixes)
            raise StepAccessDenied(self.step, uri, f"read outside its read prefixes [{shown}]")

    def check_write(self, uri: str) -> None:
        path = self._path(uri)
        if not covers(self.write_prefix, path):
            raise StepAccessDenied(self.step, uri, f"write outside its own prefix {self.write_prefix}")
        if self._inner.exists(uri):
            raise StepAccessDenied(self.step, uri, "overwrite an existing file (artifacts are append-only)")

    # ---- reading ---------------------------------------------------------------------------------------------

    def open(self, uri: str, mode: str = "rb", *, compression: str | None = None) -> IO[bytes]:
        if mode == "rb":
            self.check_read(uri)
        else:
            self.check_write(uri)  # "ab" too: only a new file, so nothing is changed after it was written
        return self._inner.open(uri, mode, compression=compression)

    def get(self, uri: str) -> bytes:
        self.check_read(uri)
        return self._inner.get(uri)

    def info(self, uri: str) -> FileInfo:
        self.check_read(uri)
        return self._inner.info(uri)

    def list(self, uri: str, *, recursive: bool = False) -> builtins.list[FileInfo]:
        self.check_read(uri)
        return self._inner.list(uri, recursive=recursive)

    def list_dirs(self, uri: str) -> builtins.list[str]:
        self.check_read(uri)
        return self._inner.list_dirs(uri)

    def exists(self, uri: str) -> bool:
        self.check_read(uri)
        return self._inner.exists(uri)

    def isdir(self, uri: str) -> bool:
        self.check_read(uri)
        return self._inner.isdir(uri)

    def local_path(self, uri: str) -> Path:
        """A local file or folder holding ``uri``'s content, for libraries that open paths (joblib, onnxruntime);
        a remote one is copied into the storage's cache first."""
        self.check_read(uri)
        local = getattr(self._inner, "local_path", None)
        if local is not None:
            return Path(local(uri))
        return Path(uri.removeprefix("file://"))

    # ---- writing ---------------------------------------------------------------------------------------------

    def put(self, uri: str, data: bytes) -> None:
        self.check_write(uri)
        self._inner.put(uri, data)

    def put_file(self, local_path: str | Path, uri: str) -> None:
        self.check_write(uri)
        self._inner.put_file(local_path, uri)

    def makedirs(self, uri: str) -> None:
        path = self._path(uri)
        if not covers(self.write_prefix, path):
            raise StepAccessDenied(self.step, uri, f"write outside its own prefix {self.write_prefix}")
        self._inner.makedirs(uri)

    def rename(self, src: str, dst: str) -> None:
        raise StepAccessDenied(
            self.step, src, "rename (artifacts are append-only: write each file once, under its final name)"
        )

    def remove(self, uri: str) -> None:
        raise StepAccessDenied(self.step, uri, "delete anything (artifacts are append-only)")

    def join(self, uri: str, *parts: str) -> str:
        return join(uri, *parts)


def _conforms(storage: GuardedStorage) -> ObjectStorage:
    return storage  # mypy checks the class against the protocol here
