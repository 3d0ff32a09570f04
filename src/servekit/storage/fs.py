"""The storage API on fsspec: plain paths and ``file://`` built in, ``memory://``, ``s3://`` etc. with their extras.

The only module in servekit that imports fsspec (capture will move onto it too); the layers above use
:class:`Storage` (or any :class:`~servekit.storage.api.ObjectStorage`) and never a filesystem API directly.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import os
import posixpath
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import fsspec

from servekit.errors import ConfigError
from servekit.storage.api import FileInfo, ObjectStorage, join

_MODES = ("rb", "wb", "ab")


class Storage:
    """Lists, reads, writes and materialises paths given as plain paths or fsspec URIs.

    Runtimes need local files (onnxruntime and joblib open paths), so remote version directories are
    copied once into ``cache_dir`` and the local copy is handed to the runtime.
    """

    def __init__(self, cache_dir: str | None = None, options: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """``options`` per scheme go to that scheme's filesystem, e.g. ``{"s3": {"endpoint_url": ...}}`` for an
        S3-compatible store (the caller reads the environment; this class never does)."""
        self._cache_dir = Path(cache_dir or os.path.join(tempfile.gettempdir(), "servekit-cache"))
        self._options = {k: dict(v) for k, v in (options or {}).items()}

    def _resolve(self, uri: str) -> tuple[Any, str]:
        scheme = uri.split("://", 1)[0] if "://" in uri else "file"
        try:
            fs, path = fsspec.core.url_to_fs(uri, **self._options.get(scheme, {}))
        except (ImportError, ValueError) as exc:
            scheme = uri.split("://", 1)[0]
            raise ConfigError(
                f"cannot open {uri!r}: no filesystem for scheme {scheme!r} ({exc}); "
                f"install the matching fsspec package (s3fs, a dependency of servekit, for s3://)"
            ) from exc
        return fs, str(path)

    @staticmethod
    def is_local(uri: str) -> bool:
        return "://" not in uri or uri.startswith("file://")

    def join(self, uri: str, *parts: str) -> str:
        return join(uri, *parts)

    # ---- reading -------------------------------------------------------------------------------------------

    def open(self, uri: str, mode: str = "rb", *, compression: str | None = None) -> IO[bytes]:
        if mode not in _MODES:
            raise ValueError(f"storage opens files in binary modes {', '.join(_MODES)}, not {mode!r}")
        fs, path = self._resolve(uri)
        if mode != "rb":
            parent = posixpath.dirname(path.rstrip("/"))
            if parent:
                fs.makedirs(parent, exist_ok=True)
        f: IO[bytes] = fs.open(path, mode, compression=compression)
        return f

    def get(self, uri: str) -> bytes:
        fs, path = self._resolve(uri)
        return bytes(fs.cat_file(path))

    def info(self, uri: str) -> FileInfo:
        fs, path = self._resolve(uri)
        entry = fs.info(path)
        return FileInfo(
            uri, posixpath.basename(path.rstrip("/")), int(entry.get("size") or 0), _is_dir(entry), _stamp(entry)
        )

    def list(self, uri: str, *, recursive: bool = False) -> builtins.list[FileInfo]:
        """Local listings follow symbolic links to folders (a link that leads back into a folder it is in raises
        ``OSError`` with ``errno.ELOOP``); a link to a file lists as a file of the target's size."""
        fs, path = self._resolve(uri)
        top = self.info(uri)
        if not top.is_dir:
            return [top]
        root = path.rstrip("/") + "/"
        if recursive and self.is_local(uri):
            files = [(p[len(root) :], st) for p, st in _walk_local(root.rstrip("/") or "/")]
            return sorted(
                (FileInfo(join(uri, k), k, st.st_size, False, _stat_stamp(st)) for k, st in files), key=lambda e: e.key
            )
        found: dict[str, dict[str, Any]] = (
            fs.find(path, detail=True) if recursive else {str(e["name"]): e for e in fs.ls(path, detail=True)}
        )
        out = []
        for name, entry in found.items():
            name = str(name).rstrip("/")
            key = name[len(root) :] if name.startswith(root) else posixpath.basename(name)
            if not key or (recursive and _is_dir(entry)):
                continue
            out.append(FileInfo(join(uri, key), key, int(entry.get("size") or 0), _is_dir(entry), _stamp(entry)))
        return sorted(out, key=lambda e: e.key)

    def list_dirs(self, uri: str) -> builtins.list[str]:
        """Names (not paths) of the immediate subdirectories; [] if ``uri`` does not exist."""
        fs, path = self._resolve(uri)
        try:
            entries = fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(os.path.basename(str(e["name"]).rstrip("/")) for e in entries if _is_dir(e))

    def exists(self, uri: str) -> bool:
        fs, path = self._resolve(uri)
        return bool(fs.exists(path))

    def isdir(self, uri: str) -> bool:
        fs, path = self._resolve(uri)
        return bool(fs.isdir(path))

    # ---- writing -------------------------------------------------------------------------------------------

    def put(self, uri: str, data: bytes) -> None:
        fs, path = self._resolve(uri)
        if self.is_local(uri):  # a temporary name in the same folder, then an atomic rename
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, target)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            return
        fs.pipe_file(path, data)  # an object store's PUT is atomic

    def put_file(self, local_path: str | Path, uri: str) -> None:
        fs, path = self._resolve(uri)
        parent = posixpath.dirname(path.rstrip("/"))
        if parent:
            fs.makedirs(parent, exist_ok=True)
        fs.put_file(str(local_path), path)

    def makedirs(self, uri: str) -> None:
        fs, path = self._resolve(uri)
        fs.makedirs(path, exist_ok=True)

    def rename(self, src: str, dst: str) -> None:
        fs, src_path = self._resolve(src)
        dst_fs, dst_path = self._resolve(dst)
        if self.is_local(src) and self.is_local(dst):
            os.replace(src_path, dst_path)
            return
        if type(fs) is not type(dst_fs):
            raise ValueError(f"cannot rename across filesystems: {src} -> {dst}")
        fs.mv(src_path, dst_path)

    def remove(self, uri: str) -> None:
        fs, path = self._resolve(uri)
        if not fs.exists(path):
            raise FileNotFoundError(uri)
        fs.rm_file(path)

    # ---- runtimes --------------------------------------------------------------------------------------------

    def local_path(self, uri: str) -> Path:
        """A local directory or file holding ``uri``'s content (the path itself when already local)."""
        if self.is_local(uri):
            return Path(uri.removeprefix("file://"))
        fs, path = self._resolve(uri)
        # Keyed by the content's names, sizes and change stamps too: a version fixed in place (a failed load
        # retried) is copied again instead of reusing the broken copy.
        listing = "\n".join(f"{e.key}\0{e.size}\0{e.stamp}" for e in self.list(uri, recursive=True))
        digest = hashlib.sha256(f"{uri}\n{listing}".encode(errors="surrogateescape")).hexdigest()[:16]
        target = self._cache_dir / digest
        if not target.exists():
            tmp = Path(tempfile.mkdtemp(dir=self._ensure_cache()))
            fs.get(path, str(tmp / "data"), recursive=True)
            os.replace(tmp / "data", target)
        return target

    def _ensure_cache(self) -> Path:
        self._cache_dir.mkdir(parents=True, exist_ok=True)
        return self._cache_dir


