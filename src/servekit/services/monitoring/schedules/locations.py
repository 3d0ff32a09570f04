"""Where a monitoring execution reads and writes: local paths and ``file://`` URIs, and ``s3://`` URIs of servekit
up's own S3 store (:data:`ObjectPaths`, the store's resolver the composition root hands in).

Where an execution's files go: a local folder (a path or ``file://`` URI), or an ``s3://`` URI of servekit
up's own S3 store. The monitor writes only local files (it runs on this machine), so for an ``s3://`` output an
execution writes into a folder under the plane's home that mirrors the URI, and its files are then put into the store
under the URI, keeping SageMaker's layout, as objects (with ETags, so S3's GetObject and ListObjects, and the SDK's
``latest_monitoring_statistics()``, see them)."""

from __future__ import annotations

import mimetypes
import os
from collections.abc import Callable
from pathlib import Path


class JobSpecError(ValueError):
    """A job definition servekit cannot run; the API answers ValidationException with this message."""


# An ``s3://`` URI of servekit up's own S3 store as the file or folder holding it (None for another bucket): the
# composition root hands in the store's resolver; without one no ``s3://`` URI is local.
ObjectPaths = Callable[[str], Path | None]
# (an s3:// URI of an object in servekit up's own store, a local file, its Content-Type) -> the object's ETag
PutObject = Callable[[str, Path, str], str]


def no_objects(_uri: str) -> Path | None:
    return None


def local_path(uri: str, where: str) -> str:
    """A local path from a path or ``file://`` URI; :class:`JobSpecError` for a remote one."""
    if uri.startswith("file://"):
        return uri[len("file://") :]
    if uri.startswith("/"):
        return uri
    raise JobSpecError(
        f"{where} must be a local path or file:// URI (servekit runs monitoring on this machine), not {uri!r}."
    )


def locate(uri: str, objects: ObjectPaths) -> Path | None:
    """The local file or folder a path, ``file://`` URI or ``s3://`` URI of servekit up's own store names (None when
    it does not exist or is elsewhere)."""
    if uri.startswith("s3://"):
        return objects(uri)
    if uri.startswith(("file://", "/")):
        path = Path(local_path(uri, "uri"))
        return path if path.exists() else None
    return None


def store_folder(uri: str, objects: ObjectPaths) -> Path | None:
    """The folder of the store an ``s3://`` prefix of its own bucket is kept in, whether or not it exists yet (an
    endpoint that has not captured anything yet); None for another bucket."""
    segments = [s for s in uri.removeprefix("s3://").split("/") if s]
    if not segments or any(s in (".", "..") for s in segments):
        return None
    root = objects(f"s3://{segments[0]}/")
    return None if root is None else root.joinpath(*segments[1:])


def bucket_of(uri: str) -> str:
    return uri.removeprefix("s3://").split("/", 1)[0]


def own_bucket(uri: str, objects: ObjectPaths) -> bool:
    """Whether an ``s3://`` URI's bucket is servekit up's own store's (its folder exists)."""
    bucket = bucket_of(uri)
    return bool(bucket) and objects(f"s3://{bucket}/") is not None


def output_location(uri: str, where: str, objects: ObjectPaths, scratch: Path | None) -> tuple[str, str]:
    """``(local folder, s3 URI or "")`` for a MonitoringOutput's ``S3Uri``: the local folder itself, or, for an
    ``s3://`` URI of servekit up's own store, ``<scratch>/<bucket>/<key>`` and the URI its files go to."""
    if not uri.startswith("s3://"):
        return local_path(uri, where), ""
    if scratch is None or not own_bucket(uri, objects):
        raise JobSpecError(
            f"{where} {uri!r} is not in servekit up's own S3 store (no such bucket): servekit writes monitoring "
            "outputs on this machine: to a local path, a file:// URI or an s3:// URI of its own store."
        )
    segments = [s for s in uri.removeprefix("s3://").split("/") if s]
    if any(s in (".", "..") for s in segments):
        raise JobSpecError(f"{where} {uri!r}: a key with . or .. segments names no folder.")
    return str(scratch.joinpath(*segments)), "s3://" + "/".join(segments)


def published_uri(local_root: str, uri_root: str, folder: str) -> str:
    """The URI an execution's ``folder`` (under ``local_root``) is known by: under ``uri_root`` when its files go to
    the store, else ``file://<folder>``."""
    if not uri_root:
        return f"file://{folder}"
    rel = os.path.relpath(folder, local_root)
    return uri_root.rstrip("/") + ("" if rel == "." else "/" + rel.replace(os.sep, "/"))


def publish(folder: Path, uri: str, put: PutObject, skip: frozenset[str] = frozenset()) -> int:
    """Put every file under ``folder`` (but the top-level names in ``skip``) into the store under ``uri`` at its
    relative path; how many."""
    count = 0
    for current, dirs, files in os.walk(folder):
        here = Path(current)
        if here == folder:
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
        for name in sorted(files):
            path = here / name
            rel = path.relative_to(folder).as_posix()
            put(f"{uri.rstrip('/')}/{rel}", path, content_type(path))
            count += 1
    return count


def content_type(path: Path) -> str:
    """What an output file is stored as (JSON reports, the log as text)."""
    if path.suffix in (".log", ".prom"):
        return "text/plain"
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"
