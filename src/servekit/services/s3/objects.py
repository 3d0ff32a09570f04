"""``s3://`` URIs for servekit's own components (jobs' channels and outputs): the plane's own buckets straight from
and to disk (hard links in, a durable commit out: no HTTP hop, no copy per byte on the way in), any other bucket
through :mod:`servekit.storage` (an external S3-compatible store)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from servekit.services.s3.store import ObjectInfo, ObjectStore, fsync_dir
from servekit.storage import ObjectStorage

_CHUNK = 1 << 20


def split_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket")
    return bucket, key


class Objects:
    def __init__(self, store: ObjectStore, storage: ObjectStorage | None = None) -> None:
        self.store = store
        self.storage = storage

    def local(self, uri: str) -> bool:
        """Whether the URI's bucket is the plane's own."""
        return self.store.bucket_created(split_uri(uri)[0]) is not None

    def read(self, uri: str) -> bytes:
        """One object's bytes (a pipeline's property file, a definition in S3); FileNotFoundError when absent."""
        bucket, key = split_uri(uri)
        if self.local(uri):
            path = self.store.path(bucket, key)
            if path is None:
                raise FileNotFoundError(f"{uri}: no such object")
            return path.read_bytes()
        if self.storage is None:
            raise FileNotFoundError(f"{uri}: the bucket is not servekit's and no external S3 is configured")
        with self.storage.open(uri, "rb") as src:
            data: bytes = src.read()
            return data

    def content_type(self, uri: str) -> str | None:
        """The Content-Type an object was stored with (the plane's own buckets; None elsewhere or when absent)."""
        bucket, key = split_uri(uri)
        info = self.store.get(bucket, key) if self.local(uri) else None
        return None if info is None else info.content_type

    def fetch(self, uri: str, dest: Path) -> int:
        """The object, or every object under the prefix, at ``uri`` as files under the folder ``dest`` (paths
        relative to the prefix; an object named exactly keeps its base name); how many files."""
        bucket, key = split_uri(uri)
        dest.mkdir(parents=True, exist_ok=True)
        if self.local(uri):
            return self._link_local(bucket, key, dest)
        if self.storage is None:
            raise FileNotFoundError(f"{uri}: the bucket is not servekit's and no external S3 is configured")
        count = 0
        entries = [e for e in self.storage.list(uri, recursive=True) if not e.is_dir]
        for entry in entries:
            target = _inside(dest, entry.key or os.path.basename(key))
            target.parent.mkdir(parents=True, exist_ok=True)
            with self.storage.open(entry.uri, "rb") as src, target.open("wb") as out:
                shutil.copyfileobj(src, out, _CHUNK)
            count += 1
        if not count:
            raise FileNotFoundError(f"{uri}: no such object or prefix")
        return count

    def _link_local(self, bucket: str, key: str, dest: Path) -> int:
        exact = self.store.get(bucket, key) if key and not key.endswith("/") else None
        infos = [exact] if exact is not None else self.store.objects(bucket, key, "", 1_000_000)
        count = 0
        for info in infos:
            if info is None:
                continue
            rel = info.key[len(key) :].lstrip("/") if exact is None else os.path.basename(info.key)
            if not rel:  # a folder marker (a key ending in /)
                continue
            source = self.store.path(bucket, info.key)
            if source is None:
                continue
            target = _inside(dest, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)  # objects are replaced by rename, never changed in place: a link is a copy
            except OSError:  # another file system
                shutil.copyfile(source, target)
            count += 1
        if not count:
            raise FileNotFoundError(f"s3://{bucket}/{key}: no such object or prefix")
        return count

    def put_file(self, uri: str, path: Path, content_type: str = "application/octet-stream") -> str:
        """Store the file ``path`` as the object ``uri`` (durably); its ETag."""
        bucket, key = split_uri(uri)
        if not key or key.endswith("/"):
            raise ValueError(f"{uri!r} names no object")
        if self.local(uri):
            tmp = self.store.temp_path()
            md5 = hashlib.md5(usedforsecurity=False)
            with path.open("rb") as src, tmp.open("wb") as out:
                while block := src.read(_CHUNK):
                    md5.update(block)
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
            fsync_dir(tmp.parent)
            info = self.store.commit(
                tmp, ObjectInfo(bucket, key, path.stat().st_size, f'"{md5.hexdigest()}"', 0.0, content_type)
            )
            return info.etag
        if self.storage is None:
            raise FileNotFoundError(f"{uri}: the bucket is not servekit's and no external S3 is configured")
        with path.open("rb") as src, self.storage.open(uri, "wb") as out:
            shutil.copyfileobj(src, out, _CHUNK)
        return ""


def _inside(root: Path, rel: str) -> Path:
    """``root/rel``, refusing a relative path that leaves ``root`` (a hostile key)."""
    target = (root / rel).resolve()
    if target != root.resolve() and root.resolve() not in target.parents:
        raise ValueError(f"the key {rel!r} leaves the channel folder")
    return target
