"""A model's ``ModelDataUrl`` resolved to a local servekit model directory (``<base>/<int version>/...``).

What a ``ModelDataUrl`` may be:

- a local directory, a ``file://`` URL, or any URI :mod:`servekit.storage` opens (``s3://`` with the ``s3`` extra;
  the caller hands in a storage configured for its endpoint, e.g. ``AWS_ENDPOINT_URL``: nothing here reads the
  environment);
- naming either a **directory** or a **tar archive** (SageMaker's ``model.tar.gz``; gzip, bzip2, xz or none).

**Versions.** A directory (or an archive's top level) whose visible entries (names not starting with ``.``) are all
folders named by integers is already a model base (``1/``, ``2/``: TF Serving's layout) and is served as it is.
Anything else (``model.onnx``; ``model.joblib`` and ``code/inference.py``; a ``saved_model.pb``) is **one version's
files and becomes version 1**: an archive is unpacked into ``<cache>/archives/<sha256>/1/``, and a local directory
is linked as ``<cache>/dirs/<key>/1`` (a symbolic link; servekit's storage follows it) instead of copied. A mix (a
``1/`` beside ``code/``) is one version's files too.

**Archives** are unpacked once into a cache keyed by the archive's SHA-256: resolvers of the same archive, in
threads or processes, take a lock file and the first unpacks into a temporary directory that it renames into place
when whole; the others find it there. Unpacking reads the archive twice: the first pass checks every entry and
writes nothing, the second extracts (through tarfile's ``data`` filter as a second guard). Refused, each with an
:class:`ArtifactError` naming the entry and the rule (it becomes the endpoint's ``FailureReason``):

- a path that is absolute, holds ``..``, goes through a symbolic link of the archive, or appears twice;
- a symbolic link whose target is absolute, leaves the archive or passes through another link;
- a hard link to anything but a regular file that comes earlier in the archive;
- device files, FIFOs and any other special entry;
- more than ``max_entries`` entries, a file over ``max_file_bytes``, more than ``max_total_bytes`` in all, or (past
  ``ratio_floor_bytes``) more than ``max_ratio`` times the archive's own size; sizes are the ones the headers declare
  (a sparse file counts at its full size), and the decompressed stream itself is capped too (a huge header is a
  bomb as well).
"""

from __future__ import annotations

import bz2
import fcntl
import gzip
import hashlib
import lzma
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from servekit.errors import ConfigError
from servekit.storage import ObjectStorage, Storage

_CHUNK = 1024 * 1024
_VERSION = re.compile(r"[0-9]+")
_HEADER_SLACK = 16 * 1024**2  # decompressed bytes beyond the entries' data (plus 1 KiB an entry): headers, padding