def _is_dir(entry: dict[str, Any]) -> bool:
    if entry.get("islink") and entry.get("type") == "other":  # fsspec's local listing: a link, not followed
        return os.path.isdir(str(entry["name"]))
    return entry.get("type") == "directory"


def _walk_local(top: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every file below the local folder ``top`` with its (followed) stat, through symbolic links to folders. A
    link back to a folder it lies in, or a link that resolves to itself, raises ``OSError(ELOOP)`` naming it."""

    def visit(folder: str, ancestors: frozenset[tuple[int, int]]) -> Iterator[tuple[str, os.stat_result]]:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            try:
                st = entry.stat()  # follows links
            except FileNotFoundError:  # a dangling link: listed, as fsspec lists it; opening it fails clearly
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise OSError(errno.ELOOP, "symbolic link loop", entry.path) from None
                raise
            if not stat.S_ISDIR(st.st_mode):
                yield entry.path, st
                continue
            node = (st.st_dev, st.st_ino)
            if node in ancestors:
                back = os.path.realpath(entry.path)
                raise OSError(errno.ELOOP, f"symbolic link loop (leads back to {back})", entry.path)
            yield from visit(entry.path, ancestors | {node})

    first = os.stat(top)
    yield from visit(top, frozenset({(first.st_dev, first.st_ino)}))


def _stat_stamp(st: os.stat_result) -> str:
    return f"mtime={st.st_mtime_ns};created={st.st_ctime_ns};mode={st.st_mode};ino={st.st_ino}"


# fsspec's change markers: local (ctime is "created" on Linux; mode and inode catch chmod and replacement),
# S3, GCS, Azure and HTTP spellings.
_STAMP_KEYS = ("mtime", "created", "mode", "ino", "ETag", "etag", "LastModified", "last_modified", "updated")


def _stamp(entry: dict[str, Any]) -> str:
    return ";".join(f"{k}={entry[k]}" for k in _STAMP_KEYS if entry.get(k) is not None)


def _conforms(storage: Storage) -> ObjectStorage:
    return storage  # mypy checks the class against the protocol here
