"""The embedded S3 store: buckets are folders under ``<home>/s3``, objects are files in them, written durably.

An object whose key is a safe relative path (``data/train.csv``) is the file ``<root>/<bucket>/data/train.csv``,
so users and servekit's own components read it straight from disk. A key that is not a safe file name (``..``,
empty segments, NUL, a segment over 200 bytes, a trailing ``/``, a key whose path would cross another object's
file) is stored under ``<root>/<bucket>/.servekit-objects/`` by the SHA-256 of the key: nothing escapes the bucket
folder. Keys, ETags, sizes, content types, user metadata and checksums are indexed in one SQLite file at
``<root>/.index.sqlite3`` (the store's directory, in the store's own folder: the objects are node-local files, so
their index is too, not the plane's state database).

Durability: a PUT or a completed multipart upload is written to a temporary file under ``<root>/.tmp``, fsynced,
renamed over the object's path (readers see the old bytes or the new, never a part) and then indexed
(``synchronous=FULL``). A crash between the rename and the index leaves a whole file the index does not describe;
:meth:`ObjectStore.reconcile` (run at start) re-reads such files and drops rows whose file is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

HASHED_DIR = ".servekit-objects"
_MAX_SEGMENT = 200  # bytes: file systems allow 255; the rest is headroom for temporary suffixes
_READ = 1 << 20

_SCHEMA = """
CREATE TABLE IF NOT EXISTS buckets (name TEXT PRIMARY KEY, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS bucket_settings (
    bucket TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (bucket, name)
);
CREATE TABLE IF NOT EXISTS objects (
    bucket TEXT NOT NULL, key TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL, etag TEXT NOT NULL,
    modified REAL NOT NULL, info TEXT NOT NULL, ino INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    PRIMARY KEY (bucket, key)
);
CREATE TABLE IF NOT EXISTS uploads (
    id TEXT PRIMARY KEY, bucket TEXT NOT NULL, key TEXT NOT NULL, created REAL NOT NULL, info TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS parts (
    upload TEXT NOT NULL, number INTEGER NOT NULL, size INTEGER NOT NULL, etag TEXT NOT NULL, md5 BLOB NOT NULL,
    modified REAL NOT NULL, checksums TEXT NOT NULL, PRIMARY KEY (upload, number)
);
"""


class StoreError(Exception):
    """A request the store refuses; ``code`` is S3's error code."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@dataclass(frozen=True)
class ObjectInfo:
    """What S3 tells about an object besides its bytes."""

    bucket: str
    key: str
    size: int
    etag: str  # quoted, as S3 sends it
    modified: float
    content_type: str = "binary/octet-stream"
    headers: dict[str, str] = field(default_factory=dict)  # Content-Encoding, Cache-Control, … as given
    metadata: dict[str, str] = field(default_factory=dict)  # x-amz-meta-*
    checksums: dict[str, str] = field(default_factory=dict)  # CRC32/CRC32C/CRC64NVME/SHA1/SHA256 -> base64
    parts: int = 0  # multipart uploads: how many parts

    def extra(self) -> str:
        return json.dumps(
            {
                "content_type": self.content_type,
                "headers": self.headers,
                "metadata": self.metadata,
                "checksums": self.checksums,
                "parts": self.parts,
            }
        )


@dataclass(frozen=True)
class Part:
    number: int
    size: int
    etag: str
    md5: bytes
    modified: float
    checksums: dict[str, str]


@dataclass(frozen=True)
class Upload:
    id: str
    bucket: str
    key: str
    created: float
    info: ObjectInfo  # content type, metadata and checksum algorithm given at CreateMultipartUpload


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def natural_path(key: str) -> tuple[str, ...] | None:
    """The key's path segments when it is a safe relative file path, else None."""
    if not key or "\x00" in key or "\\" in key or len(key.encode()) > 1024:
        return None
    segments = tuple(key.split("/"))
    for s in segments:
        if s in ("", ".", "..") or len(s.encode()) > _MAX_SEGMENT:
            return None
    if segments[0].startswith(".servekit"):
        return None
    return segments


def _row_info(bucket: str, key: str, size: int, etag: str, modified: float, extra: str) -> ObjectInfo:
    e = json.loads(extra)
    return ObjectInfo(
        bucket, key, size, etag, modified, e["content_type"], e["headers"], e["metadata"], e["checksums"], e["parts"]
    )


class ObjectStore:
    """Buckets and objects under ``root``; thread-safe (the API runs file I/O in worker threads)."""

    def __init__(self, root: Path, clock: Callable[[], float] = time.time) -> None:
        self.root = root
        self._clock = clock
        root.mkdir(parents=True, exist_ok=True)
        (root / ".tmp").mkdir(exist_ok=True)
        (root / ".multipart").mkdir(exist_ok=True)
        self._db = sqlite3.connect(root / ".index.sqlite3", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # an acknowledged write is on disk
        self._db.executescript(_SCHEMA)
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ---- buckets -------------------------------------------------------------------------------------------------
    def create_bucket(self, name: str) -> bool:
        """True when created, False when it already existed."""
        with self._tx() as db:
            if db.execute("SELECT 1 FROM buckets WHERE name=?", (name,)).fetchone():
                return False
            (self.root / name).mkdir(exist_ok=True)
            fsync_dir(self.root)
            db.execute("INSERT INTO buckets VALUES (?, ?)", (name, self._clock()))
            return True

    def bucket_created(self, name: str) -> float | None:
        with self._lock:
            row = self._db.execute("SELECT created FROM buckets WHERE name=?", (name,)).fetchone()
        return None if row is None else float(row[0])

    def require_bucket(self, name: str) -> None:
        if self.bucket_created(name) is None:
            raise StoreError("NoSuchBucket", "The specified bucket does not exist", 404)

    def buckets(self) -> list[tuple[str, float]]:
        with self._lock:
            return [(n, float(c)) for n, c in self._db.execute("SELECT name, created FROM buckets ORDER BY name")]

    def delete_bucket(self, name: str) -> None:
        with self._tx() as db:
            if not db.execute("SELECT 1 FROM buckets WHERE name=?", (name,)).fetchone():
                raise StoreError("NoSuchBucket", "The specified bucket does not exist", 404)
            if db.execute("SELECT 1 FROM objects WHERE bucket=? LIMIT 1", (name,)).fetchone():
                raise StoreError("BucketNotEmpty", "The bucket you tried to delete is not empty", 409)
            db.execute("DELETE FROM buckets WHERE name=?", (name,))
            db.execute("DELETE FROM bucket_settings WHERE bucket=?", (name,))
            ids = [r[0] for r in db.execute("SELECT id FROM uploads WHERE bucket=?", (name,))]
            for upload in ids:
                self._drop_upload(db, upload)
        shutil.rmtree(self.root / name, ignore_errors=True)

    # ---- objects -------------------------------------------------------------------------------------------------
    def setting(self, bucket: str, name: str) -> str | None:
        """A bucket's setting ``name`` (its default encryption, its policy: JSON text), or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM bucket_settings WHERE bucket=? AND name=?", (bucket, name)
            ).fetchone()
        return None if row is None else str(row[0])

    def set_setting(self, bucket: str, name: str, value: str | None) -> None:
        """Set (or, with None, remove) a bucket's setting ``name``."""
        with self._tx() as db:
            if not db.execute("SELECT 1 FROM buckets WHERE name=?", (bucket,)).fetchone():
                raise StoreError("NoSuchBucket", "The specified bucket does not exist", 404)
            db.execute("DELETE FROM bucket_settings WHERE bucket=? AND name=?", (bucket, name))
            if value is not None:
                db.execute("INSERT INTO bucket_settings VALUES (?, ?, ?)", (bucket, name, value))

    def temp_path(self) -> Path:
        return self.root / ".tmp" / uuid.uuid4().hex

    def get(self, bucket: str, key: str) -> ObjectInfo | None:
        with self._lock:
            row = self._db.execute(
                "SELECT size, etag, modified, info FROM objects WHERE bucket=? AND key=?", (bucket, key)
            ).fetchone()
        return None if row is None else _row_info(bucket, key, row[0], row[1], row[2], row[3])

    def path(self, bucket: str, key: str) -> Path | None:
        """The file holding the object's bytes (what servekit's components read for an ``s3://`` URI)."""
        with self._lock:
            row = self._db.execute("SELECT path FROM objects WHERE bucket=? AND key=?", (bucket, key)).fetchone()
        return None if row is None else self.root / bucket / row[0]

    def _place(self, db: sqlite3.Connection, bucket: str, key: str) -> str:
        """Where a new version of ``key`` goes, relative to the bucket folder."""
        row = db.execute("SELECT path FROM objects WHERE bucket=? AND key=?", (bucket, key)).fetchone()
        if row is not None:
            return str(row[0])
        segments = natural_path(key)
        if segments is not None:
            base = self.root / bucket
            target = base.joinpath(*segments)
            parents_ok = all(not (base.joinpath(*segments[:i])).is_file() for i in range(1, len(segments)))
            if parents_ok and not target.is_dir() and not target.exists():
                return "/".join(segments)
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{HASHED_DIR}/{digest[:2]}/{digest}"

    def commit(self, source: Path, info: ObjectInfo) -> ObjectInfo:
        """Make the fsynced temporary file ``source`` the object ``info`` describes (atomically) and index it."""
        with self._tx() as db:
            if not db.execute("SELECT 1 FROM buckets WHERE name=?", (info.bucket,)).fetchone():
                source.unlink(missing_ok=True)
                raise StoreError("NoSuchBucket", "The specified bucket does not exist", 404)
            rel = self._place(db, info.bucket, info.key)
            target = self.root / info.bucket / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, target)
            fsync_dir(target.parent)
            st = target.stat()
            info = replace(info, modified=self._clock())
            db.execute(
                "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    info.bucket,
                    info.key,
                    rel,
                    info.size,
                    info.etag,
                    info.modified,
                    info.extra(),
                    st.st_ino,
                    st.st_mtime_ns,
                ),
            )
        return info

    def delete(self, bucket: str, key: str) -> None:
        with self._tx() as db:
            row = db.execute("SELECT path FROM objects WHERE bucket=? AND key=?", (bucket, key)).fetchone()
            if row is None:
                return
            db.execute("DELETE FROM objects WHERE bucket=? AND key=?", (bucket, key))
            target = self.root / bucket / row[0]
            target.unlink(missing_ok=True)
            self._prune(target.parent, self.root / bucket)

    def _prune(self, folder: Path, stop: Path) -> None:
        """Remove folders left empty by a delete, up to the bucket folder."""
        while folder != stop and stop in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    def objects(self, bucket: str, prefix: str = "", after: str = "", limit: int = 1000) -> list[ObjectInfo]:
        """Objects with ``prefix``, keys after ``after``, in S3's (UTF-8 binary) order."""
        start = max(prefix, after)
        op = ">" if after and after >= prefix else ">="
        with self._lock:
            rows = self._db.execute(
                f"SELECT key, size, etag, modified, info FROM objects WHERE bucket=? AND key {op} ? "
                "ORDER BY key LIMIT ?",
                (bucket, start, limit),
            ).fetchall()
        out = []
        for key, size, etag, modified, extra in rows:
            if not key.startswith(prefix):
                break
            out.append(_row_info(bucket, key, size, etag, modified, extra))
        return out

    def local_path(self, uri: str) -> Path | None:
        """The file (an object) or folder (a prefix whose keys are plain paths) an ``s3://`` URI of this store names,
        so servekit's own components read it from disk; None when the bucket is not this store's."""
        if not uri.startswith("s3://"):
            return None
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        if self.bucket_created(bucket) is None:
            return None
        if key and not key.endswith("/"):
            found = self.path(bucket, key)
            if found is not None:
                return found
        segments = natural_path(key.rstrip("/")) if key.strip("/") else ()
        if segments is None:
            return None
        folder = (self.root / bucket).joinpath(*segments)
        return folder if folder.is_dir() else None

    # ---- multipart -----------------------------------------------------------------------------------------------
    def create_upload(self, info: ObjectInfo) -> str:
        upload = uuid.uuid4().hex
        with self._tx() as db:
            if not db.execute("SELECT 1 FROM buckets WHERE name=?", (info.bucket,)).fetchone():
                raise StoreError("NoSuchBucket", "The specified bucket does not exist", 404)
            (self.root / ".multipart" / upload).mkdir()
            db.execute(
                "INSERT INTO uploads VALUES (?, ?, ?, ?, ?)",
                (upload, info.bucket, info.key, self._clock(), info.extra()),
            )
        return upload

    def upload(self, bucket: str, key: str, upload: str) -> Upload:
        with self._lock:
            row = self._db.execute(
                "SELECT created, info FROM uploads WHERE id=? AND bucket=? AND key=?", (upload, bucket, key)
            ).fetchone()
        if row is None:
            raise StoreError(
                "NoSuchUpload",
                "The specified upload does not exist. The upload ID may be invalid, or the upload may have been "
                "aborted or completed.",
                404,
            )
        return Upload(upload, bucket, key, float(row[0]), _row_info(bucket, key, 0, "", 0.0, row[1]))

    def uploads(self, bucket: str, prefix: str = "") -> list[Upload]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, key, created, info FROM uploads WHERE bucket=? ORDER BY key, created", (bucket,)
            ).fetchall()
        return [
            Upload(i, bucket, k, float(c), _row_info(bucket, k, 0, "", 0.0, e))
            for i, k, c, e in rows
            if k.startswith(prefix)
        ]

    def put_part(
        self, upload: Upload, number: int, source: Path, md5: bytes, size: int, checksums: dict[str, str]
    ) -> Part:
        part = Part(number, size, f'"{md5.hex()}"', md5, self._clock(), checksums)
        with self._tx() as db:
            if not db.execute("SELECT 1 FROM uploads WHERE id=?", (upload.id,)).fetchone():
                source.unlink(missing_ok=True)
                raise StoreError("NoSuchUpload", "The specified upload does not exist.", 404)
            target = self.root / ".multipart" / upload.id / str(number)
            os.replace(source, target)
            db.execute(
                "INSERT OR REPLACE INTO parts VALUES (?, ?, ?, ?, ?, ?, ?)",
                (upload.id, number, size, part.etag, md5, part.modified, json.dumps(checksums)),
            )
        return part

    def parts(self, upload: str) -> list[Part]:
        with self._lock:
            rows = self._db.execute(
                "SELECT number, size, etag, md5, modified, checksums FROM parts WHERE upload=? ORDER BY number",
                (upload,),
            ).fetchall()
        return [Part(n, s, e, bytes(m), float(t), json.loads(c)) for n, s, e, m, t, c in rows]

    def part_path(self, upload: str, number: int) -> Path:
        return self.root / ".multipart" / upload / str(number)

    def finish_upload(self, upload: Upload, source: Path, info: ObjectInfo) -> ObjectInfo:
        """Commit the assembled object and forget the upload and its parts."""
        info = self.commit(source, info)
        with self._tx() as db:
            self._drop_upload(db, upload.id)
        return info

    def abort_upload(self, upload: Upload) -> None:
        with self._tx() as db:
            self._drop_upload(db, upload.id)

    def _drop_upload(self, db: sqlite3.Connection, upload: str) -> None:
        db.execute("DELETE FROM parts WHERE upload=?", (upload,))
        db.execute("DELETE FROM uploads WHERE id=?", (upload,))
        shutil.rmtree(self.root / ".multipart" / upload, ignore_errors=True)

    # ---- recovery ------------------------------------------------------------------------------------------------
    def reconcile(self) -> dict[str, int]:
        """After a crash: drop rows whose file is gone, re-read files replaced but not indexed, clear temporaries."""
        for leftover in (self.root / ".tmp").iterdir():
            leftover.unlink(missing_ok=True)
        dropped = refreshed = 0
        with self._lock:
            rows = self._db.execute("SELECT bucket, key, path, ino, mtime_ns, info FROM objects").fetchall()
        for bucket, key, rel, ino, mtime_ns, extra in rows:
            target = self.root / bucket / rel
            try:
                st = target.stat()
            except FileNotFoundError:
                with self._tx() as db:
                    db.execute("DELETE FROM objects WHERE bucket=? AND key=?", (bucket, key))
                dropped += 1
                continue
            if (st.st_ino, st.st_mtime_ns) == (ino, mtime_ns):
                continue
            md5 = hashlib.md5(usedforsecurity=False)
            with target.open("rb") as f:
                while chunk := f.read(_READ):
                    md5.update(chunk)
            info: dict[str, Any] = json.loads(extra)
            info["checksums"] = {}  # the unindexed write's checksums were never recorded
            info["parts"] = 0
            with self._tx() as db:
                db.execute(
                    "UPDATE objects SET size=?, etag=?, modified=?, info=?, ino=?, mtime_ns=? WHERE bucket=? AND key=?",
                    (
                        st.st_size,
                        f'"{md5.hexdigest()}"',
                        st.st_mtime,
                        json.dumps(info),
                        st.st_ino,
                        st.st_mtime_ns,
                        bucket,
                        key,
                    ),
                )
            refreshed += 1
        return {"dropped": dropped, "refreshed": refreshed}