class ArtifactError(Exception):
    """A ``ModelDataUrl`` that cannot become a model directory; the message says which entry broke which rule."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class ArchiveLimits:
    """What an archive may unpack to. The defaults admit large models and refuse bombs."""

    max_total_bytes: int = 64 * 1024**3
    max_entries: int = 100_000
    max_file_bytes: int = 32 * 1024**3
    max_ratio: float = 200.0  # uncompressed / compressed; weights compress little, zeros compress 1000x
    ratio_floor_bytes: int = 256 * 1024**2  # below this total, no archive is refused for its ratio


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    base_path: Path  # a servekit model base: <base_path>/<int version>/...
    digest: str  # the archive's SHA-256 ("" for a directory)
    unpacked: bool  # this call built it: unpacked the archive, downloaded the folder (False: found in the cache)


class ArtifactResolver:
    """Resolves ``ModelDataUrl`` values into model directories under ``cache_dir``."""

    def __init__(
        self,
        cache_dir: Path,
        *,
        storage: ObjectStorage | None = None,
        limits: ArchiveLimits | None = None,
        local_objects: Callable[[str], Path | None] = lambda _: None,
    ) -> None:
        """``local_objects``: an ``s3://`` URI of servekit up's own S3 store as the file or folder holding it (read
        from disk, no HTTP hop); None for a bucket elsewhere."""
        self._local_objects = local_objects
        self._cache = Path(cache_dir)
        self._storage = storage if storage is not None else Storage()
        self._limits = limits or ArchiveLimits()

    def resolve(self, model_data_url: str) -> ResolvedModel:
        if not isinstance(model_data_url, str) or not model_data_url.strip():
            raise ArtifactError("ModelDataUrl is empty")
        local = _local_path(model_data_url)
        if local is None and model_data_url.startswith("s3://"):
            local = self._local_objects(model_data_url)
        if local is not None:
            if local.is_dir():
                return self._local_dir(local, model_data_url)
            if local.is_file():
                return self._archive(local, model_data_url)
            raise ArtifactError(f"ModelDataUrl {model_data_url}: no such file or directory")
        return self._remote(model_data_url)

    # ---- directories ---------------------------------------------------------------------------------------------

    def _local_dir(self, folder: Path, url: str) -> ResolvedModel:
        folder = folder.resolve()
        visible = [e for e in os.scandir(folder) if not e.name.startswith(".")]
        if not visible:
            raise ArtifactError(f"ModelDataUrl {url}: the directory is empty")
        if all(_VERSION.fullmatch(e.name) and e.is_dir() for e in visible):
            return ResolvedModel(folder, "", False)
        key = hashlib.sha256(os.fsencode(folder)).hexdigest()[:32]
        base = self._cache / "dirs" / key
        link = base / "1"
        if link.is_symlink() and os.readlink(link) == str(folder):
            return ResolvedModel(base, "", False)
        base.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=base.parent, prefix=f".{key}."))
        os.symlink(folder, tmp / "1", target_is_directory=True)
        if not _publish(tmp, base):  # another resolver linked it first: the same link
            shutil.rmtree(tmp)
        return ResolvedModel(base, "", False)

    def _remote(self, url: str) -> ResolvedModel:
        try:
            is_dir = self._storage.isdir(url)
            if not is_dir and not self._storage.exists(url):
                raise ArtifactError(f"ModelDataUrl {url}: no such object")
            if is_dir:
                return self._remote_dir(url)
            info = self._storage.info(url)
        except ConfigError as exc:  # no filesystem for the scheme: the message says which extra to install
            raise ArtifactError(f"ModelDataUrl {url}: {exc}") from None
        except OSError as exc:
            raise ArtifactError(f"ModelDataUrl {url}: cannot read it: {exc}") from None
        index = None
        if info.stamp:  # an unchanged object (same size and ETag or mtime) maps to the digest it had before
            index = self._cache / "remote-index" / _key(url, str(info.size), info.stamp)
            known = index.read_text().strip() if index.is_file() else ""
            if known and (self._cache / "archives" / known).is_dir():
                return ResolvedModel(self._cache / "archives" / known, known, False)
        downloads = self._cache / "downloads"
        downloads.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=downloads, suffix=".tar")
        try:
            with os.fdopen(fd, "wb") as out, self._storage.open(url, "rb") as src:
                shutil.copyfileobj(src, out, _CHUNK)
            resolved = self._archive(Path(name), url)
        except OSError as exc:
            raise ArtifactError(f"ModelDataUrl {url}: cannot download it: {exc}") from None
        finally:
            Path(name).unlink(missing_ok=True)
        if index is not None:
            index.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(index, resolved.digest)
        return resolved

    def _remote_dir(self, url: str) -> ResolvedModel:
        files = self._storage.list(url, recursive=True)
        for entry in files:
            _check_relative(entry.key, f"ModelDataUrl {url}: object {entry.key!r}")
        if not files:
            raise ArtifactError(f"ModelDataUrl {url}: the directory is empty")
        listing = "\n".join(f"{e.key}\0{e.size}\0{e.stamp}" for e in files)
        digest = _key(url.rstrip("/"), listing)
        final = self._cache / "remote" / digest
        tops = {e.key.split("/", 1)[0]: "/" in e.key for e in files if not e.key.startswith(".")}
        prefix = "" if _is_base_layout(tops) else "1"

        def download(dest: Path) -> None:
            for entry in files:
                target = dest / prefix / entry.key
                target.parent.mkdir(parents=True, exist_ok=True)
                with self._storage.open(entry.uri, "rb") as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out, _CHUNK)

        try:
            made = self._once(final, download)
        except OSError as exc:
            raise ArtifactError(f"ModelDataUrl {url}: cannot download it: {exc}") from None
        return ResolvedModel(final, "", made)

    # ---- archives ------------------------------------------------------------------------------------------------

    def _archive(self, path: Path, url: str) -> ResolvedModel:
        digest = _sha256(path)
        final = self._cache / "archives" / digest
        made = self._once(final, lambda dest: unpack_archive(path, dest, self._limits, name=url))
        return ResolvedModel(final, digest, made)

    def _once(self, final: Path, make: Callable[[Path], None]) -> bool:
        return build_once(final, make)


def build_once(final: Path, make: Callable[[Path], None]) -> bool:
    """Build the folder ``final`` with ``make(temp_dir)`` unless it exists; one builder at a time (a lock file beside
    it), published by renaming a whole temporary directory. True when this call built it."""
    if final.is_dir():
        return False
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.parent / f"{final.name}.lock"):
        if final.is_dir():
            return False
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
        try:
            make(tmp)
            if not _publish(tmp, final):
                raise ArtifactError(f"{final} appeared while it was being built")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return True


# ---- unpacking -------------------------------------------------------------------------------------------------


def unpack_archive(archive: Path, dest: Path, limits: ArchiveLimits, *, name: str = "") -> None:
    """Check every entry of the tar ``archive`` (writing nothing), then extract it into ``dest`` (as ``dest/1`` when
    it holds one version's files). :class:`ArtifactError` names the first entry that breaks a rule."""
    where = f"model archive {name or archive.name}"
    size = archive.stat().st_size
    try:
        tops = _check_entries(archive, size, limits, where)
        target = dest if _is_base_layout(tops) else dest / "1"
        target.mkdir(parents=True, exist_ok=True)
        with _open_tar(archive, size, limits, where) as tar:
            data_filter = getattr(tarfile, "data_filter", None)  # Python 3.11.4+: a second guard
            if data_filter is not None:
                tar.extractall(target, filter=data_filter)
            else:  # pragma: no cover - older Pythons rely on the checks above
                tar.extractall(target)
    except ArtifactError:
        raise
    except tarfile.FilterError as exc:
        raise ArtifactError(f"{where}: entry refused by tarfile's data filter: {exc}") from None
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile) as exc:
        raise ArtifactError(f"{where}: not a readable tar archive ({type(exc).__name__}: {exc})") from None
    except OSError as exc:  # bz2's corrupt stream is an OSError too
        raise ArtifactError(f"{where}: cannot unpack it: {exc}") from None


