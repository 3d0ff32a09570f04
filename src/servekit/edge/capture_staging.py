"""Data capture into servekit up's own S3 store, done by the platform as SageMaker does it, not by the model's
container: an endpoint instance has no credentials for the plane's S3 (and one of a model with
``EnableNetworkIsolation`` has no network to it), so an instance whose ``DataCaptureConfig.DestinationS3Uri`` names
one of the plane's own buckets writes its capture files into a staging folder under the home instead,
``<staging>/<bucket>/<key prefix>`` (:meth:`CaptureShipper.destination`), and this loop puts each finished file into
the store through its own API (an object with an ETag, indexed) under the same key, then removes the local copy.

The capture writer (``servekit.serving.capture.sink``) publishes a file by renaming it from a hidden name, so every
file here whose name does not start with ``.`` is whole. A file that cannot be put (its bucket deleted meanwhile, a
full disk) stays and is tried again on the next pass, said once in the log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from servekit._utils.background import BackgroundLoop

log = logging.getLogger(__name__)

# (an s3:// URI of an object in the plane's own store, a local file, its Content-Type) -> the object's ETag
PutObject = Callable[[str, Path, str], str]
# A folder left empty is removed once nothing has changed in it for this long: the capture writer only opens
# files in the folder of the current hour, so one untouched for two hours will not be written again (removing a
# folder a writer is about to open a file in would drop that file's records).
EMPTY_FOLDER_KEEP_S = 2 * 3600.0
_CONTENT_TYPES = {".jsonl": "application/jsonlines", ".parquet": "application/vnd.apache.parquet"}


def staged_destination(uri: str, root: Path, own_bucket: Callable[[str], bool]) -> str:
    """Where an instance writes the capture of ``uri``: ``file://<root>/<bucket>/<key prefix>`` for an ``s3://``
    URI of one of the plane's own buckets, else ``uri`` itself (another bucket: the instance publishes there). A
    prefix no folder can stand for (an empty, ``.`` or ``..`` segment) is kept as given, and said."""
    if not uri.startswith("s3://"):
        return uri
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not bucket or not own_bucket(bucket):
        return uri
    segments = prefix.strip("/").split("/") if prefix.strip("/") else []
    if any(s in ("", ".", "..") for s in segments):
        log.warning(
            "capture to %s: no local folder can stand for that key prefix; instances publish it themselves", uri
        )
        return uri
    return f"file://{root.joinpath(bucket, *segments)}"


def object_uri(root: Path, path: Path) -> str | None:
    """The ``s3://`` URI a staged file goes to (its path under ``root`` is ``<bucket>/<key>``); None for what is not
    a finished capture file (a hidden name the writer is still writing, a file with no key under its bucket)."""
    parts = path.relative_to(root).parts
    if len(parts) < 2 or parts[-1].startswith("."):
        return None
    return f"s3://{parts[0]}/{'/'.join(parts[1:])}"


def content_type(path: Path) -> str:
    return _CONTENT_TYPES.get(path.suffix, "application/octet-stream")


class CaptureShipper(BackgroundLoop):
    """The staging folder polled every ``interval_s`` (a background loop of the plane), and once more at close, after
    the instances have stopped (their last files are published as they stop)."""

    def __init__(
        self,
        root: Path,
        own_bucket: Callable[[str], bool],
        put: PutObject,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self._own_bucket = own_bucket
        self._put = put
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()  # a pass in a worker thread, and the final one at close, never overlap
        self._failing: set[Path] = set()  # files whose put failed and was said: said once, retried each pass

    def destination(self, uri: str) -> str:
        """What hosting hands its instances for a DestinationS3Uri (:func:`staged_destination`)."""
        return staged_destination(uri, self.root, self._own_bucket)

    async def run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.ship)
            except Exception:  # one bad pass must not end shipping for good
                log.exception("shipping captured data failed")
            await asyncio.sleep(self._interval_s)

    async def close(self) -> None:
        """Stop polling, then ship what is staged now."""
        await super().close()
        try:
            await asyncio.to_thread(self.ship)
        except Exception:
            log.exception("shipping captured data failed")

    def ship(self) -> int:
        """One pass: every finished file put into the store and removed; how many were shipped."""
        with self._lock:
            shipped = 0
            seen: set[Path] = set()
            for path in sorted(self._finished()):
                uri = object_uri(self.root, path)
                if uri is None:
                    continue
                seen.add(path)
                try:
                    self._put(uri, path, content_type(path))
                    path.unlink(missing_ok=True)
                except Exception as exc:  # kept for the next pass: the records are not lost
                    if path not in self._failing:
                        log.warning("captured data %s could not be put into %s (will retry): %s", path, uri, exc)
                        self._failing.add(path)
                    continue
                self._failing.discard(path)
                shipped += 1
            self._failing &= seen
            self._prune()
            return shipped

    def _finished(self) -> Iterator[Path]:
        if not self.root.is_dir():
            return
        for folder, _dirs, files in os.walk(self.root):
            for name in files:
                if not name.startswith("."):  # a hidden name is a file the writer has not finished
                    yield Path(folder, name)

    def _prune(self) -> None:
        """Remove the staging folders that have been empty and untouched for :data:`EMPTY_FOLDER_KEEP_S`."""
        if not self.root.is_dir():
            return
        now = self._clock()
        for folder, _dirs, _files in os.walk(self.root, topdown=False):
            path = Path(folder)
            if path == self.root:
                continue
            with contextlib.suppress(OSError):  # not empty (rmdir refuses), or gone
                if now - path.stat().st_mtime >= EMPTY_FOLDER_KEEP_S:
                    path.rmdir()
