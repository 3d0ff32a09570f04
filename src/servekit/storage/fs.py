"""One small façade over fsspec so the layers above never touch a filesystem API directly."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import fsspec

from servekit.errors import ConfigError


class Storage:
    """Lists, reads and materialises paths given as plain paths or fsspec URIs.

    Runtimes need local files (onnxruntime and joblib open paths), so remote version directories are
    copied once into ``cache_dir`` and the local copy is handed to the runtime.
    """

    def __init__(self, cache_dir: str | None = None) -> None:
        self._cache_dir = Path(cache_dir or os.path.join(tempfile.gettempdir(), "servekit-cache"))

    @staticmethod
    def _resolve(uri: str) -> tuple[Any, str]:
        try:
            fs, path = fsspec.core.url_to_fs(uri)
        except (ImportError, ValueError) as exc:
            scheme = uri.split("://", 1)[0]
            raise ConfigError(
                f"cannot open {uri!r}: no filesystem for scheme {scheme!r} ({exc}); "
                f"install the matching fsspec package (e.g. servekit[s3] for s3://)"
            ) from exc
        return fs, path

    @staticmethod
    def is_local(uri: str) -> bool:
        return "://" not in uri or uri.startswith("file://")

    def join(self, uri: str, *parts: str) -> str:
        return "/".join([uri.rstrip("/"), *parts])

    def list_dirs(self, uri: str) -> list[str]:
        """Names (not paths) of the immediate subdirectories; [] if ``uri`` does not exist."""
        fs, path = self._resolve(uri)
        try:
            entries = fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(os.path.basename(str(e["name"]).rstrip("/")) for e in entries if e.get("type") == "directory")

    def exists(self, uri: str) -> bool:
        fs, path = self._resolve(uri)
        return bool(fs.exists(path))

    def local_path(self, uri: str) -> Path:
        """A local directory or file holding ``uri``'s content (the path itself when already local)."""
        if self.is_local(uri):
            return Path(uri.removeprefix("file://"))
        fs, path = self._resolve(uri)
        digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
        target = self._cache_dir / digest
        if not target.exists():
            tmp = Path(tempfile.mkdtemp(dir=self._ensure_cache()))
            fs.get(path, str(tmp / "data"), recursive=True)
            os.replace(tmp / "data", target)
        return target

    def _ensure_cache(self) -> Path:
        self._cache_dir.mkdir(parents=True, exist_ok=True)
        return self._cache_dir