def _check_entries(archive: Path, size: int, limits: ArchiveLimits, where: str) -> dict[str, bool]:
    """The first pass: every rule of the module docstring. Returns the top-level names (and whether each is a
    folder) for the layout decision."""
    seen: dict[str, str] = {}  # normalised path -> kind ("file", "dir", "symlink", "hardlink")
    links: list[tuple[str, str]] = []  # symlinks: (path, target), checked once every link is known
    total = 0
    with _open_tar(archive, size, limits, where) as tar:
        for count, member in enumerate(tar, start=1):
            entry = member.name
            if count > limits.max_entries:
                raise ArtifactError(f"{where}: entry {entry!r} is refused: more than {limits.max_entries} entries")
            path = _check_relative(entry, f"{where}: entry {entry!r}")
            kind = _kind(member, where)
            if path == ".":
                if kind != "dir":
                    raise ArtifactError(f"{where}: entry {entry!r} is refused: the archive root must be a folder")
                continue
            if path in seen and not (kind == "dir" and seen[path] == "dir"):
                raise ArtifactError(f"{where}: entry {entry!r} is refused: the path appears twice in the archive")
            if member.size > limits.max_file_bytes:
                raise ArtifactError(
                    f"{where}: entry {entry!r} is refused: {member.size} bytes is over the single-file limit of "
                    f"{limits.max_file_bytes} bytes"
                )
            total += member.size
            if total > limits.max_total_bytes:
                raise ArtifactError(
                    f"{where}: entry {entry!r} is refused: the archive unpacks to more than "
                    f"{limits.max_total_bytes} bytes"
                )
            if total > limits.ratio_floor_bytes and total > limits.max_ratio * max(size, 1):
                raise ArtifactError(
                    f"{where}: entry {entry!r} is refused: the archive unpacks to more than {limits.max_ratio:g} "
                    f"times its compressed size of {size} bytes (compression ratio limit)"
                )
            if kind == "symlink":
                if member.linkname.startswith("/") or os.path.isabs(member.linkname):
                    raise ArtifactError(
                        f"{where}: entry {entry!r} is refused: a symbolic link to the absolute path {member.linkname!r}"
                    )
                links.append((path, member.linkname))
            elif kind == "hardlink":
                target = posixpath.normpath(member.linkname) if member.linkname else ""
                if seen.get(target) != "file":
                    raise ArtifactError(
                        f"{where}: entry {entry!r} is refused: a hard link to {member.linkname!r}, which is not a "
                        "regular file earlier in the archive (hard links may not point outside it)"
                    )
            seen[path] = kind
    symlinks = {p for p, k in seen.items() if k == "symlink"}
    for path in seen:
        through = _through_link(path.split("/")[:-1], symlinks)
        if through:
            raise ArtifactError(
                f"{where}: entry {path!r} is refused: its path goes through the symbolic link {through!r}"
            )
    for path, target in links:
        _check_link_target(path, target, symlinks, where)
    if not any(k != "dir" for k in seen.values()):
        raise ArtifactError(f"{where}: the archive holds no files")
    tops: dict[str, bool] = {}
    for path, kind in seen.items():
        top, _, rest = path.partition("/")
        if not top.startswith("."):
            tops[top] = tops.get(top, False) or bool(rest) or kind == "dir"
    return tops


