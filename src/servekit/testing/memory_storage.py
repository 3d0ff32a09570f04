"""A storage fake: the :class:`~servekit.storage.ObjectStorage` API over a dict, for tests that need no disk.

Addresses are taken as given (any scheme or none); ``a/b/`` and ``a/b`` name the same thing. Folders are implicit
(every prefix of a file) or made with :meth:`makedirs`. Writes become visible when their file is closed, as on
an object store. Not shared between processes.
"""

from __future__ import annotations

import builtins
import gzip
import io
import posixpath
import tempfile
import threading
from pathlib import Path
from typing import IO, Any, cast

from servekit.storage.api import FileInfo, ObjectStorage, join


def _norm(uri: str) -> str:
    scheme, sep, rest = uri.rpartition("://")
    while "//" in rest:
        rest = rest.replace("//", "/")
    rest = rest.rstrip("/") or rest[:1]
    return f"{scheme}{sep}{rest}"


class _Writer(io.BytesIO):
    def __init__(self, on_close: Any, initial: bytes = b"") -> None:
        super().__init__()
        self.write(initial)
        self._on_close = on_close

    def close(self) -> None:
        if not self.closed:
            self._on_close(self.getvalue())
        super().close()


class _GzipWriter(gzip.GzipFile):
    """Closing it closes (and so publishes) the buffer underneath."""

    def __init__(self, raw: _Writer) -> None:
        super().__init__(fileobj=raw, mode="wb")
        self._raw = raw

    def close(self) -> None:
        super().close()
        self._raw.close()


class InMemoryStorage:
    """The storage API in memory; ``files`` maps each normalised address to its bytes."""

    def __init__(self, cache_dir: str | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self._dirs: set[str] = set()
        self._lock = threading.Lock()
        self._cache_dir = cache_dir

    # ---- helpers -----------------------------------------------------------------------------------------------

    def _children(self, uri: str) -> builtins.list[str]:
        root = _norm(uri).rstrip("/") + "/"
        return [k for k in [*self.files, *self._dirs] if k.startswith(root) and k != root]

    def _store(self, uri: str, data: bytes) -> None:
        with self._lock:
            if self.isdir(uri):
                raise IsADirectoryError(uri)
            self.files[_norm(uri)] = data

    def join(self, uri: str, *parts: str) -> str:
        return join(uri, *parts)

    @staticmethod
    def is_local(uri: str) -> bool:
        return False

    # ---- reading -----------------------------------------------------------------------------------------------

    def open(self, uri: str, mode: str = "rb", *, compression: str | None = None) -> IO[bytes]:
        if compression not in (None, "gzip"):
            raise ValueError(f"unsupported compression {compression!r}")
        if mode == "rb":
            raw: IO[bytes] = io.BytesIO(self.get(uri))
            return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")) if compression else raw
        if mode not in ("wb", "ab"):
            raise ValueError(f"storage opens files in binary modes rb, wb, ab, not {mode!r}")
        if self.isdir(uri):
            raise IsADirectoryError(uri)
        initial = self.files.get(_norm(uri), b"") if mode == "ab" and not compression else b""
        writer = _Writer(lambda data: self._store(uri, data), initial)
        return cast(IO[bytes], _GzipWriter(writer) if compression else writer)

    def get(self, uri: str) -> bytes:
        try:
            return self.files[_norm(uri)]
        except KeyError:
            raise FileNotFoundError(uri) from None

    def info(self, uri: str) -> FileInfo:
        key = _norm(uri)
        name = posixpath.basename(key.rpartition("://")[2].rstrip("/"))
        if key in self.files:
            return FileInfo(uri, name, len(self.files[key]))
        if self.isdir(uri):
            return FileInfo(uri, name, 0, True)
        raise FileNotFoundError(uri)

    def list(self, uri: str, *, recursive: bool = False) -> builtins.list[FileInfo]:
        top = self.info(uri)
        if not top.is_dir:
            return [top]
        root = _norm(uri).rstrip("/") + "/"
        entries: dict[str, FileInfo] = {}
        for name in self._children(uri):
            key = name[len(root) :]
            if recursive:
                if name in self.files:
                    entries[key] = FileInfo(join(uri, key), key, len(self.files[name]))
                continue
            first, _, rest = key.partition("/")
            if rest or name in self._dirs:
                entries[first] = FileInfo(join(uri, first), first, 0, True)
            else:
                entries[first] = FileInfo(join(uri, first), first, len(self.files[name]))
        return [entries[k] for k in sorted(entries)]

    def list_dirs(self, uri: str) -> builtins.list[str]:
        try:
            return [e.key for e in self.list(uri) if e.is_dir]
        except FileNotFoundError:
            return []

    def exists(self, uri: str) -> bool:
        return _norm(uri) in self.files or self.isdir(uri)

    def isdir(self, uri: str) -> bool:
        key = _norm(uri)
        return key in self._dirs or (key not in self.files and bool(self._children(uri)))

    # ---- writing -----------------------------------------------------------------------------------------------

    def put(self, uri: str, data: bytes) -> None:
        self._store(uri, bytes(data))

    def put_file(self, local_path: str | Path, uri: str) -> None:
        self._store(uri, Path(local_path).read_bytes())

    def makedirs(self, uri: str) -> None:
        if _norm(uri) in self.files:
            raise FileExistsError(uri)
        self._dirs.add(_norm(uri))

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            data = self.get(src)
            del self.files[_norm(src)]
            self.files[_norm(dst)] = data

    def remove(self, uri: str) -> None:
        with self._lock:
            if _norm(uri) not in self.files:
                raise FileNotFoundError(uri)
            del self.files[_norm(uri)]

    # ---- runtimes ----------------------------------------------------------------------------------------------

    def local_path(self, uri: str) -> Path:
        """A local copy of the file or folder ``uri`` (runtimes open paths), made under ``cache_dir``."""
        target = Path(tempfile.mkdtemp(dir=self._cache_dir)) / "data"
        entries = self.list(uri, recursive=True)
        if len(entries) == 1 and not self.isdir(uri):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.get(uri))
            return target
        for e in entries:
            dest = target / e.key
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(self.get(e.uri))
        target.mkdir(parents=True, exist_ok=True)
        return target


def _conforms(storage: InMemoryStorage) -> ObjectStorage:
    return storage  # mypy checks the fake against the protocol here