def _kind(member: tarfile.TarInfo, where: str) -> str:
    if member.isreg():  # regular, contiguous and sparse files
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    what = (
        "a FIFO"
        if member.isfifo()
        else "a device file"
        if member.ischr() or member.isblk()
        else f"a special entry (type {member.type!r})"
    )
    raise ArtifactError(f"{where}: entry {member.name!r} is refused: it is {what}; only files, folders and links")


def _check_relative(name: str, what: str) -> str:
    """``name`` normalised ('.' for the root) when it is relative and stays inside; ArtifactError otherwise."""
    if not name or "\x00" in name:
        raise ArtifactError(f"{what} is refused: an empty or NUL-bearing path")
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) or os.path.isabs(name):
        raise ArtifactError(f"{what} is refused: an absolute path leaves the model directory")
    if ".." in name.replace("\\", "/").split("/"):
        raise ArtifactError(f"{what} is refused: '..' in its path leaves the model directory")
    return posixpath.normpath(name)


def _through_link(parts: list[str], symlinks: set[str]) -> str:
    """The first folder on the path ``parts`` that is a symbolic link of the archive ('' when none)."""
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if prefix in symlinks:
            return prefix
    return ""


def _check_link_target(path: str, target: str, symlinks: set[str], where: str) -> None:
    """Walk ``target`` from the link's folder, lexically: it may not climb above the root or pass through a link
    (a link inside pointing at ``.`` would make ``..`` from below it leave the archive)."""
    stack = path.split("/")[:-1]
    parts = [p for p in target.split("/") if p not in ("", ".")]
    for part in parts:
        if "/".join(stack) in symlinks:
            raise ArtifactError(
                f"{where}: entry {path!r} is refused: its link target {target!r} passes through the symbolic link "
                f"{'/'.join(stack)!r}"
            )
        if part == "..":
            if not stack:
                raise ArtifactError(
                    f"{where}: entry {path!r} is refused: a symbolic link to {target!r} points outside the archive"
                )
            stack.pop()
        else:
            stack.append(part)


def _is_base_layout(tops: dict[str, bool]) -> bool:
    """Visible top-level entries that are all integer-named folders: already ``<base>/<version>/``."""
    return bool(tops) and all(_VERSION.fullmatch(name) and is_dir for name, is_dir in tops.items())


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class _Capped:
    """A decompressed stream that refuses to yield more than ``limit`` bytes (headers are data too)."""

    def __init__(self, raw: _Reader, limit: int, where: str) -> None:
        self._raw = raw
        self._limit = limit
        self._where = where
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._raw.read(size)
        self.read_bytes += len(chunk)
        if self.read_bytes > self._limit:
            raise ArtifactError(
                f"{self._where}: refused: its decompressed stream passes {self._limit} bytes (total size limit)"
            )
        return chunk


@contextmanager
def _open_tar(archive: Path, size: int, limits: ArchiveLimits, where: str) -> Iterator[tarfile.TarFile]:
    with open(archive, "rb") as fh:
        magic = fh.read(6)
    raw: _Reader
    if magic.startswith(b"\x1f\x8b"):
        raw = gzip.open(archive, "rb")
    elif magic.startswith(b"BZh"):
        raw = bz2.open(archive, "rb")
    elif magic.startswith(b"\xfd7zXZ\x00"):
        raw = lzma.open(archive, "rb")
    else:
        raw = open(archive, "rb")
    cap = min(limits.max_total_bytes, max(limits.ratio_floor_bytes, int(limits.max_ratio * max(size, 1))))
    capped = _Capped(raw, cap + _HEADER_SLACK + 1024 * limits.max_entries, where)
    try:
        with tarfile.open(fileobj=capped, mode="r|") as tar:  # type: ignore[call-overload]
            yield tar
    finally:
        raw.close()


# ---- files -------------------------------------------------------------------------------------------------------


def _local_path(url: str) -> Path | None:
    if url.startswith("file://"):
        rest = url.removeprefix("file://")
        rest = rest.removeprefix("localhost") if rest.startswith("localhost/") else rest
        if not rest.startswith("/"):
            raise ArtifactError(f"ModelDataUrl {url}: a file:// URL needs an absolute path (file:///path)")
        return Path(rest)
    if "://" in url:
        return None
    return Path(url).expanduser()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode(errors="surrogateescape")).hexdigest()[:32]


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive lock on ``lock_path``: between processes, and between threads (each opens its own file)."""
    with open(lock_path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _publish(tmp: Path, final: Path) -> bool:
    """Rename the whole directory ``tmp`` to ``final``; False when ``final`` already exists."""
    try:
        os.rename(tmp, final)
    except OSError:
        if final.exists():
            return False
        raise
    return True


def _write_atomic(path: Path, text: str) -> None:
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(name, path)
